#ifndef PS_SERVER_EXPORT_EXPORTER_H_
#define PS_SERVER_EXPORT_EXPORTER_H_

// The trained model out of a job's checkpoints, into a file numpy and
// PyTorch read (common/model_file): every tensor under its model name and
// shape (float32), each table as two arrays, "<table>.ids" (uint64, rows in
// no particular order) and "<table>.rows" (float32, ids x dim). The format
// follows the output's extension, .npz or .safetensors.
//
// Memory: the checkpoints are read in place (server/export/
// checkpoint_scan.h) and written through the model file's buffer, a few MiB
// whatever the model's size.
//
// Consistency: a sync job's checkpoints hold one step across every server
// only when taken at the same step (the final ones, written as the servers
// stop, are); a directory whose servers stand at different steps is refused
// for a sync model. An async or ssp job's servers hold whatever each had
// applied when it wrote its checkpoint: the export holds each server's
// state, said in the summary (steps per server).
//
// Thread-safe (no shared state).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_spec.h"
#include "common/model_file/array_spec.h"

namespace ps {

struct ExportSummary {
  ModelSpec model;
  int servers = 0;
  uint64_t tensors = 0;
  uint64_t table_rows = 0;
  uint64_t bytes = 0;           // of the arrays written
  std::vector<uint64_t> steps;  // per server rank: the highest slice version it holds
};

// Exports DIR/server-<r>.ckpt for every rank r of the job to `out`. Errors:
// kNotFound when DIR holds no checkpoint; kFailedPrecondition naming the
// problem for checkpoints of different jobs (another job incarnation, model
// or worker count), a server's checkpoint missing (a tensor or table not
// covered), or a sync model whose servers stand at different steps; the
// scan's and the writer's errors (kDataLoss for a corrupt checkpoint,
// kInvalidArgument for an output of another extension), each naming the
// file. The output is written whole or not at all.
absl::StatusOr<ExportSummary> ExportCheckpoints(const std::string& checkpoint_dir, const std::string& out);

// The same export into memory (a serving replica started from checkpoints):
// arrays as ExportCheckpoints names them, bytes[i] those of arrays[i].
// Memory: the whole model. Errors as ExportCheckpoints', the writer's aside.
struct ExportedArrays {
  ExportSummary summary;
  std::vector<ArraySpec> arrays;
  std::vector<std::string> bytes;
};
absl::StatusOr<ExportedArrays> ExportCheckpointsToMemory(const std::string& checkpoint_dir);

}  // namespace ps

#endif  // PS_SERVER_EXPORT_EXPORTER_H_
