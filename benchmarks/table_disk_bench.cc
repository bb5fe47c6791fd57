// table_disk_bench: an embedding table with many more distinct rows than its
// server's memory budget, kept whole by the disk tier (ps_server
// --table_disk_dir), against the same run with a budget that holds every
// row. One server, one worker (this process), async Adagrad, dim 64, a fresh
// batch of Zipf ids per step (so the table keeps growing). JSON lines on
// stdout (docs/benchmarks.md):
//
//   {"bench":"table_disk","mode":"memory"|"disk"|"disk_direct",...}
//     rows_per_s and its ratio to mode memory's; distinct_rows against the
//     rows the budget holds; the server's peak resident memory above its
//     baseline (after start, before the model) against the budget; a check
//     pass that pulls the rows of the first batches (written long ago,
//     evicted since) and compares them, bit for bit, with an in-process
//     reference that applied the same pushes: rows_checked, rows_wrong.
//
// "disk_direct" reads with O_DIRECT (--table_disk_direct_io), so that the
// page cache does not stand in for the disk. Progress (step, rows/s, ETA)
// goes to stderr.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmarks/bench_support.h"
#include "benchmarks/zipf.h"
#include "common/base/hash.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"
#include "server/store/table_shard.h"
#include "worker/client/kv_client.h"

ABSL_FLAG(std::string, modes, "memory,disk,disk_direct", "Comma list of memory, disk, disk_direct.");
ABSL_FLAG(int64_t, budget_mb, 64, "The server's memory budget (--max_memory_mb) in the disk modes.");
ABSL_FLAG(int64_t, cache_mb, 16,
          "The disk store's share of it (--table_disk_cache_mb): its index takes 10 to 20 bytes a disk row.");
ABSL_FLAG(int64_t, disk_max_mb, 0,
          "The most MiB the disk store may take (--table_disk_max_gb; 0: no bound): below the table, rows are "
          "refused and counted.");
ABSL_FLAG(int, dim, 64, "Row dimension.");
ABSL_FLAG(int, batch, 16384, "Ids per step.");
ABSL_FLAG(double, zipf_s, 1.05, "Zipf exponent of the id ranks.");
ABSL_FLAG(int, steps, 200, "Steps per mode (the first 5 untimed).");
ABSL_FLAG(int, check_rows, 20000, "Rows of the first batches read back and compared.");
ABSL_FLAG(bool, shm, false,
          "Worker and server over shared memory (2 x 16 MiB rings, resident in the server: counted in its peak) "
          "instead of loopback tcp.");
ABSL_FLAG(std::string, dir, "", "Where the disk stores go (default: a directory under /tmp, removed after).");

namespace {

using ps::bench::Child;
using ps::bench::ForkChild;
using ps::bench::ReadLine;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr int kWarmup = 5;
constexpr uint64_t kIdSpace = 1000000000;

struct Config {
  std::vector<std::string> modes;
  uint64_t budget_bytes = 0, cache_bytes = 0, disk_max_bytes = 0;
  int dim = 64, batch = 16384, steps = 200, check_rows = 20000;
  double zipf_s = 1.05;
  bool shm = false;
  std::string dir;
};

ps::ModelSpec BenchModel(const Config& c) {
  ps::ModelSpec m;
  m.tables = {ps::TableSpec{"emb", c.dim, ps::Initializer::Uniform(-0.05f, 0.05f, 1)}};
  m.optimizer.kind = ps::OptimizerKind::kAdagrad;
  m.optimizer.learning_rate = 0.01f;
  m.consistency.mode = ps::ConsistencyMode::kAsync;
  return m;
}

// Batch `step`'s ids: the same for every mode and for the reference.
class Batches {
 public:
  explicit Batches(const Config& c) : c_(c), zipf_(kIdSpace, c.zipf_s) {}
  const std::vector<uint64_t>& Next() {
    ids_.resize(c_.batch);
    for (uint64_t& id : ids_) id = ps::Mix64(zipf_(rng_));
    return ids_;
  }

