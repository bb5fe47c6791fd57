#ifndef PS_COMMON_NET_SHM_CHANNEL_H_
#define PS_COMMON_NET_SHM_CHANNEL_H_

// The same-host data plane: a worker and a server on one machine exchange
// whole messages (the Cap'n Proto header and its payload frames) through a
// memory region both map, instead of through the kernel's sockets.
//
// The region is a sealed memfd (owner-only, in no filesystem, gone when the
// last end unmaps it, so a dead peer leaves nothing behind) holding two
// rings: requests (worker -> server) and replies (server -> worker). A
// message is one record in a ring, every part 64-byte aligned:
//
//   [size, frames, freed] [frame lengths: u64 x frames] [frame 0: header] [frame 1] ...
//
// The producer copies the frames in (one memcpy each), publishes the record
// by advancing the ring's write position and rings the consumer's doorbell
// (an eventfd it polls beside its sockets). The consumer copies the header
// frame out (it is decoded) and hands the payloads on in place, as
// zmq::message_t whose release marks the record freed; the producer reuses a
// record's bytes once it and all before it are freed, and is woken for that
// when it has messages waiting for room.
//
// Nothing read from the region is trusted. The consumer checks each record's
// size, frame count and lengths against the ring and the published position
// before use; the producer keeps the positions it wrote to itself and reads
// back only the freed flags. A corrupt record is kDataLoss and the owner
// closes the channel; nothing is read or written out of bounds. The region's
// size is sealed, so a peer cannot shrink it under the other's mapping.
//
// Thread-safety: the thread that polls a channel owns it; payloads it handed
// out may be released on any thread, also after the channel is closed.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "capnp/common.h"
#include "common/net/transport.h"
#include "common/wire/messages.h"
#include "kj/array.h"
#include "zmq.hpp"

namespace ps {

inline constexpr size_t kShmTokenBytes = 16;
inline constexpr uint64_t kShmDefaultRingBytes = uint64_t{32} << 20;
inline constexpr uint64_t kShmMinRingBytes = uint64_t{64} << 10;
inline constexpr uint64_t kShmMaxRingBytes = uint64_t{1} << 30;

// The descriptors one end hands the other: the region and the two doorbells.
struct ShmFds {
  int memfd = -1;
  int to_server = -1;  // the server polls it: requests written, reply room freed
  int to_client = -1;  // the client polls it: replies written, request room freed
};

class ShmRegion;

class ShmChannel {
 public:
  // A message too large for a ring goes this way instead (the socket), once
  // everything before it was consumed; so does every message after it, so
  // that order is kept (the peer reads the socket and the ring apart).
  using OversizeSender = std::function<absl::Status(const Envelope&, std::vector<zmq::message_t>)>;

  // The server's end: a new region with two rings of `ring_bytes` each
  // (kShmMinRingBytes..kShmMaxRingBytes, rounded up to pages) and both doorbells.
  static absl::StatusOr<std::unique_ptr<ShmChannel>> Create(uint64_t ring_bytes);
  // The ring size Create makes of `ring_bytes` (rounded up to pages).
  static uint64_t RingBytes(uint64_t ring_bytes);
  // The client's end from the descriptors the server handed over, which it
  // takes (closed on failure too). kDataLoss when the region is not what
  // `ring_bytes` says (its size) or is not sealed.
  static absl::StatusOr<std::unique_ptr<ShmChannel>> Adopt(const ShmFds& fds, uint64_t ring_bytes);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // The server's descriptors to hand over (owned by the channel).
  ShmFds fds() const;
  uint64_t ring_bytes() const;
  // Readable when the peer wrote a message or freed room.
  int wake_fd() const;
  // The connection the channel was handed over on (owned and closed with
  // the channel): readable when the peer is gone. -1 until set.
  void set_peer_socket(int fd);
  int peer_socket() const { return peer_socket_; }
  void set_oversize_sender(OversizeSender send) { oversize_ = std::move(send); }

