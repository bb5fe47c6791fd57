#include "scheduler/ranks.h"

#include "glog/logging.h"

namespace ps {

std::vector<int> GiveRanks(absl::Span<const int> asked) {
  std::vector<bool> taken(asked.size(), false);
  for (int r : asked) {
    if (r >= 0) {
      CHECK_LT(static_cast<size_t>(r), asked.size()) << "rank out of range: refused at registration";
      CHECK(!taken[r]) << "rank " << r << " asked twice: refused at registration";
      taken[r] = true;
    }
  }
  std::vector<int> given(asked.begin(), asked.end());
  size_t next_free = 0;
  for (int& r : given) {
    if (r >= 0) continue;
    while (taken[next_free]) ++next_free;
    r = static_cast<int>(next_free);
    taken[next_free] = true;
  }
  return given;
}

}  // namespace ps
