#ifndef PS_SERVER_REQUEST_ORDER_H_
#define PS_SERVER_REQUEST_ORDER_H_

// The order a server serves the requests that arrived together (one poll's
// batch): by priority (Envelope::priority, lower first: the place in the
// forward pass of the request's first tensor, so that the pull the next
// forward pass needs first is answered first), and in arrival order among
// equals; never one request of a sender ahead of an earlier one of the same
// sender, whose pushes are numbered in the order they were sent
// (server/push_sequencer.h). So priority reorders the work of different
// workers: a first layer's exchange of one worker goes ahead of a queue of
// other workers' last layers.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace ps {

struct QueuedRequest {
  uint32_t sender = 0;
  uint32_t priority = 0;
};

// Indices into `batch`, in the order to serve them.
std::vector<size_t> ServeOrder(absl::Span<const QueuedRequest> batch);

}  // namespace ps

#endif  // PS_SERVER_REQUEST_ORDER_H_
