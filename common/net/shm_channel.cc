#include "common/net/shm_channel.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "capnp/serialize.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr uint64_t kAlign = 64;
constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// A ring's shared state, on a cache line of its own.
struct alignas(kAlign) RingControl {
  uint64_t write_pos;         // bytes the producer has published (atomic)
  uint32_t producer_waiting;  // the producer holds messages until room frees (atomic)
};

struct RecordHeader {
  uint64_t size;    // the whole record, a multiple of kAlign
  uint32_t frames;  // 0: padding to the ring's end
  uint32_t freed;   // set by the consumer once nothing of the record is used (atomic)
};
constexpr uint64_t kRecordHeaderBytes = sizeof(RecordHeader);
static_assert(kRecordHeaderBytes == 16);

template <typename T>
std::atomic_ref<T> Atomic(T& v) {
  return std::atomic_ref<T>(v);
}

uint64_t TableBytes(uint64_t frames) { return AlignUp(kRecordHeaderBytes + 8 * frames, kAlign); }

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void CloseAll(ShmFds& fds) {
  CloseFd(fds.memfd);
  CloseFd(fds.to_server);
  CloseFd(fds.to_client);
}

}  // namespace

// The mapping and the descriptors, shared by the channel and every payload
// it handed out: unmapped and closed when the last of them is gone.
class ShmRegion {
 public:
  ShmRegion(ShmFds fds, uint8_t* base, uint64_t ring_bytes) : fds_(fds), base_(base), ring_bytes_(ring_bytes) {}
  ~ShmRegion() {
    munmap(base_, ShmRegionBytes(ring_bytes_));
    CloseAll(fds_);
  }

  const ShmFds& fds() const { return fds_; }
  uint64_t ring_bytes() const { return ring_bytes_; }
  // Ring 0 carries requests, ring 1 replies.
  RingControl* control(int ring) { return reinterpret_cast<RingControl*>(base_ + ring * kAlign); }
  uint8_t* data(int ring) { return base_ + kShmControlBytes + ring * ring_bytes_; }

 private:
  ShmFds fds_;
  uint8_t* const base_;
  const uint64_t ring_bytes_;
};

namespace {

// Marks `record` freed and wakes its producer if it announced that it waits
// for room. The fence pairs with the one in ShmChannel::Flush (store the
// flag, fence, look at the freed flags): one of the two sides sees the other.
void FreeRecord(RecordHeader* record, RingControl* control, int producer_fd) {
  Atomic(record->freed).store(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Atomic(control->producer_waiting).load(std::memory_order_relaxed) != 0) {
    const uint64_t one = 1;
    (void)!write(producer_fd, &one, sizeof(one));
  }
}

// What one received record's payloads share: the last one released frees it.
struct Lease {
  std::shared_ptr<ShmRegion> region;
  RecordHeader* record;
  RingControl* control;
  int producer_fd;
  std::atomic<int> refs;

  void Release() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    FreeRecord(record, control, producer_fd);
    delete this;
  }
};

void ReleasePayload(void* /*data*/, void* hint) { static_cast<Lease*>(hint)->Release(); }

struct Frame {
  uint64_t offset, bytes;
};

// Where each of a record's `frames` frames lies, read once from the frame
// table (the producer may change it meanwhile) and checked against the
// record's `size`, itself checked against the ring.
absl::StatusOr<std::vector<Frame>> FrameLayout(const uint8_t* record, uint64_t size, uint32_t frames) {
  if (frames > kMaxFramesPerMessage - 1 || TableBytes(frames) > size) {
    return absl::DataLossError(absl::StrCat("record of ", size, " bytes claims ", frames, " frames"));
  }
  std::vector<Frame> layout(frames);
  uint64_t cursor = TableBytes(frames);
  for (uint32_t i = 0; i < frames; ++i) {
    uint64_t bytes;
    std::memcpy(&bytes, record + kRecordHeaderBytes + 8 * i, sizeof(bytes));
    if (bytes > size - cursor) {
      return absl::DataLossError(
          absl::StrCat("frame ", i, " of ", bytes, " bytes overruns its record of ", size, " bytes"));
    }
    layout[i] = Frame{cursor, bytes};
    cursor += AlignUp(bytes, kAlign);
  }
  if (layout[0].bytes > kMaxHeaderBytes) {
    return absl::DataLossError(absl::StrCat("header frame of ", layout[0].bytes, " bytes; at most ", kMaxHeaderBytes));
  }
  return layout;
}

