// train_bench: samples/s of one worker training the MLP on Fashion-MNIST
// through one parameter server, against the same worker code training
// locally with no server (the optimizer applied in-process), in the same run.
// Prints one JSON object per line (see docs/benchmarks.md).
//
// The server (and scheduler) run in a forked child, so the worker talks to
// another process over loopback, as in a real job.

#include <cstdio>
#include <map>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "benchmarks/bench_support.h"
#include "common/initializer.h"
#include "common/json.h"
#include "common/main_support.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/optimizer.h"
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
ABSL_FLAG(int, warmup_steps, 50,
          "Steps each mode trains before its clock starts (the first touches of fresh memory, the "
          "shared-memory handshake); 0: time every step.");

namespace {

using ps::bench::Child;
using ps::bench::ForkChild;
using ps::bench::ReadLine;

struct Figures {
  double samples_per_s = 0;
  double wait_share = 0;  // of the step time spent blocked on the network
  double test_accuracy = 0;
  std::string data_plane;  // "shm" when the worker talked to the server through shared memory
  std::string pieces;      // the layers exchanged in pieces, as the start event names them
};

// The reference: the same data, model, backend and update rule, with the
// optimizer applied here after each step instead of on a server.
absl::StatusOr<Figures> TrainLocally(const ps::TrainerOptions& o) {
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
  Figures fig;
  fig.samples_per_s = static_cast<double>(timed) / absl::ToDoubleSeconds(absl::Now() - t0);
  return fig;
}

absl::StatusOr<Figures> TrainThroughServer(ps::TrainerOptions o) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Child> cluster, ForkChild([&](int fd, int) {
                        return ps::bench::RunClusterChild("tcp://127.0.0.1:0", {"tcp://127.0.0.1:0"},
                                                          absl::GetFlag(FLAGS_server_threads), fd);
                      }));
  PS_ASSIGN_OR_RETURN(o.client.scheduler, ReadLine(*cluster, absl::Seconds(30)));
  // The clock starts at the progress event of step warmup_steps: one event
  // per step, of which the rest are dropped here.
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  o.progress_every = absl::Nanoseconds(1);
  double warm_s = 0, warm_wait_s = 0;
  std::string pieces;
  const auto on_event = [&](const ps::TrainEvent& event) {
    if (event.kind == "start") {
      for (const auto& [name, value] : event.fields) {
        if (name == "pieces") pieces = value.size() >= 2 ? value.substr(1, value.size() - 2) : value;
      }
    }
    if (warmup == 0 || event.kind != "progress" || warm_s > 0) return;
    std::map<std::string, double> v;
    for (const auto& [name, value] : event.fields) v[name] = std::atof(value.c_str());
    if (v["step"] < warmup) return;
    warm_s = v["elapsed_s"];
    warm_wait_s = v["wait_s"];
  };
  PS_ASSIGN_OR_RETURN(ps::TrainResult r, ps::Train(o, on_event));
  PS_RETURN_IF_ERROR(cluster->Reap(ps::bench::kReapTimeout));
  if (warmup > 0 && warm_s == 0) return absl::InternalError("no progress event after the warm-up steps");
  const double timed_s = r.wall_s - warm_s;
  Figures fig;
  fig.samples_per_s = static_cast<double>(r.samples - warmup * o.batch_size) / timed_s;
  fig.wait_share = (r.wait_s - warm_wait_s) / timed_s;
  fig.pieces = pieces;
  fig.test_accuracy = r.test_accuracy;
  fig.data_plane = r.shm_servers > 0 ? "shm" : "tcp";
  return fig;
}

absl::StatusOr<ps::TrainerOptions> OptionsFromFlags() {
  ps::TrainerOptions o;
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
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

void PrintLines(const ps::TrainerOptions& o, const Figures& local, const Figures& through) {
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  const ps::JsonLine local_line = ps::JsonLine()
                                      .Add("bench", "train")
                                      .Add("mode", "local")
                                      .Add("batch", o.batch_size)
                                      .Add("warmup_steps", warmup)
                                      .Add("samples_per_s", local.samples_per_s, 1);
  const ps::JsonLine ps_line = ps::JsonLine()
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
                                   .Add("test_accuracy", through.test_accuracy, 4)
                                   .Add("ratio_vs_local", through.samples_per_s / local.samples_per_s, 3);
  std::printf("%s\n%s\n", local_line.Str().c_str(), ps_line.Str().c_str());
}

absl::Status Run() {
  PS_ASSIGN_OR_RETURN(const ps::TrainerOptions o, OptionsFromFlags());
  // The server child is forked first, while this process has no thread.
  PS_ASSIGN_OR_RETURN(Figures through, TrainThroughServer(o));
  Figures local{1, 0, 0, "", ""};
  if (!absl::GetFlag(FLAGS_skip_local)) {
    PS_ASSIGN_OR_RETURN(local, TrainLocally(o));
  }
  PrintLines(o, local, through);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "train_bench: samples/s through one server vs training locally.");
  if (!absl::GetFlag(FLAGS_verbose)) FLAGS_minloglevel = 1;
  return ps::ExitCode(Run(), "train_bench");
}
