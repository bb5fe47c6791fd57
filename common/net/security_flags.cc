// The security flags of every role binary (see security_flags.h). This file
// is linked into a binary only when its main calls SecurityOptionsFromFlags,
// so libraries and tests do not get these flags.
#include "common/net/security_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, secret_key_file, "",
          "This node's CurveZMQ key pair (NAME.key from ps_keygen, mode 0600). Set: every socket of this "
          "node authenticates and encrypts (see docs/security.md).");
ABSL_FLAG(std::string, authorized_keys, "",
          "Scheduler and servers, with --secret_key_file: the public keys they admit, a file of "
          "'Z85KEY [comment]' lines or a directory of *.pub files.");
ABSL_FLAG(std::string, scheduler_public_key, "",
          "Servers and workers, with --secret_key_file: the scheduler's public key, its .pub file or the "
          "40-character Z85 key.");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext (no keys) on an address that is not loopback: anyone who can reach the port can "
          "join the job and read or change the model.");
ABSL_FLAG(int64_t, max_frame_mb, 64,
          "Largest frame (one tensor slice) a server or worker accepts from a peer, in MiB (at least 8); "
          "ZeroMQ drops a larger one before allocating it.");

namespace ps {

SecurityOptions SecurityOptionsFromFlags() {
  SecurityOptions o;
  o.secret_key_file = absl::GetFlag(FLAGS_secret_key_file);
  o.authorized_keys = absl::GetFlag(FLAGS_authorized_keys);
  o.scheduler_public_key = absl::GetFlag(FLAGS_scheduler_public_key);
  o.insecure = absl::GetFlag(FLAGS_insecure);
  const int64_t mb = absl::GetFlag(FLAGS_max_frame_mb);
  // Out of range becomes 0, which Validate refuses naming the flag.
  o.max_frame_bytes = mb > 0 && mb <= (int64_t{1} << 20) ? static_cast<uint64_t>(mb) << 20 : 0;
  return o;
}

}  // namespace ps
