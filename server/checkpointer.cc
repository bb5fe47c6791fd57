#include "server/checkpointer.h"

#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/events.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"
#include "server/disk/table_disk.h"

namespace ps {

Checkpointer::Checkpointer(Options options, const SliceStore* store, PushSequencer* seqs, ServerMetrics* metrics,
                           const Clock* clock)
    : options_(std::move(options)), store_(store), seqs_(seqs), metrics_(metrics), clock_(clock) {}

absl::StatusOr<CheckpointInfo> Checkpointer::Restore(const std::string& dir, int rank, SliceStore* store) {
  const absl::Time t0 = clock_->Now();
  absl::StatusOr<CheckpointInfo> info = LoadCheckpoint(dir, rank, store);
  if (info.ok()) info = RestoreTableDisk(dir, *std::move(info), store);
  if (!info.ok()) {
    return absl::Status(info.status().code(),
                        absl::StrCat("cannot restore server ", rank, ": ", info.status().message()));
  }
  written_ = info->number;
  seqs_->Restore(info->seqs);
  last_ = clock_->Now();
  LOG(INFO) << "server " << rank << ": restored checkpoint " << info->number << " written at "
            << absl::FormatTime(absl::FromUnixMillis(info->unix_ms), absl::LocalTimeZone()) << " ("
            << store->stats().slices_held << " slices, " << store->stats().pushes_applied << " pushes applied) in "
            << absl::FormatDuration(last_ - t0);
  EmitEvent("checkpoint_restored", JsonLine()
                                       .Add("rank", rank)
                                       .Add("number", info->number)
                                       .Add("slices", store->stats().slices_held)
                                       .Add("pushes_applied", store->stats().pushes_applied));
  return info;
}

absl::StatusOr<CheckpointInfo> Checkpointer::RestoreTableDisk(const std::string& dir, CheckpointInfo info,
                                                              SliceStore* store) {
  TableDisk* disk = store->table_disk();
  if (disk == nullptr) return info;  // the shards refused disk rows already
  const std::string snapshot = TableSnapshotPath(dir, info.server_rank, info.number);
  std::error_code ec;
  if (std::filesystem::exists(snapshot, ec)) {
    std::vector<TableDisk::Rename> renames = store->DiskLogRenames();
    PS_RETURN_IF_ERROR(disk->RestoreFrom(snapshot, &renames));
    store->OwnDiskLogs(renames);
  } else if (store->DiskRows() > 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", info.number, " keeps ", store->DiskRows(),
                                            " table rows on disk, but their snapshot ", snapshot, " is missing"));
  } else {
    PS_RETURN_IF_ERROR(disk->RestoreFrom(""));
  }
  return info;
}

absl::Status Checkpointer::SnapshotTableDisk(const CheckpointInfo& info) {
  TableDisk* disk = store_->table_disk();
  if (disk == nullptr) return absl::OkStatus();
  const std::string snapshot = TableSnapshotPath(options_.dir, info.server_rank, info.number);
  std::error_code ec;
  std::filesystem::remove_all(snapshot, ec);  // a failed try's
  std::filesystem::create_directories(std::filesystem::path(snapshot).parent_path(), ec);
  return disk->Snapshot(snapshot);
}

void Checkpointer::DropTableSnapshots(const CheckpointInfo& info, bool written) {
  if (store_->table_disk() == nullptr) return;
  // Only the snapshot of the checkpoint on disk is needed: after a write,
  // the new one; after a failed one, the one before.
  const std::string keep = TableSnapshotPath(options_.dir, info.server_rank, written ? info.number : written_);
  const std::filesystem::path parent = std::filesystem::path(keep).parent_path();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    if (e.path() != keep) std::filesystem::remove_all(e.path(), ec);
  }
}

void Checkpointer::MaybeWrite(int rank, uint64_t incarnation) {
  if (!Finish(/*wait=*/false)) return;
  if (!enabled() || !store_->has_model() || pushes_since_ == 0) return;
  const absl::Time now = clock_->Now();
  const bool by_count = options_.every_pushes > 0 && pushes_since_ >= options_.every_pushes;
  const bool by_time = options_.every > absl::ZeroDuration() && now - last_ >= options_.every;
  if (wanted_ && now - last_ >= kWantedGap * took_) {
    Start("a worker's replay buffer is large", rank, incarnation);
  } else if (by_count) {
    Start("push count", rank, incarnation);
  } else if (by_time) {
    Start("interval", rank, incarnation);
  }
}

