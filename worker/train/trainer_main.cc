// ps_worker: trains an MLP on Fashion-MNIST as one data-parallel worker of a
// job, printing its progress as JSON lines on stdout.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/events_flags.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "worker/client/client_flags.h"
#include "worker/train/trainer.h"

ABSL_FLAG(std::string, layers, "784,512,256,10", "MLP layer sizes, input first, 10 classes last.");
ABSL_FLAG(int, batch_size, 64, "Samples per step per worker.");
ABSL_FLAG(int, epochs, 10, "Passes over this worker's shard.");
ABSL_FLAG(std::string, optimizer, "adam", "Update rule on the servers: sgd, momentum, adam, adagrad.");
ABSL_FLAG(double, lr, 1e-3, "Learning rate.");
ABSL_FLAG(std::string, lr_schedule, "cosine", "constant, or cosine (decays over the whole run).");
ABSL_FLAG(double, min_lr_ratio, 0.05, "Cosine: final learning rate as a fraction of --lr.");
ABSL_FLAG(double, momentum, 0.9, "Momentum (optimizer=momentum).");
ABSL_FLAG(bool, nesterov, false, "Nesterov momentum (optimizer=momentum).");
ABSL_FLAG(double, beta1, 0.9, "Adam beta1.");
ABSL_FLAG(double, beta2, 0.999, "Adam beta2.");
ABSL_FLAG(double, epsilon, 1e-8, "Adam/Adagrad epsilon.");
ABSL_FLAG(double, weight_decay, 0.0, "L2 weight decay.");
ABSL_FLAG(std::string, consistency, "",
          "sync, async or ssp:K (every worker must agree); empty: $PS_CONSISTENCY (the launchers set it), else sync.");
ABSL_FLAG(bool, pipeline, false,
          "async/ssp:K>=1 only: compute on parameters one exchange old so the network never stalls compute.");
ABSL_FLAG(std::string, placement, "auto", "auto (balanced slices), layer (one layer per server) or FILE.");
ABSL_FLAG(int64_t, slice_bytes, 1 << 20, "Largest slice of a tensor under auto placement.");
ABSL_FLAG(std::string, device, "cpu",
          "Compute backend: cpu, cuda, or null (no arithmetic: the rate the servers alone allow; zero gradients).");
ABSL_FLAG(int, gpu, -1, "CUDA device; -1: worker rank modulo the device count.");
ABSL_FLAG(int, cpu_threads, 1, "OpenBLAS threads of the cpu backend.");
ABSL_FLAG(std::string, data_dir, ps::kDefaultFashionMnistDir, "Directory with the Fashion-MNIST IDX files.");
ABSL_FLAG(std::string, init_from, "",
          "Start a new job from this model file (.npz or .safetensors, as ps_export writes it) instead of the "
          "initializers; every worker names the same one.");
ABSL_FLAG(int64_t, train_limit, 0, "Train on the first N images only (0: all 60000).");
ABSL_FLAG(int64_t, test_limit, 0, "Evaluate on the first N test images only (0: all 10000).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of initialisation, sharding and shuffling.");
ABSL_FLAG(int, eval_every, 0, "Steps between test evaluations by worker 0 (0: every epoch).");
ABSL_FLAG(std::string, straggler, "",
          "Benchmarks only: RANK:FACTOR makes worker RANK's compute FACTOR times slower (e.g. 1:3).");
ABSL_FLAG(int, stages, 1,
          "Model parallelism: split the model's layers over groups of this many workers (worker w is stage w % "
          "stages of group w / stages); the job's workers must be a multiple of it. 1: data parallelism only.");
ABSL_FLAG(int, micro_batches, 4, "With --stages > 1: micro-batches a step's batch is split into and pipelined.");
ABSL_FLAG(std::string, stage_layers, "",
          "With --stages > 1: layers per stage, by hand (e.g. 1,2); empty: split to balance compute.");
ABSL_FLAG(std::string, stage_host, "127.0.0.1",
          "With --stages > 1: the host this worker's link from the previous stage binds and announces.");
