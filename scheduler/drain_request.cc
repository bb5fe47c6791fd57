#include "scheduler/drain_request.h"

#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/messages.h"
#include "common/poll_set.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "common/transport.h"

namespace ps {

absl::Status RequestDrain(const std::string& scheduler, int32_t rank, const SecurityOptions& security,
                          absl::Duration timeout) {
  PS_ASSIGN_OR_RETURN(const std::string endpoint, NormalizeEndpoint(scheduler));
  PS_ASSIGN_OR_RETURN(const NodeSecurity keys, NodeSecurity::Load(security, Role::kWorker));
  zmq::context_t context(1);
  PS_ASSIGN_OR_RETURN(zmq::socket_t socket,
                      ConnectDealer(context, endpoint, keys, Traffic::kControl, keys.scheduler_public_key()));
  constexpr uint64_t kRequestId = 1;
  PS_RETURN_IF_ERROR(SendMessage(socket, nullptr, Envelope{kProtocolVersion, kRequestId, 0, DrainRequestMsg{rank}}));
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(absl::ToInt64Milliseconds(left) + 1));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    PS_ASSIGN_OR_RETURN(RawMessage raw, ReceiveMessage(socket, /*routed=*/false));
    PS_ASSIGN_OR_RETURN(Envelope env, DecodeEnvelope(Bytes(raw.header)));
    if (env.request_id != kRequestId) continue;
    if (const auto* err = std::get_if<ErrorMsg>(&env.body)) return absl::Status(err->code, err->message);
    if (std::holds_alternative<AckMsg>(env.body)) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat("the scheduler answered the drain with ", BodyName(env.body)));
  }
  return absl::DeadlineExceededError(absl::StrCat("no answer from the scheduler at ", endpoint, " within ",
                                                  absl::FormatDuration(timeout), " to the drain of server ", rank));
}

}  // namespace ps
