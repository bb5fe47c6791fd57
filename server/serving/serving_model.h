#ifndef PS_SERVER_SERVING_SERVING_MODEL_H_
#define PS_SERVER_SERVING_SERVING_MODEL_H_

// The read-only model a serving replica (ps_serve) answers lookups from:
// every dense tensor by name and shape, every table as its rows by id.
//
// Loaded from a job's checkpoint directory (DIR/server-<r>.ckpt, read as
// ps_export reads it: one step everywhere for a sync model) or from an
// exported model file (.npz or .safetensors, as ps_export writes it:
// "<table>.ids" with "<table>.rows", every other array a tensor). From
// checkpoints the model spec comes along, so an id a table has never seen
// reads as the table's initial row (common/model/initializer.h); a model
// file holds no initializers, and such an id reads as zeros. Either way the
// answer's mask says which ids were found.
//
// Thread-safe: any number of readers at once; every read is of one version.

#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"

namespace ps {

// What the model is of: the training step it reflects, when it came, and
// whether it is exactly the training model after that step (a sync job's
// checkpoints; an async job's servers each stand where they stood).
struct ServingVersion {
  uint64_t step = 0;
  absl::Time synced_at = absl::UnixEpoch();
  bool exact = false;
  std::string source;  // the directory or file it came from
};

class ServingModel {
 public:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  struct Table {
    uint32_t dim = 0;
    std::optional<TableSpec> spec;                  // its initializer, when the source has it
    absl::flat_hash_map<uint64_t, uint32_t> index;  // id -> row
    std::vector<float> rows;                        // index.size() x dim
    std::vector<uint64_t> ids;                      // per row its id (the constructor fills it)
  };

  // From a checkpoint directory or a model file, as the path is. Errors:
  // ps_export's for checkpoints (kNotFound for a directory without any,
  // kFailedPrecondition for checkpoints of different jobs or steps,
  // kDataLoss for a corrupt one); ModelFileReader's for a file; kDataLoss
  // naming the file and table for "<t>.ids" without "<t>.rows" (or with rows
  // of another count), ids that repeat, or a tensor not float32.
  static absl::StatusOr<std::unique_ptr<ServingModel>> Load(const std::string& from);
  // Built directly (tests, benchmarks).
  ServingModel(absl::flat_hash_map<std::string, Tensor> tensors, absl::flat_hash_map<std::string, Table> tables,
               ServingVersion version);

  // Rows of `table` for `ids` into out (ids.size() x dim) and found (1 per
  // id the table holds). kNotFound naming the table (and those there are).
  // out and found must be sized by the caller: TableDim first.
  absl::Status Lookup(absl::string_view table, absl::Span<const uint64_t> ids, absl::Span<float> out,
                      absl::Span<uint8_t> found) const;
  // The table's row width; kNotFound as Lookup.
  absl::StatusOr<uint32_t> TableDim(absl::string_view table) const;
  // A copy of tensor `name`; kNotFound naming it (and those there are).
  absl::StatusOr<Tensor> Dense(absl::string_view name) const;
  ServingVersion version() const;
  // What is served: the version, the tensors' names and the tables' names
  // with their dims, each sorted by name.
  struct Contents {
    ServingVersion version;
    std::vector<std::string> tensors;
    std::vector<std::pair<std::string, uint32_t>> tables;
  };
  Contents Describe() const;

  // One round from a training job (server/serving/serving_follower.h),
  // applied whole under one lock: a reader sees the model before it or
  // after it, never part of it.
  struct Update {
    ServingVersion version;
    // Set: the model is rebuilt from it first (every tensor zeros of its
    // shape, every table empty), as a job's first round replaces what was
    // loaded; its parts then cover the whole model.
    std::optional<ModelSpec> reset;
    struct DenseValues {
      std::string tensor;
      uint64_t offset = 0;  // the first element
      std::vector<float> values;
    };
    struct TableRows {
      std::string table;
      std::vector<uint64_t> ids;
      std::vector<float> rows;  // ids.size() x dim
      std::vector<uint64_t> removed;
      // shards > 0: the rows are all shard `shard` of `shards` holds
      // (TableRowShard): the others of that shard go.
      int shard = 0, shards = 0;
    };
    std::vector<DenseValues> dense;
    std::vector<TableRows> tables;
  };
  // kInvalidArgument naming the part for an unknown tensor or table, values
  // beyond the tensor, rows not ids x dim; nothing is applied then.
  absl::Status Apply(Update update);

 private:
  absl::Status Check(const Update& update) const;
  static void ApplyRows(Table& table, const std::string& name, Update::TableRows& part);

  absl::Status UnknownTable(absl::string_view table) const;

  mutable std::shared_mutex mu_;
  absl::flat_hash_map<std::string, Tensor> tensors_;
  absl::flat_hash_map<std::string, Table> tables_;
  ServingVersion version_;
};

}  // namespace ps

#endif  // PS_SERVER_SERVING_SERVING_MODEL_H_
