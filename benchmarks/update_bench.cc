// update_bench: how fast the server's update rules (server/optim/optimizer.h: sgd,
// momentum, adam, adagrad) run over large parameter tensors, against a
// memcpy of the same bytes measured in the same run. Prints one JSON object
// per line on stdout (see docs/benchmarks.md); progress goes to stderr.
//
// The update goes through Optimizer::Create() and Optimizer::Update(), cut
// into slices of --slice_bytes and spread over a ps::ThreadPool with
// ParallelFor, as a server's SliceStore applies a push. With --threads=1 (the
// default) the pool is the calling thread alone. The memcpy reference copies
// the same number of bytes with the same pool, one memcpy call per thread.
//
// Next to each optimizer it measures its "same traffic" bound: a loop that
// reads and writes the same arrays with no arithmetic (x += g), the fastest
// any rule moving that many bytes can go where memory is the limit.
//
// Measurements are interleaved: each repetition times the memcpy, the
// bounds, then each optimizer in turn, so that a slow phase of this shared machine hits all of
// them alike; the figures are medians over --reps repetitions.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "common/base/cpu_clones.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/model/model_spec.h"
#include "glog/logging.h"
#include "server/optim/optimizer.h"

ABSL_FLAG(std::string, sizes_mb, "64,256", "Comma list of parameter tensor sizes in MiB.");
ABSL_FLAG(std::string, optimizers, "sgd,momentum,adam,adagrad,ftrl", "Comma list of update rules.");
ABSL_FLAG(int, reps, 5, "Timed repetitions of each measurement; figures are medians.");
ABSL_FLAG(int, threads, 1,
          "Threads applying one update (the server's ThreadPool, ParallelFor over slices); 0 = one per core.");
ABSL_FLAG(int64_t, slice_bytes, int64_t{1} << 20, "Slice size the update is cut into (the server's default).");
ABSL_FLAG(int, min_ms, 200, "Each repetition repeats passes over the tensor for at least this long.");

namespace {

using Clock = std::chrono::steady_clock;
using ps::JsonLine;

// The goal for an optimizer: the update at least this fraction of
// memcpy's speed, both counted in parameter bytes per second.
double GoalFor(ps::OptimizerKind kind) {
  switch (kind) {
    case ps::OptimizerKind::kSgd: return 0.6;
    case ps::OptimizerKind::kAdam: return 0.4;
    default: return 0;  // none
  }
}

// Bytes of memory traffic per parameter byte, counting each array read and
// each array written once: the gradient is read; the parameters and each
// state array are read and written. memcpy reads and writes once: 2.
int TouchedPerParamByte(ps::OptimizerKind kind) {
  switch (kind) {
    case ps::OptimizerKind::kSgd: return 3;  // grad r, w rw
    case ps::OptimizerKind::kMomentum:
    case ps::OptimizerKind::kAdagrad: return 5;  // grad r, w rw, one state array rw
    case ps::OptimizerKind::kAdam: return 7;     // grad r, w rw, m rw, v rw
    case ps::OptimizerKind::kFtrl: return 7;     // grad r, w rw, z rw, n rw
  }
  return 0;
}
constexpr int kMemcpyTouched = 2;

struct Config {
  std::vector<int64_t> sizes_mb;
  std::vector<ps::OptimizerKind> kinds;
  int reps = 5;
  int threads = 1;
  int64_t slice_bytes = 0;
  int min_ms = 200;
};

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mb), ',', absl::SkipEmpty())) {
    int64_t mb;
    if (!absl::SimpleAtoi(part, &mb) || mb <= 0 || mb > (int64_t{1} << 16)) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes_mb: '", part, "' is not in [1, 65536]"));
    }
    c.sizes_mb.push_back(mb);
  }
  if (c.sizes_mb.empty()) return absl::InvalidArgumentError("--sizes_mb: empty list");
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_optimizers), ',', absl::SkipEmpty())) {
    auto kind = ps::ParseOptimizerKind(std::string(part));
    if (!kind.ok()) return absl::InvalidArgumentError(absl::StrCat("--optimizers: ", kind.status().message()));
    c.kinds.push_back(*kind);
  }
  if (c.kinds.empty()) return absl::InvalidArgumentError("--optimizers: empty list");
  c.reps = absl::GetFlag(FLAGS_reps);
  c.threads = absl::GetFlag(FLAGS_threads);
  c.slice_bytes = absl::GetFlag(FLAGS_slice_bytes);
  c.min_ms = absl::GetFlag(FLAGS_min_ms);
  if (c.reps < 1) return absl::InvalidArgumentError("--reps must be at least 1");
  if (c.threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (c.slice_bytes < 4 || c.slice_bytes % 4 != 0) {
    return absl::InvalidArgumentError("--slice_bytes must be a positive multiple of 4");
  }
  if (c.min_ms < 0) return absl::InvalidArgumentError("--min_ms must be >= 0");
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The [begin, end) float ranges of the slices of a tensor of n floats.
std::vector<std::pair<size_t, size_t>> Slices(size_t n, size_t slice_floats) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t b = 0; b < n; b += slice_floats) out.emplace_back(b, std::min(n, b + slice_floats));
  return out;
}

