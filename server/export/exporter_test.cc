#include "server/export/exporter.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/thread_pool.h"
#include "common/model_file/model_file_reader.h"
#include "common/placement/partition_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/export/checkpoint_scan.h"
#include "server/store/checkpoint.h"
#include "server/store/slice_store.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kServers = 2;
constexpr int kWorkers = 2;

// "w" [3, 4] in slices of 4 floats over two servers, a buffer "bn.mean" [2],
// a table "emb" of dim 2; Adam.
ModelSpec Model(ConsistencyMode mode) {
  ModelSpec m;
  m.tensors = {TensorSpec{"w", {3, 4}, Initializer::Zeros()}, TensorSpec{"bn.mean", {2}, Initializer::Zeros()}};
  m.tensors[1].buffer = true;
  m.tables = {TableSpec{"emb", 2, Initializer::Zeros()}};
  m.optimizer.kind = OptimizerKind::kAdam;
  m.consistency = Consistency{mode, 0};
  m.placement.slice_bytes = 16;
  return m;
}

// The rows each server's shard is given: ids r * 100 + 1 and r * 100 + 2.
std::vector<uint64_t> Ids(int rank) {
  return {static_cast<uint64_t>(rank) * 100 + 1, static_cast<uint64_t>(rank) * 100 + 2};
}
float RowValue(uint64_t id, int j) { return static_cast<float>(id) + 0.25f * static_cast<float>(j); }

class ExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("exporter_test_", ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes server `rank`'s checkpoint into `dir`: every dense element is its
  // index in the tensor, the buffer 7 and 8, two rows per shard; `steps`
  // sync steps of zero gradients by both workers on its dense slices.
  void WriteServer(const ModelSpec& model, int rank, uint64_t incarnation, int steps = 0) {
    absl::StatusOr<PartitionMap> map = PartitionMap::Build(model.tensors, kServers, model.placement, 1);
    ASSERT_TRUE(map.ok()) << map.status();
    std::vector<Slice> mine;
    for (const Slice& s : map->slices()) {
      if (s.server == rank) mine.push_back(s);
    }
    ThreadPool pool(1);
    SliceStore store(&pool, false);
    ASSERT_TRUE(store.Create(model, mine, kWorkers).ok());
    for (const Slice& s : mine) {
      std::vector<float> frame;
      PushRequestMsg push;
      push.assign = true;
      if (s.table) {
        const std::vector<uint64_t> ids = Ids(rank);
        frame.resize(2 * ids.size());
        std::memcpy(frame.data(), ids.data(), ids.size() * sizeof(uint64_t));
        for (uint64_t id : ids) frame.insert(frame.end(), {RowValue(id, 0), RowValue(id, 1)});
        push.slices.push_back(SliceData{s.key, ids.size() * 2, 0, static_cast<uint32_t>(ids.size())});
      } else {
        for (uint64_t i = 0; i < s.length; ++i) frame.push_back(s.tensor == 1 ? 7.0f + i : s.offset + i);
        push.slices.push_back(SliceData{s.key, s.length, 0});
      }
      const absl::Span<const float> payloads[] = {frame};
      ASSERT_TRUE(store.Push(0, push, payloads).ok());
    }
    for (int step = 0; step < steps; ++step) {
      for (const Slice& s : mine) {
        if (s.table || s.tensor == 1) continue;
        const std::vector<float> zero(s.length, 0.0f);
        const absl::Span<const float> payloads[] = {zero};
        for (int w = 0; w < kWorkers; ++w) {
          ASSERT_TRUE(store.Push(w, PushRequestMsg{step, {SliceData{s.key, s.length, 0}}}, payloads).ok());
        }
      }
    }
    ASSERT_TRUE(WriteCheckpoint(dir_, CheckpointInfo{rank, 1, 0, incarnation, {}}, store).ok());
  }

  void WriteJob(ConsistencyMode mode = ConsistencyMode::kSync) {
    for (int r = 0; r < kServers; ++r) WriteServer(Model(mode), r, 42);
  }

  template <typename T>
  std::vector<T> Read(ModelFileReader& in, const std::string& name) {
    absl::StatusOr<std::string> bytes = in.ReadAll(name);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    std::vector<T> v(bytes.ok() ? bytes->size() / sizeof(T) : 0);
    if (!v.empty()) std::memcpy(v.data(), bytes->data(), v.size() * sizeof(T));
    return v;
  }

  std::string dir_;
};

TEST_F(ExporterTest, EveryTensorBufferAndTableRowComesOutExactly) {
  WriteJob();
  for (const std::string ext : {".npz", ".safetensors"}) {
    const std::string out = dir_ + "/model" + ext;
    absl::StatusOr<ExportSummary> summary = ExportCheckpoints(dir_, out);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->servers, kServers);
    EXPECT_EQ(summary->table_rows, 4u);
    absl::StatusOr<std::unique_ptr<ModelFileReader>> in = ModelFileReader::Open(out);
    ASSERT_TRUE(in.ok()) << in.status();
    const ArrayInfo* w = (*in)->Find("w");
    ASSERT_NE(w, nullptr);
    EXPECT_THAT(w->shape, ElementsAre(3, 4));
    std::vector<float> want(12);
    for (int i = 0; i < 12; ++i) want[i] = static_cast<float>(i);
    EXPECT_EQ(Read<float>(**in, "w"), want) << ext;
    EXPECT_THAT(Read<float>(**in, "bn.mean"), ElementsAre(7.0f, 8.0f));
    const std::vector<uint64_t> ids = Read<uint64_t>(**in, "emb.ids");
    const std::vector<float> rows = Read<float>(**in, "emb.rows");
    ASSERT_EQ(rows.size(), ids.size() * 2);
    std::vector<uint64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_THAT(sorted, ElementsAre(1, 2, 101, 102));
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(rows[2 * i], RowValue(ids[i], 0));
      EXPECT_EQ(rows[2 * i + 1], RowValue(ids[i], 1));
    }
  }
}

