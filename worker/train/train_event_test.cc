#include "worker/train/train_event.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ServerStats Server(uint64_t pushes, std::vector<uint64_t> histogram, uint64_t max) {
  ServerStats s;
  s.pushes_applied = pushes;
  s.updates_applied = 2 * pushes;
  s.staleness_histogram = std::move(histogram);
  s.staleness_max = max;
  s.waited_pull_micros = 1500000;
  return s;
}

TEST(TrainEventTest, ToJsonWritesKindThenFieldsInOrder) {
  const TrainEvent e{"eval", {{"rank", "0"}, {"name", EventString("a\"b")}, {"x", EventNumber(0.1234567)}}};
  EXPECT_EQ(e.ToJson(), R"({"event":"eval","rank":0,"name":"a\"b","x":0.123457})");
  EXPECT_EQ(EventNumber(1.0 / 0.0), "null");
}

TEST(TrainEventTest, ServerStatsSumOverServers) {
  const std::vector<ServerStats> servers = {Server(3, {90, 9, 0, 0}, 1), Server(4, {0, 0, 1}, 2)};
  const std::string json = ServerStatsEvent(0, servers).ToJson();
  EXPECT_EQ(json, R"({"event":"server_stats","rank":0,"servers":2,"pushes_applied":7,"updates_applied":14,)"
                  R"("slice_updates":100,"staleness_mean":0.11,"staleness_p99":1,"staleness_max":2,)"
                  R"("staleness_histogram":[90,9,1],"pulls_waited_s":3})");
}

TEST(TrainEventTest, TableFieldsOnlyWhenServersHoldTables) {
  std::vector<ServerStats> servers = {Server(1, {1}, 0), Server(1, {1}, 0)};
  EXPECT_THAT(ServerStatsEvent(0, servers).ToJson(), Not(HasSubstr("table_rows")));
  ServerStats::Table a, b;
  a.rows = 10;
  a.bytes = 1000;
  a.admissions = 10;
  a.rows_pulled = 30;
  a.rows_pushed = 20;
  b.rows = 5;
  b.bytes = 500;
  b.evictions = 2;
  servers[0].tables = {a};
  servers[1].tables = {b};
  EXPECT_THAT(ServerStatsEvent(1, servers).ToJson(),
              HasSubstr(R"("table_rows":15,"table_bytes":1500,"table_evictions":2,"table_admissions":10,)"
                        R"("table_rows_pulled":30,"table_rows_pushed":20})"));
}

}  // namespace
}  // namespace ps
