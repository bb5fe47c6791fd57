// The tables' disk tier: a shard whose memory holds a few rows keeps every
// row's training (compared with a shard whose memory holds them all), a
// snapshot restores the rows as they were, and the directory's bad cases
// are refused by name.
#include "server/disk/table_disk.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/base/thread_pool.h"
#include "common/model/initializer.h"
#include "common/model_file/model_file_reader.h"
#include "common/placement/partition_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/export/exporter.h"
#include "server/store/checkpoint.h"
#include "server/store/checkpoint_codec.h"
#include "server/store/slice_store.h"
#include "server/store/slice_store_testing.h"
#include "server/store/table_shard.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class TableDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("table_disk_", getpid(), "_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    OptimizerConfig config;
    config.kind = OptimizerKind::kAdagrad;
    config.learning_rate = 0.5f;
    adagrad_ = *Optimizer::Create(config);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<TableDisk> OpenDisk(const std::string& sub, uint64_t max_bytes = 0) {
    auto disk = TableDisk::Open({.dir = (dir_ / sub).string(), .max_bytes = max_bytes, .memory_bytes = 4 << 20}, "test",
                                /*restoring=*/false);
    EXPECT_TRUE(disk.ok()) << disk.status();
    return disk.ok() ? *std::move(disk) : nullptr;
  }

  // `steps` rounds of integer gradients on ids 0..n-1 (every third id
  // skipped in odd rounds), the same on every shard given.
  static void Train(std::vector<TableShard*> shards, uint64_t n, int steps) {
    for (int step = 0; step < steps; ++step) {
      std::vector<uint64_t> ids;
      std::vector<float> grads;
      for (uint64_t id = 0; id < n; ++id) {
        if (step % 2 == 1 && id % 3 == 0) continue;
        ids.push_back(id * 0x9e3779b97f4a7c15ULL);
        for (int d = 0; d < kDim; ++d) grads.push_back(static_cast<float>((id + d + step) % 5) - 2.0f);
      }
      for (TableShard* s : shards) s->Apply(ids, grads, 1.0f);
    }
  }

  // A shard of spec_ expiring after 8 updates, spilling to `disk`, with
  // memory for 4 rows (on the heap: the shard keeps the budget's address).
  struct Expiring {
    TableSpec spec;
    TableBudget budget;
    std::unique_ptr<TableShard> shard;
  };
  std::unique_ptr<Expiring> ExpiringShard(TableDisk* disk) const {
    auto e = std::make_unique<Expiring>();
    e->spec = spec_;
    e->spec.expire_after_steps = 8;
    e->budget.disk = disk;
    e->budget.limit = 4 * TableShard(spec_, *adagrad_, &e->budget, 0, 0).RowBytes();
    e->shard = std::make_unique<TableShard>(e->spec, *adagrad_, &e->budget, 0, 0);
    return e;
  }

  static std::vector<float> ReadAll(TableShard& shard, uint64_t n) {
    std::vector<uint64_t> ids;
    for (uint64_t id = 0; id < n; ++id) ids.push_back(id * 0x9e3779b97f4a7c15ULL);
    std::vector<float> out(ids.size() * kDim);
    shard.Read(ids, absl::MakeSpan(out));
    return out;
  }

  static constexpr int kDim = 4;
  const TableSpec spec_{"emb", kDim, Initializer::Uniform(-1, 1, 7)};
  std::filesystem::path dir_;
  std::unique_ptr<Optimizer> adagrad_;
};

TEST_F(TableDiskTest, ASmallMemoryLosesNoRowsTrainingWithTheDiskTier) {
  std::unique_ptr<TableDisk> disk = OpenDisk("a");
  ASSERT_NE(disk, nullptr);
  TableBudget small, all;
  small.disk = disk.get();
  TableShard reference(spec_, *adagrad_, &all, 0, 0);
  small.limit = 16 * reference.RowBytes();  // 16 of 500 rows
  TableShard shard(spec_, *adagrad_, &small, 0, 0);
  Train({&shard, &reference}, 500, 6);
  EXPECT_EQ(ReadAll(shard, 500), ReadAll(reference, 500));
  const TableStatsMsg stats = shard.Stats();
  EXPECT_LE(stats.rows, 16u);
  EXPECT_GT(stats.evictions, 0u);
  // Every row not in memory is on disk: memory and disk hold the table.
  EXPECT_EQ(stats.rows + stats.disk_rows, 500u);
  EXPECT_GT(stats.disk_reads, 0u);
  EXPECT_EQ(stats.rejections + stats.gradients_dropped + stats.disk_refusals, 0u);
  EXPECT_EQ(disk->writes(), stats.disk_writes);
}

