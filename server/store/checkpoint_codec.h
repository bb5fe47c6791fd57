#ifndef PS_SERVER_STORE_CHECKPOINT_CODEC_H_
#define PS_SERVER_STORE_CHECKPOINT_CODEC_H_

// The body of a checkpoint file, written and read in this one place: the
// checkpoint's info, then the whole state of a SliceStore. The layout is
// documented with the file in server/store/checkpoint.h; checkpoint.cc frames it.
// Internal to server/.
//
// Free functions with no state: thread-safe, but a store must not change
// while EncodeStore reads it or DecodeStore fills it (SliceStore is not
// thread-safe: call from the thread that owns it).

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/checkpoint.h"
#include "server/store/slice_store.h"

namespace ps {

// The store's part of the body; every earlier format is read too. The
// layout is in server/store/checkpoint.h.
inline constexpr uint32_t kStoreFormat = 6;

// The info at the front of a body of format kCheckpointFormat.
std::string EncodeCheckpointInfo(const CheckpointInfo& info);

// Parses the info at the front of *body, a body of checkpoint `format` (1
// has no incarnation: it reads as 0, unknown), and leaves the store's part
// in *body. kDataLoss when the body is too short for it.
absl::StatusOr<CheckpointInfo> DecodeCheckpointInfo(uint32_t format, absl::string_view* body);

// Replaces *out with everything needed to continue exactly where `store`
// is: the model, slice list and num_workers, per slice the values,
// optimizer state, version, optimizer steps, the pending sync step (sum,
// who pushed), the worker clocks, join steps and skip floors
// (SliceStore::SkipStepsAlreadyApplied), the active workers, and the
// push/update/staleness counters (pulls, errors and bytes are the server's
// and are not included). kFailedPrecondition when no model is held.
// `between` runs after each slice and every 64K rows of a table shard.
absl::Status EncodeStore(
    const SliceStore& store, std::string* out, absl::FunctionRef<void()> between = [] {});

// Loads what EncodeStore wrote (store format kStoreFormat, or an earlier
// one of older builds) into `store`, which must hold no model; afterwards Create() with
// the same model, slices and num_workers is the usual no-op. Validates
// everything before changing anything, and leaves the store empty on any
// error:
//   kFailedPrecondition: the store already holds a model;
//   kDataLoss naming the inconsistency: unknown format, truncated data or
//     trailing bytes, a model or slice list that does not decode or
//     validate, a slice that does not fit the model, an optimizer state of
//     the wrong size, counts or clocks out of range, a sync step that
//     should have been applied;
//   kResourceExhausted: the model needs more than the store's max_bytes (the
//     data is fine, this server's budget is not) or memory runs out.
// Never allocates more than `data` holds, whatever its length fields say.
absl::Status DecodeStore(absl::string_view data, SliceStore* store);

// --replicas, a new copy of a slice (or a slice moving to another server):
// `image` is slice `key`'s whole state as EncodeStore writes it, with a
// one-slice list; `disk_rows`, for a table shard with rows on the disk
// tier, every row of its log there (records of u64 id, u64 row steps, u64
// last-seen update, f32 x floats per row; empty otherwise).
struct SliceImage {
  std::string image;
  std::string disk_rows;
};
// kNotFound for a slice this store does not hold; kFailedPrecondition for a
// table shard whose disk rows share their table's log (restored from a
// store of format 4); kDataLoss when the log holds another number of rows
// than the shard counts; the disk tier's error when its log cannot be read.
absl::StatusOr<SliceImage> EncodeSliceImage(const SliceStore& store, uint32_t key);
// Adds the slices of such an image to `store`, which holds the same model
// (SliceStore::AddCopies), replacing a copy it held of any of them, and
// writes `disk_rows` to the store's disk tier first. Errors as
// DecodeStore's (kDataLoss also for a table shard flagged as sharing its
// table's disk log: a copy's rows are in a log of its own), and
// AddCopies'; kInvalidArgument for disk rows of another
// size than the shard's or without a shard that counts them;
// kFailedPrecondition for disk rows and no disk tier here; the disk tier's
// error when a row cannot be written (its rows written so far dropped).
absl::Status AddSliceImage(absl::string_view image, absl::string_view disk_rows, SliceStore* store);

}  // namespace ps

#endif  // PS_SERVER_STORE_CHECKPOINT_CODEC_H_
