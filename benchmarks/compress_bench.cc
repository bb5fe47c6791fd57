// compress_bench: how fast each compressor (common/compressor.h) encodes and
// decodes a gradient tensor on this machine, against memcpy of the same
// bytes in the same run, and below what link rate it pays for itself. JSON
// lines on stdout (benchmarks/README.md):
//
//   {"bench":"memcpy",...}    memcpy of the tensor's bytes: the reference
//   {"bench":"compress",...}  per compressor and size: encode and decode
//                             GB/s (of the float bytes), their ratios to
//                             memcpy, the frame's bytes over the raw bytes,
//                             and pays_below_gbit_s: the link rate under which
//                             sending the frame (encode + decode + its bytes)
//                             is faster than sending the floats
//
// One thread, as a worker's push or a server's pull reply would run it.

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
#include "common/compressor.h"
#include "common/json.h"
#include "common/main_support.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, sizes, "65536,4194304", "Comma list of tensor sizes in bytes (multiples of 4).");
ABSL_FLAG(std::string, compressors, "none,fp16,bf16,topk:0.01,randomk:0.01,onebit", "Comma list of compressors.");
ABSL_FLAG(double, seconds, 0.5, "Time spent on each measurement (encode, decode, memcpy), at least one round.");

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
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "compress_bench [--sizes=65536,4194304] [--compressors=none,fp16,...] [--seconds=0.5]: encode and "
               "decode GB/s of each compressor against memcpy; JSON lines on stdout.");
  return ps::ExitCode(Run(), "compress_bench");
}
