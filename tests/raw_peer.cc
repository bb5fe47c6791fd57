#include "tests/raw_peer.h"

#include "absl/strings/str_cat.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"

namespace ps::testing {

absl::StatusOr<std::unique_ptr<RawPeer>> RawPeer::Connect(const std::string& endpoint, const NodeSecurity& security,
                                                          absl::string_view server_public_key) {
  std::unique_ptr<RawPeer> peer(new RawPeer());
  absl::StatusOr<zmq::socket_t> socket =
      ConnectDealer(peer->context_, endpoint, security, Traffic::kData, server_public_key);
  if (!socket.ok()) return socket.status();
  peer->socket_ = *std::move(socket);
  peer->socket_.set(zmq::sockopt::linger, 0);
  return peer;
}

absl::Status RawPeer::Send(std::vector<zmq::message_t> frames) {
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq::send_flags flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      // The DEALER queues without limit while it is connected (no HWM); with
      // no connection at all a blocking send would wait forever.
      if (i == 0) flags = flags | zmq::send_flags::dontwait;
      if (!socket_.send(frames[i], flags)) return absl::UnavailableError("no connection to the peer");
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("send failed: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status RawPeer::Send(const Envelope& envelope, std::vector<zmq::message_t> payloads) {
  std::vector<zmq::message_t> frames;
  frames.push_back(HeaderFrame(envelope));
  for (auto& p : payloads) frames.push_back(std::move(p));
  return Send(std::move(frames));
}

absl::StatusOr<RawReply> RawPeer::Receive(absl::Duration timeout) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, absl::ToChronoMilliseconds(timeout)) == 0) {
    return absl::DeadlineExceededError(absl::StrCat("no reply within ", absl::FormatDuration(timeout)));
  }
  absl::StatusOr<RawMessage> raw = ReceiveMessage(socket_, /*routed=*/false);
  if (!raw.ok()) return raw.status();
  absl::StatusOr<Envelope> env = DecodeEnvelope(Bytes(raw->header));
  if (!env.ok()) return env.status();
  return RawReply{*std::move(env), raw->payloads.size()};
}

ErrorMsg RawPeer::Refusal(std::vector<zmq::message_t> frames, std::optional<uint64_t> request_id,
                          absl::Duration timeout) {
  if (absl::Status sent = Send(std::move(frames)); !sent.ok()) {
    return {absl::StatusCode::kUnknown, std::string(sent.message())};
  }
  absl::StatusOr<RawReply> reply = Receive(timeout);
  if (!reply.ok()) return {absl::StatusCode::kUnknown, std::string(reply.status().message())};
  if (request_id.has_value() && reply->env.request_id != *request_id) {
    return {absl::StatusCode::kUnknown,
            absl::StrCat("reply names request ", reply->env.request_id, ", not ", *request_id)};
  }
  if (const auto* e = std::get_if<ErrorMsg>(&reply->env.body)) return *e;
  return {absl::StatusCode::kUnknown, absl::StrCat("reply is a ", BodyName(reply->env.body))};
}

zmq::message_t RawPeer::HeaderFrame(const Envelope& envelope) {
  const kj::Array<capnp::word> words = EncodeEnvelope(envelope);
  return zmq::message_t(words.begin(), words.size() * sizeof(capnp::word));
}

zmq::message_t RawPeer::FloatFrame(size_t n, float value) {
  std::vector<float> v(n, value);
  return zmq::message_t(v.data(), n * sizeof(float));
}

}  // namespace ps::testing
