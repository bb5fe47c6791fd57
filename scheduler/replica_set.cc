#include "scheduler/replica_set.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/placement/replica_placement.h"

namespace ps {

absl::Status ReplicaSet::Place(const PartitionMap& map, int replicas) {
  PS_ASSIGN_OR_RETURN(copies_, PlaceReplicas(map, replicas));
  replicas_ = replicas;
  return absl::OkStatus();
}

absl::Status ReplicaSet::Seat(const std::map<int32_t, std::vector<SliceData>>& held) {
  struct Best {
    uint64_t version = 0;
    int32_t rank = -1;
  };
  std::vector<Best> best(copies_.size());
  for (const auto& [rank, slices] : held) {
    for (const SliceData& s : slices) {
      if (s.key >= copies_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("server ", rank, "'s checkpoint holds slice ", s.key,
                                                       "; the model has ", copies_.size(), " slices"));
      }
      Best& b = best[s.key];
      const bool placed = !copies_[s.key].empty() && copies_[s.key][0] == rank;
      if (b.rank < 0 || s.version > b.version || (s.version == b.version && placed)) b = Best{s.version, rank};
    }
  }
  std::vector<uint32_t> none;
  for (uint32_t key = 0; key < best.size(); ++key) {
    if (best[key].rank < 0) none.push_back(key);
  }
  if (!none.empty()) {
    const size_t shown = std::min<size_t>(none.size(), 10);
    return absl::FailedPreconditionError(absl::StrCat(
        "slices ", absl::StrJoin(none.begin(), none.begin() + shown, ", "),
        none.size() > shown ? absl::StrCat(" and ", none.size() - shown, " more") : "", " are in none of the ",
        held.size(),
        " restored servers' checkpoints: restart the servers that held them with --restore_dir (or start a new job)"));
  }
  for (uint32_t key = 0; key < best.size(); ++key) copies_[key] = {best[key].rank};
  return absl::OkStatus();
}

bool ReplicaSet::Holds(uint32_t key, int32_t rank) const {
  return key < copies_.size() && std::find(copies_[key].begin(), copies_[key].end(), rank) != copies_[key].end();
}

std::pair<int, int> ReplicaSet::Lose(int32_t rank) {
  int promoted = 0, last = 0;
  for (std::vector<int32_t>& held : copies_) {
    auto it = std::find(held.begin(), held.end(), rank);
    if (it == held.end()) continue;
    if (held.size() == 1) {
      ++last;
      continue;
    }
    if (replicas_ < 2 && it == held.begin()) {
      // One copy of each slice (--elastic): the move under way rolls back;
      // the slice waits for the restart, as any other it held alone.
      held.resize(1);
      ++last;
      continue;
    }
    promoted += it == held.begin() ? 1 : 0;
    held.erase(it);
  }
  return {promoted, last};
}

std::optional<ReplicaSet::Copy> ReplicaSet::NextCopy(const std::set<int32_t>& live,
                                                     const std::set<std::pair<uint32_t, int32_t>>& failed) const {
  if (replicas_ < 2) return std::nullopt;
  std::map<int32_t, int> held;  // copies per live server that may take one
  for (int32_t r : live) {
    if (r != leaving_) held[r] = 0;
  }
  for (const std::vector<int32_t>& c : copies_) {
    for (int32_t r : c) {
      if (held.count(r)) ++held[r];
    }
  }
  for (uint32_t key = 0; key < copies_.size(); ++key) {
    const std::vector<int32_t>& c = copies_[key];
    if (c.empty() || Counted(key) >= replicas_ || !live.count(c[0])) continue;
    std::optional<int32_t> best;
    for (const auto& [r, n] : held) {
      if (Holds(key, r) || failed.count({key, r})) continue;
      if (!best.has_value() || n < held.at(*best)) best = r;
    }
    if (best.has_value()) return Copy{key, c[0], *best};
  }
  return std::nullopt;
}

void ReplicaSet::Move(uint32_t key, int32_t from, int32_t to) {
  if (key >= copies_.size()) return;
  std::vector<int32_t>& held = copies_[key];
  if (std::find(held.begin(), held.end(), from) == held.end()) return;
  std::erase(held, to);
  std::replace(held.begin(), held.end(), from, to);
}

void ReplicaSet::Add(const Copy& copy) {
  if (copy.key < copies_.size() && !Holds(copy.key, copy.target)) copies_[copy.key].push_back(copy.target);
}

std::map<int, int> ReplicaSet::ByCopies() const {
  std::map<int, int> by;
  if (replicas_ < 2) return by;
  for (int k = 0; k <= replicas_; ++k) by[k] = 0;
  for (const std::vector<int32_t>& c : copies_) ++by[static_cast<int>(c.size())];
  return by;
}

int ReplicaSet::LastCopiesOn(int32_t rank) const {
  int last = 0;
  for (const std::vector<int32_t>& c : copies_) last += c.size() == 1 && c[0] == rank ? 1 : 0;
  return last;
}

int ReplicaSet::Counted(uint32_t key) const {
  const std::vector<int32_t>& c = copies_[key];
  const bool leaving = leaving_.has_value() && std::find(c.begin(), c.end(), *leaving_) != c.end();
  return static_cast<int>(c.size()) - (leaving ? 1 : 0);
}

int ReplicaSet::Missing() const {
  int missing = 0;
  for (uint32_t key = 0; key < copies_.size(); ++key) missing += Counted(key) < replicas_ ? 1 : 0;
  return missing;
}

}  // namespace ps
