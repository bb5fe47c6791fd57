#ifndef PS_WORKER_CLIENT_SERVER_REACHABILITY_H_
#define PS_WORKER_CLIENT_SERVER_REACHABILITY_H_

// Whether this worker still hears each server. A server its requests wait
// on may be slow to answer for good reasons (a sync step waits for the
// slowest worker), so silence alone says nothing: while any request is in
// flight, each server silent for `probe_after` is probed (a Heartbeat it
// answers at once), and one its requests wait on that has then said
// nothing, probes included, for `timeout` is unreachable: the network
// between the two is cut, while the scheduler may still hear the server.
// The I/O thread logs it, tells the scheduler (Report, in its heartbeats)
// and, with one copy of each slice, dials the server again; it is back on
// the first message heard from it.
//
// Decisions only: the caller reads the clock, sends the probes and says
// what it heard (tested with made-up times, server_reachability_test.cc).
// Not thread-safe: the client's I/O thread owns it.

#include <cstddef>
#include <vector>

#include "absl/time/time.h"
#include "common/wire/messages.h"

namespace ps::client_internal {

class ServerReachability {
 public:
  struct Options {
    absl::Duration probe_after = absl::Seconds(1);  // the heartbeat interval
    absl::Duration timeout = absl::Seconds(5);      // the heartbeat timeout
    absl::Duration warn_every = absl::Seconds(5);   // how often Check repeats a server still unreachable
  };
  // What one Check found, by server rank.
  struct Round {
    std::vector<int> probe;  // to probe now
    std::vector<int> lost;   // unreachable from now on
    std::vector<int> still;  // unreachable for another warn_every
  };

  explicit ServerReachability(Options options) : options_(options) {}

  // The job has `servers` servers (a view grew it); new ones start heard at `now`.
  void Resize(size_t servers, absl::Time now);

  // A message from `server` arrived at `now`. True when it was unreachable:
  // it is back (unreachable_since() still says since when, until the next call).
  bool Heard(int server, absl::Time now);

  // `waiting[s]`: requests in flight to server s; `live[s]`: the view has s
  // alive (a dead one is the failover's, not unreachable).
  Round Check(const std::vector<bool>& waiting, const std::vector<bool>& live, absl::Time now);

  bool unreachable(int server) const { return state_[server].unreachable; }
  // When `server` last answered (or its requests began to wait, if later).
  absl::Time unreachable_since(int server) const { return state_[server].since; }
  bool any_unreachable() const;

  // The servers unreachable now, as the scheduler is told of them.
  std::vector<UnreachableServer> Report(absl::Time now) const;

 private:
  struct State {
    absl::Time heard = absl::InfinitePast();
    absl::Time waiting_since = absl::InfinitePast();
    absl::Time probed = absl::InfinitePast();
    absl::Time warned = absl::InfinitePast();
    absl::Time since = absl::InfinitePast();
    bool waiting = false;
    bool unreachable = false;
  };
  // Silence that counts: since it was last heard, or since requests began
  // to wait on it when that is later (an idle link is not silent).
  absl::Time QuietSince(const State& s) const { return std::max(s.heard, s.waiting_since); }

  Options options_;
  std::vector<State> state_;
};

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_SERVER_REACHABILITY_H_
