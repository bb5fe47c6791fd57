#include "worker/train/stage_link.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/transport.h"

namespace ps {
namespace {

constexpr uint32_t kMagic = 0x47535350;  // "PSSG" little-endian
constexpr uint16_t kVersion = 1;

// The header frame, little-endian on the wire (this project runs on x86-64
// and arm64, both little-endian; the fields are copied, never cast in place).
struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t kind = 0;
  uint64_t step = 0;
  uint32_t micro = 0;
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint32_t reserved = 0;
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(Header) == 40);

const char* KindName(uint16_t kind) {
  switch (kind) {
    case 1: return "activations";
    case 2: return "gradients";
    case 3: return "a step's result";
    case 4: return "evaluation";
    default: return "an unknown kind";
  }
}

// Every field of a received message against what the pipeline expects next.
absl::Status CheckHeader(const Header& h, const zmq::message_t& payload, StageLink::Kind kind, uint64_t step, int micro,
                         int cols, int max_rows, const std::string& peer) {
  const std::string from = absl::StrCat("message from ", peer, ": ");
  if (h.magic != kMagic || h.version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(from, "not a stage message of version ", kVersion));
  }
  if (h.kind != static_cast<uint16_t>(kind) || h.step != step || h.micro != static_cast<uint32_t>(micro)) {
    return absl::InvalidArgumentError(absl::StrCat(from, KindName(h.kind), " of step ", h.step, " micro-batch ",
                                                   h.micro, " where ", KindName(static_cast<uint16_t>(kind)),
                                                   " of step ", step, " micro-batch ", micro, " come next"));
  }
  if (h.cols != static_cast<uint32_t>(cols) || h.rows < 1 || h.rows > static_cast<uint32_t>(max_rows)) {
    return absl::InvalidArgumentError(
        absl::StrCat(from, h.rows, " x ", h.cols, " where 1..", max_rows, " x ", cols, " fit"));
  }
  const uint64_t want = uint64_t{h.rows} * h.cols * sizeof(float);
  if (h.payload_bytes != want || payload.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(from, "a payload of ", payload.size(), " bytes (header: ",
                                                   h.payload_bytes, ") for ", h.rows, " x ", h.cols, " floats"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<StageLink>> StageLink::Listen(const std::string& bind, const std::string& advertise_host,
                                                             const NodeSecurity& own, std::string peer_public_key,
                                                             std::string peer) {
  std::unique_ptr<StageLink> link(new StageLink());
  link->listener_ = true;
  link->peer_ = std::move(peer);
  AuthorizedKeys admitted{{}, link->peer_};
  if (!peer_public_key.empty()) admitted.keys.insert(peer_public_key);
  const NodeSecurity security = own.Admitting(std::move(admitted));
  PS_ASSIGN_OR_RETURN(std::string endpoint, NormalizeEndpoint(bind));
  PS_ASSIGN_OR_RETURN(link->zap_, StartZapHandler(link->context_, security, "stage link"));
  PS_ASSIGN_OR_RETURN(link->socket_,
                      BindRouter(link->context_, endpoint, advertise_host, &link->endpoint_, security, Traffic::kData));
  // A reply to a predecessor no longer connected is an error, not a silent drop.
  link->socket_.set(zmq::sockopt::router_mandatory, true);
  return link;
}

absl::StatusOr<std::unique_ptr<StageLink>> StageLink::Dial(const std::string& endpoint, const NodeSecurity& own,
                                                           std::string peer_public_key, std::string peer) {
  std::unique_ptr<StageLink> link(new StageLink());
  link->peer_ = std::move(peer);
  PS_ASSIGN_OR_RETURN(link->endpoint_, NormalizeEndpoint(endpoint));
  if (!own.curve()) PS_RETURN_IF_ERROR(own.CheckEndpoint(link->endpoint_, link->peer_));
  PS_ASSIGN_OR_RETURN(link->socket_,
                      ConnectDealer(link->context_, link->endpoint_, own, Traffic::kData, peer_public_key));
  return link;
}

void StageLink::Admit(const std::string& peer_public_key) {
  if (zap_ != nullptr) zap_->Authorize(AuthorizedKeys{{peer_public_key}, peer_});
}

StageLink::~StageLink() {
  // Unsent frames are dropped: the group is ending.
  if (socket_) socket_.set(zmq::sockopt::linger, 0);
}

absl::Status StageLink::Send(Kind kind, uint64_t step, int micro, int rows, int cols, std::vector<float> data) {
  if (listener_ && peer_routing_id_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("nothing heard from ", peer_, " yet: nowhere to send"));
  }
  if (rows < 1 || cols < 1 || data.size() != static_cast<size_t>(rows) * cols) {
    return absl::InvalidArgumentError(absl::StrCat(rows, " x ", cols, " does not describe ", data.size(), " floats"));
  }
  Header h;
  h.kind = static_cast<uint16_t>(kind);
  h.step = step;
  h.micro = static_cast<uint32_t>(micro);
  h.rows = static_cast<uint32_t>(rows);
  h.cols = static_cast<uint32_t>(cols);
  h.payload_bytes = data.size() * sizeof(float);
  auto* owned = new std::vector<float>(std::move(data));
  zmq::message_t payload(
      owned->data(), owned->size() * sizeof(float),
      [](void*, void* hint) { delete static_cast<std::vector<float>*>(hint); }, owned);
  const auto more = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
  try {
    // Only a message's first frame can be refused (a full queue); the others
    // then always go.
    const bool queued = listener_ ? socket_.send(zmq::buffer(peer_routing_id_), more).has_value()
                                  : socket_.send(zmq::message_t(&h, sizeof(h)), more).has_value();
    if (!queued) return absl::UnavailableError(absl::StrCat("message to ", peer_, " not queued: the link is full"));
    if (listener_) socket_.send(zmq::message_t(&h, sizeof(h)), more);
    socket_.send(std::move(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {  // the listener's peer gone (ROUTER_MANDATORY), or the context ending
    return absl::UnavailableError(absl::StrCat("message to ", peer_, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<StageLink::Tensor> StageLink::Receive(Kind kind, uint64_t step, int micro, int cols, int max_rows,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0 || zmq::poll(&item, 1, std::chrono::milliseconds(ms)) == 0) {
      return absl::DeadlineExceededError(absl::StrCat("no ", KindName(static_cast<uint16_t>(kind)), " of step ", step,
                                                      " micro-batch ", micro, " from ", peer_, " within ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::StatusOr<RawMessage> raw = ReceiveMessage(socket_, listener_);
    if (!raw.ok()) continue;  // nothing whole there yet (or an oversized message, dropped and logged)
    if (listener_) {
      const std::string id(static_cast<const char*>(raw->routing_id.data()), raw->routing_id.size());
      if (peer_routing_id_.empty()) peer_routing_id_ = id;
      if (id != peer_routing_id_) {
        return absl::InvalidArgumentError(absl::StrCat("a second connection reached the link of ", peer_));
      }
    }
    if (raw->header.size() != sizeof(Header) || raw->payloads.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("message from ", peer_, ": ", raw->header.size(),
                                                     "-byte header and ", raw->payloads.size(),
                                                     " payloads where a 40-byte header and 1 payload come"));
    }
    Header h;
    std::memcpy(&h, raw->header.data(), sizeof(h));
    PS_RETURN_IF_ERROR(CheckHeader(h, raw->payloads[0], kind, step, micro, cols, max_rows, peer_));
    return Tensor{static_cast<int>(h.rows), static_cast<int>(h.cols), std::move(raw->payloads[0])};
  }
}

}  // namespace ps