void Checkpointer::Remove(int rank) {
  const std::string path = CheckpointPath(options_.dir, rank);
  std::error_code error;
  std::filesystem::remove(path, error);
  if (error) {
    LOG(ERROR) << "server " << rank << ": could not remove " << path << ": " << error.message();
    return;
  }
  LOG(INFO) << "server " << rank << ": removed " << path << " (its slices live on the other servers)";
}

struct Checkpointer::InFlight {
  const char* why;
  CheckpointInfo info;
  uint64_t pushes = 0;  // counted since the one before
  absl::Time t0;
  absl::Duration encoding;
  // The writer's, read once `done` is.
  absl::Status status;
  uint64_t bytes = 0;
  absl::Notification done;
  std::thread writer;
};

Checkpointer::~Checkpointer() { Flush(); }

void Checkpointer::Write(const char* why, int rank, uint64_t incarnation) {
  Flush();
  Start(why, rank, incarnation);
  Flush();
}

void Checkpointer::Start(const char* why, int rank, uint64_t incarnation) {
  auto w = std::make_unique<InFlight>();
  w->why = why;
  w->t0 = clock_->Now();
  w->info.server_rank = rank;
  w->info.number = written_ + 1;
  w->info.unix_ms = absl::ToUnixMillis(w->t0);
  w->info.incarnation = incarnation;
  w->info.seqs = seqs_->Snapshot();
  w->pushes = std::exchange(pushes_since_, 0);
  wanted_ = false;
  const absl::Status snapshot = SnapshotTableDisk(w->info);
  absl::StatusOr<EncodedCheckpoint> encoded =
      snapshot.ok() ? EncodeCheckpoint(w->info, *store_, options_.between) : snapshot;
  w->encoding = clock_->Now() - w->t0;
  if (!encoded.ok()) {
    w->status = encoded.status();
    w->done.Notify();
  } else {
    w->writer = std::thread([w = w.get(), dir = options_.dir, file = *std::move(encoded)] {
      w->status = WriteEncodedCheckpoint(dir, file, &w->bytes);
      w->done.Notify();
    });
  }
  in_flight_ = std::move(w);
}

bool Checkpointer::Finish(bool wait) {
  if (in_flight_ == nullptr) return true;
  InFlight& w = *in_flight_;
  if (!wait && !w.done.HasBeenNotified()) return false;
  w.done.WaitForNotification();
  if (w.writer.joinable()) w.writer.join();
  const std::unique_ptr<InFlight> ended = std::move(in_flight_);
  DropTableSnapshots(w.info, w.status.ok());
  const int rank = w.info.server_rank;
  if (!w.status.ok()) {
    // Serving goes on; the workers keep their copies until a checkpoint works.
    LOG(ERROR) << "server " << rank << ": checkpoint " << w.info.number << " (" << w.why << ") failed: " << w.status;
    EmitEvent(
        "checkpoint_failed",
        JsonLine().Add("rank", rank).Add("number", w.info.number).Add("why", w.why).Add("error", w.status.ToString()));
    pushes_since_ += w.pushes;
    last_ = w.t0;  // retried at the next interval, not at once
    metrics_->ObserveCheckpoint(clock_->Now() - w.t0, false);
    return true;
  }
  written_ = w.info.number;
  seqs_->MarkDurable(w.info.seqs);
  last_ = clock_->Now();
  took_ = last_ - w.t0;
  metrics_->ObserveCheckpoint(took_, true);
  LOG(INFO) << "server " << rank << ": checkpoint " << w.info.number << " (" << w.why << "): " << w.bytes
            << " bytes in " << absl::FormatDuration(last_ - w.t0) << " (" << absl::FormatDuration(w.encoding)
            << " of it encoding)";
  EmitEvent("checkpoint",
            JsonLine().Add("rank", rank).Add("number", w.info.number).Add("why", w.why).Add("bytes", w.bytes));
  return true;
}

}  // namespace ps
