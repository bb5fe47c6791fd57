// Garbage sent straight to a real ps_server's port while a real ps_exact_sum
// worker (integer gradients, exact sums checked at every pull) trains against
// the same server. Raw ZeroMQ DEALER sockets send undecodable frames and
// well-formed requests that are wrong; a plain TCP socket sends bytes that are
// not ZMTP at all, and ZMTP spoken by hand: frames that claim gigabytes,
// messages cut off mid-way. The server must answer every well-formed-but-wrong
// request with the right error code, log the problems, keep serving, keep the
// parameters exact (the worker checks), and exit 0 when the job ends.
// Every process is stopped by its pid when the test ends, pass or fail; every
// receive has a deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "capnp/message.h"
#include "capnp/serialize.h"
#include "common/net/transport.h"
#include "common/placement/partition_map.h"
#include "common/wire/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/ps.capnp.h"
#include "tests/garbage_input_fixture.h"
#include "tests/job.h"
#include "tests/raw_peer.h"
#include "worker/exact_sum/exact_sum_check.h"

namespace ps {
namespace {

using ::testing::AnyOf;

// ---- frames -----------------------------------------------------------------

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A header Cap'n Proto accepts but the codec must refuse: an enum value this
// build does not know.
zmq::message_t UnknownRoleFrame(uint64_t request_id, uint32_t sender) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  header.setVersion(kProtocolVersion);
  header.setRequestId(request_id);
  header.setSender(sender);
  header.initBody().initRegisterRequest().setRole(static_cast<wire::Role>(7));
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  return zmq::message_t(words.begin(), words.size() * sizeof(capnp::word));
}

// ---- ZMTP 3.0 by hand, on a plain TCP socket --------------------------------

// Not thread-safe. Closes its socket when it goes.
class TcpPeer {
 public:
  explicit TcpPeer(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~TcpPeer() {
    if (fd_ >= 0) close(fd_);
  }
  TcpPeer(const TcpPeer&) = delete;
  TcpPeer& operator=(const TcpPeer&) = delete;

  bool connected() const { return connected_; }

  // Sends everything; false once the server has closed the connection.
  bool Write(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads exactly n bytes before `deadline`; kDeadlineExceeded, or
  // kUnavailable when the server closes the connection first.
  absl::StatusOr<std::string> Read(size_t n, absl::Time deadline) {
    std::string out;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
      if (poll(&p, 1, static_cast<int>(ms)) <= 0) {
        return absl::DeadlineExceededError(absl::StrCat("read ", out.size(), " of ", n, " bytes"));
      }
      char buf[4096];
      const ssize_t got = recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) return absl::UnavailableError("connection closed by the server");
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }

  // ZMTP 3.0 as a DEALER with the NULL mechanism: our greeting and READY,
  // then the server's greeting and READY, read before `deadline`.
  absl::Status Handshake(absl::Time deadline) {
    std::string greeting("\xff\0\0\0\0\0\0\0\0\x7f\x03\x00", 12);
    greeting += std::string("NULL") + std::string(16, '\0');  // mechanism, 20 bytes
    greeting += std::string(32, '\0');                        // as-server 0, filler
    if (!Write(greeting + Command("READY", "Socket-Type", "DEALER"))) {
      return absl::UnavailableError("server closed the connection during the handshake");
    }
    absl::StatusOr<std::string> theirs = Read(64, deadline);
    if (!theirs.ok()) return theirs.status();
    if (static_cast<uint8_t>((*theirs)[0]) != 0xff || (*theirs)[10] != 3) {
      return absl::DataLossError("server greeting is not ZMTP 3");
    }
    absl::StatusOr<std::string> ready = ReadFrame(deadline, nullptr);
    if (!ready.ok()) return ready.status();
    if (ready->substr(0, 6) != std::string("\x05READY", 6)) return absl::DataLossError("no READY");
    return absl::OkStatus();
  }

  // One message frame: flags (more), then a 1- or 8-byte size.
  static std::string FrameHeader(uint64_t size, bool more) {
    std::string h;
    if (size < 256) {
      h.push_back(more ? '\x01' : '\x00');
      h.push_back(static_cast<char>(size));
      return h;
    }
    h.push_back(more ? '\x03' : '\x02');
    for (int shift = 56; shift >= 0; shift -= 8) h.push_back(static_cast<char>(size >> shift));
    return h;
  }
  static std::string Frame(const std::string& body, bool more) { return FrameHeader(body.size(), more) + body; }
  static std::string Frame(const zmq::message_t& m, bool more) {
    return Frame(std::string(static_cast<const char*>(m.data()), m.size()), more);
  }

  // Reads one ZMTP frame; `*more` (if not null) gets its "more" flag.
  absl::StatusOr<std::string> ReadFrame(absl::Time deadline, bool* more) {
    absl::StatusOr<std::string> flags = Read(1, deadline);
    if (!flags.ok()) return flags.status();
    const auto f = static_cast<uint8_t>((*flags)[0]);
    uint64_t size = 0;
    absl::StatusOr<std::string> len = Read((f & 0x02) ? 8 : 1, deadline);
    if (!len.ok()) return len.status();
    for (char c : *len) size = (size << 8) | static_cast<uint8_t>(c);
    if (size > (16u << 20)) return absl::DataLossError(absl::StrCat("server frame of ", size, " bytes"));
    if (more != nullptr) *more = (f & 0x01) != 0;
    return Read(size, deadline);
  }

  // Reads one reply message (header and payloads) and decodes its header.
  absl::StatusOr<Envelope> ReadReply(absl::Time deadline) {
    bool more = false;
    absl::StatusOr<std::string> header = ReadFrame(deadline, &more);
    if (!header.ok()) return header.status();
    while (more) {
      absl::StatusOr<std::string> payload = ReadFrame(deadline, &more);
      if (!payload.ok()) return payload.status();
    }
    return DecodeEnvelope(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(header->data()), header->size()));
  }

