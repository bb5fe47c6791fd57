#include "benchmarks/serving_follow.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmarks/zipf.h"
#include "common/base/status_macros.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "server/serving/serving_follower.h"
#include "server/serving/serving_replica.h"
#include "worker/client/kv_client.h"

namespace ps {
namespace {

// A scheduler and two servers on threads, stopped and joined on destruction.
class LocalJob {
 public:
  static absl::StatusOr<std::unique_ptr<LocalJob>> Start() {
    auto job = std::unique_ptr<LocalJob>(new LocalJob());
    SchedulerOptions so;
    so.num_servers = 2;
    so.num_workers = 1;
    PS_ASSIGN_OR_RETURN(job->scheduler_, Scheduler::Create(so));
    for (int i = 0; i < 2; ++i) {
      ServerOptions o;
      o.scheduler = job->scheduler_->endpoint();
      o.num_threads = 1;
      PS_ASSIGN_OR_RETURN(job->servers_.emplace_back(), Server::Create(o));
    }
    job->threads_.emplace_back([p = job.get()] { (void)p->scheduler_->Run(); });
    for (auto& s : job->servers_) job->threads_.emplace_back([&s] { (void)s->Run(); });
    return job;
  }
  ~LocalJob() {
    scheduler_->RequestStop();
    for (auto& s : servers_) s->RequestStop();
    for (auto& t : threads_) t.join();
  }
  const std::string& scheduler() const { return scheduler_->endpoint(); }

