// A whole job in one process: scheduler, servers and clients on threads,
// configured through Options structs (no globals, no flags).
#include <atomic>
#include <future>
#include <map>
#include <thread>

#include "common/base/hash.h"
#include "common/base/status_macros.h"
#include "common/placement/partition_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"
#include "tests/raw_peer.h"
#include "worker/client/kv_client.h"
#include "worker/exact_sum/exact_sum_check.h"
#include "worker/train/stage_link.h"

namespace ps {
namespace {

using testing::ExpectedDenseSum;
using ::testing::HasSubstr;
using testing::InProcessCluster;

std::vector<absl::StatusOr<ExactSumResult>> RunWorkers(const std::string& scheduler, int workers,
                                                       ExactSumOptions options) {
  options.client.scheduler = scheduler;
  std::vector<std::future<absl::StatusOr<ExactSumResult>>> futures;
  for (int w = 0; w < workers; ++w) {
    futures.push_back(std::async(std::launch::async, [options] { return RunExactSumCheck(options); }));
  }
  std::vector<absl::StatusOr<ExactSumResult>> results;
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

void ExpectExact(const std::vector<absl::StatusOr<ExactSumResult>>& results, int workers, int steps, int64_t n) {
  const double expected = ExpectedDenseSum(workers, steps, n);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->dense_sum, expected);
    EXPECT_EQ(r->clocks, std::vector<float>(workers, static_cast<float>(steps)));
  }
}

class InProcessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InProcessTest, TwoServersTwoWorkersEndWithExactSums) {
  auto cluster = InProcessCluster::Start(2, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ExactSumOptions options;
  options.steps = 12;
  options.dense_elements = 300000;
  options.slice_bytes = 256 << 10;  // several slices per server
  options.consistency = *Consistency::Parse(GetParam());
  auto results = RunWorkers((*cluster)->scheduler_endpoint(), 2, options);
  ExpectExact(results, 2, 12, 300000);
  EXPECT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, InProcessTest, ::testing::Values("sync", "async", "ssp:1"), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), ':', '_');
  return name;
});

// Pushes compressed by the workers, pulls by the servers: each
// worker simulates every worker's compressor and error feedback, and checks
// every pull (sync) and the end (every mode) against that exactly.
// (compression, mode, plane: "shm" or "tcp").
class CompressedTest : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(CompressedTest, TwoServersTwoWorkersEndWithTheSimulatedExactSums) {
  const auto& [compression, mode, plane] = GetParam();
  auto cluster = InProcessCluster::Start(2, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ExactSumOptions options;
  options.steps = 12;
  options.dense_elements = 300000;
  options.slice_bytes = 256 << 10;
  options.consistency = *Consistency::Parse(mode);
  options.compression = *CompressionSpec::Parse(compression);
  options.client.shm = plane == "shm";
  options.client.compress_threads =
      3;  // the dense tensor's slices compressed in parallel, as the simulation does alone
  auto results = RunWorkers((*cluster)->scheduler_endpoint(), 2, options);
  const double uncompressed = ExpectedDenseSum(2, 12, 300000);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->dense_sum, r->expected_sum);
    EXPECT_EQ(r->clocks, std::vector<float>(2, 12.0f));
    // The sparse kinds left their last residuals out; the 16-bit ones round small integers exactly.
    const bool sparse =
        options.compression.kind == CompressionKind::kTopK || options.compression.kind == CompressionKind::kRandomK;
    if (sparse) {
      EXPECT_LT(r->dense_sum, uncompressed);
    } else {
      EXPECT_EQ(r->dense_sum, uncompressed);
    }
    // What travelled: the dense tensor's pushes, 2 workers x 12 steps, at
    // 10% (topk: 8 bytes a value: 20%), 25% (50%) or 16 bits; its pulls (13 to 14 per
    // worker by now: the other may not have made its last) as floats or 16-bit.
    const double pushed = 2 * 12 * 300000 * 4.0, pulled = 2 * 14 * 300000 * 4.0;
    EXPECT_LT(r->server_bytes_in, 0.55 * pushed);
    // A warm-up of 4 steps: 63%, 40%, 25% and 16% of the values, then 10%: 37% of float32 in all (20% without).
    if (options.compression.warmup != 0) {
      EXPECT_GT(r->server_bytes_in, 0.3 * pushed);
    }
    if (options.compression.pull == CompressionKind::kNone) {
      EXPECT_GT(r->server_bytes_out, 27.0 / 28.0 * pulled);
    } else {
      EXPECT_LT(r->server_bytes_out, 0.55 * pulled);
    }
  }
  EXPECT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
}

