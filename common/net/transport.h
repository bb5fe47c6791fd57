#ifndef PS_COMMON_NET_TRANSPORT_H_
#define PS_COMMON_NET_TRANSPORT_H_

// Moving multipart messages over ZeroMQ, and nothing else: no update rules, no
// roles. A message is [routing id (ROUTER side only)] [header] [payload...].
//
// Every function here uses the socket it is given from the calling thread; a
// socket belongs to one thread (ZeroMQ's rule), which the caller guarantees.

#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/net/security.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps {

// Every socket drops a TCP connection whose data has gone unacknowledged
// this long (TCP_USER_TIMEOUT) and dials again: what that connection's
// kernel buffers held is lost, so a peer silent this long must be sent its
// requests again once it answers (worker/client/server_reachability.h).
inline constexpr absl::Duration kTcpUserTimeout = absl::Seconds(5);

// Which limit a socket puts on each frame it receives (ZMQ_MAXMSGSIZE: a
// larger frame is dropped by ZeroMQ, with its connection, before it is
// allocated). kControl: to and from the scheduler, header frames only
// (kMaxHeaderBytes). kData: between servers and workers, one tensor slice
// (NodeSecurity::max_frame_bytes()).
enum class Traffic { kControl, kData };

// The most frames one message may have: a routing id, a header and one
// payload per slice (kMaxSlicesPerMessage).
inline constexpr size_t kMaxFramesPerMessage = kMaxSlicesPerMessage + 2;

// "HOST:PORT" -> "tcp://HOST:PORT"; "tcp://..." and "ipc://..." unchanged.
// kInvalidArgument for anything else (no port, port out of range, bad scheme).
absl::StatusOr<std::string> NormalizeEndpoint(absl::string_view address);

// A ROUTER socket bound to `endpoint` ("tcp://127.0.0.1:0" picks a free port).
// `*bound` receives the endpoint others connect to; a wildcard host
// (0.0.0.0 or *) is replaced by `advertise_host`. With keys in `security`
// it is a CURVE server: its context needs a ZapHandler (common/net/zap_handler.h)
// started before this call. Frames over the `traffic` limit are dropped.
// kUnavailable when the bind fails (address in use, no such interface);
// NodeSecurity::Apply's errors.
absl::StatusOr<zmq::socket_t> BindRouter(zmq::context_t& context, const std::string& endpoint,
                                         const std::string& advertise_host, std::string* bound,
                                         const NodeSecurity& security = NodeSecurity(),
                                         Traffic traffic = Traffic::kData);

// A DEALER socket connected to `endpoint`. ZeroMQ connects in the background;
// kInvalidArgument only for an endpoint it cannot parse. With keys in
// `security` it is a CURVE client of the peer whose public key is
// `server_public_key` (kFailedPrecondition when that is empty). A handshake
// that fails (wrong key, key not admitted) is retried by ZeroMQ without a
// word: requests on the socket then end by their deadlines.
absl::StatusOr<zmq::socket_t> ConnectDealer(zmq::context_t& context, const std::string& endpoint,
                                            const NodeSecurity& security = NodeSecurity(),
                                            Traffic traffic = Traffic::kData, absl::string_view server_public_key = "");

// One received message. Payload frames are ZeroMQ's own buffers, read in place.
struct RawMessage {
  zmq::message_t routing_id;  // empty on a DEALER
  zmq::message_t header;
  std::vector<zmq::message_t> payloads;
  // ROUTER with CURVE: the public key (Z85) the sender's connection
  // authenticated with; empty on a plaintext socket and on a DEALER.
  std::string user_id;
};

// Receives one whole message without blocking; call when poll says the socket
// is readable. kUnavailable when nothing is there (EAGAIN); kDataLoss when a
// ROUTER message has no header frame; kResourceExhausted (logged) for a
// message of more than kMaxFramesPerMessage frames, which is read to its end
// and dropped without keeping its frames.
absl::StatusOr<RawMessage> ReceiveMessage(zmq::socket_t& socket, bool routed);

// Sends `envelope` as the header frame followed by `payloads` (moved out; their
// buffers are handed to ZeroMQ as they are, zero-copy). `routing_id` is
// required on a ROUTER socket and must be null on a DEALER.
// kUnavailable when the peer is unknown or gone (ROUTER), when a DEALER has
// no connection left (after its peer refused the handshake; never blocks on
// that), or when the send fails.
absl::Status SendMessage(zmq::socket_t& socket, const zmq::message_t* routing_id, const Envelope& envelope,
                         std::vector<zmq::message_t> payloads = {});

// Bytes of a frame as a span.
inline absl::Span<const uint8_t> Bytes(const zmq::message_t& m) {
  return {static_cast<const uint8_t*>(m.data()), m.size()};
}

}  // namespace ps

#endif  // PS_COMMON_NET_TRANSPORT_H_
