// A server this worker cannot reach while the scheduler may still hear it
// (a network partition between the two): the worker probes the servers its
// requests wait on, says in its log which one it lost and since when, and
// tells the scheduler in its heartbeats. With several copies of each slice
// the scheduler fences that server and its slices fail over as from a dead
// one. With one copy there is nowhere else for them: the worker waits, and
// once the server answers again it sends its requests still in flight
// again, on the same socket and so behind whatever of them got through:
// a silence that long may have cost their connection (kTcpUserTimeout, in
// common/net/transport.h), whose kernel buffers went with it; the server
// drops a push it applied already by its sequence number, and a pull is
// answered twice at worst.

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/events.h"
#include "glog/logging.h"
#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {
namespace {

// How often the I/O thread looks: detection within a tenth of a second of
// the heartbeat timeout is plenty.
constexpr absl::Duration kReachabilityRound = absl::Milliseconds(100);

std::string Clock(absl::Time t) { return absl::FormatTime("%H:%M:%E3S", t, absl::LocalTimeZone()); }

}  // namespace

void IoThread::CheckReachability() {
  const absl::Time now = Now();
  if (now < next_reachability_check_ || scheduler_.node_id() == 0) return;
  next_reachability_check_ = now + kReachabilityRound;
  reachability_.Resize(links_.size(), now);
  std::vector<bool> waiting(links_.size(), false), live(links_.size(), false);
  for (const auto& [id, req] : in_flight_) {
    if (req.target >= 0 && static_cast<size_t>(req.target) < waiting.size()) waiting[req.target] = true;
  }
  for (size_t r = 0; r < links_.size(); ++r) live[r] = links_[r].socket && !links_[r].down;
  const ServerReachability::Round round = reachability_.Check(waiting, live, now);
  for (int target : round.probe) Probe(target);
  for (int target : round.lost) OnUnreachable(target, /*first=*/true);
  for (int target : round.still) OnUnreachable(target, /*first=*/false);
  if (!round.lost.empty()) Heartbeat(/*now=*/true);
}

void IoThread::Probe(int target) {
  Envelope probe{kProtocolVersion, 0, scheduler_.node_id(), HeartbeatMsg{}};
  probe.incarnation = scheduler_.incarnation();
  if (absl::Status s = links_.Send(target, probe, {}); !s.ok()) {
    VLOG(1) << "client: probe of server " << target << " not sent: " << s;
  }
}

void IoThread::OnUnreachable(int target, bool first) {
  const absl::Time since = reachability_.unreachable_since(target);
  const size_t waiting = in_flight_.To(target).size();
  const bool replicated = routing_.replicated();
  LOG(WARNING) << "client: server " << target << " (" << links_[target].endpoint << ") "
               << (first ? "has" : "still has") << " not answered this worker for "
               << absl::FormatDuration(absl::Trunc(Now() - since, absl::Milliseconds(1))) << " (since " << Clock(since)
               << "; probes unanswered), " << waiting << " requests wait for it; "
               << (replicated ? "the scheduler is told: its slices fail over to their copies"
                              : "the scheduler is told; one copy of its slices: waiting for it");
  if (!first) return;
  EmitEvent("server_unreachable", JsonLine()
                                      .Add("server", target)
                                      .Add("since", absl::ToDoubleSeconds(since - absl::UnixEpoch()), 3)
                                      .Add("waiting", waiting)
                                      .Add("replicated", replicated));
  ++recovery_.servers_unreachable;
}

void IoThread::OnReachableAgain(int target) {
  const absl::Time since = reachability_.unreachable_since(target);
  const absl::Duration cut = Now() - since;
  LOG(WARNING) << "client: server " << target << " (" << links_[target].endpoint << ") answers again, after "
               << absl::FormatDuration(absl::Trunc(cut, absl::Milliseconds(1))) << " without a word since "
               << Clock(since);
  EmitEvent("server_reachable", JsonLine().Add("server", target).Add("silent_s", absl::ToDoubleSeconds(cut), 3));
  Heartbeat(/*now=*/true);
  // Requests on a shared-memory channel never left this host.
  if (!routing_.replicated() && links_[target].shm == nullptr) ResendInFlight(target);
}

void IoThread::ResendInFlight(int target) {
  size_t resent = 0;
  for (uint64_t id : in_flight_.To(target)) {
    InFlight& f = in_flight_.at(id);
    const auto* push = std::get_if<PushRequestMsg>(&f.envelope.body);
    std::vector<zmq::message_t>& from = push != nullptr && push->origin >= 0 ? f.relayed : f.resend;
    if (push != nullptr && !push->slices.empty() && from.empty()) continue;  // no payload kept to send
    std::vector<zmq::message_t> frames(from.size());
    for (size_t i = 0; i < from.size(); ++i) frames[i].copy(from[i]);
    if (links_.Send(target, f.envelope, std::move(frames)).ok()) ++resent;
  }
  recovery_.requests_resent_after_cut += resent;
  LOG(WARNING) << "client: server " << target << ": " << resent
               << " requests in flight to it sent again (what the silence kept from it; it drops what it has)";
}

}  // namespace ps::client_internal