 private:
  const Config& c_;
  std::mt19937_64 rng_{2026};
  ps::bench::ZipfSampler zipf_;
  std::vector<uint64_t> ids_;
};

// The table as the server should hold it: the client's merge (repeated ids'
// gradients summed) and Adagrad, in one process without a budget.
class Reference {
 public:
  explicit Reference(const Config& c) : model_(BenchModel(c)), optimizer_(*ps::Optimizer::Create(model_.optimizer)) {
    shard_ = std::make_unique<ps::TableShard>(model_.tables[0], *optimizer_, &budget_, 0, 0);
  }
  void Push(const std::vector<uint64_t>& ids, float grad, int dim) {
    absl::flat_hash_map<uint64_t, uint32_t> index;
    std::vector<uint64_t> unique;
    std::vector<float> sums;
    for (uint64_t id : ids) {
      auto [it, fresh] = index.try_emplace(id, static_cast<uint32_t>(unique.size()));
      if (fresh) {
        unique.push_back(id);
        sums.resize(sums.size() + dim, 0.0f);
      }
      for (int d = 0; d < dim; ++d) sums[static_cast<size_t>(it->second) * dim + d] += grad;
    }
    shard_->Apply(unique, sums, 1.0f);
  }
  ps::TableShard& shard() { return *shard_; }

 private:
  const ps::ModelSpec model_;
  std::unique_ptr<ps::Optimizer> optimizer_;
  ps::TableBudget budget_;
  std::unique_ptr<ps::TableShard> shard_;
};

constexpr float kGrad = 0.001f;

// A process's resident memory: "VmRSS" now or "VmHWM" (its peak), bytes.
uint64_t ProcessMemory(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, field + ":")) {
      uint64_t kb = 0;
      std::sscanf(line.c_str() + field.size() + 1, "%lu", &kb);
      return kb << 10;
    }
  }
  return 0;
}

struct Cluster {
  std::unique_ptr<Child> scheduler, server;
  std::string scheduler_endpoint;
};

absl::StatusOr<Cluster> StartCluster(const Config& c, const std::string& mode) {
  Cluster cl;
  ps::bench::Endpoints endpoints("tcp");
  const std::string sched_bind = endpoints.Next("127.0.0.1");
  PS_ASSIGN_OR_RETURN(
      cl.scheduler, ForkChild([&](int fd, int) { return ps::bench::RunSchedulerChild("", sched_bind, 1, 1, {}, fd); }));
  PS_ASSIGN_OR_RETURN(cl.scheduler_endpoint, ReadLine(*cl.scheduler, kStartTimeout));
  ps::ServerOptions base;
  // By default over loopback tcp: the shared-memory rings (2 x 16 MiB per
  // worker, resident in both processes) would count in the server's memory.
  base.shm = c.shm;
  if (mode != "memory") {
    base.max_memory_bytes = c.budget_bytes;
    base.table_disk_dir = absl::StrCat(c.dir, "/", mode);
    base.table_disk_memory_bytes = c.cache_bytes;
    base.table_disk_max_bytes = c.disk_max_bytes;
    base.table_disk_direct_io = mode == "disk_direct";
    std::filesystem::remove_all(base.table_disk_dir);
  }
  const std::string bind = endpoints.Next("127.0.0.1");
  PS_ASSIGN_OR_RETURN(cl.server, ForkChild([&](int fd, int) {
                        return ps::bench::RunServerChild("", cl.scheduler_endpoint, bind, {}, 1, fd, base);
                      }));
  PS_RETURN_IF_ERROR(ReadLine(*cl.server, kStartTimeout).status());
  return cl;
}

struct Run {
  double rows_per_s = 0;
  std::vector<uint64_t> ids;  // the rows checked and what the server said
  std::vector<float> got;
  uint64_t checked = 0, wrong = 0;
  ps::ServerStats::Table table;
  uint64_t baseline = 0, peak = 0;
};

void Progress(const std::string& mode, int step, int steps, double rows_per_s, int batch) {
  const double eta = rows_per_s > 0 ? (steps - step) * 1.0 * batch / rows_per_s : 0;
  std::fprintf(stderr, "\rtable_disk_bench %s: step %d/%d, %.0f rows/s, ETA %.0f s   ", mode.c_str(), step, steps,
               rows_per_s, eta);
  if (step == steps) std::fprintf(stderr, "\n");
}

