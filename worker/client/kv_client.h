#ifndef PS_WORKER_CLIENT_KV_CLIENT_H_
#define PS_WORKER_CLIENT_KV_CLIENT_H_

// ps::KVClient: what a training program uses to talk to the parameter servers.
//
//   auto client = KVClient::Connect({.scheduler = "127.0.0.1:9000"});
//   (*client)->RegisterModel(model);                 // once, the same model on every worker
//   const int w = *(*client)->TensorIndex("fc0.weight");
//   (*client)->Wait((*client)->Pull({{w, weights}}, /*step=*/0));
//   loop: compute gradients into `grad`, then
//     (*client)->Wait((*client)->PushPull({{w, grad}}, {{w, weights}}, step));
//   (*client)->Finish();
//
// Every data call is asynchronous and returns a Ticket at once: Exchange
// (any mix of dense tensors and table rows, pushed and pulled, one round
// trip per server) and its shorthands Push, Pull, PushPull, PushRows and
// PullRows. ExchangeAndWait is the one blocking helper. The requests of a
// call go out together, one per server involved (or a few, see
// max_request_bytes), all in flight at once.
//
// Buffers are the caller's and are never copied on the way out: a pushed
// buffer is sent zero-copy and must stay valid and unchanged, a pulled one
// is written in place and must stay valid, until Wait on the ticket has
// returned. Every request ends by options.request_timeout at the latest (with
// kDeadlineExceeded), so a Wait never blocks longer than that.
//
// A step is a training step: a worker pushes the gradients it computed at
// step t and pulls the parameters of step t + 1 (sync: after every worker's
// step t is applied; ssp:K: once the slowest worker has pushed t - K; async:
// at once).
//
// Thread-safe: every call may be made from any thread, except that
// RegisterModel must return before the first data call.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/clock.h"
#include "common/base/metrics.h"
#include "common/model/model_spec.h"
#include "common/net/security_options.h"
#include "common/placement/partition_map.h"
#include "worker/client/kv_stats.h"

