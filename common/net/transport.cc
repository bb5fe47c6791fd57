#include "common/net/transport.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/wire/codec.h"
#include "glog/logging.h"

namespace ps {
namespace {

// Replies to a node that has gone must not pile up without bound, nor block
// the one thread that serves everyone.
constexpr int kLingerMs = 2000;
constexpr int kRouterSendHwm = 1024;
constexpr int kListenBacklog = 65535;  // the most a kernel takes; it caps this at somaxconn

// A network cut that heals must cost about the cut, not TCP's backoff
// after it: a connection whose data has gone unacknowledged for
// kTcpUserTimeout is dropped and dialled again every kReconnectMs, each
// attempt given up after kConnectTimeoutMs (a SYN lost in the cut would
// otherwise be retried by the kernel 1, 3, 7... s later); an idle
// connection whose peer vanished is found by keepalives within about 10 s.
// The nodes' own heartbeats and probes find a cut first (a heartbeat
// timeout); these bound what TCP keeps stuck behind it.
constexpr int kReconnectMs = 100;
constexpr int kConnectTimeoutMs = 1000;
constexpr int kKeepaliveIdleS = 5;
constexpr int kKeepaliveIntervalS = 1;
constexpr int kKeepaliveCount = 5;

void CommonOptions(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, kLingerMs);
  s.set(zmq::sockopt::sndhwm, 0);  // a client's I/O thread never blocks; its callers bound what is in flight
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::tcp_maxrt, static_cast<int>(absl::ToInt64Milliseconds(kTcpUserTimeout)));
  s.set(zmq::sockopt::reconnect_ivl, kReconnectMs);
  s.set(zmq::sockopt::reconnect_ivl_max, 0);  // no backoff: every kReconnectMs
  s.set(zmq::sockopt::connect_timeout, kConnectTimeoutMs);
  s.set(zmq::sockopt::tcp_keepalive, 1);
  s.set(zmq::sockopt::tcp_keepalive_idle, kKeepaliveIdleS);
  s.set(zmq::sockopt::tcp_keepalive_intvl, kKeepaliveIntervalS);
  s.set(zmq::sockopt::tcp_keepalive_cnt, kKeepaliveCount);
}

uint64_t FrameLimit(const NodeSecurity& security, Traffic traffic) {
  return traffic == Traffic::kControl ? kMaxHeaderBytes : security.max_frame_bytes();
}

}  // namespace

absl::StatusOr<std::string> NormalizeEndpoint(absl::string_view address) {
  if (absl::StartsWith(address, "ipc://") || absl::StartsWith(address, "inproc://")) {
    return std::string(address);
  }
  absl::string_view rest = address;
  if (absl::StartsWith(rest, "tcp://")) rest.remove_prefix(6);
  const size_t colon = rest.rfind(':');
  int port = -1;
  if (rest.find("://") != absl::string_view::npos || colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not HOST:PORT, tcp://HOST:PORT or ipc://PATH"));
  }
  return absl::StrCat("tcp://", rest);
}

absl::StatusOr<zmq::socket_t> BindRouter(zmq::context_t& context, const std::string& endpoint,
                                         const std::string& advertise_host, std::string* bound,
                                         const NodeSecurity& security, Traffic traffic) {
  zmq::socket_t s(context, zmq::socket_type::router);
  CommonOptions(s);
  if (absl::Status st = security.Apply(s, CurveRole::kServer, FrameLimit(security, traffic)); !st.ok()) return st;
  s.set(zmq::sockopt::router_mandatory, true);  // an unknown peer is an error, not a silent drop
  // Replies to a peer that stops reading queue up to this many, then sends
  // to it fail (and are logged) instead of growing memory without bound.
  s.set(zmq::sockopt::sndhwm, kRouterSendHwm);
  // Connections not yet accepted: ZeroMQ's default of 100 drops the SYNs of
  // a job's nodes connecting at once beyond it, and each retries a second
  // later (then 2, 4...). The kernel caps it at net.core.somaxconn.
  s.set(zmq::sockopt::backlog, kListenBacklog);
  try {
    s.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", endpoint, ": ", e.what()));
  }
  std::string last = s.get(zmq::sockopt::last_endpoint);
  for (absl::string_view wildcard : {"tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:"}) {
    if (absl::StartsWith(last, wildcard)) {
      last = absl::StrCat("tcp://", advertise_host, ":", last.substr(wildcard.size()));
    }
  }
  *bound = last;
  return s;
}

