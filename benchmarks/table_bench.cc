// table_bench: rows per second through the servers' embedding tables, against
// the same work done in one process on one table (the floor any remote table
// pays on top of). JSON lines on stdout (docs/benchmarks.md):
//
//   {"bench":"table_local",...}    batches of Zipf ids pulled and updated
//                                  (Adagrad) on one TableShard in this process
//   {"bench":"table",...}          the same batches through S servers by W
//                                  workers (worker processes, one round trip
//                                  per step: push step t's rows, pull step
//                                  t+1's), aggregate rows/s and the ratio to
//                                  table_local
//   {"bench":"table_grown",...}    a job of A servers (--elastic) that B - A
//                                  more join after a first timed phase
//                                  (config A>BxW): rows/s before, and after
//                                  the table's shards spread over the B
//   {"bench":"table_evicting",...} table_local with a memory budget a tenth of
//                                  what the rows need: rows/s while evicting
//   {"bench":"table_memory",...}   resident bytes per row (the process's RSS
//                                  growth) against dim x 4 x (1 + state)
//
// Ids: Zipf(s) ranks over a space of --id_space ids, each rank mapped to a
// 64-bit id by splitmix64 (ids spread like hashed features), or with
// --ids=ranks the rank itself (small integers, like an item's number: with
// compressed rows they travel delta coded, common/wire/id_coding.h). A "row" is one
// id of a batch (repeats included: the client merges them), pulled and
// pushed once per step. With --netns=P every process runs in its own network
// namespace made by scripts/netns.py (scheduler P0, server i P(1+i), worker
// j P(1+S+j)), whose links it shapes.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "benchmarks/bench_support.h"
#include "benchmarks/zipf.h"
#include "common/base/hash.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "common/placement/partition_map.h"
#include "glog/logging.h"
#include "server/store/table_shard.h"
#include "worker/client/kv_client.h"

ABSL_FLAG(std::string, configs, "1x1,2x2,4x4",
          "Comma list of SxW: S servers and W workers at once; A>BxW: A servers, then B - A more join the running job "
          "(needs --table_shards). A suffix ':fp16' or ':bf16' sends the rows as 16 bits both ways (compared with the "
          "same SxW in float32 earlier in the list), its ids delta coded where shorter; ':bf16:rawids' (or "
          "':fp16:rawids') sends the ids as they are (compared with the later coded run).");
ABSL_FLAG(std::string, ids, "hashed",
          "How a Zipf rank becomes an id: 'hashed' (splitmix64 of the rank: spread over 64 bits, like hashed features) "
          "or 'ranks' (the rank itself: small integers, like an item's number).");
ABSL_FLAG(int, dim, 64, "Row dimension.");
ABSL_FLAG(uint32_t, table_shards, 0, "Shards of the table (0: one per server).");
ABSL_FLAG(int, batch, 16384, "Ids per batch (per worker and step).");
ABSL_FLAG(double, zipf_s, 1.05, "Zipf exponent of the id ranks.");
ABSL_FLAG(uint64_t, id_space, 1000000000, "Ids are drawn from this many ranks.");
ABSL_FLAG(int, steps, 40, "Timed steps per worker and configuration (after a few warm-up steps).");
ABSL_FLAG(int, memory_rows, 1000000, "Rows created for the resident-memory figure.");
ABSL_FLAG(std::string, netns, "",
          "Prefix of the network namespaces made by scripts/netns.py (see the top of the file).");
ABSL_FLAG(std::string, netns_subnet, "10.77.0", "First three octets of the namespaces' addresses.");
ABSL_FLAG(bool, verbose, false, "Keep INFO logs of the scheduler, servers and clients (stderr).");

