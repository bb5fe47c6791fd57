// libFuzzer target for the header decoder (common/wire/codec.h). Every frame of
// every message in the input (tests/fuzz/fuzz_frames.h) is offered to
// DecodeEnvelope, as a server or worker would offer a received header frame.
// Beyond not crashing, leaking, reading out of bounds or allocating without
// bound (the sanitizers and libFuzzer's limits check those), the decoder must
// keep its contract:
//   - a refusal is kDataLoss or kInvalidArgument with a message;
//   - what it accepts survives a round trip: encoding the decoded envelope and
//     decoding that again gives an envelope that encodes to the same bytes;
//   - decoding does not amplify: what a frame decodes to encodes again in at
//     most kMaxAmplification times the frame's bytes plus kAmplificationSlack.
//     Cap'n Proto lets a list of empty structs claim many elements in no
//     bytes (bounded only by the traversal limit), and each element becomes a
//     C++ value: without this bound a few hundred bytes can cost the server's
//     one request thread tens of milliseconds and megabytes to decode.
// A broken contract aborts with a line saying which, so libFuzzer keeps the
// input as a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "tests/fuzz/fuzz_frames.h"

namespace ps::fuzz {
namespace {

// A legitimate header re-encodes to about its own size; the slack admits the
// small lists of empty structs Cap'n Proto allows in a short frame. The
// decoder's traversal limit (common/wire/codec.h) lets each frame word, and
// kTraversalSlackWords more, stand for one empty list element, which
// re-encodes to at most the largest list element: a table-stats entry, 14
// words since the disk tier's counters (9 before). So the bound is 4 x 14
// words per frame word (within kMaxAmplification) plus 1024 x 112 bytes: a
// 64 KiB slack was below that
// once statsReply carried 9-word table entries (the fuzzer found a 200-byte
// frame decoding to 78,552 bytes: corpus_regressions/
// codec-amplification-stats-reply-tables).
constexpr size_t kMaxAmplification = 64;
constexpr size_t kLargestListElementBytes = 14 * sizeof(capnp::word);
constexpr size_t kAmplificationSlack = kTraversalSlackWords * kLargestListElementBytes + (8 << 10);

[[noreturn]] void Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "codec_fuzzer: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::abort();
}

absl::Span<const uint8_t> Bytes(const kj::Array<capnp::word>& words) {
  return {reinterpret_cast<const uint8_t*>(words.begin()), words.size() * sizeof(capnp::word)};
}

void CheckFrame(const Frame& frame) {
  absl::StatusOr<Envelope> env = DecodeEnvelope(absl::MakeConstSpan(frame));
  if (!env.ok()) {
    const absl::StatusCode code = env.status().code();
    if (code != absl::StatusCode::kDataLoss && code != absl::StatusCode::kInvalidArgument) {
      Fail("refusal with an undocumented code", env.status());
    }
    if (env.status().message().empty()) Fail("refusal without a message", env.status());
    return;
  }
  if (BodyName(env->body) == nullptr) Fail("body without a name", absl::OkStatus());
  const kj::Array<capnp::word> once = EncodeEnvelope(*env);
  const size_t decoded_bytes = once.size() * sizeof(capnp::word);
  if (decoded_bytes > kMaxAmplification * frame.size() + kAmplificationSlack) {
    Fail(absl::StrCat("a frame of ", frame.size(), " bytes decodes to a ", BodyName(env->body), " of ", decoded_bytes,
                      " bytes"),
         absl::ResourceExhaustedError("decoding amplifies"));
  }
  absl::StatusOr<Envelope> again = DecodeEnvelope(Bytes(once));
  if (!again.ok()) Fail("a decoded envelope, encoded again, does not decode", again.status());
  const kj::Array<capnp::word> twice = EncodeEnvelope(*again);
  // Bytes, not Envelope::operator==: a NaN float field is never equal to itself.
  if (once.size() != twice.size() || std::memcmp(once.begin(), twice.begin(), once.size() * sizeof(capnp::word)) != 0) {
    Fail("the round trip changed the envelope", absl::OkStatus());
  }
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const ps::fuzz::Message& message : ps::fuzz::SplitMessages(data, size)) {
    for (const ps::fuzz::Frame& frame : message) ps::fuzz::CheckFrame(frame);
  }
  return 0;
}
