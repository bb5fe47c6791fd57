#ifndef PS_COMMON_NET_SECURITY_OPTIONS_H_
#define PS_COMMON_NET_SECURITY_OPTIONS_H_

// A node's security configuration, as the roles' Options structs hold it
// (common/net/security.h has what acts on it: keys, CurveZMQ, the checks).
// Kept apart so that the roles' public headers (server.h, scheduler.h,
// worker/client/kv_client.h) do not bring in ZeroMQ. Thread-safe (values only).

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model/model_spec.h"

namespace ps {

// The ZAP domain of every CURVE server socket; the ZAP handler refuses others.
inline constexpr char kZapDomain[] = "ps";
// A CurveZMQ key in Z85 text (32 bytes of key).
inline constexpr size_t kZ85KeyLength = 40;
// The default largest frame a data socket (server <-> worker) accepts: one
// slice of a tensor. 64 x the default slice (1 MiB); a whole tensor placed on
// one server (layer or explicit placement) larger than this needs a larger
// limit on the servers and the workers (--max_frame_mb).
inline constexpr uint64_t kDefaultMaxFrameBytes = uint64_t{64} << 20;
// The smallest limit allowed: data sockets carry header frames too.
inline constexpr uint64_t kMinMaxFrameBytes = uint64_t{8} << 20;

// What a role's Options struct holds; filled from flags by
// common/net/security_flags.h. Default: no keys, plaintext, loopback only.
struct SecurityOptions {
  // This node's key pair (NAME.key from ps_keygen). Set: every socket of the
  // node uses CurveZMQ. The file must not be readable by group or others.
  std::string secret_key_file;
  // Scheduler and servers: the public keys their sockets admit, a file of
  // "Z85KEY [comment]" lines or a directory of *.pub files.
  std::string authorized_keys;
  // Servers and workers: the scheduler's public key, a .pub file or the
  // 40-character Z85 key itself.
  std::string scheduler_public_key;
  // Allows plaintext on a non-loopback address (logged as a warning).
  bool insecure = false;
  // The largest frame a data socket accepts (see kDefaultMaxFrameBytes).
  uint64_t max_frame_bytes = kDefaultMaxFrameBytes;

  bool has_keys() const { return !secret_key_file.empty(); }

  // Checks that the options `role` needs are there (no files are read):
  // with keys, the scheduler needs authorized_keys, a server authorized_keys
  // and scheduler_public_key, a worker scheduler_public_key; without keys
  // none of them may be set. kInvalidArgument naming the flag.
  absl::Status Validate(Role role) const;

  // OK when this node may use `endpoint` (to bind or to connect): it has
  // keys, or the endpoint is loopback, or insecure is set (then logs a
  // warning). kInvalidArgument otherwise, saying how to fix it; `what`
  // names the option that holds the endpoint ("bind", "scheduler").
  absl::Status CheckEndpoint(absl::string_view endpoint, absl::string_view what) const;
};

// True for ipc://, inproc:// and tcp:// endpoints whose host is in
// 127.0.0.0/8, ::1, "localhost" or the "lo" interface. Wildcards (0.0.0.0, *,
// ::) and any other name are not loopback.
bool IsLoopbackEndpoint(absl::string_view endpoint);

}  // namespace ps

#endif  // PS_COMMON_NET_SECURITY_OPTIONS_H_
