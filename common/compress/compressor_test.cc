// The compressors (common/compress/compressor.h): none is bit-identical; fp16 and
// bf16 round to nearest even exactly as a reference does; top-k keeps the
// largest magnitudes, random-k what its seed draws, one-bit the signs and
// the mean magnitude; error feedback loses nothing but the last residual;
// and every malformed frame is refused, naming the problem, with nothing
// written.

#include "common/compress/compressor.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomValues(size_t n, uint64_t seed, float spread = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::string Encode(const CompressionSpec& spec, absl::Span<const float> values, uint64_t seed = 1) {
  std::string frame;
  Compressor::Create(spec)->Encode(values, seed, &frame);
  EXPECT_EQ(frame.size(), Compressor::Create(spec)->FrameBytes(values.size())) << spec.ToString();
  return frame;
}

std::vector<float> RoundTrip(const CompressionSpec& spec, absl::Span<const float> values, uint64_t seed = 1) {
  std::vector<float> out(values.size(), 7.0f);
  const absl::Status s = DecodeFrame(Encode(spec, values, seed), absl::MakeSpan(out));
  EXPECT_TRUE(s.ok()) << spec.ToString() << ": " << s;
  return out;
}

// Every float class: zeros, subnormals, normals across all exponents,
// numbers near the 16-bit formats' limits and rounding ties, infinities, NaN.
std::vector<float> EdgeValues() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e-8f,
                          5.9604645e-8f,
                          2.9802322e-8f,
                          6.1035156e-5f,
                          6.1e-5f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u)};
  std::mt19937 rng(3);
  for (uint32_t exp = 0; exp < 256; ++exp) {
    for (int j = 0; j < 64; ++j) {
      const uint32_t mantissa = j < 4 ? (j == 0   ? 0u
                                         : j == 1 ? 0x1000u
                                         : j == 2 ? 0x8000u
                                                  : 0x7fffffu)
                                      : rng() & 0x7fffffu;
      v.push_back(std::bit_cast<float>((exp << 23) | mantissa | (j % 2 ? 0x80000000u : 0u)));
    }
  }
  return v;
}

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(CompressorTest, NoneIsBitIdentical) {
  const std::vector<float> v = EdgeValues();
  const std::vector<float> out = RoundTrip({CompressionKind::kNone, 1}, v);
  EXPECT_EQ(std::memcmp(out.data(), v.data(), v.size() * sizeof(float)), 0);
}

TEST(CompressorTest, Fp16RoundsAsTheCompilersHalfConversion) {
  const std::vector<float> v = EdgeValues();
  const std::vector<float> out = RoundTrip({CompressionKind::kFp16, 1}, v);
  int differ = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = static_cast<float>(static_cast<_Float16>(v[i]));
    if (!SameFloat(out[i], want) && ++differ <= 5) {
      ADD_FAILURE() << "fp16 of " << v[i] << " (0x" << std::hex << std::bit_cast<uint32_t>(v[i]) << "): " << out[i]
                    << ", want " << want;
    }
  }
  EXPECT_EQ(differ, 0) << "of " << v.size();
}

// Round to nearest, ties to even, computed the slow way.
float ReferenceBf16(float x) {
  if (std::isnan(x)) return x;
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const float down = std::bit_cast<float>(b & 0xffff0000u);
  const float up = std::bit_cast<float>((b & 0xffff0000u) + 0x10000u);
  // Past the largest finite value "up" is infinity: it stands for 2^128 there.
  const double up_value = std::isinf(up) ? std::copysign(std::ldexp(1.0, 128), x) : up;
  const double below = std::fabs(static_cast<double>(x) - down), above = std::fabs(up_value - x);
  if (below < above || (below == above && ((b >> 16) & 1u) == 0)) return down;
  return up;
}