 private:
  LocalJob() = default;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::thread> threads_;
};

// A replica following the job, on two threads.
struct Replica {
  std::unique_ptr<ServingReplica> replica;
  std::unique_ptr<ServingFollower> follower;
  std::thread serving, following;
  ~Replica() {
    follower->RequestStop();
    replica->RequestStop();
    if (following.joinable()) following.join();
    if (serving.joinable()) serving.join();
  }
};

absl::StatusOr<std::unique_ptr<Replica>> StartReplica(const std::string& scheduler, absl::Duration interval) {
  auto r = std::make_unique<Replica>();
  PS_ASSIGN_OR_RETURN(
      r->replica, ServingReplica::Start(ServingOptions{}, std::make_unique<ServingModel>(
                                                              absl::flat_hash_map<std::string, ServingModel::Tensor>{},
                                                              absl::flat_hash_map<std::string, ServingModel::Table>{},
                                                              ServingVersion{})));
  FollowOptions options;
  options.scheduler = scheduler;
  options.sync_interval = interval;
  PS_ASSIGN_OR_RETURN(r->follower, ServingFollower::Create(options, r->replica->mutable_model()));
  r->serving = std::thread([p = r.get()] { (void)p->replica->Run(); });
  r->following = std::thread([p = r.get()] { (void)p->follower->Run(); });
  return r;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

ModelSpec FollowModel(const FollowRun& run) {
  ModelSpec model;
  model.tensors = {{"probe", {1}, Initializer::Zeros()}};
  model.tables = {{"emb", run.dim, Initializer::Zeros()}};
  model.optimizer.kind = OptimizerKind::kSgd;
  model.optimizer.learning_rate = 1.0f;
  model.consistency.mode = ConsistencyMode::kAsync;
  return model;
}

// The probe's pushes, each one's completion time by the value it leaves (k after k pushes).
struct Probe {
  absl::Mutex mu;
  std::vector<absl::Time> done;  // [k - 1]: push k completed
};

// Watches the first replica's probe: each new value, the freshness of every push it newly shows.
std::vector<double> WatchProbe(const ServingModel& model, Probe& probe, const std::atomic<bool>& stop) {
  std::vector<double> fresh_ms;
  uint64_t shown = 0;
  while (!stop.load()) {
    absl::StatusOr<ServingModel::Tensor> t = model.Dense("probe");
    const absl::Time now = absl::Now();
    const uint64_t value = t.ok() && !t->values.empty() ? static_cast<uint64_t>(t->values[0]) : 0;
    if (value > shown) {
      absl::MutexLock lock(&probe.mu);
      for (uint64_t k = shown + 1; k <= value && k <= probe.done.size(); ++k) {
        fresh_ms.push_back(absl::ToDoubleMilliseconds(now - probe.done[k - 1]));
      }
      shown = value;
    }
    absl::SleepFor(absl::Microseconds(500));  // the reader's resolution
  }
  return fresh_ms;
}

// Pushes a batch of rows and the probe each step for run.duration; the steps made.
absl::StatusOr<int64_t> Train(KVClient& client, const FollowRun& run, Probe& probe) {
  std::mt19937_64 rng(42);
  bench::ZipfSampler zipf(run.ids, run.zipf_s > 0 ? run.zipf_s : 1.0);
  std::uniform_int_distribution<uint64_t> uniform(0, run.ids - 1);
  std::vector<uint64_t> ids(run.batch);
  const std::vector<float> rows(static_cast<size_t>(run.batch) * run.dim, -0.01f), minus_one(1, -1.0f);
  const int probe_tensor = *client.TensorIndex("probe"), table = *client.TableIndex("emb");
  const absl::Time start = absl::Now();
  int64_t steps = 0;
  for (; absl::Now() - start < run.duration; ++steps) {
    for (uint64_t& id : ids) id = run.zipf_s > 0 ? zipf(rng) - 1 : uniform(rng);
    std::sort(ids.begin(), ids.end());
    const auto end = std::unique(ids.begin(), ids.end());
    const size_t n = static_cast<size_t>(end - ids.begin());
    const ConstRowBuffer push_rows[] = {
        {table, absl::MakeConstSpan(ids.data(), n), absl::MakeConstSpan(rows.data(), n * run.dim)}};
    const ConstTensorBuffer push[] = {{probe_tensor, minus_one}};
    PS_RETURN_IF_ERROR(client.Wait(client.Exchange({.push = push, .push_rows = push_rows, .step = steps})));
    absl::MutexLock lock(&probe.mu);
    probe.done.push_back(absl::Now());
  }
  return steps;
}

}  // namespace

absl::StatusOr<FollowResult> RunFollow(const FollowRun& run) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<LocalJob> job, LocalJob::Start());
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < run.replicas; ++i) {
    PS_ASSIGN_OR_RETURN(replicas.emplace_back(), StartReplica(job->scheduler(), run.interval));
  }
  KVClientOptions options;
  options.scheduler = job->scheduler();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<KVClient> client, KVClient::Connect(options));
  PS_RETURN_IF_ERROR(client->RegisterModel(FollowModel(run)));
  Probe probe;
  std::atomic<bool> stop{false};
  std::vector<double> fresh_ms;
  std::thread watcher;
  if (!replicas.empty()) {
    watcher = std::thread([&] { fresh_ms = WatchProbe(replicas[0]->replica->model(), probe, stop); });
  }
  const absl::Time start = absl::Now();
  const absl::StatusOr<int64_t> steps = Train(*client, run, probe);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // The last pushes reach the replica within a round or two.
  if (steps.ok()) absl::SleepFor(run.interval * 2 + absl::Milliseconds(200));
  stop.store(true);
  if (watcher.joinable()) watcher.join();
  PS_RETURN_IF_ERROR(steps.status());
  FollowResult result;
  result.steps_per_s = static_cast<double>(*steps) / seconds;
  result.fresh_p50_ms = Percentile(fresh_ms, 0.5);
  result.fresh_p99_ms = Percentile(fresh_ms, 0.99);
  result.fresh_samples = fresh_ms.size();
  if (!replicas.empty()) {
    const ServingFollower& f = *replicas[0]->follower;
    result.rounds = f.rounds_published();
    result.round_bytes =
        result.rounds > 0 ? static_cast<double>(f.round_bytes()) / static_cast<double>(result.rounds) : 0;
  }
  for (int rank = 0; rank < 2; ++rank) {
    PS_ASSIGN_OR_RETURN(ServerStats stats, client->GetServerStats(rank));
    for (const auto& t : stats.tables) result.snapshot_bytes += static_cast<double>(t.rows) * (8 + 4 * run.dim);
  }
  result.snapshot_bytes += 4;  // the probe
  (void)client->Finish();
  return result;
}

}  // namespace ps
