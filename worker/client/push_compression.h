#ifndef PS_WORKER_CLIENT_PUSH_COMPRESSION_H_
#define PS_WORKER_CLIENT_PUSH_COMPRESSION_H_

// The worker's half of compression (common/compress/compressor.h): per
// dense slice of a tensor that compresses (ModelSpec::TensorCompression),
// its compressor and, for topk, randomk and onebit, the error feedback's
// residual (what earlier frames left out, added to the next gradient: the
// worker keeps one float per element of such tensors), and the ratio by the
// step during a warm-up (",warmup=N"); per table, the
// compressor of its rows. A worker check of exact sums
// (worker/exact_sum) makes one per worker it simulates.
//
// Thread-safe: each slice's residual under its own lock. EncodeAll spreads
// a push's frames over the compression threads (one slice each), so that
// the caller's thread does not compress a large model alone.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/compress/compressor.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "zmq.hpp"

namespace ps {

class PushCompression {
 public:
  // `threads`: compression threads in all, the caller's counted (1: the
  // caller alone); made only where some slice compresses.
  PushCompression(const ModelSpec& model, const PartitionMap& map, int threads = 1);

  // Whether pushes of dense slice `key` travel compressed.
  bool Compresses(uint32_t key) const { return key < slices_.size() && slices_[key] != nullptr; }
  // The frame of slice `key`'s gradient `values` (its length; Compresses(key)),
  // pushed by `worker` at `step` (randomk's seed, CompressionSeed).
  zmq::message_t Encode(uint32_t key, absl::Span<const float> values, int worker, int64_t step);
  // One slice's gradient to encode.
  struct Job {
    uint32_t key;
    absl::Span<const float> values;
  };
  // Encode(job.key, job.values, worker, step) for each job, in parallel over
  // the compression threads (on the calling thread alone while another
  // caller's push holds them); the frames in the jobs' order.
  std::vector<zmq::message_t> EncodeAll(absl::Span<const Job> jobs, int worker, int64_t step);
  // The compressor of table `table`'s pushed rows; null: float32 rows.
  const Compressor* Rows(int table) const { return rows_[table].get(); }
  // Whether table `table`'s rows travel compressed (either way) and its ids
  // sorted, to be delta coded where that is shorter (common/wire/id_coding.h).
  bool SortsIds(int table) const { return sorts_ids_[table]; }

 private:
  struct SliceState {
    // One per warm-up stage and the last for after it (CompressionSpec::warmup;
    // without one, every step is past it).
    std::vector<std::unique_ptr<Compressor>> stages;
    CompressionSpec spec;
    absl::Mutex mu;
    std::optional<ErrorFeedback> feedback ABSL_GUARDED_BY(mu);  // topk, randomk, onebit
  };
  std::vector<std::unique_ptr<SliceState>> slices_;  // per slice key; null: float32
  std::vector<std::unique_ptr<Compressor>> rows_;    // per table
  std::vector<bool> sorts_ids_;                      // per table
  std::unique_ptr<ThreadPool> pool_;                 // null: the caller alone
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_PUSH_COMPRESSION_H_
