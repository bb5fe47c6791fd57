// pushpull_bench: push+pull goodput and latency of a local cluster (one
// scheduler, S servers, one worker) against raw ZeroMQ between two processes
// and a single-thread memcpy, over tcp:// and ipc:// loopback. Prints one JSON
// object per line on stdout (see benchmarks/README.md); progress goes to stderr.
//
// Process layout per (transport, servers) configuration:
//   parent (this process): the KVClient, and the DEALER of the raw reference;
//   child 1 (first servers value of a transport only): a ROUTER echo server;
//   child 2: the scheduler on its main thread and S servers on S threads.
// Children are forked while the parent has no ZeroMQ context and no thread
// (every context of the previous configuration is gone by then): fork() copies
// only the calling thread, so a context alive across fork() would be unusable.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/main_support.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "worker/kv_client.h"
#include "zmq.hpp"
#include "benchmarks/bench_support.h"

ABSL_FLAG(std::string, sizes, "4096,65536,1048576,4194304,16777216,67108864",
          "Comma list of tensor sizes in bytes (multiples of 4).");
ABSL_FLAG(std::string, servers, "1", "Comma list of server counts.");
ABSL_FLAG(std::string, transports, "tcp,ipc", "Comma list of transports: tcp, ipc.");
ABSL_FLAG(int64_t, iters_bytes, int64_t{1} << 30,
          "Target bytes moved per configuration (both directions); iterations are clamped to [20, 5000].");
ABSL_FLAG(int, inflight, 1,
          "Push+pull pairs (and raw round trips) in flight; 1 = sequential PushPull.");
ABSL_FLAG(bool, verbose, false, "Keep INFO logs of the scheduler, servers and client (stderr).");

namespace {

using ps::bench::Child;
using ps::bench::Endpoints;
using ps::bench::RunClusterChild;
using ps::bench::WriteLine;
using Clock = std::chrono::steady_clock;

constexpr int kMinIters = 20;
constexpr int kMaxIters = 5000;
constexpr int kMaxInflight = 64;
// How long a child may take to bind and report its endpoint.
constexpr absl::Duration kStartTimeout = absl::Seconds(30);
// Sizes up to this also get a pull-only latency line.
constexpr int64_t kLatencyBytes = 65536;

struct Config {
  std::vector<int64_t> sizes;
  std::vector<int> servers;
  std::vector<std::string> transports;
  int64_t iters_bytes = 0;
  int inflight = 1;
};

// Per-iteration latencies and the wall time of the timed phase.
struct Measurement {
  int iters = 0;
  double seconds = 0;
  std::vector<double> latency_us;

  double Gbps(double bytes_per_iter) const { return bytes_per_iter * iters / seconds / 1e9; }
  // Nearest-rank percentile, p in (0, 1].
  double Percentile(double p) const {
    std::vector<double> sorted = latency_us;
    std::sort(sorted.begin(), sorted.end());
    const size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
    return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
  }
};

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  PS_ASSIGN_OR_RETURN(c.sizes, ParseNumbers<int64_t>("sizes", absl::GetFlag(FLAGS_sizes)));
  PS_ASSIGN_OR_RETURN(c.servers, ParseNumbers<int>("servers", absl::GetFlag(FLAGS_servers)));
  for (int64_t s : c.sizes) {
    if (s % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: ", s, " is not a multiple of 4"));
    }
  }
  for (int s : c.servers) {
    if (s > 64) return absl::InvalidArgumentError(absl::StrCat("--servers: ", s, " is more than 64"));
  }
  c.transports = absl::StrSplit(absl::GetFlag(FLAGS_transports), ',', absl::SkipEmpty());
  if (c.transports.empty()) return absl::InvalidArgumentError("--transports: empty list");
  for (const std::string& t : c.transports) {
    if (t != "tcp" && t != "ipc") {
      return absl::InvalidArgumentError(absl::StrCat("--transports: unknown '", t, "'"));
    }
  }
  c.iters_bytes = absl::GetFlag(FLAGS_iters_bytes);
  if (c.iters_bytes <= 0) return absl::InvalidArgumentError("--iters_bytes must be positive");
  c.inflight = absl::GetFlag(FLAGS_inflight);
  if (c.inflight < 1 || c.inflight > kMaxInflight) {
    return absl::InvalidArgumentError(absl::StrCat("--inflight must be in [1, ", kMaxInflight, "]"));
  }
  return c;
}

