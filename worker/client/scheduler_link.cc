#include "worker/client/scheduler_link.h"

#include <utility>

#include "common/base/status_macros.h"
#include "common/net/transport.h"

namespace ps::client_internal {

SchedulerLink::SchedulerLink(NodeRuntimeOptions options) : endpoint_(options.scheduler), runtime_(std::move(options)) {
  runtime_.set_name("client");
}

absl::Status SchedulerLink::Connect(zmq::context_t& context, const NodeSecurity& security) {
  PS_ASSIGN_OR_RETURN(socket_,
                      ConnectDealer(context, endpoint_, security, Traffic::kControl, security.scheduler_public_key()));
  runtime_.Registering();
  return absl::OkStatus();
}

void SchedulerLink::Close() {
  if (!socket_) return;
  socket_.set(zmq::sockopt::linger, 0);
  socket_.close();
}

void SchedulerLink::set_identity(uint32_t node_id, int rank, uint64_t incarnation) {
  node_id_ = node_id;
  rank_ = rank;
  incarnation_ = incarnation;
}

absl::Status SchedulerLink::Send(const Envelope& envelope, std::vector<zmq::message_t> payloads) {
  unsettled_ = true;
  return SendMessage(socket_, nullptr, envelope, std::move(payloads));
}

std::optional<Envelope> SchedulerLink::HeartbeatDue(std::vector<UnreachableServer> unreachable, bool now) {
  if (node_id_ == 0) return std::nullopt;
  if (!runtime_.HeartbeatDue() && !now) return std::nullopt;
  Envelope beat{kProtocolVersion, 0, node_id_, HeartbeatMsg{std::move(unreachable)}};
  beat.incarnation = incarnation_;
  return beat;
}

std::optional<Envelope> SchedulerLink::Reregistration(uint64_t id, const std::string& advertise,
                                                      const std::string& public_key) {
  if (node_id_ == 0 || !runtime_.ReregisterDue()) return std::nullopt;
  reregister_id_ = id;
  Envelope env{kProtocolVersion, id, node_id_,
               RegisterRequestMsg{Role::kWorker, advertise, rank_, public_key, node_id_}};
  env.incarnation = incarnation_;
  return env;
}

}  // namespace ps::client_internal
