#include "worker/client/server_reachability.h"

#include <algorithm>

namespace ps::client_internal {

void ServerReachability::Resize(size_t servers, absl::Time now) {
  const size_t before = state_.size();
  state_.resize(std::max(servers, before));
  for (size_t s = before; s < state_.size(); ++s) state_[s].heard = now;
}

bool ServerReachability::Heard(int server, absl::Time now) {
  if (server < 0 || static_cast<size_t>(server) >= state_.size()) return false;
  State& s = state_[server];
  s.heard = now;
  const bool back = s.unreachable;
  s.unreachable = false;
  return back;
}

ServerReachability::Round ServerReachability::Check(const std::vector<bool>& waiting, const std::vector<bool>& live,
                                                    absl::Time now) {
  Round round;
  bool any_waiting = false;
  for (size_t r = 0; r < state_.size(); ++r) {
    any_waiting |= r < waiting.size() && waiting[r] && r < live.size() && live[r];
  }
  for (size_t r = 0; r < state_.size(); ++r) {
    State& s = state_[r];
    const int rank = static_cast<int>(r);
    if (r >= live.size() || !live[r]) {
      s = State{.heard = now};  // dead: the failover's now; heard anew should it come back
      continue;
    }
    const bool waits = r < waiting.size() && waiting[r];
    if (waits && !s.waiting) s.waiting_since = now;
    s.waiting = waits;
    const absl::Duration quiet = now - QuietSince(s);
    // An unreachable server is probed until it answers, requests or not.
    if ((any_waiting || s.unreachable) && quiet >= options_.probe_after && now - s.probed >= options_.probe_after) {
      s.probed = now;
      round.probe.push_back(rank);
    }
    if (s.waiting && !s.unreachable && quiet >= options_.timeout) {
      s.unreachable = true;
      s.since = QuietSince(s);
      s.warned = now;
      round.lost.push_back(rank);
    } else if (s.unreachable && now - s.warned >= options_.warn_every) {
      s.warned = now;
      round.still.push_back(rank);
    }
  }
  return round;
}

bool ServerReachability::any_unreachable() const {
  return std::any_of(state_.begin(), state_.end(), [](const State& s) { return s.unreachable; });
}

std::vector<UnreachableServer> ServerReachability::Report(absl::Time now) const {
  std::vector<UnreachableServer> out;
  for (size_t r = 0; r < state_.size(); ++r) {
    if (!state_[r].unreachable) continue;
    bool hears_others = false;
    for (size_t o = 0; o < state_.size(); ++o) {
      hears_others |= o != r && !state_[o].unreachable && now - state_[o].heard < options_.timeout;
    }
    out.push_back(
        UnreachableServer{static_cast<int32_t>(r), absl::ToInt64Milliseconds(now - state_[r].since), hears_others});
  }
  return out;
}

}  // namespace ps::client_internal
