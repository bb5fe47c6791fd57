// Serving replicas following a running job (server/serving/serving_follower.h,
// server/feed/serving_feed.h): a whole job in one process, exact-sum workers
// training while replicas answer reads. Sync: every dense answer is the
// training model after the step it names, exactly. Every mode: a replica
// that joins late gets there too, and once the job ends both serve its final
// model, equal bit for bit to the export of the servers' last checkpoints.

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/export/exporter.h"
#include "server/serving/serving_follower.h"
#include "server/serving/serving_replica.h"
#include "tests/cluster_fixture.h"
#include "tests/raw_peer.h"
#include "worker/client/serving_client.h"
#include "worker/exact_sum/exact_sum_check.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using testing::InProcessCluster;

constexpr int kWorkers = 2;
constexpr int kSteps = 60;
constexpr int64_t kDense = 20000;

// A serving replica following the job at `scheduler`, on two threads.
class Follower {
 public:
  static absl::StatusOr<std::unique_ptr<Follower>> Start(const std::string& scheduler, absl::Duration interval) {
    auto f = std::unique_ptr<Follower>(new Follower());
    ServingVersion none;
    none.source = "nothing yet";
    PS_ASSIGN_OR_RETURN(
        f->replica_,
        ServingReplica::Start(ServingOptions{}, std::make_unique<ServingModel>(
                                                    absl::flat_hash_map<std::string, ServingModel::Tensor>{},
                                                    absl::flat_hash_map<std::string, ServingModel::Table>{}, none)));
    FollowOptions options;
    options.scheduler = scheduler;
    options.sync_interval = interval;
    PS_ASSIGN_OR_RETURN(f->follower_, ServingFollower::Create(options, f->replica_->mutable_model()));
    f->serving_ = std::thread([p = f.get()] { (void)p->replica_->Run(); });
    f->followed_ = std::async(std::launch::async, [p = f.get()] { return p->follower_->Run(); });
    return f;
  }
  ~Follower() {
    follower_->RequestStop();
    if (followed_.valid()) followed_.wait();
    replica_->RequestStop();
    serving_.join();
  }
  const std::string& endpoint() const { return replica_->endpoint(); }
  const ServingModel& model() const { return replica_->model(); }
  const ServingFollower& follower() const { return *follower_; }
  // The follower's end: OK once the job's last rounds are in.
  absl::Status Followed(absl::Duration timeout) {
    if (followed_.wait_for(absl::ToChronoSeconds(timeout)) != std::future_status::ready) {
      return absl::DeadlineExceededError("the follower still runs");
    }
    return followed_.get();
  }

 private:
  Follower() = default;
  std::unique_ptr<ServingReplica> replica_;
  std::unique_ptr<ServingFollower> follower_;
  std::thread serving_;
  std::future<absl::Status> followed_;
};

double Sum(const std::vector<float>& values) {
  double sum = 0;
  for (float v : values) sum += v;
  return sum;
}

