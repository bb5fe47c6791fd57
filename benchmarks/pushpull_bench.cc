// pushpull_bench: push+pull goodput and latency of a local cluster (one
// scheduler, S servers, W workers) against raw ZeroMQ between two processes
// and a single-thread memcpy, over tcp:// and ipc:// loopback, or over tcp://
// between network namespaces whose links scripts/netns.py shapes (--netns).
// Prints one JSON object per line on stdout (see docs/benchmarks.md);
// progress goes to stderr.
//
// Process layout per (transport, servers, workers) configuration, every
// process a child of this one:
//   the scheduler; S servers; W workers, each with its own KVClient;
//   for the first configuration of a transport only: a ROUTER echo and a
//   DEALER client, the raw ZeroMQ reference.
// This process creates no ZeroMQ context and no thread, so it may fork at any
// time (fork() copies only the calling thread). It sends commands to the
// workers and the raw client over pipes: "pushpull B N K" makes each warm up,
// say "warm", wait for "go", run N timed operations with K in flight and
// report. "go" goes to every worker at once, so the W timed phases overlap;
// the aggregate goodput is the bytes all of them moved over the time from the
// first start to the last end.
//
// With --netns=P every child enters a network namespace made by
// scripts/netns.py before it creates a socket: the scheduler P0, server i
// P<1+i>, worker j P<1+maxS+j> (maxS the largest --servers value); the raw
// echo runs in server 0's namespace and the raw client in worker 0's. Each
// binds on its namespace's address, so all traffic crosses the shaped links.

#include <unistd.h>
#include <filesystem>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "benchmarks/bench_support.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "common/model/model_spec.h"
#include "common/net/security.h"
#include "glog/logging.h"
#include "worker/client/kv_client.h"
#include "zmq.hpp"

ABSL_FLAG(std::string, sizes, "4096,65536,1048576,4194304,16777216,67108864",
          "Comma list of tensor sizes in bytes (multiples of 4).");
ABSL_FLAG(std::string, servers, "1", "Comma list of server counts (list 1 first for ratio_vs_1_server).");
ABSL_FLAG(std::string, replicas, "1",
          "Comma list of copies kept of every slice (ps_scheduler --replicas; list 1 first for ratio_vs_1_replica); "
          "counts above a run's servers are skipped.");
ABSL_FLAG(std::string, workers, "1", "Comma list of worker counts: worker processes pushing and pulling at once.");
ABSL_FLAG(std::string, transports, "tcp,ipc,shm",
          "Comma list of transports: tcp, ipc, shm (tcp sockets for the handshake, shared memory for the data).");
ABSL_FLAG(int64_t, iters_bytes, int64_t{1} << 30,
          "Target bytes moved per configuration and repetition (both directions, all workers); iterations "
          "are clamped to [20, 5000] and shared among the workers.");
ABSL_FLAG(int, inflight, 1, "Push+pull pairs (and raw round trips) in flight per worker; 1 = sequential PushPull.");
ABSL_FLAG(int, reps, 1, "Timed repetitions of each measurement, raw and push+pull interleaved; figures are medians.");
ABSL_FLAG(std::string, netns, "",
          "Prefix of the network namespaces made by scripts/netns.py: run every process in its own "
          "(scheduler PREFIX0, servers, then workers); tcp only.");
ABSL_FLAG(std::string, netns_subnet, "10.77.0", "First three octets of the namespaces' addresses (PREFIXi has .i+1).");
ABSL_FLAG(bool, elastic_too, false,
          "Also measure one copy with ps_scheduler --elastic (servers may join and drain), right after one copy "
          "without it, printing ratio_vs_1_replica.");
ABSL_FLAG(bool, secure, false,
          "Also measure every configuration with CurveZMQ on every socket (throwaway keys), printing "
          "ratio_secure_vs_plain from the same run.");
ABSL_FLAG(bool, verbose, false, "Keep INFO logs of the scheduler, servers and clients (stderr).");
ABSL_FLAG(bool, caller_io, true,
          "Workers send and collect replies on their own thread over sockets (KVClientOptions::caller_io); "
          "false: through the client's I/O thread.");
ABSL_FLAG(absl::Duration, caller_spin, absl::Microseconds(100),
          "With --caller_io, how long a waiting worker looks at its sockets before it sleeps "
          "(KVClientOptions::caller_spin; 0: never spins).");

