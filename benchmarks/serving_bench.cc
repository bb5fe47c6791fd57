// serving_bench: lookups from a serving replica (ps_serve's ServingReplica,
// on its own thread) through ServingClient over loopback tcp, against the
// same lookups on the replica's in-process table (ServingModel::Lookup, a
// hash table) in the same run. One JSON line per configuration:
//
//   {"bench":"serving_lookup","rows":1000000,"dim":16,"ids":2000,"p50_ms":...,"p99_ms":...,
//    "lookups_per_s":...,"local_lookups_per_s":...,"ratio_vs_local":...}
//
//   serving_bench --rows=1000000 --dim=16 --ids=2000 --lookups=2000
//
// Ids are distinct, drawn uniformly from the rows held; every answer is
// checked against the table (a wrong row exits 1).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmarks/serving_follow.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "server/serving/serving_replica.h"
#include "worker/client/serving_client.h"

ABSL_FLAG(int64_t, rows, 1000000, "Rows of the served table.");
ABSL_FLAG(int, dim, 16, "Row width.");
ABSL_FLAG(std::string, ids, "2000", "Ids per lookup, a comma-separated list (one line each).");
ABSL_FLAG(int, lookups, 2000, "Timed lookups per configuration (after a tenth as many untimed).");
ABSL_FLAG(double, follow_seconds, 5,
          "Seconds of training per run of replicas following a job (freshness, cost to training, round bytes); "
          "0: none.");
ABSL_FLAG(std::string, follow_intervals, "1s,100ms", "The replicas' --sync_interval of each freshness run.");

namespace ps {
namespace {

std::unique_ptr<ServingModel> Table(int64_t rows, int dim) {
  ServingModel::Table t;
  t.dim = static_cast<uint32_t>(dim);
  t.index.reserve(static_cast<size_t>(rows));
  t.rows.resize(static_cast<size_t>(rows) * dim);
  for (int64_t r = 0; r < rows; ++r) {
    t.index[static_cast<uint64_t>(r) * 7919 + 1] = static_cast<uint32_t>(r);
    for (int j = 0; j < dim; ++j) t.rows[r * dim + j] = static_cast<float>(r) + 0.001f * j;
  }
  absl::flat_hash_map<std::string, ServingModel::Table> tables;
  tables["emb"] = std::move(t);
  return std::make_unique<ServingModel>(absl::flat_hash_map<std::string, ServingModel::Tensor>{}, std::move(tables),
                                        ServingVersion{1, absl::Now(), true, "serving_bench"});
}

std::vector<std::vector<uint64_t>> Batches(int count, int ids, int64_t rows, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::vector<std::vector<uint64_t>> out(count);
  for (auto& batch : out) {
    absl::flat_hash_set<uint64_t> seen;
    while (static_cast<int>(batch.size()) < ids) {
      const uint64_t id = static_cast<uint64_t>(pick(gen)) * 7919 + 1;
      if (seen.insert(id).second) batch.push_back(id);
    }
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// One configuration: `lookups` timed lookups of `ids` ids through `client`
// (after a tenth as many untimed), then the same on the replica's table in
// process; its JSON line. 1 when an answer is wrong.
int Measure(ServingClient& client, const ServingModel& model, int64_t rows, int dim, int ids, int lookups,
            uint64_t seed) {
  const size_t warm = static_cast<size_t>(lookups / 10);
  const std::vector<std::vector<uint64_t>> batches = Batches(lookups + lookups / 10, ids, rows, seed);
  std::vector<double> ms;
  double remote_s = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<ServingClient::Rows> got = client.Lookup("emb", batches[i]);
    const double dt = Seconds(t0);
    if (!got.ok() || got->values[0] != static_cast<float>((batches[i][0] - 1) / 7919)) {
      std::fprintf(stderr, "serving_bench: lookup %zu wrong: %s\n", i, got.status().ToString().c_str());
      return 1;
    }
    if (i < warm) continue;
    ms.push_back(dt * 1e3);
    remote_s += dt;
  }
  std::vector<float> out(static_cast<size_t>(ids) * dim);
  std::vector<uint8_t> found(ids);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = warm; i < batches.size(); ++i) {
    (void)model.Lookup("emb", batches[i], absl::MakeSpan(out), absl::MakeSpan(found));
  }
  const double local_s = Seconds(t0);
  std::printf("%s\n", JsonLine()
                          .Add("bench", "serving_lookup")
                          .Add("rows", rows)
                          .Add("dim", dim)
                          .Add("ids", ids)
                          .Add("network", "tcp loopback")
                          .Add("p50_ms", Percentile(ms, 0.5), 4)
                          .Add("p99_ms", Percentile(ms, 0.99), 4)
                          .Add("lookups_per_s", lookups / remote_s, 1)
                          .Add("local_lookups_per_s", lookups / local_s, 1)
                          .Add("ratio_vs_local", local_s / remote_s, 3)
                          .Str()
                          .c_str());
  std::fflush(stdout);
  return 0;
}

// A run of replicas following a job; false (said on stderr) when it failed.
bool Follow(const FollowRun& run, FollowResult* result) {
  absl::StatusOr<FollowResult> r = RunFollow(run);
  if (!r.ok()) {
    std::fprintf(stderr, "serving_bench: following a job: %s\n", r.status().ToString().c_str());
    return false;
  }
  *result = *r;
  return true;
}

// Freshness at each interval (ids uniform), what two replicas cost the job,
// and a round's bytes against a snapshot's for uniform and Zipf(1.2) ids.
int RunFollowLines() {
  FollowRun run;
  run.duration = absl::Seconds(absl::GetFlag(FLAGS_follow_seconds));
  FollowResult with{}, none{}, zipf{};
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_follow_intervals), ',')) {
    if (!absl::ParseDuration(text, &run.interval) || run.interval <= absl::ZeroDuration()) {
      std::fprintf(stderr, "serving_bench: --follow_intervals: '%s' is not a duration\n", std::string(text).c_str());
      return 2;
    }
    if (!Follow(run, &with)) return 1;
    std::printf("%s\n", JsonLine()
                            .Add("bench", "serving_freshness")
                            .Add("interval_ms", absl::ToDoubleMilliseconds(run.interval), 1)
                            .Add("replicas", run.replicas)
                            .Add("p50_ms", with.fresh_p50_ms, 2)
                            .Add("p99_ms", with.fresh_p99_ms, 2)
                            .Add("pushes_seen", with.fresh_samples)
                            .Add("rounds", with.rounds)
                            .Str()
                            .c_str());
  }
  run.interval = absl::Seconds(1);
  FollowRun bare = run;
  bare.replicas = 0;
  FollowRun skewed = run;
  skewed.zipf_s = 1.2;
  if (!Follow(run, &with) || !Follow(bare, &none) || !Follow(skewed, &zipf)) return 1;
  std::printf("%s\n", JsonLine()
                          .Add("bench", "serving_cost")
                          .Add("interval_ms", 1000)
                          .Add("steps_per_s_two_replicas", with.steps_per_s, 1)
                          .Add("steps_per_s_none", none.steps_per_s, 1)
                          .Add("ratio", none.steps_per_s > 0 ? with.steps_per_s / none.steps_per_s : 0, 3)
                          .Str()
                          .c_str());
  for (const auto& [ids, r] : {std::pair<const char*, const FollowResult*>{"uniform", &with}, {"zipf1.2", &zipf}}) {
    std::printf("%s\n", JsonLine()
                            .Add("bench", "serving_round_bytes")
                            .Add("ids", ids)
                            .Add("interval_ms", 1000)
                            .Add("round_bytes", r->round_bytes, 0)
                            .Add("snapshot_bytes", r->snapshot_bytes, 0)
                            .Add("ratio", r->snapshot_bytes > 0 ? r->round_bytes / r->snapshot_bytes : 0, 4)
                            .Str()
                            .c_str());
  }
  return 0;
}

