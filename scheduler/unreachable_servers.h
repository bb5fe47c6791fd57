#ifndef PS_SCHEDULER_UNREACHABLE_SERVERS_H_
#define PS_SCHEDULER_UNREACHABLE_SERVERS_H_

// Which servers which workers cannot reach, as the workers' heartbeats say
// (HeartbeatMsg::unreachable): a server whose requests get no answer from
// that worker for its heartbeat timeout, probes included, while the
// scheduler may still hear the server (a network cut between the two).
// Each heartbeat replaces what its worker said before; Update says what
// changed, for the scheduler's log, events and decision (fence the server
// and fail its slices over, with several copies of each slice).
//
// Not thread-safe: the scheduler's loop owns it.

#include <map>
#include <set>
#include <vector>

#include "common/wire/messages.h"

namespace ps {

class UnreachableServers {
 public:
  struct Change {
    std::vector<UnreachableServer> lost;  // newly reported by this worker
    std::vector<int> back;                // servers this worker reached again
  };

  // Worker `worker` now cannot reach `reported` (and can reach the rest).
  Change Update(int worker, const std::vector<UnreachableServer>& reported);
  // Forgets what is said of server `server` (declared dead: the failover's
  // now) or by worker `worker` (gone).
  void ForgetServer(int server);
  void ForgetWorker(int worker);

  // Workers that cannot reach `server` now.
  std::set<int> WorkersCutFrom(int server) const;
  // Servers some worker cannot reach now.
  std::set<int> Servers() const;

 private:
  std::map<int, std::map<int, UnreachableServer>> by_worker_;  // worker -> server -> report
};

}  // namespace ps

#endif  // PS_SCHEDULER_UNREACHABLE_SERVERS_H_