// Two shards of one server share its budget: one holds all of it, and the
// other, with no row in memory to evict, updates its rows on disk rather
// than drop their gradients (a backup holding more shards than its primary
// did so; its copy then differed).
TEST_F(TableDiskTest, AShardWithNoRoomInMemoryUpdatesItsRowsOnDisk) {
  std::unique_ptr<TableDisk> disk = OpenDisk("shared");
  ASSERT_NE(disk, nullptr);
  TableBudget shared, all;
  shared.disk = disk.get();
  TableShard reference(spec_, *adagrad_, &all, 0, 0);
  shared.limit = 8 * reference.RowBytes();
  TableShard hog(spec_, *adagrad_, &shared, 0, DiskLogOfSlice(1));
  TableShard starved(spec_, *adagrad_, &shared, 0, DiskLogOfSlice(2));
  Train({&hog}, 8, 1);  // the whole budget
  Train({&starved, &reference}, 30, 3);
  EXPECT_EQ(starved.Stats().gradients_dropped, 0u);
  EXPECT_EQ(starved.rows(), 0u);
  EXPECT_EQ(starved.disk_rows(), 30u);
  // Read through from disk (no room to bring them in): the same training.
  EXPECT_EQ(ReadAll(starved, 30), ReadAll(reference, 30));
  // Without a disk tier they are dropped and counted, as before.
  TableBudget no_disk;
  no_disk.limit = shared.limit;
  TableShard hog2(spec_, *adagrad_, &no_disk, 0, 0), starved2(spec_, *adagrad_, &no_disk, 0, 0);
  Train({&hog2}, 8, 1);
  Train({&starved2}, 30, 1);
  EXPECT_EQ(starved2.Stats().gradients_dropped, 30u);
}

TEST_F(TableDiskTest, AFullStoreKeepsRowsInMemoryAndCountsWhatItRefuses) {
  std::unique_ptr<TableDisk> disk = OpenDisk("full", /*max_bytes=*/1);
  ASSERT_NE(disk, nullptr);
  TableBudget small, all;
  small.disk = disk.get();
  TableShard reference(spec_, *adagrad_, &all, 0, 0);
  small.limit = 8 * reference.RowBytes();
  TableShard shard(spec_, *adagrad_, &small, 0, 0);
  Train({&shard, &reference}, 8, 2);  // fits: nothing goes to disk
  Train({&shard}, 20, 1);             // 12 more rows find no room
  const TableStatsMsg stats = shard.Stats();
  EXPECT_EQ(stats.gradients_dropped, 12u);
  EXPECT_GT(stats.disk_refusals, 0u);
  EXPECT_EQ(stats.disk_rows, 0u);
  // The 8 rows trained first are intact (trained once more by the last round).
  Train({&reference}, 8, 1);
  EXPECT_EQ(ReadAll(shard, 8), ReadAll(reference, 8));
}

TEST_F(TableDiskTest, ASnapshotRestoresTheRowsAsTheyWereWhenItWasTaken) {
  std::unique_ptr<TableDisk> disk = OpenDisk("live");
  ASSERT_NE(disk, nullptr);
  TableBudget small, all;
  small.disk = disk.get();
  TableShard reference(spec_, *adagrad_, &all, 0, 0);
  small.limit = 10 * reference.RowBytes();
  TableShard shard(spec_, *adagrad_, &small, 0, 0);
  Train({&shard, &reference}, 200, 3);
  std::string bytes;
  shard.Encode(&bytes);
  const std::string snapshot = (dir_ / "snap").string();
  ASSERT_TRUE(disk->Snapshot(snapshot).ok());
  Train({&shard}, 200, 2);  // after the snapshot: not in it
  // A restarted server: the store replaced by the snapshot, the shard decoded.
  ASSERT_TRUE(disk->RestoreFrom(snapshot).ok());
  TableBudget restored_budget;
  restored_budget.limit = small.limit;
  restored_budget.disk = disk.get();
  TableShard restored(spec_, *adagrad_, &restored_budget, 0, 0);
  absl::string_view data = bytes;
  ASSERT_TRUE(restored.Decode(&data, TableShard::kFormat).ok());
  EXPECT_EQ(ReadAll(restored, 200), ReadAll(reference, 200));
  // The snapshot itself is unchanged by the restored store's writes.
  uint64_t rows = 0;
  ASSERT_TRUE(TableDisk::ForEachRow(snapshot, 0, kDim * 2, [&](uint64_t, const TableDisk::Row&) {
                ++rows;
                return absl::OkStatus();
              }).ok());
  TableBudget b2;
  b2.disk = disk.get();
  TableShard count(spec_, *adagrad_, &b2, 0, 0);
  absl::string_view again = bytes;
  ASSERT_TRUE(count.Decode(&again, TableShard::kFormat).ok());
  EXPECT_EQ(rows, count.disk_rows());
}