TEST(CompressorTest, Bf16RoundsToNearestEven) {
  std::vector<float> v = EdgeValues();
  v.pop_back();  // the signalling NaN: checked below
  const std::vector<float> out = RoundTrip({CompressionKind::kBf16, 1}, v);
  int differ = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) && !std::isnan(v[i])) continue;
    const float want = ReferenceBf16(v[i]);
    if (!SameFloat(out[i], want) && ++differ <= 5) ADD_FAILURE() << "bf16 of " << v[i] << ": " << out[i];
  }
  EXPECT_EQ(differ, 0);
  const float snan = std::bit_cast<float>(0x7f800001u);  // rounding must not make it infinity
  EXPECT_TRUE(std::isnan(RoundTrip({CompressionKind::kBf16, 1}, std::vector<float>{snan})[0]));
}

TEST(CompressorTest, TopKKeepsTheLargestMagnitudesExactly) {
  const std::vector<float> v = RandomValues(1000, 5);
  const std::vector<float> out = RoundTrip({CompressionKind::kTopK, 0.01}, v);
  std::vector<float> magnitudes;
  for (float x : v) magnitudes.push_back(std::fabs(x));
  std::sort(magnitudes.rbegin(), magnitudes.rend());
  int kept = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (out[i] == 0.0f) continue;
    ++kept;
    EXPECT_EQ(out[i], v[i]) << i;
    EXPECT_GE(std::fabs(v[i]), magnitudes[9]) << i;
  }
  EXPECT_EQ(kept, 10);
  // 10 of 1000: 16 + 8 + 10 x (4 + 4) bytes against 4,000.
  EXPECT_EQ(Encode({CompressionKind::kTopK, 0.01}, v).size(), 104u);
}

// Large tensors select through a sampled threshold: the same exact top k
// as a full sort (ties to the lower index), also when every magnitude ties.
TEST(CompressorTest, TopKOfALargeTensorIsTheExactTopK) {
  std::vector<float> v = RandomValues(100000, 8);
  for (const std::vector<float>& t : {v, std::vector<float>(100000, -0.5f)}) {
    std::vector<size_t> order(t.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::fabs(t[a]) > std::fabs(t[b]); });
    const std::set<size_t> want(order.begin(), order.begin() + 1000);
    const std::vector<float> out = RoundTrip({CompressionKind::kTopK, 0.01}, t);
    std::set<size_t> got;
    for (size_t i = 0; i < t.size(); ++i) {
      if (out[i] != 0.0f) got.insert(i);
    }
    EXPECT_EQ(got, want);
  }
}

TEST(CompressorTest, RandomKKeepsWhatItsSeedDraws) {
  const std::vector<float> v = RandomValues(5000, 6);
  const CompressionSpec spec{CompressionKind::kRandomK, 0.02};
  EXPECT_EQ(Encode(spec, v, 42), Encode(spec, v, 42));
  const std::vector<float> a = RoundTrip(spec, v, 42), b = RoundTrip(spec, v, 43);
  std::set<size_t> at_a, at_b;
  for (size_t i = 0; i < v.size(); ++i) {
    if (a[i] != 0.0f) {
      at_a.insert(i);
      EXPECT_EQ(a[i], v[i]);
    }
    if (b[i] != 0.0f) at_b.insert(i);
  }
  EXPECT_EQ(at_a.size(), 100u);
  EXPECT_EQ(at_b.size(), 100u);
  EXPECT_NE(at_a, at_b);
}

TEST(CompressorTest, OneBitKeepsTheSignsAndTheMeanMagnitude) {
  const std::vector<float> v = {1.0f, -2.0f, 3.0f, -4.0f, 0.0f, -0.0f, 5.0f, 6.0f, -7.0f};
  const std::vector<float> out = RoundTrip({CompressionKind::kOneBit, 1}, v);
  const float scale = 28.0f / 9.0f;
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(out[i], std::signbit(v[i]) ? -scale : scale) << i;
  EXPECT_EQ(Encode({CompressionKind::kOneBit, 1}, v).size(), 16u + 4 + 2);
}

