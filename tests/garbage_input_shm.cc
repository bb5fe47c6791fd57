// garbage_input_test's shared-memory part: offers from nodes that are not
// workers, forged tokens, requests the server must refuse through a channel,
// and a ring corrupted under the server's reader. The server must refuse
// each, close the corrupted channel (its end of the handshake socket closes,
// so the peer learns it), and keep serving the real worker, whose exact sums
// the fixture checks at the end.
#include <sys/mman.h>
#include <unistd.h>

#include <optional>

#include "common/base/status_macros.h"
#include "common/net/shm_handshake.h"
#include "tests/garbage_input_fixture.h"

namespace ps {
namespace {

// The next message through `channel`, waiting up to `timeout`.
absl::StatusOr<RawMessage> ReceiveShm(ShmChannel& channel, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::optional<RawMessage> got;
    PS_RETURN_IF_ERROR(channel.Poll(1, [&](RawMessage m) { got = std::move(m); }));
    if (got.has_value()) return *std::move(got);
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("nothing came through the channel");
    pollfd fds[2] = {{channel.wake_fd(), POLLIN, 0}, {channel.peer_socket(), POLLIN, 0}};
    ::poll(fds, 2, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
  }
}

// The error the server answers `env` (with `payloads`) with, through `channel`.
ErrorMsg RefusalThrough(ShmChannel& channel, const Envelope& env, std::vector<zmq::message_t> payloads) {
  if (absl::Status s = channel.Send(env, std::move(payloads)); !s.ok()) {
    return ErrorMsg{absl::StatusCode::kUnknown, absl::StrCat("send failed: ", s.message())};
  }
  absl::StatusOr<RawMessage> reply = ReceiveShm(channel, kReplyDeadline);
  if (!reply.ok()) return ErrorMsg{absl::StatusCode::kUnknown, std::string(reply.status().message())};
  absl::StatusOr<Envelope> decoded = DecodeEnvelope(Bytes(reply->header));
  if (!decoded.ok()) return ErrorMsg{absl::StatusCode::kUnknown, std::string(decoded.status().message())};
  if (decoded->request_id != env.request_id) {
    return ErrorMsg{absl::StatusCode::kUnknown, absl::StrCat("reply to request ", decoded->request_id)};
  }
  if (const auto* err = std::get_if<ErrorMsg>(&decoded->body)) return *err;
  return ErrorMsg{absl::StatusCode::kUnknown, absl::StrCat("answered with ", BodyName(decoded->body))};
}

// Writes a record claiming 0 bytes at the ring's next position, publishes
// it and rings the server: what a hostile peer would do.
void CorruptRing(ShmChannel& channel) {
  const ShmFds fds = channel.fds();
  const uint64_t bytes = ShmRegionBytes(channel.ring_bytes());
  auto* base = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds.memfd, 0));
  ASSERT_NE(base, MAP_FAILED);
  uint64_t write_pos;
  std::memcpy(&write_pos, base, sizeof(write_pos));
  uint8_t* record = base + kShmControlBytes + write_pos % channel.ring_bytes();
  std::memset(record, 0, 64);  // size 0, frames 0
  write_pos += 64;
  std::memcpy(base, &write_pos, sizeof(write_pos));
  const uint64_t one = 1;
  ASSERT_EQ(write(fds.to_server, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  munmap(base, bytes);
}

}  // namespace

void GarbageInputTest::SendShmGarbage() {
  // An offer from a node that is not a worker of the job.
  const ErrorMsg stranger = SendBody(ShmOfferMsg{}, 99);
  EXPECT_EQ(stranger.code, absl::StatusCode::kPermissionDenied) << stranger.message;
  // The worker's node id (plaintext: nothing ties it to a key) gets a grant.
  const uint64_t offer_id = next_id_++;
  ASSERT_TRUE(dealer_->Send(Envelope{kProtocolVersion, offer_id, worker_id_, ShmOfferMsg{}}).ok());
  absl::StatusOr<RawReply> reply = dealer_->Receive(kReplyDeadline);
  ASSERT_TRUE(reply.ok()) << reply.status();
  const auto* grant = std::get_if<ShmGrantMsg>(&reply->env.body);
  ASSERT_NE(grant, nullptr) << BodyName(reply->env.body);
  // A forged token is refused by the acceptor; the real one fetches the channel once.
  ShmGrantMsg forged = *grant;
  forged.token[3] ^= 0x40;
  EXPECT_EQ(FetchShmChannel(forged, kReplyDeadline).status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<std::unique_ptr<ShmChannel>> channel = FetchShmChannel(*grant, kReplyDeadline);
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_EQ(FetchShmChannel(*grant, kReplyDeadline).status().code(), absl::StatusCode::kUnavailable);

  // Through the channel the server checks as on its socket.
  const ErrorMsg unknown = RefusalThrough(**channel, Envelope{kProtocolVersion, next_id_++, 99, StatsRequestMsg{}}, {});
  EXPECT_EQ(unknown.code, absl::StatusCode::kUnknown) << "stats are answered to anyone: " << unknown.message;
  EXPECT_THAT(unknown.message, HasSubstr("answered with statsReply"));
  std::vector<zmq::message_t> short_frame;
  short_frame.push_back(RawPeer::FloatFrame(slice(1).length - 1, kFinite));
  const ErrorMsg wrong =
      RefusalThrough(**channel,
                     Envelope{kProtocolVersion, next_id_++, worker_id_,
                              PushRequestMsg{0, {SliceData{slice(1).key, slice(1).length, 0}}, std::nullopt}},
                     std::move(short_frame));
  EXPECT_EQ(wrong.code, absl::StatusCode::kInvalidArgument) << wrong.message;
  EXPECT_THAT(wrong.message, HasSubstr("payload has"));
  const ErrorMsg impostor =
      RefusalThrough(**channel, Envelope{kProtocolVersion, next_id_++, 99, PullRequestMsg{0, {slice(0).key}, 100}}, {});
  EXPECT_EQ(impostor.code, absl::StatusCode::kPermissionDenied) << impostor.message;

  // A corrupt record: the server closes the channel, and its end of the
  // handshake socket with it.
  ASSERT_NO_FATAL_FAILURE(CorruptRing(**channel));
  absl::StatusOr<RawMessage> after = ReceiveShm(**channel, kReplyDeadline);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
}

}  // namespace ps