namespace {

using ps::JsonLine;
using ps::bench::Child;
using ps::bench::Command;
using ps::bench::ForkChild;
using ps::bench::Host;
using ps::bench::Measurement;
using ps::bench::ReadLine;
using ps::bench::WarmHook;
using ps::bench::WriteLine;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr int kBatches = 16;  // distinct batches per worker, cycled
constexpr float kLearningRate = 0.01f;

// S servers and W workers; `first` < S: a job of `first` servers that the
// others join after a first timed phase.
struct Shape {
  int servers = 1, workers = 1, first = 0;
  ps::CompressionKind rows = ps::CompressionKind::kNone;  // ":fp16", ":bf16": 16-bit rows on the wire
  bool raw_ids = false;                                   // ":rawids" after it: ids not delta coded
  bool grows() const { return first > 0 && first < servers; }
};

struct Config {
  std::vector<Shape> configs;
  int dim = 64;
  int batch = 16384;
  double zipf_s = 1.05;
  uint64_t id_space = 1000000000;
  int steps = 40;
  int memory_rows = 1000000;
  std::string netns, netns_subnet;
  ps::CompressionKind rows = ps::CompressionKind::kNone;  // the configuration's (Shape::rows)
  bool raw_ids = false;                                   // the configuration's (Shape::raw_ids)
  bool rank_ids = false;                                  // --ids=ranks
};

void PrintLine(const JsonLine& line) {
  std::printf("%s\n", line.Str().c_str());
  std::fflush(stdout);
}

std::vector<std::vector<uint64_t>> MakeBatches(const Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ps::bench::ZipfSampler zipf(c.id_space, c.zipf_s);
  std::vector<std::vector<uint64_t>> batches(kBatches, std::vector<uint64_t>(c.batch));
  for (auto& b : batches) {
    for (uint64_t& id : b) id = c.rank_ids ? zipf(rng) : ps::Mix64(zipf(rng));
  }
  return batches;
}

ps::TableSpec BenchTable(const Config& c) {
  ps::TableSpec t{"emb", c.dim, ps::Initializer::Uniform(-0.05f, 0.05f, 1)};
  if (c.rows != ps::CompressionKind::kNone) {
    t.compression = ps::CompressionSpec{.kind = c.rows, .pull = c.rows, .raw_ids = c.raw_ids};
  }
  return t;
}

ps::OptimizerConfig Adagrad() {
  ps::OptimizerConfig o;
  o.kind = ps::OptimizerKind::kAdagrad;
  o.learning_rate = kLearningRate;
  return o;
}

// ---- in one process ------------------------------------------------------------

// What the client and a server do for one step, without the network: merge
// the batch's repeated ids summing their gradients, update those rows, read
// the next batch's distinct rows and copy each to every place it appears.
class LocalTable {
 public:
  LocalTable(const Config& c, uint64_t budget_bytes)
      : dim_(c.dim), optimizer_(*ps::Optimizer::Create(Adagrad())), spec_(BenchTable(c)) {
    budget_.limit = budget_bytes;
    shard_ = std::make_unique<ps::TableShard>(spec_, *optimizer_, &budget_, 0, 0);
    grads_.assign(static_cast<size_t>(c.batch) * dim_, 0.001f);
    out_.resize(static_cast<size_t>(c.batch) * dim_);
  }

  void Step(const std::vector<uint64_t>& push, const std::vector<uint64_t>& pull) {
    Merge(push);
    shard_->Apply(unique_, sums_, 1.0f);
    Merge(pull);
    rows_.resize(unique_.size() * dim_);
    shard_->Read(unique_, absl::MakeSpan(rows_));
    for (size_t i = 0; i < pull.size(); ++i) {
      std::memcpy(out_.data() + i * dim_, rows_.data() + static_cast<size_t>(where_[i]) * dim_, dim_ * sizeof(float));
    }
  }
  const ps::TableShard& shard() const { return *shard_; }

 private:
  void Merge(const std::vector<uint64_t>& ids) {
    index_.clear();
    unique_.clear();
    where_.resize(ids.size());
    sums_.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      auto [it, fresh] = index_.try_emplace(ids[i], static_cast<uint32_t>(unique_.size()));
      if (fresh) {
        unique_.push_back(ids[i]);
        sums_.insert(sums_.end(), grads_.begin() + i * dim_, grads_.begin() + (i + 1) * dim_);
      } else {
        for (size_t j = 0; j < dim_; ++j) sums_[it->second * dim_ + j] += grads_[i * dim_ + j];
      }
      where_[i] = it->second;
    }
  }

  const size_t dim_;
  std::unique_ptr<ps::Optimizer> optimizer_;
  const ps::TableSpec spec_;
  ps::TableBudget budget_;
  std::unique_ptr<ps::TableShard> shard_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::vector<uint64_t> unique_;
  std::vector<uint32_t> where_;
  std::vector<float> grads_, sums_, rows_, out_;
};