namespace ps {

struct KVClientOptions {
  // The scheduler: "HOST:PORT", "tcp://HOST:PORT" or "ipc://PATH". Required.
  std::string scheduler;
  // How long Connect() waits for the cluster to form (longer than the
  // scheduler's default, so that its error naming who is missing comes first).
  absl::Duration register_timeout = absl::Seconds(90);
  // The longest any one request may take, a sync pull waiting for the other
  // workers included.
  absl::Duration request_timeout = absl::Seconds(60);
  // Slices going to one server travel in requests of at most this many bytes
  // of payload (a single larger slice goes alone), so the server can apply
  // and answer one part of a large tensor while the next is still arriving.
  uint64_t max_request_bytes = 256 << 10;
  // Heartbeats to the scheduler, and how long its silence means it is down.
  // Training goes on without it (the data plane does not need it); requests
  // to the scheduler (barriers, Finish) wait for it, and once it has been
  // down for scheduler_recovery_timeout more, every request fails with
  // kUnavailable. A scheduler restarted with --restore takes the job back:
  // the client re-registers under its node id and re-sends what the old one
  // had not answered. The same two time the servers: while requests are in
  // flight, a server silent for heartbeat_interval is probed, and one its
  // requests wait on that answers nothing for heartbeat_timeout is
  // unreachable (logged, told to the scheduler, which fails it over with
  // replicas; with one copy, dialled again and its requests re-sent).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  absl::Duration scheduler_recovery_timeout = absl::Seconds(60);
  // How long requests to a server the scheduler declared dead wait for a
  // replacement (a server restarted from its checkpoint) before they fail
  // with kUnavailable.
  absl::Duration server_recovery_timeout = absl::Seconds(60);
  // Pushes a server's checkpoint does not hold yet are kept here to be
  // re-sent after a restart; past a quarter of this the worker asks the
  // server for an early checkpoint.
  uint64_t max_replay_bytes = uint64_t{256} << 20;
  // >= 0: rejoin a running job under this worker rank (a restarted worker).
  int rank = -1;
  // Ask each server for a shared-memory channel (common/net/shm_handshake.h)
  // and, where it proves to be on this host, send and receive through it
  // instead of the socket. false: sockets only.
  bool shm = true;
  // Threads that compress a push's gradients, one slice each, the
  // caller's own counted; 0: half the cores, at most 4. Made only where some
  // tensor compresses.
  int compress_threads = 0;
  // With requests in flight on shared memory, the I/O thread looks at its
  // channels this long before it sleeps in poll.
  absl::Duration shm_spin = absl::Microseconds(50);
  // Over sockets (no shared-memory channel), a caller sends its requests and
  // collects its replies on its own thread when it can, instead of handing
  // them to the I/O thread and sleeping until woken: two thread wake-ups
  // fewer per round trip. false: everything through the I/O thread.
  bool caller_io = true;
  // With caller_io, a caller that waits looks at its sockets this long
  // before it sleeps in poll: a reply within it finds the thread awake,
  // sparing the wake-up (tens of microseconds where idle cores halt, as in
  // a VM; a 4 KiB round trip over loopback takes about 100 here). It
  // yields to this core's runnable threads meanwhile. 0: never spins.
  absl::Duration caller_spin = absl::Microseconds(100);
  // Prometheus metrics (worker/client/client_metrics.h lists them); off by default.
  MetricsOptions metrics;
  // An endpoint other workers reach this one at (a pipeline stage's link,
  // worker/train/stage_link.h), announced to the job in the cluster view (see
  // Worker()); empty: none.
  std::string advertise;
  // Keys and input limits (common/net/security.h): with keys every socket is a
  // CurveZMQ client (servers' keys come from the cluster view); without, the
  // scheduler and the servers must be on loopback unless security.insecure.
  SecurityOptions security;
  // The time the I/O thread reads for request deadlines, heartbeats and the
  // scheduler's silence (common/base/clock.h); null: the wall clock. Calls that
  // block the caller (Connect, Wait) also wait in real time.
  const Clock* clock = nullptr;

  absl::Status Validate() const;
};

// A dense tensor's data, by the tensor's index in the registered model:
// the whole tensor, or elements [offset, offset + data.size()) of it where
// that range is whole slices of the partition map (partition_map().slices():
// it starts where a slice starts and ends where one ends), so that a worker
// can push and pull the first part of a large tensor while it still
// computes the rest. Pushed from a ConstTensorBuffer, pulled into a
// TensorBuffer.
struct ConstTensorBuffer {
  int tensor = 0;
  absl::Span<const float> data;
  uint64_t offset = 0;
  // Null: `data` is the caller's, free again once the push's ticket is done,
  // and the client copies what it keeps to re-send (a push no checkpoint
  // holds yet). Set: `data` lies in memory this keeps alive, which the
  // caller does not write again (a PushBufferPool buffer, push_buffers.h):
  // the client holds a reference instead of a copy, for as long as it needs.
  std::shared_ptr<const void> owner;
};
struct TensorBuffer {
  int tensor = 0;
  absl::Span<float> data;
  uint64_t offset = 0;
};

// Rows of an embedding table, by the table's index in the registered model:
// row i (dim floats at i * dim) belongs to ids[i]. Ids may repeat: a push
// sums the gradients of an id before sending, a pull fills every place the
// id appears. Pushed from a ConstRowBuffer, pulled into a RowBuffer.
struct ConstRowBuffer {
  int table = 0;
  absl::Span<const uint64_t> ids;
  absl::Span<const float> rows;  // ids.size() x dim
};
struct RowBuffer {
  int table = 0;
  absl::Span<const uint64_t> ids;
  absl::Span<float> rows;  // ids.size() x dim
};

// Everything one training step sends and fetches, in one round trip per
// server: the gradients of dense tensors and table rows computed at `step`,
// and the parameters and rows of step `pull_step`. Any part may be empty.
struct StepRequest {
  absl::Span<const ConstTensorBuffer> push;
  absl::Span<const ConstRowBuffer> push_rows;
  int64_t step = 0;
  absl::Span<const TensorBuffer> pull;
  absl::Span<const RowBuffer> pull_rows;
  int64_t pull_step = 0;
  // The pushed buffers are values to set, not gradients (KVClient::Assign).
  bool assign = false;
};

// Another worker of the job as the latest cluster view has it (KVClient::Worker).
struct WorkerInfo {
  uint32_t node_id = 0;
  std::string endpoint;    // what it announced (KVClientOptions::advertise)
  std::string public_key;  // its CurveZMQ public key (Z85); empty without keys
};

// Fault tolerance. Heartbeats go to the scheduler from the I/O thread. When
// the scheduler declares a server dead, requests to it are held (not failed)
// until a replacement registers under its rank, then re-sent: first, in
// order, every push its checkpoint does not hold (each push carries a
// per-server sequence number, and the client keeps a copy of each until a
// reply says a checkpoint holds it), then the requests that were waiting.
// The server drops the pushes it already has. With no replacement within
// server_recovery_timeout they fail with kUnavailable naming the server.
class KVClient {
 public:
  using Ticket = uint64_t;

