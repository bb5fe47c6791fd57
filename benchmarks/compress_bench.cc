// compress_bench: how fast each compressor (common/compress/compressor.h) encodes and
// decodes a gradient tensor on this machine, against memcpy of the same
// bytes in the same run, and below what link rate it pays for itself. JSON
// lines on stdout (docs/benchmarks.md):
//
//   {"bench":"memcpy",...}    memcpy of the tensor's bytes: the reference
//   {"bench":"compress",...}  per compressor and size: encode and decode
//                             GB/s (of the float bytes), their ratios to
//                             memcpy, the frame's bytes over the raw bytes,
//                             and pays_below_gbit_s: the link rate under which
//                             sending the frame (encode + decode + its bytes)
//                             is faster than sending the floats
//   {"bench":"compress_push",...}  per lossy compressor, size and thread
//                             count: a worker's push of the tensor cut into
//                             --push_slices slices, each encoded with its
//                             error feedback by the worker's compression
//                             threads (worker/client/push_compression.h):
//                             encode GB/s and the ratio to one thread
//
// "compress" lines: one thread, as a server's pull reply would run it.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "common/compress/compressor.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "worker/client/push_compression.h"

ABSL_FLAG(std::string, sizes, "65536,4194304", "Comma list of tensor sizes in bytes (multiples of 4).");
ABSL_FLAG(std::string, compressors, "none,fp16,bf16,topk:0.01,randomk:0.01,onebit", "Comma list of compressors.");
ABSL_FLAG(double, seconds, 0.5, "Time spent on each measurement (encode, decode, memcpy), at least one round.");
ABSL_FLAG(std::string, push_threads, "1,2",
          "Comma list of compression thread counts for the compress_push lines (empty: none).");
ABSL_FLAG(int, push_slices, 8, "Slices the compress_push lines cut the tensor into.");

namespace {

using Clock = std::chrono::steady_clock;

// Runs `op` until `seconds` passed (at least once); returns seconds per run.
template <typename Op>
double SecondsPerRun(double seconds, Op op) {
  const Clock::time_point start = Clock::now();
  int runs = 0;
  double elapsed = 0;
  do {
    op();
    ++runs;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed / runs;
}

struct Flags {
  std::vector<int64_t> sizes;
  std::vector<ps::CompressionSpec> specs;
  double seconds = 0.5;
  std::vector<int> push_threads;
  int push_slices = 8;
};

absl::StatusOr<Flags> ReadFlags() {
  Flags f;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(s, &bytes) || bytes < 4 || bytes % 4 != 0 || bytes > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: '", s, "' is not a multiple of 4 in [4, 2^30]"));
    }
    f.sizes.push_back(bytes);
  }
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_compressors), ',', absl::SkipEmpty())) {
    auto spec = ps::CompressionSpec::Parse(s);
    if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("--compressors: ", spec.status().message()));
    f.specs.push_back(*spec);
  }
  f.seconds = absl::GetFlag(FLAGS_seconds);
  if (!(f.seconds > 0) || f.seconds > 60) return absl::InvalidArgumentError("--seconds must be in (0, 60]");
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_push_threads), ',', absl::SkipEmpty())) {
    int threads = 0;
    if (!absl::SimpleAtoi(s, &threads) || threads < 1 || threads > 64) {
      return absl::InvalidArgumentError(absl::StrCat("--push_threads: '", s, "' is not in [1, 64]"));
    }
    f.push_threads.push_back(threads);
  }
  f.push_slices = absl::GetFlag(FLAGS_push_slices);
  if (f.push_slices < 1 || f.push_slices > 1024)
    return absl::InvalidArgumentError("--push_slices must be in [1, 1024]");
  return f;
}

