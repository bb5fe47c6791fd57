#ifndef PS_TESTS_GARBAGE_INPUT_FIXTURE_H_
#define PS_TESTS_GARBAGE_INPUT_FIXTURE_H_

// The job garbage_input_test sends its garbage to, shared by its two source
// files (garbage_input_test.cc: the socket; garbage_input_shm.cc: the
// shared-memory channel).

#include <poll.h>
#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/placement/partition_map.h"
#include "common/wire/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/job.h"
#include "tests/raw_peer.h"
#include "worker/exact_sum/exact_sum_check.h"

namespace ps {

using testing::ExpectedDenseSum;
using ::testing::HasSubstr;
using testing::Job;
using testing::RawPeer;
using testing::RawReply;

inline constexpr absl::Duration kReplyDeadline = absl::Seconds(10);
inline constexpr int64_t kDenseElements = 20000;
inline constexpr uint64_t kSliceBytes = 16384;

// ---- the job --------------------------------------------------------------------

// One scheduler, one server, one ps_exact_sum worker that trains until the
// test tells it to stop (SIGTERM), so that every kind of garbage below
// reaches the server while it trains however slow this machine is (a
// per-step pause keeps its load light), and what the test knows of them.
class GarbageInputTest : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr int kMaxSteps = 1000000;

  void SetUp() override {
    const absl::Status core = StartCore();
    ASSERT_TRUE(core.ok()) << core;
    absl::StatusOr<std::string> server = job_.servers()[0].WaitForLine("ps_server listening on ", absl::Seconds(20));
    ASSERT_TRUE(server.ok()) << server.status();
    endpoint_ = *server;
    ASSERT_TRUE(absl::SimpleAtoi(endpoint_.substr(endpoint_.rfind(':') + 1), &port_)) << endpoint_;
    ASSERT_TRUE(job_.StartWorker("ps_exact_sum",
                                 {"--consistency=" + GetParam(), absl::StrCat("--steps=", kMaxSteps), "--until_stopped",
                                  absl::StrCat("--dense_elements=", kDenseElements),
                                  absl::StrCat("--slice_bytes=", kSliceBytes), "--slow_rank=0", "--slow_step_ms=20"})
                    .ok());
    absl::StatusOr<std::unique_ptr<RawPeer>> dealer = RawPeer::Connect(endpoint_);
    ASSERT_TRUE(dealer.ok()) << dealer.status();
    dealer_ = *std::move(dealer);
    ASSERT_NO_FATAL_FAILURE(LearnTheJob());
  }

  // The scheduler and the one server.
  absl::Status StartCore() {
    absl::Status s = job_.StartScheduler(1, 1);
    return s.ok() ? job_.StartServer(0) : s;
  }

  // Sends `frames` and returns the error the server answers with (kUnknown
  // for anything else, a reply naming another request included).
  ErrorMsg Refusal(std::vector<zmq::message_t> frames, uint64_t request_id) {
    return dealer_->Refusal(std::move(frames), request_id, kReplyDeadline);
  }

  absl::StatusOr<StatsReplyMsg> Stats(uint64_t request_id) {
    absl::Status sent = dealer_->Send(Envelope{kProtocolVersion, request_id, 0, StatsRequestMsg{}});
    if (!sent.ok()) return sent;
    absl::StatusOr<RawReply> reply = dealer_->Receive(kReplyDeadline);
    if (!reply.ok()) return reply.status();
    if (const auto* stats = std::get_if<StatsReplyMsg>(&reply->env.body)) return *stats;
    return absl::InternalError(absl::StrCat("stats answered with a ", BodyName(reply->env.body)));
  }

  // The slices the exact-sum model has (computed here, checked against the
  // server) and the node id of the worker, found by asking the server.
  void LearnTheJob() {
    ExactSumOptions options;
    options.dense_elements = kDenseElements;
    options.slice_bytes = kSliceBytes;
    const ModelSpec model = ExactSumModel(options, 1);
    absl::StatusOr<PartitionMap> map =
        PartitionMap::Build(model.tensors, 1, model.placement, static_cast<int>(model.tables.size()));
    ASSERT_TRUE(map.ok()) << map.status();
    slices_ = map->slices();
    // The model exists once the server holds slices; polled with a deadline.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    StatsReplyMsg stats;
    while (stats.slices_held == 0) {
      ASSERT_LT(absl::Now(), deadline) << "the server never received the model";
      absl::StatusOr<StatsReplyMsg> s = Stats(next_id_++);
      ASSERT_TRUE(s.ok()) << s.status();
      stats = *s;
      if (stats.slices_held == 0) ::poll(nullptr, 0, 10);  // paces the polling; the deadline above bounds it
    }
    ASSERT_EQ(stats.held_keys.size(), slices_.size());
    // Node ids are 1 and 2 (one server, one worker, in registration order):
    // the one the server takes as a worker answers an unknown key with
    // kNotFound, the other with kPermissionDenied.
    for (uint32_t id : {1u, 2u}) {
      const ErrorMsg e = Pull(id, PullRequestMsg{0, {kUnknownKey}, 100});
      if (e.code == absl::StatusCode::kNotFound)
        worker_id_ = id;
      else
        EXPECT_EQ(e.code, absl::StatusCode::kPermissionDenied) << e.message;
    }
    ASSERT_NE(worker_id_, 0u) << "no node id is the worker's";
  }

