#ifndef PS_COMMON_MODEL_MODEL_SPEC_H_
#define PS_COMMON_MODEL_MODEL_SPEC_H_

// The description of a model that workers register with the job: its tensors,
// how they are initialised, the update rule the servers apply and the
// consistency model. Plain value types; not thread-safe, copy freely.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/compress/compressor.h"

namespace ps {

// kServing: a serving replica (ps_serve), a CURVE server of its own that
// talks to no scheduler; never sent on the wire.
enum class Role : uint8_t { kScheduler = 0, kServer = 1, kWorker = 2, kServing = 3 };
const char* RoleName(Role role);

enum class InitKind : uint8_t {
  kZeros = 0,     // every element 0
  kConstant = 1,  // every element `a`
  kUniform = 2,   // uniform in [a, b)
  kNormal = 3,    // normal with mean a, standard deviation b
  kHe = 4,        // normal with mean 0, sd sqrt(2 / fan_in), fan_in = shape[0]
};

// Values depend only on (kind, a, b, seed, tensor name, element index), never
// on how the tensor is sliced or placed: the same model initialises the same
// on one server or on eight.
struct Initializer {
  InitKind kind = InitKind::kZeros;
  float a = 0.0f;
  float b = 0.0f;
  uint64_t seed = 0;

  static Initializer Zeros() { return {}; }
  static Initializer Constant(float value) { return {InitKind::kConstant, value, 0, 0}; }
  static Initializer Uniform(float lo, float hi, uint64_t seed) { return {InitKind::kUniform, lo, hi, seed}; }
  static Initializer Normal(float mean, float stddev, uint64_t seed) { return {InitKind::kNormal, mean, stddev, seed}; }
  static Initializer He(uint64_t seed) { return {InitKind::kHe, 0, 0, seed}; }
  bool operator==(const Initializer&) const = default;
};

// A dense float32 tensor. For matrices, shape is {fan_in, fan_out}, row-major.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  Initializer init;
  // The pipeline stage whose workers hold it (ModelSpec::stages > 1): worker
  // w holds stage w % stages.
  int32_t stage = 0;
  // A buffer, not a parameter (BatchNorm's running statistics): the
  // optimizer never touches it and gradients pushed to it are refused; it
  // is set with KVClient::Assign, and pulls of it wait for no step.
  bool buffer = false;
  // How this tensor travels (common/compress/compressor.h); empty: the model's.
  std::optional<CompressionSpec> compression;

  int64_t NumElements() const;
  // kInvalidArgument naming the tensor: empty name, empty or non-positive shape,
  // more than 2^40 elements, a bad initializer (uniform with a >= b, sd < 0).
  absl::Status Validate() const;
  bool operator==(const TensorSpec&) const = default;
};

enum class OptimizerKind : uint8_t { kSgd = 0, kMomentum = 1, kAdam = 2, kAdagrad = 3, kFtrl = 4 };
const char* OptimizerName(OptimizerKind kind);
absl::StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name);

enum class LrSchedule : uint8_t {
  kConstant = 0,  // learning_rate throughout
  kCosine = 1,    // cosine from learning_rate down to min_lr_ratio * learning_rate
                  // over decay_steps updates of a slice, then flat
};
absl::StatusOr<LrSchedule> ParseLrSchedule(std::string_view name);

// Hyper-parameters of the update rule the servers apply. Fields an optimizer
// does not use are ignored by it.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = 0.01f;
  float momentum = 0.9f;      // momentum
  bool nesterov = false;      // momentum
  float beta1 = 0.9f;         // adam
  float beta2 = 0.999f;       // adam
  float epsilon = 1e-8f;      // adam, adagrad
  float weight_decay = 0.0f;  // all: L2 term added to the gradient
  LrSchedule lr_schedule = LrSchedule::kConstant;
  uint64_t decay_steps = 0;   // cosine: updates over which the rate decays (> 0)
  float min_lr_ratio = 0.0f;  // cosine: final rate as a fraction of learning_rate
  // FTRL-proximal (McMahan et al. 2013), per coordinate: learning_rate is
  // alpha; l1 and l2 the regularisation strengths; ftrl_beta the beta of the
  // per-coordinate rate alpha / (beta + sqrt(n)). Meant for the linear
  // (wide) part of a model: tables of dim 1, where l1 keeps most weights 0.
  float l1 = 0.0f;
  float l2 = 0.0f;
  float ftrl_beta = 1.0f;

  // The learning rate for the update that follows `step` earlier updates.
  float LearningRateAt(uint64_t step) const;

  // kInvalidArgument naming the field: lr <= 0 or not finite, momentum or
  // betas outside [0, 1), epsilon <= 0, weight_decay < 0, a cosine schedule
  // with decay_steps 0 or min_lr_ratio outside [0, 1], l1, l2 or ftrl_beta
  // negative or not finite.
  absl::Status Validate() const;
  bool operator==(const OptimizerConfig&) const = default;
};

enum class ConsistencyMode : uint8_t { kSync = 0, kAsync = 1, kSsp = 2 };

struct Consistency {
  ConsistencyMode mode = ConsistencyMode::kSync;
  int32_t staleness = 0;  // K for ssp:K

  // Parses "sync", "async" or "ssp:K" with 0 <= K <= 1000000.
  static absl::StatusOr<Consistency> Parse(std::string_view text);
  std::string ToString() const;
  bool operator==(const Consistency&) const = default;
};

enum class PlacementRule : uint8_t {
  kAuto = 0,   // slices of at most slice_bytes spread to balance bytes
  kLayer = 1,  // each layer (name up to its last '.') whole on one server, round-robin
};

