#ifndef PS_COMMON_WIRE_CLUSTER_VIEW_H_
#define PS_COMMON_WIRE_CLUSTER_VIEW_H_

// Cluster views as the scheduler sends them and nodes hold them
// (ClusterViewMsg). A node gets the whole view once (at formation, when it
// registers or reconnects) and after that only what changed: a delta
// (base_epoch != 0) against the view it holds, O(1) bytes for one node dying
// or joining where a whole view grows with the job. MergeView turns a delta
// back into the whole view, so that every consumer sees whole views.
//
// What a node is sent depends on its role (ViewFor): servers see every
// node; workers see the servers and only the workers that take connections
// (those with an address: pipeline stages), which is all a worker reaches.

#include "absl/status/status.h"
#include "common/wire/messages.h"

namespace ps {

// `full` as a node of `role` is sent it: servers first, then workers, each
// by rank; dead node ids ascending.
ClusterViewMsg ViewFor(const ClusterViewMsg& full, Role role);

// What a node holding `from` needs to hold `to` (both as ViewFor gives
// them): the nodes new or changed since, the ids dead since, and the
// copies of the slices whose copies changed (copy_keys names them; all of
// them when `from` had none). base_epoch = from.epoch.
ClusterViewMsg ViewDelta(const ClusterViewMsg& from, const ClusterViewMsg& to);

// Applies `delta` to `held`, the view of epoch delta.base_epoch (a whole
// view: base_epoch 0). kFailedPrecondition when `held` is of another epoch
// (a message was lost: the node asks for the whole view again), and then
// `held` is unchanged.
absl::Status MergeView(ClusterViewMsg& held, const ClusterViewMsg& delta);

}  // namespace ps

#endif  // PS_COMMON_WIRE_CLUSTER_VIEW_H_