// One operation over the whole tensor (one pass), timed by repetition.
class Pass {
 public:
  virtual ~Pass() = default;
  virtual void Run(ps::ThreadPool& pool) = 0;
};

// memcpy of the tensor's bytes: one call per thread over a contiguous share
// (one call in all with one thread), so that glibc copies as it does a large
// buffer (non-temporal stores above its threshold): the stricter reference.
class MemcpyPass final : public Pass {
 public:
  MemcpyPass(size_t n, int threads) : src_(n, 1.0f), dst_(n, 0.0f), slices_(Slices(n, (n + threads - 1) / threads)) {}
  void Run(ps::ThreadPool& pool) override {
    pool.ParallelFor(slices_.size(), [&](size_t i) {
      const auto [b, e] = slices_[i];
      std::memcpy(dst_.data() + b, src_.data() + b, (e - b) * sizeof(float));
    });
    asm volatile("" : : "r"(dst_.data()) : "memory");  // keep every copy
  }

 private:
  std::vector<float> src_, dst_;
  const std::vector<std::pair<size_t, size_t>> slices_;
};

// One Optimizer::Update per slice, each slice with its own state, as in a
// server's SliceStore.
class UpdatePass final : public Pass {
 public:
  UpdatePass(std::unique_ptr<ps::Optimizer> optimizer, size_t n, size_t slice_floats)
      : optimizer_(std::move(optimizer)), slices_(Slices(n, slice_floats)), value_(n, 1.0f), grad_(n, 1e-3f) {
    for (const auto& [b, e] : slices_) state_.emplace_back(optimizer_->StateSize(e - b), 0.0f);
  }
  void Run(ps::ThreadPool& pool) override {
    pool.ParallelFor(slices_.size(), [&](size_t i) {
      const auto [b, e] = slices_[i];
      optimizer_->Update(absl::MakeSpan(value_.data() + b, e - b), absl::MakeSpan(state_[i]),
                         absl::MakeConstSpan(grad_.data() + b, e - b), 1.0f, step_);
    });
    ++step_;
    asm volatile("" : : "r"(value_.data()) : "memory");
  }

 private:
  const std::unique_ptr<ps::Optimizer> optimizer_;
  const std::vector<std::pair<size_t, size_t>> slices_;
  std::vector<float> value_, grad_;
  std::vector<std::vector<float>> state_;
  uint64_t step_ = 0;
};

// The memory traffic of an update rule without its arithmetic: the
// gradient read, the parameters and `states` state arrays each read and
// written (x += g), per slice, as UpdatePass lays them out. An update runs
// at best as fast as this (its "same traffic" bound): a rule moving 7 bytes
// per parameter byte cannot reach memcpy's 2 where memory is the limit.
PS_CPU_CLONES void AddGradient1(float* __restrict w, const float* __restrict g, size_t n) {
  for (size_t j = 0; j < n; ++j) w[j] += g[j];
}
PS_CPU_CLONES void AddGradient2(float* __restrict w, float* __restrict s, const float* __restrict g, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    w[j] += g[j];
    s[j] += g[j];
  }
}
PS_CPU_CLONES void AddGradient3(float* __restrict w, float* __restrict m, float* __restrict v,
                                const float* __restrict g, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    w[j] += g[j];
    m[j] += g[j];
    v[j] += g[j];
  }
}

