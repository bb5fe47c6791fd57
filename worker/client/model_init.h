#ifndef PS_WORKER_CLIENT_MODEL_INIT_H_
#define PS_WORKER_CLIENT_MODEL_INIT_H_

// A job that starts from a model file (.npz or .safetensors, as ps_export
// writes them: every tensor under its name, each table as "<table>.ids" and
// "<table>.rows"): the servers take the file's values before any worker's
// first pull. What ps_worker --init_from does.

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/client/kv_client.h"

namespace ps {

// Checks `path` against `model` (before a job is joined, or the registered
// model's, client.model()) without sending anything:
// every tensor present, float32, with the tensor's shape (a tensor of one
// element may be a scalar); tables optional, but ids (uint64 or int64, one
// dimension) and rows (float32, ids x dim) together; no array the model
// lacks; then every array is read through (an .npz entry's checksum is
// checked). kInvalidArgument naming the file and every array at fault; the
// model file's errors (kNotFound, kDataLoss for a corrupt or truncated
// file) otherwise.
absl::Status CheckModelFile(const ModelSpec& model, const std::string& path);

// In a new job (ResumeStep() == 0), every worker calls it once after
// RegisterModel: each checks the file (CheckModelFile), rank 0 then sets
// the servers' tensors and rows to it (KVClient::Assign, tables in pieces),
// and all wait at a barrier for that, up to `timeout`. A worker that
// resumes (a restarted worker or job) does nothing: the servers hold the
// trained values. Errors: CheckModelFile's (before anything is sent), the
// client's.
absl::Status StartFromModelFile(KVClient& client, const std::string& path, absl::Duration timeout);

}  // namespace ps

#endif  // PS_WORKER_CLIENT_MODEL_INIT_H_