// Rows per second of `steps` local steps after a few warm-up ones.
double LocalRowsPerSecond(const Config& c, LocalTable& table, const std::vector<std::vector<uint64_t>>& batches) {
  for (int i = 0; i < ps::bench::WarmupFor(c.steps); ++i)
    table.Step(batches[i % kBatches], batches[(i + 1) % kBatches]);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < c.steps; ++i) table.Step(batches[i % kBatches], batches[(i + 1) % kBatches]);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(c.steps) * c.batch / s;
}

// Resident set size of this process, from /proc/self/statm.
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// The resident memory the rows add: measured from after a first batch, so
// that the step's own buffers (a few MiB) are not counted as rows'.
void MeasureMemory(const Config& c) {
  LocalTable table(c, 0);
  std::vector<uint64_t> ids(c.batch);
  auto fill = [&](int first) {
    for (int i = 0; i < c.batch; ++i) ids[i] = ps::Mix64(static_cast<uint64_t>(first + i));
    table.Step({}, ids);
  };
  fill(0);
  const uint64_t before = ResidentBytes();
  const uint64_t rows_before = table.shard().rows();
  for (int done = c.batch; done < c.memory_rows; done += c.batch) fill(done);
  const double rows = static_cast<double>(table.shard().rows() - rows_before);
  const double per_row = static_cast<double>(ResidentBytes() - before) / rows;
  const double raw = c.dim * 4.0 * 2;  // values and Adagrad's accumulator
  PrintLine(JsonLine()
                .Add("bench", "table_memory")
                .Add("dim", c.dim)
                .Add("optimizer", "adagrad")
                .Add("rows", table.shard().rows())
                .Add("resident_bytes_per_row", per_row, 1)
                .Add("raw_bytes_per_row", raw, 1)
                .Add("ratio", per_row / raw, 3)
                .Add("accounted_bytes_per_row", static_cast<double>(table.shard().Bytes()) / rows, 1));
}

// ---- through the servers ---------------------------------------------------------

ps::ModelSpec BenchModel(const Config& c) {
  ps::ModelSpec m;
  m.tables = {BenchTable(c)};
  m.optimizer = Adagrad();
  m.consistency.mode = ps::ConsistencyMode::kAsync;
  m.placement.table_shards = absl::GetFlag(FLAGS_table_shards);
  return m;
}

// A worker's timed steps: push the rows of batch i (computed at step i) and
// pull batch i+1's, one round trip per server.
absl::StatusOr<Measurement> MeasureRows(ps::KVClient& client, const std::vector<std::vector<uint64_t>>& batches,
                                        int iters, const WarmHook& warm) {
  const size_t n = batches[0].size(), dim = client.model().tables[0].dim;
  const std::vector<float> grads(n * dim, 0.001f);
  std::vector<float> out(n * dim);
  ps::KVClient::Ticket ticket = 0;
  int64_t step = 0;
  auto issue = [&](int) {
    const std::vector<uint64_t>& push = batches[step % kBatches];
    const std::vector<uint64_t>& pull = batches[(step + 1) % kBatches];
    const ps::ConstRowBuffer g[] = {{0, push, grads}};
    const ps::RowBuffer o[] = {{0, pull, absl::MakeSpan(out)}};
    ticket = client.Exchange({.push_rows = g, .step = step, .pull_rows = o, .pull_step = step + 1});
    ++step;
    return absl::OkStatus();
  };
  auto complete = [&](int) { return client.Wait(ticket); };
  return ps::bench::WarmThenTime(iters, /*depth=*/1, issue, complete, warm);
}

// Before the timed phase after servers joined: waits until `servers`
// servers hold the table's `shards` shards, one copy each, at most one more
// on any server than on another (as the scheduler's moves leave them).
absl::Status WaitSpread(ps::KVClient& client, int servers, int shards) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  std::vector<uint32_t> held;
  while (absl::Now() < deadline) {
    held.clear();
    for (int s = 0; s < servers; ++s) {
      absl::StatusOr<ps::ServerStats> stats = client.GetServerStats(s);
      if (!stats.ok()) break;  // a server the client does not know yet
      held.push_back(stats->slices_held);
    }
    if (static_cast<int>(held.size()) == servers) {
      const auto [low, high] = std::minmax_element(held.begin(), held.end());
      if (std::accumulate(held.begin(), held.end(), 0) == shards && *high - *low <= 1) return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the table's ", shards, " shards did not spread over ", servers,
                   " servers within 120 s (shards per server: ", absl::StrJoin(held, ", "), ")"));
}