struct PlacementSpec {
  PlacementRule rule = PlacementRule::kAuto;
  uint64_t slice_bytes = 1 << 20;
  // Tensor name -> server rank. Overrides the rule for these tensors, which
  // then live whole on that server.
  std::map<std::string, int32_t> explicit_ranks;
  // Shards of each table: a row lives in shard TableRowShard(table, id,
  // shards), and a shard moves whole between servers when servers join or
  // leave, so that a change of S moves about 1/S of the rows. 0: one shard
  // per server (the layout of jobs and checkpoints before this field, which
  // no change of S can move). Otherwise in [1, kMaxTableShards].
  uint32_t table_shards = 0;

  bool operator==(const PlacementSpec&) const = default;
};

// An embedding table: rows of `dim` floats by any uint64 id. No size is
// declared: a row is created on its first pull (or once its id has been
// pulled admit_after times) and may be evicted when the server's memory
// budget is reached. Rows are hash-sharded over every server
// (TableRowShard in common/placement/partition_map.h).
struct TableSpec {
  std::string name;
  int32_t dim = 0;
  // Element j of row `id` depends only on (init, name, id, j): the same id
  // starts from the same row on any server, after any restart. kHe takes
  // fan_in = dim.
  Initializer init;
  // The update rule of this table's rows; empty: the model's. Applied per
  // row, with a per-row step count (Adam is lazy: a row's moments and bias
  // correction advance only when the row is pushed).
  std::optional<OptimizerConfig> optimizer;
  // 0 or 1: a row is created on its first pull. N > 1: only once its id has
  // been pulled N times (counted in a count-min sketch); until then it reads
  // as its initial value and its gradients are dropped.
  uint32_t admit_after = 0;
  // The table's own consistency mode; empty: the model's. Dense layers in
  // sync with tables in async is PERSIA's hybrid: a sync step of the dense
  // slices waits for every worker, the table's shards apply each push as it
  // comes and their pulls wait for nothing.
  std::optional<Consistency> consistency;
  // N > 0: a row untouched (neither pulled nor pushed) for N updates of its
  // shard (sync: steps; async and ssp: pushes, one per worker and step) is
  // dropped, Monolith's expirable embeddings: counted in TableStatsMsg's
  // expired, read afterwards as a new row. 0: rows are kept.
  uint64_t expire_after_steps = 0;
  // How this table's rows travel, pushed and pulled: float32, or fp16 or
  // bf16 (16-bit rows both ways; ids as they are); empty: the model's
  // where that is 16-bit (a sparse kind's pulls), else float32.
  std::optional<CompressionSpec> compression;

  // kInvalidArgument naming the table: empty name, dim outside [1, 65536],
  // a bad initializer, optimizer or consistency, a compression other than
  // none, fp16 or bf16 (pushes and pulls alike).
  absl::Status Validate() const;
  bool operator==(const TableSpec&) const = default;
};

inline constexpr int32_t kMaxTableDim = 65536;
inline constexpr uint32_t kMaxTableShards = 4096;

// Everything the servers need to hold a model.
struct ModelSpec {
  std::vector<TensorSpec> tensors;
  std::vector<TableSpec> tables;
  OptimizerConfig optimizer;
  Consistency consistency;
  PlacementSpec placement;
  // Model parallelism: the W workers form W / stages replica
  // groups of `stages` pipeline stages; worker w is stage w % stages of group
  // w / stages and pushes only the tensors of its stage, so a sync step of a
  // slice completes with the pushes of the live workers holding it.
  int32_t stages = 1;
  // How tensors travel unless their own spec says (common/compress/compressor.h):
  // pushed gradients compressed by the worker, pulled parameters by the
  // server; tensors of fewer bytes than compress_min_bytes, buffers and
  // assigns always go as float32. Tables take their own.
  CompressionSpec compression;
  uint64_t compress_min_bytes = 64 << 10;

  // kInvalidArgument: neither tensors nor tables, duplicate names (tensors
  // and tables share one namespace), a bad tensor, table, optimizer or
  // placement (an explicit rank for an unknown tensor, slice_bytes < 4),
  // stages outside [1, 4096], a tensor's stage outside [0, stages), a stage
  // holding no tensor, or tables with stages > 1.
  absl::Status Validate() const;
  // Validate, and kInvalidArgument when `num_workers` is not a multiple of
  // stages (every replica group needs every stage).
  absl::Status ValidateFor(int num_workers) const;
  bool operator==(const ModelSpec&) const = default;
  // The optimizer of table `t`'s rows.
  const OptimizerConfig& TableOptimizer(size_t t) const {
    return tables[t].optimizer.has_value() ? *tables[t].optimizer : optimizer;
  }
  // The stage of worker `worker`'s rank.
  int StageOf(int worker) const { return worker % stages; }
  // How tensor `t` travels: its own compression or the model's, none for a
  // buffer or a tensor under compress_min_bytes.
  CompressionSpec TensorCompression(size_t t) const;
  // How table `t`'s rows travel: kind and pull none, fp16 or bf16.
  CompressionSpec TableCompression(size_t t) const;
  // The consistency mode of table `t`'s shards.
  const Consistency& TableConsistency(size_t t) const {
    return tables[t].consistency.has_value() ? *tables[t].consistency : consistency;
  }
  // The consistency mode a slice follows (a table shard of table `index`,
  // or a dense slice): its table's, or the model's.
  const Consistency& ConsistencyOf(bool table, size_t index) const {
    return table ? TableConsistency(index) : consistency;
  }
};

}  // namespace ps

#endif  // PS_COMMON_MODEL_MODEL_SPEC_H_