  // Waits until the server closes the connection (true) or the deadline passes.
  bool WaitClosed(absl::Time deadline) {
    while (true) {
      absl::StatusOr<std::string> b = Read(1, deadline);
      if (absl::IsUnavailable(b.status())) return true;
      if (absl::IsDeadlineExceeded(b.status())) return false;
    }
  }

 private:
  static std::string Command(const std::string& name, const std::string& key, const std::string& value) {
    std::string body(1, static_cast<char>(name.size()));
    body += name;
    body.push_back(static_cast<char>(key.size()));
    body += key;
    const uint32_t n = static_cast<uint32_t>(value.size());
    for (int shift = 24; shift >= 0; shift -= 8) body.push_back(static_cast<char>(n >> shift));
    body += value;
    return std::string(1, '\x04') + std::string(1, static_cast<char>(body.size())) + body;
  }

  int fd_ = -1;
  bool connected_ = false;
};

// Peak resident memory of a process, from /proc (kB); -1 when unreadable.
int64_t PeakRssKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    int64_t kb = 0;
    if (line.rfind("VmHWM:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kb)) {
      return kb;
    }
  }
  return -1;
}

}  // namespace

void GarbageInputTest::SendUndecodableHeaders() {
  std::mt19937 rng(20240607);
  // Random single frames, whole words and not; with and without payload
  // frames behind them. Every one is answered, naming no request (id 0).
  for (int i = 0; i < 1000; ++i) {
    const size_t len = 1 + rng() % (i % 2 == 0 ? 64 : 4096);
    std::vector<zmq::message_t> frames;
    const std::string junk = RandomBytes(rng, i % 3 == 0 ? (len + 7) / 8 * 8 : len);
    frames.emplace_back(junk.data(), junk.size());
    for (int p = 0; p < i % 4; ++p) frames.push_back(RawPeer::FloatFrame(rng() % 100, 1.0f));
    const ErrorMsg e = Refusal(std::move(frames), 0);
    ASSERT_THAT(e.code, AnyOf(absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument))
        << "random frame " << i << " of " << junk.size() << " bytes: " << e.message;
  }
  ErrorMsg e = Refusal(Frames(zmq::message_t()), 0);
  EXPECT_EQ(e.code, absl::StatusCode::kDataLoss) << e.message;
  EXPECT_THAT(e.message, HasSubstr("8-byte words"));
  // A valid header cut short by a word.
  const zmq::message_t whole =
      RawPeer::HeaderFrame(Envelope{kProtocolVersion, 5, worker_id_, PullRequestMsg{0, {0}, 1}});
  e = Refusal(Frames(zmq::message_t(whole.data(), whole.size() - 8)), 0);
  EXPECT_EQ(e.code, absl::StatusCode::kDataLoss) << e.message;
  // Well-formed Cap'n Proto with an enum value nobody knows.
  e = Refusal(Frames(UnknownRoleFrame(6, worker_id_)), 0);
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
  EXPECT_THAT(e.message, HasSubstr("role"));
}

