#include "common/base/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/base/http_get_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Histogram, CountsEachValueInTheFirstBucketItFits) {
  Histogram h({1, 10});
  for (double v : {0.5, 1.0, 2.0, 10.0, 11.0, 100.0}) h.Observe(v);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 2, 2}));
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 124.5);
}

TEST(MetricsEndpoint, ServesWhatWasPublishedInTextFormat) {
  auto e = MetricsEndpoint::Start({.port = 0}, {{"role", "server"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_GT((*e)->port(), 0);
  EXPECT_EQ((*e)->url(), absl::StrCat("http://127.0.0.1:", (*e)->port(), "/metrics"));
  (*e)->SetLabel("rank", "3");
  MetricsSnapshot m((*e)->labels());
  m.Counter("ps_test_pushes_total", "Pushes.", 7);
  m.Gauge("ps_test_rows", "Rows.", 12, {{"table", "0"}});
  m.Gauge("ps_test_rows", "Rows.", 5, {{"table", "1"}});
  Histogram h({0.001, 0.01});
  h.Observe(0.0005);
  h.Observe(0.005);
  h.Observe(1);
  m.Histogram("ps_test_seconds", "Latency.", h);
  (*e)->Publish(m.Take(), absl::Now());

  absl::StatusOr<std::string> body = testing::HttpGet((*e)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("# TYPE ps_test_pushes_total counter"));
  EXPECT_THAT(*body, HasSubstr("ps_test_pushes_total{role=\"server\",rank=\"3\"} 7"));
  EXPECT_THAT(*body, HasSubstr("ps_test_rows{role=\"server\",rank=\"3\",table=\"1\"} 5"));
  EXPECT_THAT(*body, HasSubstr("ps_test_seconds_bucket{role=\"server\",rank=\"3\",le=\"0.01\"} 2"));
  EXPECT_THAT(*body, HasSubstr("ps_test_seconds_bucket{role=\"server\",rank=\"3\",le=\"+Inf\"} 3"));
  EXPECT_THAT(*body, HasSubstr("ps_test_seconds_count{role=\"server\",rank=\"3\"} 3"));

  // The next publication replaces the last one.
  MetricsSnapshot later((*e)->labels());
  later.Counter("ps_test_pushes_total", "Pushes.", 9);
  (*e)->Publish(later.Take(), absl::Now());
  body = testing::HttpGet((*e)->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("ps_test_pushes_total{role=\"server\",rank=\"3\"} 9"));
  EXPECT_THAT(*body, Not(HasSubstr("ps_test_rows")));
}

TEST(MetricsEndpoint, OtherPathsAndMethodsAreRefused) {
  auto e = MetricsEndpoint::Start({.port = 0}, {});
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<std::string> body = testing::HttpGet((*e)->port(), "/other");
  EXPECT_THAT(body.status().message(), HasSubstr("404 Not Found"));
  // A client that connects and sends nothing is dropped at the deadline;
  // the next one is served.
  const int idle = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>((*e)->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(idle, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  body = testing::HttpGet((*e)->port(), "/metrics");
  close(idle);
  EXPECT_TRUE(body.ok()) << body.status();
}

TEST(MetricsEndpoint, PublishIsDueOncePerInterval) {
  auto e = MetricsEndpoint::Start({.port = 0, .publish_interval = absl::Seconds(1)}, {});
  ASSERT_TRUE(e.ok()) << e.status();
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_TRUE((*e)->PublishDue(t0));
  (*e)->Publish({}, t0);
  EXPECT_FALSE((*e)->PublishDue(t0 + absl::Milliseconds(999)));
  EXPECT_TRUE((*e)->PublishDue(t0 + absl::Seconds(1)));
}

TEST(MetricsEndpoint, APortInUseIsAnErrorNamingTheAddress) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  auto e = MetricsEndpoint::Start({.port = port}, {});
  close(fd);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(e.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
}

// A role asked to linger exits only once its last publication has been
// scraped: a job shorter than the scrape interval is still seen.
TEST(MetricsEndpoint, LingersUntilTheLastPublicationIsScraped) {
  auto e = MetricsEndpoint::Start({.port = 0, .linger = absl::Minutes(5)}, {{"role", "worker"}});
  ASSERT_TRUE(e.ok()) << e.status();
  std::unique_ptr<MetricsEndpoint> endpoint = *std::move(e);
  const int port = endpoint->port();
  MetricsSnapshot first(endpoint->labels());
  first.Counter("ps_test_steps_total", "Steps.", 1);
  endpoint->Publish(first.Take(), absl::Now());
  ASSERT_TRUE(testing::HttpGet(port, "/metrics").ok());
  // Scraped before this publication: that scrape does not count.
  MetricsSnapshot last(endpoint->labels());
  last.Counter("ps_test_steps_total", "Steps.", 2);
  endpoint->Publish(last.Take(), absl::Now());

  absl::Notification destroyed;
  std::thread exit_path([&] {
    endpoint.reset();
    destroyed.Notify();
  });
  EXPECT_FALSE(destroyed.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << "the endpoint went away before its last publication was scraped";
  absl::StatusOr<std::string> body = testing::HttpGet(port, "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("ps_test_steps_total{role=\"worker\"} 2"));
  EXPECT_TRUE(destroyed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  exit_path.join();
}

TEST(MetricsEndpoint, LingersNoLongerThanAskedWithoutAScrape) {
  auto e = MetricsEndpoint::Start({.port = 0, .linger = absl::Milliseconds(50)}, {});
  ASSERT_TRUE(e.ok()) << e.status();
  (*e)->Publish({}, absl::Now());
  const absl::Time start = absl::Now();
  e->reset();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
}

TEST(MetricsOptions, BadValuesAreRefusedByName) {
  EXPECT_THAT((MetricsOptions{.port = 70000}).Validate().message(), HasSubstr("metrics_port"));
  EXPECT_THAT((MetricsOptions{.port = 0, .host = ""}).Validate().message(), HasSubstr("metrics_host"));
  EXPECT_THAT(MetricsEndpoint::Start({.port = 0, .host = "localhost"}, {}).status().message(),
              HasSubstr("not an IPv4 address"));
  EXPECT_THAT((MetricsOptions{.linger = absl::Seconds(-1)}).Validate().message(), HasSubstr("metrics_linger"));
  EXPECT_TRUE((MetricsOptions{}).Validate().ok());
  EXPECT_FALSE(MetricsEndpoint::Start({}, {}).ok());  // off: nothing to start
}

}  // namespace
}  // namespace ps
