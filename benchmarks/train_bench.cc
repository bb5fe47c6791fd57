// train_bench: samples/s of one worker training the MLP on Fashion-MNIST
// through one parameter server, against the same worker code training
// locally with no server (the optimizer applied in-process), in the same run.
// Prints one JSON object per line (see docs/benchmarks.md).
//
// With --device=null, the ceiling instead: workers that compute nothing (the
// trainer's exact exchange pattern on the null backend), so the servers'
// path alone sets the rate, against the data plane's bound measured in the
// same run (the same model pushed and pulled whole in one call per step, the
// servers applying the update, no trainer): one line per --configs x
// --transports with ratio_vs_bound.
//
// The servers (and scheduler) run in a forked child, so the worker talks to
// another process over loopback, as in a real job; with several workers,
// the others are forked children too.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "benchmarks/bench_support.h"
#include "benchmarks/train_runs.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "common/model/initializer.h"
#include "glog/logging.h"
#include "server/optim/optimizer.h"
#include "worker/compute/compute_backend.h"
#include "worker/data/fashion_mnist.h"
#include "worker/models/mlp.h"
#include "worker/train/trainer.h"

ABSL_FLAG(int, batch_size, 64, "Samples per step.");
ABSL_FLAG(int64_t, train_limit, 20000, "Training images per measured epoch.");
ABSL_FLAG(int, epochs, 1, "Epochs per measurement.");
ABSL_FLAG(std::string, data_dir, ps::kDefaultFashionMnistDir, "Fashion-MNIST directory.");
ABSL_FLAG(int, server_threads, 1, "Update threads of the server.");
ABSL_FLAG(int64_t, slice_bytes, 1 << 20, "Slice size of the partition map.");
ABSL_FLAG(bool, verbose, false, "Keep INFO logs.");
ABSL_FLAG(int64_t, max_request_bytes, 256 << 10, "Payload bytes per request (KVClientOptions).");
ABSL_FLAG(bool, shm, true, "Exchange with the server through shared memory (false: tcp only).");
ABSL_FLAG(absl::Duration, caller_spin, absl::Microseconds(100),
          "Over sockets, how long a waiting worker looks at them before it sleeps (KVClientOptions::caller_spin).");
ABSL_FLAG(std::string, consistency, "sync", "Consistency of the run through the server.");
ABSL_FLAG(bool, pipeline, false, "Pipelined exchanges (async/ssp only; see ps_worker --help).");
ABSL_FLAG(bool, skip_local, false, "Measure only through the server (for profiling).");
ABSL_FLAG(std::string, device, "cpu",
          "cpu: through a server against locally; null: the ceiling (no arithmetic) against the data plane's "
          "bound, per --configs and --transports.");
ABSL_FLAG(std::string, layers, "784,512,256,10",
          "The MLP's layer sizes (784,5120,5120,4096,10: about 51 M parameters).");
ABSL_FLAG(std::string, configs, "1x1,2x2", "With --device=null: WORKERSxSERVERS of each measurement.");
ABSL_FLAG(std::string, transports, "shm,tcp", "With --device=null: the data planes measured (shm, tcp).");
ABSL_FLAG(int64_t, max_replay_mb, 256,
          "The worker's copies of pushes a checkpoint does not hold yet, at most (KVClientOptions::max_replay_bytes; "
          "past a quarter of it the worker asks for a checkpoint).");
ABSL_FLAG(bool, overlap, false,
          "Compute against communication, 1 worker x 1 server: local training (the compute), the trainer with "
          "--device=null through the server (the communication), and through the server with layers in pieces "
          "and whole; an \"overlap\" line of each step's time against max(compute, communication).");
ABSL_FLAG(std::string, trace_out, "",
          "With --overlap: where the timeline of 3 steps in pieces goes (span events as JSON lines; "
          "scripts/plot_timeline.py draws it).");
