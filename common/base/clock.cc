#include "common/base/clock.h"

namespace ps {
namespace {

class WallClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

const Clock* RealClock() {
  static const WallClock* const clock = new WallClock();
  return clock;
}

}  // namespace ps