  ErrorMsg Pull(uint32_t sender, PullRequestMsg pull) {
    const uint64_t id = next_id_++;
    std::vector<zmq::message_t> frames;
    frames.push_back(RawPeer::HeaderFrame(Envelope{kProtocolVersion, id, sender, std::move(pull)}));
    return Refusal(std::move(frames), id);
  }

  // A push from the worker's node id with `frames` as payloads.
  ErrorMsg Push(PushRequestMsg push, std::vector<zmq::message_t> payloads, uint32_t version = kProtocolVersion,
                uint32_t sender = 0) {
    const uint64_t id = next_id_++;
    std::vector<zmq::message_t> frames;
    frames.push_back(RawPeer::HeaderFrame(Envelope{version, id, sender == 0 ? worker_id_ : sender, std::move(push)}));
    for (auto& p : payloads) frames.push_back(std::move(p));
    return Refusal(std::move(frames), id);
  }

  ErrorMsg SendBody(::ps::Body body, uint32_t sender) {
    const uint64_t id = next_id_++;
    std::vector<zmq::message_t> frames;
    frames.push_back(RawPeer::HeaderFrame(Envelope{kProtocolVersion, id, sender, std::move(body)}));
    return Refusal(std::move(frames), id);
  }

  const Slice& slice(size_t i) const { return slices_[i]; }
  // A push of the whole of slice i with `value` everywhere, at clock 0.
  std::pair<PushRequestMsg, std::vector<zmq::message_t>> WholeSlice(size_t i, float value) {
    std::vector<zmq::message_t> frames;
    frames.push_back(RawPeer::FloatFrame(slice(i).length, value));
    return {PushRequestMsg{0, {SliceData{slice(i).key, slice(i).length, 0}}, std::nullopt}, std::move(frames)};
  }

  static std::vector<zmq::message_t> Frames(zmq::message_t a) {
    std::vector<zmq::message_t> v;
    v.push_back(std::move(a));
    return v;
  }

  // Each kind of garbage, every reply checked for its error code.
  void SendUndecodableHeaders();
  void SendWrongIdentities();  // versions, senders, slice keys
  void SendWrongPayloads();    // lengths, frame counts, frame sizes
  void SendWrongValues();      // repeated keys, clocks, NaN, a bad then-pull
  void SendWrongBodies();      // message types a server does not take
  void SendWrongRows();        // embedding-table rows: sizes, counts, NaN, keys
  void SendRawTcpGarbage();    // bytes that are not ZMTP
  void SpeakBrokenZmtp();      // ZMTP by hand: messages cut off, frames claiming gigabytes
  void SendShmGarbage();       // the shared-memory channel: offers, tokens, a corrupt ring (garbage_input_shm.cc)

  // The worker told to stop, then its exact sums over the steps it made,
  // the server alive and every process exiting 0.
  void ExpectTheJobEndsExact() {
    absl::StatusOr<StatsReplyMsg> stats = Stats(next_id_++);
    ASSERT_TRUE(stats.ok()) << "server not answering after the garbage: " << stats.status();
    ASSERT_EQ(::kill(job_.workers()[0].pid(), SIGTERM), 0);
    job_.ExpectAllExitZero();
    const std::string out = job_.workers()[0].stdout_text();
    const size_t at = out.find(" steps=");
    ASSERT_NE(at, std::string::npos) << out;
    int steps = 0;
    ASSERT_TRUE(absl::SimpleAtoi(out.substr(at + 7, out.find(' ', at + 7) - at - 7), &steps)) << out;
    EXPECT_LT(steps, kMaxSteps) << "the worker ended before it was told to: " << out;
    EXPECT_THAT(out, HasSubstr(absl::StrFormat(" dense_sum=%.1f ", ExpectedDenseSum(1, steps, kDenseElements)))) << out;
  }

  static constexpr uint32_t kUnknownKey = 0xfffffff0u;
  // A gradient value that would break the worker's exact sums if a refused
  // push were ever applied.
  static constexpr float kFinite = 1000.0f;

  Job job_;
  std::string endpoint_;
  int port_ = 0;
  std::unique_ptr<RawPeer> dealer_;
  std::vector<Slice> slices_;
  uint32_t worker_id_ = 0;
  uint64_t next_id_ = 1000;
};

}  // namespace ps

#endif  // PS_TESTS_GARBAGE_INPUT_FIXTURE_H_