namespace {

using ps::JsonLine;
using ps::bench::Aggregate;
using ps::bench::Child;
using ps::bench::Command;
using ps::bench::Endpoints;
using ps::bench::EnterNetns;
using ps::bench::EnterOrReport;
using ps::bench::Expect;
using ps::bench::ForkChild;
using ps::bench::Host;
using ps::bench::Measurement;
using ps::bench::Median;
using ps::bench::ReadLine;
using ps::bench::RunPipelined;
using ps::bench::RunTogether;
using ps::bench::Step;
using ps::bench::WarmHook;
using ps::bench::WarmThenTime;
using ps::bench::WriteLine;
using Clock = std::chrono::steady_clock;

constexpr int kMinIters = 20;
constexpr int kMaxIters = 5000;
constexpr int kMinWorkerIters = 5;
constexpr int kMaxInflight = 64;
constexpr int kMaxWorkers = 16;
// How long a child may take to bind and report its endpoint, and a worker to
// join the cluster.
constexpr absl::Duration kStartTimeout = absl::Seconds(60);
// Sizes up to this also get a pull-only latency line.
constexpr int64_t kLatencyBytes = 65536;

struct Config {
  std::vector<int64_t> sizes;
  std::vector<int> servers;
  std::vector<int> replicas;
  std::vector<int> workers;
  std::vector<std::string> transports;
  int64_t iters_bytes = 0;
  int inflight = 1;
  int reps = 1;
  std::string netns;  // empty: loopback
  std::string netns_subnet;
  bool secure = false;       // also measure with CurveZMQ
  bool elastic_too = false;  // also one copy with --elastic
  // --secure: key pairs of the scheduler, servers and workers, and a
  // directory of their public keys that every CURVE server admits.
  ps::SecurityOptions scheduler_keys, server_keys, worker_keys;
};

// ---- flags -------------------------------------------------------------------

template <typename T>
absl::StatusOr<std::vector<T>> ParseNumbers(const std::string& flag, const std::string& text) {
  std::vector<T> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T v;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", part, "' is not a positive integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty list"));
  return out;
}

absl::Status CheckNetworkFlags(const Config& c) {
  if (c.netns.empty()) return absl::OkStatus();
  for (const std::string& t : c.transports) {
    if (t != "tcp") return absl::InvalidArgumentError("--netns: only --transports=tcp crosses the namespaces' links");
  }
  for (char ch : c.netns) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') {
      return absl::InvalidArgumentError(absl::StrCat("--netns: '", c.netns, "' is not a scripts/netns.py prefix"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  PS_ASSIGN_OR_RETURN(c.sizes, ParseNumbers<int64_t>("sizes", absl::GetFlag(FLAGS_sizes)));
  PS_ASSIGN_OR_RETURN(c.servers, ParseNumbers<int>("servers", absl::GetFlag(FLAGS_servers)));
  PS_ASSIGN_OR_RETURN(c.workers, ParseNumbers<int>("workers", absl::GetFlag(FLAGS_workers)));
  PS_ASSIGN_OR_RETURN(c.replicas, ParseNumbers<int>("replicas", absl::GetFlag(FLAGS_replicas)));
  for (int64_t s : c.sizes) {
    if (s % 4 != 0) return absl::InvalidArgumentError(absl::StrCat("--sizes: ", s, " is not a multiple of 4"));
  }
  for (int s : c.servers) {
    if (s > 64) return absl::InvalidArgumentError(absl::StrCat("--servers: ", s, " is more than 64"));
  }
  for (int w : c.workers) {
    if (w > kMaxWorkers) {
      return absl::InvalidArgumentError(absl::StrCat("--workers: ", w, " is more than ", kMaxWorkers));
    }
  }
  c.transports = absl::StrSplit(absl::GetFlag(FLAGS_transports), ',', absl::SkipEmpty());
  if (c.transports.empty()) return absl::InvalidArgumentError("--transports: empty list");
  for (const std::string& t : c.transports) {
    if (t != "tcp" && t != "ipc" && t != "shm") {
      return absl::InvalidArgumentError(absl::StrCat("--transports: unknown '", t, "'"));
    }
  }
  c.iters_bytes = absl::GetFlag(FLAGS_iters_bytes);
  if (c.iters_bytes <= 0) return absl::InvalidArgumentError("--iters_bytes must be positive");
  c.inflight = absl::GetFlag(FLAGS_inflight);
  if (c.inflight < 1 || c.inflight > kMaxInflight) {
    return absl::InvalidArgumentError(absl::StrCat("--inflight must be in [1, ", kMaxInflight, "]"));
  }
  c.reps = absl::GetFlag(FLAGS_reps);
  if (c.reps < 1 || c.reps > 100) return absl::InvalidArgumentError("--reps must be in [1, 100]");
  const absl::Duration spin = absl::GetFlag(FLAGS_caller_spin);
  if (spin < absl::ZeroDuration() || spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError("--caller_spin must be in [0, 1s]");
  }
  c.netns = absl::GetFlag(FLAGS_netns);
  c.netns_subnet = absl::GetFlag(FLAGS_netns_subnet);
  PS_RETURN_IF_ERROR(CheckNetworkFlags(c));
  c.secure = absl::GetFlag(FLAGS_secure);
  c.elastic_too = absl::GetFlag(FLAGS_elastic_too);
  return c;
}

// Timed iterations of one configuration and repetition, all workers together.
int IterationsFor(const Config& c, int64_t bytes) {
  const int64_t n = c.iters_bytes / (2 * bytes);
  return static_cast<int>(std::clamp<int64_t>(n, kMinIters, kMaxIters));
}

// Each worker's share of them.
int WorkerIterations(const Config& c, int64_t bytes, int workers) {
  return std::max(kMinWorkerIters, (IterationsFor(c, bytes) + workers - 1) / workers);
}

// ---- where each process runs ---------------------------------------------------

int MaxOf(const std::vector<int>& v) { return *std::max_element(v.begin(), v.end()); }

// Host indices: the scheduler 0, server i 1 + i, worker j 1 + maxS + j.
int HostsNeeded(const Config& c) { return 1 + MaxOf(c.servers) + MaxOf(c.workers); }
int ServerHost(int i) { return 1 + i; }
int WorkerHost(const Config& c, int j) { return 1 + MaxOf(c.servers) + j; }

Host HostAt(const Config& c, int index) { return ps::bench::HostAt(c.netns, c.netns_subnet, index); }

std::string NetworkName(const Config& c) { return c.netns.empty() ? "loopback" : "netns:" + c.netns; }

absl::Status CheckNamespaces(const Config& c) { return ps::bench::CheckNamespaces(c.netns, HostsNeeded(c)); }

// ---- measurements (in the children) ----------------------------------------------

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Send and receive buffers per slot, touched once so no page fault lands in
// the timed loop.
struct SlotBuffers {
  std::vector<std::vector<float>> send, recv;
  SlotBuffers(int slots, int64_t bytes)
      : send(slots, std::vector<float>(bytes / 4, 1.0f)), recv(slots, std::vector<float>(bytes / 4, 0.0f)) {}
};

absl::StatusOr<Measurement> MeasureRaw(zmq::socket_t& dealer, int64_t bytes, int iters, int depth,
                                       const WarmHook& warm) {
  SlotBuffers buffers(depth, bytes);
  auto issue = [&](int slot) -> absl::Status {
    // Zero-copy from the slot's buffer, as KVClient sends pushes.
    zmq::message_t msg(buffers.send[slot].data(), bytes, nullptr, nullptr);
    if (!dealer.send(msg, zmq::send_flags::none)) return absl::UnavailableError("raw send would block");
    return absl::OkStatus();
  };
  auto complete = [&](int slot) -> absl::Status {
    zmq::message_t reply;
    if (!dealer.recv(reply)) return absl::DeadlineExceededError("raw echo: no answer in 60 s");
    if (static_cast<int64_t>(reply.size()) != bytes) {
      return absl::DataLossError(absl::StrCat("raw echo answered ", reply.size(), " bytes, sent ", bytes));
    }
    return absl::OkStatus();
  };
  return WarmThenTime(iters, depth, issue, complete, warm);
}

absl::StatusOr<Measurement> MeasurePushPull(ps::KVClient& client, int tensor, int64_t bytes, int iters, int depth,
                                            const WarmHook& warm) {
  SlotBuffers buffers(depth, bytes);
  int64_t clock = 0;
  if (depth == 1) {
    auto nothing = [](int) { return absl::OkStatus(); };
    auto push_pull = [&](int) {
      const ps::ConstTensorBuffer grad{tensor, buffers.send[0]};
      const ps::TensorBuffer out{tensor, absl::MakeSpan(buffers.recv[0])};
      return client.Wait(client.PushPull({&grad, 1}, {&out, 1}, clock++));
    };
    return WarmThenTime(iters, 1, nothing, push_pull, warm);
  }
  std::vector<ps::KVClient::Ticket> tickets(depth);
  auto issue = [&](int slot) {
    const ps::ConstTensorBuffer grad{tensor, buffers.send[slot]};
    const ps::TensorBuffer out{tensor, absl::MakeSpan(buffers.recv[slot])};
    tickets[slot] = client.PushPull({&grad, 1}, {&out, 1}, clock++);
    return absl::OkStatus();
  };
  auto complete = [&](int slot) { return client.Wait(tickets[slot]); };
  return WarmThenTime(iters, depth, issue, complete, warm);
}

// A pull alone, one at a time: the latency a worker waits for fresh values.
absl::StatusOr<Measurement> MeasurePull(ps::KVClient& client, int tensor, int64_t bytes, int iters,
                                        const WarmHook& warm) {
  SlotBuffers buffers(1, bytes);
  auto nothing = [](int) { return absl::OkStatus(); };
  auto pull = [&](int) {
    const ps::TensorBuffer out{tensor, absl::MakeSpan(buffers.recv[0])};
    return client.Wait(client.Pull({&out, 1}, 0));
  };
  return WarmThenTime(iters, 1, nothing, pull, warm);
}

double MemcpyGbps(int64_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  // Copies between clock reads, so that reading the clock costs little next
  // to a 4 KiB copy.
  const int64_t batch = std::max<int64_t>(1, (int64_t{1} << 20) / bytes);
  int64_t reps = 0;
  const Clock::time_point t0 = Clock::now();
  double seconds = 0;
  do {
    for (int64_t i = 0; i < batch; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");  // keep every copy
    }
    reps += batch;
    seconds = Since(t0);
  } while (seconds < 0.1 || reps < 3);
  return static_cast<double>(bytes) * reps / seconds / 1e9;
}

// ---- child bodies ----------------------------------------------------------------

// Child: a ROUTER that answers each [id][B bytes] with [id][B bytes] until it
// gets an empty payload. The answer is sent zero-copy from one preallocated
// buffer (a ZeroMQ constant message: no free function, no copy); the request
// is received into ZeroMQ's own buffer, as any receiver must.
int RunRawEchoChild(const std::string& ns, const std::string& bind, size_t max_bytes, int fd) {
  if (!EnterOrReport(ns, "raw echo", fd)) return 1;
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::rcvtimeo, 600000);  // a parent gone silent for 10 minutes ends it
  try {
    router.bind(bind);
  } catch (const zmq::error_t& e) {
    WriteLine(fd, absl::StrCat("ERR bind ", bind, ": ", e.what()));
    return 1;
  }
  WriteLine(fd, router.get(zmq::sockopt::last_endpoint));
  std::vector<char> answer(std::max<size_t>(max_bytes, 1), 1);
  while (true) {
    zmq::message_t id, payload;
    if (!router.recv(id) || !id.more() || !router.recv(payload)) return 1;
    const size_t n = std::min(payload.size(), max_bytes);
    zmq::message_t reply(answer.data(), n, nullptr, nullptr);
    router.send(id, zmq::send_flags::sndmore);
    router.send(reply, zmq::send_flags::none);
    if (payload.size() == 0) break;
  }
  router.set(zmq::sockopt::linger, 1000);
  return 0;
}

// Child: the raw reference's DEALER, running "raw" commands.
int RunRawClientChild(const std::string& ns, const std::string& echo, int out, int in) {
  if (!EnterOrReport(ns, "raw client", out)) return 1;
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 60000);
  dealer.set(zmq::sockopt::linger, 1000);
  dealer.connect(echo);
  WriteLine(out, "ready");
  auto run = [&](const Command& c, const WarmHook& warm) -> absl::StatusOr<Measurement> {
    if (c.name != "raw") return absl::InvalidArgumentError(absl::StrCat("raw client: unknown command ", c.name));
    return MeasureRaw(dealer, c.bytes, c.iters, c.depth, warm);
  };
  auto end = [&]() -> absl::Status {  // tells the echo to exit and waits for its last answer
    zmq::message_t empty;
    if (dealer.send(empty, zmq::send_flags::none)) (void)dealer.recv(empty);
    return absl::OkStatus();
  };
  return ps::bench::ServeCommands(out, in, run, end);
}

ps::ModelSpec BenchModel(const Config& c) {
  ps::ModelSpec model;
  for (int64_t bytes : c.sizes) {
    model.tensors.push_back(ps::TensorSpec{absl::StrCat("t", bytes), {bytes / 4}, ps::Initializer::Zeros()});
  }
  model.optimizer.kind = ps::OptimizerKind::kSgd;
  model.optimizer.learning_rate = 1e-9f;  // gradients of 1.0 keep every value finite
  model.consistency.mode = ps::ConsistencyMode::kAsync;
  return model;  // default placement: 1 MiB slices spread over the servers
}

// One configuration: a transport, S servers, W workers, plain or secure.
struct Run {
  const Config& c;
  std::string transport;
  int servers = 1;
  int workers = 1;
  bool secure = false;
  int replicas = 1;
  bool elastic = false;  // ps_scheduler --elastic
};

// Child: one worker, running "pushpull" and "pull" commands; "end" finishes
// it (the job ends when every worker has).
int RunWorkerChild(const std::string& ns, const std::string& scheduler, const Run& r, int out, int in) {
  const Config& c = r.c;
  const bool secure = r.secure;
  if (!EnterOrReport(ns, "worker", out)) return 1;
  ps::KVClientOptions options;
  options.scheduler = scheduler;
  options.shm = r.transport == "shm";
  options.caller_io = absl::GetFlag(FLAGS_caller_io);
  options.caller_spin = absl::GetFlag(FLAGS_caller_spin);
  options.register_timeout = absl::Seconds(30);
  if (secure) {
    options.security = c.worker_keys;
  } else if (!ns.empty()) {
    ps::bench::AllowPlaintextInNetns(options);
  }
  auto client = ps::KVClient::Connect(options);
  absl::Status status = client.ok() ? (*client)->RegisterModel(BenchModel(c)) : client.status();
  // A request to each server settles its channel; shm must have one with every server.
  for (int s = 0; status.ok() && s < r.servers; ++s) status = (*client)->GetServerStats(s).status();
  if (status.ok() && options.shm && (*client)->stats().shm_servers != r.servers) {
    status =
        absl::FailedPreconditionError(absl::StrCat("transport shm: shared memory with ", (*client)->stats().shm_servers,
                                                   " of ", r.servers, " servers (see the worker's log)"));
  }
  if (!status.ok()) {
    WriteLine(out, absl::StrCat("ERR worker: ", status.ToString()));
    return 1;
  }
  WriteLine(out, "ready");
  auto run = [&](const Command& cmd, const WarmHook& warm) -> absl::StatusOr<Measurement> {
    PS_ASSIGN_OR_RETURN(const int tensor, (*client)->TensorIndex(absl::StrCat("t", cmd.bytes)));
    if (cmd.name == "pushpull") return MeasurePushPull(**client, tensor, cmd.bytes, cmd.iters, cmd.depth, warm);
    if (cmd.name == "pull") return MeasurePull(**client, tensor, cmd.bytes, cmd.iters, warm);
    return absl::InvalidArgumentError(absl::StrCat("worker: unknown command ", cmd.name));
  };
  return ps::bench::ServeCommands(out, in, run, [&] { return (*client)->Finish(); });
}

// ---- the parent's side -----------------------------------------------------------

// Medians over repetitions of one measurement.
struct Summary {
  int iters = 0;  // per repetition
  double gbps = 0, gbps_min = 0, gbps_max = 0, p50_us = 0, p99_us = 0;
};

Summary Summarize(const std::vector<Aggregate>& reps, double bytes_per_iter) {
  std::vector<double> gbps, p50, p99;
  for (const Aggregate& a : reps) {
    gbps.push_back(a.Gbps(bytes_per_iter));
    p50.push_back(a.p50_us);
    p99.push_back(a.p99_us);
  }
  return {reps.front().iters,
          Median(gbps),
          *std::min_element(gbps.begin(), gbps.end()),
          *std::max_element(gbps.begin(), gbps.end()),
          Median(p50),
          Median(p99)};
}

// The children of one configuration. KillAll() on an error path makes the
// destructors' reaping quick.
struct Processes {
  std::unique_ptr<Child> raw_echo, raw_client, scheduler;
  std::vector<std::unique_ptr<Child>> servers, workers;