void GarbageInputTest::SendWrongIdentities() {
  // Wrong protocol versions.
  for (uint32_t version : {0u, kProtocolVersion + 1, 0xffffffffu}) {
    auto [push, frames] = WholeSlice(0, kFinite);
    const ErrorMsg e = Push(push, std::move(frames), version);
    EXPECT_EQ(e.code, absl::StatusCode::kFailedPrecondition) << e.message;
    EXPECT_THAT(e.message, HasSubstr(absl::StrCat("protocol version ", version)));
  }
  // A sender that is not a worker of this job (the server's own id included).
  for (uint32_t sender : {3u, 4242u, 0xffffffffu, worker_id_ == 1 ? 2u : 1u}) {
    auto [push, frames] = WholeSlice(0, kFinite);
    const ErrorMsg e = Push(push, std::move(frames), kProtocolVersion, sender);
    EXPECT_EQ(e.code, absl::StatusCode::kPermissionDenied) << e.message;
    EXPECT_THAT(e.message, HasSubstr(absl::StrCat("sender node ", sender)));
  }
  // Slice keys that do not exist, in pushes and pulls.
  for (uint32_t key : {static_cast<uint32_t>(slices_.size()), kUnknownKey, 0xffffffffu}) {
    const ErrorMsg e =
        Push(PushRequestMsg{0, {SliceData{key, 4, 0}}, std::nullopt}, Frames(RawPeer::FloatFrame(4, kFinite)));
    EXPECT_EQ(e.code, absl::StatusCode::kNotFound) << e.message;
    EXPECT_THAT(e.message, HasSubstr(absl::StrCat("unknown slice key ", key)));
    const ErrorMsg p = Pull(worker_id_, PullRequestMsg{0, {0, key}, 100});
    EXPECT_EQ(p.code, absl::StatusCode::kNotFound) << p.message;
  }
}