ABSL_FLAG(int, warmup_steps, 50,
          "Steps each mode trains before its clock starts (the first touches of fresh memory, the "
          "shared-memory handshake); 0: time every step.");

namespace {

using ps::bench::Child;
using ps::bench::ForkChild;
using ps::bench::ReadLine;

using ps::bench::TrainFigures;

// The reference: the same data, model, backend and update rule, with the
// optimizer applied here after each step instead of on a server.
absl::StatusOr<TrainFigures> TrainLocally(const ps::TrainerOptions& o) {
  PS_ASSIGN_OR_RETURN(ps::Dataset train, ps::LoadFashionMnist(o.data_dir, "train"));
  PS_ASSIGN_OR_RETURN(auto backend, ps::CreateBackend(o.backend));
  PS_ASSIGN_OR_RETURN(auto mlp, ps::Mlp::Create(o.layers, o.batch_size, backend.get()));
  ps::OptimizerConfig config = o.optimizer;
  const int64_t n = std::min<int64_t>(o.train_limit, train.count);
  const int64_t steps_per_epoch = (n + o.batch_size - 1) / o.batch_size;
  config.decay_steps = steps_per_epoch * o.epochs;
  PS_ASSIGN_OR_RETURN(auto optimizer, ps::Optimizer::Create(config));
  const std::vector<ps::TensorSpec> specs = mlp->TensorSpecs(o.seed);
  std::vector<std::vector<float>> state(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    ps::FillInitialValues(specs[t], 0, mlp->host_param(t));
    state[t].assign(optimizer->StateSize(specs[t].NumElements()), 0.0f);
  }
  for (int l = 0; l < mlp->num_layers(); ++l) mlp->ParamsToDevice(l);
  const int f = train.features();
  const uint64_t warmup = static_cast<uint64_t>(absl::GetFlag(FLAGS_warmup_steps));
  absl::Time t0 = absl::Now();
  int64_t timed = 0;  // samples after the warm-up
  uint64_t step = 0;
  for (int e = 0; e < o.epochs; ++e) {
    for (int64_t first = 0; first < n; first += o.batch_size, ++step) {
      const int batch = static_cast<int>(std::min<int64_t>(o.batch_size, n - first));
      if (step == warmup) t0 = absl::Now();
      if (step >= warmup) timed += batch;
      int correct = 0;
      mlp->TrainStep(train.images.data() + first * f, train.labels.data() + first, batch, nullptr, &correct);
      for (size_t t = 0; t < specs.size(); ++t) {
        optimizer->Update(mlp->host_param(t), absl::MakeSpan(state[t]), mlp->host_grad(t), 1.0f, step);
      }
      for (int l = 0; l < mlp->num_layers(); ++l) mlp->ParamsToDevice(l);
    }
  }
  TrainFigures fig;
  fig.samples_per_s = static_cast<double>(timed) / absl::ToDoubleSeconds(absl::Now() - t0);
  return fig;
}

absl::StatusOr<ps::TrainerOptions> OptionsFromFlags() {
  ps::TrainerOptions o;
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.layers.clear();
  for (absl::string_view width : absl::StrSplit(absl::GetFlag(FLAGS_layers), ',')) {
    int w = 0;
    if (!absl::SimpleAtoi(width, &w) || w < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--layers: '", width, "' is not a positive layer size"));
    }
    o.layers.push_back(w);
  }
  o.backend.device = absl::GetFlag(FLAGS_device);
  o.train_limit = absl::GetFlag(FLAGS_train_limit);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.slice_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_slice_bytes));
  // Replaced by the forked scheduler's endpoint; a loopback address so that
  // Validate's plaintext-off-loopback check passes.
  o.client.scheduler = "127.0.0.1:1";
  PS_ASSIGN_OR_RETURN(o.consistency, ps::Consistency::Parse(absl::GetFlag(FLAGS_consistency)));
  o.pipeline = absl::GetFlag(FLAGS_pipeline);
  o.client.max_request_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_request_bytes));
  o.client.shm = absl::GetFlag(FLAGS_shm);
  o.client.max_replay_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_replay_mb)) << 20;
  const absl::Duration spin = absl::GetFlag(FLAGS_caller_spin);
  if (spin < absl::ZeroDuration() || spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError("--caller_spin must be in [0, 1s]");
  }
  o.client.caller_spin = spin;
  PS_RETURN_IF_ERROR(o.Validate());
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  const int64_t steps = (o.train_limit + o.batch_size - 1) / o.batch_size * o.epochs;
  if (warmup < 0 || warmup >= steps) {
    return absl::InvalidArgumentError(absl::StrCat("--warmup_steps=", warmup, " must be in [0, ", steps,
                                                   "), the steps of the run (--train_limit, --batch_size, --epochs)"));
  }
  return o;
}

