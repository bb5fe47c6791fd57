#ifndef PS_WORKER_TRAIN_STAGE_LINK_H_
#define PS_WORKER_TRAIN_STAGE_LINK_H_

// The link between neighbouring stages of one replica group (
// model parallelism across workers). Stage k > 0 listens (a ROUTER, its
// endpoint() announced to the group); stage k - 1 dials it (a DEALER). The
// micro-batches' activations go from k - 1 to k, their gradients from k back
// to k - 1: on each direction one kind, in micro-batch order, so a receiver
// expects exactly the next (kind, step, micro-batch) and anything else is a
// protocol error, never a guess.
//
// A message is two frames: a 40-byte header (little-endian: magic "PSSG",
// version, kind, step, micro-batch, rows, cols, payload bytes), every field
// checked on receipt, and the payload, rows x cols floats, handed to ZeroMQ
// without a copy on send and read in place on receipt. With keys the link is
// CurveZMQ like every other socket of a job: the listener admits exactly its
// predecessor's public key and the dialer checks the listener's; frames are
// bounded by the node's max frame size; every receive has a deadline, and a
// silent or dead neighbour ends in kDeadlineExceeded naming it.
//
// Not thread-safe: one thread (the stage's trainer) uses a link.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/net/security.h"
#include "common/net/zap_handler.h"
#include "zmq.hpp"

namespace ps {

class StageLink {
 public:
  // kStepResult: a step's summed loss and right answers, from the last
  // stage back to the first once the step's gradients went; kEvaluation:
  // a test evaluation's activations (forward) and its result (back).
  enum class Kind : uint16_t { kActivations = 1, kGradients = 2, kStepResult = 3, kEvaluation = 4 };

  // A received tensor, read in place from its frame.
  struct Tensor {
    int rows = 0;
    int cols = 0;
    zmq::message_t frame;
    absl::Span<const float> data() const {
      return {static_cast<const float*>(frame.data()), static_cast<size_t>(rows) * cols};
    }
  };

  // Stage k's side: binds `bind` (a wildcard host advertised as
  // `advertise_host`) and admits, with keys, only `peer_public_key`.
  // `peer` names the predecessor in errors ("stage 0 of group 1").
  static absl::StatusOr<std::unique_ptr<StageLink>> Listen(const std::string& bind, const std::string& advertise_host,
                                                           const NodeSecurity& own, std::string peer_public_key,
                                                           std::string peer);
  // With keys: admits exactly `peer_public_key` from now on (a listener
  // that bound before the cluster view told it who its predecessor is:
  // Listen with an empty key admits nobody). No-op without keys.
  void Admit(const std::string& peer_public_key);
  // Stage k - 1's side: connects to `endpoint`, with keys checking that the
  // listener holds `peer_public_key`.
  static absl::StatusOr<std::unique_ptr<StageLink>> Dial(const std::string& endpoint, const NodeSecurity& own,
                                                         std::string peer_public_key, std::string peer);
  ~StageLink();
  StageLink(const StageLink&) = delete;
  StageLink& operator=(const StageLink&) = delete;

  // Listen: where the predecessor connects; Dial: where it connected.
  const std::string& endpoint() const { return endpoint_; }

  // Sends micro-batch `micro` of step `step`: `data` (rows x cols floats,
  // moved: ZeroMQ frees it once sent). kFailedPrecondition on a listener
  // that has not heard from its predecessor yet (it answers, never starts);
  // kUnavailable when ZeroMQ cannot queue it.
  absl::Status Send(Kind kind, uint64_t step, int micro, int rows, int cols, std::vector<float> data);
  // The next message, which must be (kind, step, micro) with `cols` columns
  // and 1..max_rows rows. kDeadlineExceeded naming the peer after `timeout`;
  // kInvalidArgument naming the field of a malformed or unexpected message
  // (the caller fails its group: the pipeline's order is lost).
  absl::StatusOr<Tensor> Receive(Kind kind, uint64_t step, int micro, int cols, int max_rows, absl::Duration timeout);

 private:
  StageLink() = default;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t socket_;
  bool listener_ = false;
  std::string endpoint_;
  std::string peer_;
  std::string peer_routing_id_;  // listener: the predecessor's connection, once heard
};

}  // namespace ps

#endif  // PS_WORKER_TRAIN_STAGE_LINK_H_