// The timed steps: push batch i's rows, pull batch i+1's, in one round trip.
absl::StatusOr<double> TrainSteps(const Config& c, const std::string& mode, ps::KVClient& client) {
  Batches batches(c);
  std::vector<uint64_t> push = batches.Next(), pull;
  const std::vector<float> grads(static_cast<size_t>(c.batch) * c.dim, kGrad);
  std::vector<float> out(grads.size());
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < c.steps; ++step) {
    if (step == kWarmup) t0 = std::chrono::steady_clock::now();
    pull = batches.Next();
    const ps::ConstRowBuffer g[] = {{0, push, grads}};
    const ps::RowBuffer o[] = {{0, pull, absl::MakeSpan(out)}};
    PS_RETURN_IF_ERROR(client.ExchangeAndWait({.push_rows = g, .step = step, .pull_rows = o, .pull_step = step}));
    push.swap(pull);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = step >= kWarmup && s > 0 ? (step + 1 - kWarmup) * 1.0 * c.batch / s : 0;
    if ((step + 1) % std::max(1, c.steps / 20) == 0 || step + 1 == c.steps) {
      Progress(mode, step + 1, c.steps, rate, c.batch);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return (c.steps - kWarmup) * 1.0 * c.batch / s;
}

// Pulls the rows of the first batches (written long ago) from the server.
absl::Status PullFirstRows(const Config& c, ps::KVClient& client, Run& run) {
  Batches batches(c);
  absl::flat_hash_map<uint64_t, bool> seen;
  while (run.ids.size() < static_cast<size_t>(c.check_rows)) {
    for (uint64_t id : batches.Next()) {
      if (seen.emplace(id, true).second && run.ids.size() < static_cast<size_t>(c.check_rows)) run.ids.push_back(id);
    }
  }
  run.got.resize(run.ids.size() * c.dim);
  const ps::RowBuffer o[] = {{0, run.ids, absl::MakeSpan(run.got)}};
  return client.ExchangeAndWait({.pull_rows = o, .pull_step = c.steps});
}

// Compares what the server said with the reference, bit for bit.
void Check(const Config& c, Reference& ref, Run& run) {
  std::vector<float> want(run.got.size());
  ref.shard().Read(run.ids, absl::MakeSpan(want));
  run.checked = run.ids.size();
  for (size_t i = 0; i < run.ids.size(); ++i) {
    if (std::memcmp(&run.got[i * c.dim], &want[i * c.dim], c.dim * sizeof(float)) != 0) ++run.wrong;
  }
}

absl::StatusOr<Run> RunMode(const Config& c, const std::string& mode) {
  PS_ASSIGN_OR_RETURN(Cluster cl, StartCluster(c, mode));
  Run run;
  run.baseline = ProcessMemory(cl.server->pid(), "VmRSS");
  ps::KVClientOptions options;
  options.scheduler = cl.scheduler_endpoint;
  options.register_timeout = absl::Seconds(30);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ps::KVClient> client, ps::KVClient::Connect(options));
  PS_RETURN_IF_ERROR(client->RegisterModel(BenchModel(c)));
  PS_ASSIGN_OR_RETURN(run.rows_per_s, TrainSteps(c, mode, *client));
  PS_RETURN_IF_ERROR(PullFirstRows(c, *client, run));
  PS_ASSIGN_OR_RETURN(ps::ServerStats stats, client->GetServerStats(0));
  if (stats.tables.size() != 1) return absl::InternalError("the server holds no table shard");
  run.table = stats.tables[0];
  run.peak = ProcessMemory(cl.server->pid(), "VmHWM");
  PS_RETURN_IF_ERROR(client->Finish());
  PS_RETURN_IF_ERROR(cl.scheduler->Reap(ps::bench::kReapTimeout));
  PS_RETURN_IF_ERROR(cl.server->Reap(ps::bench::kReapTimeout));
  return run;
}

void Print(const Config& c, const std::string& mode, const Run& r, double memory_rows_per_s, uint64_t distinct) {
  const double mb = 1 << 20;
  const uint64_t row_bytes = ps::TableShard::kRowOverheadBytes + c.dim * 2 * sizeof(float);
  const uint64_t budget = mode == "memory" ? 0 : c.budget_bytes;
  ps::JsonLine line;
  line.Add("bench", "table_disk")
      .Add("mode", mode)
      .Add("dim", c.dim)
      .Add("batch", c.batch)
      .Add("steps", c.steps)
      .Add("transport", c.shm ? "shm" : "tcp")
      .Add("rows_per_s", r.rows_per_s, 0)
      .Add("ratio_vs_memory", memory_rows_per_s > 0 ? r.rows_per_s / memory_rows_per_s : 0.0, 3)
      .Add("distinct_rows", distinct)
      .Add("budget_mb", static_cast<double>(budget) / mb, 1)
      .Add("disk_max_mb", static_cast<double>(c.disk_max_bytes) / mb, 1)
      .Add("rows_over_budget", budget ? static_cast<double>(distinct * row_bytes) / budget : 0.0, 2)
      .Add("memory_rows", r.table.rows)
      .Add("disk_rows", r.table.disk_rows)
      .Add("disk_reads", r.table.disk_reads)
      .Add("disk_writes", r.table.disk_writes)
      .Add("evictions", r.table.evictions)
      .Add("refused", r.table.rejections + r.table.gradients_dropped + r.table.disk_refusals)
      .Add("server_baseline_mb", static_cast<double>(r.baseline) / mb, 1)
      .Add("server_peak_mb", static_cast<double>(r.peak) / mb, 1)
      .Add("peak_over_budget", budget ? static_cast<double>(r.peak - std::min(r.peak, r.baseline)) / budget : 0.0, 3)
      .Add("rows_checked", r.checked)
      .Add("rows_wrong", r.wrong);
  std::printf("%s\n", line.Str().c_str());
  std::fflush(stdout);
}

