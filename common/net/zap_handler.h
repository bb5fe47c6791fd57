#ifndef PS_COMMON_NET_ZAP_HANDLER_H_
#define PS_COMMON_NET_ZAP_HANDLER_H_

// The ZeroMQ authentication handler (ZAP, rfc.zeromq.org/spec/27) of one
// context: every CURVE server socket of the context asks it about each
// client that completes the handshake, and it admits exactly the public keys
// it was given. An admitted key (Z85) becomes the User-Id of every message on
// that connection (RawMessage::user_id). A refusal is logged with the peer's
// IP address and the key's fingerprint (the first report for an address and
// key at once, repeats at most every 10 s with their count, since a refused
// client's ZeroMQ retries about ten times a second), and the client never
// gets to send a message.
//
// Keys read from a file or directory (ReadAuthorizedKeys): a key it does not
// admit makes it read them again first when that path changed since it
// was last read (its modification time: a file added to a directory, a
// file rewritten), or 5 s after the last reading, so that a key added
// there (a server joining a running job) is admitted without a restart.
// Keys are only added so: one removed from the path stays admitted until
// the process restarts.
//
// Lifetime: start it before any CURVE server socket of the context binds,
// and destroy it after those sockets are closed and before the context (the
// roles declare it between their context and their sockets). Without a
// handler such a socket refuses every client (ZMQ_ZAP_ENFORCE_DOMAIN).
//
// Thread-safety: Start and the destructor from the owner's thread; the
// counters and Authorize from any thread. The REP socket belongs to the handler's thread.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/net/security.h"
#include "zmq.hpp"

namespace ps {

class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 on `context` and answers on a thread of its
  // own. `name` prefixes its log lines ("scheduler", "server").
  // kFailedPrecondition when the context has a ZAP handler already;
  // kInternal when the thread or the eventfd cannot be made.
  static absl::StatusOr<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context, AuthorizedKeys authorized,
                                                           std::string name);
  // Stops the thread and closes its socket.
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Replaces the admitted keys (from any thread): for a socket that binds
  // before it knows its peer (a pipeline stage learns its predecessor's key
  // from the cluster view after it announced its endpoint). Connections
  // already admitted stay.
  void Authorize(AuthorizedKeys authorized);

  uint64_t admitted() const { return admitted_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  ZapHandler(AuthorizedKeys authorized, std::string name, zmq::socket_t socket, int wake_fd);
  void Loop();
  // The reply frames for one request's frames.
  std::vector<std::string> Answer(const std::vector<zmq::message_t>& request);
  // `key` is not admitted: the keys' path read again if it changed (or
  // kRereadEvery passed); whether `key` is admitted now.
  bool Reread(const std::string& key);
  void LogRefusal(const std::string& address, const std::string& key, const std::string& why);

  absl::Mutex mu_;
  AuthorizedKeys authorized_ ABSL_GUARDED_BY(mu_);
  const std::string name_;
  zmq::socket_t socket_;  // the thread's once started
  const int wake_fd_;
  std::thread thread_;
  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> refused_{0};
  // Reread's: the modification time of the keys' path when last read (ns;
  // -1: unknown), and when it last read it. Thread only.
  int64_t read_mtime_ = -1;
  absl::Time read_at_ = absl::InfinitePast();

  // Refusals since the last report, by address and key. Thread only.
  struct Reported {
    absl::Time last = absl::InfinitePast();
    uint64_t since = 0;
  };
  absl::flat_hash_map<std::string, Reported> refusals_;
};

// A ZapHandler for `security`'s authorised keys when it has keys; null for a
// plaintext node. The errors of ZapHandler::Start.
absl::StatusOr<std::unique_ptr<ZapHandler>> StartZapHandler(zmq::context_t& context, const NodeSecurity& security,
                                                            std::string name);

}  // namespace ps

#endif  // PS_COMMON_NET_ZAP_HANDLER_H_