ABSL_FLAG(absl::Duration, progress_every, absl::Seconds(1.0), "Time between progress lines.");
ABSL_FLAG(absl::Duration, finish_timeout, absl::Seconds(1800), "How long a finished worker waits for the others.");

namespace {

// A comma-separated list of integers for flag `flag`.
absl::StatusOr<std::vector<int>> ParseInts(const std::string& flag, const std::string& text) {
  std::vector<int> layers;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", part, "' in '", text, "' is not an integer"));
    }
    layers.push_back(v);
  }
  return layers;
}

// --stages and the flags that go with it.
absl::Status StageOptionsFromFlags(ps::TrainerOptions* o) {
  o->stages = absl::GetFlag(FLAGS_stages);
  o->micro_batches = absl::GetFlag(FLAGS_micro_batches);
  o->stage_host = absl::GetFlag(FLAGS_stage_host);
  if (absl::GetFlag(FLAGS_stage_layers).empty()) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(o->stage_layers, ParseInts("stage_layers", absl::GetFlag(FLAGS_stage_layers)));
  return absl::OkStatus();
}

absl::StatusOr<ps::TrainerOptions> OptionsFromFlags() {
  ps::TrainerOptions o;
  o.client = ps::ClientOptionsFromFlags();
  o.finish_timeout = absl::GetFlag(FLAGS_finish_timeout);
  PS_ASSIGN_OR_RETURN(o.layers, ParseInts("layers", absl::GetFlag(FLAGS_layers)));
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  PS_ASSIGN_OR_RETURN(o.optimizer.kind, ps::ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer)));
  o.optimizer.learning_rate = static_cast<float>(absl::GetFlag(FLAGS_lr));
  PS_ASSIGN_OR_RETURN(o.optimizer.lr_schedule, ps::ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule)));
  o.optimizer.min_lr_ratio = static_cast<float>(absl::GetFlag(FLAGS_min_lr_ratio));
  o.optimizer.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  o.optimizer.nesterov = absl::GetFlag(FLAGS_nesterov);
  o.optimizer.beta1 = static_cast<float>(absl::GetFlag(FLAGS_beta1));
  o.optimizer.beta2 = static_cast<float>(absl::GetFlag(FLAGS_beta2));
  o.optimizer.epsilon = static_cast<float>(absl::GetFlag(FLAGS_epsilon));
  o.optimizer.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  PS_ASSIGN_OR_RETURN(o.consistency, ps::Consistency::Parse(ps::WorkerConsistency(absl::GetFlag(FLAGS_consistency))));
  PS_RETURN_IF_ERROR(ps::CompressionFromFlags(&o.compression, &o.compress_min_bytes));
  o.pipeline = absl::GetFlag(FLAGS_pipeline);
  o.placement = absl::GetFlag(FLAGS_placement);
  o.slice_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_slice_bytes));
  o.backend.device = absl::GetFlag(FLAGS_device);
  o.backend.gpu = absl::GetFlag(FLAGS_gpu);
  o.backend.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.init_from = absl::GetFlag(FLAGS_init_from);
  o.train_limit = absl::GetFlag(FLAGS_train_limit);
  o.test_limit = absl::GetFlag(FLAGS_test_limit);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.progress_every = absl::GetFlag(FLAGS_progress_every);
  PS_RETURN_IF_ERROR(StageOptionsFromFlags(&o));
  PS_RETURN_IF_ERROR(ps::ParseStraggler(absl::GetFlag(FLAGS_straggler), &o));
  PS_RETURN_IF_ERROR(o.Validate());
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "ps_worker --scheduler=HOST:PORT: trains an MLP on Fashion-MNIST.");
  if (absl::Status s = ps::OpenEventFileFromFlags(); !s.ok()) return ps::ExitCode(s, "ps_worker");
  auto options = OptionsFromFlags();
  if (!options.ok()) return ps::ExitCode(options.status(), "ps_worker");
  auto result = ps::Train(*options, [](const ps::TrainEvent& e) {
    std::printf("%s\n", e.ToJson().c_str());
    std::fflush(stdout);
  });
  return ps::ExitCode(result.status(), "ps_worker");
}