absl::StatusOr<zmq::socket_t> ConnectDealer(zmq::context_t& context, const std::string& endpoint,
                                            const NodeSecurity& security, Traffic traffic,
                                            absl::string_view server_public_key) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  CommonOptions(s);
  absl::Status st = security.Apply(s, CurveRole::kClient, FrameLimit(security, traffic), server_public_key);
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat(endpoint, ": ", st.message()));
  try {
    s.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot connect to ", endpoint, ": ", e.what()));
  }
  return s;
}

absl::StatusOr<RawMessage> ReceiveMessage(zmq::socket_t& socket, bool routed) {
  std::vector<zmq::message_t> frames;
  size_t dropped = 0;
  while (true) {
    zmq::message_t frame;
    auto got = socket.recv(frame, frames.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!got) return absl::UnavailableError("no message waiting");
    const bool more = frame.more();
    // ZeroMQ holds the whole message already; past the cap we only read the
    // rest to drop it, never growing our own list.
    if (frames.size() < kMaxFramesPerMessage) {
      frames.push_back(std::move(frame));
    } else {
      ++dropped;
    }
    if (!more) break;
  }
  if (dropped > 0) {
    const std::string what = absl::StrCat("dropped a message of ", frames.size() + dropped, " frames; at most ",
                                          kMaxFramesPerMessage, " allowed");
    LOG(WARNING) << "transport: " << what;
    return absl::ResourceExhaustedError(what);
  }
  RawMessage out;
  size_t next = 0;
  if (routed) out.routing_id = std::move(frames[next++]);
  if (next >= frames.size()) return absl::DataLossError("message has no header frame");
  out.header = std::move(frames[next++]);
  if (routed) {
    // Set by our ZapHandler on every frame of a CURVE connection.
    if (const char* user = zmq_msg_gets(out.header.handle(), "User-Id")) out.user_id = user;
  }
  out.payloads.reserve(frames.size() - next);
  for (; next < frames.size(); ++next) out.payloads.push_back(std::move(frames[next]));
  return out;
}

absl::Status SendMessage(zmq::socket_t& socket, const zmq::message_t* routing_id, const Envelope& envelope,
                         std::vector<zmq::message_t> payloads) {
  kj::Array<capnp::word> words = EncodeEnvelope(envelope);
  zmq::message_t header(words.begin(), words.size() * sizeof(capnp::word));
  try {
    if (routing_id != nullptr) {
      zmq::message_t id(routing_id->data(), routing_id->size());
      if (!socket.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return absl::UnavailableError("peer is not accepting messages");
      }
    }
    auto header_flags = payloads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    // A DEALER queues while it connects and never fills (no HWM); it refuses
    // a message only when it has no connection left at all, which is what
    // ZeroMQ leaves after a peer refused its handshake (a key not admitted).
    // Blocking there would wait forever: fail instead.
    if (routing_id == nullptr) header_flags = header_flags | zmq::send_flags::dontwait;
    if (!socket.send(header, header_flags)) {
      return absl::UnavailableError(
          absl::StrCat("send of ", BodyName(envelope.body),
                       " failed: no connection to the peer (with CurveZMQ: did it refuse this node's key?)"));
    }
    for (size_t i = 0; i < payloads.size(); ++i) {
      socket.send(payloads[i], i + 1 < payloads.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH from a ROUTER: that peer has disconnected.
    return absl::UnavailableError(absl::StrCat("send of ", BodyName(envelope.body), " failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace ps
