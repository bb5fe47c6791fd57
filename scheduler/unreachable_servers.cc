#include "scheduler/unreachable_servers.h"

namespace ps {

UnreachableServers::Change UnreachableServers::Update(int worker, const std::vector<UnreachableServer>& reported) {
  Change change;
  std::map<int, UnreachableServer>& before = by_worker_[worker];
  std::map<int, UnreachableServer> now;
  for (const UnreachableServer& u : reported) {
    if (!before.contains(u.server)) change.lost.push_back(u);
    now[u.server] = u;
  }
  for (const auto& [server, report] : before) {
    if (!now.contains(server)) change.back.push_back(server);
  }
  if (now.empty()) {
    by_worker_.erase(worker);
  } else {
    before = std::move(now);
  }
  return change;
}

void UnreachableServers::ForgetServer(int server) {
  for (auto it = by_worker_.begin(); it != by_worker_.end();) {
    it->second.erase(server);
    it = it->second.empty() ? by_worker_.erase(it) : std::next(it);
  }
}

void UnreachableServers::ForgetWorker(int worker) { by_worker_.erase(worker); }

std::set<int> UnreachableServers::WorkersCutFrom(int server) const {
  std::set<int> out;
  for (const auto& [worker, servers] : by_worker_) {
    if (servers.contains(server)) out.insert(worker);
  }
  return out;
}

std::set<int> UnreachableServers::Servers() const {
  std::set<int> out;
  for (const auto& [worker, servers] : by_worker_) {
    for (const auto& [server, report] : servers) out.insert(server);
  }
  return out;
}

}  // namespace ps
