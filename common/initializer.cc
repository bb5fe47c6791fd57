#include "common/initializer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ps {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashName(const std::string& name) {  // FNV-1a: stable across builds
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Uniform in (0, 1): never 0, so log() below is finite.
double Unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

double StandardNormal(uint64_t stream, uint64_t index) {
  const uint64_t a = Mix(stream ^ Mix(2 * index));
  const uint64_t b = Mix(stream ^ Mix(2 * index + 1));
  return std::sqrt(-2.0 * std::log(Unit(a))) * std::cos(2.0 * std::numbers::pi * Unit(b));
}

}  // namespace

void FillInitialValues(const TensorSpec& tensor, uint64_t offset, absl::Span<float> out) {
  const Initializer& init = tensor.init;
  const uint64_t stream = Mix(init.seed ^ HashName(tensor.name));
  switch (init.kind) {
    case InitKind::kZeros:
      std::fill(out.begin(), out.end(), 0.0f);
      return;
    case InitKind::kConstant:
      std::fill(out.begin(), out.end(), init.a);
      return;
    case InitKind::kUniform:
      for (size_t i = 0; i < out.size(); ++i) {
        const double u = Unit(Mix(stream ^ Mix(offset + i)));
        // Rounding to float may land on b itself; the range is [a, b).
        out[i] = std::min(static_cast<float>(init.a + (init.b - init.a) * u),
                          std::nextafter(init.b, init.a));
      }
      return;
    case InitKind::kNormal:
    case InitKind::kHe: {
      const double fan_in = static_cast<double>(tensor.shape.empty() ? 1 : tensor.shape[0]);
      const double mean = init.kind == InitKind::kHe ? 0.0 : init.a;
      const double sd = init.kind == InitKind::kHe ? std::sqrt(2.0 / fan_in) : init.b;
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(mean + sd * StandardNormal(stream, offset + i));
      }
      return;
    }
  }
}

}  // namespace ps
