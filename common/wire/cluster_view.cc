#include "common/wire/cluster_view.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Servers first, then workers, each by rank: the order of a whole view.
void Order(ClusterViewMsg& view) {
  std::sort(view.nodes.begin(), view.nodes.end(), [](const NodeInfo& a, const NodeInfo& b) {
    const bool sa = a.role == Role::kServer, sb = b.role == Role::kServer;
    return sa != sb ? sa : a.rank < b.rank;
  });
  std::sort(view.dead.begin(), view.dead.end());
}

}  // namespace

ClusterViewMsg ViewFor(const ClusterViewMsg& full, Role role) {
  ClusterViewMsg out = full;
  if (role == Role::kWorker) {
    std::erase_if(out.nodes, [](const NodeInfo& n) { return n.role == Role::kWorker && n.address.empty(); });
  }
  Order(out);
  return out;
}

ClusterViewMsg ViewDelta(const ClusterViewMsg& from, const ClusterViewMsg& to) {
  ClusterViewMsg delta{to.num_servers, to.num_workers, {}};
  delta.epoch = to.epoch;
  delta.incarnation = to.incarnation;
  delta.base_epoch = from.epoch;
  absl::flat_hash_map<uint32_t, const NodeInfo*> had;
  for (const NodeInfo& n : from.nodes) had[n.node_id] = &n;
  for (const NodeInfo& n : to.nodes) {
    auto it = had.find(n.node_id);
    if (it == had.end() || !(*it->second == n)) delta.nodes.push_back(n);
  }
  const absl::flat_hash_set<uint32_t> dead_before(from.dead.begin(), from.dead.end());
  for (uint32_t id : to.dead) {
    if (!dead_before.contains(id)) delta.dead.push_back(id);
  }
  if (to.copies != from.copies && to.copies.size() == from.copies.size()) {
    for (size_t k = 0; k < to.copies.size(); ++k) {  // the slices whose copies changed
      if (to.copies[k] == from.copies[k]) continue;
      delta.copy_keys.push_back(static_cast<uint32_t>(k));
      delta.copies.push_back(to.copies[k]);
    }
  } else if (to.copies != from.copies) {
    delta.copies = to.copies;  // placed now: every slice's
  }
  return delta;
}

absl::Status MergeView(ClusterViewMsg& held, const ClusterViewMsg& delta) {
  if (delta.base_epoch == 0) {
    held = delta;
    Order(held);
    return absl::OkStatus();
  }
  if (held.epoch != delta.base_epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("a change to cluster view ", delta.base_epoch, " reached a node holding view ", held.epoch));
  }
  for (uint32_t key : delta.copy_keys) {
    if (key >= held.copies.size()) {
      return absl::FailedPreconditionError(absl::StrCat("a change to cluster view ", delta.base_epoch,
                                                        " moves the copies of slice ", key, " of ",
                                                        held.copies.size()));
    }
  }
  const absl::flat_hash_set<uint32_t> gone(delta.dead.begin(), delta.dead.end());
  absl::flat_hash_set<uint32_t> replaced;
  for (const NodeInfo& n : delta.nodes) replaced.insert(n.node_id);
  std::erase_if(held.nodes,
                [&](const NodeInfo& n) { return gone.contains(n.node_id) || replaced.contains(n.node_id); });
  held.nodes.insert(held.nodes.end(), delta.nodes.begin(), delta.nodes.end());
  const absl::flat_hash_set<uint32_t> dead_before(held.dead.begin(), held.dead.end());
  for (uint32_t id : delta.dead) {
    if (!dead_before.contains(id)) held.dead.push_back(id);
  }
  if (!delta.copy_keys.empty()) {
    for (size_t i = 0; i < delta.copy_keys.size(); ++i) held.copies[delta.copy_keys[i]] = delta.copies[i];
  } else if (!delta.copies.empty()) {
    held.copies = delta.copies;
  }
  held.num_servers = delta.num_servers;
  held.num_workers = delta.num_workers;
  held.epoch = delta.epoch;
  held.incarnation = delta.incarnation;
  held.base_epoch = 0;
  held.copy_keys.clear();
  Order(held);
  return absl::OkStatus();
}

}  // namespace ps