void PrintLines(const ps::TrainerOptions& o, const TrainFigures& local, const TrainFigures& through,
                const TrainFigures& with_checkpoints) {
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  const ps::JsonLine local_line = ps::JsonLine()
                                      .Add("bench", "train")
                                      .Add("mode", "local")
                                      .Add("batch", o.batch_size)
                                      .Add("warmup_steps", warmup)
                                      .Add("samples_per_s", local.samples_per_s, 1);
  ps::JsonLine ps_line = ps::JsonLine()
                             .Add("bench", "train")
                             .Add("mode", "ps")
                             .Add("servers", 1)
                             .Add("workers", 1)
                             .Add("batch", o.batch_size)
                             .Add("consistency", o.consistency.ToString())
                             .Add("data_plane", through.data_plane)
                             .Add("caller_spin_us", absl::ToInt64Microseconds(o.client.caller_spin))
                             .Add("pipeline", o.pipeline)
                             .Add("slice_bytes", static_cast<int64_t>(o.slice_bytes))
                             .Add("pieces", through.pieces)
                             .Add("warmup_steps", warmup)
                             .Add("samples_per_s", through.samples_per_s, 1)
                             .Add("wait_share", through.wait_share, 3)
                             .Add("test_accuracy", through.test_accuracy, 4);
  if (local.samples_per_s > 0) ps_line.Add("ratio_vs_local", through.samples_per_s / local.samples_per_s, 3);
  ps_line.Add("samples_per_s_ckpt_on", with_checkpoints.samples_per_s, 1)
      .Add("ratio_ckpt_on_vs_off", with_checkpoints.samples_per_s / through.samples_per_s, 3);
  if (local.samples_per_s > 0) std::printf("%s\n", local_line.Str().c_str());  // not with --skip_local
  std::printf("%s\n", ps_line.Str().c_str());
}

// ---- --device=null: the ceiling against the data plane's bound ------------------

struct Config {
  int workers = 1, servers = 1;
  bool shm = true;
};

absl::StatusOr<std::vector<Config>> ConfigsFromFlags() {
  std::vector<Config> out;
  for (absl::string_view transport : absl::StrSplit(absl::GetFlag(FLAGS_transports), ',')) {
    if (transport != "shm" && transport != "tcp") {
      return absl::InvalidArgumentError(absl::StrCat("--transports: '", transport, "' is neither shm nor tcp"));
    }
    for (absl::string_view config : absl::StrSplit(absl::GetFlag(FLAGS_configs), ',')) {
      Config c;
      c.shm = transport == "shm";
      const std::vector<std::string> ws = absl::StrSplit(config, 'x');
      if (ws.size() != 2 || !absl::SimpleAtoi(ws[0], &c.workers) || !absl::SimpleAtoi(ws[1], &c.servers) ||
          c.workers < 1 || c.workers > 8 || c.servers < 1 || c.servers > 8) {
        return absl::InvalidArgumentError(absl::StrCat("--configs: '", config, "' is not WxS (1 to 8 each)"));
      }
      out.push_back(c);
    }
  }
  return out;
}