// Over many steps, what the receiver decoded plus the sender's residual is
// what the sender was given: error feedback loses nothing but the last
// residual, for every lossy kind.
TEST(CompressorTest, ErrorFeedbackLosesNothingButTheLastResidual) {
  for (const char* name : {"fp16", "bf16", "topk:0.05", "randomk:0.05", "onebit"}) {
    const CompressionSpec spec = *CompressionSpec::Parse(name);
    const std::unique_ptr<Compressor> c = Compressor::Create(spec);
    constexpr size_t kN = 400;
    ErrorFeedback feedback(kN);
    std::vector<double> given(kN, 0.0), received(kN, 0.0);
    for (uint64_t step = 0; step < 60; ++step) {
      const std::vector<float> g = RandomValues(kN, 100 + step, 0.1f);
      std::string frame;
      ASSERT_TRUE(feedback.Encode(*c, g, step, &frame).ok());
      std::vector<float> out(kN);
      ASSERT_TRUE(DecodeFrame(frame, absl::MakeSpan(out)).ok());
      for (size_t i = 0; i < kN; ++i) {
        given[i] += g[i];
        received[i] += out[i];
      }
    }
    double worst = 0;
    for (size_t i = 0; i < kN; ++i) worst = std::max(worst, std::fabs(given[i] - received[i] - feedback.residual()[i]));
    EXPECT_LT(worst, 1e-4) << name;
  }
  ErrorFeedback two(2);
  std::string frame;
  EXPECT_THAT(std::string(two.Encode(*Compressor::Create({}), std::vector<float>(3), 0, &frame).message()),
              HasSubstr("error feedback for 2 values given 3"));
}

// Frame surgery: the byte at `at` set to `value`, or the frame cut to `size`.
std::string Poked(std::string frame, size_t at, char value) {
  frame[at] = value;
  return frame;
}

TEST(CompressorTest, MalformedFramesAreRefusedWithNothingWritten) {
  const std::vector<float> v = RandomValues(100, 9);
  const std::string topk = Encode({CompressionKind::kTopK, 0.1}, v);
  const std::string onebit = Encode({CompressionKind::kOneBit, 1}, v);
  const std::string fp16 = Encode({CompressionKind::kFp16, 1}, v);
  std::string unsorted = topk;  // the first two indices swapped
  std::swap_ranges(unsorted.begin() + 24, unsorted.begin() + 28, unsorted.begin() + 28);
  std::string nan_scale = onebit;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_scale.data() + 16, &nan, 4);
  std::string out_of_range = topk;
  const uint32_t big = 100;
  std::memcpy(out_of_range.data() + 24 + 4 * 9, &big, 4);
  std::string too_many = topk;
  const uint64_t k = 101;
  std::memcpy(too_many.data() + 16, &k, 8);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fp16.substr(0, 10), "shorter than its 16-byte header"},
      {Poked(fp16, 0, 9), "unknown kind 9"},
      {Poked(fp16, 1, 4), "index width 4 (want 0)"},
      {Poked(topk, 1, 8), "index width 8 (want 4)"},
      {Poked(fp16, 5, 1), "reserved bytes not 0"},
      {fp16.substr(0, fp16.size() - 2), "198 bytes of payload, not 100 x 2"},
      {fp16 + "xx", "202 bytes of payload"},
      {Poked(fp16, 8, 99), "frame of 99 values for a tensor of 100"},
      {unsorted, "not ascending"},
      {out_of_range, "index 100 (the 10th of 10) out of range [0, 100)"},
      {too_many, "sparse frame of 101 values for a tensor of 100"},
      {topk.substr(0, topk.size() - 1), "sparse frame of 10 values: 79 bytes of payload"},
      {nan_scale, "scale nan is not a finite value"},
      {onebit.substr(0, onebit.size() - 1), "onebit frame of 100 values"},
  };
  for (const auto& [frame, want] : cases) {
    std::vector<float> out(100, 7.0f);
    const absl::Status s = DecodeFrame(frame, absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << want;
    EXPECT_THAT(std::string(s.message()), HasSubstr(want));
    EXPECT_EQ(out, std::vector<float>(100, 7.0f)) << want << ": written although refused";
  }
}