INSTANTIATE_TEST_SUITE_P(Kinds, CompressedTest,
                         ::testing::Values(std::make_tuple("topk:0.1,pull=none", "sync", "shm"),
                                           std::make_tuple("topk:0.1,pull=none", "async", "tcp"),
                                           std::make_tuple("topk:0.1,pull=none,warmup=4", "sync", "tcp"),
                                           std::make_tuple("randomk:0.25,pull=none", "sync", "shm"),
                                           std::make_tuple("fp16", "sync", "tcp"),
                                           std::make_tuple("bf16,pull=none", "ssp:1", "shm")),
                         [](const auto& info) {
                           std::string name =
                               std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" + std::get<2>(info.param);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// A table whose rows travel compressed sends its ids sorted, delta coded
// where that is shorter (common/wire/id_coding.h): ids that are small integers
// take a byte or two instead of eight, in pushes and in pulls, and every
// sum stays exact. ",ids=raw" sends them as they are, for comparison.
TEST(InProcessTest, SmallIntegerTableIdsTravelDeltaCodedAlsoToBackupsAndTheSumsStayExact) {
  uint64_t bytes_in[2][2];  // [replicas - 1][coded, raw]
  for (int replicas : {1, 2}) {
    for (int raw : {0, 1}) {  // sums under 256: exact in bf16 pulls
      const char* compression = raw ? "bf16,ids=raw" : "bf16";
      testing::InProcessClusterOptions cluster_options;
      cluster_options.num_servers = 2;
      cluster_options.num_workers = 2;
      cluster_options.replicas = replicas;
      auto cluster = InProcessCluster::Start(cluster_options);
      ASSERT_TRUE(cluster.ok()) << cluster.status();
      ExactSumOptions options;
      options.steps = 12;
      options.dense_elements = 1000;  // under the threshold: float32, a few bytes
      options.table_ids = 2000;
      options.dense_table_ids = true;
      options.consistency = *Consistency::Parse("sync");
      options.compression = *CompressionSpec::Parse(compression);
      uint64_t in = 0;
      for (const auto& r : RunWorkers((*cluster)->scheduler_endpoint(), 2, options)) {
        ASSERT_TRUE(r.ok()) << compression << ": " << r.status();  // every row and value exact
        EXPECT_EQ(r->dense_sum, r->expected_sum);
        in = std::max(in, r->server_bytes_in);
      }
      bytes_in[replicas - 1][raw] = in;
      EXPECT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
    }
  }
  // Per worker and step: 2,000 ids pulled and 32 rows of 4 bf16 values
  // pushed. Raw: 8 bytes an id; coded: 1 byte (neighbours 1 apart, their
  // shard's ids about 2 apart). The rest (headers, the dense tensor) is the same.
  const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("server bytes in, one copy: %llu with delta coded ids, %llu raw\n", u(bytes_in[0][0]), u(bytes_in[0][1]));
  EXPECT_LT(bytes_in[0][0] * 2, bytes_in[0][1]);
  // Two copies: each primary also sends its backup the ids every pull read
  // (in the order of the updates, for the rows and admission counts), coded
  // as they came.
  ASSERT_GT(bytes_in[1][0], bytes_in[0][0]);
  ASSERT_GT(bytes_in[1][1], bytes_in[0][1]);
  const uint64_t coded_forwards = bytes_in[1][0] - bytes_in[0][0], raw_forwards = bytes_in[1][1] - bytes_in[0][1];
  std::printf("server bytes in, two copies: %llu coded, %llu raw; between the servers %llu coded, %llu raw\n",
              u(bytes_in[1][0]), u(bytes_in[1][1]), u(coded_forwards), u(raw_forwards));
  EXPECT_LT(bytes_in[1][0] * 2, bytes_in[1][1]);
  EXPECT_LT(coded_forwards * 2, raw_forwards) << "the pulled ids went to the backups at 8 bytes an id";
}

// --replicas=2 in sync mode: a dense slice's step reaches its backup once,
// as the step's sum (server/store/step_forwarding.h), not once per worker: with
// 3 workers the servers take in a third of the push bytes more than with
// one copy, not as much again; every sum stays exact.
TEST(InProcessTest, ReplicatedSyncStepsTravelOnceAsTheirSum) {
  constexpr int kWorkers = 3, kSteps = 10;
  constexpr int64_t kDense = 300000;
  std::vector<uint64_t> bytes_in;
  for (int replicas : {1, 2}) {
    testing::InProcessClusterOptions cluster_options;
    cluster_options.num_servers = 2;
    cluster_options.num_workers = kWorkers;
    cluster_options.replicas = replicas;
    auto cluster = InProcessCluster::Start(cluster_options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    ExactSumOptions options;
    options.steps = kSteps;
    options.dense_elements = kDense;
    options.slice_bytes = 256 << 10;  // several slices per server
    options.table_ids = 20;
    options.consistency = *Consistency::Parse("sync");
    const auto results = RunWorkers((*cluster)->scheduler_endpoint(), kWorkers, options);
    ExpectExact(results, kWorkers, kSteps, kDense);
    uint64_t in = 0;
    for (const auto& r : results) in = std::max(in, r.ok() ? r->server_bytes_in : 0);
    bytes_in.push_back(in);
    EXPECT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
  }
  // Every push of the last step was in (the last pull needed it) and its
  // step forwarded (the push's answer waited for that) before each worker
  // read the servers' counters.
  const double step_bytes = static_cast<double>(kSteps) * kDense * sizeof(float);
  const double forwarded = static_cast<double>(bytes_in[1]) - static_cast<double>(bytes_in[0]);
  std::printf("server bytes in: %llu with one copy, %llu with two: %.2f of the dense steps' bytes forwarded\n",
              static_cast<unsigned long long>(bytes_in[0]), static_cast<unsigned long long>(bytes_in[1]),
              forwarded / step_bytes);
  EXPECT_GT(forwarded, 0.95 * step_bytes);
  EXPECT_LT(forwarded, 1.2 * step_bytes) << "each worker's push forwarded would be " << kWorkers << "x";
}

// A job of `options.num_servers` servers keeping two copies of every slice,
// a server silent for 2 s declared dead (all beat every 0.2 s), and its one
// worker's client connected: for the tests that stop a server.
struct TwoCopyJob {
  std::unique_ptr<InProcessCluster> cluster;
  std::unique_ptr<KVClient> client;
};
absl::StatusOr<TwoCopyJob> StartTwoCopyJob(testing::InProcessClusterOptions options) {
  options.replicas = 2;
  options.heartbeat_timeout = absl::Seconds(2);
  options.heartbeat_interval = absl::Milliseconds(200);
  TwoCopyJob job;
  PS_ASSIGN_OR_RETURN(job.cluster, InProcessCluster::Start(options));
  KVClientOptions client;
  client.scheduler = job.cluster->scheduler_endpoint();
  client.heartbeat_interval = absl::Milliseconds(200);
  PS_ASSIGN_OR_RETURN(job.client, KVClient::Connect(client));
  return job;
}

// Server `i`'s stats, asked over `peer` in worker `node`'s name.
absl::StatusOr<StatsReplyMsg> RawStats(testing::RawPeer& peer, uint32_t node) {
  PS_RETURN_IF_ERROR(peer.Send(Envelope{kProtocolVersion, 1, node, StatsRequestMsg{}}));
  PS_ASSIGN_OR_RETURN(testing::RawReply reply, peer.Receive(absl::Seconds(10)));
  if (auto* stats = std::get_if<StatsReplyMsg>(&reply.env.body)) return *stats;
  return absl::InternalError(absl::StrCat("stats answered with ", BodyName(reply.env.body)));
}

// A pull of row 5 numbered `pull_id` over `peer`: whether it was served
// (not refused as routed to a server that does not lead the shard).
absl::StatusOr<bool> RawPullServed(testing::RawPeer& peer, uint32_t node, uint32_t key, uint64_t pull_id) {
  PullRequestMsg pull{0, {}, 10000, {RowsRequest{key, {5}}}};
  pull.pull_id = pull_id;
  PS_RETURN_IF_ERROR(peer.Send(Envelope{kProtocolVersion, 100 + pull_id, node, pull}));
  PS_ASSIGN_OR_RETURN(testing::RawReply reply, peer.Receive(absl::Seconds(10)));
  return std::holds_alternative<PullReplyMsg>(reply.env.body);
}

// --replicas=2, 3 servers, a table in one shard that admits a row on its
// second pull. A pull is counted on the shard's primary and its backup;
// the backup dies and the scheduler copies the shard onto the third
// server. That pull sent again (as a failover re-sends it: the same
// pull_id) admits the row on no copy, the new one included (the copy
// carried the pulls its image had counted); the next pull admits it on both.
TEST(InProcessTest, ACopyMadeAfterAPullDoesNotCountItAgain) {
  testing::InProcessClusterOptions cluster_options;
  cluster_options.num_servers = 3;
  absl::StatusOr<TwoCopyJob> job = StartTwoCopyJob(cluster_options);
  ASSERT_TRUE(job.ok()) << job.status();
  std::unique_ptr<InProcessCluster>& cluster = job->cluster;
  std::unique_ptr<KVClient>& client = job->client;
  ModelSpec model;
  model.tables = {{"admitted", 2, Initializer::Constant(1.0f)}};
  model.tables[0].admit_after = 2;
  model.placement.table_shards = 1;
  ASSERT_TRUE(client->RegisterModel(model).ok());
  const uint32_t key = client->partition_map().TableSlice(0, 0);
  const uint32_t node = client->node_id();
  std::vector<std::unique_ptr<testing::RawPeer>> peers;
  std::vector<int> holders;  // primary first
  for (int i = 0; i < 3; ++i) {
    auto peer = testing::RawPeer::Connect(cluster->server_endpoint(i));
    ASSERT_TRUE(peer.ok()) << peer.status();
    peers.push_back(*std::move(peer));
    absl::StatusOr<StatsReplyMsg> stats = RawStats(*peers[i], node);
    ASSERT_TRUE(stats.ok()) << stats.status();
    if (std::find(stats->held_keys.begin(), stats->held_keys.end(), key) == stats->held_keys.end()) continue;
    absl::StatusOr<bool> served = RawPullServed(*peers[i], node, key, 7);  // counted where it is served
    ASSERT_TRUE(served.ok()) << served.status();
    holders.insert(*served ? holders.begin() : holders.end(), i);
  }
  ASSERT_EQ(holders.size(), 2u);
  const int primary = holders[0], backup = holders[1], third = 3 - primary - backup;
  const auto rows = [&](int i) -> uint64_t {
    absl::StatusOr<StatsReplyMsg> stats = RawStats(*peers[i], node);
    return stats.ok() && stats->tables.size() == 1 ? stats->tables[0].rows : ~uint64_t{0};
  };
  EXPECT_EQ(rows(primary), 0u);
  EXPECT_EQ(cluster->StopServer(backup, absl::Seconds(10)).code(), absl::StatusCode::kCancelled);
  // Polled (a server cannot be asked to tell when it holds a copy), bounded.
  const auto copied = [&] {
    absl::StatusOr<StatsReplyMsg> stats = RawStats(*peers[third], node);
    return stats.ok() && std::find(stats->held_keys.begin(), stats->held_keys.end(), key) != stats->held_keys.end();
  };
  for (const absl::Time deadline = absl::Now() + absl::Seconds(30); !copied() && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(copied()) << "the shard was not copied onto server " << third;
  absl::StatusOr<bool> again = RawPullServed(*peers[primary], node, key, 7);
  ASSERT_TRUE(again.ok() && *again) << again.status();
  EXPECT_EQ(rows(primary), 0u);
  EXPECT_EQ(rows(third), 0u) << "the new copy counted the re-sent pull again: admitted after one pull";
  absl::StatusOr<bool> next = RawPullServed(*peers[primary], node, key, 8);
  ASSERT_TRUE(next.ok() && *next) << next.status();
  EXPECT_EQ(rows(primary), 1u);
  EXPECT_EQ(rows(third), 1u);
}

// --replicas=2, 2 servers, async: the backup of the model's slice refuses
// the third update forwarded to it, after acknowledging it (a fault the
// test injects), so its copy lacks a push its primary applied. The primary
// sends it a fresh copy of the slice; when the primary then stops, the
// backup it promotes holds every push, exactly.
TEST(InProcessTest, ABackupThatRefusedAnUpdateGetsAFreshCopyAndLosesNothing) {
  testing::InProcessClusterOptions cluster_options;
  cluster_options.num_servers = 2;
  std::atomic<int> refused{0};
  for (int i = 0; i < 2; ++i) {
    cluster_options.forward_faults.push_back([&refused, forwarded = 0](const PushRequestMsg& push) mutable {
      if (push.slices.empty() || push.pulled || ++forwarded != 3) return absl::OkStatus();
      ++refused;
      return absl::InternalError("a fault the test injected");
    });
  }
  absl::StatusOr<TwoCopyJob> job = StartTwoCopyJob(cluster_options);
  ASSERT_TRUE(job.ok()) << job.status();
  std::unique_ptr<InProcessCluster>& cluster = job->cluster;
  std::unique_ptr<KVClient>& client = job->client;
  ModelSpec model;
  model.tensors = {{"w", {1000}, Initializer::Zeros()}};
  model.consistency.mode = ConsistencyMode::kAsync;
  model.optimizer.learning_rate = 1.0f;
  ASSERT_TRUE(client->RegisterModel(model).ok());
  constexpr int kPushes = 10;
  std::vector<float> grad(1000);
  for (int step = 0; step < kPushes; ++step) {
    std::fill(grad.begin(), grad.end(), static_cast<float>(step + 1));
    const ConstTensorBuffer push[] = {{0, grad}};
    ASSERT_TRUE(client->Wait(client->Push(push, step)).ok());
  }
  EXPECT_EQ(refused.load(), 1);
  const int primary = client->partition_map().slices()[0].server;
  EXPECT_EQ(cluster->StopServer(primary, absl::Seconds(10)).code(), absl::StatusCode::kCancelled);
  std::vector<float> out(1000, 1.0f);
  const TensorBuffer pull[] = {{0, absl::MakeSpan(out)}};
  ASSERT_TRUE(client->Wait(client->Pull(pull, kPushes)).ok());
  // (The primary is gone: its backup, promoted, answers.)
  EXPECT_EQ(out, std::vector<float>(1000, -55.0f)) << "the promoted backup lacks a push (1 + 2 + ... + 10 = 55)";
}

// --replicas=2, 2 servers: what a server sends another while acting on a
// newer cluster view than the receiver's (a promotion, a server that
// joined) waits there for that view. A slice copy and a forward from a node
// the receiver does not know (yet) are held, and refused at their deadline
// when no such view comes; the same naming no newer view, or sent from the
// worker's node, are refused at once. Nothing is applied.
TEST(InProcessTest, PeerRequestsActingOnANewerViewWaitForItUntilTheirDeadline) {
  testing::InProcessClusterOptions cluster_options;
  cluster_options.num_servers = 2;
  cluster_options.default_pull_timeout = absl::Seconds(1);
  absl::StatusOr<TwoCopyJob> job = StartTwoCopyJob(cluster_options);
  ASSERT_TRUE(job.ok()) << job.status();
  ModelSpec model;
  model.tensors = {{"w", {1000}, Initializer::Constant(1.0f)}};
  model.consistency.mode = ConsistencyMode::kAsync;
  ASSERT_TRUE(job->client->RegisterModel(model).ok());
  absl::StatusOr<std::unique_ptr<testing::RawPeer>> peer = testing::RawPeer::Connect(job->cluster->server_endpoint(0));
  ASSERT_TRUE(peer.ok()) << peer.status();
  constexpr uint32_t kStranger = 4242;
  const uint32_t worker = job->client->node_id();
  uint64_t id = 0;
  const auto refusal = [&](uint32_t sender, Body body, int payloads) {
    std::vector<zmq::message_t> frames;
    frames.push_back(testing::RawPeer::HeaderFrame(Envelope{kProtocolVersion, ++id, sender, std::move(body)}));
    for (int i = 0; i < payloads; ++i) frames.push_back(testing::RawPeer::FloatFrame(1000, 5.0f));
    return (*peer)->Refusal(std::move(frames), id, absl::Seconds(20));
  };
  PushRequestMsg forward{0, {SliceData{0, 1000, 0}}, std::nullopt};
  forward.for_worker = 0;
  forward.seq = 1;
  for (const uint64_t epoch : {uint64_t{0}, uint64_t{1000}}) {
    forward.view_epoch = epoch;
    const SliceCopyMsg copy{0, {}, {}, epoch};
    for (const auto& [body, payloads] : {std::pair<Body, int>{copy, 2}, std::pair<Body, int>{forward, 1}}) {
      SCOPED_TRACE(absl::StrCat(BodyName(body), " naming view ", epoch));
      ErrorMsg e = refusal(worker, body, payloads);
      EXPECT_EQ(e.code, absl::StatusCode::kPermissionDenied) << e.message;
      EXPECT_THAT(e.message, HasSubstr("is not a server of this job"));
      const absl::Time sent = absl::Now();
      e = refusal(kStranger, body, payloads);
      if (epoch == 0) {
        EXPECT_EQ(e.code, absl::StatusCode::kPermissionDenied) << e.message;
        EXPECT_THAT(e.message, HasSubstr("node 4242 is not a server of this job"));
      } else {  // held for the view, then refused with its deadline
        EXPECT_EQ(e.code, absl::StatusCode::kDeadlineExceeded) << e.message;
        EXPECT_THAT(e.message, HasSubstr("no newer cluster view reached server"));
        EXPECT_GE(absl::Now() - sent, absl::Seconds(1));
      }
    }
  }
  std::vector<float> out(1000);
  const TensorBuffer pull[] = {{0, absl::MakeSpan(out)}};
  ASSERT_TRUE(job->client->Wait(job->client->Pull(pull, 0)).ok());
  EXPECT_EQ(out, std::vector<float>(1000, 1.0f));
}

// Two clients connected to a one-server job, for the error cases.
class ClientErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = InProcessCluster::Start(1, 2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    KVClientOptions options;
    options.scheduler = cluster_->scheduler_endpoint();
    options.request_timeout = absl::Milliseconds(500);
    auto other = std::async(std::launch::async, [options] { return KVClient::Connect(options); });
    auto first = KVClient::Connect(options);
    auto second = other.get();
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    clients_[(*first)->rank()] = *std::move(first);
    clients_[(*second)->rank()] = *std::move(second);
    model_.tensors = {{"w", {4, 3}, Initializer::Constant(2.0f)}, {"b", {3}, Initializer::Zeros()}};
    model_.optimizer.learning_rate = 1.0f;
  }

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<KVClient> clients_[2];
  ModelSpec model_;
};

TEST_F(ClientErrorsTest, RequestsBeforeRegistrationFail) {
  std::vector<float> out(12);
  TensorBuffer buf[] = {{0, absl::MakeSpan(out)}};
  EXPECT_EQ(clients_[0]->Wait(clients_[0]->Pull(buf, 0)).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClientErrorsTest, DifferentModelFromSecondWorkerIsRefused) {
  ASSERT_TRUE(clients_[0]->RegisterModel(model_).ok());
  ModelSpec other = model_;
  other.tensors[1].shape = {4};
  absl::Status s = clients_[1]->RegisterModel(other);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("differs"));
  EXPECT_TRUE(clients_[1]->RegisterModel(model_).ok());
}

TEST_F(ClientErrorsTest, BadBuffersAndTicketsGetSpecificErrors) {
  ASSERT_TRUE(clients_[0]->RegisterModel(model_).ok());
  std::vector<float> small(5), right(12);
  const ConstTensorBuffer wrong_size[] = {{0, small}};
  EXPECT_EQ(clients_[0]->Wait(clients_[0]->Push(wrong_size, 0)).code(), absl::StatusCode::kInvalidArgument);
  const ConstTensorBuffer unknown[] = {{7, right}};
  EXPECT_EQ(clients_[0]->Wait(clients_[0]->Push(unknown, 0)).code(), absl::StatusCode::kNotFound);
  const ConstTensorBuffer twice[] = {{0, right}, {0, right}};
  EXPECT_EQ(clients_[0]->Wait(clients_[0]->Push(twice, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(clients_[0]->Wait(987654).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(clients_[0]->TensorIndex("nope").status().code(), absl::StatusCode::kNotFound);
}

// A tensor in 3 slices pushed and pulled a part at a time (the way a
// trainer overlaps a large layer's exchange with its computation): each
// part's pull sees that part updated; the step completes once every part is
// in; a part that is not whole slices is refused naming the tensor.
TEST_F(ClientErrorsTest, PartsOfATensorThatAreWholeSlicesArePushedAndPulledAlone) {
  model_.tensors = {{"w", {6, 50}, Initializer::Constant(2.0f)}};
  model_.placement.slice_bytes = 400;                 // 3 slices of 100 elements
  model_.consistency = *Consistency::Parse("async");  // the other worker pushes nothing
  ASSERT_TRUE(clients_[0]->RegisterModel(model_).ok());
  ASSERT_EQ(clients_[0]->partition_map().SlicesOfTensor(0).size(), 3u);
  std::vector<float> grad(300, 1.0f), params(300, -1.0f);
  const ConstTensorBuffer first_grad[] = {{0, absl::MakeConstSpan(grad).first(100), 0}};
  TensorBuffer first_out[] = {{0, absl::MakeSpan(params).first(100), 0}};
  ASSERT_TRUE(clients_[0]->Wait(clients_[0]->PushPull(first_grad, first_out, 0)).ok());
  EXPECT_EQ(params, [] {
    std::vector<float> want(300, -1.0f);   // only the part asked for was written
    std::fill_n(want.begin(), 100, 1.0f);  // 2 - lr 1 x gradient 1
    return want;
  }());
  const ConstTensorBuffer rest_grad[] = {{0, absl::MakeConstSpan(grad).subspan(100), 100}};
  TensorBuffer rest_out[] = {{0, absl::MakeSpan(params).subspan(100), 100}};
  ASSERT_TRUE(clients_[0]->Wait(clients_[0]->PushPull(rest_grad, rest_out, 0)).ok());
  EXPECT_EQ(params, std::vector<float>(300, 1.0f));

  const ConstTensorBuffer straddling[] = {{0, absl::MakeConstSpan(grad).subspan(50, 100), 50}};
  const absl::Status refused = clients_[0]->Wait(clients_[0]->Push(straddling, 1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              HasSubstr("tensor 'w' has 300 elements in 3 slices; a buffer of elements [50, 150) is not whole slices"));
  const ConstTensorBuffer beyond[] = {{0, absl::MakeConstSpan(grad).first(200), 200}};
  EXPECT_EQ(clients_[0]->Wait(clients_[0]->Push(beyond, 1)).code(), absl::StatusCode::kInvalidArgument);
  TensorBuffer all[] = {{0, absl::MakeSpan(params)}};
  ASSERT_TRUE(clients_[0]->Wait(clients_[0]->Pull(all, 1)).ok());
  EXPECT_EQ(params, std::vector<float>(300, 1.0f));  // the refused pushes changed nothing
}

TEST_F(ClientErrorsTest, BadRowBuffersGetSpecificErrorsAndRepeatedIdsAreMerged) {
  model_.tables = {TableSpec{"emb", 3, Initializer::Constant(1.0f)}};
  model_.consistency.mode = ConsistencyMode::kAsync;
  ASSERT_TRUE(clients_[0]->RegisterModel(model_).ok());
  KVClient& c = *clients_[0];
  const int emb = *c.TableIndex("emb");
  EXPECT_EQ(c.TableIndex("w").status().code(), absl::StatusCode::kNotFound);
  const std::vector<uint64_t> ids = {9, 4, 9};
  std::vector<float> short_rows(8), rows(9, 1.0f);
  const ConstRowBuffer wrong_size[] = {{emb, ids, short_rows}};
  const absl::Status s = c.Wait(c.PushRows(wrong_size, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("3 ids of dim 3 need 9 floats; buffer has 8"));
  const ConstRowBuffer unknown[] = {{5, ids, rows}};
  EXPECT_EQ(c.Wait(c.PushRows(unknown, 0)).code(), absl::StatusCode::kNotFound);
  const ConstRowBuffer twice[] = {{emb, ids, rows}, {emb, ids, rows}};
  EXPECT_THAT(c.Wait(c.PushRows(twice, 0)).message(), HasSubstr("listed twice"));
  // Id 9 twice: one row, its gradients summed (SGD, lr 1): 1 - 2 = -1.
  const ConstRowBuffer grads[] = {{emb, ids, rows}};
  ASSERT_TRUE(c.Wait(c.PushRows(grads, 0)).ok());
  std::vector<float> out(9);
  const RowBuffer pull[] = {{emb, ids, absl::MakeSpan(out)}};
  ASSERT_TRUE(c.Wait(c.PullRows(pull, 1)).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(-1, -1, -1, 0, 0, 0, -1, -1, -1));
  absl::StatusOr<ServerStats> stats = c.GetServerStats(0);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->tables.size(), 1u);
  EXPECT_EQ(stats->tables[0].rows, 2u);
  EXPECT_EQ(stats->tables[0].rows_pushed, 2u);  // 9 merged
}

// A table whose rows travel in bf16: the client sorts each shard's ids for
// delta coding, except a shard whose ids are too far apart to gain (here
// the shards holding hashed ids). Rows land on their ids either way, and
// repeated ids still add up.
TEST_F(ClientErrorsTest, RowsOfShardsSortedAndNotLandOnTheirIds) {
  model_.tables = {TableSpec{"emb", 2, Initializer::Constant(1.0f)}};
  model_.tables[0].compression = *CompressionSpec::Parse("bf16");
  model_.placement.table_shards = 4;
  model_.consistency.mode = ConsistencyMode::kAsync;
  ASSERT_TRUE(clients_[0]->RegisterModel(model_).ok());
  KVClient& c = *clients_[0];
  // Small ids on every shard, hashed ones on every shard but 0, a repeat.
  std::vector<uint64_t> ids;
  for (uint64_t i = 300; i > 0; i -= 3) ids.push_back(i);
  for (uint64_t k = 0; k < 40; ++k) {
    if (TableRowShard(TableHash("emb"), Mix64(k), 4) != 0) ids.push_back(Mix64(k));
  }
  ids.push_back(150);
  std::vector<float> grads;
  std::map<uint64_t, float> want;  // 1 minus every gradient of the id (SGD, lr 1)
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto g = static_cast<float>(i % 7 + 1);
    grads.insert(grads.end(), {g, -g});
    want.try_emplace(ids[i], 1.0f);
    want[ids[i]] -= g;
  }
  const ConstRowBuffer push[] = {{0, ids, grads}};
  ASSERT_TRUE(c.Wait(c.PushRows(push, 0)).ok());
  std::vector<float> out(2 * ids.size());
  const RowBuffer pull[] = {{0, ids, absl::MakeSpan(out)}};
  ASSERT_TRUE(c.Wait(c.PullRows(pull, 1)).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(out[2 * i], want[ids[i]]) << "id " << ids[i];
    EXPECT_EQ(out[2 * i + 1], 2.0f - want[ids[i]]) << "id " << ids[i];
  }
}

TEST_F(ClientErrorsTest, SyncPullForAStepNobodyFinishedTimesOutNamingTheMissingWorkers) {
  ASSERT_TRUE(clients_[0]->RegisterModel(model_).ok());
  ASSERT_TRUE(clients_[1]->RegisterModel(model_).ok());
  std::vector<float> grad(12, 1.0f), out(12);
  const ConstTensorBuffer push[] = {{0, grad}};
  ASSERT_TRUE(clients_[0]->Wait(clients_[0]->Push(push, 0)).ok());
  TensorBuffer pull[] = {{0, absl::MakeSpan(out)}};
  absl::Status s = clients_[0]->Wait(clients_[0]->Pull(pull, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("still needs pushes from workers [1]"));
  // The second worker's push completes the step: the value is the mean.
  ASSERT_TRUE(clients_[1]->Wait(clients_[1]->Push(push, 0)).ok());
  ASSERT_TRUE(clients_[0]->Wait(clients_[0]->Pull(pull, 1)).ok());
  EXPECT_EQ(out, std::vector<float>(12, 1.0f));  // 2 - 1 * mean(1, 1)
}

TEST_F(ClientErrorsTest, BarrierTimesOutNamingWhoDidNotArrive) {
  absl::Status s = clients_[0]->Barrier("lonely", absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("workers not arrived: [1]"));
}

TEST_F(ClientErrorsTest, JobEndsWhenBothWorkersFinish) {
  ASSERT_TRUE(clients_[0]->Finish().ok());
  ASSERT_TRUE(clients_[1]->Finish().ok());
  EXPECT_TRUE(cluster_->Join(absl::Seconds(10)).ok());
}

// Over sockets, a caller sends its requests and reads its replies on its
// own thread (KVClientOptions::caller_io), also with several threads waiting
// on one client at once, spinning before they sleep or not; a client with
// caller_io off leaves all of it to its I/O thread. Every push is applied
// exactly once either way.
TEST(CallerIoTest, CallersDoTheirOwnIoAndEveryPushLandsOnce) {
  auto cluster = InProcessCluster::Start(1, 3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  KVClientOptions options;
  options.scheduler = (*cluster)->scheduler_endpoint();
  options.shm = false;
  KVClientOptions through_thread = options;
  through_thread.caller_io = false;
  KVClientOptions no_spin = options;  // callers that sleep at once (the default spins first)
  no_spin.caller_spin = absl::ZeroDuration();
  auto other = std::async(std::launch::async, [&] { return KVClient::Connect(through_thread); });
  auto third = std::async(std::launch::async, [&] { return KVClient::Connect(no_spin); });
  auto direct = KVClient::Connect(options);
  auto indirect = other.get();
  auto sleeper = third.get();
  ASSERT_TRUE(direct.ok()) << direct.status();
  ASSERT_TRUE(indirect.ok()) << indirect.status();
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  ModelSpec model;
  model.tensors = {{"w", {1000}, Initializer::Zeros()}};
  model.optimizer.learning_rate = 1.0f;  // SGD: each push of -1 adds 1
  model.consistency = *Consistency::Parse("async");
  ASSERT_TRUE((*direct)->RegisterModel(model).ok());
  ASSERT_TRUE((*indirect)->RegisterModel(model).ok());
  ASSERT_TRUE((*sleeper)->RegisterModel(model).ok());
  const auto push_pull = [](KVClient& client, int times) {
    std::vector<float> grad(1000, -1.0f), params(1000);
    for (int i = 0; i < times; ++i) {
      const ConstTensorBuffer g[] = {{0, grad}};
      TensorBuffer p[] = {{0, absl::MakeSpan(params)}};
      if (absl::Status s = client.Wait(client.PushPull(g, p, i)); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  ASSERT_TRUE(push_pull(**direct, 50).ok());
  EXPECT_GE((*direct)->stats().caller_requests_sent, 25u) << "most requests go out from the caller's thread";
  EXPECT_GE((*direct)->stats().caller_messages_read, 25u) << "most replies are read by the caller";
  std::vector<std::future<absl::Status>> threads;
  for (int t = 0; t < 4; ++t) {
    threads.push_back(std::async(std::launch::async, [&] { return push_pull(**direct, 25); }));
  }
  threads.push_back(std::async(std::launch::async, [&] { return push_pull(**indirect, 50); }));
  for (int t = 0; t < 2; ++t) {
    threads.push_back(std::async(std::launch::async, [&] { return push_pull(**sleeper, 25); }));
  }
  for (auto& t : threads) EXPECT_TRUE(t.get().ok());
  EXPECT_GE((*sleeper)->stats().caller_messages_read, 25u) << "without spinning, callers still read their replies";
  EXPECT_EQ((*indirect)->stats().caller_requests_sent, 0u);
  EXPECT_EQ((*indirect)->stats().caller_messages_read, 0u);
  for (KVClient* client : {direct->get(), indirect->get(), sleeper->get()}) {
    std::vector<float> params(1000);
    TensorBuffer p[] = {{0, absl::MakeSpan(params)}};
    ASSERT_TRUE(client->Wait(client->Pull(p, 0)).ok());
    EXPECT_EQ(params, std::vector<float>(1000, 250.0f)) << "50 + 4 x 25 + 50 + 2 x 25 pushes of 1";
  }
  EXPECT_TRUE((*direct)->Finish().ok());
  EXPECT_TRUE((*indirect)->Finish().ok());
  EXPECT_TRUE((*sleeper)->Finish().ok());
  EXPECT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
}

TEST(DeadServerTest, RequestsEndByTheirDeadlineAndTheRestInFlightFailAtOnce) {
  auto cluster = InProcessCluster::Start(1, 1);
  ASSERT_TRUE(cluster.ok());
  KVClientOptions options;
  options.scheduler = (*cluster)->scheduler_endpoint();
  options.request_timeout = absl::Milliseconds(300);
  auto client = KVClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ModelSpec model;
  model.tensors = {{"w", {1000}, Initializer::Zeros()}};
  model.consistency.mode = ConsistencyMode::kAsync;
  ASSERT_TRUE((*client)->RegisterModel(model).ok());
  EXPECT_EQ((*cluster)->StopServer(0, absl::Seconds(10)).code(), absl::StatusCode::kCancelled);
  std::vector<float> grad(1000, 1.0f), out(1000);
  // A pull may wait for its server's own answer longer (request timeout plus
  // a grace) than a push; the push expires first, which resets the socket and
  // ends the pull at once.
  TensorBuffer pull[] = {{0, absl::MakeSpan(out)}};
  const KVClient::Ticket p = (*client)->Pull(pull, 0);
  const ConstTensorBuffer push[] = {{0, grad}};
  const KVClient::Ticket q = (*client)->Push(push, 0);
  const absl::Status push_status = (*client)->Wait(q);
  EXPECT_EQ(push_status.code(), absl::StatusCode::kDeadlineExceeded) << push_status;
  const absl::Status pull_status = (*client)->Wait(p);
  EXPECT_EQ(pull_status.code(), absl::StatusCode::kUnavailable) << pull_status;
  // Unavailable (not its own DeadlineExceeded): ended by the reset.
  EXPECT_THAT(pull_status.message(), HasSubstr("connection reset"));
}

TEST(ClusterFormingTest, MissingWorkerEndsTheJobWithAnErrorNamingIt) {
  auto cluster = InProcessCluster::Start(1, 2, absl::Milliseconds(700));
  ASSERT_TRUE(cluster.ok());
  KVClientOptions options;
  options.scheduler = (*cluster)->scheduler_endpoint();
  options.register_timeout = absl::Seconds(10);
  auto client = KVClient::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(client.status().message(), HasSubstr("missing 0 server(s) and 1 worker(s)"));
  absl::Status s = (*cluster)->Join(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;  // the server was told the job ended
}

// A worker announces its stage link's endpoint when it registers,
// and its neighbour finds it in the cluster view and dials it.
TEST(StageLinkThroughTheViewTest, AWorkerDialsTheEndpointItsNeighbourAnnounced) {
  auto cluster = InProcessCluster::Start(1, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<StageLink> listeners[2];
  KVClientOptions options[2];
  for (int i = 0; i < 2; ++i) {
    auto l = StageLink::Listen("tcp://127.0.0.1:0", "127.0.0.1", NodeSecurity(), "", "the previous stage");
    ASSERT_TRUE(l.ok()) << l.status();
    listeners[i] = *std::move(l);
    options[i].scheduler = (*cluster)->scheduler_endpoint();
    options[i].advertise = listeners[i]->endpoint();
  }
  auto other = std::async(std::launch::async, [&] { return KVClient::Connect(options[1]); });
  auto first = KVClient::Connect(options[0]);
  auto second = other.get();
  ASSERT_TRUE(first.ok() && second.ok()) << first.status() << " " << second.status();
  KVClient* by_rank[2];
  StageLink* listener_of_rank[2];
  by_rank[(*first)->rank()] = first->get();
  by_rank[(*second)->rank()] = second->get();
  listener_of_rank[(*first)->rank()] = listeners[0].get();
  listener_of_rank[(*second)->rank()] = listeners[1].get();
  // Rank 0 (stage 0) looks rank 1 up and dials the endpoint it announced.
  absl::StatusOr<WorkerInfo> next = by_rank[0]->Worker(1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->endpoint, listener_of_rank[1]->endpoint());
  EXPECT_EQ(by_rank[1]->Worker(0)->endpoint, listener_of_rank[0]->endpoint());
  EXPECT_EQ(by_rank[0]->Worker(2).status().code(), absl::StatusCode::kNotFound);
  auto link = StageLink::Dial(next->endpoint, NodeSecurity(), next->public_key, "stage 1");
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_TRUE((*link)->Send(StageLink::Kind::kActivations, 0, 0, 1, 2, {4.0f, 5.0f}).ok());
  auto got = listener_of_rank[1]->Receive(StageLink::Kind::kActivations, 0, 0, 2, 1, absl::Seconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->data(), ::testing::ElementsAre(4.0f, 5.0f));
  for (KVClient* c : by_rank) EXPECT_TRUE(c->Finish().ok());
  EXPECT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
}

}  // namespace
}  // namespace ps