// One measurement's processes, forked before this process has any thread:
// the servers (which wait for "go" before they start, so that a later
// measurement's do not time out waiting for their workers) and the workers
// of rank 1 and up (which wait for the scheduler's address).
struct Forked {
  std::unique_ptr<Child> cluster;
  std::vector<std::unique_ptr<Child>> workers;
};

// One worker's part of a measurement against the job of `scheduler`: the
// trainer (the ceiling), or the whole-model exchange (the bound).
absl::StatusOr<TrainFigures> RunWorker(const ps::TrainerOptions& o, const std::string& scheduler, bool bound,
                                       int64_t steps) {
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  if (!bound) return ps::bench::TrainAgainst(o, scheduler, warmup);
  TrainFigures fig;
  PS_ASSIGN_OR_RETURN(fig.steps_per_s, ps::bench::ExchangeAgainst(o, scheduler, steps, warmup));
  return fig;
}

absl::StatusOr<Forked> ForkMeasurement(const ps::TrainerOptions& o, const Config& c, bool bound, int64_t steps,
                                       const ps::ServerOptions& servers = ps::ServerOptions()) {
  Forked f;
  const std::vector<std::string> binds(c.servers, "tcp://127.0.0.1:0");
  PS_ASSIGN_OR_RETURN(f.cluster, ForkChild([&](int fd, int commands) {
                        if (!ps::bench::ReadLineFrom(commands, absl::Hours(1)).ok()) return 1;
                        return ps::bench::RunClusterChild("tcp://127.0.0.1:0", binds,
                                                          absl::GetFlag(FLAGS_server_threads), fd, c.workers, servers);
                      }));
  for (int w = 1; w < c.workers; ++w) {
    PS_ASSIGN_OR_RETURN(auto child, ForkChild([&](int fd, int commands) {
                          absl::StatusOr<std::string> scheduler = ps::bench::ReadLineFrom(commands, absl::Hours(1));
                          if (!scheduler.ok()) return 1;
                          const absl::StatusOr<TrainFigures> fig = RunWorker(o, *scheduler, bound, steps);
                          ps::bench::WriteLine(fd, fig.ok() ? absl::StrCat("ok ", fig->steps_per_s)
                                                            : absl::StrCat("ERR ", fig.status().ToString()));
                          return fig.ok() ? 0 : 1;
                        }));
    f.workers.push_back(std::move(child));
  }
  return f;
}

// Starts a forked measurement, runs rank 0's part here, waits for the others.
absl::StatusOr<TrainFigures> Measure(Forked& f, const ps::TrainerOptions& o, bool bound, int64_t steps) {
  PS_RETURN_IF_ERROR(f.cluster->Send("go"));
  PS_ASSIGN_OR_RETURN(const std::string scheduler, ReadLine(*f.cluster, absl::Seconds(60)));
  for (auto& w : f.workers) PS_RETURN_IF_ERROR(w->Send(scheduler));
  PS_ASSIGN_OR_RETURN(const TrainFigures fig, RunWorker(o, scheduler, bound, steps));
  for (auto& w : f.workers) {
    PS_ASSIGN_OR_RETURN(const std::string line, ReadLine(*w, absl::Minutes(30)));
    if (!absl::StartsWith(line, "ok ")) return absl::InternalError(absl::StrCat("a worker said: ", line));
    PS_RETURN_IF_ERROR(w->Reap(ps::bench::kReapTimeout));
  }
  PS_RETURN_IF_ERROR(f.cluster->Reap(ps::bench::kReapTimeout));
  return fig;
}

int64_t ModelParams(const std::vector<int>& layers) {
  int64_t n = 0;
  for (size_t i = 0; i + 1 < layers.size(); ++i) n += int64_t{layers[i]} * layers[i + 1] + layers[i + 1];
  return n;
}