int RunWorkerChild(const Host& host, const std::string& scheduler, const Config& c, int rank, int out, int in) {
  if (!ps::bench::EnterOrReport(host.ns, "worker", out)) return 1;
  const std::vector<std::vector<uint64_t>> batches = MakeBatches(c, 1000 + rank);
  ps::KVClientOptions options;
  options.scheduler = scheduler;
  options.register_timeout = absl::Seconds(30);
  if (!host.ns.empty()) ps::bench::AllowPlaintextInNetns(options);
  auto client = ps::KVClient::Connect(options);
  absl::Status status = client.ok() ? (*client)->RegisterModel(BenchModel(c)) : client.status();
  if (!status.ok()) {
    WriteLine(out, absl::StrCat("ERR worker: ", status.ToString()));
    return 1;
  }
  WriteLine(out, "ready");
  // "grown": servers joined; bytes = how many there are now (rank 0 waits
  // for the shards to spread over them).
  auto run = [&](const Command& cmd, const WarmHook& warm) -> absl::StatusOr<Measurement> {
    if (cmd.name != "rows" && cmd.name != "grown") {
      return absl::InvalidArgumentError(absl::StrCat("worker: unknown command ", cmd.name));
    }
    if (cmd.name == "grown" && rank == 0) {
      const int servers = static_cast<int>(cmd.bytes);
      PS_RETURN_IF_ERROR(WaitSpread(**client, servers, ps::TableShardsOf(absl::GetFlag(FLAGS_table_shards), servers)));
    }
    return MeasureRows(**client, batches, cmd.iters, warm);
  };
  auto end = [&]() -> absl::Status {
    // Rank 0 reports the table's size over every server before the job ends.
    if ((*client)->rank() == 0) {
      uint64_t rows = 0, bytes = 0, bytes_in = 0;
      for (int s = 0; s < (*client)->num_servers(); ++s) {
        PS_ASSIGN_OR_RETURN(ps::ServerStats stats, (*client)->GetServerStats(s));
        for (const ps::ServerStats::Table& t : stats.tables) {
          rows += t.rows;
          bytes += t.bytes;
        }
        bytes_in += stats.bytes_in;
      }
      WriteLine(out, absl::StrCat("rows ", rows, " ", bytes, " ", bytes_in));
    }
    return (*client)->Finish();
  };
  return ps::bench::ServeCommands(out, in, run, end);
}

struct Processes {
  ps::bench::Endpoints endpoints{"tcp"};
  std::string scheduler_endpoint;
  std::unique_ptr<Child> scheduler;
  std::vector<std::unique_ptr<Child>> servers, workers;

  void KillAll() {
    if (scheduler) scheduler->Kill();
    for (auto& c : servers) c->Kill();
    for (auto& c : workers) c->Kill();
  }
};

// Server i of the job (host 1 + i); `join`: to the running job (ps_server --join).
absl::Status StartServer(const Config& c, Processes& p, int i, bool join) {
  const Host host = ps::bench::HostAt(c.netns, c.netns_subnet, 1 + i);
  const std::string bind = p.endpoints.Next(host.ip);
  ps::ServerOptions options;
  options.join = join;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Child> server, ForkChild([&](int fd, int) {
                        return ps::bench::RunServerChild(host.ns, p.scheduler_endpoint, bind, {},
                                                         /*server_threads=*/1, fd, options);
                      }));
  PS_RETURN_IF_ERROR(ReadLine(*server, kStartTimeout).status());
  p.servers.push_back(std::move(server));
  return absl::OkStatus();
}