class SameTrafficPass final : public Pass {
 public:
  // `touched`: bytes touched per parameter byte, 3 (SGD), 5 (momentum,
  // Adagrad) or 7 (Adam, FTRL): the parameters and (touched - 3) / 2 states.
  SameTrafficPass(int touched, size_t n, size_t slice_floats)
      : states_((touched - 3) / 2), slices_(Slices(n, slice_floats)), value_(n, 1.0f), grad_(n, 1e-3f) {
    for (const auto& [b, e] : slices_) state_.emplace_back(states_ * (e - b), 0.0f);
  }
  void Run(ps::ThreadPool& pool) override {
    pool.ParallelFor(slices_.size(), [&](size_t i) {
      const auto [b, e] = slices_[i];
      const size_t len = e - b;
      float* w = value_.data() + b;
      float* s = state_[i].data();
      const float* g = grad_.data() + b;
      if (states_ == 0) AddGradient1(w, g, len);
      if (states_ == 1) AddGradient2(w, s, g, len);
      if (states_ == 2) AddGradient3(w, s, s + len, g, len);
    });
    asm volatile("" : : "r"(value_.data()) : "memory");
  }

 private:
  const int states_;
  const std::vector<std::pair<size_t, size_t>> slices_;
  std::vector<float> value_, grad_;
  std::vector<std::vector<float>> state_;
};

