#include "scheduler/job_state.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

JobState TwoNodeJob() {
  JobState s;
  s.incarnation = 0x0123456789abcdefULL;
  s.endpoint = "tcp://127.0.0.1:40001";
  s.num_servers = 1;
  s.num_workers = 1;
  s.next_node_id = 4;
  s.view_epoch = 7;
  s.nodes = {JobStateNode{NodeInfo{1, Role::kServer, 0, "tcp://127.0.0.1:40002", "server-key"}, false, true},
             JobStateNode{NodeInfo{2, Role::kWorker, 0, "", ""}, false, false},
             JobStateNode{NodeInfo{3, Role::kWorker, 0, "", ""}, true, true}};
  ModelSpec model;
  model.tensors = {TensorSpec{"w", {4, 3}, Initializer::Uniform(-1.0f, 1.0f, 9)}};
  model.consistency = Consistency{ConsistencyMode::kSsp, 2};
  s.model = model;
  return s;
}

class JobStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("job_state_test_", ::getpid());
    path_ = (dir_ / "sched.state").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Bytes() const {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void Overwrite(const std::string& data) const { std::ofstream(path_, std::ios::binary | std::ios::trunc) << data; }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(JobStateTest, WriteThenReadGivesTheSameState) {
  ASSERT_TRUE(WriteJobState(path_, TwoNodeJob()).ok());  // also creates the directory
  absl::StatusOr<JobState> read = ReadJobState(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == TwoNodeJob());
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
}

TEST_F(JobStateTest, StateWithoutAModelReadsBackWithout) {
  JobState state = TwoNodeJob();
  state.model.reset();
  ASSERT_TRUE(WriteJobState(path_, state).ok());
  absl::StatusOr<JobState> read = ReadJobState(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_FALSE(read->model.has_value());
}

TEST_F(JobStateTest, MissingFileIsNotFound) {
  EXPECT_EQ(ReadJobState(path_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ReadJobState(path_).status().message()), HasSubstr("no scheduler state file at"));
}

TEST_F(JobStateTest, CorruptOrForeignFilesAreDataLossNamingThePath) {
  ASSERT_TRUE(WriteJobState(path_, TwoNodeJob()).ok());
  std::string data = Bytes();
  data[data.size() - 5] ^= 0x40;
  Overwrite(data);
  absl::Status s = ReadJobState(path_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("checksum mismatch"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(path_));
  Overwrite("PSCKPT\r\n and the rest of a checkpoint");
  EXPECT_THAT(std::string(ReadJobState(path_).status().message()), HasSubstr("bad magic"));
  Overwrite(data.substr(0, data.size() - 9));
  EXPECT_THAT(std::string(ReadJobState(path_).status().message()), HasSubstr("truncated"));
}

// A job of one server that a second joined (ps_server --join, rank 1) and
// whose slices it now holds: read back as written (a restored scheduler
// takes such a job back).
TEST_F(JobStateTest, AServerThatJoinedKeepsItsRankPastTheJobsOwn) {
  JobState s = TwoNodeJob();
  s.nodes.push_back(JobStateNode{NodeInfo{4, Role::kServer, 1, "tcp://127.0.0.1:40003", ""}, false, true});
  s.next_node_id = 5;
  s.copies = {{1}, {0, 1}};
  s.releasing = JobStateMove{1, 0, 1};  // slice 1 moving from server 0 to server 1, its old copy released
  ASSERT_TRUE(WriteJobState(path_, s).ok());
  auto read = ReadJobState(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, s);
}

TEST_F(JobStateTest, ImpossibleValuesAreDataLoss) {
  auto expect_refused = [&](JobState state, const std::string& why) {
    ASSERT_TRUE(WriteJobState(path_, state).ok());
    absl::Status s = ReadJobState(path_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << why;
    EXPECT_THAT(std::string(s.message()), HasSubstr(why));
  };
  JobState s = TwoNodeJob();
  s.incarnation = 0;
  expect_refused(s, "incarnation 0");
  s = TwoNodeJob();
  s.nodes[1].info.rank = 1;  // the job has one worker
  expect_refused(s, "worker rank 1 out of range");
  s = TwoNodeJob();
  s.nodes[0].info.rank = 2;  // one server node: ranks 0 (the job's) and 1 (had it joined) only
  expect_refused(s, "server rank 2 out of range");
  s = TwoNodeJob();
  s.copies = {{0}, {1}};
  expect_refused(s, "slice 1: a copy on server rank 1, out of range");
  s = TwoNodeJob();
  s.nodes.push_back(JobStateNode{NodeInfo{3, Role::kServer, 2, "tcp://127.0.0.1:40003", ""}, false, true});
  s.nodes.erase(s.nodes.begin() + 2);  // node 3 was a worker: now server rank 2, with no rank 1 before it
  expect_refused(s, "server rank 2 out of range");
  s = TwoNodeJob();
  s.copies = {{0}};
  s.releasing = JobStateMove{0, 0, 0};  // onto the server it leaves
  expect_refused(s, "a move of slice 0 from server 0 to 0");
  s = TwoNodeJob();
  s.releasing = JobStateMove{0, 0, 1};  // to a server the job does not have
  expect_refused(s, "a move of slice 0 from server 0 to 1 out of range");
  s.releasing = JobStateMove{5, 0, 0};  // of a slice it does not have
  expect_refused(s, "a move of slice 5");
  s = TwoNodeJob();
  s.next_node_id = 3;  // node 3 exists: ids would be given twice
  expect_refused(s, "node id 3 not in [1, 3)");
  s = TwoNodeJob();
  s.num_workers = 0;
  expect_refused(s, "0 workers");
}

}  // namespace
}  // namespace ps