// One line of the ceiling: `ceiling` against `bound`, for config `c`.
void PrintCeiling(const ps::TrainerOptions& o, const Config& c, const TrainFigures& ceiling,
                  const TrainFigures& bound) {
  const int64_t params = ModelParams(o.layers);
  std::printf("%s\n", ps::JsonLine()
                          .Add("bench", "train_ceiling")
                          .Add("device", "null")
                          .Add("params", params)
                          .Add("bytes_per_step", 2 * 4 * params)  // pushed and pulled, per worker
                          .Add("workers", c.workers)
                          .Add("servers", c.servers)
                          .Add("transport", c.shm ? "shm" : "tcp")
                          .Add("data_plane", ceiling.data_plane)
                          .Add("batch", o.batch_size)
                          .Add("consistency", o.consistency.ToString())
                          .Add("pieces", ceiling.pieces)
                          .Add("steps_per_s", ceiling.steps_per_s, 1)
                          .Add("samples_per_s", ceiling.steps_per_s * o.batch_size * c.workers, 1)
                          .Add("wait_share", ceiling.wait_share, 3)
                          .Add("bound_steps_per_s", bound.steps_per_s, 1)
                          .Add("ratio_vs_bound", ceiling.steps_per_s / bound.steps_per_s, 3)
                          .Str()
                          .c_str());
}

