#ifndef PS_COMMON_NET_SECURITY_FLAGS_H_
#define PS_COMMON_NET_SECURITY_FLAGS_H_

// The security flags every role binary takes, defined once (in
// security_flags.cc, listed by --help beside the binary's own flags):
//
//   --secret_key_file       this node's key pair (NAME.key from ps_keygen)
//   --authorized_keys       scheduler, servers: the public keys they admit
//   --scheduler_public_key  servers, workers: the scheduler's public key
//   --insecure              allow plaintext on a non-loopback address
//   --max_frame_mb          largest frame a data socket accepts
//
// Only *_main.cc files call this; libraries take a SecurityOptions.

#include "common/net/security.h"

namespace ps {

// The flags' values. Call after InitMain has parsed the command line.
SecurityOptions SecurityOptionsFromFlags();

}  // namespace ps

#endif  // PS_COMMON_NET_SECURITY_FLAGS_H_