// The export into memory holds the arrays the file does, byte for byte.
TEST_F(ExporterTest, TheExportIntoMemoryHoldsTheFilesBytes) {
  WriteJob();
  const std::string out = dir_ + "/model.npz";
  ASSERT_TRUE(ExportCheckpoints(dir_, out).ok());
  absl::StatusOr<ExportedArrays> memory = ExportCheckpointsToMemory(dir_);
  ASSERT_TRUE(memory.ok()) << memory.status();
  absl::StatusOr<std::unique_ptr<ModelFileReader>> in = ModelFileReader::Open(out);
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_EQ(memory->arrays.size(), (*in)->arrays().size());
  for (size_t i = 0; i < memory->arrays.size(); ++i) {
    EXPECT_EQ(memory->arrays[i].name, (*in)->arrays()[i].name);
    absl::StatusOr<std::string> bytes = (*in)->ReadAll(memory->arrays[i].name);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(memory->bytes[i], *bytes) << memory->arrays[i].name;
  }
  EXPECT_EQ(memory->summary.table_rows, 4u);
  EXPECT_EQ(ExportCheckpointsToMemory(dir_ + "/none").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ExporterTest, RefusesCheckpointsOfTwoJobs) {
  WriteServer(Model(ConsistencyMode::kSync), 0, 42);
  WriteServer(Model(ConsistencyMode::kSync), 1, 43);
  absl::StatusOr<ExportSummary> summary = ExportCheckpoints(dir_, dir_ + "/m.npz");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("different jobs"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/m.npz"));
}

TEST_F(ExporterTest, RefusesAMissingServerAndAnEmptyDirectory) {
  EXPECT_EQ(ExportCheckpoints(dir_, dir_ + "/m.npz").status().code(), absl::StatusCode::kNotFound);
  WriteServer(Model(ConsistencyMode::kSync), 1, 42);
  absl::StatusOr<ExportSummary> summary = ExportCheckpoints(dir_, dir_ + "/m.npz");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("no checkpoint of server 0"));
}

TEST_F(ExporterTest, SyncServersAtDifferentStepsAreRefusedAsyncOnesExported) {
  WriteServer(Model(ConsistencyMode::kSync), 0, 42, /*steps=*/2);
  WriteServer(Model(ConsistencyMode::kSync), 1, 42);
  absl::StatusOr<ExportSummary> summary = ExportCheckpoints(dir_, dir_ + "/m.npz");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("different steps"));

  std::filesystem::remove_all(dir_);
  WriteServer(Model(ConsistencyMode::kAsync), 0, 42, /*steps=*/2);
  WriteServer(Model(ConsistencyMode::kAsync), 1, 42);
  summary = ExportCheckpoints(dir_, dir_ + "/m.npz");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(summary->steps, ElementsAre(4, 0));  // async: one version per push of each of 2 workers
}

TEST_F(ExporterTest, CorruptOrTruncatedCheckpointsAreNamed) {
  WriteJob();
  const std::string path = CheckpointPath(dir_, 1);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& data) { std::ofstream(path, std::ios::binary | std::ios::trunc) << data; };
  std::string flipped = bytes;
  flipped[flipped.size() - 5] ^= 0x40;
  write(flipped);
  absl::StatusOr<ExportSummary> summary = ExportCheckpoints(dir_, dir_ + "/m.npz");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr(path));
  for (size_t cut : {size_t{10}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    write(bytes.substr(0, cut));
    summary = ExportCheckpoints(dir_, dir_ + "/m.npz");
    EXPECT_EQ(summary.status().code(), absl::StatusCode::kDataLoss) << cut << ": " << summary.status();
    EXPECT_THAT(std::string(summary.status().message()), HasSubstr(path)) << cut;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/m.npz"));
}

TEST_F(ExporterTest, AnOutputOfAnotherKindIsRefused) {
  WriteJob();
  absl::StatusOr<ExportSummary> summary = ExportCheckpoints(dir_, dir_ + "/m.pickle");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr(".pickle"));
}

TEST_F(ExporterTest, TheScanFindsWhatTheStoreHeld) {
  WriteJob();
  absl::StatusOr<std::unique_ptr<CheckpointScan>> scan = CheckpointScan::Open(CheckpointPath(dir_, 0));
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ((*scan)->info().incarnation, 42u);
  for (const ScannedSlice& s : (*scan)->slices()) {
    if (s.slice.table) {
      EXPECT_EQ(s.rows, 2u);
      continue;
    }
    std::vector<float> v(s.slice.length);
    ASSERT_TRUE((*scan)->ReadValues(s, 0, absl::MakeSpan(v)).ok());
    EXPECT_EQ(v[0], s.slice.tensor == 1 ? 7.0f : static_cast<float>(s.slice.offset));
    std::vector<float> past(1);
    EXPECT_EQ((*scan)->ReadValues(s, s.slice.length, absl::MakeSpan(past)).code(), absl::StatusCode::kOutOfRange);
  }
}

}  // namespace
}  // namespace ps
