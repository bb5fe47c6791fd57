#include "common/model/model_spec.h"

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"

namespace ps {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;
constexpr int32_t kMaxStaleness = 1000000;
constexpr uint64_t kMinSliceBytes = 4;

// Debian's Abseil is built with its own string_view, which StrCat takes but
// std::string_view does not convert to.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status TensorError(const std::string& name, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", View(what)));
}

absl::Status ValidateInitializer(const TensorSpec& t) {
  const Initializer& init = t.init;
  if (!std::isfinite(init.a) || !std::isfinite(init.b)) {
    return TensorError(t.name, absl::StrFormat("initializer parameters a=%g b=%g must be finite", init.a, init.b));
  }
  switch (init.kind) {
    case InitKind::kZeros:
    case InitKind::kConstant:
    case InitKind::kHe: return absl::OkStatus();
    case InitKind::kUniform:
      if (init.a >= init.b) {
        return TensorError(t.name, absl::StrFormat("uniform initializer needs a < b, got a=%g b=%g", init.a, init.b));
      }
      return absl::OkStatus();
    case InitKind::kNormal:
      if (init.b < 0) {
        return TensorError(t.name,
                           absl::StrFormat("normal initializer standard deviation is %g; must be >= 0", init.b));
      }
      return absl::OkStatus();
  }
  return TensorError(t.name, absl::StrCat("unknown initializer kind ", static_cast<int>(init.kind)));
}

// Accepts x in [0, 1); the negated comparison also rejects NaN.
absl::Status CheckUnitInterval(const char* field, float x) {
  if (!(x >= 0.0f && x < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat("optimizer %s is %g; must be in [0, 1)", field, x));
  }
  return absl::OkStatus();
}

absl::Status ConsistencyError(std::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat("invalid consistency '", View(text),
                                                 "'; expected sync, async or ssp:K with 0 <= K <= ", kMaxStaleness));
}

// Strict decimal: digits only, no sign, no spaces, at most kMaxStaleness.
bool ParseStaleness(std::string_view digits, int32_t* out) {
  if (digits.empty() || digits.size() > 7) return false;
  int64_t value = 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    value = value * 10 + (c - '0');
  }
  if (value > kMaxStaleness) return false;
  *out = static_cast<int32_t>(value);
  return true;
}

absl::Status ValidateConsistency(const Consistency& c) {
  if (c.mode != ConsistencyMode::kSync && c.mode != ConsistencyMode::kAsync && c.mode != ConsistencyMode::kSsp) {
    return absl::InvalidArgumentError(absl::StrCat("consistency mode ", static_cast<int>(c.mode), " is unknown"));
  }
  if (c.staleness < 0 || c.staleness > kMaxStaleness) {
    return absl::InvalidArgumentError(
        absl::StrCat("consistency staleness is ", c.staleness, "; must be in [0, ", kMaxStaleness, "]"));
  }
  return absl::OkStatus();
}