  std::vector<Child*> Workers() const {
    std::vector<Child*> out;
    for (const auto& w : workers) out.push_back(w.get());
    return out;
  }
  void KillAll() {
    for (Child* c : {raw_echo.get(), raw_client.get(), scheduler.get()}) {
      if (c != nullptr) c->Kill();
    }
    for (auto& c : servers) c->Kill();
    for (auto& c : workers) c->Kill();
  }
};

// Raw ZeroMQ figures by size, measured in the first configuration of a
// transport and reused for the others.
struct RawFigures {
  std::map<int64_t, double> gbps;
  std::map<int64_t, double> p50_us;
};

// Push+pull goodput with one server, by (transport, workers, bytes).
// Figures kept across configurations: push+pull goodput with one server by
// (transport, workers, bytes), and plain tcp's goodput and pull p50 by
// (servers, workers, bytes), which the shm lines are compared with.
struct OneServerGbps {
  std::map<std::tuple<std::string, int, int64_t>, double> one_server;
  std::map<std::tuple<int, int, int64_t>, std::pair<double, double>> tcp;
  // One copy of each slice, by (transport, servers, workers, bytes).
  std::map<std::tuple<std::string, int, int, int64_t>, double> one_replica;
};

// The fields every pushpull and pull line starts with, after "bench".
JsonLine Common(const std::string& bench, const Run& r, int64_t bytes) {
  return JsonLine()
      .Add("bench", bench)
      .Add("transport", r.transport)
      .Add("network", NetworkName(r.c))
      .Add("servers", r.servers)
      .Add("workers", r.workers)
      .Add("replicas", r.replicas)
      .Add("elastic", r.elastic)
      .Add("bytes", bytes)
      .Add("secure", r.secure)
      .Add("caller_io", absl::GetFlag(FLAGS_caller_io))
      .Add("caller_spin_us", absl::ToInt64Microseconds(absl::GetFlag(FLAGS_caller_spin)));
}

// Push+pull goodput of the plain run of a configuration, by bytes: the
// reference of its secured run.
using PlainGbps = std::map<int64_t, double>;

void PrintLine(const JsonLine& line) { std::printf("%s\n", line.Str().c_str()); }

void PrintRaw(const Run& r, int64_t bytes, const Summary& s) {
  PrintLine(JsonLine()
                .Add("bench", "raw_zmq")
                .Add("transport", r.transport)
                .Add("network", NetworkName(r.c))
                .Add("bytes", bytes)
                .Add("inflight", r.c.inflight)
                .Add("iters", s.iters)
                .Add("reps", r.c.reps)
                .Add("gbps", s.gbps, 3)
                .Add("gbps_min", s.gbps_min, 3)
                .Add("gbps_max", s.gbps_max, 3)
                .Add("p50_us", s.p50_us, 1)
                .Add("p99_us", s.p99_us, 1));
}

// tcp_gbps > 0: the same shape over plain tcp in this run (an shm line).
void PrintPushPull(const Run& r, int64_t bytes, const Summary& s, double raw_gbps, double raw_p50,
                   double one_server_gbps, double plain_gbps, double tcp_gbps, double one_replica_gbps) {
  JsonLine line = Common("pushpull", r, bytes);
  line.Add("inflight", r.c.inflight)
      .Add("iters", s.iters)
      .Add("reps", r.c.reps)
      .Add("push_pull_gbps", s.gbps, 3)
      .Add("gbps_min", s.gbps_min, 3)
      .Add("gbps_max", s.gbps_max, 3)
      .Add("p50_us", s.p50_us, 1)
      .Add("p99_us", s.p99_us, 1)
      .Add("raw_zmq_gbps", raw_gbps, 3)
      .Add("ratio_vs_raw", raw_gbps > 0 ? s.gbps / raw_gbps : 0.0, 3)
      .Add("ratio_p50_vs_raw", raw_p50 > 0 ? s.p50_us / raw_p50 : 0.0, 3)
      .Add("ratio_vs_1_server", one_server_gbps > 0 ? std::optional<double>(s.gbps / one_server_gbps) : std::nullopt,
           3);
  if (r.secure && plain_gbps > 0) line.Add("ratio_secure_vs_plain", s.gbps / plain_gbps, 3);
  if (tcp_gbps > 0) line.Add("tcp_gbps", tcp_gbps, 3).Add("ratio_vs_tcp", s.gbps / tcp_gbps, 3);
  if ((r.replicas > 1 || r.elastic) && one_replica_gbps > 0)
    line.Add("ratio_vs_1_replica", s.gbps / one_replica_gbps, 3);
  PrintLine(line);
}

void PrintPull(const Run& r, int64_t bytes, const Summary& s, double raw_p50, double tcp_p50) {
  JsonLine line = Common("pull", r, bytes);
  line.Add("iters", s.iters)
      .Add("reps", r.c.reps)
      .Add("p50_us", s.p50_us, 1)
      .Add("p99_us", s.p99_us, 1)
      .Add("raw_round_trip_p50_us", raw_p50, 1)
      .Add("ratio_p50_vs_raw", raw_p50 > 0 ? s.p50_us / raw_p50 : 0.0, 3);
  if (tcp_p50 > 0) line.Add("tcp_p50_us", tcp_p50, 1).Add("ratio_p50_vs_tcp", s.p50_us / tcp_p50, 3);
  PrintLine(line);
}

// Measures every size on one live cluster, each repetition the raw reference
// (when there is a raw client) then push+pull, then the pull alone.
// One size measured, on stderr for whoever watches the run.
void PrintProgress(const Run& r, int64_t bytes, const Summary& s, double raw_gbps, double one_server_gbps) {
  std::fprintf(stderr,
               "pushpull_bench: %s %s servers=%d workers=%d bytes=%ld inflight=%d iters=%d reps=%d: push+pull "
               "%.3f GB/s p50 %.1f us; raw %.3f GB/s; ratio %.2f; vs 1 server %.2f\n",
               r.transport.c_str(), NetworkName(r.c).c_str(), r.servers, r.workers, static_cast<long>(bytes),
               r.c.inflight, s.iters, r.c.reps, s.gbps, s.p50_us, raw_gbps, raw_gbps > 0 ? s.gbps / raw_gbps : 0.0,
               one_server_gbps > 0 ? s.gbps / one_server_gbps : 0.0);
}

absl::Status MeasureSizes(const Run& r, Processes& p, RawFigures& raw, OneServerGbps& one_server, PlainGbps& plain) {
  const Config& c = r.c;
  for (int64_t bytes : c.sizes) {
    const int per_worker = WorkerIterations(c, bytes, r.workers);
    std::vector<Aggregate> raw_reps, pp_reps, pull_reps;
    for (int rep = 0; rep < c.reps; ++rep) {
      if (p.raw_client != nullptr) {
        PS_ASSIGN_OR_RETURN(Aggregate a,
                            RunTogether({p.raw_client.get()}, {"raw", bytes, IterationsFor(c, bytes), c.inflight}));
        raw_reps.push_back(a);
      }
      PS_ASSIGN_OR_RETURN(Aggregate a, RunTogether(p.Workers(), {"pushpull", bytes, per_worker, c.inflight}));
      pp_reps.push_back(a);
      if (bytes <= kLatencyBytes) {
        PS_ASSIGN_OR_RETURN(Aggregate l,
                            RunTogether({p.workers[0].get()}, {"pull", bytes, IterationsFor(c, bytes), 1}));
        pull_reps.push_back(l);
      }
    }
    if (!raw_reps.empty()) {
      const Summary s = Summarize(raw_reps, 2.0 * bytes);
      PrintRaw(r, bytes, s);
      raw.gbps[bytes] = s.gbps;
      raw.p50_us[bytes] = s.p50_us;
    }
    const Summary s = Summarize(pp_reps, 2.0 * bytes);
    const bool one_copy = r.replicas == 1 && !r.elastic;  // the reference of the ratios
    const auto key = std::make_tuple(r.transport + (r.secure ? "+curve" : ""), r.workers, bytes);
    if (r.servers == 1 && one_copy) one_server.one_server[key] = s.gbps;
    const auto replica_key = std::make_tuple(r.transport + (r.secure ? "+curve" : ""), r.servers, r.workers, bytes);
    if (one_copy) one_server.one_replica[replica_key] = s.gbps;
    const double one_replica = one_server.one_replica.count(replica_key) ? one_server.one_replica[replica_key] : 0.0;
    const double one = one_server.one_server.count(key) ? one_server.one_server[key] : 0.0;
    if (!r.secure) plain[bytes] = s.gbps;
    const Summary pull = pull_reps.empty() ? Summary{} : Summarize(pull_reps, bytes);
    const auto shape = std::make_tuple(r.servers, r.workers, bytes);
    if (r.transport == "tcp" && !r.secure && one_copy) one_server.tcp[shape] = {s.gbps, pull.p50_us};
    const std::pair<double, double> tcp =
        r.transport == "shm" && one_server.tcp.count(shape) ? one_server.tcp[shape] : std::pair<double, double>{};
    PrintPushPull(r, bytes, s, raw.gbps[bytes], raw.p50_us[bytes], one, plain[bytes], tcp.first, one_replica);
    if (!pull_reps.empty()) PrintPull(r, bytes, pull, raw.p50_us[bytes], tcp.second);
    std::fflush(stdout);
    PrintProgress(r, bytes, s, raw.gbps[bytes], one);
  }
  return absl::OkStatus();
}

// Expects `child`'s next line to be `want`.
absl::Status StartRaw(const Run& r, Endpoints& endpoints, Processes& p) {
  const Host echo_host = HostAt(r.c, ServerHost(0));
  const Host client_host = HostAt(r.c, WorkerHost(r.c, 0));
  const std::string bind = endpoints.Next(echo_host.ip);
  const size_t max_bytes = static_cast<size_t>(*std::max_element(r.c.sizes.begin(), r.c.sizes.end()));
  PS_ASSIGN_OR_RETURN(p.raw_echo,
                      ForkChild([&](int fd, int) { return RunRawEchoChild(echo_host.ns, bind, max_bytes, fd); }));
  PS_ASSIGN_OR_RETURN(const std::string echo, ReadLine(*p.raw_echo, kStartTimeout));
  PS_ASSIGN_OR_RETURN(p.raw_client,
                      ForkChild([&](int out, int in) { return RunRawClientChild(client_host.ns, echo, out, in); }));
  return Expect(*p.raw_client, "ready", kStartTimeout);
}

absl::Status StartCluster(const Run& r, Endpoints& endpoints, Processes& p) {
  const Host sched_host = HostAt(r.c, 0);
  const std::string sched_bind = endpoints.Next(sched_host.ip);
  PS_ASSIGN_OR_RETURN(p.scheduler, ForkChild([&](int fd, int) {
                        return ps::bench::RunSchedulerChild(sched_host.ns, sched_bind, r.servers, r.workers,
                                                            r.secure ? r.c.scheduler_keys : ps::SecurityOptions{}, fd,
                                                            r.replicas, r.elastic);
                      }));
  PS_ASSIGN_OR_RETURN(const std::string scheduler, ReadLine(*p.scheduler, kStartTimeout));
  for (int i = 0; i < r.servers; ++i) {
    const Host host = HostAt(r.c, ServerHost(i));
    const std::string bind = endpoints.Next(host.ip);
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Child> server, ForkChild([&](int fd, int) {
                          return ps::bench::RunServerChild(host.ns, scheduler, bind,
                                                           r.secure ? r.c.server_keys : ps::SecurityOptions{},
                                                           /*server_threads=*/0, fd);
                        }));
    PS_RETURN_IF_ERROR(ReadLine(*server, kStartTimeout).status());
    p.servers.push_back(std::move(server));
  }
  for (int j = 0; j < r.workers; ++j) {
    const Host host = HostAt(r.c, WorkerHost(r.c, j));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Child> worker,
                        ForkChild([&](int out, int in) { return RunWorkerChild(host.ns, scheduler, r, out, in); }));
    p.workers.push_back(std::move(worker));
  }
  // Every worker must have registered before any can return from Connect.
  for (auto& w : p.workers) PS_RETURN_IF_ERROR(Expect(*w, "ready", kStartTimeout));
  return absl::OkStatus();
}