// Every tensor and table of the export of `dir` against what `model` serves, bit for bit.
void ExpectServesTheExport(const ServingModel& model, const std::string& dir) {
  absl::StatusOr<ExportedArrays> exported = ExportCheckpointsToMemory(dir);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(model.version().step, *std::max_element(exported->summary.steps.begin(), exported->summary.steps.end()));
  for (const TensorSpec& t : exported->summary.model.tensors) {
    absl::StatusOr<ServingModel::Tensor> served = model.Dense(t.name);
    ASSERT_TRUE(served.ok()) << served.status();
    for (size_t i = 0; i < exported->arrays.size(); ++i) {
      if (exported->arrays[i].name != t.name) continue;
      ASSERT_EQ(served->values.size() * sizeof(float), exported->bytes[i].size()) << t.name;
      EXPECT_EQ(std::memcmp(served->values.data(), exported->bytes[i].data(), exported->bytes[i].size()), 0) << t.name;
    }
  }
  for (const TableSpec& t : exported->summary.model.tables) {
    const std::string *ids = nullptr, *rows = nullptr;
    for (size_t i = 0; i < exported->arrays.size(); ++i) {
      if (exported->arrays[i].name == t.name + ".ids") ids = &exported->bytes[i];
      if (exported->arrays[i].name == t.name + ".rows") rows = &exported->bytes[i];
    }
    ASSERT_TRUE(ids != nullptr && rows != nullptr) << t.name;
    std::vector<uint64_t> id_list(ids->size() / sizeof(uint64_t));
    std::memcpy(id_list.data(), ids->data(), ids->size());
    std::vector<float> out(id_list.size() * t.dim);
    std::vector<uint8_t> found(id_list.size());
    ASSERT_TRUE(model.Lookup(t.name, id_list, absl::MakeSpan(out), absl::MakeSpan(found)).ok());
    ASSERT_EQ(out.size() * sizeof(float), rows->size());
    EXPECT_EQ(std::memcmp(out.data(), rows->data(), rows->size()), 0) << "table " << t.name;
  }
}

class ServingFollowTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ServingFollowTest, RepliciasFollowTrainingAndServeTheFinalModelAsExported) {
  const bool sync = GetParam() == "sync";
  testing::ScopedTempDir dir;
  testing::InProcessClusterOptions cluster_options;
  cluster_options.num_servers = 2;
  cluster_options.num_workers = kWorkers;
  cluster_options.checkpoint_dir = dir.path();
  auto cluster = InProcessCluster::Start(cluster_options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto first = Follower::Start((*cluster)->scheduler_endpoint(), absl::Milliseconds(20));
  ASSERT_TRUE(first.ok()) << first.status();

  ExactSumOptions options;
  options.client.scheduler = (*cluster)->scheduler_endpoint();
  options.steps = kSteps;
  options.dense_elements = kDense;
  options.slice_bytes = 16 << 10;  // several slices on each server
  options.consistency = *Consistency::Parse(GetParam());
  options.step_time = absl::Milliseconds(15);
  std::vector<std::future<absl::StatusOr<ExactSumResult>>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(std::async(std::launch::async, [options] { return RunExactSumCheck(options); }));
  }

  // Reads while training: each dense answer against the step it names.
  std::atomic<bool> trained{false};
  std::set<uint64_t> steps_seen;
  std::vector<std::string> wrong;
  std::thread reader([&] {
    auto client = ServingClient::Connect(ServingClientOptions{{(*first)->endpoint()}});
    ASSERT_TRUE(client.ok()) << client.status();
    while (!trained.load()) {
      absl::StatusOr<ServingClient::Tensor> dense = (*client)->Dense("dense");
      absl::StatusOr<ServingClient::Tensor> clock = (*client)->Dense("clock");
      if (!dense.ok() || !clock.ok()) {  // no round yet: the model is not there
        absl::SleepFor(absl::Milliseconds(1));
        continue;
      }
      const uint64_t step = dense->version.step;
      steps_seen.insert(step);
      if (sync && (!dense->version.exact || Sum(dense->values) != testing::ExpectedDenseSum(kWorkers, step, kDense))) {
        wrong.push_back(absl::StrCat("step ", step, ": dense sums to ", Sum(dense->values)));
      }
      if (sync && clock->values != std::vector<float>(kWorkers, static_cast<float>(clock->version.step))) {
        wrong.push_back(
            absl::StrCat("step ", clock->version.step, ": clocks ", clock->values[0], ", ", clock->values[1]));
      }
    }
  });
  // A second replica joins once the first has had rounds: a snapshot first.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((*first)->follower().rounds_published() < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  auto late = Follower::Start((*cluster)->scheduler_endpoint(), absl::Milliseconds(20));
  ASSERT_TRUE(late.ok()) << late.status();

