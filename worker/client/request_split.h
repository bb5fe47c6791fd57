#ifndef PS_WORKER_CLIENT_REQUEST_SPLIT_H_
#define PS_WORKER_CLIENT_REQUEST_SPLIT_H_

// A push or pull cut by the server each of its slices goes to: after a
// failover (ps_scheduler --replicas) the slices one server led are led by
// several backups, so a request built for it, or held while it died, goes
// to each of them in parts. Internal to worker/client (kv_client_io.cc,
// kv_client_recovery.cc).

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/wire/messages.h"
#include "worker/client/client_requests.h"
#include "zmq.hpp"

namespace ps::client_internal {

struct RequestPart {
  int target = 0;
  Envelope envelope;
  std::vector<zmq::message_t> payloads;
  std::vector<Destination> destinations;
};

// Cuts `envelope` (a PushRequestMsg, whose slices[i] travels in
// payloads[i], or a PullRequestMsg, with the pull riding on a push; pulled
// slices land in destinations, keys first, then rows, in request order) by
// `route(key)`: one part per server, in the order servers first appear.
// A part keeps the push's header (clock, seq, assign); one that pulls and
// pushes nothing becomes a PullRequestMsg, and one that pushes and pulls
// nothing carries no pull. Any other body is one part to `fallback`.
std::vector<RequestPart> SplitByServer(Envelope envelope, std::vector<zmq::message_t> payloads,
                                       std::vector<Destination> destinations, int fallback,
                                       absl::FunctionRef<int(uint32_t)> route);

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_REQUEST_SPLIT_H_
