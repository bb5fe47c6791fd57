// The spam trainer (worker/train/spam_trainer.h) end to end in one process: a
// scheduler and two servers on threads, two workers on threads training on a
// small synthetic corpus through the servers' embedding table.
#include <algorithm>
#include <cmath>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/slice_store.h"
#include "tests/cluster_fixture.h"
#include "worker/data/md5.h"
#include "worker/train/spam_trainer.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using testing::InProcessCluster;

static_assert(kMaxIdsPerRequest == SliceStore::kMaxRowsPerRequest,
              "the worker's request limit is the servers' (worker/train/spam_trainer.h)");

// `n` messages of 20 words: 15 from a vocabulary both classes share and 5
// from their class's own, in a random order. Separable, but only through
// the rows of the class words.
std::vector<SpamMessage> SyntheticCorpus(int n) {
  const std::vector<std::string> shared = {"the", "a", "to", "of", "and", "you", "for", "is", "on", "with"};
  const std::vector<std::string> spam = {"free", "money", "offer", "click", "winner", "$$$", "!!!", "cash"};
  const std::vector<std::string> ham = {"meeting", "project", "lunch", "review", "patch", "kernel", "thanks"};
  std::vector<SpamMessage> corpus;
  for (int i = 0; i < n; ++i) {
    const int label = i % 3 == 0 ? 1 : 0;
    const std::vector<std::string>& own = label ? spam : ham;
    std::vector<std::string> words;
    for (int k = 0; k < 20; ++k) {
      const uint64_t r = SplitMix64Finalize(uint64_t(i) * 1000 + k);
      words.push_back(k < 15 ? shared[r % shared.size()] : own[r % own.size()]);
    }
    std::sort(words.begin(), words.end(), [&](const std::string& a, const std::string& b) {
      return SplitMix64Finalize(Fnv1a64(a) + i) < SplitMix64Finalize(Fnv1a64(b) + i);
    });
    SpamMessage m;
    m.text = absl::StrCat("Subject: message ", i, "\n\n", absl::StrJoin(words, " "));
    m.md5 = Md5Hex(m.text);
    m.group = label ? "spam-1" : "easy-ham-1";
    m.stem = absl::StrCat(i, ".", m.md5);
    m.label = label;
    corpus.push_back(std::move(m));
  }
  return corpus;
}

struct WorkerRun {
  absl::StatusOr<SpamTrainResult> result = absl::UnknownError("not run");
  std::vector<TrainEvent> events;

  std::vector<const TrainEvent*> Of(const std::string& kind) const {
    std::vector<const TrainEvent*> out;
    for (const TrainEvent& e : events) {
      if (e.kind == kind) out.push_back(&e);
    }
    return out;
  }
};

std::string Field(const TrainEvent& e, const std::string& name) {
  for (const auto& [key, value] : e.fields) {
    if (key == name) return value;
  }
  return "";
}

class SpamTrainingTest : public ::testing::Test {
 protected:
  SpamTrainerOptions Options(const std::string& consistency) {
    SpamTrainerOptions o;
    o.corpus = &corpus_;
    o.consistency = *Consistency::Parse(consistency);
    o.model.dim = 8;
    o.batch_size = 8;
    o.epochs = 3;
    o.progress_every = absl::Seconds(1000);
    o.client.request_timeout = absl::Seconds(30);
    return o;
  }

  // Starts a scheduler and two servers, trains two workers on threads
  // (worker w asks for rank w), and returns each worker's result and events.
  std::vector<WorkerRun> Train(SpamTrainerOptions options) {
    auto cluster = InProcessCluster::Start(2, 2);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (!cluster.ok()) return {};
    options.client.scheduler = (*cluster)->scheduler_endpoint();
    std::vector<WorkerRun> runs(2);
    std::vector<std::future<void>> threads;
    for (int w = 0; w < 2; ++w) {
      threads.push_back(std::async(std::launch::async, [&runs, options, w] {
        SpamTrainerOptions mine = options;
        mine.client.rank = w;
        runs[w].result = TrainSpam(mine, [&runs, w](const TrainEvent& e) { runs[w].events.push_back(e); });
      }));
    }
    for (auto& t : threads) t.get();
    EXPECT_TRUE((*cluster)->Join(absl::Seconds(30)).ok());
    return runs;
  }

