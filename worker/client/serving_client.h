#ifndef PS_WORKER_CLIENT_SERVING_CLIENT_H_
#define PS_WORKER_CLIENT_SERVING_CLIENT_H_

// A client of serving replicas (ps_serve, server/serving/serving_replica.h):
// table rows by id, dense tensors by name, and the version they are of.
//
//   auto client = ps::ServingClient::Connect({.endpoints = {"127.0.0.1:7000", "127.0.0.1:7001"}});
//   auto rows = (*client)->Lookup("emb", ids);   // rows->values: ids x dim
//
// Several replicas: requests go to them in turn; one that does not answer
// within `timeout` (dead, unreachable) is skipped for `retry_after` and
// the request goes to the next, so a caller sees an error only when no
// replica answers. A replica's refusal (an unknown table, too many ids) is
// the answer: it is returned, not retried elsewhere.
//
// Thread-safety: one call at a time per client (calls from several threads
// are serialised); make one client per thread for parallel lookups.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/net/security.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps {

struct ServingClientOptions {
  std::vector<std::string> endpoints;  // HOST:PORT or tcp://..., ipc://...
  absl::Duration timeout = absl::Seconds(2);
  absl::Duration retry_after = absl::Seconds(5);
  // With keys: this client's key pair (security.secret_key_file) and the
  // replicas' public key (its .pub file or the Z85 key; security.h);
  // plaintext, on loopback only, without.
  SecurityOptions security;
  std::string replica_public_key;
};

// What an answer is of (ServingReplyMsg's version fields).
struct ServedVersion {
  uint64_t step = 0;
  absl::Time synced_at = absl::UnixEpoch();
  bool exact = false;
  std::string source;
  std::string replica;  // the endpoint that answered
};

class ServingClient {
 public:
  // kInvalidArgument for no endpoint or one that does not parse; the
  // security files' errors. Connects in the background: a replica not up
  // yet is found by the first request.
  static absl::StatusOr<std::unique_ptr<ServingClient>> Connect(const ServingClientOptions& options);
  ~ServingClient();

  struct Rows {
    uint32_t dim = 0;
    std::vector<float> values;   // ids.size() x dim, row-major
    std::vector<uint8_t> found;  // 1: the table holds the id; 0: its initial value
    ServedVersion version;
  };
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
    ServedVersion version;
  };
  struct Model {
    ServedVersion version;
    std::vector<std::string> tensors;
    std::vector<std::string> tables;
    std::vector<uint32_t> table_dims;
  };
  // The replica's refusal (kNotFound for an unknown table or tensor,
  // kInvalidArgument for too many ids), or kUnavailable naming every
  // replica when none answered in time.
  absl::StatusOr<Rows> Lookup(absl::string_view table, absl::Span<const uint64_t> ids);
  absl::StatusOr<Tensor> Dense(absl::string_view name);
  absl::StatusOr<Model> Version();

 private:
  struct Replica {
    std::string endpoint;
    zmq::socket_t socket;
    absl::Time skip_until = absl::InfinitePast();
  };
  struct Answer {
    ServingReplyMsg reply;
    std::vector<zmq::message_t> payloads;
    std::string replica;
  };
  explicit ServingClient(ServingClientOptions options) : options_(std::move(options)) {}
  absl::Status Open(Replica& replica) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `request` (with `payload` as its one payload frame, when given)
  // to the replicas in turn until one answers.
  absl::StatusOr<Answer> Call(const ServingRequestMsg& request, std::optional<absl::string_view> payload);
  // One replica's answer within the timeout; kDeadlineExceeded without one.
  absl::StatusOr<Answer> Ask(Replica& replica, const ServingRequestMsg& request,
                             std::optional<absl::string_view> payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServingClientOptions options_;
  absl::Mutex mu_;
  zmq::context_t context_;
  NodeSecurity security_;
  std::vector<Replica> replicas_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t request_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_SERVING_CLIENT_H_
