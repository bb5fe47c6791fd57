// SliceStore with embedding tables: pushes of rows under each consistency
// mode, and the errors of bad row pushes and pulls (which change nothing).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "server/store/checkpoint_codec.h"
#include "server/store/slice_store_testing.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Model;
using testing::SlicesOf;

// One dense tensor "w" (key 0) and a table "emb" of dim 2 (key 1 on a
// one-server job), rows starting at 10.
ModelSpec TableModel(ConsistencyMode mode) {
  ModelSpec m = Model({TensorSpec{"w", {2}, Initializer::Zeros()}}, mode);
  m.tables = {TableSpec{"emb", 2, Initializer::Constant(10.0f)}};
  return m;
}

constexpr uint32_t kTable = 1;

// A row frame as the client builds it: ids, then rows x dim floats, seen as
// floats (each id takes two).
std::vector<float> Frame(const std::vector<uint64_t>& ids, const std::vector<float>& rows) {
  std::vector<float> frame(2 * ids.size() + rows.size());
  std::memcpy(frame.data(), ids.data(), ids.size() * sizeof(uint64_t));
  std::memcpy(frame.data() + 2 * ids.size(), rows.data(), rows.size() * sizeof(float));
  return frame;
}

absl::Status PushRows(SliceStore& store, int worker, int64_t clock, const std::vector<uint64_t>& ids,
                      const std::vector<float>& rows, uint64_t length = ~uint64_t{0}) {
  PushRequestMsg push;
  push.clock = clock;
  push.slices.push_back(
      SliceData{kTable, length == ~uint64_t{0} ? rows.size() : length, 0, static_cast<uint32_t>(ids.size())});
  const std::vector<float> frame = Frame(ids, rows);
  const absl::Span<const float> payloads[] = {frame};
  return store.Push(worker, push, payloads);
}

std::vector<float> ReadRows(SliceStore& store, const std::vector<uint64_t>& ids) {
  std::vector<float> out(ids.size() * 2);
  store.Table(kTable)->Read(ids, absl::MakeSpan(out));
  return out;
}

class TableStoreTest : public ::testing::Test {
 protected:
  void Make(ConsistencyMode mode, int workers = 2) {
    model_ = TableModel(mode);
    ASSERT_TRUE(store_.Create(model_, SlicesOf(model_), workers).ok());
  }
  ThreadPool pool_{2};
  SliceStore store_{&pool_, /*allow_nonfinite=*/false};
  ModelSpec model_;
};

TEST_F(TableStoreTest, SyncStepOfATableCompletesWhenEveryWorkerPushedAnEmptyPushCounting) {
  Make(ConsistencyMode::kSync);
  ASSERT_TRUE(PushRows(store_, 0, 0, {5, 6}, {2, 4, 6, 8}).ok());
  const PullRequestMsg pull{1, {}, 0, {RowsRequest{kTable, {5}}}};
  EXPECT_FALSE(store_.PullReady(pull));
  EXPECT_THAT(store_.DescribeWait(pull), HasSubstr("table 'emb'"));
  EXPECT_THAT(store_.DescribeWait(pull), HasSubstr("workers [1]"));
  ASSERT_TRUE(PushRows(store_, 1, 0, {}, {}).ok());  // worker 1 had no rows here
  EXPECT_TRUE(store_.PullReady(pull));
  // The mean over the two workers' pushes: 10 - (2, 4) / 2.
  EXPECT_THAT(ReadRows(store_, {5, 6}), ElementsAre(9, 8, 7, 6));
  EXPECT_EQ(store_.Version(kTable), 1u);
}

TEST_F(TableStoreTest, AsyncAppliesEachPushOnArrival) {
  Make(ConsistencyMode::kAsync);
  ASSERT_TRUE(PushRows(store_, 0, 0, {5}, {1, 1}).ok());
  ASSERT_TRUE(PushRows(store_, 1, 0, {5}, {2, 3}).ok());
  EXPECT_THAT(ReadRows(store_, {5}), ElementsAre(7, 6));
  const std::vector<TableStatsMsg> stats = store_.TableStats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].rows, 1u);
  EXPECT_EQ(stats[0].rows_pushed, 2u);
  EXPECT_EQ(stats[0].rows_pulled, 1u);
}

// PERSIA's hybrid: the dense slice is sync, the table async. The table
// applies each worker's push as it comes and its pulls wait for nothing,
// while the dense slice's step waits for both workers; a checkpoint of the
// mixed store restores.
TEST_F(TableStoreTest, AnAsyncTableUnderASyncModelAppliesEachPushAsItComes) {
  model_ = TableModel(ConsistencyMode::kSync);
  model_.tables[0].consistency = Consistency{ConsistencyMode::kAsync, 0};
  ASSERT_TRUE(store_.Create(model_, SlicesOf(model_), 2).ok());
  ASSERT_TRUE(PushRows(store_, 0, 0, {5}, {1, 1}).ok());
  EXPECT_THAT(ReadRows(store_, {5}), ElementsAre(9, 9));  // applied at once, not averaged over a step
  ASSERT_TRUE(PushRows(store_, 0, 1, {5}, {1, 1}).ok());  // a step ahead: fine for an async table
  EXPECT_EQ(store_.Version(kTable), 2u);
  EXPECT_TRUE(store_.PullReady(PullRequestMsg{7, {}, 0, {RowsRequest{kTable, {5}}}}));
  // The dense slice (key 0) still waits for worker 1's step 0.
  const std::vector<float> grad = {2, 4};
  const absl::Span<const float> payloads[] = {grad};
  ASSERT_TRUE(store_.Push(0, PushRequestMsg{0, {SliceData{0, 2, 0}}}, payloads).ok());
  EXPECT_FALSE(store_.PullReady(PullRequestMsg{1, {0}, 0}));
  ASSERT_TRUE(store_.Push(1, PushRequestMsg{0, {SliceData{0, 2, 0}}}, payloads).ok());
  EXPECT_TRUE(store_.PullReady(PullRequestMsg{1, {0}, 0}));
  std::string image;
  ASSERT_TRUE(EncodeStore(store_, &image).ok());
  SliceStore restored(&pool_, false);
  ASSERT_TRUE(DecodeStore(image, &restored).ok());
  EXPECT_EQ(restored.Version(kTable), 2u);
  EXPECT_EQ(*restored.model().tables[0].consistency, (Consistency{ConsistencyMode::kAsync, 0}));
}

