// KVClient's fence across a move (worker/client/kv_client_fence.cc), against
// a scheduler and two servers played by the test: a worker's requests for a
// slice reach the slice's new server in the order the worker made them,
// also when a later one was made after the worker learnt of the move and an
// earlier one was still in flight to the old server, which then refuses it.

#include <poll.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/client/kv_client.h"

namespace ps {
namespace {

constexpr uint64_t kIncarnation = 0x5eed;
constexpr uint32_t kWorkerNode = 7;

// A ROUTER bound to an ephemeral port on 127.0.0.1, playing a scheduler or a
// server; every read has a deadline.
class FakeNode {
 public:
  FakeNode() {
    auto socket = BindRouter(context_, "tcp://127.0.0.1:0", "127.0.0.1", &endpoint_);
    EXPECT_TRUE(socket.ok()) << socket.status();
    if (socket.ok()) socket_ = *std::move(socket);
  }
  const std::string& endpoint() const { return endpoint_; }

  struct Received {
    RawMessage raw;
    Envelope env;
  };
  // The next message, decoded; nullopt when none comes within `timeout`.
  std::optional<Received> Receive(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      absl::StatusOr<RawMessage> raw = ReceiveMessage(socket_, /*routed=*/true);
      if (raw.ok()) {
        absl::StatusOr<Envelope> env = DecodeEnvelope(Bytes(raw->header));
        EXPECT_TRUE(env.ok()) << env.status();
        if (!env.ok()) return std::nullopt;
        return Received{*std::move(raw), *std::move(env)};
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return std::nullopt;
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
    }
  }
  void Send(const zmq::message_t& to, uint64_t request_id, Body body, std::vector<zmq::message_t> payloads = {}) {
    Envelope env{kProtocolVersion, request_id, 1, std::move(body)};
    env.incarnation = kIncarnation;
    EXPECT_TRUE(SendMessage(socket_, &to, env, std::move(payloads)).ok());
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
};

// The scheduler, on its own thread: registers the one worker, places the
// model on two servers (each slice's copies on both, server 0 leading),
// acknowledges heartbeats and the worker's end, and, when asked, moves
// every slice's lead to server 1 in a new view and then answers a barrier
// (so that the worker has that view once its barrier returns).
class FakeScheduler {
 public:
  FakeScheduler(std::string server0, std::string server1)
      : servers_{std::move(server0), std::move(server1)}, thread_([this] { Run(); }) {}
  ~FakeScheduler() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return node_.endpoint(); }
  // From now on a barrier is answered after a view in which server 1 leads every slice.
  void MoveToServer1() { moved_ = true; }

 private:
  ClusterViewMsg View(uint64_t epoch, int primary) const {
    ClusterViewMsg v;
    v.num_servers = 2;
    v.num_workers = 1;
    v.nodes = {NodeInfo{kWorkerNode, Role::kWorker, 0, "", ""}, NodeInfo{1, Role::kServer, 0, servers_[0], ""},
               NodeInfo{2, Role::kServer, 1, servers_[1], ""}};
    v.epoch = epoch;
    v.incarnation = kIncarnation;
    for (uint32_t key = 0; key < slices_; ++key) v.copies.push_back({primary, 1 - primary});
    return v;
  }
  void Run() {
    while (!stop_) {
      std::optional<FakeNode::Received> m = node_.Receive(absl::Milliseconds(20));
      if (!m.has_value()) continue;
      const zmq::message_t& from = m->raw.routing_id;
      const uint64_t id = m->env.request_id;
      if (std::holds_alternative<RegisterRequestMsg>(m->env.body)) {
        node_.Send(from, id, RegisterReplyMsg{kWorkerNode, 0, kIncarnation, 2});
        node_.Send(from, 0, View(1, 0));
      } else if (auto* define = std::get_if<DefineModelRequestMsg>(&m->env.body)) {
        absl::StatusOr<PartitionMap> map = PartitionMap::Build(define->model.tensors, 2, define->model.placement);
        ASSERT_TRUE(map.ok()) << map.status();
        slices_ = static_cast<uint32_t>(map->slices().size());
        node_.Send(from, id, DefineModelReplyMsg{define->model, map->slices(), 2});
        node_.Send(from, 0, View(2, 0));
      } else if (std::holds_alternative<BarrierRequestMsg>(m->env.body) && moved_) {
        node_.Send(from, 0, View(3, 1));
        node_.Send(from, id, AckMsg{});
      } else {
        node_.Send(from, id, AckMsg{});  // heartbeats, the worker's end
      }
    }
  }

