#include "scheduler/barriers.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {

absl::StatusOr<std::vector<Waiter>> Barriers::Arrive(const std::string& name, Waiter arrival, int live) {
  std::vector<Waiter>& waiting = waiting_[name];
  for (const Waiter& w : waiting) {
    if (w.rank == arrival.rank) {
      return absl::AlreadyExistsError(absl::StrCat("worker ", arrival.rank, " is already in barrier '", name, "'"));
    }
  }
  waiting.push_back(std::move(arrival));
  if (static_cast<int>(waiting.size()) < live) return std::vector<Waiter>{};
  std::vector<Waiter> done = std::move(waiting);
  waiting_.erase(name);
  return done;
}

std::map<std::string, std::vector<Waiter>> Barriers::Complete(int live) {
  std::map<std::string, std::vector<Waiter>> done;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (live == 0 || static_cast<int>(it->second.size()) < live) {
      ++it;
      continue;
    }
    done.emplace(it->first, std::move(it->second));
    it = waiting_.erase(it);
  }
  return done;
}

std::vector<std::pair<Waiter, absl::Status>> Barriers::Expire(absl::Time now, int num_workers) {
  std::vector<std::pair<Waiter, absl::Status>> expired;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::vector<Waiter>& waiting = it->second;
    std::set<int> arrived;
    for (const Waiter& w : waiting) arrived.insert(w.rank);
    std::vector<int> missing;
    for (int r = 0; r < num_workers; ++r) {
      if (!arrived.contains(r)) missing.push_back(r);
    }
    std::erase_if(waiting, [&](const Waiter& w) {
      if (now < w.deadline) return false;
      expired.emplace_back(
          w, absl::DeadlineExceededError(absl::StrCat("barrier '", it->first, "' timed out; workers not arrived: [",
                                                      absl::StrJoin(missing, ","), "]")));
      return true;
    });
    it = waiting.empty() ? waiting_.erase(it) : std::next(it);
  }
  return expired;
}

void Barriers::Forget(const std::string& identity) {
  for (auto& [name, waiting] : waiting_) {
    std::erase_if(waiting, [&](const Waiter& w) { return w.identity == identity; });
  }
}

}  // namespace ps
