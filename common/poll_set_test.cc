#include "common/poll_set.h"

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

TEST_F(PollSetTest, ASignalDuringWaitEndsItWithNothingReady) {
  // What ps_server's SIGTERM handler does to its loop: the handler runs on
  // the polling thread, zmq_poll fails with EINTR.
  struct sigaction handler {};
  handler.sa_handler = [](int) {};
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &handler, &old), 0);
  PollSet poll;
  poll.Add(from_, 7);
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
  SendOne(3);  // and the set still works
  poll.Wait(absl::Seconds(5));
  EXPECT_THAT(poll.ready(), ElementsAre(7));
}

}  // namespace
}  // namespace ps
