#ifndef PS_WORKER_TRAIN_TRAIN_EVENT_H_
#define PS_WORKER_TRAIN_TRAIN_EVENT_H_

// The JSON-line events a training worker prints on stdout (ps_worker,
// ps_spam_worker) and scripts/launch_job.py reads: "start", "progress",
// "eval", "done", rank 0's "server_stats", and "span" for a traced step
// (TrainerOptions::trace_steps). Their field names and number
// formats are part of the output. Plain values and free functions:
// thread-safe.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/client/kv_client.h"

namespace ps {

class KVClient;

// One line of a trainer's progress.
struct TrainEvent {
  std::string kind;                                         // "start", "progress", "eval", "done", "server_stats"
  std::vector<std::pair<std::string, std::string>> fields;  // name -> JSON value
  // {"event":KIND,...fields in order}, one line.
  std::string ToJson() const;
};

// Event values, rendered as JSON: a number with at most 6 significant digits
// (null when not finite), a quoted string.
std::string EventNumber(double v);
std::string EventString(absl::string_view s);

// The "server_stats" event of worker `rank` from the statistics of every
// server: pushes and updates applied, the staleness of the updates (mean,
// p99, max, histogram) and the time pulls waited, summed over servers; and,
// when the servers hold embedding tables, their rows, bytes, evictions,
// admissions and rows pulled and pushed, summed over the tables' shards.
TrainEvent ServerStatsEvent(int rank, absl::Span<const ServerStats> servers);

// Asks every server of `client` for its statistics (KVClient::ServerStats),
// then ServerStatsEvent. The client's errors.
absl::StatusOr<TrainEvent> CollectServerStatsEvent(KVClient* client);

// The end of a worker's run: reports `done`, then on rank 0 the servers'
// final statistics (every push is in: the run ended with a barrier), then
// tells the scheduler this worker is done (KVClient::Finish). Events go to
// `on_event` when it is set. The client's errors.
absl::Status FinishRun(KVClient* client, const TrainEvent& done,
                       const std::function<void(const TrainEvent&)>& on_event);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_TRAIN_EVENT_H_