  FakeNode node_;
  const std::string servers_[2];
  uint32_t slices_ = 0;
  std::atomic<bool> stop_{false}, moved_{false};
  std::thread thread_;
};

// A pull is in flight to server 0 when the worker learns that server 1
// leads the slice now; the worker's next request, a push of that slice,
// waits until server 0 has refused the pull (as routed by an older view)
// and the pull has gone to server 1: server 1 takes the pull, then the push.
// With the I/O thread doing the I/O, and with callers doing their own.
class ClientFenceTest : public ::testing::TestWithParam<bool> {};

TEST_P(ClientFenceTest, APushWaitsBehindAPullThatAMoveSendsToTheNewServer) {
  FakeNode server0, server1;
  FakeScheduler scheduler(server0.endpoint(), server1.endpoint());
  KVClientOptions options;
  options.scheduler = scheduler.endpoint();
  options.shm = false;
  options.caller_io = GetParam();
  options.request_timeout = absl::Seconds(20);
  auto client = KVClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ModelSpec model;
  model.tensors = {{"w", {4}, Initializer::Zeros()}};
  ASSERT_TRUE((*client)->RegisterModel(model).ok());

  std::vector<float> pulled(4, -1.0f);
  const TensorBuffer pull[] = {{0, absl::MakeSpan(pulled)}};
  const KVClient::Ticket first = (*client)->Pull(pull, 0);
  std::optional<FakeNode::Received> at0 = server0.Receive(absl::Seconds(10));
  ASSERT_TRUE(at0.has_value());
  ASSERT_TRUE(std::holds_alternative<PullRequestMsg>(at0->env.body)) << BodyName(at0->env.body);

  scheduler.MoveToServer1();
  ASSERT_TRUE((*client)->Barrier("moved", absl::Seconds(10)).ok());  // the view came first
  const std::vector<float> grad(4, 1.0f);
  const ConstTensorBuffer push[] = {{0, grad}};
  const KVClient::Ticket second = (*client)->Push(push, 0);
  // Server 0 refuses the pull as routed by an older view (view 3 moved it).
  server0.Send(at0->raw.routing_id, at0->env.request_id,
               ErrorMsg{absl::StatusCode::kFailedPrecondition, "slice 0 is served by server 1 now", 3});

  std::optional<FakeNode::Received> a = server1.Receive(absl::Seconds(10));
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(std::holds_alternative<PullRequestMsg>(a->env.body))
      << "server 1 took the worker's " << BodyName(a->env.body) << " before the pull the worker made first";
  std::optional<FakeNode::Received> b = server1.Receive(absl::Seconds(10));
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(std::holds_alternative<PushRequestMsg>(b->env.body)) << BodyName(b->env.body);
  // Answered in the order they came: the pull with values, the push.
  for (FakeNode::Received* r : {&*a, &*b}) {
    if (std::holds_alternative<PullRequestMsg>(r->env.body)) {
      std::vector<zmq::message_t> values;
      values.emplace_back(4 * sizeof(float));
      std::fill_n(static_cast<float*>(values.back().data()), 4, 2.5f);
      server1.Send(r->raw.routing_id, r->env.request_id, PullReplyMsg{{SliceData{0, 4, 0}}}, std::move(values));
    } else {
      server1.Send(r->raw.routing_id, r->env.request_id, AckMsg{});
    }
  }
  EXPECT_TRUE((*client)->Wait(first).ok());
  EXPECT_EQ(pulled, std::vector<float>(4, 2.5f));
  EXPECT_TRUE((*client)->Wait(second).ok());
  const ClientStats stats = (*client)->stats();
  EXPECT_EQ(stats.requests_rerouted, 1u);
  EXPECT_EQ(stats.requests_fenced, 1u);
  EXPECT_TRUE((*client)->Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Io, ClientFenceTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "caller_io" : "io_thread"; });

}  // namespace
}  // namespace ps
