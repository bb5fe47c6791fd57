#include "common/net/poll_set.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Two PAIR sockets over inproc: `to` sends, `from` is polled.
class PollSetTest : public ::testing::Test {
 protected:
  PollSetTest() : from_(context_, zmq::socket_type::pair), to_(context_, zmq::socket_type::pair) {
    from_.bind("inproc://poll-set-test");
    to_.connect("inproc://poll-set-test");
  }
  void SendOne(uint64_t request_id) {
    Envelope env{kProtocolVersion, request_id, 1, HeartbeatMsg{}};
    ASSERT_TRUE(SendMessage(to_, nullptr, env).ok());
  }

  zmq::context_t context_;
  zmq::socket_t from_, to_;
};

TEST_F(PollSetTest, ReportsTheReadableItemsByTagInTheOrderAdded) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  PollSet poll;
  poll.AddFd(fd, 7);
  poll.Add(from_, 3);
  poll.Wait(absl::ZeroDuration());
  EXPECT_THAT(poll.ready(), IsEmpty());
  SendOne(1);
  poll.Wait(absl::Seconds(10));  // returns as soon as the message is there
  EXPECT_THAT(poll.ready(), ElementsAre(3));
  const uint64_t one = 1;
  ASSERT_EQ(write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  poll.Wait(absl::Seconds(10));
  EXPECT_THAT(poll.ready(), ElementsAre(7, 3));
  EXPECT_TRUE(poll.IsReady(7));
  EXPECT_FALSE(poll.IsReady(4));
  poll.Clear();
  EXPECT_TRUE(poll.empty());
  close(fd);
}

TEST_F(PollSetTest, DrainReadsAtMostMaxMessagesInOrder) {
  for (uint64_t id = 1; id <= 5; ++id) SendOne(id);
  PollSet poll;
  poll.Add(from_, 0);
  poll.Wait(absl::Seconds(10));
  ASSERT_TRUE(poll.IsReady(0));
  std::vector<uint64_t> seen;
  auto note = [&](RawMessage raw) {
    auto env = DecodeEnvelope(Bytes(raw.header));
    if (!env.ok()) return env.status();
    seen.push_back(env->request_id);
    return absl::OkStatus();
  };
  ASSERT_TRUE(DrainMessages(from_, /*routed=*/false, 3, note).ok());
  EXPECT_THAT(seen, ElementsAre(1, 2, 3));
  ASSERT_TRUE(DrainMessages(from_, /*routed=*/false, 100, note).ok());
  EXPECT_THAT(seen, ElementsAre(1, 2, 3, 4, 5)) << "stops when nothing is left";
}

// The hazard AddSocketFd's `unsettled` covers: any call into a socket (here
// ZMQ_EVENTS; in a loop, a send) may consume the command that raised its
// descriptor, and the message it announced then waits with the descriptor
// silent. A socket marked unsettled is reported at once; a drain to the end
// settles it, and the next message raises the descriptor again.
TEST_F(PollSetTest, AnUnsettledSocketIsReportedWithoutWaitingAndADrainToTheEndSettlesIt) {
  SendOne(1);
  ASSERT_NE(from_.get(zmq::sockopt::events) & ZMQ_POLLIN, 0) << "the message is there";
  PollSet poll;
  poll.AddSocketFd(from_, 5, /*unsettled=*/false);
  poll.Wait(absl::Milliseconds(50));
  EXPECT_THAT(poll.ready(), IsEmpty()) << "its descriptor no longer says so";
  poll.Clear();
  poll.AddSocketFd(from_, 5, /*unsettled=*/true);
  const absl::Time t0 = absl::Now();
  poll.Wait(absl::Seconds(30));
  EXPECT_THAT(poll.ready(), ElementsAre(5));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(30)) << "reported without waiting";
  std::vector<uint64_t> seen;
  bool unsettled = true;
  ASSERT_TRUE(DrainMessages(
                  from_, /*routed=*/false, 100,
                  [&](RawMessage raw) {
                    auto env = DecodeEnvelope(Bytes(raw.header));
                    seen.push_back(env.ok() ? env->request_id : 0);
                    return absl::OkStatus();
                  },
                  &unsettled)
                  .ok());
  EXPECT_THAT(seen, ElementsAre(1));
  EXPECT_FALSE(unsettled) << "it stopped at a receive that found nothing";
  poll.Clear();
  poll.AddSocketFd(from_, 5, unsettled);
  SendOne(2);
  poll.Wait(absl::Seconds(30));  // returns as soon as the message is there
  EXPECT_THAT(poll.ready(), ElementsAre(5));
}