  // Registers with the scheduler as a worker and waits for the cluster view.
  // kInvalidArgument for bad options; kDeadlineExceeded when the cluster does
  // not form within register_timeout; the scheduler's error (for example
  // kResourceExhausted when the job already has its workers) otherwise.
  static absl::StatusOr<std::unique_ptr<KVClient>> Connect(const KVClientOptions& options);
  // Stops the I/O thread; requests still in flight end with kCancelled.
  ~KVClient();
  KVClient(const KVClient&) = delete;
  KVClient& operator=(const KVClient&) = delete;

  int rank() const;
  uint32_t node_id() const;
  int num_workers() const;
  int num_servers() const;

  // Registers the model (every worker registers the same one) and returns
  // once the servers hold it. kInvalidArgument for an invalid model or one
  // that differs from what another worker registered.
  absl::Status RegisterModel(const ModelSpec& model);
  // Valid after RegisterModel.
  const ModelSpec& model() const;
  const PartitionMap& partition_map() const;
  // kNotFound naming the tensor or table.
  absl::StatusOr<int> TensorIndex(absl::string_view name) const;
  absl::StatusOr<int> TableIndex(absl::string_view name) const;

  // ---- data: every call returns a ticket for Wait --------------------------
  //
  // Errors found before sending come back from Wait: kFailedPrecondition
  // before RegisterModel; kNotFound for an unknown tensor or table index;
  // kInvalidArgument for a tensor or table listed twice, a buffer of the wrong
  // size or one that is not whole slices, or more distinct ids for one server
  // than a request may carry (131072, SliceStore::kMaxRowsPerRequest).
  // Otherwise the servers' answers: kInvalidArgument for a refused push (NaN,
  // a step out of order), kDeadlineExceeded for a pull that waited past
  // request_timeout (naming what it waited for), kUnavailable for a server
  // that is gone and was not replaced in time.
  //
  // Tables: a table's row `id` lives in shard TableRowShard(TableHash(name),
  // id, shards) (common/placement/partition_map.h), on the server holding that shard.
  // A push of a table goes to every shard, with no rows for those that get
  // none: in sync mode that empty push is how a shard learns the worker is
  // done with the step, so a sync worker
  // pushes every table every step (a ConstRowBuffer with no ids when it has
  // none). Pushed rows are copied once, into the frames sent (the buffer is
  // the caller's again when the call returns); pulled rows are written in
  // place, as dense pulls are.

