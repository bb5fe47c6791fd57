#ifndef PS_WORKER_CLIENT_KV_CLIENT_H_
#define PS_WORKER_CLIENT_KV_CLIENT_H_

// ps::KVClient: what a training program uses to talk to the parameter servers.
//
//   auto client = KVClient::Connect({.scheduler = "127.0.0.1:9000"});
//   (*client)->RegisterModel(model);                 // once, same model on every worker
//   int w = *(*client)->TensorIndex("fc0.weight");
//   (*client)->Pull({{w, weights}}, /*clock=*/0) ... Wait(ticket)
//   loop: compute gradients; PushPull({{w, grad}}, {{w, weights}}, clock)
//   (*client)->Finish();
//
// Push and Pull are asynchronous: they return a ticket at once and the one
// background I/O thread, which owns every socket, sends one request per
// server involved, all in flight together. Push sends the caller's gradient
// buffers zero-copy: they must stay valid and unchanged until Wait() on the
// ticket returns OK or an error other than kDeadlineExceeded. Pull writes
// each slice straight into the caller's buffer, which must likewise stay
// valid until then. Every request ends by options.request_timeout at the
// latest (with kDeadlineExceeded), so a Wait never blocks for longer.
//
// Thread-safe: Push, Pull, Wait, PushPull, Barrier and ServerStats may be
// called from any thread. RegisterModel must return before the first
// Push or Pull.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/messages.h"
#include "common/metrics.h"
#include "common/model_spec.h"
#include "common/partition_map.h"
#include "common/security_options.h"

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
  // had not answered.
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
  // Ask each server for a shared-memory channel (common/shm_handshake.h)
  // and, where it proves to be on this host, send and receive through it
  // instead of the socket. false: sockets only.
  bool shm = true;
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
  // Keys and input limits (common/security.h): with keys every socket is a
  // CurveZMQ client (servers' keys come from the cluster view); without, the
  // scheduler and the servers must be on loopback unless security.insecure.
  SecurityOptions security;
  // The time the I/O thread reads for request deadlines, heartbeats and the
  // scheduler's silence (common/clock.h); null: the wall clock. Calls that
  // block the caller (Connect, Wait) also wait in real time.
  const Clock* clock = nullptr;

  absl::Status Validate() const;
};

// A tensor's data, by the tensor's index in the registered model: the
// whole tensor, or elements [offset, offset + data.size()) of it where that
// range is whole slices of the partition map (partition_map().slices():
// it starts where a slice starts and ends where one ends), so that a worker
// can push and pull the first part of a large tensor while it still
// computes the rest.
struct TensorBuffer {
  int tensor = 0;
  absl::Span<const float> data;
  uint64_t offset = 0;
};
struct MutableTensorBuffer {
  int tensor = 0;
  absl::Span<float> data;
  uint64_t offset = 0;
};

// Rows of an embedding table, by the table's index in the registered model:
// row i (dim floats at i * dim) belongs to ids[i]. Ids may repeat: a push
// sums the gradients of an id before sending, a pull fills every place the
// id appears.
struct RowGradients {
  int table = 0;
  absl::Span<const uint64_t> ids;
  absl::Span<const float> grads;  // ids.size() x dim
};
struct RowBuffer {
  int table = 0;
  absl::Span<const uint64_t> ids;
  absl::Span<float> rows;  // ids.size() x dim
};

// Everything one training step sends and fetches, in one round trip per
// server: gradients of dense tensors and table rows computed at `clock`, and
// parameters and rows for step `pull_clock`. Any part may be empty.
struct StepExchange {
  absl::Span<const TensorBuffer> grads;
  absl::Span<const RowGradients> row_grads;
  int64_t clock = 0;
  absl::Span<const MutableTensorBuffer> out;
  absl::Span<const RowBuffer> rows_out;
  int64_t pull_clock = 0;
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

  int rank() const { return rank_; }
  uint32_t node_id() const { return node_id_; }
  int num_workers() const { return num_workers_; }
  int num_servers() const { return num_servers_; }

  // Registers the model (every worker registers the same one) and returns
  // once the servers hold it. kInvalidArgument for an invalid model or one
  // that differs from what another worker registered.
  absl::Status RegisterModel(const ModelSpec& model);
  // Valid after RegisterModel.
  const ModelSpec& model() const { return model_; }
  const PartitionMap& partition_map() const { return map_; }
  // kNotFound naming the tensor.
  absl::StatusOr<int> TensorIndex(absl::string_view name) const;