// Expiry: rows untouched for expire_after_steps updates are dropped by the
// sweeps, in memory and on disk; touched rows stay, and without the option
// nothing goes.
TEST_F(TableDiskTest, RowsUntouchedForExpireAfterStepsUpdatesAreDroppedAndCounted) {
  std::unique_ptr<TableDisk> disk = OpenDisk("expiry");
  ASSERT_NE(disk, nullptr);
  std::unique_ptr<Expiring> expiring = ExpiringShard(disk.get());
  TableShard& shard = *expiring->shard;
  TableBudget unbounded;
  TableShard kept(spec_, *adagrad_, &unbounded, 0, 0);  // no expiry: the reference
  const std::vector<float> grad(kDim, 1.0f), grads(10 * kDim, 1.0f);
  std::vector<uint64_t> cold = {101, 102, 103, 104, 105, 106, 107, 108, 109, 110};
  shard.changes().Enable();  // a serving replica follows the shard from here
  const uint64_t start = shard.changes().Cut();
  shard.Apply(cold, grads, 1.0f);  // update 1: ten rows, six of them pushed out to disk
  kept.Apply(cold, grads, 1.0f);
  EXPECT_GE(shard.Stats().disk_rows, 6u);
  const uint64_t hot = 7;
  for (int u = 0; u < 20; ++u) {  // updates 2..21 touch only `hot`
    shard.Apply({hot}, grad, 1.0f);
    kept.Apply({hot}, grad, 1.0f);
  }
  // The rows of `cold` went in the sweeps, those in memory and those on
  // disk alike (never looked up again); `hot` stays.
  EXPECT_EQ(shard.Stats().expired, 10u);
  EXPECT_EQ(shard.Stats().disk_rows, 0u);
  EXPECT_TRUE(shard.RowOf(hot).has_value());
  // The replica hears them gone, those in memory and those on disk (a row
  // pushed out to the disk tier is still there, so it did not go then).
  shard.changes().Cut();
  const RowChanges::Delta delta = shard.changes().Since(start);
  EXPECT_EQ(delta.changed, std::vector<uint64_t>{hot});
  EXPECT_EQ(delta.removed, cold);
  std::vector<float> got(kDim), want(kDim);
  shard.Read({hot}, absl::MakeSpan(got));
  kept.Read({hot}, absl::MakeSpan(want));
  EXPECT_EQ(got, want);
  // Read again, they are new rows (initial values).
  std::vector<float> rows(cold.size() * kDim), initial(cold.size() * kDim);
  shard.Read(cold, absl::MakeSpan(rows));
  TableBudget fresh_budget;
  TableShard fresh(spec_, *adagrad_, &fresh_budget, 0, 0);
  fresh.Read(cold, absl::MakeSpan(initial));
  EXPECT_EQ(rows, initial);
  const TableStatsMsg stats = shard.Stats();
  EXPECT_EQ(stats.expired, 10u);
  // Left on disk: only `hot`, if the reads pushed it out.
  EXPECT_EQ(stats.disk_rows, shard.RowOf(hot).has_value() ? 0u : 1u);
  // Without expire_after_steps, the same rows kept their training.
  std::vector<float> trained(cold.size() * kDim);
  kept.Read(cold, absl::MakeSpan(trained));
  EXPECT_NE(trained, initial);
  EXPECT_EQ(kept.Stats().expired, 0u);
}

