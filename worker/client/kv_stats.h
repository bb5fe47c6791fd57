#ifndef PS_WORKER_CLIENT_KV_STATS_H_
#define PS_WORKER_CLIENT_KV_STATS_H_

// The counters KVClient reports (kv_client.h): a server's, as it answers a
// stats request (ServerStats), and the client's own (ClientStats). Plain
// values, copied out; installed as <ps/kv_stats.h>, which <ps/kv_client.h>
// includes.

#include <cstdint>
#include <string>
#include <vector>

namespace ps {

// What a server reports of itself (KVClient::GetServerStats).
struct ServerStats {
  uint64_t pushes_applied = 0;   // pushes that reached the parameters
  uint64_t updates_applied = 0;  // optimizer steps (sync: one per step and slice)
  uint64_t pulls_served = 0;
  uint64_t errors_replied = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  // [s] = slice updates applied with staleness s (a push of k slices counts k)
  std::vector<uint64_t> staleness_histogram;
  uint64_t staleness_max = 0;
  uint32_t slices_held = 0;
  uint64_t waited_pull_micros = 0;
  std::vector<uint32_t> held_keys;  // slice keys this server holds, ascending
  // Per worker rank: one past the last step it pushed to every slice here.
  std::vector<int64_t> worker_steps;
  uint64_t max_version = 0;  // the highest slice version here
  // Pushed slices skipped because their step was applied under the worker's
  // previous node (a restarted worker, or a whole job restarted from its
  // checkpoints), and re-sent pushes dropped by sequence number.
  uint64_t slices_skipped = 0;
  uint64_t duplicates_dropped = 0;
  uint64_t assigns_applied = 0;  // pushes of values applied (KVClient::Assign)
  // Per table shard held here, in table order.
  struct Table {
    int table = 0;  // index in the model's tables
    uint64_t rows = 0;
    uint64_t bytes = 0;
    uint64_t evictions = 0;
    uint64_t admissions = 0;
    uint64_t rejections = 0;
    uint64_t gradients_dropped = 0;
    uint64_t rows_pulled = 0;
    uint64_t rows_pushed = 0;
    uint64_t disk_rows = 0;  // the disk tier's (TableStatsMsg)
    uint64_t disk_reads = 0;
    uint64_t disk_writes = 0;
    uint64_t disk_refusals = 0;
    uint64_t expired = 0;
  };
  std::vector<Table> tables;
};

// The client's own diagnostics (KVClient::stats()).
struct ClientStats {
  // Fault tolerance: pushes re-sent to restarted servers, requests that
  // waited for one, bytes kept now for re-sending, servers recovered.
  uint64_t pushes_resent = 0;
  uint64_t requests_held = 0;
  uint64_t replay_bytes = 0;
  uint64_t servers_recovered = 0;
  // Requests in flight on a shared-memory channel that closed (a server that
  // found this worker reading its replies too slowly), sent again through
  // the socket.
  uint64_t requests_resent_off_shm = 0;
  // Requests a server refused as routed by an older view (a slice moved
  // between servers), routed again by a newer one.
  uint64_t requests_rerouted = 0;
  // New requests that waited behind an earlier request for their slices,
  // refused by the server a slice just left or in flight to it, so that
  // each slice's server takes them in the order they were made.
  uint64_t requests_fenced = 0;
  // Servers this worker's requests waited on that answered nothing, probes
  // included, for the heartbeat timeout (a network cut between the two),
  // and requests sent again on a new connection to one (one copy of each
  // slice; with several, the scheduler fails its slices over instead).
  uint64_t servers_unreachable = 0;
  uint64_t requests_resent_after_cut = 0;
  // What callers did on their own thread (KVClientOptions::caller_io):
  // requests they sent and messages they read, instead of the I/O thread.
  uint64_t caller_requests_sent = 0;
  uint64_t caller_messages_read = 0;
  // Servers this client talks to through shared memory now
  // (KVClientOptions::shm; each is asked on the first request to it).
  int shm_servers = 0;
  // Where its Prometheus metrics are served (worker/client/client_metrics.h
  // lists them); empty when KVClientOptions::metrics is off.
  std::string metrics_url;
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_KV_STATS_H_