absl::StatusOr<uint8_t*> MapRegion(int memfd, uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
  if (p == MAP_FAILED)
    return absl::ResourceExhaustedError(absl::StrCat("mmap of ", bytes, " bytes: ", strerror(errno)));
  return static_cast<uint8_t*>(p);
}

// The region mapped, once `checked` is OK; on any failure every descriptor
// is closed (the caller owns them).
absl::StatusOr<uint8_t*> MapOrClose(ShmFds& fds, uint64_t bytes, const absl::Status& checked) {
  absl::StatusOr<uint8_t*> base = checked.ok() ? MapRegion(fds.memfd, bytes) : checked;
  if (!base.ok()) CloseAll(fds);
  return base;
}

}  // namespace

void OwnPayloads(std::vector<zmq::message_t>& payloads) {
  for (zmq::message_t& p : payloads) p = zmq::message_t(p.data(), p.size());
}

uint64_t ShmRecordBytes(uint64_t header_bytes, absl::Span<const uint64_t> payload_bytes) {
  uint64_t bytes = TableBytes(1 + payload_bytes.size()) + AlignUp(header_bytes, kAlign);
  for (uint64_t p : payload_bytes) bytes += AlignUp(p, kAlign);
  return bytes;
}

absl::StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Create(uint64_t ring_bytes) {
  if (ring_bytes < kShmMinRingBytes || ring_bytes > kShmMaxRingBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory ring of ", ring_bytes, " bytes; allowed ",
                                                   kShmMinRingBytes, " to ", kShmMaxRingBytes));
  }
  ring_bytes = RingBytes(ring_bytes);
  ShmFds fds;
  fds.memfd = memfd_create("ps-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  fds.to_server = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  fds.to_client = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const uint64_t bytes = ShmRegionBytes(ring_bytes);
  absl::Status failed;
  if (fds.memfd < 0 || fds.to_server < 0 || fds.to_client < 0) {
    failed = absl::ResourceExhaustedError(absl::StrCat("memfd_create/eventfd: ", strerror(errno)));
  } else if (ftruncate(fds.memfd, static_cast<off_t>(bytes)) != 0 || fcntl(fds.memfd, F_ADD_SEALS, kSeals) != 0) {
    failed = absl::ResourceExhaustedError(absl::StrCat("sizing and sealing the region: ", strerror(errno)));
  }
  PS_ASSIGN_OR_RETURN(uint8_t * base, MapOrClose(fds, bytes, failed));
  auto region = std::make_shared<ShmRegion>(fds, base, ring_bytes);
  return std::unique_ptr<ShmChannel>(new ShmChannel(std::move(region), /*server=*/true));
}

uint64_t ShmChannel::RingBytes(uint64_t ring_bytes) { return AlignUp(ring_bytes, 4096); }