// A disk row looked up after N updates unseen, before a sweep reached it,
// is dropped at the lookup.
TEST_F(TableDiskTest, AnExpiredDiskRowLookedUpBeforeASweepIsDropped) {
  std::unique_ptr<TableDisk> disk = OpenDisk("lookup");
  ASSERT_NE(disk, nullptr);
  std::unique_ptr<Expiring> expiring = ExpiringShard(disk.get());
  TableShard& shard = *expiring->shard;
  TableBudget unbounded;
  TableShard initial(spec_, *adagrad_, &unbounded, 0, 0);
  const std::vector<uint64_t> cold = {101, 102, 103, 104, 105, 106, 107, 108, 109, 110};
  shard.Apply(cold, std::vector<float>(cold.size() * kDim, 1.0f), 1.0f);  // update 1, a sweep
  std::vector<uint64_t> on_disk;
  for (uint64_t id : cold) {
    if (!shard.RowOf(id).has_value()) on_disk.push_back(id);
  }
  ASSERT_FALSE(on_disk.empty());
  // Updates 2..9 touch another row (sweeps at 3, 5, 7, 9: nothing 8 updates
  // old yet). Update 10 is the lookup: 9 updates unseen, no sweep since 9.
  for (int u = 2; u <= 9; ++u) shard.Apply({7}, std::vector<float>(kDim, 1.0f), 1.0f);
  const uint64_t expired_before = shard.Stats().expired;
  std::vector<float> got(on_disk.size() * kDim), want(on_disk.size() * kDim);
  shard.Apply(on_disk, std::vector<float>(on_disk.size() * kDim, 0.0f), 1.0f);  // update 10: a zero gradient
  shard.Read(on_disk, absl::MakeSpan(got));
  initial.Read(on_disk, absl::MakeSpan(want));
  EXPECT_EQ(got, want);  // trained once at update 1, now new rows again
  EXPECT_EQ(shard.Stats().expired - expired_before, on_disk.size());
}

TEST_F(TableDiskTest, ADirectoryInUseOrHoldingAnotherStoreIsRefusedByName) {
  std::unique_ptr<TableDisk> disk = OpenDisk("held");
  ASSERT_NE(disk, nullptr);
  const std::string held = (dir_ / "held").string();
  auto second = TableDisk::Open({.dir = held}, "test", false);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use by another process"));
  disk.reset();
  auto fresh = TableDisk::Open({.dir = held}, "another job", /*restoring=*/false);
  EXPECT_EQ(fresh.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fresh.status().message()), HasSubstr("holds the table store of test"));
  auto foreign = TableDisk::Open({.dir = held}, "another job", /*restoring=*/true);
  EXPECT_THAT(std::string(foreign.status().message()), HasSubstr("holds the table store of test"));
  auto mine = TableDisk::Open({.dir = held}, "test", /*restoring=*/true);
  EXPECT_TRUE(mine.ok()) << mine.status();
  std::ofstream(dir_ / "file") << "x";
  auto not_dir = TableDisk::Open({.dir = (dir_ / "file").string()}, "test", false);
  EXPECT_EQ(not_dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_dir.status().message()), HasSubstr("file"));
}

