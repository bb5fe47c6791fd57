#include "server/store/checkpoint.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "common/wire/messages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/slice_store.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// "w": 6 elements of 10 in slices of 2 (keys 0, 1, 2), Adam, sync.
ModelSpec Model() {
  ModelSpec m;
  m.tensors = {TensorSpec{"w", {6}, Initializer::Constant(10.0f)}};
  m.optimizer.kind = OptimizerKind::kAdam;
  m.optimizer.learning_rate = 0.5f;
  m.consistency = Consistency{ConsistencyMode::kSync, 0};
  m.placement.slice_bytes = 8;
  return m;
}

std::vector<Slice> Slices(const ModelSpec& model) {
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(model.tensors, 1, model.placement);
  EXPECT_TRUE(map.ok()) << map.status();
  return map.ok() ? map->slices() : std::vector<Slice>{};
}

absl::Status Push(SliceStore& store, int worker, int64_t clock, uint32_t key, std::vector<float> g) {
  PushRequestMsg push{clock, {SliceData{key, g.size(), 0}}};
  const std::vector<absl::Span<const float>> payloads = {g};
  return store.Push(worker, push, payloads);
}

std::vector<float> Values(const SliceStore& store, uint32_t key) {
  absl::Span<const float> v = store.Values(key);
  return std::vector<float>(v.begin(), v.end());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

void ExpectCode(const absl::Status& s, absl::StatusCode code, const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(substring));
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (std::filesystem::path(::testing::TempDir()) /
         absl::StrCat("ckpt_test_", ::getpid(), "_", ::testing::UnitTest::GetInstance()->current_test_info()->name()))
            .string();
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(store_.Create(model_, slices_, 2).ok());
    // Step 0 of slice 0 applied; step 1 half pushed; slice 1 half pushed.
    ASSERT_TRUE(Push(store_, 0, 0, 0, {1, 2}).ok());
    ASSERT_TRUE(Push(store_, 1, 0, 0, {3, 4}).ok());
    ASSERT_TRUE(Push(store_, 1, 1, 0, {5, 6}).ok());
    ASSERT_TRUE(Push(store_, 0, 0, 1, {7, 8}).ok());
    info_.server_rank = 3;
    info_.number = 7;
    info_.unix_ms = 1700000000123;
    info_.seqs = {WorkerSeq{0, 11, 41}, WorkerSeq{1, 12, 42}};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path() const { return CheckpointPath(dir_, 3); }

  // Writes the checkpoint, then loads it back into a fresh store.
  absl::StatusOr<CheckpointInfo> Load(SliceStore* into) { return LoadCheckpoint(dir_, 3, into); }

  void ExpectLoadFails(absl::StatusCode code, const std::string& substring) {
    ThreadPool pool(1);
    SliceStore fresh(&pool, false);
    absl::StatusOr<CheckpointInfo> info = Load(&fresh);
    ExpectCode(info.status(), code, substring);
    EXPECT_FALSE(fresh.has_model());
  }

  ThreadPool pool_{2};
  SliceStore store_{&pool_, false};
  ModelSpec model_ = Model();
  std::vector<Slice> slices_ = Slices(model_);
  CheckpointInfo info_;
  std::string dir_;
};

TEST_F(CheckpointTest, PathNamesTheRank) {
  EXPECT_EQ(CheckpointPath("/a/b", 3), "/a/b/server-3.ckpt");
  EXPECT_EQ(CheckpointPath("/a/b/", 0), "/a/b/server-0.ckpt");
}

TEST_F(CheckpointTest, WriteThenLoadRestoresInfoAndStore) {
  uint64_t bytes = 0;
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_, &bytes).ok());  // also creates dir_
  EXPECT_EQ(bytes, std::filesystem::file_size(Path()));
  EXPECT_FALSE(std::filesystem::exists(Path() + ".tmp"));

  ThreadPool pool(1);
  SliceStore restored(&pool, false);
  absl::StatusOr<CheckpointInfo> info = Load(&restored);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(*info, info_);
  ASSERT_TRUE(restored.has_model());
  for (const Slice& s : slices_) {
    EXPECT_EQ(Values(restored, s.key), Values(store_, s.key)) << "slice " << s.key;
    EXPECT_EQ(restored.Version(s.key), store_.Version(s.key));
  }
  EXPECT_EQ(restored.stats(), store_.stats());
  EXPECT_TRUE(restored.Create(model_, slices_, 2).ok());  // the scheduler's CreateSlices: a no-op

  // Both continue the same: worker 0 completes step 1 of slice 0 and step 0 of slice 1.
  for (SliceStore* s : {&store_, &restored}) {
    ASSERT_TRUE(Push(*s, 0, 1, 0, {9, 10}).ok());
    ASSERT_TRUE(Push(*s, 1, 0, 1, {11, 12}).ok());
  }
  for (const Slice& s : slices_) {
    EXPECT_EQ(Values(restored, s.key), Values(store_, s.key)) << "slice " << s.key;
  }
  EXPECT_EQ(restored.Version(0), 2u);
  EXPECT_EQ(restored.Version(1), 1u);
}

TEST_F(CheckpointTest, SecondWriteReplacesTheFirst) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  ASSERT_TRUE(Push(store_, 0, 1, 0, {9, 10}).ok());
  info_.number = 8;
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  ThreadPool pool(1);
  SliceStore restored(&pool, false);
  absl::StatusOr<CheckpointInfo> info = Load(&restored);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->number, 8u);
  EXPECT_EQ(restored.Version(0), 2u);
}

TEST_F(CheckpointTest, MissingIsNotFound) {
  ExpectLoadFails(absl::StatusCode::kNotFound, "no checkpoint at " + Path());
}