void GarbageInputTest::SendWrongPayloads() {
  // A header claiming a 4 GB payload (and more) with a small frame behind it.
  for (uint64_t length :
       {uint64_t{1} << 30, uint64_t{1} << 32, uint64_t{1} << 62, std::numeric_limits<uint64_t>::max()}) {
    const ErrorMsg e = Push(PushRequestMsg{0, {SliceData{slice(1).key, length, 0}}, std::nullopt},
                            Frames(RawPeer::FloatFrame(16, kFinite)));
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
    EXPECT_THAT(e.message, HasSubstr(absl::StrCat("header says ", length, " floats")));
  }
  // The right length in the header, a frame one float short.
  {
    const ErrorMsg e = Push(PushRequestMsg{0, {SliceData{slice(1).key, slice(1).length, 0}}, std::nullopt},
                            Frames(RawPeer::FloatFrame(slice(1).length - 1, kFinite)));
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
    EXPECT_THAT(e.message, HasSubstr("payload has"));
  }
  // Fewer payload frames than the slices listed, and more.
  {
    PushRequestMsg three{0, {}, std::nullopt};
    for (size_t i = 0; i < 3; ++i) three.slices.push_back(SliceData{slice(i).key, slice(i).length, 0});
    const ErrorMsg e = Push(three, Frames(RawPeer::FloatFrame(slice(0).length, kFinite)));
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
    EXPECT_THAT(e.message, HasSubstr("3 slices but carries 1 payload frames"));
    std::vector<zmq::message_t> many;
    for (int i = 0; i < 2000; ++i) many.emplace_back();
    const ErrorMsg m = Push(PushRequestMsg{0, {}, std::nullopt}, std::move(many));
    EXPECT_EQ(m.code, absl::StatusCode::kInvalidArgument) << m.message;
    EXPECT_THAT(m.message, HasSubstr("0 slices but carries 2000 payload frames"));
  }
  // A header listing more slices than any model has, with no frames at all.
  {
    // Refused by the codec (id 0) where it caps lists, else by the server.
    PushRequestMsg huge{0, {}, std::nullopt};
    huge.slices.assign(200000, SliceData{slice(1).key, uint64_t{1} << 40, 0});
    ASSERT_TRUE(dealer_->Send(Envelope{kProtocolVersion, next_id_++, worker_id_, std::move(huge)}).ok());
    absl::StatusOr<RawReply> reply = dealer_->Receive(kReplyDeadline);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_TRUE(std::holds_alternative<ErrorMsg>(reply->env.body)) << BodyName(reply->env.body);
    EXPECT_EQ(std::get<ErrorMsg>(reply->env.body).code, absl::StatusCode::kInvalidArgument);
  }
  // A frame that is not a whole number of floats.
  {
    const ErrorMsg e = Push(PushRequestMsg{0, {SliceData{slice(1).key, slice(1).length, 0}}, std::nullopt},
                            Frames(zmq::message_t("1234567", 7)));
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
    EXPECT_THAT(e.message, HasSubstr("whole number of floats"));
  }
}

void GarbageInputTest::SendWrongValues() {
  const bool sync = GetParam() == "sync";
  // The same slice twice; a clock out of range.
  {
    std::vector<zmq::message_t> two;
    two.push_back(RawPeer::FloatFrame(slice(0).length, kFinite));
    two.push_back(RawPeer::FloatFrame(slice(0).length, kFinite));
    const SliceData d{slice(0).key, slice(0).length, 0};
    const ErrorMsg e = Push(PushRequestMsg{0, {d, d}, std::nullopt}, std::move(two));
    if (sync) {  // the step of the first is checked before the second is seen
      EXPECT_THAT(e.code, AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
                                absl::StatusCode::kAlreadyExists))
          << e.message;
    } else {
      EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
      EXPECT_THAT(e.message, HasSubstr("repeated in push"));
    }
    for (int64_t clock : {int64_t{-1}, std::numeric_limits<int64_t>::max()}) {
      auto [push, frames] = WholeSlice(0, kFinite);
      push.clock = clock;
      const ErrorMsg c = Push(push, std::move(frames));
      EXPECT_EQ(c.code, absl::StatusCode::kInvalidArgument) << c.message;
      EXPECT_THAT(c.message, HasSubstr(absl::StrCat("push clock ", clock)));
      const ErrorMsg p = Pull(worker_id_, PullRequestMsg{clock, {0}, 100});
      EXPECT_EQ(p.code, absl::StatusCode::kInvalidArgument) << p.message;
    }
    const ErrorMsg p = Pull(worker_id_, PullRequestMsg{0, {0, 1, 0}, 100});
    EXPECT_EQ(p.code, absl::StatusCode::kInvalidArgument) << p.message;
    EXPECT_THAT(p.message, HasSubstr("repeated in pull"));
  }
  // NaN and Inf in an otherwise acceptable push. Sync checks the step first,
  // so there the refusal may name the step instead.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto [push, frames] = WholeSlice(1, bad);
    const ErrorMsg e = Push(push, std::move(frames));
    if (sync) {
      EXPECT_THAT(e.code, AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
                                absl::StatusCode::kAlreadyExists))
          << e.message;
    } else {
      EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
      EXPECT_THAT(e.message, HasSubstr("NaN or Inf"));
    }
  }
  // An acceptable push whose then-pull names an unknown key: nothing may be
  // applied (the worker's exact sums would show it).
  {
    auto [push, frames] = WholeSlice(1, kFinite);
    push.then_pull = PullRequestMsg{1, {slice(1).key, kUnknownKey}, 100};
    const ErrorMsg e = Push(push, std::move(frames));
    EXPECT_EQ(e.code, absl::StatusCode::kNotFound) << e.message;
  }
}

