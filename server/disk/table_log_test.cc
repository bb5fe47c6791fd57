// One shard's disk log: every row reads back as last written through
// overwrites, deletes and compaction, with the files bounded; a snapshot
// restores the rows of its moment; a damaged snapshot is refused by name;
// reads past the page cache return the same bytes.
#include "server/disk/table_log.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr size_t kFloats = 6;  // 48-byte records: 65,536 to a segment

struct Stored {
  uint64_t steps;
  std::vector<float> floats;
  bool operator==(const Stored&) const = default;
};

// The parameter: the index's tag bits. 4 in the "SharedTags" runs, so
// that thousands of ids share each tag and every lookup, replacement,
// deletion and compaction must tell them apart by the records' ids.
class TableLogTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("table_log_", getpid(), "_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<TableLog> Create(const std::string& sub, bool direct = false) {
    auto log = TableLog::Create((dir_ / sub).string(), kFloats, direct, GetParam());
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? *std::move(log) : nullptr;
  }

  // Writes row `id` of `round` to the log and the reference.
  static void Put(TableLog& log, std::map<uint64_t, Stored>& reference, uint64_t id, int round) {
    Stored row{static_cast<uint64_t>(round), {}};
    for (size_t f = 0; f < kFloats; ++f) row.floats.push_back(static_cast<float>(id % 1000) + round * 0.5f + f);
    // `replaces` as a table shard says it: known for half the rows (a wrong
    // false costs a read, never a second record).
    const bool replaces = reference.contains(id) && id % 2 == 0;
    ASSERT_TRUE(log.Put(id, row.steps, /*last_seen=*/round, row.floats, replaces).ok());
    reference[id] = row;
  }

  static void ExpectHolds(TableLog& log, const std::map<uint64_t, Stored>& reference, uint64_t ids) {
    uint64_t wrong = 0;
    for (uint64_t id = 0; id < ids; ++id) {
      DiskRow row;
      const bool found = log.Get(id * 7919, &row);
      auto it = reference.find(id * 7919);
      if (found != (it != reference.end()) || (found && !(Stored{row.steps, row.floats} == it->second))) ++wrong;
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(log.rows(), reference.size());
  }

  std::filesystem::path dir_;
};

TEST_P(TableLogTest, RowsReadBackAsLastWrittenThroughOverwritesDeletesAndCompaction) {
  std::unique_ptr<TableLog> log = Create("live");
  ASSERT_NE(log, nullptr);
  std::map<uint64_t, Stored> reference;
  constexpr uint64_t kIds = 5000;
  uint64_t most_bytes = 0;
  for (int round = 0; round < 40; ++round) {  // 200,000 records: three segments sealed and compacted
    for (uint64_t id = 0; id < kIds; ++id) {
      if (round % 3 == 2 && id % 7 == 0) {
        log->Delete(id * 7919);
        reference.erase(id * 7919);
      } else {
        Put(*log, reference, id * 7919, round);
      }
    }
    most_bytes = std::max(most_bytes, log->file_bytes());
  }
  ExpectHolds(*log, reference, kIds);
  // Dead records are compacted away: never more than the live rows twice
  // over, plus the head segment and the one being compacted.
  const uint64_t segment = TableLog::kMaxRecordsPerSegment * log->record_bytes();
  EXPECT_LE(most_bytes, 2 * reference.size() * log->record_bytes() + 2 * segment);
  EXPECT_LT(log->file_bytes(), 40 * kIds * log->record_bytes() / 2);
  // Compaction asked for (the store at its bound) moves what is live and
  // loses nothing.
  while (log->Compact()) {
  }
  ExpectHolds(*log, reference, kIds);
}