// The job of `shape` as it starts (its first servers when it grows).
absl::Status StartCluster(const Config& c, const Shape& shape, Processes& p) {
  const int servers = shape.grows() ? shape.first : shape.servers, workers = shape.workers;
  const Host sched_host = ps::bench::HostAt(c.netns, c.netns_subnet, 0);
  const std::string sched_bind = p.endpoints.Next(sched_host.ip);
  PS_ASSIGN_OR_RETURN(p.scheduler, ForkChild([&](int fd, int) {
                        return ps::bench::RunSchedulerChild(sched_host.ns, sched_bind, servers, workers, {}, fd,
                                                            /*replicas=*/1, /*elastic=*/shape.grows());
                      }));
  PS_ASSIGN_OR_RETURN(p.scheduler_endpoint, ReadLine(*p.scheduler, kStartTimeout));
  const std::string& scheduler = p.scheduler_endpoint;
  for (int i = 0; i < servers; ++i) PS_RETURN_IF_ERROR(StartServer(c, p, i, /*join=*/false));
  for (int j = 0; j < workers; ++j) {
    const Host host = ps::bench::HostAt(c.netns, c.netns_subnet, 1 + shape.servers + j);
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Child> worker,
                        ForkChild([&](int out, int in) { return RunWorkerChild(host, scheduler, c, j, out, in); }));
    p.workers.push_back(std::move(worker));
  }
  for (auto& w : p.workers) PS_RETURN_IF_ERROR(ps::bench::Expect(*w, "ready", kStartTimeout));
  return absl::OkStatus();
}

// What rank 0 reports as the job ends: the table's rows and bytes over
// every server, and the bytes the servers received in all.
struct TableSize {
  uint64_t rows = 0, bytes = 0, bytes_in = 0;
};

// Ends the job in order (workers finish, the scheduler stops the servers)
// and reads rank 0's report on the way: "rows R BYTES BYTES_IN".
absl::StatusOr<TableSize> Stop(Processes& p) {
  for (auto& w : p.workers) PS_RETURN_IF_ERROR(w->Send("end"));
  TableSize size;
  for (auto& w : p.workers) {
    PS_ASSIGN_OR_RETURN(std::string line, ReadLine(*w, kStartTimeout));
    if (absl::StartsWith(line, "rows ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() != 4 || !absl::SimpleAtoi(parts[1], &size.rows) || !absl::SimpleAtoi(parts[2], &size.bytes) ||
          !absl::SimpleAtoi(parts[3], &size.bytes_in)) {
        return absl::DataLossError(absl::StrCat("worker said '", line, "'"));
      }
      PS_ASSIGN_OR_RETURN(line, ReadLine(*w, kStartTimeout));
    }
    if (line != "done") return absl::DataLossError(absl::StrCat("expected 'done', got '", line, "'"));
  }
  for (auto& w : p.workers) PS_RETURN_IF_ERROR(w->Reap(ps::bench::kReapTimeout));
  PS_RETURN_IF_ERROR(p.scheduler->Reap(ps::bench::kReapTimeout));
  for (auto& s : p.servers) PS_RETURN_IF_ERROR(s->Reap(ps::bench::kReapTimeout));
  return size;
}

// Rows per second of one timed phase of every worker at once.
absl::StatusOr<double> TimedRows(const Config& c, Processes& p, const Command& command,
                                 ps::bench::Aggregate* aggregate) {
  std::vector<Child*> children;
  for (auto& w : p.workers) children.push_back(w.get());
  PS_ASSIGN_OR_RETURN(*aggregate, ps::bench::RunTogether(children, command));
  return static_cast<double>(aggregate->iters) * c.batch / aggregate->seconds;
}

// Earlier runs of this invocation that a configuration compares with.
struct Earlier {
  // Rows/s of SxW started with all its servers, rows in float32, by (S, W).
  std::map<std::pair<int, int>, double> float32;
  // Rows/s and server bytes in of SxW with ids sent raw, by (S, W, the rows' kind).
  std::map<std::tuple<int, int, int>, std::pair<double, uint64_t>> raw_ids;
};

