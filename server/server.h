#ifndef PS_SERVER_SERVER_H_
#define PS_SERVER_SERVER_H_

// A parameter server: binds a ROUTER socket for workers, registers with the
// scheduler, holds the slices the partition map places on it and answers
// push, pull and stats requests until the scheduler ends the job.
//
// Fault tolerance. The server heartbeats the scheduler and stops (after a
// final checkpoint) when the scheduler falls silent. With a checkpoint_dir it
// writes its slices, optimizer state, clocks and, per worker, the sequence
// number of the last push they contain, every checkpoint_every or
// checkpoint_every_pushes, when a worker asks (its replay buffer is large),
// and at the end. Each push carries a per-(worker, server) sequence number;
// the server applies each number once, and tells the worker in every reply
// which numbers its latest checkpoint holds, so the worker keeps copies of
// the rest. A server restarted from its checkpoint (restore_dir) rejoins under
// its old rank; the workers re-send what the checkpoint lacks, the server
// drops what it already has: no update lost, none applied twice.
//
// Thread-safety: Create() and Run() from one thread; RequestStop() and
// endpoint() from any thread. Everything else runs on Run()'s thread.

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/metrics.h"
#include "common/net/security_options.h"
#include "common/wire/messages.h"

namespace ps {

struct ServerOptions {
  // The scheduler: "HOST:PORT", "tcp://HOST:PORT" or "ipc://PATH". Required.
  std::string scheduler;
  // Where workers reach this server. Port 0: an ephemeral port.
  std::string bind = "tcp://127.0.0.1:0";
  // Host announced to workers when `bind` uses a wildcard host (0.0.0.0, *).
  std::string advertise_host = "127.0.0.1";
  // Threads applying updates to different slices at once; 0: one per core.
  int num_threads = 0;
  // Accept NaN and Inf in gradients (rejected by default).
  bool allow_nonfinite = false;
  // Memory the model's slices, optimizer state and sync sums may take on
  // this server; a model that needs more is refused (kResourceExhausted)
  // instead of crashing the server. What the dense slices leave is the
  // embedding tables' budget: at it, they evict rows (server/store/table_shard.h).
  // 0: half of this machine's memory.
  uint64_t max_memory_bytes = 0;
  // The embedding tables' disk tier (server/disk/table_disk.h): rows the memory
  // budget pushes out go to a store in this directory, one per server.
  // Empty: none; evicted rows lose their training.
  std::string table_disk_dir;
  uint64_t table_disk_max_bytes = 0;  // its files' bound (0: none)
  // Its cache and memtables, taken from the tables' memory budget.
  uint64_t table_disk_memory_bytes = uint64_t{32} << 20;
  bool table_disk_direct_io = false;  // reads past the page cache
  // How long to wait for the scheduler's reply and for the cluster to form;
  // longer than the scheduler's own default, so that its error (naming who
  // is missing) arrives first.
  absl::Duration register_timeout = absl::Seconds(90);
  // The longest a pull may wait (for sync steps or ssp clocks) when the
  // request names no timeout.
  absl::Duration default_pull_timeout = absl::Seconds(60);
  // Heartbeats to the scheduler, and how long its silence means it is down.
  // The server goes on serving without it; once it has been down for
  // scheduler_recovery_timeout more, the server stops (final checkpoint
  // first). A scheduler restarted with --restore takes the job back and the
  // server re-registers under its node id.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  absl::Duration scheduler_recovery_timeout = absl::Seconds(60);
  // Where checkpoints go (DIR/server-<rank>.ckpt); empty: none are written.
  std::string checkpoint_dir;
  // Checkpoint when this long has passed or this many pushes were applied
  // since the last one (zero: not on that account).
  absl::Duration checkpoint_every = absl::Seconds(30);
  uint64_t checkpoint_every_pushes = 0;
  // Start from the checkpoint in this directory and rejoin the running job
  // under its rank (`rank`, or -1: the only checkpoint in the directory).
  // Without restore_dir, `rank` (>= 0) is the rank to take when the job
  // forms; the scheduler refuses it to a running job (fresh slices would
  // replace trained ones).
  // Checkpoints continue into checkpoint_dir, or into restore_dir when that
  // is empty.
  std::string restore_dir;
  int rank = -1;
  // On RequestStop (SIGTERM), leave the running job without losing a
  // copy: ask the scheduler to drain this server (DrainRequestMsg; the job
  // runs with --elastic or --replicas >= 2), serve on while its slices are copied
  // to the other servers, and stop when the scheduler says so (exit 0). A
  // refused drain, or none done within drain_timeout, stops the server
  // with that error. False: stop at once (final checkpoint first).
  bool drain_on_stop = false;
  // Join a running job under a new rank (the job runs with --elastic or
  // --replicas >= 2): the scheduler moves this server its share of the slices.
  // Not with `rank` or `restore_dir`.
  bool join = false;
  absl::Duration drain_timeout = absl::Minutes(10);
  // Workers on this host exchange messages with this server through shared
  // memory (common/net/shm_channel.h) unless this is false; each such worker's
  // channel has two rings of shm_ring_bytes.
  bool shm = true;
  uint64_t shm_ring_bytes = uint64_t{16} << 20;
  // Before it sleeps in poll, the loop looks at its channels this long for a
  // message (a message that comes within it costs no wake-up).
  absl::Duration shm_spin = absl::Microseconds(50);
  // Keys and input limits (common/net/security.h): with keys the server's socket
  // admits only authorised keys and checks that each worker uses the key it
  // registered with; without, `bind` and `scheduler` must be loopback unless
  // security.insecure.
  SecurityOptions security;
  // Prometheus metrics (server/server_metrics.h lists them); off by default.
  MetricsOptions metrics;
  // The time deadlines, heartbeats and checkpoint intervals are read from
  // (common/base/clock.h); null: the wall clock. Tests pass a FakeClock.
  const Clock* clock = nullptr;
  // Tests only (a fault injected into a backup, as leveldb's
  // fault_injection_test does into its Env): called with each update a
  // primary forwards to this server (--replicas) before it is applied; a
  // non-OK status refuses the update as a failed apply would, after the
  // acknowledgement. Null: none. Called on the server's loop thread.
  std::function<absl::Status(const PushRequestMsg&)> forward_fault;
  // Tests only (a slow link from the scheduler): each message from the
  // scheduler is handled this long after it arrives, in the order it came,
  // while requests from the workers and the other servers are served at
  // once. A view reaches this server after it reached the workers, which
  // route by it meanwhile. Zero: at once.
  absl::Duration scheduler_lag = absl::ZeroDuration();

  // kInvalidArgument naming the field.
  absl::Status Validate() const;
};

class Server {
 public:
  // Binds the socket. kInvalidArgument for bad options, kUnavailable when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The endpoint workers connect to (with the real port).
  const std::string& endpoint() const;
  // Where its metrics are served (http://HOST:PORT/metrics); empty when off.
  std::string metrics_url() const;

  // Registers and serves. OK after an orderly shutdown by the scheduler;
  // kDeadlineExceeded when the scheduler does not answer or the cluster does
  // not form in time; kAborted when the scheduler ends the job with an error;
  // kUnavailable when the scheduler falls silent for heartbeat_timeout;
  // kCancelled after RequestStop(). Writes a final checkpoint (when it keeps
  // them) in every case once it holds the model; kNotFound / kDataLoss when
  // restore_dir has no usable checkpoint.
  absl::Status Run();

  // Makes Run() return soon. Thread-safe.
  void RequestStop();

 private:
  class Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_H_