int Run() {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int lookups = absl::GetFlag(FLAGS_lookups);
  std::vector<int> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_ids), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1 || n > rows) {
      std::fprintf(stderr, "serving_bench: --ids: '%s' is not a count in [1, --rows]\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  if (rows < 1 || dim < 1 || lookups < 10) {
    std::fprintf(stderr, "serving_bench: --rows and --dim must be >= 1, --lookups >= 10\n");
    return 2;
  }
  auto replica = ServingReplica::Start(ServingOptions{}, Table(rows, dim));
  if (!replica.ok()) {
    std::fprintf(stderr, "serving_bench: %s\n", replica.status().ToString().c_str());
    return 1;
  }
  std::thread serving([&] { (void)(*replica)->Run(); });
  auto client = ServingClient::Connect({.endpoints = {(*replica)->endpoint()}});
  int rc = client.ok() ? 0 : 1;
  if (!client.ok()) std::fprintf(stderr, "serving_bench: %s\n", client.status().ToString().c_str());
  for (size_t c = 0; rc == 0 && c < sizes.size(); ++c) {
    rc = Measure(**client, (*replica)->model(), rows, dim, sizes[c], lookups, 7 + c);
  }
  if (client.ok()) client->reset();
  (*replica)->RequestStop();
  serving.join();
  if (rc != 0 || absl::GetFlag(FLAGS_follow_seconds) <= 0) return rc;
  return RunFollowLines();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "serving_bench [--rows=1000000] [--dim=16] [--ids=2000] [--lookups=2000]: lookups from a "
               "serving replica over loopback tcp against the same lookups in process; JSON lines on stdout.");
  return ps::Run();
}