TEST_F(CheckpointTest, LeftoverTmpFromACrashIsIgnored) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  const std::string good = ReadFile(Path());
  // A crash mid-write of the next checkpoint: half a file in .tmp.
  WriteFile(Path() + ".tmp", good.substr(0, good.size() / 2));
  ThreadPool pool(1);
  SliceStore restored(&pool, false);
  absl::StatusOr<CheckpointInfo> info = Load(&restored);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->number, 7u);
  EXPECT_EQ(Values(restored, 0), Values(store_, 0));
  // And the next write replaces the leftover.
  info_.number = 8;
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  EXPECT_FALSE(std::filesystem::exists(Path() + ".tmp"));
}

TEST_F(CheckpointTest, OnlyATmpIsNotFound) {
  std::filesystem::create_directories(dir_);
  WriteFile(Path() + ".tmp", "PSCKPT\r\n garbage");
  ExpectLoadFails(absl::StatusCode::kNotFound, "no checkpoint");
}

TEST_F(CheckpointTest, CorruptBodyByteIsChecksumMismatch) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  std::string data = ReadFile(Path());
  data[data.size() - 5] ^= 0x01;  // a bit of the last slice's optimizer state
  WriteFile(Path(), data);
  ExpectLoadFails(absl::StatusCode::kDataLoss, "checksum mismatch");
  ExpectLoadFails(absl::StatusCode::kDataLoss, Path());
}

TEST_F(CheckpointTest, TruncatedIsDataLoss) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  const std::string data = ReadFile(Path());
  WriteFile(Path(), data.substr(0, data.size() - 1));
  ExpectLoadFails(absl::StatusCode::kDataLoss, "truncated");
  WriteFile(Path(), data.substr(0, 10));  // not even a header
  ExpectLoadFails(absl::StatusCode::kDataLoss, "shorter than the 24-byte header");
  WriteFile(Path(), "");
  ExpectLoadFails(absl::StatusCode::kDataLoss, "truncated");
}

TEST_F(CheckpointTest, TrailingBytesAreDataLoss) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  WriteFile(Path(), ReadFile(Path()) + "x");
  ExpectLoadFails(absl::StatusCode::kDataLoss, "1 trailing bytes");
}

TEST_F(CheckpointTest, BadMagicIsDataLoss) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  std::string data = ReadFile(Path());
  data[0] = 'X';
  WriteFile(Path(), data);
  ExpectLoadFails(absl::StatusCode::kDataLoss, "bad magic");
}

TEST_F(CheckpointTest, UnknownFormatVersionIsDataLoss) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  std::string data = ReadFile(Path());
  data[8] = 9;  // u32 format version at offset 8
  WriteFile(Path(), data);
  ExpectLoadFails(absl::StatusCode::kDataLoss, "format version 9");
}

// A length field far beyond the file must not make the loader allocate it.
TEST_F(CheckpointTest, HugeLengthFieldIsTruncatedNotAllocated) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  std::string data = ReadFile(Path());
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(&data[12], &huge, sizeof(huge));  // u64 body length at offset 12
  WriteFile(Path(), data);
  ExpectLoadFails(absl::StatusCode::kDataLoss, "truncated: the header promises a body of");
}

TEST_F(CheckpointTest, OtherServersCheckpointIsDataLoss) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  std::filesystem::rename(Path(), CheckpointPath(dir_, 4));
  ThreadPool pool(1);
  SliceStore fresh(&pool, false);
  ExpectCode(LoadCheckpoint(dir_, 4, &fresh).status(), absl::StatusCode::kDataLoss,
             "holds the checkpoint of server 3, not of server 4");
  EXPECT_FALSE(fresh.has_model());
}

// A body with a valid checksum that the store refuses: written by a buggy or
// different build. The loader names the file and the store's complaint.
TEST_F(CheckpointTest, BodyTheStoreRefusesIsDataLoss) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  std::string data = ReadFile(Path());
  // Drop the last float and fix up length and checksum.
  data.resize(data.size() - 4);
  uint64_t length = 0;
  std::memcpy(&length, &data[12], 8);
  length -= 4;
  std::memcpy(&data[12], &length, 8);
  const uint32_t crc =
      static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(data.data() + 24), length));
  std::memcpy(&data[20], &crc, 4);
  WriteFile(Path(), data);
  ExpectLoadFails(absl::StatusCode::kDataLoss, "truncated");
  ExpectLoadFails(absl::StatusCode::kDataLoss, Path());
}

TEST_F(CheckpointTest, LoadIntoAStoreWithAModelIsFailedPrecondition) {
  ASSERT_TRUE(WriteCheckpoint(dir_, info_, store_).ok());
  ExpectCode(LoadCheckpoint(dir_, 3, &store_).status(), absl::StatusCode::kFailedPrecondition, "already holds a model");
}

TEST_F(CheckpointTest, WriteWithoutModelIsFailedPrecondition) {
  ThreadPool pool(1);
  SliceStore empty(&pool, false);
  ExpectCode(WriteCheckpoint(dir_, info_, empty), absl::StatusCode::kFailedPrecondition, "no model");
  EXPECT_FALSE(std::filesystem::exists(Path()));
}

TEST_F(CheckpointTest, NegativeRankIsInvalidArgument) {
  info_.server_rank = -1;
  ExpectCode(WriteCheckpoint(dir_, info_, store_), absl::StatusCode::kInvalidArgument, "rank -1");
}

TEST_F(CheckpointTest, UnwritableDirectoryNamesThePath) {
  // A regular file where the directory should be.
  std::filesystem::create_directories(dir_);
  const std::string blocker = dir_ + "/file";
  WriteFile(blocker, "x");
  const absl::Status s = WriteCheckpoint(blocker + "/sub", info_, store_);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(blocker + "/sub"));
}

}  // namespace
}  // namespace ps
