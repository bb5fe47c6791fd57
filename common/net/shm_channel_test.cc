#include "common/net/shm_channel.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <random>

#include "common/net/shm_handshake.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

struct Pair {
  std::unique_ptr<ShmChannel> server, client;
};

// Both ends in this process; the client's descriptors are copies, as
// SCM_RIGHTS would give them.
Pair MakePair(uint64_t ring_bytes = kShmMinRingBytes) {
  auto server = ShmChannel::Create(ring_bytes);
  EXPECT_TRUE(server.ok()) << server.status();
  const ShmFds f = (*server)->fds();
  auto client = ShmChannel::Adopt(ShmFds{dup(f.memfd), dup(f.to_server), dup(f.to_client)}, (*server)->ring_bytes());
  EXPECT_TRUE(client.ok()) << client.status();
  return {*std::move(server), *std::move(client)};
}

// Message `seq` of a stream: a pull request naming seq, one payload of
// `floats` floats counting up from seq.
Envelope Numbered(uint64_t seq) {
  PullRequestMsg pull;
  pull.keys = {1, 2};
  return Envelope{kProtocolVersion, seq, 7, pull};
}
std::vector<zmq::message_t> Payload(uint64_t seq, size_t floats) {
  std::vector<float> v(floats);
  for (size_t i = 0; i < floats; ++i) v[i] = static_cast<float>(seq + i);
  std::vector<zmq::message_t> out;
  out.emplace_back(v.data(), v.size() * sizeof(float));
  return out;
}
void ExpectNumbered(const RawMessage& m, uint64_t seq, size_t floats) {
  auto env = DecodeEnvelope(Bytes(m.header));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->request_id, seq);
  ASSERT_EQ(m.payloads.size(), 1u);
  ASSERT_EQ(m.payloads[0].size(), floats * sizeof(float));
  const auto* f = static_cast<const float*>(m.payloads[0].data());
  for (size_t i = 0; i < floats; i += 97) ASSERT_EQ(f[i], static_cast<float>(seq + i)) << "message " << seq;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f) % 64, 0u);
}

absl::Status DrainInto(ShmChannel& ch, std::vector<RawMessage>* out, int max = 1000) {
  return ch.Poll(max, [&](RawMessage m) { out->push_back(std::move(m)); });
}

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

TEST(ShmChannelTest, RequestAndReplyCarryHeaderAndPayloadsInPlace) {
  Pair p = MakePair();
  ASSERT_TRUE(p.client->Send(Numbered(1), Payload(1, 1000)).ok());
  EXPECT_TRUE(Readable(p.server->wake_fd()));
  std::vector<RawMessage> got;
  ASSERT_TRUE(DrainInto(*p.server, &got).ok());
  ASSERT_EQ(got.size(), 1u);
  ExpectNumbered(got[0], 1, 1000);
  EXPECT_FALSE(Readable(p.server->wake_fd()));  // the doorbell was consumed

  std::vector<zmq::message_t> two = Payload(5, 3);
  two.emplace_back(size_t{0});  // an empty frame travels too
  ASSERT_TRUE(p.server->Send(Envelope{kProtocolVersion, 9, 1, AckMsg{}}, std::move(two)).ok());
  std::vector<RawMessage> replies;
  ASSERT_TRUE(DrainInto(*p.client, &replies).ok());
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(DecodeEnvelope(Bytes(replies[0].header))->request_id, 9u);
  ASSERT_EQ(replies[0].payloads.size(), 2u);
  EXPECT_EQ(replies[0].payloads[1].size(), 0u);
  EXPECT_EQ(p.client->messages_received(), 1u);
  EXPECT_EQ(p.server->messages_sent(), 1u);
}

TEST(ShmChannelTest, RingWrapsAndReusesFreedRecordsInOrder) {
  Pair p = MakePair(kShmMinRingBytes);
  std::mt19937 rng(3);
  uint64_t bytes = 0;
  for (uint64_t seq = 1; seq <= 600; ++seq) {
    const size_t floats = 1 + rng() % 5000;  // up to 20 KB: a third of the ring
    bytes += floats * 4;
    ASSERT_TRUE(p.client->Send(Numbered(seq), Payload(seq, floats)).ok());
    std::vector<RawMessage> got;
    ASSERT_TRUE(DrainInto(*p.server, &got).ok());
    ASSERT_EQ(got.size(), 1u) << "message " << seq;
    ExpectNumbered(got[0], seq, floats);
  }
  EXPECT_GT(bytes, 10 * kShmMinRingBytes);
  EXPECT_EQ(p.client->backlog_bytes(), 0u);
}