  for (auto& w : workers) {
    absl::StatusOr<ExactSumResult> r = w.get();
    ASSERT_TRUE(r.ok()) << r.status();
  }
  trained.store(true);
  reader.join();
  ASSERT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
  EXPECT_TRUE((*first)->Followed(absl::Seconds(20)).ok());
  EXPECT_TRUE((*late)->Followed(absl::Seconds(20)).ok());

  EXPECT_THAT(wrong, ::testing::IsEmpty());
  EXPECT_GE(steps_seen.size(), 3u) << "too few rounds reached the reader while the job trained";
  EXPECT_GE((*first)->follower().rounds_published(), 3u);
  for (Follower* f : {first->get(), late->get()}) {
    if (sync) EXPECT_EQ(f->model().version().step, static_cast<uint64_t>(kSteps));  // async: updates applied
    EXPECT_EQ(f->model().version().exact, sync);
    ExpectServesTheExport(f->model(), dir.path());
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ServingFollowTest, ::testing::Values("sync", "async"),
                         [](const auto& info) { return info.param; });

// What a training server and its scheduler refuse of a replica, and a
// replica of a round; each goes on serving.
TEST(ServingFollowErrorsTest, MisdirectedServingRequestsGetErrorsNamingThem) {
  auto cluster = InProcessCluster::Start(1, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto scheduler = testing::RawPeer::Connect((*cluster)->scheduler_endpoint());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const auto refusal = [](testing::RawPeer& peer, ServingKind kind, uint64_t id) {
    std::vector<zmq::message_t> frames;
    frames.push_back(testing::RawPeer::HeaderFrame(Envelope{kProtocolVersion, id, 0, ServingRequestMsg{kind}}));
    return peer.Refusal(std::move(frames), id, absl::Seconds(10));
  };
  ErrorMsg forming = refusal(**scheduler, ServingKind::kSubscribe, 1);
  EXPECT_EQ(forming.code, absl::StatusCode::kUnavailable) << forming.message;
  EXPECT_THAT(forming.message, HasSubstr("not running"));
  // The job forms (both workers register), no model yet.
  KVClientOptions client;
  client.scheduler = (*cluster)->scheduler_endpoint();
  auto other = std::async(std::launch::async, [client] { return KVClient::Connect(client); });
  auto worker = KVClient::Connect(client);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(other.get().ok());
  ErrorMsg unplaced = refusal(**scheduler, ServingKind::kSubscribe, 6);
  EXPECT_EQ(unplaced.code, absl::StatusCode::kUnavailable);
  EXPECT_THAT(unplaced.message, HasSubstr("not placed yet"));
  ErrorMsg round = refusal(**scheduler, ServingKind::kRound, 2);
  EXPECT_EQ(round.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(round.message, HasSubstr("asked of a server"));
  auto server = testing::RawPeer::Connect((*cluster)->server_endpoint(0));
  ASSERT_TRUE(server.ok()) << server.status();
  ErrorMsg no_model = refusal(**server, ServingKind::kRound, 3);
  EXPECT_EQ(no_model.code, absl::StatusCode::kUnavailable);
  EXPECT_THAT(no_model.message, HasSubstr("holds no model yet"));
  ErrorMsg lookup = refusal(**server, ServingKind::kLookup, 4);
  EXPECT_EQ(lookup.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(lookup.message, HasSubstr("lookups go to a replica"));

  auto replica = Follower::Start((*cluster)->scheduler_endpoint(), absl::Milliseconds(50));
  ASSERT_TRUE(replica.ok()) << replica.status();
  auto peer = testing::RawPeer::Connect((*replica)->endpoint());
  ASSERT_TRUE(peer.ok()) << peer.status();
  ErrorMsg to_replica = refusal(**peer, ServingKind::kRound, 5);
  EXPECT_EQ(to_replica.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(to_replica.message, HasSubstr("a round is asked of a training server"));
}

}  // namespace
}  // namespace ps