absl::Status RunCeiling(ps::TrainerOptions o) {
  PS_ASSIGN_OR_RETURN(const std::vector<Config> configs, ConfigsFromFlags());
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  // Every process first: pairs (the ceiling, then its bound) per config.
  std::vector<std::pair<Forked, Forked>> forked;
  std::vector<ps::TrainerOptions> options;
  for (const Config& c : configs) {
    ps::TrainerOptions oc = o;
    oc.client.shm = c.shm;
    const int64_t steps = (o.train_limit / c.workers + o.batch_size - 1) / o.batch_size * o.epochs;
    if (warmup >= steps) {
      return absl::InvalidArgumentError(absl::StrCat("--warmup_steps=", warmup, " leaves no timed step of the ", steps,
                                                     " each of ", c.workers, " workers trains"));
    }
    PS_ASSIGN_OR_RETURN(Forked ceiling, ForkMeasurement(oc, c, /*bound=*/false, steps));
    PS_ASSIGN_OR_RETURN(Forked bound, ForkMeasurement(oc, c, /*bound=*/true, steps));
    forked.emplace_back(std::move(ceiling), std::move(bound));
    options.push_back(oc);
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const int64_t steps = (o.train_limit / c.workers + o.batch_size - 1) / o.batch_size * o.epochs;
    std::fprintf(stderr, "train_bench: %zu/%zu: %dx%d over %s (%lld steps each: the ceiling, then the bound)\n", i + 1,
                 configs.size(), c.workers, c.servers, c.shm ? "shm" : "tcp", static_cast<long long>(steps));
    PS_ASSIGN_OR_RETURN(const ps::bench::TrainFigures ceiling, Measure(forked[i].first, options[i], false, steps));
    PS_ASSIGN_OR_RETURN(const ps::bench::TrainFigures bound, Measure(forked[i].second, options[i], true, steps));
    PrintCeiling(o, c, ceiling, bound);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// ---- --overlap: a step against max(compute, communication) -------------------

double StepMs(const ps::TrainerOptions& o, const TrainFigures& fig) { return 1e3 * o.batch_size / fig.samples_per_s; }

absl::Status WriteTrace(const std::vector<std::string>& spans) {
  const std::string path = absl::GetFlag(FLAGS_trace_out);
  if (path.empty()) return absl::OkStatus();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("--trace_out ", path, ": cannot write"));
  for (const std::string& span : spans) std::fprintf(f, "%s\n", span.c_str());
  return std::fclose(f) == 0 ? absl::OkStatus() : absl::DataLossError(absl::StrCat("--trace_out ", path));
}

absl::Status RunOverlap(const ps::TrainerOptions& o) {
  const Config one{1, 1, o.client.shm};
  const int64_t steps = (o.train_limit + o.batch_size - 1) / o.batch_size * o.epochs;
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  ps::TrainerOptions comm = o, pieces = o, whole = o;
  comm.backend.device = "null";
  pieces.trace_from = warmup + (steps - warmup) / 2;
  pieces.trace_steps = 3;
  whole.slice_bytes = uint64_t{1} << 30;  // every tensor one slice: no pieces
  PS_ASSIGN_OR_RETURN(Forked comm_job, ForkMeasurement(comm, one, false, steps));
  PS_ASSIGN_OR_RETURN(Forked pieces_job, ForkMeasurement(pieces, one, false, steps));
  PS_ASSIGN_OR_RETURN(Forked whole_job, ForkMeasurement(whole, one, false, steps));
  PS_ASSIGN_OR_RETURN(const TrainFigures c, Measure(comm_job, comm, false, steps));
  PS_ASSIGN_OR_RETURN(const TrainFigures p, Measure(pieces_job, pieces, false, steps));
  PS_ASSIGN_OR_RETURN(const TrainFigures w, Measure(whole_job, whole, false, steps));
  PS_ASSIGN_OR_RETURN(const TrainFigures local, TrainLocally(o));
  const double bound = std::max(StepMs(o, local), StepMs(o, c));
  std::printf("%s\n", ps::JsonLine()
                          .Add("bench", "overlap")
                          .Add("params", ModelParams(o.layers))
                          .Add("batch", o.batch_size)
                          .Add("data_plane", p.data_plane)
                          .Add("consistency", o.consistency.ToString())
                          .Add("compute_ms", StepMs(o, local), 4)
                          .Add("comm_ms", StepMs(o, c), 4)
                          .Add("step_ms_pieces", StepMs(o, p), 4)
                          .Add("pieces", p.pieces)
                          .Add("step_ms_whole", StepMs(o, w), 4)
                          .Add("ratio_pieces_vs_max", StepMs(o, p) / bound, 3)
                          .Add("ratio_whole_vs_max", StepMs(o, w) / bound, 3)
                          .Str()
                          .c_str());
  return WriteTrace(p.trace);
}

absl::Status Run() {
  PS_ASSIGN_OR_RETURN(const ps::TrainerOptions o, OptionsFromFlags());
  if (absl::GetFlag(FLAGS_overlap)) return RunOverlap(o);
  if (o.backend.device == "null") return RunCeiling(o);
  // Through one server, its checkpoints off and on (every 30 s, and when the
  // worker's copies of unsaved pushes grow: what a job's servers do by
  // default), both forked first, while this process has no thread.
  const Config one{1, 1, o.client.shm};
  const int64_t steps = (o.train_limit + o.batch_size - 1) / o.batch_size * o.epochs;
  char dir[] = "/tmp/train_bench.XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  ps::ServerOptions checkpoints;
  checkpoints.checkpoint_dir = dir;
  absl::StatusOr<Forked> off = ForkMeasurement(o, one, false, steps);
  absl::StatusOr<Forked> on = ForkMeasurement(o, one, false, steps, checkpoints);
  absl::StatusOr<TrainFigures> through = off.ok() ? Measure(*off, o, false, steps) : off.status();
  absl::StatusOr<TrainFigures> with_checkpoints = on.ok() ? Measure(*on, o, false, steps) : on.status();
  std::filesystem::remove_all(dir);
  PS_RETURN_IF_ERROR(through.status());
  PS_RETURN_IF_ERROR(with_checkpoints.status());
  TrainFigures local;  // none with --skip_local
  if (!absl::GetFlag(FLAGS_skip_local)) {
    PS_ASSIGN_OR_RETURN(local, TrainLocally(o));
  }
  PrintLines(o, local, *through, *with_checkpoints);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "train_bench: samples/s through one server vs training locally.");
  if (!absl::GetFlag(FLAGS_verbose)) FLAGS_minloglevel = 1;
  return ps::ExitCode(Run(), "train_bench");
}
