// tests/job.h's JSON field reader, which the multi-process tests use to read
// the workers' event lines whatever the order of their fields.
#include "gtest/gtest.h"
#include "tests/job.h"

namespace ps::testing {
namespace {

TEST(JsonFieldTest, FindsATopLevelFieldWhereverItStands) {
  const std::string line = R"({"steps":[1,2,{"rank":9}],"name":"a, \"b\"","rank":3,"event":"done"})";
  EXPECT_EQ(JsonField(line, "rank"), "3");
  EXPECT_EQ(JsonField(line, "event"), "\"done\"");
  EXPECT_EQ(JsonField(line, "steps"), R"([1,2,{"rank":9}])");
  EXPECT_EQ(JsonField(line, "name"), R"("a, \"b\"")");
  EXPECT_EQ(JsonField(line, "missing"), std::nullopt);
  EXPECT_EQ(JsonField("not json", "rank"), std::nullopt);
  EXPECT_DOUBLE_EQ(JsonNumber(R"({"test_accuracy": 0.8421})", "test_accuracy"), 0.8421);
  EXPECT_DOUBLE_EQ(JsonNumber(R"({"event":"x"})", "event", -2), -2);
}

TEST(JsonFieldTest, EventsAreTheLinesOfThatEvent) {
  const std::string text = "{\"event\":\"start\"}\nnot json\n{\"rank\":0,\"event\":\"done\"}\n";
  const std::vector<std::string> done = JsonEvents(text, "done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(JsonField(done[0], "rank"), "0");
}

}  // namespace
}  // namespace ps::testing