TEST(ShmChannelTest, HeldPayloadsKeepTheirRecordsUntilReleasedThenTheBacklogGoesInOrder) {
  Pair p = MakePair(kShmMinRingBytes);
  const size_t floats = 5000;  // 20 KB: three fit the 64 KiB ring
  for (uint64_t seq = 1; seq <= 8; ++seq) ASSERT_TRUE(p.client->Send(Numbered(seq), Payload(seq, floats)).ok());
  EXPECT_GT(p.client->backlog_bytes(), 0u);
  std::vector<RawMessage> held;
  ASSERT_TRUE(DrainInto(*p.server, &held).ok());
  ASSERT_EQ(held.size(), 3u);  // the rest wait for room
  for (uint64_t i = 0; i < 3; ++i) ExpectNumbered(held[i], 1 + i, floats);
  std::vector<RawMessage> nothing;
  ASSERT_TRUE(DrainInto(*p.client, &nothing).ok());  // no room yet: the three are held
  EXPECT_FALSE(Readable(p.client->wake_fd()));
  held.clear();  // released: the waiting producer is told
  EXPECT_TRUE(Readable(p.client->wake_fd()));
  uint64_t next = 4;
  for (int round = 0; round < 20 && next <= 8; ++round) {
    std::vector<RawMessage> none, got;
    ASSERT_TRUE(DrainInto(*p.client, &none).ok());  // writes what fits now
    EXPECT_TRUE(none.empty());
    ASSERT_TRUE(DrainInto(*p.server, &got).ok());
    for (const RawMessage& m : got) ExpectNumbered(m, next++, floats);
  }
  EXPECT_EQ(next, 9u);
  EXPECT_EQ(p.client->backlog_bytes(), 0u);
}

TEST(ShmChannelTest, APeerThatStopsReadingHitsTheBacklogLimit) {
  Pair p = MakePair(kShmMinRingBytes);
  absl::Status s;
  for (uint64_t seq = 1; seq <= 20 && s.ok(); ++seq) s = p.server->Send(Numbered(seq), Payload(seq, 5000), 100000);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("waiting for room"), std::string::npos) << s;
}

