#ifndef PS_WORKER_CLIENT_CLIENT_FLAGS_H_
#define PS_WORKER_CLIENT_CLIENT_FLAGS_H_

// The client's flags, defined once (in client_flags.cc) for every worker
// binary (ps_worker, ps_spam_worker, ps_exact_sum), so that they take the
// same names, types and defaults (those of KVClientOptions):
//
//   --scheduler                      HOST:PORT of the scheduler (required)
//   --rank                           take this worker rank (-1: any free one)
//   --request_timeout              how long any one request may take
//   --register_timeout             how long to wait for the cluster to form
//   --heartbeat_interval           time between heartbeats
//   --heartbeat_timeout            scheduler silence that means it is down
//   --scheduler_recovery_timeout   how long a scheduler that is down may take to return
//   --server_recovery_timeout      how long requests to a dead server wait for its restart
//   --caller_io, --caller_spin     callers do their own socket I/O, and spin this long first
//
// Durations are absl::Duration flags, as every role takes them: a number
// with its unit (90s, 1.5s, 500ms, 100us, 2m; 0 alone needs none).
//
// and how the model's tensors travel (ModelSpec::compression):
//
//   --compression                  none, fp16, bf16, topk:R, randomk:R or onebit [,pull=none|fp16|bf16]
//   --compress_min_bytes           tensors smaller than this go uncompressed
//
// plus the security, shared-memory and metrics flags (common/*_flags.h).
// Only *_main.cc files call this; libraries take KVClientOptions. The Python
// binding takes the same options as keyword arguments of ps.connect().

#include "worker/client/kv_client.h"

namespace ps {

// KVClientOptions from the flags above; Validate() is the caller's.
KVClientOptions ClientOptionsFromFlags();
// --compression and --compress_min_bytes into `model`'s fields;
// kInvalidArgument naming the flag for a bad one.
absl::Status CompressionFromFlags(CompressionSpec* compression, uint64_t* min_bytes);

}  // namespace ps

#endif  // PS_WORKER_CLIENT_CLIENT_FLAGS_H_
