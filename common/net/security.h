#ifndef PS_COMMON_NET_SECURITY_H_
#define PS_COMMON_NET_SECURITY_H_

// Who may talk to a node, and how much a peer may make it read.
//
// Keys. Every node has its own CurveZMQ key pair (ps_keygen writes NAME.key,
// the secret and public key, mode 0600, and NAME.pub). The scheduler and the
// servers are CURVE servers: their ROUTER sockets admit only the public keys
// listed in their authorised keys (a file or a directory of *.pub files), a
// check made by a ZapHandler (common/net/zap_handler.h) on the socket's context.
// Every other socket is a CURVE client and must know its peer's public key:
// the scheduler's comes from a flag; a server's comes from the cluster view,
// which a node receives from the scheduler over the channel it has already
// authenticated (servers send their public key when they register). The
// admitted key of a connection is the User-Id of every message on it
// (RawMessage::user_id), so a handler can tie a node id to the key it
// registered with (CheckSenderKey).
//
// Plaintext. Without keys a node talks plaintext, which is allowed on
// loopback (127.0.0.0/8, ::1, localhost, ipc://, inproc://) only; anywhere
// else a node refuses to start unless told --insecure.
//
// Bounded input. Every socket drops, inside ZeroMQ and before allocating it,
// a frame over its limit: a header frame (kMaxHeaderBytes) on sockets to and
// from the scheduler, one tensor slice (max_frame_bytes) on the data sockets
// between servers and workers.
//
// Thread-safety: the functions are thread-safe; a NodeSecurity is immutable
// once made and may be shared by any threads.

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "common/net/security_options.h"
#include "common/placement/partition_map.h"
#include "zmq.hpp"

namespace ps {

// A CurveZMQ key pair in Z85 text.
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// A new key pair from libzmq (libsodium). kInternal when libzmq was built
// without CURVE.
absl::StatusOr<CurveKeyPair> GenerateCurveKeyPair();

// Writes DIR/NAME.key (both keys; created with O_EXCL and mode 0600, never
// chmod'ed) and DIR/NAME.pub ("Z85KEY NAME", mode 0644). kAlreadyExists when
// either file exists (nothing is overwritten); kInvalidArgument for a name
// that is empty or holds '/'; kUnavailable for other I/O errors.
absl::Status WriteKeyPair(const std::string& dir, const std::string& name, const CurveKeyPair& keys);

// Reads a NAME.key file. kFailedPrecondition when group or others may read
// it (the message says to chmod 600) or it is not a regular file;
// kNotFound when it does not exist; kInvalidArgument when it does not hold
// a valid secret key, or its public key does not belong to the secret key.
absl::StatusOr<CurveKeyPair> ReadSecretKeyFile(const std::string& path);

// `file_or_key`: a 40-character Z85 key, or a file whose first key line
// holds one. kInvalidArgument / kNotFound naming the file.
absl::StatusOr<std::string> ReadPublicKey(const std::string& file_or_key);

// The public keys a CURVE server admits.
struct AuthorizedKeys {
  absl::flat_hash_set<std::string> keys;  // Z85
  std::string source;                     // where they came from, for log lines
  std::string path;                       // the file or directory read (ReadAuthorizedKeys); empty: none
};

// Reads "Z85KEY [comment]" lines ('#' starts a comment line; blank lines are
// skipped) from a file, or from every *.pub file of a directory.
// kInvalidArgument naming the file and line of a malformed key, or when no
// key is found; kNotFound when the path does not exist.
absl::StatusOr<AuthorizedKeys> ReadAuthorizedKeys(const std::string& file_or_dir);

// A short name for a key in log lines: its first 8 Z85 characters.
std::string KeyFingerprint(absl::string_view z85_key);

// Which end of the CURVE handshake a socket is.
enum class CurveRole { kServer, kClient };

// The keys a node runs with, read once. Immutable.
class NodeSecurity {
 public:
  // Plaintext, no keys; frames up to kDefaultMaxFrameBytes.
  NodeSecurity() = default;