TEST(CompressorTest, IndicesWidenPastFourBillionValues) {
  std::string header(kCompressionHeaderBytes, '\0');
  header[0] = static_cast<char>(CompressionKind::kTopK);
  const uint64_t n = uint64_t{1} << 32;
  std::memcpy(header.data() + 8, &n, 8);
  header[1] = 8;
  EXPECT_TRUE(FrameHeader(header).ok());
  header[1] = 4;
  EXPECT_THAT(std::string(FrameHeader(header).status().message()), HasSubstr("index width 4 (want 8)"));
}

TEST(CompressorTest, SpecsParseAndBadOnesAreNamed) {
  EXPECT_EQ(CompressionSpec::Parse("topk:0.01")->ratio, 0.01);
  EXPECT_EQ(CompressionSpec::Parse("bf16")->kind, CompressionKind::kBf16);
  EXPECT_EQ(CompressionSpec::Parse("randomk:0.5")->ToString(), "randomk:0.5");
  // Pulls: 16-bit parameters by default for every lossy kind; ",pull=" overrides.
  EXPECT_EQ(CompressionSpec::Parse("none")->pull, CompressionKind::kNone);
  EXPECT_EQ(CompressionSpec::Parse("fp16")->pull, CompressionKind::kFp16);
  EXPECT_EQ(CompressionSpec::Parse("topk:0.01")->pull, CompressionKind::kBf16);
  EXPECT_EQ(CompressionSpec::Parse("onebit")->pull, CompressionKind::kBf16);
  EXPECT_EQ(CompressionSpec::Parse("topk:0.25,pull=none")->pull, CompressionKind::kNone);
  EXPECT_EQ(CompressionSpec::Parse("topk:0.25,pull=none")->ToString(), "topk:0.25,pull=none");
  EXPECT_EQ(CompressionSpec::Parse("none,pull=fp16")->ToString(), "none,pull=fp16");
  EXPECT_EQ(CompressionSpec::Parse("bf16,pull=bf16")->ToString(), "bf16");
  EXPECT_TRUE(CompressionSpec::Parse("topk:0.01,pull=delta")->delta_pull());
  EXPECT_EQ(CompressionSpec::Parse("topk:0.01,pull=delta")->ToString(), "topk:0.01,pull=delta");
  EXPECT_FALSE(CompressionSpec::Parse("topk:0.01")->delta_pull());
  EXPECT_FALSE(CompressionSpec::Parse("none")->compresses());
  EXPECT_TRUE(CompressionSpec::Parse("none,pull=bf16")->compresses());
  // A table's ids: delta coded where shorter unless ",ids=raw"; options in any order.
  EXPECT_FALSE(CompressionSpec::Parse("bf16")->raw_ids);
  EXPECT_FALSE(CompressionSpec::Parse("bf16,ids=delta")->raw_ids);
  EXPECT_TRUE(CompressionSpec::Parse("bf16,ids=raw")->raw_ids);
  EXPECT_EQ(CompressionSpec::Parse("none,ids=raw")->ToString(), "none,ids=raw");
  EXPECT_EQ(CompressionSpec::Parse("topk:0.5,ids=raw,warmup=3,pull=delta")->ToString(),
            "topk:0.5,pull=delta,warmup=3,ids=raw");
  for (const auto& [text, want] :
       std::vector<std::pair<std::string, std::string>>{{"gzip", "not one of none, fp16"},
                                                        {"topk", "give the ratio"},
                                                        {"fp16:0.5", "takes no ratio"},
                                                        {"topk:0", "in (0, 1]"},
                                                        {"topk:1.5", "in (0, 1]"},
                                                        {"randomk:x", "in (0, 1]"},
                                                        {"bf16,pull=topk", "pull=none"},
                                                        {"bf16,fp16", "pull=none"},
                                                        {"bf16,pull=", "pull=none"},
                                                        {"bf16,pull=delta", "topk, randomk or onebit only"},
                                                        {"topk:0.1,pull=bf16,pull=none", "pull= given twice"},
                                                        {"fp16,warmup=10", "topk or randomk only"},
                                                        {"topk:0.1,warmup=x", "count of steps"},
                                                        {"topk:0.1,warmup=", "count of steps"},
                                                        {"topk:0.1,warmup=-3", "count of steps"},
                                                        {"topk:0.1,warmup=5,warmup=6", "warmup= given twice"},
                                                        {"bf16,ids=hex", "ids=delta or ids=raw"},
                                                        {"bf16,ids=raw,ids=delta", "ids= given twice"},
                                                        {"bf16,zip=1", "after ',' come"}}) {
    const auto spec = CompressionSpec::Parse(text);
    EXPECT_FALSE(spec.ok()) << text;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(want)) << text;
  }
}