// Ends the job in order: the raw pair, then every worker (the scheduler then
// stops the servers), then reaps every child.
absl::Status Stop(Processes& p) {
  if (p.raw_client != nullptr) {
    PS_RETURN_IF_ERROR(p.raw_client->Send("end"));
    PS_RETURN_IF_ERROR(Expect(*p.raw_client, "done", kStartTimeout));
  }
  for (auto& w : p.workers) PS_RETURN_IF_ERROR(w->Send("end"));
  for (auto& w : p.workers) PS_RETURN_IF_ERROR(Expect(*w, "done", kStartTimeout));
  for (Child* c : {p.raw_client.get(), p.raw_echo.get()}) {
    if (c != nullptr) PS_RETURN_IF_ERROR(c->Reap(ps::bench::kReapTimeout));
  }
  for (auto& w : p.workers) PS_RETURN_IF_ERROR(w->Reap(ps::bench::kReapTimeout));
  PS_RETURN_IF_ERROR(p.scheduler->Reap(ps::bench::kReapTimeout));
  for (auto& s : p.servers) PS_RETURN_IF_ERROR(s->Reap(ps::bench::kReapTimeout));
  return absl::OkStatus();
}

absl::Status RunConfiguration(const Run& r, bool with_raw, RawFigures& raw, OneServerGbps& one_server,
                              PlainGbps& plain) {
  // shm: tcp sockets carry the handshake (and the raw reference).
  Endpoints endpoints(r.transport == "shm" ? "tcp" : r.transport);  // outlives the children: removes ipc files last
  Processes p;
  absl::Status status = with_raw ? StartRaw(r, endpoints, p) : absl::OkStatus();
  if (status.ok()) status = StartCluster(r, endpoints, p);
  if (status.ok()) status = MeasureSizes(r, p, raw, one_server, plain);
  if (status.ok()) status = Stop(p);
  if (!status.ok()) p.KillAll();
  return status;
}