// A configuration's JSON line.
void Report(const Config& c, const Shape& shape, double rows, double first, const ps::bench::Aggregate& a,
            const TableSize& size, double local_rows_per_s, Earlier& earlier) {
  JsonLine line;
  line.Add("bench", shape.grows() ? "table_grown" : "table").Add("servers", shape.servers);
  if (shape.grows()) line.Add("servers_first", shape.first).Add("rows_per_s_before", first, 0);
  const bool compressed = shape.rows != ps::CompressionKind::kNone;
  line.Add("workers", shape.workers)
      .Add("dim", c.dim)
      .Add("batch", c.batch)
      .Add("table_shards", absl::GetFlag(FLAGS_table_shards))
      .Add("network", c.netns.empty() ? "loopback" : "netns:" + c.netns)
      .Add("rows_on_wire", !compressed                                ? "float32"
                           : shape.rows == ps::CompressionKind::kFp16 ? "fp16"
                                                                      : "bf16")
      .Add("ids", c.rank_ids ? "ranks" : "hashed")
      .Add("ids_on_wire", compressed && !shape.raw_ids ? "delta where shorter" : "raw")
      .Add("rows_per_s", rows, 0)
      .Add("ratio_vs_local", rows / local_rows_per_s, 3)
      .Add("step_p50_ms", a.p50_us / 1000, 2)
      .Add("table_rows", size.rows)
      .Add("table_bytes_per_row", size.rows ? static_cast<double>(size.bytes) / size.rows : 0.0, 1)
      .Add("server_bytes_in", size.bytes_in);
  const auto key = std::make_pair(shape.servers, shape.workers);
  const auto kind_key = std::make_tuple(shape.servers, shape.workers, static_cast<int>(shape.rows));
  if (!shape.grows() && !compressed) earlier.float32[key] = rows;
  if (shape.grows() && earlier.float32.count(key)) {
    line.Add("ratio_vs_started_with_all", rows / earlier.float32[key], 3);
  }
  if (compressed && earlier.float32.count(key)) line.Add("ratio_vs_float32_rows", rows / earlier.float32[key], 3);
  if (compressed && shape.raw_ids) earlier.raw_ids[kind_key] = {rows, size.bytes_in};
  if (compressed && !shape.raw_ids && earlier.raw_ids.count(kind_key)) {
    const auto [raw_rows, raw_bytes_in] = earlier.raw_ids[kind_key];
    line.Add("ratio_vs_raw_ids", rows / raw_rows, 3)
        .Add("bytes_in_vs_raw_ids", static_cast<double>(size.bytes_in) / static_cast<double>(raw_bytes_in), 3);
  }
  PrintLine(line);
}

// One configuration: its JSON line ("table", or "table_grown" with the
// rows/s before the joins and the ratio to a job started with as many
// servers earlier in this run).
absl::Status RunConfiguration(const Config& all, const Shape& shape, double local_rows_per_s, Earlier& earlier) {
  Config c = all;
  c.rows = shape.rows;
  c.raw_ids = shape.raw_ids;
  Processes p;
  ps::bench::Aggregate a, before;
  absl::StatusOr<double> first = 0.0, rows = 0.0;
  absl::Status status = StartCluster(c, shape, p);
  if (status.ok() && shape.grows()) {
    first = TimedRows(c, p, {"rows", c.dim, c.steps, 1}, &before);
    for (int i = shape.first; first.ok() && status.ok() && i < shape.servers; ++i) {
      status = StartServer(c, p, i, /*join=*/true);
    }
    if (!first.ok()) status = first.status();
  }
  if (status.ok()) {
    rows = TimedRows(c, p, {shape.grows() ? "grown" : "rows", shape.servers, c.steps, 1}, &a);
    status = rows.status();
  }
  absl::StatusOr<TableSize> size = status.ok() ? Stop(p) : status;
  if (!size.ok()) {
    p.KillAll();
    return size.status();
  }
  Report(c, shape, *rows, *first, a, *size, local_rows_per_s, earlier);
  return absl::OkStatus();
}