// A table shard's push frame: `ids` then `floats` floats of `value`.
zmq::message_t RowFrame(const std::vector<uint64_t>& ids, size_t floats, float value) {
  zmq::message_t frame(ids.size() * sizeof(uint64_t) + floats * sizeof(float));
  std::memcpy(frame.data(), ids.data(), ids.size() * sizeof(uint64_t));
  auto* rows = reinterpret_cast<float*>(static_cast<char*>(frame.data()) + ids.size() * sizeof(uint64_t));
  std::fill(rows, rows + floats, value);
  return frame;
}

void GarbageInputTest::SendWrongRows() {
  // The exact-sum worker's table "rows" (dim 4) is the last slice: its shard here.
  const Slice& table = slices_.back();
  ASSERT_TRUE(table.table);
  struct Case {
    uint32_t rows;
    uint64_t length;
    std::vector<uint64_t> ids;
    size_t floats;
    float value;
    const char* error;
  };
  const Case cases[] = {
      {3, 12, {7}, 4, kFinite, "header says 3 rows and 12 floats"},  // fewer ids than rows
      {1, 5, {7}, 5, kFinite, "header says 1 rows and 5 floats"},    // not the table's dim
      {1, 4, {7}, 3, kFinite, "the frame has 20 bytes"},             // a float short
      {0xffffffffu, uint64_t{0xffffffffu} * 4, {7}, 4, kFinite, "at most 131072"},
      {2, 8, {7, 8}, 8, std::numeric_limits<float>::quiet_NaN(), "NaN or Inf"},
  };
  for (const Case& c : cases) {
    const ErrorMsg e = Push(PushRequestMsg{0, {SliceData{table.key, c.length, 0, c.rows}}, std::nullopt},
                            Frames(RowFrame(c.ids, c.floats, c.value)));
    if (GetParam() == "sync" && std::isnan(c.value)) {
      // Well-formed rows meet the step check first: step 0 is long applied.
      EXPECT_EQ(e.code, absl::StatusCode::kFailedPrecondition) << e.message;
      continue;
    }
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
    EXPECT_THAT(e.message, HasSubstr(c.error));
  }
  // Rows of a dense slice; a table shard pulled as a dense slice.
  ErrorMsg e = Pull(worker_id_, PullRequestMsg{0, {}, 100, {RowsRequest{slice(0).key, {1, 2}}}});
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
  EXPECT_THAT(e.message, HasSubstr("has no rows"));
  e = Pull(worker_id_, PullRequestMsg{0, {table.key}, 100});
  EXPECT_THAT(e.message, HasSubstr("is a table shard"));
  // More ids than a header may list: refused by the codec, before any copy
  // (so the answer names no request).
  e = Refusal(Frames(RawPeer::HeaderFrame(Envelope{
                  kProtocolVersion, next_id_++, worker_id_,
                  PullRequestMsg{0, {}, 100, {RowsRequest{table.key, std::vector<uint64_t>((1 << 17) + 1)}}}})),
              0);
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << e.message;
  EXPECT_THAT(e.message, HasSubstr("131073"));
}

void GarbageInputTest::SendWrongBodies() {
  // Bodies a server does not take, from the worker's id: control messages
  // must not reach the server's control path from the data port.
  const ModelSpec model = ExactSumModel(ExactSumOptions{}, 1);
  const std::vector<::ps::Body> others = {ShutdownMsg{"garbage says stop"},
                                          CreateSlicesRequestMsg{model, slices_, 1},
                                          WorkerDoneMsg{},
                                          BarrierRequestMsg{"b", 10},
                                          RegisterRequestMsg{Role::kServer, "tcp://127.0.0.1:1"},
                                          AckMsg{},
                                          ErrorMsg{absl::StatusCode::kInternal, "x"},
                                          PullReplyMsg{{SliceData{0, 1, 1}}},
                                          DefineModelRequestMsg{model}};
  for (const ::ps::Body& b : others) {
    const ErrorMsg e = SendBody(b, worker_id_);
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << BodyName(b) << ": " << e.message;
    EXPECT_THAT(e.message, HasSubstr(absl::StrCat("does not take ", BodyName(b))));
  }
}