  // Sends one message, in order behind any still waiting for room; the
  // payloads are copied into the ring (released now) or, while waiting,
  // held. `views`: the payloads point into memory the caller goes on
  // changing (a server's live parameters), so a message that must wait gets
  // copies of them. kResourceExhausted when more than `max_backlog_bytes`
  // would wait (a peer that stopped reading); the owner closes the channel.
  absl::Status Send(const Envelope& envelope, std::vector<zmq::message_t> payloads,
                    uint64_t max_backlog_bytes = UINT64_MAX, bool views = false);
  // What a wake-up calls for: writes what waited for room, then hands up to
  // `max` received messages to `handle` (payloads in place). kUnavailable
  // when the peer hung up, kDataLoss for a corrupt record or stray bytes on
  // the peer socket: the owner closes the channel.
  absl::Status Poll(int max, absl::FunctionRef<void(RawMessage)> handle);

  // A message is published and not yet received (a cheap look, no syscall:
  // for spinning before a poll).
  bool HasIncoming() const;

  // The incoming ring's bytes in this end's mapping (for checks: every
  // payload handed out lies inside it).
  absl::Span<const uint8_t> incoming_ring() const;

  uint64_t backlog_bytes() const { return backlog_bytes_; }
  uint64_t messages_sent() const { return sent_; }
  uint64_t messages_received() const { return received_; }

 private:
  struct Waiting {
    kj::Array<capnp::word> header;
    std::optional<Envelope> envelope;  // for the socket, should it go there
    std::vector<zmq::message_t> payloads;
    uint64_t bytes = 0;
  };
  ShmChannel(std::shared_ptr<ShmRegion> region, bool server);
  // Room for a record of `bytes` now (reclaiming freed records first)?
  bool TryWrite(const kj::Array<capnp::word>& header, const std::vector<zmq::message_t>& payloads, uint64_t bytes);
  void Reclaim();
  absl::Status Flush();
  absl::StatusOr<std::optional<RawMessage>> Next();
  void Ring(int fd) const;
  absl::Status BySocket(const Envelope& envelope, std::vector<zmq::message_t> payloads);
  // kUnavailable when the peer closed its end of the handshake socket.
  absl::Status PeerGone() const;

  std::shared_ptr<ShmRegion> region_;
  const bool server_;
  int peer_socket_ = -1;
  OversizeSender oversize_;
  // A message too large for the ring went by the socket: so does every
  // later one, to keep their order.
  bool socket_only_ = false;
  // Producer side of the outgoing ring: positions kept here, never read back.
  uint64_t write_pos_ = 0;
  std::deque<std::pair<uint64_t, uint64_t>> outstanding_;  // (position, bytes)
  std::deque<Waiting> waiting_;
  uint64_t backlog_bytes_ = 0;
  // Consumer side of the incoming ring.
  uint64_t read_pos_ = 0;
  uint64_t sent_ = 0, received_ = 0;
};

// Spins (pausing the core between looks) until `ready()` or `spin` passed;
// what `ready()` last said. For the loops that poll channels: a message
// that comes within the spin costs no sleep and no wake-up.
bool SpinUntil(absl::Duration spin, absl::FunctionRef<bool()> ready);

// The region's layout, for what writes a ring as a peer would (tests, the
// fuzzer): a control page (the request ring's write position at byte 0, the
// reply ring's at byte 64), then the request ring, then the reply ring.
inline constexpr uint64_t kShmControlBytes = 4096;
inline uint64_t ShmRegionBytes(uint64_t ring_bytes) { return kShmControlBytes + 2 * ring_bytes; }

// Replaces each payload with a copy of its bytes: for payloads that view
// memory the caller goes on changing, before they wait or go to ZeroMQ.
void OwnPayloads(std::vector<zmq::message_t>& payloads);

// Bytes of the record holding a header of `header_bytes` and these payloads.
uint64_t ShmRecordBytes(uint64_t header_bytes, absl::Span<const uint64_t> payload_bytes);

}  // namespace ps

#endif  // PS_COMMON_NET_SHM_CHANNEL_H_
