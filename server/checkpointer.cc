#include "server/checkpointer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace ps {

Checkpointer::Checkpointer(Options options, const SliceStore* store, PushSequencer* seqs, ServerMetrics* metrics,
                           const Clock* clock)
    : options_(std::move(options)), store_(store), seqs_(seqs), metrics_(metrics), clock_(clock) {}

absl::StatusOr<CheckpointInfo> Checkpointer::Restore(const std::string& dir, int rank, SliceStore* store) {
  const absl::Time t0 = clock_->Now();
  absl::StatusOr<CheckpointInfo> info = LoadCheckpoint(dir, rank, store);
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
  return info;
}

void Checkpointer::MaybeWrite(int rank, uint64_t incarnation) {
  if (!enabled() || !store_->has_model() || pushes_since_ == 0) return;
  const bool by_count = options_.every_pushes > 0 && pushes_since_ >= options_.every_pushes;
  const bool by_time = options_.every > absl::ZeroDuration() && clock_->Now() - last_ >= options_.every;
  if (wanted_) {
    Write("a worker's replay buffer is large", rank, incarnation);
  } else if (by_count) {
    Write("push count", rank, incarnation);
  } else if (by_time) {
    Write("interval", rank, incarnation);
  }
}

void Checkpointer::Write(const char* why, int rank, uint64_t incarnation) {
  const absl::Time t0 = clock_->Now();
  CheckpointInfo info;
  info.server_rank = rank;
  info.number = written_ + 1;
  info.unix_ms = absl::ToUnixMillis(t0);
  info.incarnation = incarnation;
  info.seqs = seqs_->Snapshot();
  uint64_t bytes = 0;
  if (absl::Status s = WriteCheckpoint(options_.dir, info, *store_, &bytes, options_.between); !s.ok()) {
    // Serving goes on; the workers keep their copies until a checkpoint works.
    LOG(ERROR) << "server " << rank << ": checkpoint " << info.number << " (" << why << ") failed: " << s;
    last_ = t0;  // retried at the next interval, not at once
    wanted_ = false;
    metrics_->ObserveCheckpoint(clock_->Now() - t0, false);
    return;
  }
  written_ = info.number;
  seqs_->MarkDurable();
  pushes_since_ = 0;
  wanted_ = false;
  last_ = clock_->Now();
  metrics_->ObserveCheckpoint(last_ - t0, true);
  LOG(INFO) << "server " << rank << ": checkpoint " << info.number << " (" << why << "): " << bytes << " bytes in "
            << absl::FormatDuration(last_ - t0);
}

}  // namespace ps