void GarbageInputTest::SendRawTcpGarbage() {
  std::mt19937 rng(7);
  // Bytes that are not ZMTP, in several shapes: the server may close the
  // connection or wait for more; either way it keeps serving the others.
  const std::vector<std::string> blobs = {RandomBytes(rng, 64 << 10), "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                                          std::string(4096, '\0'), std::string(4096, '\xff'),
                                          std::string("\xff\0\0\0\0\0\0\0\0\x7f", 10) + RandomBytes(rng, 1000)};
  for (const std::string& blob : blobs) {
    TcpPeer peer(port_);
    ASSERT_TRUE(peer.connected());
    peer.Write(blob);
    absl::StatusOr<StatsReplyMsg> stats = Stats(next_id_++);
    ASSERT_TRUE(stats.ok()) << "after " << blob.size() << " bytes of non-ZMTP: " << stats.status();
  }
}

void GarbageInputTest::SpeakBrokenZmtp() {
  const absl::Time deadline = absl::Now() + kReplyDeadline;
  // First, that this hand-made ZMTP is understood at all: a well-formed but
  // wrong request over it gets its error reply.
  {
    TcpPeer peer(port_);
    ASSERT_TRUE(peer.connected());
    ASSERT_TRUE(peer.Handshake(deadline).ok());
    const Envelope env{kProtocolVersion, 4711, worker_id_, PullRequestMsg{0, {kUnknownKey}, 100}};
    ASSERT_TRUE(peer.Write(TcpPeer::Frame(RawPeer::HeaderFrame(env), false)));
    absl::StatusOr<Envelope> reply = peer.ReadReply(deadline);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->request_id, 4711u);
    ASSERT_TRUE(std::holds_alternative<ErrorMsg>(reply->body)) << BodyName(reply->body);
    EXPECT_EQ(std::get<ErrorMsg>(reply->body).code, absl::StatusCode::kNotFound);
  }
  // An acceptable push whose last frame says "more" and then silence: a
  // message that never ends must hold up no one else, and when its sender
  // goes, the part that came must not be applied (async would apply it whole;
  // the worker's exact sums would show it).
  {
    TcpPeer peer(port_);
    ASSERT_TRUE(peer.connected());
    ASSERT_TRUE(peer.Handshake(deadline).ok());
    auto [push, frames] = WholeSlice(1, kFinite);
    ASSERT_TRUE(
        peer.Write(TcpPeer::Frame(RawPeer::HeaderFrame(Envelope{kProtocolVersion, 4712, worker_id_, push}), true) +
                   TcpPeer::Frame(frames[0], true)));
    absl::StatusOr<StatsReplyMsg> stats = Stats(next_id_++);
    ASSERT_TRUE(stats.ok()) << "with a message left half-sent: " << stats.status();
  }
  // A frame that claims 4 GiB, and 16 EiB, followed by a few bytes; then gone.
  for (uint64_t claim : {uint64_t{1} << 32, std::numeric_limits<uint64_t>::max() >> 1}) {
    TcpPeer peer(port_);
    ASSERT_TRUE(peer.connected());
    ASSERT_TRUE(peer.Handshake(deadline).ok());
    peer.Write(TcpPeer::FrameHeader(claim, false) + std::string(1000, 'x'));
    absl::StatusOr<StatsReplyMsg> stats = Stats(next_id_++);
    ASSERT_TRUE(stats.ok()) << "with a frame claiming " << claim << " bytes: " << stats.status();
  }
}

