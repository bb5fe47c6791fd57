#ifndef PS_COMMON_NET_SHM_HANDSHAKE_H_
#define PS_COMMON_NET_SHM_HANDSHAKE_H_

// How a shared-memory channel (common/net/shm_channel.h) gets from a server to a
// worker, proving on the way that both run on one host and that the worker
// is the one the server authenticated:
//
//  1. The worker asks over its ordinary socket (ShmOfferMsg). The server
//     answers a registered worker only (with CurveZMQ: the key it registered
//     with), over that authenticated socket: an abstract Unix socket's name,
//     a one-time random token and the rings' size (ShmGrantMsg).
//  2. The worker connects to that Unix socket, which only a process in the
//     server's network namespace on the server's host can reach, checks that
//     the listener runs as its own user, and presents the token.
//  3. The server's acceptor checks the connecting process runs as its own
//     user and the token is one it granted (once, within kShmOfferTtl), and
//     makes the region and passes its memfd and both doorbells over
//     (SCM_RIGHTS).
//  4. The worker maps the region and confirms with one byte; only then does
//     the server use the channel (a worker that gave up meanwhile closes
//     instead, and the server drops it). The connection stays open: its end
//     is how each side learns the other died.
//
// Anything else (no such socket: another host; another user; a wrong or
// late token) ends the attempt and the worker stays on its socket.

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/net/shm_channel.h"
#include "common/wire/messages.h"

namespace ps {

inline constexpr absl::Duration kShmOfferTtl = absl::Seconds(10);
// Offers not fetched yet (a token each; the region is made on fetching): a
// peer asking again and again cannot make a server keep more than this many.
inline constexpr size_t kShmMaxPendingOffers = 64;

// The server's side: a listening abstract Unix socket and a thread that
// hands granted channels over.
class ShmAcceptor {
 public:
  // kUnavailable when the socket cannot be made.
  static absl::StatusOr<std::unique_ptr<ShmAcceptor>> Start(uint64_t ring_bytes);
  ~ShmAcceptor();

  // A new channel for the peer `routing_id` (authenticated as `user_id`):
  // the grant to send it. The channel comes out of TakeReady() once the
  // peer fetched it. kResourceExhausted with kShmMaxPendingOffers waiting.
  absl::StatusOr<ShmGrantMsg> Offer(const std::string& routing_id, const std::string& user_id);

  struct Ready {
    std::unique_ptr<ShmChannel> channel;  // its peer socket set
    std::string routing_id;
    std::string user_id;
  };
  std::vector<Ready> TakeReady();
  // Readable when TakeReady has something.
  int ready_fd() const { return ready_fd_; }
  const std::string& socket_name() const { return name_; }
  uint64_t handed_over() const { return handed_over_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  struct Pending {
    std::string routing_id;
    std::string user_id;
    absl::Time expires;
  };
  ShmAcceptor(int listen_fd, std::string name, uint64_t ring_bytes, int ready_fd, int stop_fd);
  void Loop();
  // One connection: token in, descriptors out, confirmation in. Takes `fd`.
  void Serve(int fd);
  // The offer whose token the peer on `fd` presents, if it runs as this
  // user and the token is good; else `why` not.
  std::optional<Pending> Redeem(int fd, std::string* why);
  // Counts and logs a refusal, answers it when `answer`, closes `fd`.
  void Refuse(int fd, const std::string& why, bool answer);

  const int listen_fd_;
  const std::string name_;
  const uint64_t ring_bytes_;
  const int ready_fd_;
  const int stop_fd_;
  std::atomic<uint64_t> handed_over_{0}, refused_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);  // by token
  std::vector<Ready> ready_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The worker's side: fetches the channel `grant` describes, its peer socket
// set. kUnavailable when the socket is not reachable from here (another
// host or network namespace) or the server refuses; kPermissionDenied when
// the listener runs as another user; kDeadlineExceeded past `timeout`.
absl::StatusOr<std::unique_ptr<ShmChannel>> FetchShmChannel(const ShmGrantMsg& grant, absl::Duration timeout);
// The answer to an offer (ShmOfferMsg): the channel a grant describes
// (FetchShmChannel), the refusal an error carries, or kDataLoss naming any
// other body.
absl::StatusOr<std::unique_ptr<ShmChannel>> ChannelFromAnswer(const Envelope& answer, absl::Duration timeout);

}  // namespace ps

#endif  // PS_COMMON_NET_SHM_HANDSHAKE_H_
