#ifndef PS_COMMON_NET_SHM_FLAGS_H_
#define PS_COMMON_NET_SHM_FLAGS_H_

// The same-host data plane's flags, defined once (in shm_flags.cc) for the
// server and worker binaries:
//
//   --shm           exchange messages with peers on this host through shared
//                   memory (default true; false: sockets only)
//   --shm_spin      how long a loop looks at its channels before it sleeps
//
// Only *_main.cc files call these; libraries take the options.

#include "absl/time/time.h"

namespace ps {

bool ShmFromFlags();
absl::Duration ShmSpinFromFlags();

}  // namespace ps

#endif  // PS_COMMON_NET_SHM_FLAGS_H_