  const std::vector<SpamMessage> corpus_ = SyntheticCorpus(400);
};

void ExpectLearned(const std::vector<WorkerRun>& runs, int epochs) {
  ASSERT_EQ(runs.size(), 2u);
  for (const WorkerRun& r : runs) ASSERT_TRUE(r.result.ok()) << r.result.status();
  const SpamTrainResult& r0 = *runs[0].result;
  ASSERT_TRUE(r0.evaluated);
  EXPECT_GE(r0.eval.accuracy.value_or(0), 0.95);
  EXPECT_GE(r0.eval.auc.value_or(0), 0.99);
  EXPECT_FALSE(runs[1].result->evaluated) << "only rank 0 evaluates";
  EXPECT_EQ(r0.steps, runs[1].result->steps) << "every worker runs the same steps";
  EXPECT_EQ(r0.samples, runs[1].result->samples);
  // One evaluation per epoch, the last one final, each with an AUC.
  const auto evals = runs[0].Of("eval");
  ASSERT_EQ(evals.size(), static_cast<size_t>(epochs));
  EXPECT_EQ(Field(*evals.back(), "final"), "true");
  for (const TrainEvent* e : evals) EXPECT_NE(Field(*e, "test_auc"), "null");
  EXPECT_TRUE(runs[1].Of("eval").empty());
  // Rank 0 reports the table's rows, summed over the two servers.
  const auto stats = runs[0].Of("server_stats");
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_GT(std::stoll(Field(*stats[0], "table_rows")), 0);
  EXPECT_THAT(stats[0]->ToJson(), HasSubstr("\"servers\":2"));
}

TEST_F(SpamTrainingTest, SyncWorkersLearnTheSyntheticCorpus) { ExpectLearned(Train(Options("sync")), 3); }

TEST_F(SpamTrainingTest, AsyncWorkersLearnTheSyntheticCorpus) { ExpectLearned(Train(Options("async")), 3); }

// In sync mode a pull for step t+1 waits for every worker's step t and the
// servers apply the mean, which does not depend on arrival order: two runs
// end with the same parameters, to the bit.
TEST_F(SpamTrainingTest, SyncRunsAreReproducible) {
  const std::vector<WorkerRun> a = Train(Options("sync"));
  const std::vector<WorkerRun> b = Train(Options("sync"));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  ASSERT_TRUE(a[0].result.ok() && b[0].result.ok());
  EXPECT_EQ(a[0].result->eval.loss, b[0].result->eval.loss);
  EXPECT_EQ(a[0].result->eval.auc, b[0].result->eval.auc);
}

// With a limit of 32 ids a request, messages keep 4 distinct ids each (batch
// of 8) and the evaluation pulls the test split in many chunks; every test
// message is still evaluated.
TEST_F(SpamTrainingTest, SmallRequestsChunkTheEvaluation) {
  SpamTrainerOptions o = Options("sync");
  o.max_ids_per_request = 32;
  o.epochs = 1;
  const std::vector<WorkerRun> runs = Train(o);
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_TRUE(runs[0].result.ok()) << runs[0].result.status();
  ASSERT_TRUE(runs[1].result.ok()) << runs[1].result.status();
  const auto start = runs[0].Of("start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(Field(*start[0], "max_ids_per_message"), "4");
  const int64_t tests = std::stoll(Field(*start[0], "test_messages"));
  ASSERT_GT(tests, 32);
  const double accuracy = runs[0].result->eval.accuracy.value_or(-1);
  // A fraction of all the test messages: k / tests for a whole k.
  const double k = accuracy * tests;
  EXPECT_NEAR(k, std::round(k), 1e-6);
  EXPECT_GT(accuracy, 0.5);
}

}  // namespace
}  // namespace ps
