#ifndef PS_COMMON_WIRE_CODEC_H_
#define PS_COMMON_WIRE_CODEC_H_

// The one place that turns message structs into Cap'n Proto header frames and
// back. Thread-safe (no state).

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "capnp/common.h"
#include "common/wire/messages.h"
#include "kj/array.h"

namespace ps {

// Limits applied to every header we decode: a peer cannot make us walk or
// allocate more than this, whatever it sends.
//
// kMaxHeaderBytes: a longer header frame is refused before it is copied (the
// copy that aligns it for Cap'n Proto is the one allocation decoding makes
// in proportion to the frame). It is also the ZMQ_MAXMSGSIZE of the sockets
// to and from the scheduler, which carry headers only (common/net/transport.h).
inline constexpr uint64_t kMaxHeaderWords = 1u << 20;  // 8 MiB of header
inline constexpr size_t kMaxHeaderBytes = kMaxHeaderWords * 8;
// Cap'n Proto's traversal limit is kTraversalPerFrameWord words per word of
// the frame plus kTraversalSlackWords, at most kMaxHeaderWords. Every word read
// counts, and each element of a list of empty structs counts as a word: a
// list can claim 100,000 such elements in a few bytes, and pointers can aim
// at the same data many times, but the walk, the values decoded and their
// size (about 5 words per counted word at most, so 20 x the frame plus
// 40 KiB) stay in proportion to the bytes received. A legitimate header,
// which decoding reads about once, always fits. The nesting limit bounds the
// depth of pointers followed; the deepest legitimate path
// (Header > createSlicesRequest > model > tensors > shape) is 5.
inline constexpr uint64_t kTraversalPerFrameWord = 4;
inline constexpr uint64_t kTraversalSlackWords = 1024;
inline constexpr int kMaxHeaderNesting = 16;
// The longest list a header may hold, checked before anything is copied out
// of it: slices of a push, pull reply or partition map, keys of a pull, and
// every other list of numbers. Equal to the partition map's slice limit
// (common/placement/partition_map.cc), so only a broken or hostile peer sends more.
inline constexpr size_t kMaxSlicesPerMessage = size_t{1} << 17;
// Table row ids a pull request carries delta coded (common/wire/id_coding.h;
// a byte or more each): at most kMaxSlicesPerMessage per table shard, and
// this many in all, what plain lists in the largest header could hold.
inline constexpr uint64_t kMaxCodedIdsPerMessage = kMaxHeaderWords;
// Tensors in a model (each has at least one slice), and dimensions of one.
inline constexpr size_t kMaxTensorsPerModel = kMaxSlicesPerMessage;
inline constexpr size_t kMaxShapeRank = 32;
// Nodes in a cluster view: the scheduler's largest job (4096 servers, 65536
// workers).
inline constexpr size_t kMaxNodesPerView = 4096 + 65536;
// Copies of one slice (--replicas): at most one per server.
inline constexpr size_t kMaxServersPerSlice = 4096;

// Serialises `envelope` to the bytes of a header frame.
kj::Array<capnp::word> EncodeEnvelope(const Envelope& envelope);

// Parses a header frame. Never throws and never CHECK-fails on bad bytes:
// kDataLoss for bytes that are not a well-formed header (wrong length, a
// truncated or malformed message, a traversal limit hit, no body), kInvalidArgument
// for a well-formed header with values out of range (an unknown enum value)
// and for a header over a limit above (a frame over kMaxHeaderBytes, a list
// over its cap), refused before it is copied.
// The protocol version is returned as received; callers compare it.
absl::StatusOr<Envelope> DecodeEnvelope(absl::Span<const uint8_t> bytes);

// A server's refusal of a request routed by an older cluster view than its
// own (epoch `view_epoch`): a slice it names moved to another server. The
// reply carries the epoch (ErrorMsg::view_epoch), and the client routes the
// request again once it holds that view (kFailedPrecondition otherwise).
// `push_applied`: the refused request was a push with a pull (then_pull)
// whose push was applied; only its pull goes again.
absl::Status MovedError(absl::string_view message, uint64_t view_epoch, bool push_applied = false);
// A MovedError for a push held in the refusing server's sync step in
// progress of a slice that moved on (ErrorMsg::push_held): the client sends
// it again numbered as it was.
absl::Status MovedHeldError(absl::string_view message, uint64_t view_epoch);
// The epoch a MovedError carries; 0 for any other status.
uint64_t MovedEpoch(const absl::Status& status);
// The reply that says `status` (a MovedError with its epoch).
ErrorMsg ErrorOf(const absl::Status& status);

// The scheduler's state (scheduler/job_state.h frames it in a file), both
// ways, with the same limits and error codes as headers.
kj::Array<capnp::word> EncodeJobState(const JobState& state);
absl::StatusOr<JobState> DecodeJobState(absl::Span<const uint8_t> bytes);

}  // namespace ps

#endif  // PS_COMMON_WIRE_CODEC_H_
