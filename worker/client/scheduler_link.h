#ifndef PS_WORKER_CLIENT_SCHEDULER_LINK_H_
#define PS_WORKER_CLIENT_SCHEDULER_LINK_H_

// The client's link to the scheduler: its socket, this node's identity in
// the job (its id, rank and incarnation, which its messages carry), and the
// node runtime (common/net/node_runtime.h) that decides when a heartbeat is
// due, when a restarted scheduler is asked to take this node back, and when
// the scheduler is presumed gone. The I/O thread (kv_client_internal.h)
// owns it and reads its socket.
//
// Not thread-safe: its owner's I/O lock guards it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/net/node_runtime.h"
#include "common/net/security.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps::client_internal {

class SchedulerLink {
 public:
  // `options.scheduler`: the scheduler's endpoint.
  explicit SchedulerLink(NodeRuntimeOptions options);
  SchedulerLink(const SchedulerLink&) = delete;
  SchedulerLink& operator=(const SchedulerLink&) = delete;

  // Connects to the scheduler with the client's keys (the error of
  // ConnectDealer) and starts the registration's clock.
  absl::Status Connect(zmq::context_t& context, const NodeSecurity& security);
  // Closes the socket, dropping what is queued on it (linger 0).
  void Close();

  // This node in the job, from the scheduler's answer to its registration;
  // heartbeats start once it has an id.
  void set_identity(uint32_t node_id, int rank, uint64_t incarnation);
  uint32_t node_id() const { return node_id_; }
  int rank() const { return rank_; }
  uint64_t incarnation() const { return incarnation_; }

  NodeRuntime& runtime() { return runtime_; }

  zmq::socket_t& socket() { return socket_; }
  // Whether the socket may hold a message its descriptor will not announce
  // (as ServerLink::unsettled).
  bool unsettled() const { return unsettled_; }
  void set_unsettled(bool unsettled) { unsettled_ = unsettled; }
  // Sends on the socket, which is unsettled from then on.
  absl::Status Send(const Envelope& envelope, std::vector<zmq::message_t> payloads = {});

  // The heartbeat to send now, if one is due or `now` (none before the node
  // has an id), naming the servers this worker cannot reach.
  std::optional<Envelope> HeartbeatDue(std::vector<UnreachableServer> unreachable = {}, bool now = false);
  // The scheduler refused this node's connection (kUnauthenticated: it was
  // restarted): the registration under this node's id to send now as
  // request `id`, once per interval (none before the node has an id).
  std::optional<Envelope> Reregistration(uint64_t id, const std::string& advertise, const std::string& public_key);
  // Whether request `id` is the re-registration in flight.
  bool IsReregistration(uint64_t id) const { return reregister_id_ != 0 && id == reregister_id_; }
  // Its answer came.
  void Reregistered() { reregister_id_ = 0; }

 private:
  const std::string endpoint_;
  zmq::socket_t socket_;  // after Connect
  bool unsettled_ = true;
  NodeRuntime runtime_;
  uint32_t node_id_ = 0;
  int rank_ = -1;
  uint64_t incarnation_ = 0;
  uint64_t reregister_id_ = 0;  // the re-registration in flight
};

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_SCHEDULER_LINK_H_