// --replicas: a table shard whose rows are mostly on the disk tier is
// copied to another server with them (its own log, read from a snapshot),
// the copy holds the same rows and trains on alike; a copy missing its
// disk rows, with them cut short, or for a server without a disk tier is
// refused and adds nothing; a server with less memory takes it, its rows
// past the budget on disk; a dropped shard's log leaves the disk.
TEST_F(TableDiskTest, ATableShardCopyCarriesItsDiskRowsAndADropRemovesThem) {
  std::unique_ptr<TableDisk> disk_a = OpenDisk("a"), disk_b = OpenDisk("b");
  ASSERT_NE(disk_a, nullptr);
  ASSERT_NE(disk_b, nullptr);
  ModelSpec model = testing::Model({TensorSpec{"w", {4}, Initializer::Zeros()}}, ConsistencyMode::kAsync);
  model.tables = {spec_};
  const std::vector<Slice> slices = testing::SlicesOf(model);
  ASSERT_EQ(slices.size(), 2u);
  const uint32_t key = slices[1].key;
  ThreadPool pool(1);
  // Memory for about 40 rows of the table (what the disk tier's own share leaves).
  const uint64_t max_bytes = disk_a->memory_bytes() + 4096;
  SliceStore a(&pool, false, max_bytes), b(&pool, false, max_bytes), no_disk(&pool, false, max_bytes);
  a.SetTableDisk(disk_a.get());
  b.SetTableDisk(disk_b.get());
  ASSERT_TRUE(a.Create(model, slices, 1).ok());
  ASSERT_TRUE(b.Create(model, {slices[0]}, 1).ok());  // holds the model, not the shard
  ASSERT_TRUE(no_disk.Create(model, {slices[0]}, 1).ok());
  Train({a.Table(key)}, 500, 4);
  ASSERT_GT(a.Table(key)->disk_rows(), 400u);
  absl::StatusOr<SliceImage> image = EncodeSliceImage(a, key);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->disk_rows.size(), a.Table(key)->disk_rows() * (24 + a.Table(key)->RowFloats() * sizeof(float)));
  // Refused, nothing added: no disk rows, a row cut short, no disk tier.
  const absl::string_view rows = image->disk_rows;
  for (const absl::string_view bad : {absl::string_view(), rows.substr(0, rows.size() - 1)}) {
    const absl::Status s = AddSliceImage(image->image, bad, &b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("bytes of disk rows for"));
    EXPECT_EQ(b.slice_list().size(), 1u);
  }
  const absl::Status s = AddSliceImage(image->image, rows, &no_disk);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("--table_disk_dir"));
  EXPECT_EQ(no_disk.slice_list().size(), 1u);
  // The copy: the same shard, byte for byte, and the same rows read and trained.
  ASSERT_TRUE(AddSliceImage(image->image, rows, &b).ok());
  std::string ea, eb;
  a.Table(key)->Encode(&ea);
  b.Table(key)->Encode(&eb);
  EXPECT_TRUE(ea == eb);
  // A server whose memory holds fewer rows takes the copy too: the rows
  // past its budget go to its disk tier.
  std::unique_ptr<TableDisk> disk_c = OpenDisk("c");
  ASSERT_NE(disk_c, nullptr);
  SliceStore c(&pool, false, disk_c->memory_bytes() + 1024);
  c.SetTableDisk(disk_c.get());
  ASSERT_TRUE(c.Create(model, {slices[0]}, 1).ok());
  ASSERT_TRUE(AddSliceImage(image->image, rows, &c).ok());
  EXPECT_LT(c.Table(key)->rows(), a.Table(key)->rows());
  EXPECT_EQ(c.Table(key)->rows() + c.Table(key)->Stats().disk_rows, 500u);
  Train({a.Table(key), b.Table(key), c.Table(key)}, 500, 2);
  const std::vector<float> trained = ReadAll(*a.Table(key), 500);
  EXPECT_EQ(ReadAll(*b.Table(key), 500), trained);
  EXPECT_EQ(ReadAll(*c.Table(key), 500), trained);
  EXPECT_GT(b.Table(key)->Stats().disk_reads, 0u);
  // Dropped (moved away): its log goes from the disk.
  const std::filesystem::path log = dir_ / "b" / "live" / std::to_string(DiskLogOfSlice(key));
  EXPECT_TRUE(std::filesystem::exists(log));
  b.Drop(key);
  EXPECT_FALSE(std::filesystem::exists(log));
  EXPECT_EQ(disk_b->DiskBytes(), 0u);
}

// A store of format 4 (written by an earlier build): every table shard of a
// server kept its disk rows in one log, named by the table. Restored, a
// table's log that holds one shard's rows alone becomes the shard's own
// (so that a copy can take it); one that holds two shards' rows, or rows
// of a shard the server no longer holds, stays shared. Either way the
// next checkpoint, restored in its turn, still finds every row on disk (it
// once looked in the shard's own log, found none and began such rows
// again), and ps_export writes each shard's rows once.
class FormatFourTest : public TableDiskTest {
 protected:
  struct Case {
    int shards;  // of the table, all on this server and in its log
    int held;    // of them, still held when the store was written
  };

