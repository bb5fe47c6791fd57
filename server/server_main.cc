// ps_server: holds the parameter slices placed on it.
#include <csignal>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/events_flags.h"
#include "common/base/main_support.h"
#include "common/base/metrics_flags.h"
#include "common/net/security_flags.h"
#include "common/net/shm_flags.h"
#include "server/server.h"

namespace {
// Every default below is ServerOptions' own.
const ps::ServerOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, scheduler, "", "Scheduler address, HOST:PORT (required).");
ABSL_FLAG(std::string, host, "127.0.0.1", "Interface workers reach this server on (0.0.0.0 for all).");
ABSL_FLAG(int, port, 0, "TCP port; 0 picks a free one.");
ABSL_FLAG(std::string, bind, "", "Full endpoint to bind instead of --host/--port, e.g. ipc:///tmp/ps-s0.sock.");
ABSL_FLAG(std::string, advertise_host, kDefaults.advertise_host,
          "Host announced to workers when listening on 0.0.0.0.");
ABSL_FLAG(int, num_threads, kDefaults.num_threads, "Threads applying updates to slices in parallel; 0: one per core.");
ABSL_FLAG(int64_t, shm_ring_mb, static_cast<int64_t>(kDefaults.shm_ring_bytes >> 20),
          "Each shared-memory channel's two rings, MiB each.");
ABSL_FLAG(bool, allow_nonfinite, kDefaults.allow_nonfinite, "Accept NaN/Inf in gradients (refused by default).");
ABSL_FLAG(int64_t, max_memory_mb, static_cast<int64_t>(kDefaults.max_memory_bytes >> 20),
          "Memory budget for the model's slices and its embedding tables (which evict rows at it); 0: half of "
          "the machine's memory.");
ABSL_FLAG(absl::Duration, heartbeat_interval, kDefaults.heartbeat_interval,
          "Time between heartbeats to the scheduler.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, kDefaults.heartbeat_timeout,
          "Time of scheduler silence after which the scheduler is presumed down (serving goes on).");
ABSL_FLAG(absl::Duration, scheduler_recovery_timeout, kDefaults.scheduler_recovery_timeout,
          "How long a scheduler presumed down may take to come back (ps_scheduler --restore) before this "
          "server stops.");
ABSL_FLAG(std::string, checkpoint_dir, kDefaults.checkpoint_dir,
          "Write checkpoints to DIR/server-<rank>.ckpt (empty: none).");
ABSL_FLAG(absl::Duration, checkpoint_every, kDefaults.checkpoint_every,
          "Checkpoint when this long passed since the last, e.g. 30s (0: not by time).");
ABSL_FLAG(int64_t, checkpoint_every_pushes, static_cast<int64_t>(kDefaults.checkpoint_every_pushes),
          "Checkpoint after this many pushes (0: not by count).");
ABSL_FLAG(std::string, restore_dir, kDefaults.restore_dir,
          "Start from the checkpoint in DIR and rejoin the running job under its rank (see --rank).");
ABSL_FLAG(bool, drain, kDefaults.drain_on_stop,
          "On SIGTERM, leave the running job without losing a copy: the scheduler copies this server's slices to "
          "the others (ps_scheduler --elastic or --replicas >= 2), then tells it to stop (exit 0).");
ABSL_FLAG(absl::Duration, drain_timeout, kDefaults.drain_timeout, "With --drain: the longest the drain may take.");
ABSL_FLAG(bool, join, kDefaults.join,
          "Join a running job under a new rank (ps_scheduler --elastic or --replicas >= 2): slices move to this "
          "server from the others.");
ABSL_FLAG(int, rank, kDefaults.rank,
          "The rank this server takes when the job forms (-1: the lowest nobody asked for). With --restore_dir: "
          "also the rank whose checkpoint to load (-1: the only one in DIR), and it may rejoin a running job "
          "under it; without a checkpoint a server cannot rejoin a running job.");
ABSL_FLAG(std::string, table_disk_dir, kDefaults.table_disk_dir,
          "Keep embedding table rows that the memory budget pushes out in a store in this directory (one per "
          "server) instead of losing them.");
ABSL_FLAG(double, table_disk_max_gb, static_cast<double>(kDefaults.table_disk_max_bytes) / (1ull << 30),
          "The most GiB the table disk store may take (0: no bound).");
ABSL_FLAG(int64_t, table_disk_cache_mb, static_cast<int64_t>(kDefaults.table_disk_memory_bytes >> 20),
          "Memory of the table disk store (its cache and write buffers), taken from the tables' budget.");
ABSL_FLAG(bool, table_disk_direct_io, kDefaults.table_disk_direct_io,
          "Read table rows from disk past the page cache (O_DIRECT).");