TEST_F(PollSetTest, ADrainThatStopsEarlyLeavesTheSocketUnsettled) {
  for (uint64_t id = 1; id <= 3; ++id) SendOne(id);
  bool unsettled = false;
  const auto count = [](RawMessage) { return absl::OkStatus(); };
  ASSERT_TRUE(DrainMessages(from_, /*routed=*/false, 3, count, &unsettled).ok());
  EXPECT_TRUE(unsettled) << "stopped at its bound: more may wait";
  const absl::Status s = DrainMessages(
      from_, /*routed=*/false, 100, [](RawMessage) { return absl::AbortedError("stop"); }, &unsettled);
  EXPECT_EQ(s, absl::OkStatus()) << "nothing was left to hand over";
  EXPECT_FALSE(unsettled);
  SendOne(4);
  SendOne(5);
  EXPECT_EQ(DrainMessages(
                from_, /*routed=*/false, 100, [](RawMessage) { return absl::AbortedError("stop"); }, &unsettled),
            absl::AbortedError("stop"));
  EXPECT_TRUE(unsettled) << "its handler stopped it: one more waits";
}

TEST_F(PollSetTest, DrainStopsAtTheFirstErrorOfItsHandlerAndReturnsIt) {
  for (uint64_t id = 1; id <= 3; ++id) SendOne(id);
  int handled = 0;
  const absl::Status s = DrainMessages(from_, /*routed=*/false, 100, [&](RawMessage) {
    ++handled;
    return absl::AbortedError("scheduler ended the job");
  });
  EXPECT_EQ(s, absl::AbortedError("scheduler ended the job"));
  EXPECT_EQ(handled, 1);
}

// Both ways of watching a socket: zmq_poll (Add) and poll(2) on its
// descriptor (AddSocketFd).
class PollSetSignalTest : public PollSetTest, public ::testing::WithParamInterface<bool> {
 protected:
  void Watch(PollSet& poll) {
    if (GetParam()) {
      // Settled first: the descriptor is up at the start (the connection's
      // own commands), and a drain that finds nothing takes those.
      bool unsettled = true;
      ASSERT_TRUE(DrainMessages(
                      from_, /*routed=*/false, 100, [](RawMessage) { return absl::OkStatus(); }, &unsettled)
                      .ok());
      ASSERT_FALSE(unsettled);
      poll.AddSocketFd(from_, 7, unsettled);
    } else {
      poll.Add(from_, 7);
    }
  }
};

TEST_P(PollSetSignalTest, ASignalDuringWaitEndsItWithNothingReady) {
  // What ps_server's SIGTERM handler does to its loop: the handler runs on
  // the polling thread, zmq_poll fails with EINTR.
  struct sigaction handler {};
  handler.sa_handler = [](int) {};
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &handler, &old), 0);
  PollSet poll;
  Watch(poll);
  std::atomic<bool> waited{false};
  const pthread_t self = pthread_self();
  std::thread signaller([&] {
    while (!waited.load()) {  // until the signal lands inside Wait
      pthread_kill(self, SIGUSR1);
      absl::SleepFor(absl::Milliseconds(20));  // pacing the signals, not synchronisation
    }
  });
  const absl::Time t0 = absl::Now();
  poll.Wait(absl::Seconds(30));
  waited.store(true);
  signaller.join();
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_THAT(poll.ready(), IsEmpty());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(30));  // ended by the signal, not the timeout
  SendOne(3);                                      // and the set still works
  poll.Wait(absl::Seconds(5));
  EXPECT_THAT(poll.ready(), ElementsAre(7));
}

INSTANTIATE_TEST_SUITE_P(ZmqPollOrDescriptor, PollSetSignalTest, ::testing::Bool());

}  // namespace
}  // namespace ps
