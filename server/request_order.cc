#include "server/request_order.h"

#include "absl/container/flat_hash_map.h"

namespace ps {

std::vector<size_t> ServeOrder(absl::Span<const QueuedRequest> batch) {
  // Each sender's requests in arrival order; the next served is the head
  // of lowest priority, the earliest on ties.
  absl::flat_hash_map<uint32_t, size_t> queue_of;
  std::vector<std::vector<size_t>> queues;
  for (size_t i = 0; i < batch.size(); ++i) {
    auto [it, added] = queue_of.try_emplace(batch[i].sender, queues.size());
    if (added) queues.emplace_back();
    queues[it->second].push_back(i);
  }
  std::vector<size_t> heads(queues.size(), 0);
  std::vector<size_t> order;
  order.reserve(batch.size());
  while (order.size() < batch.size()) {
    size_t best = queues.size();
    for (size_t q = 0; q < queues.size(); ++q) {
      if (heads[q] == queues[q].size()) continue;
      const size_t i = queues[q][heads[q]];
      if (best == queues.size()) {
        best = q;
        continue;
      }
      const size_t b = queues[best][heads[best]];
      if (batch[i].priority < batch[b].priority || (batch[i].priority == batch[b].priority && i < b)) best = q;
    }
    order.push_back(queues[best][heads[best]++]);
  }
  return order;
}

}  // namespace ps