// --secure: a throwaway key pair per role in a fresh directory, which is also
// the authorised-keys directory (every *.pub in it is admitted).
absl::Status MakeKeys(Config& c, std::string* dir) {
  char tmpl[] = "/tmp/pushpull-keys.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp for the bench's keys failed");
  *dir = tmpl;
  for (const char* name : {"scheduler", "server", "worker"}) {
    PS_ASSIGN_OR_RETURN(ps::CurveKeyPair keys, ps::GenerateCurveKeyPair());
    PS_RETURN_IF_ERROR(ps::WriteKeyPair(*dir, name, keys));
  }
  const std::string scheduler_pub = *dir + "/scheduler.pub";
  c.scheduler_keys.secret_key_file = *dir + "/scheduler.key";
  c.scheduler_keys.authorized_keys = *dir;
  c.server_keys.secret_key_file = *dir + "/server.key";
  c.server_keys.authorized_keys = *dir;
  c.server_keys.scheduler_public_key = scheduler_pub;
  c.worker_keys.secret_key_file = *dir + "/worker.key";
  c.worker_keys.scheduler_public_key = scheduler_pub;
  return absl::OkStatus();
}

absl::Status RunAll(Config c) {
  PS_RETURN_IF_ERROR(CheckNamespaces(c));
  std::string key_dir;
  if (c.secure) PS_RETURN_IF_ERROR(MakeKeys(c, &key_dir));
  // The keys go when the run ends, however it ends.
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } remove_keys{key_dir};
  for (int64_t bytes : c.sizes) {
    PrintLine(JsonLine().Add("bench", "memcpy").Add("bytes", bytes).Add("gbps", MemcpyGbps(bytes), 3));
    std::fflush(stdout);
  }
  OneServerGbps one_server;
  for (const std::string& transport : c.transports) {
    RawFigures raw;
    bool first = true;
    for (int servers : c.servers) {
      for (int workers : c.workers) {
        for (int replicas : c.replicas) {
          if (replicas > servers) continue;
          PlainGbps plain;
          PS_RETURN_IF_ERROR(
              RunConfiguration({c, transport, servers, workers, false, replicas}, first, raw, one_server, plain));
          first = false;
          if (c.secure) {
            PS_RETURN_IF_ERROR(RunConfiguration({c, transport, servers, workers, /*secure=*/true, replicas}, false, raw,
                                                one_server, plain));
          }
          if (c.elastic_too && replicas == 1) {
            PS_RETURN_IF_ERROR(RunConfiguration({c, transport, servers, workers, false, 1, /*elastic=*/true}, false,
                                                raw, one_server, plain));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "pushpull_bench [--sizes=B,...] [--servers=S,...] [--workers=W,...] [--transports=tcp,ipc] "
               "[--inflight=K] [--reps=N] [--netns=PREFIX]: push+pull goodput of a local cluster against raw "
               "ZeroMQ; JSON lines on stdout.");
  if (!absl::GetFlag(FLAGS_verbose)) FLAGS_minloglevel = google::GLOG_WARNING;
  auto config = ConfigFromFlags();
  if (!config.ok()) return ps::ExitCode(config.status(), "pushpull_bench");
  return ps::ExitCode(RunAll(*config), "pushpull_bench");
}
