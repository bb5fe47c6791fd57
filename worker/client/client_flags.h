#ifndef PS_WORKER_CLIENT_CLIENT_FLAGS_H_
#define PS_WORKER_CLIENT_CLIENT_FLAGS_H_

// The client's flags, defined once (in client_flags.cc) for every worker
// binary (ps_worker, ps_spam_worker, ps_exact_sum), so that they take the
// same names, types and defaults (those of KVClientOptions):
//
//   --scheduler                      HOST:PORT of the scheduler (required)
//   --rank                           take this worker rank (-1: any free one)
//   --request_timeout_s              seconds any one request may take
//   --register_timeout_s             seconds to wait for the cluster to form
//   --heartbeat_interval_s           seconds between heartbeats
//   --heartbeat_timeout_s            scheduler silence that means it is down
//   --scheduler_recovery_timeout_s   how long a scheduler that is down may take to return
//   --server_recovery_timeout_s      how long requests to a dead server wait for its restart
//   --caller_io, --caller_spin_us    callers do their own socket I/O, and spin this long first
//
// plus the security, shared-memory and metrics flags (common/*_flags.h).
// Only *_main.cc files call this; libraries take KVClientOptions. The Python
// binding takes the same options as keyword arguments of ps.connect().

#include "worker/client/kv_client.h"

namespace ps {

// KVClientOptions from the flags above; Validate() is the caller's.
KVClientOptions ClientOptionsFromFlags();

}  // namespace ps

#endif  // PS_WORKER_CLIENT_CLIENT_FLAGS_H_