// One compressor on `grad`: its "compress" line.
absl::Status Measure(const ps::CompressionSpec& spec, const std::vector<float>& grad, double memcpy_s, double seconds) {
  const int64_t bytes = static_cast<int64_t>(grad.size() * sizeof(float));
  const std::unique_ptr<ps::Compressor> c = ps::Compressor::Create(spec);
  std::vector<float> out(grad.size());
  std::string frame;
  uint64_t seed = 0;
  const double encode_s = SecondsPerRun(seconds, [&] {
    frame.clear();
    c->Encode(grad, ++seed, &frame);
  });
  absl::Status decoded;
  const double decode_s = SecondsPerRun(seconds, [&] { decoded = ps::DecodeFrame(frame, absl::MakeSpan(out)); });
  PS_RETURN_IF_ERROR(decoded);
  const double saved_bits = 8.0 * (static_cast<double>(bytes) - static_cast<double>(frame.size()));
  std::printf("%s\n", ps::JsonLine()
                          .Add("bench", "compress")
                          .Add("compressor", spec.ToString())
                          .Add("bytes", bytes)
                          .Add("frame_bytes", static_cast<uint64_t>(frame.size()))
                          .Add("frame_ratio", static_cast<double>(frame.size()) / bytes, 4)
                          .Add("encode_gbps", bytes / encode_s / 1e9, 3)
                          .Add("decode_gbps", bytes / decode_s / 1e9, 3)
                          .Add("encode_vs_memcpy", memcpy_s / encode_s, 3)
                          .Add("decode_vs_memcpy", memcpy_s / decode_s, 3)
                          .Add("pays_below_gbit_s", std::max(0.0, saved_bits / (encode_s + decode_s) / 1e9), 2)
                          .Str()
                          .c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

// A worker's push of `grad` (one tensor, `slices` slices) compressed as
// `spec` by `threads` threads: seconds per push.
absl::StatusOr<double> PushSeconds(const ps::CompressionSpec& spec, const std::vector<float>& grad, int slices,
                                   int threads, double seconds) {
  ps::ModelSpec model;
  model.tensors = {{"g", {static_cast<int64_t>(grad.size())}, ps::Initializer::Zeros()}};
  model.compression = spec;
  model.compress_min_bytes = 0;
  model.placement.slice_bytes = std::max<uint64_t>(4, (grad.size() + slices - 1) / slices * sizeof(float));
  PS_ASSIGN_OR_RETURN(const ps::PartitionMap map, ps::PartitionMap::Build(model.tensors, 1, model.placement));
  ps::PushCompression compression(model, map, threads);
  std::vector<ps::PushCompression::Job> jobs;
  for (uint32_t key : map.SlicesOfTensor(0)) {
    const ps::Slice& s = map.slices()[key];
    jobs.push_back({key, absl::MakeConstSpan(grad).subspan(s.offset, s.length)});
  }
  int64_t step = 0;
  return SecondsPerRun(seconds, [&] { compression.EncodeAll(jobs, 0, ++step); });
}

// The compress_push lines of one size: every lossy compressor at each thread count.
absl::Status MeasurePushes(const Flags& f, const std::vector<float>& grad) {
  const auto bytes = static_cast<int64_t>(grad.size() * sizeof(float));
  for (const ps::CompressionSpec& spec : f.specs) {
    if (spec.kind == ps::CompressionKind::kNone) continue;
    double first = 0;
    for (int threads : f.push_threads) {
      PS_ASSIGN_OR_RETURN(const double s, PushSeconds(spec, grad, f.push_slices, threads, f.seconds));
      if (first == 0) first = s;
      std::printf("%s\n", ps::JsonLine()
                              .Add("bench", "compress_push")
                              .Add("compressor", spec.ToString())
                              .Add("bytes", bytes)
                              .Add("slices", f.push_slices)
                              .Add("threads", threads)
                              .Add("encode_gbps", bytes / s / 1e9, 3)
                              .Add("ratio_vs_first_threads", first / s, 3)
                              .Str()
                              .c_str());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::Status Run() {
  PS_ASSIGN_OR_RETURN(const Flags f, ReadFlags());
  for (int64_t bytes : f.sizes) {
    const size_t n = static_cast<size_t>(bytes / 4);
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    std::vector<float> grad(n), copy(n);
    for (float& g : grad) g = normal(rng);
    const double memcpy_s = SecondsPerRun(f.seconds, [&] { std::memcpy(copy.data(), grad.data(), bytes); });
    std::printf(
        "%s\n",
        ps::JsonLine().Add("bench", "memcpy").Add("bytes", bytes).Add("gbps", bytes / memcpy_s / 1e9, 3).Str().c_str());
    for (const ps::CompressionSpec& spec : f.specs) PS_RETURN_IF_ERROR(Measure(spec, grad, memcpy_s, f.seconds));
    PS_RETURN_IF_ERROR(MeasurePushes(f, grad));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "compress_bench [--sizes=65536,4194304] [--compressors=none,fp16,...] [--seconds=0.5] "
               "[--push_threads=1,2] [--push_slices=8]: encode and decode GB/s of each compressor against memcpy, "
               "and a worker's push at each count of compression threads; JSON lines on stdout.");
  return ps::ExitCode(Run(), "compress_bench");
}
