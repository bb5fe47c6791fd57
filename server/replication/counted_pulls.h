#ifndef PS_SERVER_REPLICATION_COUNTED_PULLS_H_
#define PS_SERVER_REPLICATION_COUNTED_PULLS_H_

// Which pulls' table rows a server counted towards admission: a
// shard counts a pull's rows once per (worker, pull_id), so that a pull
// re-sent after a failover (to the backup its primary had forwarded the
// rows to before dying) or routed again after a move admits nothing early.
// Remembers the last kCapacity (worker, shard, pull) triples; a re-send
// comes within seconds, thousands of pulls before any is forgotten. A copy
// of a shard (--replicas: back to K copies, a move) carries the pulls its
// image counted (Of, then Add on the new copy), so that a pull re-sent
// after the copy was made counts on no copy again.
//
// Not thread-safe: the server's request thread calls it.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/wire/messages.h"

namespace ps {

class CountedPulls {
 public:
  static constexpr size_t kCapacity = size_t{1} << 16;

  // True, and remembered, the first time for (worker, key, pull_id); false
  // after. pull_id 0 (a worker that does not number its pulls): always true.
  bool First(int worker, uint32_t key, uint64_t pull_id) {
    if (pull_id == 0) return true;
    const Entry entry{worker, key, pull_id};
    if (!seen_.insert(entry).second) return false;
    order_.push_back(entry);
    if (order_.size() > kCapacity) {
      seen_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }

  // The last kCopied pulls of shard `key` remembered, oldest first (what a
  // copy of it carries: a re-send comes within seconds; more would push the
  // receiver's own pulls of other shards out).
  static constexpr size_t kCopied = size_t{1} << 12;
  std::vector<CountedPullId> Of(uint32_t key) const {
    std::vector<CountedPullId> pulls;
    for (auto it = order_.rbegin(); it != order_.rend() && pulls.size() < kCopied; ++it) {
      if (std::get<1>(*it) == key) pulls.push_back(CountedPullId{std::get<0>(*it), std::get<2>(*it)});
    }
    std::reverse(pulls.begin(), pulls.end());
    return pulls;
  }
  // Remembers `pulls` of shard `key` as counted (a copy's: Of on its primary).
  void Add(uint32_t key, const std::vector<CountedPullId>& pulls) {
    for (const CountedPullId& p : pulls) First(p.worker, key, p.pull_id);
  }

 private:
  using Entry = std::tuple<int, uint32_t, uint64_t>;
  absl::flat_hash_set<Entry> seen_;
  std::deque<Entry> order_;  // oldest first
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_COUNTED_PULLS_H_