ABSL_FLAG(absl::Duration, register_timeout, kDefaults.register_timeout,
          "How long to wait for the scheduler and the cluster to form.");

namespace {
ps::Server* g_server = nullptr;  // for the signal handler: RequestStop is an atomic store
}  // namespace

namespace {

absl::Status TableDiskFromFlags(ps::ServerOptions* options) {
  if (absl::GetFlag(FLAGS_table_disk_max_gb) < 0 || absl::GetFlag(FLAGS_table_disk_cache_mb) < 0) {
    return absl::InvalidArgumentError("table_disk_max_gb and table_disk_cache_mb: must be >= 0");
  }
  options->table_disk_dir = absl::GetFlag(FLAGS_table_disk_dir);
  options->table_disk_max_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_table_disk_max_gb) * (1ull << 30));
  options->table_disk_memory_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_table_disk_cache_mb)) << 20;
  options->table_disk_direct_io = absl::GetFlag(FLAGS_table_disk_direct_io);
  return absl::OkStatus();
}

}  // namespace

namespace {

// --shm_ring_mb and --max_memory_mb, checked.
absl::Status MemoryFromFlags(ps::ServerOptions* options) {
  if (absl::GetFlag(FLAGS_shm_ring_mb) < 1 || absl::GetFlag(FLAGS_shm_ring_mb) > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm_ring_mb: ", absl::GetFlag(FLAGS_shm_ring_mb), " not in [1, 1024]"));
  }
  if (absl::GetFlag(FLAGS_max_memory_mb) < 0) return absl::InvalidArgumentError("max_memory_mb: must be >= 0");
  options->shm_ring_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_shm_ring_mb)) << 20;
  options->max_memory_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_memory_mb)) << 20;
  return absl::OkStatus();
}

// --restore_dir, --rank, --join, --drain, --drain_timeout: how this server
// enters and leaves a job.
void ReadMembershipFlags(ps::ServerOptions* options) {
  options->restore_dir = absl::GetFlag(FLAGS_restore_dir);
  options->rank = absl::GetFlag(FLAGS_rank);
  options->join = absl::GetFlag(FLAGS_join);
  options->drain_on_stop = absl::GetFlag(FLAGS_drain);
  options->drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "ps_server --scheduler=HOST:PORT: serves parameter slices.");
  ps::ServerOptions options;
  options.scheduler = absl::GetFlag(FLAGS_scheduler);
  options.bind = absl::GetFlag(FLAGS_bind).empty()
                     ? absl::StrCat("tcp://", absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port))
                     : absl::GetFlag(FLAGS_bind);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.num_threads = absl::GetFlag(FLAGS_num_threads);
  options.allow_nonfinite = absl::GetFlag(FLAGS_allow_nonfinite);
  options.shm = ps::ShmFromFlags();
  options.shm_spin = ps::ShmSpinFromFlags();
  if (absl::Status s = MemoryFromFlags(&options); !s.ok()) return ps::ExitCode(s, "ps_server");
  options.register_timeout = absl::GetFlag(FLAGS_register_timeout);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.scheduler_recovery_timeout = absl::GetFlag(FLAGS_scheduler_recovery_timeout);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  if (absl::GetFlag(FLAGS_checkpoint_every_pushes) < 0) {
    return ps::ExitCode(absl::InvalidArgumentError("checkpoint_every_pushes: must be >= 0"), "ps_server");
  }
  options.checkpoint_every_pushes = static_cast<uint64_t>(absl::GetFlag(FLAGS_checkpoint_every_pushes));
  ReadMembershipFlags(&options);
  if (absl::Status s = TableDiskFromFlags(&options); !s.ok()) return ps::ExitCode(s, "ps_server");
  options.security = ps::SecurityOptionsFromFlags();
  options.metrics = ps::MetricsFromFlags();
  if (absl::Status s = ps::OpenEventFileFromFlags(); !s.ok()) return ps::ExitCode(s, "ps_server");
  auto server = ps::Server::Create(options);
  if (!server.ok()) return ps::ExitCode(server.status(), "ps_server");
  std::printf("ps_server listening on %s\n", (*server)->endpoint().c_str());
  if (!(*server)->metrics_url().empty()) std::printf("ps_server metrics at %s\n", (*server)->metrics_url().c_str());
  std::fflush(stdout);
  // SIGTERM/SIGINT: stop serving (with --drain: once drained), write the
  // final checkpoint, exit.
  g_server = server->get();
  struct sigaction stop {};
  stop.sa_handler = [](int) { g_server->RequestStop(); };
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  return ps::ExitCode((*server)->Run(), "ps_server");
}
