// libFuzzer target for the shared-memory ring's reader (common/net/shm_channel.h):
// the bytes a hostile or broken peer could leave in the ring a server reads.
// Input: 8 bytes little-endian, the ring's published write position (taken
// modulo twice the ring, so that it lands near the data and past it), then
// the ring's bytes from its start (the rest stays zero). The server's end of
// a fresh channel then polls until the ring is drained or refused.
// Beyond not crashing or reading out of bounds (the sanitizers), the reader
// must keep its contract:
//   - it ends OK or with kDataLoss naming the problem, never anything else;
//   - every payload it hands out lies wholly inside the ring;
//   - every header frame is at most kMaxHeaderBytes (it is a private copy).
// A broken contract aborts with a line saying which.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/net/shm_channel.h"
#include "common/wire/codec.h"

namespace ps::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "shm_fuzzer: %s\n", what);
  std::abort();
}

void Run(const uint8_t* data, size_t size) {
  auto channel = ShmChannel::Create(kShmMinRingBytes);
  if (!channel.ok()) Fail("cannot create a channel");
  const uint64_t ring = (*channel)->ring_bytes();
  const uint64_t bytes = ShmRegionBytes(ring);
  auto* base =
      static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, (*channel)->fds().memfd, 0));
  if (base == MAP_FAILED) Fail("cannot map the region");
  uint64_t write_pos = 0;
  std::memcpy(&write_pos, data, std::min<size_t>(size, 8));
  write_pos %= 2 * ring;
  if (size > 8) std::memcpy(base + kShmControlBytes, data + 8, std::min<uint64_t>(size - 8, ring));
  std::memcpy(base, &write_pos, sizeof(write_pos));  // ring 0's control block starts with it
  const absl::Span<const uint8_t> in = (*channel)->incoming_ring();
  const auto lo = reinterpret_cast<uintptr_t>(in.data());
  absl::Status status;
  for (int round = 0; round < 64 && status.ok(); ++round) {
    status = (*channel)->Poll(64, [&](RawMessage m) {
      if (m.header.size() > kMaxHeaderBytes) Fail("a header frame over kMaxHeaderBytes");
      for (const zmq::message_t& p : m.payloads) {
        const auto at = reinterpret_cast<uintptr_t>(p.data());
        if (at < lo || at + p.size() > lo + in.size()) Fail("a payload outside the ring");
      }
    });
    if (!(*channel)->HasIncoming()) break;
  }
  if (!status.ok() && status.code() != absl::StatusCode::kDataLoss) Fail("a refusal that is not kDataLoss");
  if (!status.ok() && status.message().empty()) Fail("a refusal without a message");
  munmap(base, bytes);
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ps::fuzz::Run(data, size);
  return 0;
}
