#include "common/net/shm_flags.h"

#include <algorithm>

#include "absl/flags/flag.h"

ABSL_FLAG(bool, shm, true,
          "Exchange messages with servers/workers on this host through shared memory, proved by a handshake "
          "(false: sockets only).");
ABSL_FLAG(absl::Duration, shm_spin, absl::Microseconds(50),
          "How long a loop looks at its shared-memory channels for a message before it sleeps in poll "
          "(0: never spins).");

namespace ps {

bool ShmFromFlags() { return absl::GetFlag(FLAGS_shm); }

absl::Duration ShmSpinFromFlags() { return std::max(absl::ZeroDuration(), absl::GetFlag(FLAGS_shm_spin)); }

}  // namespace ps