TEST_P(TableLogTest, ASnapshotRestoresTheRowsOfItsMoment) {
  std::unique_ptr<TableLog> log = Create("live");
  ASSERT_NE(log, nullptr);
  std::map<uint64_t, Stored> reference;
  for (int round = 0; round < 15; ++round) {
    for (uint64_t id = 0; id < 6000; ++id) Put(*log, reference, id * 7919, round);
  }
  const std::string snapshot = (dir_ / "snap").string();
  ASSERT_TRUE(log->Snapshot(snapshot).ok());
  const std::map<uint64_t, Stored> at_snapshot = reference;
  for (int round = 15; round < 40; ++round) {  // the live log moves on, compacting the snapshot's segments away
    for (uint64_t id = 0; id < 6000; ++id) {
      if (id % 5 == 0) {
        log->Delete(id * 7919);
        reference.erase(id * 7919);
      } else {
        Put(*log, reference, id * 7919, round);
      }
    }
  }
  ExpectHolds(*log, reference, 6000);
  auto restored = TableLog::Restore((dir_ / "restored").string(), snapshot, false);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ExpectHolds(**restored, at_snapshot, 6000);
  // The snapshot read in place, twice in the same order (ps_export reads
  // the ids, then the rows).
  std::map<uint64_t, Stored> listed;
  std::vector<uint64_t> order, again_order;
  ASSERT_TRUE(TableLog::ForEachRow(snapshot, kFloats, [&](uint64_t id, const DiskRow& row) {
                listed[id] = Stored{row.steps, row.floats};
                order.push_back(id);
                return absl::OkStatus();
              }).ok());
  ASSERT_TRUE(TableLog::ForEachRow(snapshot, kFloats, [&](uint64_t id, const DiskRow&) {
                again_order.push_back(id);
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(order, again_order);
  EXPECT_EQ(order.size(), at_snapshot.size());
  EXPECT_EQ(listed, at_snapshot);
  // The restored log appends to new files: the snapshot stays as it was.
  Put(**restored, listed, 0, 99);
  auto again = TableLog::Restore((dir_ / "again").string(), snapshot, false);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectHolds(**again, at_snapshot, 6000);
}

TEST_P(TableLogTest, ADamagedSnapshotIsRefusedNamingTheFile) {
  std::unique_ptr<TableLog> log = Create("live");
  ASSERT_NE(log, nullptr);
  std::map<uint64_t, Stored> reference;
  for (uint64_t id = 0; id < 100; ++id) Put(*log, reference, id * 7919, 1);
  const std::string snapshot = (dir_ / "snap").string();
  ASSERT_TRUE(log->Snapshot(snapshot).ok());

  const absl::Status wrong_width =
      TableLog::ForEachRow(snapshot, kFloats + 1, [](uint64_t, const DiskRow&) { return absl::OkStatus(); });
  EXPECT_EQ(wrong_width.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(wrong_width.message()), HasSubstr("rows of 6 floats, not 7"));

  std::filesystem::remove(std::filesystem::path(snapshot) / "0.seg");
  auto no_segment = TableLog::Restore((dir_ / "r1").string(), snapshot, false);
  EXPECT_EQ(no_segment.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(no_segment.status().message()), HasSubstr("of segment 0, which it does not hold"));

  std::filesystem::resize_file(std::filesystem::path(snapshot) / "index", 30);
  auto truncated = TableLog::Restore((dir_ / "r2").string(), snapshot, false);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr(snapshot + "/index"));
}

TEST_P(TableLogTest, DirectReadsReturnTheSameRows) {
  std::unique_ptr<TableLog> log = Create("direct", /*direct=*/true);
  ASSERT_NE(log, nullptr);
  std::map<uint64_t, Stored> reference;
  // More than a write buffer: some rows read from the file, some from the buffer.
  const uint64_t ids = 2 * TableLog::kBufferBytes / log->record_bytes() + 17;
  for (uint64_t id = 0; id < ids; ++id) Put(*log, reference, id * 7919, 3);
  ExpectHolds(*log, reference, ids);
}

// The expiry sweep's scan: calls of a few records each go on where the last
// stopped, round every segment and the write buffer, and delete exactly
// the rows `drop` names.
TEST_P(TableLogTest, ScansGoOnWhereTheyStoppedAndDropWhatTheyAreTold) {
  std::unique_ptr<TableLog> log = Create("scan");
  ASSERT_NE(log, nullptr);
  std::map<uint64_t, Stored> reference;
  for (int round = 0; round < 30; ++round) {  // 90,000 records: two segments, the rest in the buffer and head
    for (uint64_t id = 0; id < 3000; ++id) Put(*log, reference, id * 7919, round);
  }
  // Enough calls of 1,000 records to pass every record once.
  const uint64_t records = log->file_bytes() / log->record_bytes();
  std::map<uint64_t, int> visits;
  uint64_t dropped = 0;
  for (uint64_t call = 0; call < (records + 999) / 1000; ++call) {
    dropped += log->ScanLive(1000, [&](uint64_t id, uint64_t last_seen) {
      ++visits[id];
      EXPECT_EQ(last_seen, 29u);  // only live (latest) records are offered
      return (id / 7919) % 2 == 0;
    });
  }
  EXPECT_EQ(dropped, 1500u);
  EXPECT_EQ(visits.size(), 3000u);  // every live row offered
  for (const auto& [id, n] : visits) EXPECT_LE(n, (id / 7919) % 2 == 0 ? 1 : 2) << id;
  for (auto it = reference.begin(); it != reference.end();) {
    it = (it->first / 7919) % 2 == 0 ? reference.erase(it) : std::next(it);
  }
  ExpectHolds(*log, reference, 3000);
}

// A snapshot taken when every row of a segment was deleted: the restored
// log holds nothing, keeps no empty segment, and compaction has nothing to
// do (it once picked such a segment forever).
TEST_P(TableLogTest, ASnapshotOfDeletedRowsRestoresEmptyAndCompactionEnds) {
  std::unique_ptr<TableLog> log = Create("live");
  ASSERT_NE(log, nullptr);
  std::map<uint64_t, Stored> reference;
  for (uint64_t id = 0; id < 500; ++id) Put(*log, reference, id * 7919, 1);
  for (uint64_t id = 0; id < 500; ++id) log->Delete(id * 7919);
  ASSERT_TRUE(log->Snapshot((dir_ / "snap").string()).ok());
  auto restored = TableLog::Restore((dir_ / "restored").string(), (dir_ / "snap").string(), false);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->rows(), 0u);
  EXPECT_EQ((*restored)->file_bytes(), 0u);
  EXPECT_FALSE((*restored)->Compact());
  ExpectHolds(**restored, {}, 500);
}

// A disk that fills (emulated with RLIMIT_FSIZE: a write past it fails
// with EFBIG): the write that cannot go is refused with the error, every
// row written before still reads back (from the write buffer when the
// file could not take it), and once there is room again the log goes on.
TEST_P(TableLogTest, AFullDiskRefusesTheWriteAndLosesNoRowWrittenBefore) {
  std::unique_ptr<TableLog> log = Create("full");
  ASSERT_NE(log, nullptr);
  struct rlimit was;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = was;
  small.rlim_cur = 3 * TableLog::kBufferBytes / 2;  // the second buffer's flush fails
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::map<uint64_t, Stored> reference;
  absl::Status refused;
  uint64_t id = 0;
  for (; id < 100000 && refused.ok(); ++id) {
    Stored row{id, std::vector<float>(kFloats, static_cast<float>(id))};
    refused = log->Put(id * 7919, row.steps, 0, row.floats);
    if (refused.ok()) reference[id * 7919] = row;
  }
  EXPECT_EQ(log->Put(0, 1, 0, std::vector<float>(kFloats, 1.0f)).code(), refused.code());  // still full
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &was), 0);
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.message()), HasSubstr("cannot write the table segment"));
  ExpectHolds(*log, reference, id);
  // Room again: the buffered rows go to the file, new ones follow.
  Put(*log, reference, 1, 9);
  ASSERT_TRUE(log->Snapshot((dir_ / "snap").string()).ok());
  auto restored = TableLog::Restore((dir_ / "restored").string(), (dir_ / "snap").string(), false);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ExpectHolds(**restored, reference, id);
}

INSTANTIATE_TEST_SUITE_P(Tags, TableLogTest, ::testing::Values(32, 4), [](const auto& info) {
  return info.param == 32 ? std::string("Tags32") : std::string("SharedTags");
});

}  // namespace
}  // namespace ps