// What a decoded spec may hold: what CompressionSpec::Parse makes, and for a
// table (`rows`) only float32 or 16-bit rows.
absl::Status ValidateCompression(const CompressionSpec& c, const std::string& who, bool rows) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": compression ", why));
  };
  if (static_cast<uint8_t>(c.kind) > static_cast<uint8_t>(CompressionKind::kOneBit)) {
    return refuse(absl::StrCat("kind ", static_cast<int>(c.kind), " is unknown"));
  }
  if (DefaultPull(c.pull) != c.pull && !c.delta_pull()) return refuse("of pulls must be none, fp16, bf16 or delta");
  if (!(c.ratio > 0.0) || c.ratio > 1.0) return refuse(absl::StrCat("ratio ", c.ratio, " is outside (0, 1]"));
  if (c.warmup != 0 && c.kind != CompressionKind::kTopK && c.kind != CompressionKind::kRandomK) {
    return refuse(absl::StrCat("'", c.ToString(), "': a warm-up is for topk and randomk only"));
  }
  if (rows && (DefaultPull(c.kind) != c.kind || DefaultPull(c.pull) != c.pull)) {
    return refuse(absl::StrCat("'", c.ToString(), "': table rows travel as float32, fp16 or bf16 only"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePlacement(const PlacementSpec& p, const std::set<std::string>& names) {
  if (p.rule != PlacementRule::kAuto && p.rule != PlacementRule::kLayer) {
    return absl::InvalidArgumentError(absl::StrCat("placement rule ", static_cast<int>(p.rule), " is unknown"));
  }
  if (p.slice_bytes < kMinSliceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement slice_bytes is ", p.slice_bytes, "; must be at least ", kMinSliceBytes));
  }
  if (p.table_shards > kMaxTableShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement table_shards is ", p.table_shards, "; must be in [0, ", kMaxTableShards, "]"));
  }
  for (const auto& [name, rank] : p.explicit_ranks) {
    if (names.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("placement names unknown tensor '", name, "'"));
    }
    if (rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement of tensor '", name, "': server rank is ", rank, "; must be >= 0"));
    }
  }
  return absl::OkStatus();
}

constexpr int32_t kMaxStages = 4096;

absl::Status ValidateStages(const ModelSpec& m) {
  if (m.stages < 1 || m.stages > kMaxStages) {
    return absl::InvalidArgumentError(absl::StrCat("stages is ", m.stages, "; must be in [1, ", kMaxStages, "]"));
  }
  if (m.stages > 1 && !m.tables.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a model of ", m.stages, " pipeline stages has tables; tables are for stages = 1 only"));
  }
  std::vector<bool> held(m.stages, false);
  for (const TensorSpec& t : m.tensors) {
    if (t.stage < 0 || t.stage >= m.stages) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': stage ", t.stage, " outside [0, ", m.stages, ")"));
    }
    held[t.stage] = true;
  }
  for (int k = 0; m.stages > 1 && k < m.stages; ++k) {  // stages 1: a model of tables only has none
    if (!held[k]) return absl::InvalidArgumentError(absl::StrCat("stage ", k, " of ", m.stages, " holds no tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kScheduler: return "scheduler";
    case Role::kServer: return "server";
    case Role::kWorker: return "worker";
    case Role::kServing: return "serving replica";
  }
  return "unknown";
}

const char* OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kMomentum: return "momentum";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdagrad: return "adagrad";
    case OptimizerKind::kFtrl: return "ftrl";
  }
  return "unknown";
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam,
                             OptimizerKind::kAdagrad, OptimizerKind::kFtrl}) {
    if (name == OptimizerName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", View(name), "'; valid: sgd, momentum, adam, adagrad, ftrl"));
}

// Saturates at int64 max instead of overflowing, so Validate can reject huge
// shapes; a shape with no or non-positive dimensions has 0 elements.
int64_t TensorSpec::NumElements() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return 0;
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

absl::Status TensorSpec::Validate() const {
  if (name.empty()) return absl::InvalidArgumentError("tensor has an empty name");
  if (shape.empty()) return TensorError(name, "shape is empty");
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      return TensorError(name, absl::StrCat("shape dimension ", i, " is ", shape[i], "; must be positive"));
    }
  }
  int64_t n = NumElements();
  if (n > kMaxElements) {
    return TensorError(name, absl::StrCat("has ", n, " elements; at most 2^40 (", kMaxElements, ") allowed"));
  }
  if (compression.has_value()) PS_RETURN_IF_ERROR(ValidateCompression(*compression, "tensor '" + name + "'", false));
  return ValidateInitializer(*this);
}

absl::Status OptimizerConfig::Validate() const {
  if (static_cast<uint8_t>(kind) > static_cast<uint8_t>(OptimizerKind::kFtrl)) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer kind ", static_cast<int>(kind), " is unknown"));
  }
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("optimizer learning_rate is %g; must be positive and finite", learning_rate));
  }
  for (auto [field, value] :
       {std::pair<const char*, float>{"momentum", momentum}, {"beta1", beta1}, {"beta2", beta2}}) {
    absl::Status s = CheckUnitInterval(field, value);
    if (!s.ok()) return s;
  }
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon)) {
    return absl::InvalidArgumentError(absl::StrFormat("optimizer epsilon is %g; must be positive and finite", epsilon));
  }
  if (!(weight_decay >= 0.0f) || !std::isfinite(weight_decay)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("optimizer weight_decay is %g; must be >= 0 and finite", weight_decay));
  }
  if (static_cast<uint8_t>(lr_schedule) > static_cast<uint8_t>(LrSchedule::kCosine)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer lr_schedule ", static_cast<int>(lr_schedule), " is unknown"));
  }
  if (lr_schedule == LrSchedule::kCosine && decay_steps == 0) {
    return absl::InvalidArgumentError("optimizer decay_steps is 0; a cosine schedule needs it > 0");
  }
  if (!(min_lr_ratio >= 0.0f && min_lr_ratio <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat("optimizer min_lr_ratio is %g; must be in [0, 1]", min_lr_ratio));
  }
  for (auto [field, value] : {std::pair<const char*, float>{"l1", l1}, {"l2", l2}, {"ftrl_beta", ftrl_beta}}) {
    if (!(value >= 0.0f) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrFormat("optimizer %s is %g; must be >= 0 and finite", field, value));
    }
  }
  return absl::OkStatus();
}

