// A CURVE ROUTER with its ZAP handler, and DEALERs with good and bad keys,
// all on 127.0.0.1 in this process: who gets a message through, with which
// User-Id, what is logged, and what ZMQ_MAXMSGSIZE drops.
#include "common/net/zap_handler.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/log_capture_testing.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

using ::ps::testing::LogCapture;

CurveKeyPair NewKeys() { return GenerateCurveKeyPair().value(); }

constexpr uint64_t kFrameLimit = 1 << 20;

class ZapHandlerTest : public ::testing::Test {
 protected:
  // The keys the handler admits (client_'s).
  virtual AuthorizedKeys Authorized() { return AuthorizedKeys{{client_.public_key}, "the test"}; }

  void SetUp() override {
    server_ = NewKeys();
    client_ = NewKeys();
    security_ = NodeSecurity::WithKeys(server_, server_.public_key, Authorized(), kFrameLimit);
    auto zap = ZapHandler::Start(context_, security_.authorized_keys(), "test");
    ASSERT_TRUE(zap.ok()) << zap.status();
    zap_ = *std::move(zap);
    auto router = BindRouter(context_, "tcp://127.0.0.1:0", "127.0.0.1", &endpoint_, security_, Traffic::kData);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
  }

  // A DEALER of another "process" (its own context) with `keys`, trusting
  // `server_key`; no keys at all when `keys` is null.
  zmq::socket_t Dealer(const CurveKeyPair* keys, const std::string& server_key) {
    const NodeSecurity s = keys == nullptr ? NodeSecurity() : NodeSecurity::WithKeys(*keys, server_key, {});
    auto d = ConnectDealer(client_context_, endpoint_, s, Traffic::kData, server_key);
    EXPECT_TRUE(d.ok()) << d.status();
    d->set(zmq::sockopt::linger, 0);
    return *std::move(d);
  }

  static void SendAck(zmq::socket_t& dealer, std::vector<zmq::message_t> payloads = {}) {
    ASSERT_TRUE(TrySendAck(dealer, std::move(payloads)).ok());
  }
  static absl::Status TrySendAck(zmq::socket_t& dealer, std::vector<zmq::message_t> payloads = {}) {
    return SendMessage(dealer, nullptr, Envelope{kProtocolVersion, 9, 1, AckMsg{}}, std::move(payloads));
  }

  // The next message on the router within `timeout`, or an error.
  absl::StatusOr<RawMessage> Receive(absl::Duration timeout) {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout))) == 0) {
      return absl::DeadlineExceededError("nothing arrived");
    }
    return ReceiveMessage(router_, /*routed=*/true);
  }

  // Waits for the handler to have refused `n` clients, failing on any
  // message that gets through meanwhile.
  void ExpectRefusals(uint64_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (zap_->refused() < n && absl::Now() < deadline) {
      auto got = Receive(absl::Milliseconds(20));
      ASSERT_FALSE(got.ok()) << "a message got through from key " << got->user_id;
    }
    EXPECT_GE(zap_->refused(), n);
  }

  zmq::context_t context_;
  CurveKeyPair server_, client_;
  NodeSecurity security_;
  std::unique_ptr<ZapHandler> zap_;  // after the context, before the router: outlives it
  zmq::socket_t router_;
  std::string endpoint_;
  zmq::context_t client_context_;
};

TEST_F(ZapHandlerTest, AnAuthorisedKeyGetsThroughWithItsKeyAsUserId) {
  zmq::socket_t dealer = Dealer(&client_, server_.public_key);
  SendAck(dealer);
  auto got = Receive(absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->user_id, client_.public_key);
  EXPECT_EQ(zap_->admitted(), 1u);
  EXPECT_EQ(zap_->refused(), 0u);
}

TEST_F(ZapHandlerTest, AKeyNotAuthorisedIsRefusedAndLoggedWithAddressAndFingerprint) {
  LogCapture log;
  const CurveKeyPair stranger = NewKeys();
  zmq::socket_t dealer = Dealer(&stranger, server_.public_key);
  SendAck(dealer);
  ExpectRefusals(1);
  EXPECT_FALSE(Receive(absl::Milliseconds(300)).ok());
  EXPECT_EQ(zap_->admitted(), 0u);
  EXPECT_THAT(log.text(), HasSubstr(absl::StrCat("zap[test]: refused key ", KeyFingerprint(stranger.public_key),
                                                 " from 127.0.0.1: not among the 1 authorised keys")));
  // ZeroMQ gives up on a connection whose key was refused; later sends fail
  // at once instead of blocking forever.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status sent;
  while ((sent = TrySendAck(dealer)).ok() && absl::Now() < deadline) {
    EXPECT_FALSE(Receive(absl::Milliseconds(20)).ok());
  }
  EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable) << sent;
}