TEST(ShmChannelTest, AMessageLargerThanTheRingGoesByTheSocketAfterEverythingBeforeAndSoDoesAllAfter) {
  Pair p = MakePair(kShmMinRingBytes);
  std::vector<std::pair<uint64_t, size_t>> by_socket;  // (request id, payload bytes)
  p.client->set_oversize_sender([&](const Envelope& env, std::vector<zmq::message_t> payloads) {
    by_socket.emplace_back(env.request_id, payloads[0].size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(p.client->Send(Numbered(1), Payload(1, 100)).ok());
  ASSERT_TRUE(p.client->Send(Numbered(2), Payload(2, 40000)).ok());  // 160 KB: larger than the ring
  ASSERT_TRUE(p.client->Send(Numbered(3), Payload(3, 100)).ok());
  EXPECT_TRUE(by_socket.empty());  // message 1 is not consumed yet
  std::vector<RawMessage> got;
  ASSERT_TRUE(DrainInto(*p.server, &got).ok());
  ASSERT_EQ(got.size(), 1u);
  ExpectNumbered(got[0], 1, 100);
  got.clear();  // released
  std::vector<RawMessage> none;
  ASSERT_TRUE(DrainInto(*p.client, &none).ok());
  // The large one, then the one behind it: both by the socket, in order.
  const std::vector<std::pair<uint64_t, size_t>> want = {{2, 160000}, {3, 400}};
  EXPECT_EQ(by_socket, want);
  ASSERT_TRUE(p.client->Send(Numbered(4), Payload(4, 10)).ok());
  EXPECT_EQ(by_socket.back(), (std::pair<uint64_t, size_t>{4, 40}));
  ASSERT_TRUE(DrainInto(*p.server, &got).ok());
  EXPECT_TRUE(got.empty());
}

TEST(ShmChannelTest, ARecordLargerThanEitherSideOfTheOffsetWaitsOnlyForRoomAtTheStart) {
  Pair p = MakePair(kShmMinRingBytes);
  // 30 KB, then 40 KB: the second fits neither before the ring's end nor in
  // the 30 KB in front of the offset, only at the start once the first is read.
  ASSERT_TRUE(p.client->Send(Numbered(1), Payload(1, 7500)).ok());
  ASSERT_TRUE(p.client->Send(Numbered(2), Payload(2, 10000)).ok());
  std::vector<RawMessage> got, none;
  ASSERT_TRUE(DrainInto(*p.server, &got).ok());
  ASSERT_EQ(got.size(), 1u);
  ExpectNumbered(got[0], 1, 7500);
  got.clear();
  ASSERT_TRUE(DrainInto(*p.client, &none).ok());
  ASSERT_TRUE(DrainInto(*p.server, &got).ok());
  ASSERT_EQ(got.size(), 1u);
  ExpectNumbered(got[0], 2, 10000);
  EXPECT_EQ(p.client->backlog_bytes(), 0u);
}

TEST(ShmChannelTest, PayloadsOutliveBothEnds) {
  std::vector<RawMessage> got;
  {
    Pair p = MakePair();
    ASSERT_TRUE(p.client->Send(Numbered(4), Payload(4, 3000)).ok());
    ASSERT_TRUE(DrainInto(*p.server, &got).ok());
  }
  ASSERT_EQ(got.size(), 1u);
  ExpectNumbered(got[0], 4, 3000);
}

// The request ring of `p`, writable from the test as a hostile client would.
struct Hostile {
  uint8_t* base;
  uint64_t bytes;
  explicit Hostile(const ShmChannel& server) {
    bytes = ShmRegionBytes(server.ring_bytes());
    base = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, server.fds().memfd, 0));
    EXPECT_NE(base, MAP_FAILED);
  }
  ~Hostile() { munmap(base, bytes); }
  uint64_t& write_pos() { return *reinterpret_cast<uint64_t*>(base); }
  uint8_t* record() { return base + kShmControlBytes; }
  uint64_t& size() { return *reinterpret_cast<uint64_t*>(record()); }
  uint32_t& frames() { return *reinterpret_cast<uint32_t*>(record() + 8); }
  uint64_t& length(int i) { return *reinterpret_cast<uint64_t*>(record() + 16 + 8 * i); }
};

TEST(ShmChannelTest, EveryCorruptRecordIsDataLossNamingWhatIsWrong) {
  const std::vector<std::pair<std::string, std::function<void(Hostile&)>>> cases = {
      {"write position", [](Hostile& h) { h.write_pos() = 3 * kShmDefaultRingBytes; }},
      {"claims 0 bytes", [](Hostile& h) { h.size() = 0; }},
      {"claims 1000000 bytes", [](Hostile& h) { h.size() = 1000000; }},
      {"claims 1000 frames", [](Hostile& h) { h.frames() = 1000; }},
      {"overruns its record", [](Hostile& h) { h.length(1) = uint64_t{1} << 40; }},
      {"overruns its record", [](Hostile& h) { h.length(0) = ~uint64_t{0}; }},
      {"header frame of",
       [](Hostile& h) {
         h.size() = 2 * kMaxHeaderBytes;
         h.length(0) = kMaxHeaderBytes + 1;
         h.frames() = 1;
         h.write_pos() = h.size();
       }},
  };
  for (const auto& [what, corrupt] : cases) {
    Pair p = MakePair(kShmDefaultRingBytes);  // larger than a header may be
    ASSERT_TRUE(p.client->Send(Numbered(1), Payload(1, 100)).ok());
    Hostile h(*p.server);
    corrupt(h);
    std::vector<RawMessage> got;
    absl::Status s = DrainInto(*p.server, &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << what << ": " << s;
    EXPECT_NE(s.message().find(what), std::string::npos) << s;
    EXPECT_TRUE(got.empty());
  }
}

TEST(ShmChannelTest, RandomBytesInTheRingNeverReadOutOfBounds) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 300; ++round) {
    Pair p = MakePair();
    Hostile h(*p.server);
    auto* words = reinterpret_cast<uint64_t*>(h.record());
    const int n = 1 + static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) words[i] = rng() % 2 ? rng() : rng() % 4096;
    h.write_pos() = rng() % (kShmMinRingBytes + 1);
    std::vector<RawMessage> got;
    absl::Status s = DrainInto(*p.server, &got);
    ASSERT_TRUE(s.ok() || s.code() == absl::StatusCode::kDataLoss) << s;
    for (const RawMessage& m : got) {
      for (const auto& f : m.payloads) ASSERT_LE(f.size(), kShmMinRingBytes);
    }
  }
}

TEST(ShmChannelTest, APeerThatHangsUpIsUnavailable) {
  Pair p = MakePair();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  p.server->set_peer_socket(sv[0]);
  std::vector<RawMessage> got;
  EXPECT_TRUE(DrainInto(*p.server, &got).ok());
  close(sv[1]);
  EXPECT_TRUE(Readable(p.server->peer_socket()));
  EXPECT_EQ(DrainInto(*p.server, &got).code(), absl::StatusCode::kUnavailable);
}