// One iteration moves `bytes` each way.
int IterationsFor(const Config& c, int64_t bytes) {
  const int64_t n = c.iters_bytes / (2 * bytes);
  return static_cast<int>(std::clamp<int64_t>(n, kMinIters, kMaxIters));
}

int WarmupFor(int iters) { return std::clamp(iters / 10, 3, 50); }

// ---- child processes -----------------------------------------------------------

// Child: a ROUTER that answers each [id][B bytes] with [id][B bytes] until it
// gets an empty payload. The answer is sent zero-copy from one preallocated
// buffer (a ZeroMQ constant message: no free function, no copy); the request
// is received into ZeroMQ's own buffer, as any receiver must.
int RunRawEchoChild(const std::string& bind, size_t max_bytes, int fd) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::rcvtimeo, 300000);  // a parent gone silent for 5 minutes ends it
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

// ---- measurements ----------------------------------------------------------

// Runs `iters` operations with up to `depth` in flight. issue(slot) starts an
// operation on slot `slot`; complete(slot) waits for the oldest one (which is
// on that slot). Latency is from issue to completion.
absl::StatusOr<Measurement> RunPipelined(int iters, int depth,
                                         const std::function<absl::Status(int)>& issue,
                                         const std::function<absl::Status(int)>& complete) {
  Measurement m;
  m.iters = iters;
  m.latency_us.reserve(iters);
  std::vector<Clock::time_point> started(depth);
  const Clock::time_point t0 = Clock::now();
  int done = 0;
  for (int i = 0; i < iters + depth; ++i) {
    const int slot = i % depth;
    if (i >= depth) {
      PS_RETURN_IF_ERROR(complete(slot));
      m.latency_us.push_back(Since(started[slot]) * 1e6);
      ++done;
    }
    if (i < iters) {
      started[slot] = Clock::now();
      PS_RETURN_IF_ERROR(issue(slot));
    }
  }
  m.seconds = Since(t0);
  CHECK_EQ(done, iters);
  return m;
}

// Warm-up run, then the timed run.
absl::StatusOr<Measurement> WarmThenTime(int iters, int depth, const std::function<absl::Status(int)>& issue,
                                         const std::function<absl::Status(int)>& complete) {
  PS_RETURN_IF_ERROR(RunPipelined(WarmupFor(iters), depth, issue, complete).status());
  return RunPipelined(iters, depth, issue, complete);
}

// Send and receive buffers per slot, touched once so no page fault lands in
// the timed loop.
struct SlotBuffers {
  std::vector<std::vector<float>> send, recv;
  SlotBuffers(int slots, int64_t bytes)
      : send(slots, std::vector<float>(bytes / 4, 1.0f)), recv(slots, std::vector<float>(bytes / 4, 0.0f)) {}
};

absl::StatusOr<Measurement> MeasureRaw(zmq::socket_t& dealer, int64_t bytes, int iters, int depth) {
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
  return WarmThenTime(iters, depth, issue, complete);
}

absl::StatusOr<Measurement> MeasurePushPull(ps::KVClient& client, int tensor, int64_t bytes, int iters,
                                            int depth) {
  SlotBuffers buffers(depth, bytes);
  int64_t clock = 0;
  if (depth == 1) {
    auto nothing = [](int) { return absl::OkStatus(); };
    auto push_pull = [&](int) {
      const ps::TensorBuffer grad{tensor, buffers.send[0]};
      const ps::MutableTensorBuffer out{tensor, absl::MakeSpan(buffers.recv[0])};
      return client.PushPull({&grad, 1}, {&out, 1}, clock++);
    };
    return WarmThenTime(iters, 1, nothing, push_pull);
  }
  std::vector<ps::KVClient::Ticket> tickets(depth);
  auto issue = [&](int slot) {
    const ps::TensorBuffer grad{tensor, buffers.send[slot]};
    const ps::MutableTensorBuffer out{tensor, absl::MakeSpan(buffers.recv[slot])};
    tickets[slot] = client.PushPullAsync({&grad, 1}, {&out, 1}, clock++);
    return absl::OkStatus();
  };
  auto complete = [&](int slot) { return client.Wait(tickets[slot]); };
  return WarmThenTime(iters, depth, issue, complete);
}