  // Reads the files `options` names for `role` (Validate(role) first).
  // Without keys: plaintext with options.max_frame_bytes. The errors of
  // ReadSecretKeyFile, ReadPublicKey and ReadAuthorizedKeys, with the flag
  // named; kInvalidArgument for a scheduler_public_key given to a scheduler
  // that is not its own key.
  static absl::StatusOr<NodeSecurity> Load(const SecurityOptions& options, Role role);
  // With keys made in memory (tests, benchmarks).
  static NodeSecurity WithKeys(CurveKeyPair own, std::string scheduler_public_key, AuthorizedKeys authorized,
                               uint64_t max_frame_bytes = kDefaultMaxFrameBytes);

  // The same keys and limits, admitting only `authorized`: for a socket one
  // known peer may reach (a pipeline stage's predecessor).
  NodeSecurity Admitting(AuthorizedKeys authorized) const {
    NodeSecurity s = *this;
    s.authorized_ = std::move(authorized);
    return s;
  }

  bool curve() const { return !keys_.secret_key.empty(); }
  const std::string& public_key() const { return keys_.public_key; }
  const std::string& scheduler_public_key() const { return scheduler_public_key_; }
  const AuthorizedKeys& authorized_keys() const { return authorized_; }
  uint64_t max_frame_bytes() const { return max_frame_bytes_; }
  bool insecure() const { return insecure_; }

  // Prepares `socket` before its bind or connect: ZMQ_MAXMSGSIZE =
  // `max_frame_bytes`, and with keys CurveZMQ, as a server (ZAP domain
  // kZapDomain, ZAP required: its context needs a ZapHandler) or as a client
  // of the peer whose public key is `server_public_key`. The one call that
  // secures a socket made outside common/net/transport.h (a benchmark's).
  // kFailedPrecondition for a client with keys and no `server_public_key`
  // (a peer that runs without keys); kInternal when ZeroMQ refuses an option.
  absl::Status Apply(zmq::socket_t& socket, CurveRole role, uint64_t max_frame_bytes,
                     absl::string_view server_public_key = "") const;

  // Plaintext to `endpoint` from a node without keys: OK on loopback or with
  // insecure(); kFailedPrecondition otherwise. For addresses learnt at run
  // time (a server's, from the cluster view).
  absl::Status CheckEndpoint(absl::string_view endpoint, absl::string_view what) const;

 private:
  CurveKeyPair keys_;
  std::string scheduler_public_key_;
  AuthorizedKeys authorized_;
  uint64_t max_frame_bytes_ = kDefaultMaxFrameBytes;
  bool insecure_ = false;
};

// The scheduler's check of a registration on a CURVE socket: the node's key
// is the one its connection authenticated with (`authenticated_key`, the
// message's User-Id; empty on a plaintext socket). Sets
// `claimed_key` to it when empty; kPermissionDenied when it names another.
absl::Status AdoptAuthenticatedKey(std::string& claimed_key, absl::string_view authenticated_key);

// A server's check that a message claiming to come from node `sender` came
// over a connection authenticated with the key that node registered with
// (`registered_key`, from the cluster view). OK on plaintext sockets (empty
// `authenticated_key`); kPermissionDenied otherwise, naming both keys.
absl::Status CheckSenderKey(uint32_t sender, absl::string_view registered_key, absl::string_view authenticated_key);

// kResourceExhausted naming the largest slice when a slice's payload
// (length x 4 bytes) exceeds `max_frame_bytes`: such a frame would be
// dropped on the way, so a model that has one is refused up front.
absl::Status CheckSlicesFit(absl::Span<const Slice> slices, uint64_t max_frame_bytes);

// `status` with a hint on keys appended when it is kDeadlineExceeded (the
// usual sign of a CURVE handshake that fails: ZeroMQ retries it silently).
absl::Status AddKeyHint(const absl::Status& status, const NodeSecurity& security);
template <typename T>
absl::StatusOr<T> AddKeyHint(absl::StatusOr<T> value, const NodeSecurity& security) {
  if (value.ok()) return value;
  return AddKeyHint(value.status(), security);
}

}  // namespace ps

#endif  // PS_COMMON_NET_SECURITY_H_
