#ifndef PS_SCHEDULER_RANKS_H_
#define PS_SCHEDULER_RANKS_H_

// How the ranks of one role are given when a job forms. Thread-safe (no state).

#include <vector>

#include "absl/types/span.h"

namespace ps {

// `asked[i]` is the rank the i-th node of a role to register asked for (-1:
// none); the asked ranks are distinct and below asked.size() (the scheduler
// refuses others at registration). Returns each node's rank: the one it
// asked for, or else the lowest rank nobody asked for, in registration order.
std::vector<int> GiveRanks(absl::Span<const int> asked);

}  // namespace ps

#endif  // PS_SCHEDULER_RANKS_H_
