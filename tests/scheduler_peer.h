#ifndef PS_TESTS_SCHEDULER_PEER_H_
#define PS_TESTS_SCHEDULER_PEER_H_

// A node of a job as the scheduler sees it, played by a test: a raw peer
// (tests/raw_peer.h) with the node id and incarnation its registration got,
// which sends requests and answers the scheduler's. Every read has a
// deadline (kWait of real time: a message that takes longer is a failure).
// Header-only, part of ps_testing's headers. Not thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/wire/messages.h"
#include "gtest/gtest.h"
#include "tests/raw_peer.h"

namespace ps::testing {

class SchedulerPeer {
 public:
  static constexpr absl::Duration kWait = absl::Seconds(20);

  explicit SchedulerPeer(const std::string& endpoint) {
    auto peer = RawPeer::Connect(endpoint);
    EXPECT_TRUE(peer.ok()) << peer.status();
    if (peer.ok()) peer_ = *std::move(peer);
  }

  // A request of its own (a fresh id), or with `request_id` an answer to the scheduler's.
  void Send(Body body, std::optional<uint64_t> request_id = std::nullopt) {
    Envelope env{kProtocolVersion, request_id.value_or(next_id_++), node_id_, std::move(body)};
    env.incarnation = incarnation_;
    ASSERT_TRUE(peer_->Send(env).ok());
  }

  // Reads until a message of type M (nullopt when none comes within kWait);
  // the views passed on the way go to *views. *request_id: the message's.
  template <typename M>
  std::optional<M> Await(std::vector<ClusterViewMsg>* views = nullptr, uint64_t* request_id = nullptr) {
    while (true) {
      absl::StatusOr<RawReply> reply = peer_->Receive(kWait);
      if (!reply.ok()) return std::nullopt;
      if (auto* m = std::get_if<M>(&reply->env.body)) {
        if (request_id != nullptr) *request_id = reply->env.request_id;
        return *m;
      }
      auto* v = std::get_if<ClusterViewMsg>(&reply->env.body);
      if (v != nullptr && views != nullptr) views->push_back(*v);
    }
  }
  // Awaits the scheduler's request M and answers it with an AckMsg.
  template <typename M>
  std::optional<M> AwaitAndAck() {
    uint64_t id = 0;
    std::optional<M> m = Await<M>(nullptr, &id);
    if (m.has_value()) Send(AckMsg{}, id);
    return m;
  }

  void Register(Role role, const std::string& address, bool join = false) {
    RegisterRequestMsg m{role, address, -1, "", 0};
    m.join = join;
    Send(std::move(m));
  }
  // Re-registers as node `node_id` of rank `rank` of the job `incarnation`
  // (with a restored scheduler); false when no registration reply comes.
  bool Reconnect(Role role, const std::string& address, int32_t rank, uint32_t node_id, uint64_t incarnation) {
    node_id_ = node_id;
    incarnation_ = incarnation;
    Send(RegisterRequestMsg{role, address, rank, "", node_id});
    return Await<RegisterReplyMsg>().has_value();
  }
  // Awaits the registration's reply and keeps what it gave; false when none came.
  bool Registered() {
    std::optional<RegisterReplyMsg> reply = Await<RegisterReplyMsg>();
    if (!reply.has_value()) return false;
    node_id_ = reply->node_id;
    incarnation_ = reply->incarnation;
    return true;
  }
  // A heartbeat and its acknowledgement: the scheduler has read its clock
  // since the heartbeat was sent. The views that came first go to *views.
  bool RoundTrip(std::vector<ClusterViewMsg>* views) {
    Send(HeartbeatMsg{});
    return Await<AckMsg>(views).has_value();
  }
  uint32_t node_id() const { return node_id_; }
  uint64_t incarnation() const { return incarnation_; }

 private:
  std::unique_ptr<RawPeer> peer_;
  uint64_t next_id_ = 1;
  uint32_t node_id_ = 0;
  uint64_t incarnation_ = 0;
};

}  // namespace ps::testing

#endif  // PS_TESTS_SCHEDULER_PEER_H_
