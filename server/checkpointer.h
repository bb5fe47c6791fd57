#ifndef PS_SERVER_CHECKPOINTER_H_
#define PS_SERVER_CHECKPOINTER_H_

// When a server's state goes to disk and what that involves
// (server/store/checkpoint.h is the file itself): after `every_pushes` applied
// pushes, every `every`, or when a worker asks (its replay buffer is large);
// each write snapshots the push sequencer and, once written, marks those
// numbers durable (workers may drop their copies), counted in the server's
// metrics. A write that fails leaves serving alone and is retried at the
// next interval. Restore is the way back.
//
// The writes MaybeWrite starts go to disk on a thread of their own: the
// loop encodes the state (it reads the store) and serves on while the file
// is written and synced; a later MaybeWrite finishes it. One at a time.
//
// Not thread-safe: the server's loop owns it, as it owns the store.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "server/push_sequencer.h"
#include "server/server_metrics.h"
#include "server/store/checkpoint.h"
#include "server/store/slice_store.h"

namespace ps {

class Checkpointer {
 public:
  struct Options {
    std::string dir;                              // empty: no checkpoints
    uint64_t every_pushes = 0;                    // 0: not by count
    absl::Duration every = absl::ZeroDuration();  // 0: not by time
    // Runs now and then during a write (after each slice, 64K table rows or
    // 64 MiB written), so that the server's heartbeats go on while a large
    // state goes to disk.
    std::function<void()> between = [] {};
  };
  // Borrows `store`, `seqs`, `metrics` and `clock` for its lifetime.
  Checkpointer(Options options, const SliceStore* store, PushSequencer* seqs, ServerMetrics* metrics,
               const Clock* clock);
  ~Checkpointer();  // waits for a write in flight
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  bool enabled() const { return !options_.dir.empty(); }
  // Pushes applied since the last checkpoint.
  bool has_unsaved() const { return pushes_since_ > 0; }
  void CountPush() { ++pushes_since_; }
  // A worker asked for a checkpoint: a MaybeWrite starts one, once the time
  // since the last one ended is at least kWantedGap times what that one took
  // (encoding and writing), so that the writes asked for keep to about a
  // ninth of the time: the workers keep their pushes meanwhile (without
  // copying them), trading memory for the server's time.
  void Want() { wanted_ = true; }
  static constexpr int kWantedGap = 8;

  // Loads DIR/server-<rank>.ckpt into the store (which holds no model) and
  // the sequencer, and counts on from its number; LoadCheckpoint's errors,
  // naming the server.
  absl::StatusOr<CheckpointInfo> Restore(const std::string& dir, int rank, SliceStore* store);
  // Finishes a write whose file is on disk; starts one when it is due (and
  // the store has a model), to finish in the background.
  void MaybeWrite(int rank, uint64_t incarnation);
  // Waits for the write in flight, if any, and finishes it.
  void Flush() { Finish(/*wait=*/true); }
  // Writes one now, saying `why` in the log, and returns once it is on disk
  // (or failed), a write in flight finished first.
  void Write(const char* why, int rank, uint64_t incarnation);
  // Removes rank's checkpoint (a drained server's: the job keeps its slices
  // elsewhere); a failure is logged.
  void Remove(int rank);

 private:
  // The disk tier (SliceStore::table_disk) goes with the checkpoint: a
  // snapshot beside it (TableSnapshotPath) made before the file is written,
  // and the older snapshots dropped once it is; a restore replaces the
  // tier's store with the checkpoint's snapshot. kDataLoss when the
  // checkpoint keeps disk rows and its snapshot is missing.
  absl::StatusOr<CheckpointInfo> RestoreTableDisk(const std::string& dir, CheckpointInfo info, SliceStore* store);
  absl::Status SnapshotTableDisk(const CheckpointInfo& info);
  void DropTableSnapshots(const CheckpointInfo& info, bool written);

  // A checkpoint on its way to disk.
  struct InFlight;
  // Encodes one (on the loop) and hands its file to a writer thread.
  void Start(const char* why, int rank, uint64_t incarnation);
  // Ends the write in flight: waits for its file when `wait`, else only if
  // it is written already. Returns whether none is in flight now.
  bool Finish(bool wait);

  const Options options_;
  const SliceStore* const store_;
  PushSequencer* const seqs_;
  ServerMetrics* const metrics_;
  const Clock* const clock_;
  uint64_t written_ = 0;  // the number of the last one written (or restored)
  uint64_t pushes_since_ = 0;
  bool wanted_ = false;
  // The last write or restore; none yet counts as long ago, so that the
  // first interval's checkpoint comes with the first pushes.
  absl::Time last_;
  absl::Duration took_;  // by the last write, encoding and writing
  std::unique_ptr<InFlight> in_flight_;
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINTER_H_