  // Trains a_ (every shard, rows mostly on disk), then makes what an
  // earlier build would have written of it: bytes_ (store format 4) and
  // the snapshot snap4_, every shard's rows in log 0 (a dropped shard's
  // left there, as such builds did).
  void WriteFormatFour(Case c) {
    case_ = c;
    sub_ = absl::StrCat(c.shards, "-", c.held);
    model_ = testing::Model({TensorSpec{"w", {4}, Initializer::Zeros()}}, ConsistencyMode::kAsync);
    model_.tables = {spec_};
    model_.placement.table_shards = c.shards;
    const std::vector<Slice> slices = testing::SlicesOf(model_);
    ASSERT_EQ(slices.size(), 1u + c.shards);
    keys_.clear();
    for (const Slice& slice : slices) {
      if (slice.table) keys_.push_back(slice.key);  // in shard order
    }
    ids_.assign(c.shards, {});  // each shard's: those the placement gives it
    for (uint64_t id = 0; id < 600; ++id) {
      const uint64_t hashed = id * 0x9e3779b97f4a7c15ULL;
      ids_[TableRowShard(TableHash(spec_.name), hashed, c.shards)].push_back(hashed);
    }
    disk_a_ = OpenDisk("a" + sub_);
    std::unique_ptr<TableDisk> disk_f4 = OpenDisk("f4" + sub_);
    ASSERT_NE(disk_a_, nullptr);
    ASSERT_NE(disk_f4, nullptr);
    max_bytes_ = disk_a_->memory_bytes() + 4096;  // about 40 rows in memory
    a_ = std::make_unique<SliceStore>(&pool_, false, max_bytes_);
    a_->SetTableDisk(disk_a_.get());
    ASSERT_TRUE(a_->Create(model_, slices, 1).ok());
    for (int step = 0; step < 3; ++step) {
      for (int i = 0; i < c.shards; ++i) {
        std::vector<float> grads(ids_[i].size() * kDim);
        for (size_t g = 0; g < grads.size(); ++g) grads[g] = static_cast<float>((g + step) % 5) - 2.0f;
        a_->Table(keys_[i])->Apply(ids_[i], grads, 1.0f);
      }
    }
    trained_ = ReadHeld(*a_);  // (reads move rows: before the copy below)
    for (uint32_t key : keys_) {
      ASSERT_TRUE(disk_a_
                      ->ExportShard(DiskLogOfSlice(key),
                                    [&](uint64_t id, const DiskRow& row) {
                                      return disk_f4->Put(0, id, row.steps, row.last_seen, row.floats);
                                    })
                      .ok());
    }
    for (int i = c.held; i < c.shards; ++i) a_->Drop(keys_[i]);
    ASSERT_GT(a_->Table(keys_[0])->disk_rows(), 200u);
    snap4_ = (dir_ / ("snap4-" + sub_)).string();
    ASSERT_TRUE(disk_f4->Snapshot(snap4_).ok());
    ASSERT_TRUE(EncodeStore(*a_, &bytes_).ok());
    AsFormatFour(&bytes_);
  }

  // Format 4 has no disk log flag before each table shard's u32 dim and
  // u64 floats a row.
  void AsFormatFour(std::string* bytes) const {
    std::string flag_then_shape(1, '\0');
    const uint32_t dim = kDim;
    const uint64_t row_floats = a_->Table(keys_[0])->RowFloats();
    flag_then_shape.append(reinterpret_cast<const char*>(&dim), 4);
    flag_then_shape.append(reinterpret_cast<const char*>(&row_floats), 8);
    std::vector<size_t> flags;
    for (size_t at = bytes->find(flag_then_shape); at != std::string::npos; at = bytes->find(flag_then_shape, at + 1)) {
      flags.push_back(at);
    }
    ASSERT_EQ(flags.size(), static_cast<size_t>(case_.held));
    for (auto at = flags.rbegin(); at != flags.rend(); ++at) bytes->erase(*at, 1);
    const uint32_t four = 4;
    bytes->replace(0, 4, reinterpret_cast<const char*>(&four), 4);
  }

  // The rows of the shards held, read from `store`.
  std::vector<float> ReadHeld(SliceStore& store) {
    std::vector<float> out;
    for (int i = 0; i < case_.held; ++i) {
      std::vector<float> rows(ids_[i].size() * kDim);
      store.Table(keys_[i])->Read(ids_[i], absl::MakeSpan(rows), /*count=*/false);
      out.insert(out.end(), rows.begin(), rows.end());
    }
    return out;
  }

  // A store restored as Checkpointer::Restore does: the store, then its disk tier.
  std::unique_ptr<SliceStore> Restore(const std::string& bytes, const std::string& snapshot, const std::string& name) {
    disks_.push_back(OpenDisk(name + sub_));
    auto store = std::make_unique<SliceStore>(&pool_, false, max_bytes_);
    store->SetTableDisk(disks_.back().get());
    EXPECT_TRUE(DecodeStore(bytes, store.get()).ok());
    std::vector<TableDisk::Rename> renames = store->DiskLogRenames();
    EXPECT_TRUE(disks_.back()->RestoreFrom(snapshot, &renames).ok());
    store->OwnDiskLogs(renames);
    return store;
  }