TEST(ShmChannelTest, AdoptRefusesARegionOfAnotherSizeOrUnsealed) {
  auto server = ShmChannel::Create(kShmMinRingBytes);
  ASSERT_TRUE(server.ok());
  const ShmFds f = (*server)->fds();
  auto wrong = ShmChannel::Adopt(ShmFds{dup(f.memfd), dup(f.to_server), dup(f.to_client)}, 2 * kShmMinRingBytes);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss);
  const int plain = memfd_create("plain", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(plain, ShmRegionBytes(kShmMinRingBytes)), 0);
  auto unsealed = ShmChannel::Adopt(ShmFds{plain, dup(f.to_server), dup(f.to_client)}, kShmMinRingBytes);
  EXPECT_EQ(unsealed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(unsealed.status().message().find("sealed"), std::string::npos);
  EXPECT_EQ(ShmChannel::Create(1024).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShmHandshakeTest, TheTokenFetchesTheChannelOnceAndOnlyIt) {
  auto acceptor = ShmAcceptor::Start(kShmMinRingBytes);
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  auto grant = (*acceptor)->Offer("route-1", "key-1");
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->token.size(), kShmTokenBytes);
  auto client = FetchShmChannel(*grant, absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  pollfd ready{(*acceptor)->ready_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&ready, 1, 5000), 1);  // the acceptor thread hands over before answering us
  std::vector<ShmAcceptor::Ready> taken = (*acceptor)->TakeReady();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].routing_id, "route-1");
  EXPECT_EQ(taken[0].user_id, "key-1");
  ASSERT_TRUE((*client)->Send(Numbered(8), Payload(8, 64)).ok());
  std::vector<RawMessage> got;
  ASSERT_TRUE(DrainInto(*taken[0].channel, &got).ok());
  ASSERT_EQ(got.size(), 1u);
  ExpectNumbered(got[0], 8, 64);

  auto again = FetchShmChannel(*grant, absl::Seconds(5));  // a token is good once
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
  ShmGrantMsg forged = *grant;
  forged.token[0] ^= 1;
  EXPECT_EQ(FetchShmChannel(forged, absl::Seconds(5)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*acceptor)->refused(), 2u);
  EXPECT_EQ((*acceptor)->handed_over(), 1u);
  ShmGrantMsg elsewhere = *grant;
  elsewhere.socket_name = "ps-shm-no-such-socket";
  auto far = FetchShmChannel(elsewhere, absl::Seconds(5));
  EXPECT_EQ(far.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(far.status().message().find("another host"), std::string::npos) << far.status();
  ShmGrantMsg malformed = *grant;
  malformed.token = "short";
  EXPECT_EQ(FetchShmChannel(malformed, absl::Seconds(5)).status().code(), absl::StatusCode::kDataLoss);

  for (size_t i = 0; i < kShmMaxPendingOffers; ++i) ASSERT_TRUE((*acceptor)->Offer("r", "").ok());
  auto one_too_many = (*acceptor)->Offer("r", "");
  EXPECT_EQ(one_too_many.status().code(), absl::StatusCode::kResourceExhausted) << one_too_many.status();

  client->reset();  // the worker goes: the server's end learns it
  EXPECT_EQ(DrainInto(*taken[0].channel, &got).code(), absl::StatusCode::kUnavailable);
}

TEST(ShmHandshakeTest, AWorkerThatTakesTheRegionButDoesNotConfirmIsDropped) {
  auto acceptor = ShmAcceptor::Start(kShmMinRingBytes);
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  auto grant = (*acceptor)->Offer("route", "");
  ASSERT_TRUE(grant.ok());
  // A worker that presents the token, takes the answer, then gives up (its
  // deadline passed) and closes without the confirming byte.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, grant->socket_name.data(), grant->socket_name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + grant->socket_name.size());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(send(fd, grant->token.data(), grant->token.size(), 0), static_cast<ssize_t>(grant->token.size()));
  char answer = 0;
  ASSERT_EQ(recv(fd, &answer, 1, 0), 1);  // the descriptors came with it (and are closed unread)
  EXPECT_EQ(answer, 'Y');
  close(fd);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while ((*acceptor)->refused() == 0 && absl::Now() < deadline) {
    ::poll(nullptr, 0, 10);  // paces the look at the counter; the deadline bounds it
  }
  EXPECT_EQ((*acceptor)->refused(), 1u);
  EXPECT_EQ((*acceptor)->handed_over(), 0u);
  EXPECT_TRUE((*acceptor)->TakeReady().empty());
}

}  // namespace
}  // namespace ps
