#include "common/base/events.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(EventsTest, OneWholeLinePerEventWithItsFieldsAfterKindAndTime) {
  const std::string path = ::testing::TempDir() + "/events_test." + std::to_string(getpid()) + ".jsonl";
  std::remove(path.c_str());
  EmitEvent("before_open");  // no file yet: nothing written anywhere
  ASSERT_TRUE(OpenEventFile(path).ok());
  EmitEvent("server_lost", JsonLine().Add("rank", 1).Add("name", "a\"b"));
  EmitEvent("model_created");
  CloseEventFile();
  EmitEvent("after_close");
  const std::string text = ReadAll(path);
  std::remove(path.c_str());
  EXPECT_THAT(text, MatchesRegex(R"(\{"event":"server_lost","time":[0-9]+\.[0-9]{3},"rank":1,"name":"a\\"b"\}
\{"event":"model_created","time":[0-9]+\.[0-9]{3}\}
)"));
}

TEST(EventsTest, AnUnwritablePathIsRefusedNamingIt) {
  const absl::Status s = OpenEventFile("/nonexistent-dir/events.jsonl");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'/nonexistent-dir/events.jsonl'"));
  EXPECT_TRUE(OpenEventFile("").ok());  // none: the default
}

}  // namespace
}  // namespace ps