  // What ps_export writes of `store`'s checkpoint (server 0 of a job of
  // one), in ReadHeld's order.
  std::vector<float> Exported(const SliceStore& store) {
    const std::string dir = (dir_ / ("ckpt-" + sub_)).string(), out = dir + "/model.npz";
    EXPECT_TRUE(WriteCheckpoint(dir, CheckpointInfo{0, 1, 0, 1, {}}, store).ok());
    std::filesystem::create_directories(std::filesystem::path(TableSnapshotPath(dir, 0, 1)).parent_path());
    EXPECT_TRUE(store.table_disk()->Snapshot(TableSnapshotPath(dir, 0, 1)).ok());
    const absl::StatusOr<ExportSummary> summary = ExportCheckpoints(dir, out);
    EXPECT_TRUE(summary.ok()) << summary.status();
    absl::StatusOr<std::unique_ptr<ModelFileReader>> in = ModelFileReader::Open(out);
    if (!summary.ok() || !in.ok()) return {};
    const absl::StatusOr<std::string> ids = (*in)->ReadAll("emb.ids"), rows = (*in)->ReadAll("emb.rows");
    if (!ids.ok() || !rows.ok() || rows->size() != ids->size() / sizeof(uint64_t) * kDim * sizeof(float)) return {};
    absl::flat_hash_map<uint64_t, size_t> at;  // id -> its row's index in the file
    for (size_t i = 0; i < ids->size() / sizeof(uint64_t); ++i) {
      uint64_t id;
      std::memcpy(&id, ids->data() + i * sizeof(uint64_t), sizeof(id));
      EXPECT_TRUE(at.emplace(id, i).second) << "row " << id << " exported twice";
    }
    std::vector<float> out_rows;
    for (int s = 0; s < case_.held; ++s) {
      for (uint64_t id : ids_[s]) {
        auto it = at.find(id);
        if (it == at.end()) return {};
        const float* row = reinterpret_cast<const float*>(rows->data()) + it->second * kDim;
        out_rows.insert(out_rows.end(), row, row + kDim);
      }
    }
    EXPECT_EQ(at.size(), out_rows.size() / kDim) << "rows of no shard held exported";
    return out_rows;
  }

  Case case_{};
  std::string sub_;
  ThreadPool pool_{1};
  ModelSpec model_;
  std::vector<uint32_t> keys_;
  std::vector<std::vector<uint64_t>> ids_;
  std::unique_ptr<TableDisk> disk_a_;
  std::vector<std::unique_ptr<TableDisk>> disks_;
  std::unique_ptr<SliceStore> a_;
  std::vector<float> trained_;
  std::string bytes_, snap4_;
  uint64_t max_bytes_ = 0;
};

TEST_F(FormatFourTest, ItsDiskRowsStayThroughTheCheckpointsAfterItAndAreExportedOnce) {
  for (const Case& c : {Case{1, 1}, Case{2, 2}, Case{2, 1}}) {
    SCOPED_TRACE(absl::StrCat(c.shards, " shards in the log, ", c.held, " held"));
    WriteFormatFour(c);
    if (HasFatalFailure()) return;
    std::unique_ptr<SliceStore> b = Restore(bytes_, snap4_, "b");
    const bool alone = c.shards == 1;
    EXPECT_EQ(b->Table(keys_[0])->own_disk_log(), alone);
    const absl::StatusOr<SliceImage> image = EncodeSliceImage(*b, keys_[0]);
    EXPECT_EQ(image.status().code(), alone ? absl::StatusCode::kOk : absl::StatusCode::kFailedPrecondition)
        << image.status();
    EXPECT_EQ(ReadHeld(*b), trained_);
    // Its next checkpoint, restored.
    std::string again;
    ASSERT_TRUE(EncodeStore(*b, &again).ok());
    const std::string snap = (dir_ / ("snap-" + sub_)).string();
    ASSERT_TRUE(b->table_disk()->Snapshot(snap).ok());
    std::unique_ptr<SliceStore> restored = Restore(again, snap, "c");
    EXPECT_EQ(restored->Table(keys_[0])->own_disk_log(), alone);
    EXPECT_EQ(ReadHeld(*restored), trained_) << "rows on disk lost in the checkpoint after the restore";
    // Exported (every shard held: ps_export wants all of the table's).
    if (c.held == c.shards) {
      EXPECT_EQ(Exported(*b), trained_);
    }
  }
}

}  // namespace
}  // namespace ps