  // Sends gradients computed at step `clock`. Errors found before sending
  // (unknown tensor, wrong size, tensor listed twice, no model) come back from
  // Wait as kInvalidArgument / kNotFound / kFailedPrecondition.
  Ticket Push(absl::Span<const TensorBuffer> grads, int64_t clock);
  // Fetches parameters for step `clock` (sync: waits until step clock-1 is
  // applied; ssp:K: until every worker has pushed clock-K-1).
  Ticket Pull(absl::Span<const MutableTensorBuffer> out, int64_t clock);
  // Waits for a ticket. Once the ticket is complete, returns its result and
  // forgets it (the buffers are the caller's again). When `timeout` runs out
  // first, returns kDeadlineExceeded and keeps the ticket (buffers still
  // lent). A request that expired on its own deadline also completes with
  // kDeadlineExceeded; a further Wait tells the two apart (kNotFound: it was
  // complete). kNotFound for an unknown ticket.
  absl::Status Wait(Ticket ticket, absl::Duration timeout = absl::InfiniteDuration());

  // Push(grads, clock) and Pull(out, clock + 1) in one round trip per server:
  // each server applies the push, then answers the pull (waiting as Pull
  // would). The buffers follow the rules of Push and Pull.
  Ticket PushPullAsync(absl::Span<const TensorBuffer> grads,
                       absl::Span<const MutableTensorBuffer> out, int64_t clock) {
    return PushPullAsync(grads, out, clock, clock + 1);
  }
  // The same with the pull for step `pull_clock` (a pipelined worker asks for
  // the parameters of the step that will use them).
  Ticket PushPullAsync(absl::Span<const TensorBuffer> grads,
                       absl::Span<const MutableTensorBuffer> out, int64_t clock, int64_t pull_clock);
  // PushPullAsync, then Wait.
  absl::Status PushPull(absl::Span<const TensorBuffer> grads,
                        absl::Span<const MutableTensorBuffer> out, int64_t clock);

  // ---- embedding tables ----------------------------------------------------
  //
  // A table's row `id` lives on server TableRowServer(TableHash(name), id)
  // (common/partition_map.h); each request goes to every server holding some
  // of its ids, all in flight together, one request per server. A push of a
  // table goes to every server, with no rows for those that get none: in
  // sync mode that empty push is how a server's shard learns the worker is
  // done with the step. So in sync mode a worker pushes every table every
  // step (RowGradients with no ids when it has none): a table it leaves out
  // holds that step, and every pull of its rows for the next one, open. Ids repeated in a push are merged here (gradients
  // summed) before anything is sent; a pull asks each server for each id
  // once and fills every place it appears. The gradient rows are copied
  // once, into the frames sent (the caller's buffers are free once the call
  // returns); pulled rows are written into the caller's buffer, which must
  // stay valid until Wait returns, as for Pull.
  //
  // Errors from Wait: kNotFound for an unknown table index,
  // kInvalidArgument for a table listed twice, a buffer that is not
  // ids.size() x dim, or more distinct ids for one server than a request
  // may carry (SliceStore::kMaxRowsPerRequest, 131072); a server's
  // refusal (NaN rows, a sync step) as for dense pushes.

  // kNotFound naming the table.
  absl::StatusOr<int> TableIndex(absl::string_view name) const;
  Ticket PushRows(absl::Span<const RowGradients> grads, int64_t clock) {
    return Exchange({.row_grads = grads, .clock = clock});
  }
  Ticket PullRows(absl::Span<const RowBuffer> out, int64_t clock) {
    return Exchange({.rows_out = out, .pull_clock = clock});
  }
  // Any mix of dense tensors and table rows, pushed and pulled, in one
  // round trip per server (a pull riding on the push to the same server).
  Ticket Exchange(const StepExchange& step);

  // Waits until every worker has entered the barrier `name`.
  // kDeadlineExceeded naming the workers that did not arrive.
  absl::Status Barrier(absl::string_view name, absl::Duration timeout = absl::Seconds(120));

  // Counters of server `rank`: pushes, staleness of applied updates, bytes.
  absl::StatusOr<StatsReplyMsg> ServerStats(int rank);

  // Tells the scheduler this worker is done. The job ends when all are.
  absl::Status Finish();

  // Where this worker should resume (after RegisterModel): the minimum over
  // servers of the clock it should push next there (0 for a new job; for a
  // worker that rejoined, the step after its last complete one, or in sync
  // mode the step it is counted from).
  absl::StatusOr<int64_t> ResumeClock();