  // Any mix of dense tensors and table rows, pushed and pulled, in one round
  // trip per server (a pull riding on the push to the same server): the
  // server applies the push, then answers the pull.
  [[nodiscard]] Ticket Exchange(const StepRequest& request);
  // Exchange({.push = grads, .step = step}).
  [[nodiscard]] Ticket Push(absl::Span<const ConstTensorBuffer> grads, int64_t step);
  // Exchange({.pull = params, .pull_step = step}).
  [[nodiscard]] Ticket Pull(absl::Span<const TensorBuffer> params, int64_t step);
  // Exchange({.push = grads, .step = step, .pull = params, .pull_step = step + 1}).
  [[nodiscard]] Ticket PushPull(absl::Span<const ConstTensorBuffer> grads, absl::Span<const TensorBuffer> params,
                                int64_t step);
  // Exchange({.push_rows = grads, .step = step}).
  [[nodiscard]] Ticket PushRows(absl::Span<const ConstRowBuffer> grads, int64_t step);
  // Exchange({.pull_rows = rows, .pull_step = step}).
  [[nodiscard]] Ticket PullRows(absl::Span<const RowBuffer> rows, int64_t step);
  // Sets parameters instead of updating them: each tensor (or whole slices
  // of it) to `values`, each table's rows of `rows[i].ids` (distinct, else
  // kInvalidArgument) to its rows, their optimizer state reset. Not a step:
  // no clock moves and a sync step waits for no one, so workers that must
  // see the values first wait for the assign's ticket and a Barrier (the
  // user's own weights at the start, a model file, pretrained rows).
  // Exchange({.push = values, .push_rows = rows, .assign = true}).
  [[nodiscard]] Ticket Assign(absl::Span<const ConstTensorBuffer> values, absl::Span<const ConstRowBuffer> rows = {});

  // Blocks until `ticket` is complete, then returns its result and forgets
  // it (the buffers are the caller's again). Never blocks past the request's
  // own deadline (request_timeout). kNotFound naming the ticket for one this
  // client never issued or already collected.
  absl::Status Wait(Ticket ticket);
  // Waits at most `timeout` for `ticket` to complete without collecting it:
  // true once it is complete (a Wait then returns at once), false while it
  // still runs (its buffers are still lent). kNotFound as for Wait.
  absl::StatusOr<bool> Ready(Ticket ticket, absl::Duration timeout);
  // Exchange, then Wait: the one blocking data call.
  absl::Status ExchangeAndWait(const StepRequest& request);

  // ---- control ---------------------------------------------------------------

  // Waits until every worker has entered the barrier `name`.
  // kDeadlineExceeded naming the workers that did not arrive.
  absl::Status Barrier(absl::string_view name, absl::Duration timeout = absl::Seconds(120));
  // Where this worker should resume (after RegisterModel): the minimum over
  // servers of the step it should push next there (0 for a new job; for a
  // worker that rejoined, the step after its last complete one, or in sync
  // mode the step it is counted from).
  absl::StatusOr<int64_t> ResumeStep();
  // Tells the scheduler this worker is done. The job ends when all are.
  absl::Status Finish();

  // ---- looking at the job ----------------------------------------------------

  // Server `rank`'s counters. kInvalidArgument for a rank outside [0,
  // num_servers()); the request's errors otherwise.
  absl::StatusOr<ServerStats> GetServerStats(int rank);
  // The same, or nullopt where server `rank` died in a job with --replicas
  // and backups lead its slices now: it has no counters to give (its
  // backups count what it applied) and GetServerStats fails.
  absl::StatusOr<std::optional<ServerStats>> LiveServerStats(int rank);
  // Worker `rank` as the latest cluster view has it; kNotFound when it is
  // not alive in the view. A worker's view lists only the workers that take
  // connections (registered with an address: pipeline stages), so a plain
  // worker is kNotFound here however alive (common/wire/cluster_view.h).
  absl::StatusOr<WorkerInfo> Worker(int rank) const;
  // This client's own counters.
  ClientStats stats() const;

 private:
  class Impl;  // kv_client_internal.h
  explicit KVClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_KV_CLIENT_H_
