#include "scheduler/drain_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/poll_set.h"
#include "common/net/security.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"

namespace ps {
namespace {

// A scheduler that dies with the drain under way never answers: the request
// goes again this often, to it or to its restored successor (which takes a
// repeated request for the drain under way as the same one).
constexpr absl::Duration kAskAgain = absl::Seconds(2);
// After "not now" (UNAVAILABLE: slices moving, or a restarted scheduler
// waiting for its servers).
constexpr absl::Duration kAfterUnavailable = absl::Seconds(1);

}  // namespace

absl::Status RequestDrain(const std::string& scheduler, int32_t rank, const SecurityOptions& security,
                          absl::Duration timeout) {
  PS_ASSIGN_OR_RETURN(const std::string endpoint, NormalizeEndpoint(scheduler));
  PS_ASSIGN_OR_RETURN(const NodeSecurity keys, NodeSecurity::Load(security, Role::kWorker));
  zmq::context_t context(1);
  PS_ASSIGN_OR_RETURN(zmq::socket_t socket,
                      ConnectDealer(context, endpoint, keys, Traffic::kControl, keys.scheduler_public_key()));
  const absl::Time deadline = absl::Now() + timeout;
  uint64_t asked = 0;  // the request id of the last ask; every earlier one is the same drain
  absl::Time ask_at = absl::Now();
  absl::Status last = absl::DeadlineExceededError("");
  for (;;) {
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    if (now >= ask_at) {
      PS_RETURN_IF_ERROR(SendMessage(socket, nullptr, Envelope{kProtocolVersion, ++asked, 0, DrainRequestMsg{rank}}));
      ask_at = now + kAskAgain;
    }
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(absl::ToInt64Milliseconds(std::min(ask_at, deadline) - now) + 1));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    PS_ASSIGN_OR_RETURN(RawMessage raw, ReceiveMessage(socket, /*routed=*/false));
    PS_ASSIGN_OR_RETURN(Envelope env, DecodeEnvelope(Bytes(raw.header)));
    if (env.request_id == 0 || env.request_id > asked) continue;
    if (std::holds_alternative<AckMsg>(env.body)) return absl::OkStatus();  // any ask's: the server left
    if (env.request_id != asked) continue;  // an older ask's refusal: the newer one stands
    const auto* err = std::get_if<ErrorMsg>(&env.body);
    if (err == nullptr) {
      return absl::DataLossError(absl::StrCat("the scheduler answered the drain with ", BodyName(env.body)));
    }
    last = absl::Status(err->code, err->message);
    if (err->code != absl::StatusCode::kUnavailable) {
      return asked == 1 ? last
                        : absl::Status(last.code(), absl::StrCat(last.message(), " (asked ", asked,
                                                                 " times: an earlier ask may have been answered by a "
                                                                 "scheduler that then died; see its log)"));
    }
    ask_at = absl::Now() + kAfterUnavailable;
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "no answer from the scheduler at ", endpoint, " within ", absl::FormatDuration(timeout),
      " to the drain of server ", rank, last.message().empty() ? "" : absl::StrCat(" (last: ", last.message(), ")")));
}

}  // namespace ps
