#ifndef PS_COMMON_TRANSPORT_H_
#define PS_COMMON_TRANSPORT_H_

// Moving multipart messages over ZeroMQ, and nothing else: no update rules, no
// roles. A message is [routing id (ROUTER side only)] [header] [payload...].
//
// Every function here uses the socket it is given from the calling thread; a
// socket belongs to one thread (ZeroMQ's rule), which the caller guarantees.

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/messages.h"
#include "zmq.hpp"

namespace ps {

// "HOST:PORT" -> "tcp://HOST:PORT"; "tcp://..." and "ipc://..." unchanged.
// kInvalidArgument for anything else (no port, port out of range, bad scheme).
absl::StatusOr<std::string> NormalizeEndpoint(absl::string_view address);

// A ROUTER socket bound to `endpoint` ("tcp://127.0.0.1:0" picks a free port).
// `*bound` receives the endpoint others connect to; a wildcard host
// (0.0.0.0 or *) is replaced by `advertise_host`.
// kUnavailable when the bind fails (address in use, no such interface).
absl::StatusOr<zmq::socket_t> BindRouter(zmq::context_t& context, const std::string& endpoint,
                                         const std::string& advertise_host, std::string* bound);

// A DEALER socket connected to `endpoint`. ZeroMQ connects in the background;
// kInvalidArgument only for an endpoint it cannot parse.
absl::StatusOr<zmq::socket_t> ConnectDealer(zmq::context_t& context, const std::string& endpoint);

// One received message. Payload frames are ZeroMQ's own buffers, read in place.
struct RawMessage {
  zmq::message_t routing_id;  // empty on a DEALER
  zmq::message_t header;
  std::vector<zmq::message_t> payloads;
};

// Receives one whole message without blocking; call when poll says the socket
// is readable. kUnavailable when nothing is there (EAGAIN); kDataLoss when a
// ROUTER message has no header frame.
absl::StatusOr<RawMessage> ReceiveMessage(zmq::socket_t& socket, bool routed);

// Sends `envelope` as the header frame followed by `payloads` (moved out; their
// buffers are handed to ZeroMQ as they are, zero-copy). `routing_id` is
// required on a ROUTER socket and must be null on a DEALER.
// kUnavailable when the peer is unknown or gone (ROUTER) or the send fails.
absl::Status SendMessage(zmq::socket_t& socket, const zmq::message_t* routing_id,
                         const Envelope& envelope, std::vector<zmq::message_t> payloads = {});

// Bytes of a frame as a span.
inline absl::Span<const uint8_t> Bytes(const zmq::message_t& m) {
  return {static_cast<const uint8_t*>(m.data()), m.size()};
}

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_H_