// The servers run first, the reference after: a server forked from a
// process holding the reference would count its pages as resident.
absl::Status RunAll(const Config& c) {
  std::vector<Run> runs;
  for (const std::string& mode : c.modes) {
    PS_ASSIGN_OR_RETURN(Run r, RunMode(c, mode));
    runs.push_back(std::move(r));
  }
  std::fprintf(stderr, "table_disk_bench: the reference table (%d steps of %d ids)\n", c.steps, c.batch);
  Reference ref(c);
  Batches batches(c);
  for (int step = 0; step < c.steps; ++step) ref.Push(batches.Next(), kGrad, c.dim);
  double memory_rate = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    Check(c, ref, runs[i]);
    if (c.modes[i] == "memory") memory_rate = runs[i].rows_per_s;
    Print(c, c.modes[i], runs[i], memory_rate, ref.shard().rows());
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    if (m != "memory" && m != "disk" && m != "disk_direct") {
      return absl::InvalidArgumentError(absl::StrCat("--modes: '", m, "' is not memory, disk or disk_direct"));
    }
    c.modes.emplace_back(m);
  }
  if (c.modes.empty()) return absl::InvalidArgumentError("--modes: empty list");
  if (absl::GetFlag(FLAGS_budget_mb) < 4 || absl::GetFlag(FLAGS_cache_mb) < 2 ||
      absl::GetFlag(FLAGS_cache_mb) >= absl::GetFlag(FLAGS_budget_mb)) {
    return absl::InvalidArgumentError("--budget_mb (>= 4) must exceed --cache_mb (>= 2)");
  }
  c.budget_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_budget_mb)) << 20;
  c.cache_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_cache_mb)) << 20;
  if (absl::GetFlag(FLAGS_disk_max_mb) < 0) return absl::InvalidArgumentError("--disk_max_mb: must be >= 0");
  c.disk_max_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_disk_max_mb)) << 20;
  c.dim = absl::GetFlag(FLAGS_dim);
  c.batch = absl::GetFlag(FLAGS_batch);
  c.zipf_s = absl::GetFlag(FLAGS_zipf_s);
  c.steps = absl::GetFlag(FLAGS_steps);
  c.check_rows = absl::GetFlag(FLAGS_check_rows);
  c.dir = absl::GetFlag(FLAGS_dir);
  c.shm = absl::GetFlag(FLAGS_shm);
  if (c.dim < 1 || c.dim > ps::kMaxTableDim) return absl::InvalidArgumentError(absl::StrCat("--dim: ", c.dim));
  if (c.batch < 1 || c.batch > (1 << 17)) return absl::InvalidArgumentError(absl::StrCat("--batch: ", c.batch));
  if (!(c.zipf_s > 1.0) || c.zipf_s > 10) return absl::InvalidArgumentError("--zipf_s: must be in (1, 10]");
  if (c.steps <= kWarmup || c.steps > 100000) return absl::InvalidArgumentError("--steps: must be in (5, 100000]");
  if (c.check_rows < 1 || c.check_rows > c.batch * 8) {
    return absl::InvalidArgumentError("--check_rows: must be in [1, 8 x --batch]");
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "table_disk_bench [--modes=memory,disk,disk_direct] [--budget_mb=64] [--steps=200]: a table of many "
               "more rows than the server's memory budget, on the disk tier; JSON lines on stdout.");
  FLAGS_minloglevel = google::GLOG_WARNING;
  auto config = ConfigFromFlags();
  if (!config.ok()) return ps::ExitCode(config.status(), "table_disk_bench");
  const bool own_dir = config->dir.empty();
  if (own_dir) config->dir = absl::StrCat("/tmp/ps-table-disk-bench-", getpid());
  const absl::Status status = RunAll(*config);
  if (own_dir) std::filesystem::remove_all(config->dir);
  return ps::ExitCode(status, "table_disk_bench");
}
