#include "scheduler/restore_options.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/job_state.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// A job of 3 servers and 2 workers, two copies of every slice, a 2 s
// heartbeat timeout, as a scheduler of those flags saves it.
class RestoreOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("restore_options_test_", ::getpid());
    job_.state_file = (dir_ / "sched.state").string();
    job_.num_servers = 3;
    job_.num_workers = 2;
    job_.replicas = 2;
    job_.heartbeat_timeout = absl::Seconds(2);
    job_.register_timeout = absl::Seconds(90);
    state_.incarnation = 7;
    state_.endpoint = "tcp://127.0.0.1:40001";
    state_.num_servers = 3;
    state_.num_workers = 2;
    state_.config = JobConfigOf(job_);
    ASSERT_TRUE(WriteJobState(job_.state_file, state_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // What `ps_scheduler --restore --state_file=PATH` starts from: the flags' defaults.
  SchedulerOptions Defaults() const {
    SchedulerOptions o;
    o.state_file = job_.state_file;
    o.restore = true;
    return o;
  }

  std::filesystem::path dir_;
  SchedulerOptions job_;
  JobState state_;
};

TEST_F(RestoreOptionsTest, ARestoreWithoutTheFlagsTakesTheJobsConfiguration) {
  absl::StatusOr<SchedulerOptions> o = OptionsForRestore(Defaults(), {});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->num_servers, 3);
  EXPECT_EQ(o->num_workers, 2);
  EXPECT_EQ(o->replicas, 2);
  EXPECT_FALSE(o->elastic);
  EXPECT_EQ(o->heartbeat_timeout, absl::Seconds(2));
  EXPECT_EQ(o->server_timeout, absl::Seconds(30));
  EXPECT_EQ(o->register_timeout, absl::Seconds(90));
  EXPECT_TRUE(CheckSameJob(*o, state_).ok());
}

TEST_F(RestoreOptionsTest, FlagsThatAgreeWithTheJobAreAccepted) {
  SchedulerOptions given = Defaults();
  given.num_servers = 3;
  given.replicas = 2;
  given.heartbeat_timeout = absl::Milliseconds(2000);
  absl::StatusOr<SchedulerOptions> o = OptionsForRestore(given, {"num_servers", "replicas", "heartbeat_timeout"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->replicas, 2);
  EXPECT_EQ(o->num_workers, 2);
}

TEST_F(RestoreOptionsTest, AFlagThatContradictsTheJobIsRefusedByName) {
  SchedulerOptions one_copy = Defaults();
  one_copy.replicas = 1;  // --replicas=1 given: the job keeps two copies
  absl::StatusOr<SchedulerOptions> o = OptionsForRestore(one_copy, {"replicas"});
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  EXPECT_THAT(o.status().message(), HasSubstr("--replicas=1 contradicts the job in"));
  EXPECT_THAT(o.status().message(), HasSubstr("which has --replicas=2"));

  SchedulerOptions workers = Defaults();
  workers.num_workers = 4;
  o = OptionsForRestore(workers, {"num_workers"});
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("--num_workers=4 contradicts"));
  EXPECT_THAT(o.status().message(), HasSubstr("which has --num_workers=2"));

  SchedulerOptions elastic = Defaults();
  elastic.elastic = true;
  o = OptionsForRestore(elastic, {"elastic"});
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("--elastic=true contradicts"));

  SchedulerOptions heartbeat = Defaults();
  o = OptionsForRestore(heartbeat, {"heartbeat_timeout"});  // the default 5s given: the job has 2s
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("--heartbeat_timeout=5s contradicts"));
  EXPECT_THAT(o.status().message(), HasSubstr("which has --heartbeat_timeout=2s"));
}

TEST_F(RestoreOptionsTest, CheckSameJobNamesAnOptionThatDiffers) {
  SchedulerOptions o = job_;
  EXPECT_TRUE(CheckSameJob(o, state_).ok());
  o.replicas = 1;
  const absl::Status s = CheckSameJob(o, state_);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--replicas=1 contradicts the job in " + job_.state_file));
}

TEST_F(RestoreOptionsTest, AStateFileWithoutConfigurationKeepsTheFlagsBeyondTheNodeCounts) {
  state_.config.reset();  // as a state file of format 1 holds it
  ASSERT_TRUE(WriteJobState(job_.state_file, state_).ok());
  SchedulerOptions given = Defaults();
  given.replicas = 3;
  absl::StatusOr<SchedulerOptions> o = OptionsForRestore(given, {"replicas"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->replicas, 3);
  EXPECT_EQ(o->num_servers, 3);
}

TEST_F(RestoreOptionsTest, AMissingStateFileIsNotFound) {
  SchedulerOptions o = Defaults();
  o.state_file = (dir_ / "none.state").string();
  EXPECT_EQ(OptionsForRestore(o, {}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RestoreOptionsTest, AConfigurationOutOfRangeIsDataLoss) {
  state_.config->replicas = 4;  // more copies than the 3 servers
  ASSERT_TRUE(WriteJobState(job_.state_file, state_).ok());
  absl::StatusOr<SchedulerOptions> o = OptionsForRestore(Defaults(), {});
  ASSERT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(o.status().message(), HasSubstr("replicas 4 not in [1, 3]"));
}

}  // namespace
}  // namespace ps