  // Counters of the fault-tolerance machinery, for tests and reports.
  struct RecoveryStats {
    uint64_t pushes_resent = 0;      // re-sent to restarted servers
    uint64_t requests_held = 0;      // waited for a restarted server
    uint64_t replay_bytes = 0;       // kept now for re-sending
    uint64_t servers_recovered = 0;
  };
  RecoveryStats recovery_stats() const;
  // What callers did on their own thread (KVClientOptions::caller_io):
  // requests they sent and messages they read, instead of the I/O thread.
  struct CallerIoStats {
    uint64_t requests_sent = 0;
    uint64_t messages_read = 0;
  };
  CallerIoStats caller_io_stats() const;
  // Where its Prometheus metrics are served (worker/client/client_metrics.h lists
  // them); empty when KVClientOptions::metrics is off.
  std::string metrics_url() const;
  // Worker `rank` as the latest cluster view has it: its node id, the
  // endpoint it announced (KVClientOptions::advertise) and its public key.
  // kNotFound when it is not alive in the view.
  absl::StatusOr<NodeInfo> Worker(int rank) const;
  // How many servers this client talks to through shared memory now
  // (KVClientOptions::shm; each is asked on the first request to it).
  int shm_servers() const;


 private:
  // The state behind a ticket (kv_client.cc).
  struct Op;
  // ZeroMQ calls this, on its own thread, when a frame lent from a caller's
  // buffer is free again; `hint` is a heap shared_ptr<Op> it deletes.
  static void ReleaseFrame(void* data, void* hint);
  // Ends one pending reply of `op` with `status`.
  static void FailOp(const std::shared_ptr<Op>& op, const absl::Status& status);
  class IoThread;
  struct Outgoing;

  explicit KVClient(const KVClientOptions& options);
  absl::Status Start();
  // Hands the requests of `op` to the I/O thread.
  void Submit(std::vector<Outgoing> requests, const std::shared_ptr<Op>& op);
  Ticket Track(std::shared_ptr<Op> op);
  Ticket Failed(absl::Status status);
  // kFailedPrecondition before RegisterModel; kNotFound for an unknown tensor
  // index; kInvalidArgument for a tensor listed twice, a wrong size or a
  // part that is not whole slices.
  template <typename Buffer>
  absl::Status CheckBuffers(absl::Span<const Buffer> buffers) const;
  // The keys of the slices that make up elements [offset, offset + size) of
  // `tensor`; empty when that is not whole slices (or lies outside it).
  absl::Span<const uint32_t> SlicesOf(int tensor, uint64_t offset, uint64_t size) const;
  class RequestBuilder;
  // Add the slices of each tensor to the requests for the servers holding
  // them. A pull added after a push of the same slices rides on it.
  void AddPush(absl::Span<const TensorBuffer> grads, int64_t clock, const std::shared_ptr<Op>& op,
               RequestBuilder& requests);
  void AddPull(absl::Span<const MutableTensorBuffer> out, int64_t clock, RequestBuilder& requests);
  // The same for table rows (kv_client_rows.cc); rows go after the dense
  // slices of each request. Errors as described for the table calls.
  absl::Status CheckRows(absl::Span<const RowGradients> grads, absl::Span<const RowBuffer> out) const;
  absl::Status AddPushRows(absl::Span<const RowGradients> grads, int64_t clock, RequestBuilder& requests);
  absl::Status AddPullRows(absl::Span<const RowBuffer> out, int64_t clock, RequestBuilder& requests);
  // The pull riding on request `req`'s push, or its own pull, at `clock`.
  PullRequestMsg& PullOf(Outgoing& req, int64_t clock) const;
  Ticket SubmitRequests(RequestBuilder& requests, std::shared_ptr<Op> op);
  // Registers with the scheduler, trying again while the send finds no
  // connection; kDeadlineExceeded once register_timeout has passed.
  absl::StatusOr<Envelope> Register();
  // Sends one control request and waits for its reply.
  absl::StatusOr<Envelope> Call(int target, Body body, absl::Duration timeout);

  const KVClientOptions options_;
  std::unique_ptr<IoThread> io_;
  uint32_t node_id_ = 0;
  int rank_ = -1;
  int num_workers_ = 0;
  int num_servers_ = 0;
  ModelSpec model_;
  PartitionMap map_;
  // Per slice key: the version the last pull returned; sent with pushes so
  // servers can measure staleness.
  std::unique_ptr<std::atomic<uint64_t>[]> pulled_version_;
  std::vector<uint64_t> table_hash_;  // per table: TableHash(name)

  absl::Mutex tickets_mu_;
  absl::flat_hash_map<Ticket, std::shared_ptr<Op>> tickets_ ABSL_GUARDED_BY(tickets_mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(tickets_mu_) = 1;
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_KV_CLIENT_H_