float OptimizerConfig::LearningRateAt(uint64_t step) const {
  if (lr_schedule != LrSchedule::kCosine || decay_steps == 0) return learning_rate;
  const double progress = static_cast<double>(std::min(step, decay_steps)) / static_cast<double>(decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return static_cast<float>(learning_rate * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine));
}

absl::StatusOr<LrSchedule> ParseLrSchedule(std::string_view name) {
  if (name == "constant") return LrSchedule::kConstant;
  if (name == "cosine") return LrSchedule::kCosine;
  return absl::InvalidArgumentError(absl::StrCat("lr_schedule '", View(name), "' is unknown; use constant or cosine"));
}

absl::StatusOr<Consistency> Consistency::Parse(std::string_view text) {
  if (text == "sync") return Consistency{ConsistencyMode::kSync, 0};
  if (text == "async") return Consistency{ConsistencyMode::kAsync, 0};
  constexpr std::string_view kSspPrefix = "ssp:";
  if (text.substr(0, kSspPrefix.size()) != kSspPrefix) return ConsistencyError(text);
  int32_t k = 0;
  if (!ParseStaleness(text.substr(kSspPrefix.size()), &k)) return ConsistencyError(text);
  return Consistency{ConsistencyMode::kSsp, k};
}

std::string Consistency::ToString() const {
  switch (mode) {
    case ConsistencyMode::kSync: return "sync";
    case ConsistencyMode::kAsync: return "async";
    case ConsistencyMode::kSsp: return absl::StrCat("ssp:", staleness);
  }
  return absl::StrCat("unknown(", static_cast<int>(mode), ")");
}

absl::Status TableSpec::Validate() const {
  if (name.empty()) return absl::InvalidArgumentError("table has an empty name");
  if (dim < 1 || dim > kMaxTableDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", name, "': dim is ", dim, "; must be in [1, ", kMaxTableDim, "]"));
  }
  TensorSpec as_tensor{name, {dim}, init};
  if (absl::Status s = ValidateInitializer(as_tensor); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("table", s.message().substr(6)));
  }
  if (optimizer.has_value()) {
    if (absl::Status s = optimizer->Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("table '", name, "': ", s.message()));
    }
  }
  if (consistency.has_value()) {
    if (absl::Status s = Consistency::Parse(consistency->ToString()).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("table '", name, "': consistency: ", s.message()));
    }
  }
  if (compression.has_value()) return ValidateCompression(*compression, "table '" + name + "'", true);
  return absl::OkStatus();
}

absl::Status ModelSpec::Validate() const {
  if (tensors.empty() && tables.empty()) return absl::InvalidArgumentError("model has no tensors and no tables");
  std::set<std::string> names;
  for (const TensorSpec& t : tensors) {
    absl::Status s = t.Validate();
    if (!s.ok()) return s;
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
  }
  std::set<std::string> all_names = names;
  for (const TableSpec& t : tables) {
    if (absl::Status s = t.Validate(); !s.ok()) return s;
    if (!all_names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate name '", t.name, "' (tensors and tables)"));
    }
  }
  absl::Status s = optimizer.Validate();
  if (!s.ok()) return s;
  s = ValidateConsistency(consistency);
  if (!s.ok()) return s;
  PS_RETURN_IF_ERROR(ValidateCompression(compression, "the model", false));
  if (s = ValidateStages(*this); !s.ok()) return s;
  return ValidatePlacement(placement, names);
}

CompressionSpec ModelSpec::TensorCompression(size_t t) const {
  const TensorSpec& spec = tensors[t];
  if (spec.buffer || static_cast<uint64_t>(spec.NumElements()) * sizeof(float) < compress_min_bytes) return {};
  return spec.compression.has_value() ? *spec.compression : compression;
}

CompressionSpec ModelSpec::TableCompression(size_t t) const {
  if (tables[t].compression.has_value()) return *tables[t].compression;
  const CompressionKind rows = DefaultPull(compression.pull);  // a delta pull's rows: its 16-bit default
  return CompressionSpec{.kind = rows, .pull = rows, .raw_ids = compression.raw_ids};
}

absl::Status ModelSpec::ValidateFor(int num_workers) const {
  if (absl::Status s = Validate(); !s.ok()) return s;
  if (num_workers % stages != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a model of ", stages, " pipeline stages needs a multiple of ",
                                                   stages, " workers (replica groups of ", stages,
                                                   " stages); the job has ", num_workers));
  }
  return absl::OkStatus();
}

}  // namespace ps