TEST_F(TableStoreTest, BadRowPushesGetTheirErrorAndChangeNothing) {
  Make(ConsistencyMode::kAsync);
  ASSERT_TRUE(PushRows(store_, 0, 0, {5}, {1, 1}).ok());
  const std::vector<float> before = ReadRows(store_, {5});
  struct Case {
    std::vector<uint64_t> ids;
    std::vector<float> rows;
    uint64_t length;
    const char* error;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {{5, 6}, {1, 1}, 2, "rows of dim 2 need 4 floats"},  // fewer rows than ids
      {{5}, {1, 1, 1}, 3, "header says 1 rows and 3"},     // wrong dimension
      {{5}, {1, 1}, 4, "header says 1 rows and 4"},        // header and frame disagree
      {{5}, {nan, 1}, 2, "NaN or Inf"},
      {{5}, {1, INFINITY}, 2, "NaN or Inf"},
  };
  for (const Case& c : cases) {
    const absl::Status s = PushRows(store_, 0, 1, c.ids, c.rows, c.length);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
  }
  EXPECT_EQ(ReadRows(store_, {5}), before);
  // A dense slice pushed as rows, rows pushed to an unknown key.
  PushRequestMsg push{1, {SliceData{0, 2, 0, 1}}};
  const std::vector<float> frame = Frame({5}, {1, 1});
  const absl::Span<const float> payloads[] = {frame};
  EXPECT_THAT(std::string(store_.Push(0, push, payloads).message()), HasSubstr("in rows"));
  push.slices[0].key = 7;
  EXPECT_EQ(store_.Push(0, push, payloads).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadRows(store_, {5}), before);
}

TEST_F(TableStoreTest, BadRowPullsAreRefusedNamingTheProblem) {
  Make(ConsistencyMode::kAsync);
  auto pull = [](std::vector<uint32_t> keys, std::vector<RowsRequest> rows) {
    return PullRequestMsg{0, std::move(keys), 0, std::move(rows)};
  };
  EXPECT_THAT(std::string(store_.CheckPull(pull({kTable}, {})).message()), HasSubstr("is a table shard"));
  EXPECT_THAT(std::string(store_.CheckPull(pull({}, {RowsRequest{0, {1}}})).message()), HasSubstr("has no rows"));
  EXPECT_EQ(store_.CheckPull(pull({}, {RowsRequest{9, {1}}})).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(store_.CheckPull(pull({}, {RowsRequest{kTable, {1}}, RowsRequest{kTable, {2}}})).message()),
              HasSubstr("repeated"));
  RowsRequest huge{kTable, std::vector<uint64_t>(SliceStore::kMaxRowsPerRequest + 1)};
  EXPECT_THAT(std::string(store_.CheckPull(pull({}, {huge})).message()), HasSubstr("at most 131072"));
  EXPECT_TRUE(store_.CheckPull(pull({0}, {RowsRequest{kTable, {1, 2}}})).ok());
}

TEST_F(TableStoreTest, CheckpointHoldsRowsAndAHalfDoneSyncStep) {
  Make(ConsistencyMode::kSync);
  ASSERT_TRUE(PushRows(store_, 0, 0, {5}, {2, 2}).ok());
  ASSERT_TRUE(PushRows(store_, 1, 0, {6}, {4, 4}).ok());
  ASSERT_TRUE(PushRows(store_, 0, 1, {5}, {2, 4}).ok());  // step 1 half done
  std::string bytes;
  ASSERT_TRUE(EncodeStore(store_, &bytes).ok());
  SliceStore restored(&pool_, false);
  ASSERT_TRUE(DecodeStore(bytes, &restored).ok());
  ASSERT_TRUE(PushRows(restored, 1, 1, {}, {}).ok());  // completes step 1 there
  EXPECT_THAT(ReadRows(restored, {5, 6}), ElementsAre(8, 7, 8, 8));
  const absl::Status again = PushRows(restored, 0, 1, {5}, {2, 4});
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;  // step 1 is applied
}

TEST_F(TableStoreTest, TablesShareWhatTheBudgetLeavesAfterTheDenseSlicesAndEvict) {
  model_ = TableModel(ConsistencyMode::kAsync);
  SliceStore small(&pool_, false, /*max_bytes=*/16 + 3 * (2 * 4 + TableShard::kRowOverheadBytes));
  ASSERT_TRUE(small.Create(model_, SlicesOf(model_), 1).ok());
  std::vector<float> out(2 * 5);
  small.Table(kTable)->Read(std::vector<uint64_t>{1, 2, 3, 4, 5}, absl::MakeSpan(out));
  const std::vector<TableStatsMsg> stats = small.TableStats();
  EXPECT_EQ(stats[0].rows, 3u);
  EXPECT_EQ(stats[0].evictions, 2u);
}

}  // namespace
}  // namespace ps
