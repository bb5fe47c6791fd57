#ifndef PS_TESTS_RAW_PEER_H_
#define PS_TESTS_RAW_PEER_H_

// A ZeroMQ DEALER straight to a server's port, as a hostile or broken peer
// would open one: it sends hand-built frames (undecodable headers, wrong
// payloads, pushes in another node's name) and reads the replies, every read
// with a deadline. Part of ps_testing. Not thread-safe (one ZeroMQ socket,
// with its own context).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/net/security.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps::testing {

// A reply: its decoded header and how many payload frames came with it.
struct RawReply {
  Envelope env;
  size_t payloads = 0;
};

class RawPeer {
 public:
  // Connects to `endpoint` (ZeroMQ connects in the background): plaintext, or
  // with keys in `security` a CURVE client of the server whose public key is
  // `server_public_key`. Errors: ConnectDealer's (common/net/transport.h).
  static absl::StatusOr<std::unique_ptr<RawPeer>> Connect(const std::string& endpoint,
                                                          const NodeSecurity& security = NodeSecurity(),
                                                          absl::string_view server_public_key = "");
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  // Sends `frames` as one message, as they are. kUnavailable when ZeroMQ has
  // no connection left to queue it on (what a refused handshake leaves).
  absl::Status Send(std::vector<zmq::message_t> frames);
  // Sends `envelope` as the header frame, then `payloads`.
  absl::Status Send(const Envelope& envelope, std::vector<zmq::message_t> payloads = {});
  // The next reply. kDeadlineExceeded when none comes within `timeout`; the
  // decoder's error (kDataLoss, ...) for a header that does not decode.
  absl::StatusOr<RawReply> Receive(absl::Duration timeout);
  // Sends `frames` and returns the error the server answers with. Anything
  // else (no reply, a reply that is not an error, or one naming another
  // request than `request_id` when given) comes back as kUnknown with what
  // happened in its message, for the test to fail on.
  ErrorMsg Refusal(std::vector<zmq::message_t> frames, std::optional<uint64_t> request_id, absl::Duration timeout);

  // `envelope` encoded as a header frame.
  static zmq::message_t HeaderFrame(const Envelope& envelope);
  // `n` floats of `value`, as a payload frame.
  static zmq::message_t FloatFrame(size_t n, float value);

 private:
  RawPeer() = default;

  zmq::context_t context_;
  zmq::socket_t socket_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_RAW_PEER_H_
