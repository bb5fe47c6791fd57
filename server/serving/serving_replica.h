#ifndef PS_SERVER_SERVING_SERVING_REPLICA_H_
#define PS_SERVER_SERVING_SERVING_REPLICA_H_

// A serving replica (ps_serve): a read-only copy of a trained model
// (server/serving/serving_model.h) answering lookups on a ROUTER socket.
//
// Protocol (schemas/ps.capnp ServingRequest / ServingReply): a lookup names
// a table, its ids in the one payload frame (little-endian uint64); the
// reply has the rows (float32, ids x dim) and one byte per id, 1 where the
// table holds it. dense names a tensor; version lists what is served.
// Every reply names the version it is of. Refused with an error naming the
// problem, the replica serving on: an unknown table or tensor
// (kNotFound), ids that are not whole uint64s or more of them than
// max_lookup_ids (kInvalidArgument), any other message, writes included
// (kPermissionDenied: a replica is read-only), and a message that does not
// decode.
//
// Security as the servers': with keys a CURVE server admitting the
// authorised keys; plaintext only on loopback unless told insecure.
//
// Thread-safety: Run on one thread; RequestStop from any (a signal handler).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/net/security.h"
#include "common/net/transport.h"
#include "common/net/zap_handler.h"
#include "common/wire/messages.h"
#include "server/serving/serving_model.h"

namespace ps {

struct ServingOptions {
  std::string from;  // a checkpoint directory or an exported model file
  std::string bind = "tcp://127.0.0.1:0";
  std::string advertise_host = "127.0.0.1";
  SecurityOptions security;
  uint64_t max_lookup_ids = 100000;
};

class ServingReplica {
 public:
  // Loads the model (ServingModel::Load's errors) and binds (the
  // transport's and security's errors).
  static absl::StatusOr<std::unique_ptr<ServingReplica>> Start(const ServingOptions& options);
  // Serves `model` (tests, benchmarks): no `from`.
  static absl::StatusOr<std::unique_ptr<ServingReplica>> Start(const ServingOptions& options,
                                                               std::unique_ptr<ServingModel> model);

  const std::string& endpoint() const { return endpoint_; }
  const ServingModel& model() const { return *model_; }
  // For a follower keeping it at a job's model (server/serving/serving_follower.h).
  ServingModel* mutable_model() { return model_.get(); }
  // Answers until RequestStop; the error that stopped it otherwise.
  absl::Status Run();
  void RequestStop() { stop_.store(true); }

 private:
  ServingReplica(const ServingOptions& options, std::unique_ptr<ServingModel> model)
      : options_(options), model_(std::move(model)) {}
  absl::Status Bind();
  void Handle(RawMessage raw);
  // The answer to `request` (its payload frames into *payloads), or why not.
  absl::StatusOr<ServingReplyMsg> Answer(const ServingRequestMsg& request, const RawMessage& raw,
                                         std::vector<zmq::message_t>* payloads);

  const ServingOptions options_;
  std::unique_ptr<ServingModel> model_;
  zmq::context_t context_;
  NodeSecurity security_;
  std::unique_ptr<ZapHandler> zap_;  // outlives the socket
  zmq::socket_t router_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
};

}  // namespace ps

#endif  // PS_SERVER_SERVING_SERVING_REPLICA_H_