absl::StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Adopt(const ShmFds& given, uint64_t ring_bytes) {
  ShmFds fds = given;
  absl::Status bad;
  struct stat st {};
  const uint64_t bytes = ShmRegionBytes(ring_bytes);
  if (ring_bytes < kShmMinRingBytes || ring_bytes > kShmMaxRingBytes || ring_bytes % 4096 != 0) {
    bad = absl::DataLossError(absl::StrCat("the server granted rings of ", ring_bytes, " bytes"));
  } else if (fds.memfd < 0 || fds.to_server < 0 || fds.to_client < 0) {
    bad = absl::DataLossError("the server handed over fewer than 3 descriptors");
  } else if (fstat(fds.memfd, &st) != 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    bad = absl::DataLossError(absl::StrCat("the region has ", st.st_size, " bytes; its rings need ", bytes));
  } else if ((fcntl(fds.memfd, F_GET_SEALS) & kSeals) != kSeals) {
    bad = absl::DataLossError("the region is not sealed against resizing");
  }
  PS_ASSIGN_OR_RETURN(uint8_t * base, MapOrClose(fds, bytes, bad));
  // The doorbells are non-blocking whatever the sender made them.
  for (int fd : {fds.to_server, fds.to_client}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  auto region = std::make_shared<ShmRegion>(fds, base, ring_bytes);
  return std::unique_ptr<ShmChannel>(new ShmChannel(std::move(region), /*server=*/false));
}

ShmChannel::ShmChannel(std::shared_ptr<ShmRegion> region, bool server) : region_(std::move(region)), server_(server) {}

ShmChannel::~ShmChannel() { CloseFd(peer_socket_); }

ShmFds ShmChannel::fds() const { return region_->fds(); }
uint64_t ShmChannel::ring_bytes() const { return region_->ring_bytes(); }
int ShmChannel::wake_fd() const { return server_ ? region_->fds().to_server : region_->fds().to_client; }

void ShmChannel::set_peer_socket(int fd) {
  CloseFd(peer_socket_);
  peer_socket_ = fd;
}

void ShmChannel::Ring(int fd) const {
  const uint64_t one = 1;
  (void)!write(fd, &one, sizeof(one));
}

void ShmChannel::Reclaim() {
  uint8_t* data = region_->data(server_ ? 1 : 0);
  const uint64_t cap = region_->ring_bytes();
  while (!outstanding_.empty()) {
    auto* record = reinterpret_cast<RecordHeader*>(data + outstanding_.front().first % cap);
    if (Atomic(record->freed).load(std::memory_order_acquire) == 0) break;
    outstanding_.pop_front();
  }
}

bool ShmChannel::TryWrite(const kj::Array<capnp::word>& header, const std::vector<zmq::message_t>& payloads,
                          uint64_t bytes) {
  const int ring = server_ ? 1 : 0;
  uint8_t* data = region_->data(ring);
  const uint64_t cap = region_->ring_bytes();
  Reclaim();
  auto room = [&] { return cap - (write_pos_ - (outstanding_.empty() ? write_pos_ : outstanding_.front().first)); };
  if (write_pos_ % cap + bytes > cap) {
    // The record does not fit before the ring's end: pad to the end as soon
    // as that much is free, and publish the padding on its own, so that a
    // record larger than either side of the current offset waits only for
    // room at the start (never for room it can never get).
    const uint64_t pad = cap - write_pos_ % cap;
    if (room() < pad) return false;
    auto* filler = reinterpret_cast<RecordHeader*>(data + write_pos_ % cap);
    filler->size = pad;
    filler->frames = 0;
    Atomic(filler->freed).store(0, std::memory_order_relaxed);
    outstanding_.emplace_back(write_pos_, pad);
    write_pos_ += pad;
    Atomic(region_->control(ring)->write_pos).store(write_pos_, std::memory_order_release);
    Ring(server_ ? region_->fds().to_client : region_->fds().to_server);  // the reader frees it
  }
  if (room() < bytes) return false;
  uint8_t* record = data + write_pos_ % cap;
  auto* lengths = reinterpret_cast<uint64_t*>(record + kRecordHeaderBytes);
  uint64_t cursor = TableBytes(1 + payloads.size());
  const uint64_t header_bytes = header.size() * sizeof(capnp::word);
  lengths[0] = header_bytes;
  std::memcpy(record + cursor, header.begin(), header_bytes);
  cursor += AlignUp(header_bytes, kAlign);
  for (size_t i = 0; i < payloads.size(); ++i) {
    lengths[1 + i] = payloads[i].size();
    std::memcpy(record + cursor, payloads[i].data(), payloads[i].size());
    cursor += AlignUp(payloads[i].size(), kAlign);
  }
  auto* head = reinterpret_cast<RecordHeader*>(record);
  head->size = bytes;
  head->frames = static_cast<uint32_t>(1 + payloads.size());
  Atomic(head->freed).store(0, std::memory_order_relaxed);
  outstanding_.emplace_back(write_pos_, bytes);
  write_pos_ += bytes;
  Atomic(region_->control(ring)->write_pos).store(write_pos_, std::memory_order_release);
  ++sent_;
  return true;
}

absl::Status ShmChannel::Send(const Envelope& envelope, std::vector<zmq::message_t> payloads,
                              uint64_t max_backlog_bytes, bool views) {
  if (views && socket_only_) {
    OwnPayloads(payloads);  // ZeroMQ sends later
  }
  if (socket_only_ && waiting_.empty()) return BySocket(envelope, std::move(payloads));
  Waiting w{EncodeEnvelope(envelope), std::nullopt, std::move(payloads), 0};
  std::vector<uint64_t> sizes;
  sizes.reserve(w.payloads.size());
  for (const auto& p : w.payloads) sizes.push_back(p.size());
  w.bytes = ShmRecordBytes(w.header.size() * sizeof(capnp::word), sizes);
  const bool by_socket = socket_only_ || w.bytes > region_->ring_bytes();
  if (waiting_.empty() && !by_socket && TryWrite(w.header, w.payloads, w.bytes)) {
    Ring(server_ ? region_->fds().to_client : region_->fds().to_server);
    return absl::OkStatus();
  }
  // Only what waits for room counts: a message for the socket waits for
  // order, not for the peer to read.
  if (!by_socket && backlog_bytes_ + w.bytes > max_backlog_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the peer leaves ", backlog_bytes_, " bytes waiting for room in its shared-memory ring"));
  }
  if (views) {
    OwnPayloads(w.payloads);  // it waits
  }
  w.envelope = envelope;
  if (!by_socket) backlog_bytes_ += w.bytes;
  waiting_.push_back(std::move(w));
  return Flush();
}

absl::Status ShmChannel::BySocket(const Envelope& envelope, std::vector<zmq::message_t> payloads) {
  if (!oversize_) return absl::ResourceExhaustedError("a message does not fit the shared-memory ring");
  return oversize_(envelope, std::move(payloads));
}

absl::Status ShmChannel::Flush() {
  RingControl* control = region_->control(server_ ? 1 : 0);
  bool wrote = false;
  absl::Status status;
  for (int attempt = 0; attempt < 2 && !waiting_.empty(); ++attempt) {
    while (!waiting_.empty()) {
      Waiting& w = waiting_.front();
      const bool ring_bound = !socket_only_ && w.bytes <= region_->ring_bytes();
      if (ring_bound) {
        if (!TryWrite(w.header, w.payloads, w.bytes)) break;
        wrote = true;
        backlog_bytes_ -= w.bytes;
      } else {
        // Too large for the ring: it goes by the socket once everything
        // before it was consumed, and so does everything after it (the
        // socket and the ring are read independently: one channel, one
        // order). The channel carries nothing more.
        Reclaim();
        if (!outstanding_.empty()) break;
        if (!socket_only_) {
          LOG(WARNING) << "shm: a message of " << w.bytes << " bytes is larger than the shared-memory ring ("
                       << region_->ring_bytes() << " bytes); this channel's messages go by the socket from now on "
                       << "(a larger ps_server --shm_ring_mb keeps them in shared memory)";
          socket_only_ = true;
        }
        status.Update(BySocket(*w.envelope, std::move(w.payloads)));
      }
      waiting_.pop_front();
    }
    // Announce the wait, then look again: a release between our last look
    // and the announcement would not have rung (it read the flag as 0).
    Atomic(control->producer_waiting).store(waiting_.empty() ? 0 : 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  if (wrote) Ring(server_ ? region_->fds().to_client : region_->fds().to_server);
  return status;
}

absl::StatusOr<std::optional<RawMessage>> ShmChannel::Next() {
  const int ring = server_ ? 0 : 1;
  uint8_t* data = region_->data(ring);
  const uint64_t cap = region_->ring_bytes();
  RingControl* control = region_->control(ring);
  while (true) {
    const uint64_t published = Atomic(control->write_pos).load(std::memory_order_acquire);
    if (published == read_pos_) return std::nullopt;
    if (published < read_pos_ || published - read_pos_ > cap) {
      return absl::DataLossError(absl::StrCat("ring write position ", published, " against read position ", read_pos_,
                                              " in a ring of ", cap, " bytes"));
    }
    const uint64_t offset = read_pos_ % cap;  // a multiple of kAlign: the header fits
    auto* record = reinterpret_cast<RecordHeader*>(data + offset);
    const uint64_t size = Atomic(record->size).load(std::memory_order_relaxed);
    const uint32_t frames = Atomic(record->frames).load(std::memory_order_relaxed);
    if (size < kAlign || size % kAlign != 0 || size > cap - offset || size > published - read_pos_) {
      return absl::DataLossError(absl::StrCat("record at ", read_pos_, " claims ", size, " bytes; ",
                                              published - read_pos_, " published, ", cap - offset,
                                              " to the ring's end"));
    }
    read_pos_ += size;
    const int producer_fd = server_ ? region_->fds().to_client : region_->fds().to_server;
    if (frames == 0) {  // padding
      FreeRecord(record, control, producer_fd);
      continue;
    }
    PS_ASSIGN_OR_RETURN(std::vector<Frame> layout, FrameLayout(reinterpret_cast<uint8_t*>(record), size, frames));
    auto* base = reinterpret_cast<uint8_t*>(record);
    RawMessage msg;
    msg.header = zmq::message_t(base + layout[0].offset, layout[0].bytes);  // a private copy: it is decoded
    ++received_;
    if (frames == 1) {
      FreeRecord(record, control, producer_fd);
      return msg;
    }
    auto* lease = new Lease{region_, record, control, producer_fd, static_cast<int>(frames - 1)};
    msg.payloads.reserve(frames - 1);
    for (uint32_t i = 1; i < frames; ++i) {
      msg.payloads.emplace_back(base + layout[i].offset, layout[i].bytes, &ReleasePayload, lease);
    }
    return msg;
  }
}

absl::Span<const uint8_t> ShmChannel::incoming_ring() const {
  return {region_->data(server_ ? 0 : 1), region_->ring_bytes()};
}

bool ShmChannel::HasIncoming() const {
  RingControl* control = region_->control(server_ ? 0 : 1);
  return Atomic(control->write_pos).load(std::memory_order_acquire) != read_pos_;
}

bool SpinUntil(absl::Duration spin, absl::FunctionRef<bool()> ready) {
  if (spin <= absl::ZeroDuration()) return ready();
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(spin);
  while (true) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    sched_yield();  // a runnable thread of this machine goes first
  }
}

absl::Status ShmChannel::Poll(int max, absl::FunctionRef<void(RawMessage)> handle) {
  uint64_t count;
  (void)!read(wake_fd(), &count, sizeof(count));
  PS_RETURN_IF_ERROR(Flush());
  // What the peer published before it went is still delivered (the mapping
  // outlives it); only then does its hang-up count.
  for (int i = 0; i < max; ++i) {
    PS_ASSIGN_OR_RETURN(std::optional<RawMessage> msg, Next());
    if (!msg.has_value()) return PeerGone();
    handle(*std::move(msg));
  }
  Ring(wake_fd());  // more may wait: come back after the owner's other work
  return absl::OkStatus();
}

absl::Status ShmChannel::PeerGone() const {
  if (peer_socket_ < 0) return absl::OkStatus();
  char byte;
  const ssize_t n = recv(peer_socket_, &byte, 1, MSG_DONTWAIT);
  if (n == 0) return absl::UnavailableError("the peer closed its end of the shared-memory channel");
  if (n > 0) return absl::DataLossError("the peer wrote to the channel's socket, which carries nothing");
  if (errno != EAGAIN && errno != EWOULDBLOCK) {
    return absl::UnavailableError(absl::StrCat("the channel's socket: ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ps