// ---- flags and main --------------------------------------------------------------

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_configs), ',', absl::SkipEmpty())) {
    Shape shape;
    if (const size_t colon = part.find(':'); colon != absl::string_view::npos) {
      absl::string_view rows = part.substr(colon + 1);
      shape.raw_ids = absl::ConsumeSuffix(&rows, ":rawids");
      if (rows != "fp16" && rows != "bf16") {
        return absl::InvalidArgumentError(
            absl::StrCat("--configs: '", part, "': rows are ':fp16' or ':bf16', maybe followed by ':rawids'"));
      }
      shape.rows = rows == "fp16" ? ps::CompressionKind::kFp16 : ps::CompressionKind::kBf16;
      part = part.substr(0, colon);
    }
    std::vector<std::string> sw = absl::StrSplit(part, 'x');
    std::vector<std::string> grow = absl::StrSplit(sw[0], absl::MaxSplits('>', 1));
    if (sw.size() != 2 || !absl::SimpleAtoi(grow.back(), &shape.servers) || !absl::SimpleAtoi(sw[1], &shape.workers) ||
        (grow.size() == 2 && !absl::SimpleAtoi(grow[0], &shape.first)) || shape.servers < 1 || shape.workers < 1 ||
        shape.servers > 16 || shape.workers > 16 ||
        (grow.size() == 2 && (shape.first < 1 || shape.first >= shape.servers))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--configs: '", part, "' is not SxW or A>SxW with 1 <= A < S <= 16, 1 <= W <= 16"));
    }
    if (shape.grows() && absl::GetFlag(FLAGS_table_shards) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--configs: '", part,
                                                     "' grows the job: give --table_shards (shards move whole; one "
                                                     "per server would leave the new servers none)"));
    }
    c.configs.push_back(shape);
  }
  if (c.configs.empty()) return absl::InvalidArgumentError("--configs: empty list");
  c.dim = absl::GetFlag(FLAGS_dim);
  c.batch = absl::GetFlag(FLAGS_batch);
  c.zipf_s = absl::GetFlag(FLAGS_zipf_s);
  c.id_space = absl::GetFlag(FLAGS_id_space);
  const std::string ids = absl::GetFlag(FLAGS_ids);
  if (ids != "hashed" && ids != "ranks") return absl::InvalidArgumentError("--ids: 'hashed' or 'ranks'");
  c.rank_ids = ids == "ranks";
  c.steps = absl::GetFlag(FLAGS_steps);
  c.memory_rows = absl::GetFlag(FLAGS_memory_rows);
  c.netns = absl::GetFlag(FLAGS_netns);
  c.netns_subnet = absl::GetFlag(FLAGS_netns_subnet);
  if (c.dim < 1 || c.dim > ps::kMaxTableDim) return absl::InvalidArgumentError(absl::StrCat("--dim: ", c.dim));
  if (c.batch < 1 || c.batch > (1 << 17)) return absl::InvalidArgumentError(absl::StrCat("--batch: ", c.batch));
  if (!(c.zipf_s > 1.0) || c.zipf_s > 10) return absl::InvalidArgumentError("--zipf_s: must be in (1, 10]");
  if (c.id_space < 2) return absl::InvalidArgumentError("--id_space: at least 2");
  if (c.steps < 1 || c.steps > 100000) return absl::InvalidArgumentError(absl::StrCat("--steps: ", c.steps));
  if (c.memory_rows < 0) return absl::InvalidArgumentError("--memory_rows: negative");
  return c;
}

absl::Status RunAll(const Config& c) {
  int hosts = 0;
  for (const Shape& s : c.configs) hosts = std::max(hosts, 1 + s.servers + s.workers);
  PS_RETURN_IF_ERROR(ps::bench::CheckNamespaces(c.netns, hosts));
  const std::vector<std::vector<uint64_t>> batches = MakeBatches(c, 1000);
  LocalTable unbounded(c, 0);
  const double local = LocalRowsPerSecond(c, unbounded, batches);
  PrintLine(JsonLine()
                .Add("bench", "table_local")
                .Add("dim", c.dim)
                .Add("batch", c.batch)
                .Add("rows_per_s", local, 0)
                .Add("table_rows", unbounded.shard().rows()));
  // A tenth of the rows the unbounded run made fit: eviction on most steps.
  LocalTable bounded(c, std::max<uint64_t>(1, unbounded.shard().rows() / 10) * unbounded.shard().RowBytes());
  const double evicting = LocalRowsPerSecond(c, bounded, batches);
  PrintLine(JsonLine()
                .Add("bench", "table_evicting")
                .Add("dim", c.dim)
                .Add("rows_per_s", evicting, 0)
                .Add("ratio_vs_unbounded", evicting / local, 3)
                .Add("table_rows", bounded.shard().rows())
                .Add("evictions", bounded.shard().Stats().evictions));
  if (c.memory_rows > 0) MeasureMemory(c);
  Earlier earlier;
  for (const Shape& s : c.configs) PS_RETURN_IF_ERROR(RunConfiguration(c, s, local, earlier));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "table_bench [--configs=SxW,...] [--dim=64] [--batch=16384] [--zipf_s=1.05] [--steps=40] "
               "[--netns=PREFIX]: embedding-table rows/s through the servers against one in-process table; "
               "JSON lines on stdout.");
  if (!absl::GetFlag(FLAGS_verbose)) FLAGS_minloglevel = google::GLOG_WARNING;
  auto config = ConfigFromFlags();
  if (!config.ok()) return ps::ExitCode(config.status(), "table_bench");
  return ps::ExitCode(RunAll(*config), "table_bench");
}
