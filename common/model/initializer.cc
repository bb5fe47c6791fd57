#include "common/model/initializer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/base/hash.h"

namespace ps {
namespace {

constexpr uint64_t Mix(uint64_t x) { return Mix64(x); }

// Uniform in (0, 1): never 0, so log() below is finite.
double Unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

double StandardNormal(uint64_t stream, uint64_t index) {
  const uint64_t a = Mix(stream ^ Mix(2 * index));
  const uint64_t b = Mix(stream ^ Mix(2 * index + 1));
  return std::sqrt(-2.0 * std::log(Unit(a))) * std::cos(2.0 * std::numbers::pi * Unit(b));
}

// Elements [offset, offset + out.size()) of the stream `stream` of `init`.
void Fill(const Initializer& init, uint64_t stream, double fan_in, uint64_t offset, absl::Span<float> out) {
  switch (init.kind) {
    case InitKind::kZeros: std::fill(out.begin(), out.end(), 0.0f); return;
    case InitKind::kConstant: std::fill(out.begin(), out.end(), init.a); return;
    case InitKind::kUniform:
      for (size_t i = 0; i < out.size(); ++i) {
        const double u = Unit(Mix(stream ^ Mix(offset + i)));
        // Rounding to float may land on b itself; the range is [a, b).
        out[i] = std::min(static_cast<float>(init.a + (init.b - init.a) * u), std::nextafter(init.b, init.a));
      }
      return;
    case InitKind::kNormal:
    case InitKind::kHe: {
      const double mean = init.kind == InitKind::kHe ? 0.0 : init.a;
      const double sd = init.kind == InitKind::kHe ? std::sqrt(2.0 / fan_in) : init.b;
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(mean + sd * StandardNormal(stream, offset + i));
      }
      return;
    }
  }
}

}  // namespace

void FillInitialValues(const TensorSpec& tensor, uint64_t offset, absl::Span<float> out) {
  const double fan_in = static_cast<double>(tensor.shape.empty() ? 1 : tensor.shape[0]);
  Fill(tensor.init, Mix(tensor.init.seed ^ Fnv1a64(tensor.name)), fan_in, offset, out);
}

void FillInitialRow(const TableSpec& table, uint64_t id, absl::Span<float> out) {
  // Each row its own stream: a second mix keeps rows of nearby ids apart.
  const uint64_t stream = Mix(Mix(table.init.seed ^ Fnv1a64(table.name)) ^ Mix(id));
  Fill(table.init, stream, static_cast<double>(table.dim), 0, out);
}

}  // namespace ps