TEST_F(ZapHandlerTest, AClientWithTheWrongServerKeyNeverGetsThrough) {
  zmq::socket_t dealer = Dealer(&client_, NewKeys().public_key);
  SendAck(dealer);
  EXPECT_FALSE(Receive(absl::Seconds(1)).ok());
  // The handshake fails before the server can read the client's key.
  EXPECT_EQ(zap_->admitted(), 0u);
}

TEST_F(ZapHandlerTest, AClientWithoutKeysNeverGetsThrough) {
  zmq::socket_t dealer = Dealer(nullptr, "");
  SendAck(dealer);
  EXPECT_FALSE(Receive(absl::Seconds(1)).ok());
  EXPECT_EQ(zap_->admitted(), 0u);
}

TEST_F(ZapHandlerTest, AFrameOverTheLimitIsDroppedAndOthersAreStillServed) {
  zmq::socket_t big = Dealer(&client_, server_.public_key);
  std::vector<zmq::message_t> payload;
  payload.emplace_back(kFrameLimit + 4096);
  SendAck(big, std::move(payload));
  EXPECT_FALSE(Receive(absl::Seconds(1)).ok());
  zmq::socket_t small = Dealer(&client_, server_.public_key);
  std::vector<zmq::message_t> fits;
  fits.emplace_back(kFrameLimit);
  SendAck(small, std::move(fits));
  auto got = Receive(absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->payloads.size(), 1u);
  EXPECT_EQ(got->payloads[0].size(), kFrameLimit);
}

// Keys from a directory of .pub files (as ps_run's and the Kubernetes
// Secret's): a key added there after the start is admitted on its next
// handshake, without a restart (a server joining a running job).
class ZapHandlerRereadTest : public ZapHandlerTest {
 protected:
  AuthorizedKeys Authorized() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("zap_keys_", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    AddKey("client", client_);
    absl::StatusOr<AuthorizedKeys> keys = ReadAuthorizedKeys(dir_.string());
    EXPECT_TRUE(keys.ok()) << keys.status();
    return keys.ok() ? *keys : AuthorizedKeys{};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // NAME.pub with `keys`' public key, written beside the directory and
  // renamed into it (a reader never sees it half written).
  void AddKey(const std::string& name, const CurveKeyPair& keys) {
    const std::filesystem::path tmp = dir_.parent_path() / absl::StrCat(name, "_", getpid(), ".pub.tmp");
    std::ofstream(tmp) << keys.public_key << " " << name << "\n";
    std::filesystem::rename(tmp, dir_ / (name + ".pub"));
  }
  std::filesystem::path dir_;
};

TEST_F(ZapHandlerRereadTest, AKeyAddedToTheDirectoryIsAdmittedWithoutARestart) {
  const CurveKeyPair late = NewKeys();
  {
    zmq::socket_t early = Dealer(&late, server_.public_key);
    SendAck(early);
    ExpectRefusals(1);
  }
  AddKey("late", late);
  zmq::socket_t dealer = Dealer(&late, server_.public_key);
  SendAck(dealer);
  auto got = Receive(absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->user_id, late.public_key);
  // The one admitted first is still admitted.
  zmq::socket_t first = Dealer(&client_, server_.public_key);
  SendAck(first);
  got = Receive(absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->user_id, client_.public_key);
}

TEST(ZapHandlerStartTest, OneHandlerPerContext) {
  zmq::context_t context;
  auto first = ZapHandler::Start(context, AuthorizedKeys{{NewKeys().public_key}, "a"}, "a");
  ASSERT_TRUE(first.ok());
  auto second = ZapHandler::Start(context, AuthorizedKeys{{NewKeys().public_key}, "b"}, "b");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ZapHandlerStartTest, APlaintextNodeGetsNoHandler) {
  zmq::context_t context;
  auto none = StartZapHandler(context, NodeSecurity(), "plain");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

}  // namespace
}  // namespace ps