TEST_P(GarbageInputTest, ServerRefusesEveryKindOfGarbageWhileAWorkerKeepsExactSums) {
  const pid_t server = job_.servers()[0].pid();
  const int64_t peak_before = PeakRssKb(server);
  absl::StatusOr<StatsReplyMsg> before = Stats(next_id_++);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_NO_FATAL_FAILURE(SendUndecodableHeaders());
  ASSERT_NO_FATAL_FAILURE(SendWrongIdentities());
  ASSERT_NO_FATAL_FAILURE(SendWrongPayloads());
  ASSERT_NO_FATAL_FAILURE(SendWrongValues());
  ASSERT_NO_FATAL_FAILURE(SendWrongBodies());
  ASSERT_NO_FATAL_FAILURE(SendWrongRows());
  ASSERT_NO_FATAL_FAILURE(SendRawTcpGarbage());
  ASSERT_NO_FATAL_FAILURE(SpeakBrokenZmtp());
  ASSERT_NO_FATAL_FAILURE(SendShmGarbage());
  absl::StatusOr<StatsReplyMsg> after = Stats(next_id_++);
  ASSERT_TRUE(after.ok()) << after.status();
  // The worker was pushing while the garbage arrived (it trains until told).
  EXPECT_GT(after->pushes_applied, before->pushes_applied);
  EXPECT_GE(after->errors_replied, before->errors_replied + 1000);
  // Nothing above may make the server hold much: the largest request is a
  // 5 MB header, and the one shared-memory channel opened maps two 16 MiB
  // rings (the server's default), which count as resident.
  EXPECT_LT((PeakRssKb(server) - peak_before) >> 10, 64 + 32) << "MiB of peak memory grown during the garbage";
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobEndsExact());
  const std::string log = job_.servers()[0].StderrText();
  for (const char* problem :
       {"8-byte words", "malformed header", "unknown role", "protocol version", "is not a registered worker",
        "unknown slice key", "header says 4294967296 floats", "payload frames", "whole number of floats",
        "repeated in pull", "push clock -1", "does not take shutdown", "does not take createSlicesRequest",
        "closed a worker's shared-memory channel", "claims 0 bytes", "refused a connection"}) {
    EXPECT_THAT(log, HasSubstr(problem)) << "the server log does not name: " << problem;
  }
}

// A frame larger than any slice may be is refused as it arrives, not
// buffered whole: a peer must not make the server hold what it claims.
// (One consistency mode is enough here.)
class HugeFrameTest : public GarbageInputTest {};

TEST_P(HugeFrameTest, IsNotBufferedWhole) {
  constexpr uint64_t kClaim = uint64_t{256} << 20;
  const pid_t server = job_.servers()[0].pid();
  const int64_t peak_before = PeakRssKb(server);
  ASSERT_GT(peak_before, 0);
  {
    TcpPeer peer(port_);
    ASSERT_TRUE(peer.connected());
    ASSERT_TRUE(peer.Handshake(absl::Now() + kReplyDeadline).ok());
    bool open = peer.Write(TcpPeer::FrameHeader(kClaim, false));
    const std::string chunk(1 << 20, '\x5a');
    for (uint64_t sent = 0; open && sent < kClaim; sent += chunk.size()) open = peer.Write(chunk);
    // Measured once the server is done with the frame: it answered it (read
    // whole, refused as a header) or closed the connection (refused early).
    absl::StatusOr<Envelope> reply = peer.ReadReply(absl::Now() + absl::Seconds(30));
    EXPECT_TRUE(reply.ok() || absl::IsUnavailable(reply.status())) << reply.status();
    absl::StatusOr<StatsReplyMsg> stats = Stats(next_id_++);
    ASSERT_TRUE(stats.ok()) << stats.status();
  }
  const int64_t grown_mb = (PeakRssKb(server) - peak_before) >> 10;
  EXPECT_LT(grown_mb, 128) << "a peer claiming a " << (kClaim >> 20)
                           << " MiB frame made the server's peak memory grow by " << grown_mb
                           << " MiB: frames are not bounded as they arrive (ZMQ_MAXMSGSIZE)";
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobEndsExact());
}

INSTANTIATE_TEST_SUITE_P(Modes, GarbageInputTest, ::testing::Values("sync", "async"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Async, HugeFrameTest, ::testing::Values("async"), [](const auto& info) { return info.param; });

}  // namespace ps
