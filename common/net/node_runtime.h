#ifndef PS_COMMON_NET_NODE_RUNTIME_H_
#define PS_COMMON_NET_NODE_RUNTIME_H_

// What every node (server, worker) does with the scheduler besides its own
// requests: the registration deadline, heartbeats, telling a scheduler that
// is down (silent past heartbeat_timeout: the node goes on) from one that is
// dead (silent past heartbeat_timeout + scheduler_recovery_timeout: the node
// stops), re-registering with a restarted one, and ignoring cluster views
// older than the newest seen. Decisions only: the role owns its sockets and
// sends what NodeRuntime says is due, so that every rule here is tested with
// a FakeClock (common/base/clock.h) instead of sleeps.
//
//   NodeRuntime rt({.scheduler = ep, .heartbeat_interval = ..., .clock = clock});
//   Send(Register); rt.Registering();
//   loop: PS_RETURN_IF_ERROR(rt.Check());
//         if (rt.HeartbeatDue()) Send(Heartbeat);
//         Poll(rt.PollTimeout(kPollInterval));
//         on any message from the scheduler: rt.Heard();
//         on a view: v = rt.TakeView(view); if (v.ok() && *v) Apply(**v); if (!v.ok()) re-register;
//         on kUnauthenticated: if (rt.ReregisterDue()) Send(Register with node id);
//         on the answer: rt.Reregistered();
//
// Not thread-safe: the role's I/O thread owns it.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/wire/messages.h"

namespace ps {

struct NodeRuntimeOptions {
  std::string scheduler;  // its endpoint, for messages
  // How long after Registering() a node without a cluster view gives up
  // (zero: no deadline; the role waits some other way).
  absl::Duration register_timeout = absl::ZeroDuration();
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  absl::Duration scheduler_recovery_timeout = absl::Seconds(60);
  // Finishes the "presumed down" log line: what goes on without it.
  std::string goes_on = "Work goes on";
  const Clock* clock = nullptr;  // null: RealClock()
};

class NodeRuntime {
 public:
  explicit NodeRuntime(NodeRuntimeOptions options);

  // Who this node is in log lines ("server 3", "client"); may change once
  // the rank is known.
  void set_name(std::string name) { name_ = std::move(name); }
  absl::Time Now() const { return clock_->Now(); }

  // The registration went out now: the registration deadline and the
  // heartbeat schedule run from here, and the scheduler counts as heard.
  void Registering();
  // Any message from the scheduler.
  void Heard() { last_heard_ = Now(); }
  // A cluster view of `epoch` arrived: true when it is newer than every view
  // before it (the caller applies it), false for an older or repeated one.
  bool NewerView(uint64_t epoch);
  // A cluster view arrived, whole or a change to the one held
  // (common/wire/cluster_view.h): the whole view when it is newer than every one
  // before (the caller applies it), null for an older or repeated one;
  // kFailedPrecondition for a change to a view this node does not hold (a
  // message was lost: the caller re-registers, and the scheduler's answer
  // brings the whole view).
  absl::StatusOr<const ClusterViewMsg*> TakeView(ClusterViewMsg view);
  bool have_view() const { return have_view_; }
  uint64_t view_epoch() const { return view_epoch_; }

  // OK while the node may go on; else why it must stop:
  //   kDeadlineExceeded: no cluster view by register_timeout after
  //     Registering() ("no cluster view from scheduler S within T" plus
  //     `no_view_detail`);
  //   kUnavailable: with a view, the scheduler silent past heartbeat_timeout
  //     + scheduler_recovery_timeout ("... presumed dead, stopping").
  // Logs "presumed down" once when the scheduler has been silent past
  // heartbeat_timeout. Messages do not name this node: the caller does.
  absl::Status Check(absl::string_view no_view_detail = "");
  // Whether a heartbeat is due; when it is, the next one is one interval on.
  bool HeartbeatDue();
  // A scheduler that does not know this node (kUnauthenticated, it was
  // restarted): whether to re-register now. At most once per heartbeat
  // interval while no answer has come.
  bool ReregisterDue();
  // The restarted scheduler took this node back: logs "scheduler is back",
  // with `detail`, and the scheduler is no longer down.
  void Reregistered(absl::string_view detail = "");
  bool scheduler_down() const { return scheduler_down_; }
  // How long the poll loop may block: until the next heartbeat is due, at
  // most `max`, never negative.
  absl::Duration PollTimeout(absl::Duration max) const;

 private:
  const NodeRuntimeOptions options_;
  const Clock* const clock_;
  std::string name_ = "node";
  absl::Time register_deadline_ = absl::InfiniteFuture();
  absl::Time next_heartbeat_ = absl::InfinitePast();
  absl::Time last_heard_;
  bool have_view_ = false;
  uint64_t view_epoch_ = 0;
  std::optional<ClusterViewMsg> view_;  // the whole view of view_epoch_ (TakeView)
  bool scheduler_down_ = false;
  bool reregister_pending_ = false;
  absl::Time last_reregister_ = absl::InfinitePast();
};

}  // namespace ps

#endif  // PS_COMMON_NET_NODE_RUNTIME_H_