// A pull alone, one at a time: the latency a worker waits for fresh values.
absl::StatusOr<Measurement> MeasurePull(ps::KVClient& client, int tensor, int64_t bytes, int iters) {
  SlotBuffers buffers(1, bytes);
  auto nothing = [](int) { return absl::OkStatus(); };
  auto pull = [&](int) {
    const ps::MutableTensorBuffer out{tensor, absl::MakeSpan(buffers.recv[0])};
    return client.Wait(client.Pull({&out, 1}, 0));
  };
  return WarmThenTime(iters, 1, nothing, pull);
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

// ---- one configuration ---------------------------------------------------------

struct RawResult {
  double gbps = 0;
};

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

void PrintRaw(const std::string& transport, int64_t bytes, const Measurement& m) {
  std::printf("{\"bench\":\"raw_zmq\",\"transport\":\"%s\",\"bytes\":%ld,\"inflight\":%d,\"iters\":%d,"
              "\"gbps\":%.3f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
              transport.c_str(), static_cast<long>(bytes), absl::GetFlag(FLAGS_inflight), m.iters,
              m.Gbps(2.0 * bytes), m.Percentile(0.5), m.Percentile(0.99));
  std::fflush(stdout);
}

void PrintPushPull(const std::string& transport, int servers, int64_t bytes, const Measurement& m,
                   double raw_gbps) {
  const double gbps = m.Gbps(2.0 * bytes);
  std::printf("{\"bench\":\"pushpull\",\"transport\":\"%s\",\"servers\":%d,\"workers\":1,\"bytes\":%ld,"
              "\"inflight\":%d,\"iters\":%d,\"push_pull_gbps\":%.3f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
              "\"raw_zmq_gbps\":%.3f,\"ratio_vs_raw\":%.3f}\n",
              transport.c_str(), servers, static_cast<long>(bytes), absl::GetFlag(FLAGS_inflight), m.iters,
              gbps, m.Percentile(0.5), m.Percentile(0.99), raw_gbps, raw_gbps > 0 ? gbps / raw_gbps : 0.0);
  std::fflush(stdout);
}

// The raw echo child's end in the parent: its own context and DEALER.
struct RawPeer {
  zmq::context_t context;
  zmq::socket_t dealer;

  explicit RawPeer(const std::string& endpoint) : dealer(context, zmq::socket_type::dealer) {
    dealer.set(zmq::sockopt::rcvtimeo, 60000);
    dealer.set(zmq::sockopt::linger, 1000);
    dealer.connect(endpoint);
  }
  // Tells the child to exit and waits for its last answer.
  void Stop() {
    zmq::message_t empty;
    if (dealer.send(empty, zmq::send_flags::none)) (void)dealer.recv(empty);
  }
};

absl::StatusOr<std::unique_ptr<ps::KVClient>> ConnectClient(const std::string& scheduler, const Config& c) {
  ps::KVClientOptions options;
  options.scheduler = scheduler;
  options.register_timeout = absl::Seconds(30);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ps::KVClient> client, ps::KVClient::Connect(options));
  PS_RETURN_IF_ERROR(client->RegisterModel(BenchModel(c)));
  return client;
}

// Raw ZeroMQ figures by size, measured once per transport and reused for
// every server count.
struct RawFigures {
  std::map<int64_t, double> gbps;
  std::map<int64_t, double> p50_us;
};

// Measures every size on one live cluster (and, when `raw` is not null, the
// raw reference first). `raw_gbps` caches raw results by size across server
// counts.
absl::Status MeasureSizes(const Config& c, const std::string& transport, int servers, ps::KVClient& client,
                          RawPeer* raw, RawFigures& raw_figures) {
  std::map<int64_t, double>& raw_gbps = raw_figures.gbps;
  std::map<int64_t, double>& raw_p50 = raw_figures.p50_us;
  for (int64_t bytes : c.sizes) {
    const int iters = IterationsFor(c, bytes);
    if (raw != nullptr) {
      PS_ASSIGN_OR_RETURN(Measurement r, MeasureRaw(raw->dealer, bytes, iters, c.inflight));
      PrintRaw(transport, bytes, r);
      raw_gbps[bytes] = r.Gbps(2.0 * bytes);
      raw_p50[bytes] = r.Percentile(0.5);
    }
    PS_ASSIGN_OR_RETURN(const int tensor, client.TensorIndex(absl::StrCat("t", bytes)));
    PS_ASSIGN_OR_RETURN(Measurement m, MeasurePushPull(client, tensor, bytes, iters, c.inflight));
    PrintPushPull(transport, servers, bytes, m, raw_gbps[bytes]);
    if (bytes <= kLatencyBytes) {
      PS_ASSIGN_OR_RETURN(Measurement p, MeasurePull(client, tensor, bytes, iters));
      std::printf("{\"bench\":\"pull\",\"transport\":\"%s\",\"servers\":%d,\"bytes\":%ld,\"iters\":%d,"
                  "\"p50_us\":%.1f,\"p99_us\":%.1f,\"raw_round_trip_p50_us\":%.1f,\"ratio_p50_vs_raw\":%.3f}\n",
                  transport.c_str(), servers, static_cast<long>(bytes), p.iters, p.Percentile(0.5),
                  p.Percentile(0.99), raw_p50[bytes], raw_p50[bytes] > 0 ? p.Percentile(0.5) / raw_p50[bytes] : 0.0);
      std::fflush(stdout);
    }
    const double gbps = m.Gbps(2.0 * bytes);
    std::fprintf(stderr, "pushpull_bench: %s servers=%d bytes=%ld inflight=%d iters=%d: push+pull %.3f GB/s "
                 "p50 %.1f us; raw %.3f GB/s; ratio %.2f\n",
                 transport.c_str(), servers, static_cast<long>(bytes), c.inflight, iters, gbps,
                 m.Percentile(0.5), raw_gbps[bytes], raw_gbps[bytes] > 0 ? gbps / raw_gbps[bytes] : 0.0);
  }
  return absl::OkStatus();
}