// Repeats passes for at least min_ms (and at least once); returns passes/s.
double TimePasses(Pass& pass, ps::ThreadPool& pool, int min_ms) {
  const Clock::time_point t0 = Clock::now();
  int passes = 0;
  double seconds = 0;
  do {
    pass.Run(pool);
    ++passes;
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (seconds * 1000 < min_ms);
  return passes / seconds;
}

absl::StatusOr<std::unique_ptr<ps::Optimizer>> MakeOptimizer(ps::OptimizerKind kind) {
  ps::OptimizerConfig config;
  config.kind = kind;
  config.learning_rate = 1e-6f;  // gradients of 1e-3 keep every value finite for many passes
  return ps::Optimizer::Create(config);
}

void PrintLine(const JsonLine& line) { std::printf("%s\n", line.Str().c_str()); }

void PrintMemcpy(const Config& c, int64_t bytes, int threads, const std::vector<double>& gbps) {
  PrintLine(JsonLine()
                .Add("bench", "memcpy")
                .Add("bytes", bytes)
                .Add("threads", threads)
                .Add("reps", c.reps)
                .Add("gbps", Median(gbps), 3)
                .Add("gbps_min", *std::min_element(gbps.begin(), gbps.end()), 3)
                .Add("gbps_max", *std::max_element(gbps.begin(), gbps.end()), 3)
                .Add("touched_gbps", kMemcpyTouched * Median(gbps), 3));
}

void PrintSameTraffic(const Config& c, int touched, int64_t bytes, int threads, const std::vector<double>& gbps,
                      double memcpy_gbps) {
  PrintLine(JsonLine()
                .Add("bench", "same_traffic")
                .Add("touched_per_param_byte", touched)
                .Add("bytes", bytes)
                .Add("threads", threads)
                .Add("slice_bytes", c.slice_bytes)
                .Add("reps", c.reps)
                .Add("gbps", Median(gbps), 3)
                .Add("memcpy_gbps", memcpy_gbps, 3)
                .Add("ratio_vs_memcpy", Median(gbps) / memcpy_gbps, 3)
                .Add("basis", "param_bytes"));
}

void PrintUpdate(const Config& c, ps::OptimizerKind kind, int64_t bytes, int threads, const std::vector<double>& gbps,
                 double memcpy_gbps, double same_traffic_gbps) {
  const double median = Median(gbps);
  const int touched = TouchedPerParamByte(kind);
  const double ratio = median / memcpy_gbps;
  const double goal = GoalFor(kind);
  JsonLine line;
  line.Add("bench", "update")
      .Add("optimizer", ps::OptimizerName(kind))
      .Add("bytes", bytes)
      .Add("threads", threads)
      .Add("slice_bytes", c.slice_bytes)
      .Add("reps", c.reps)
      .Add("gbps", median, 3)
      .Add("gbps_min", *std::min_element(gbps.begin(), gbps.end()), 3)
      .Add("gbps_max", *std::max_element(gbps.begin(), gbps.end()), 3)
      .Add("memcpy_gbps", memcpy_gbps, 3)
      .Add("ratio_vs_memcpy", ratio, 3)
      .Add("basis", "param_bytes")
      .Add("touched_per_param_byte", touched)
      .Add("touched_gbps", touched * median, 3)
      .Add("memcpy_touched_gbps", kMemcpyTouched * memcpy_gbps, 3)
      .Add("ratio_touched_vs_memcpy", touched * median / (kMemcpyTouched * memcpy_gbps), 3)
      .Add("same_traffic_gbps", same_traffic_gbps, 3)
      .Add("ratio_vs_same_traffic", median / same_traffic_gbps, 3);
  if (goal > 0) {
    line.Add("goal", goal, 1).Add("goal_met", ratio >= goal);
  } else {
    line.AddNull("goal").AddNull("goal_met");
  }
  PrintLine(line);
}

// Each pass once untimed, then `reps` rounds timing every pass in turn, so a
// busy phase of the machine hits all of them alike; GB/s by pass and round.
std::vector<std::vector<double>> TimeInterleaved(const Config& c, ps::ThreadPool& pool, int64_t bytes,
                                                 const std::vector<Pass*>& passes) {
  for (Pass* p : passes) p->Run(pool);
  std::vector<std::vector<double>> gbps(passes.size());
  for (int rep = 0; rep < c.reps; ++rep) {
    for (size_t k = 0; k < passes.size(); ++k) gbps[k].push_back(TimePasses(*passes[k], pool, c.min_ms) * bytes / 1e9);
  }
  return gbps;
}

// All optimizers, their same-traffic bounds and the memcpy for one tensor size.
absl::Status MeasureSize(const Config& c, ps::ThreadPool& pool, int64_t bytes) {
  const size_t n = static_cast<size_t>(bytes) / sizeof(float);
  const size_t slice_floats = static_cast<size_t>(c.slice_bytes) / sizeof(float);
  // The constructors fill every buffer, so no page fault lands in a timed pass.
  MemcpyPass memcpy_pass(n, pool.num_threads());
  std::vector<Pass*> passes = {&memcpy_pass};
  std::vector<int> classes;  // the traffic classes (bytes touched per parameter byte) measured
  for (ps::OptimizerKind kind : c.kinds) {
    if (absl::c_find(classes, TouchedPerParamByte(kind)) == classes.end()) classes.push_back(TouchedPerParamByte(kind));
  }
  std::vector<std::unique_ptr<Pass>> owned;
  for (int touched : classes) owned.push_back(std::make_unique<SameTrafficPass>(touched, n, slice_floats));
  for (ps::OptimizerKind kind : c.kinds) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<ps::Optimizer> optimizer, MakeOptimizer(kind));
    owned.push_back(std::make_unique<UpdatePass>(std::move(optimizer), n, slice_floats));
  }
  for (auto& p : owned) passes.push_back(p.get());
  const std::vector<std::vector<double>> gbps = TimeInterleaved(c, pool, bytes, passes);
  const double memcpy_gbps = Median(gbps[0]);
  const int threads = pool.num_threads();
  PrintMemcpy(c, bytes, threads, gbps[0]);
  for (size_t t = 0; t < classes.size(); ++t) {
    PrintSameTraffic(c, classes[t], bytes, threads, gbps[1 + t], memcpy_gbps);
  }
  for (size_t k = 0; k < c.kinds.size(); ++k) {
    const size_t t = absl::c_find(classes, TouchedPerParamByte(c.kinds[k])) - classes.begin();
    const std::vector<double>& update = gbps[1 + classes.size() + k];
    const double median = Median(update), bound = Median(gbps[1 + t]);
    PrintUpdate(c, c.kinds[k], bytes, threads, update, memcpy_gbps, bound);
    std::fprintf(stderr,
                 "update_bench: %s %ld MiB threads=%d: %.2f GB/s, memcpy %.2f GB/s, ratio %.2f, "
                 "%.2f of its same-traffic bound\n",
                 ps::OptimizerName(c.kinds[k]), static_cast<long>(bytes >> 20), threads, median, memcpy_gbps,
                 median / memcpy_gbps, median / bound);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status RunAll(const Config& c) {
  ps::ThreadPool pool(c.threads);
  for (int64_t mb : c.sizes_mb) PS_RETURN_IF_ERROR(MeasureSize(c, pool, mb << 20));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "update_bench [--sizes_mb=64,256] [--optimizers=sgd,...] [--reps=5] [--threads=1]: GB/s of the "
               "server's update rules against memcpy; JSON lines on stdout.");
  auto config = ConfigFromFlags();
  if (!config.ok()) return ps::ExitCode(config.status(), "update_bench");
  return ps::ExitCode(RunAll(*config), "update_bench");
}