// Deep gradient compression's warm-up: more values kept in the first steps,
// the ratio falling geometrically by stage, then the ratio itself.
TEST(CompressorTest, AWarmUpKeepsMoreValuesEarlyThenTheRatio) {
  const CompressionSpec spec = *CompressionSpec::Parse("topk:0.01,warmup=100");
  EXPECT_EQ(spec.warmup, 100u);
  EXPECT_EQ(spec.ToString(), "topk:0.01,warmup=100");
  EXPECT_EQ(CompressionSpec::Parse("randomk:0.1,warmup=8,pull=delta")->ToString(), "randomk:0.1,pull=delta,warmup=8");
  EXPECT_EQ(CompressionSpec::Parse("topk:0.1,pull=none,warmup=3")->pull, CompressionKind::kNone);
  // Four stages of 25 steps, then the ratio: 0.01^(1/5), ^(2/5), ^(3/5), ^(4/5), 0.01.
  const std::vector<std::pair<int64_t, int>> stages = {{0, 0},  {24, 0}, {25, 1},  {49, 1},    {50, 2},
                                                       {75, 3}, {99, 3}, {100, 4}, {100000, 4}};
  for (const auto& [step, stage] : stages) EXPECT_EQ(spec.StageAt(step), stage) << step;
  const std::vector<double> ratios = {0.398107, 0.158489, 0.0630957, 0.0251189, 0.01};
  for (int stage = 0; stage <= kWarmupStages; ++stage) {
    const CompressionSpec at = spec.AtStage(stage);
    EXPECT_NEAR(at.ratio, ratios[stage], 1e-6) << stage;
    EXPECT_EQ(at.warmup, 0u);
    EXPECT_EQ(at.kind, CompressionKind::kTopK);
  }
  EXPECT_EQ(spec.AtStep(100).ratio, 0.01);
  // A frame of 10,000 values keeps 3,982 at step 0 and 100 from step 100 on.
  std::vector<float> values(10000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97) - 48.0f;
  for (const auto& [step, kept] : std::vector<std::pair<int64_t, uint64_t>>{{0, 3982}, {60, 631}, {100, 100}}) {
    std::string frame;
    Compressor::Create(spec.AtStep(step))->Encode(values, 1, &frame);
    uint64_t k = 0;
    std::memcpy(&k, frame.data() + kCompressionHeaderBytes, 8);
    EXPECT_EQ(k, kept) << step;
  }
  // Without a warm-up every step is past it.
  EXPECT_EQ(CompressionSpec::Parse("topk:0.01")->StageAt(0), kWarmupStages);
  EXPECT_EQ(CompressionSpec::Parse("topk:0.01")->AtStep(0).ratio, 0.01);
}

}  // namespace
}  // namespace ps