absl::Status RunConfiguration(const Config& c, const std::string& transport, int servers, bool with_raw,
                              RawFigures& raw_figures) {
  Endpoints endpoints(transport);
  std::unique_ptr<Child> raw_child;
  if (with_raw) {
    const std::string bind = endpoints.Next();
    const size_t max_bytes = static_cast<size_t>(*std::max_element(c.sizes.begin(), c.sizes.end()));
    PS_ASSIGN_OR_RETURN(raw_child, Child::Fork([&](int fd) { return RunRawEchoChild(bind, max_bytes, fd); }));
  }
  const std::string scheduler_bind = endpoints.Next();
  std::vector<std::string> server_binds;
  for (int i = 0; i < servers; ++i) server_binds.push_back(endpoints.Next());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Child> cluster, Child::Fork([&](int fd) {
                        return RunClusterChild(scheduler_bind, server_binds, /*server_threads=*/0, fd);
                      }));
  // Only now may this process create ZeroMQ contexts and threads.
  std::unique_ptr<RawPeer> raw;
  if (raw_child != nullptr) {
    PS_ASSIGN_OR_RETURN(std::string raw_endpoint, raw_child->ReadLine(kStartTimeout));
    raw = std::make_unique<RawPeer>(raw_endpoint);
  }
  PS_ASSIGN_OR_RETURN(std::string scheduler, cluster->ReadLine(kStartTimeout));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ps::KVClient> client, ConnectClient(scheduler, c));
  absl::Status status = MeasureSizes(c, transport, servers, *client, raw.get(), raw_figures);
  if (raw != nullptr) raw->Stop();
  raw.reset();
  absl::Status finished = client->Finish();
  client.reset();  // joins the I/O thread and ends the context before any later fork
  if (status.ok()) status = finished;
  if (raw_child != nullptr && status.ok()) status = raw_child->Reap();
  absl::Status reaped = cluster->Reap();
  return status.ok() ? reaped : status;
}

absl::Status RunAll(const Config& c) {
  for (int64_t bytes : c.sizes) {
    std::printf("{\"bench\":\"memcpy\",\"bytes\":%ld,\"gbps\":%.3f}\n", static_cast<long>(bytes),
                MemcpyGbps(bytes));
    std::fflush(stdout);
  }
  for (const std::string& transport : c.transports) {
    RawFigures raw_figures;
    for (size_t i = 0; i < c.servers.size(); ++i) {
      PS_RETURN_IF_ERROR(RunConfiguration(c, transport, c.servers[i], /*with_raw=*/i == 0, raw_figures));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "pushpull_bench [--sizes=B,...] [--servers=S,...] [--transports=tcp,ipc] [--inflight=K]: "
               "push+pull goodput of a local cluster against raw ZeroMQ; JSON lines on stdout.");
  if (!absl::GetFlag(FLAGS_verbose)) FLAGS_minloglevel = google::GLOG_WARNING;
  auto config = ConfigFromFlags();
  if (!config.ok()) return ps::ExitCode(config.status(), "pushpull_bench");
  return ps::ExitCode(RunAll(*config), "pushpull_bench");
}
