#include "worker/data/spam_corpus.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/md5.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// A small corpus in a temporary directory, with all five groups (empty
// unless a test adds messages).
class SpamCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/spam_corpus_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* g : kSpamGroups) std::filesystem::create_directory(dir_ + "/" + g);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

  // The .json the package would ship for a message.
  static std::string Json(const std::string& id, const std::string& group, const std::string& md5,
                          const std::string& text) {
    return absl::StrCat("{\"id\":", JsonQuote(id), ",\"group\":", JsonQuote(group),
                        ",\"checksum\":{\"type\":\"MD5\",\"value\":", JsonQuote(md5), "},\"text\":", JsonQuote(text),
                        "}");
  }

  // Adds a consistent message; returns GROUP/STEM's path without extension.
  std::string Add(const std::string& group, const std::string& id, const std::string& text) {
    const std::string md5 = Md5Hex(text);
    const std::string base = absl::StrCat(dir_, "/", group, "/", id, ".", md5);
    Write(base + ".txt", text);
    Write(base + ".json", Json(id, group, md5, text));
    return base;
  }

  absl::Status ReadFixture() { return ReadSpamCorpus(dir_, SpamCorpusOptions{.expect_full_corpus = false}).status(); }

  std::string dir_;
};

TEST_F(SpamCorpusTest, ReadsGoodFixtureInGroupAndNameOrder) {
  const std::string binary("Subject: \0\xff bytes\r\n", 20);
  Add("spam-2", "00007", "Subject: WIN $$$\n");
  Add("easy-ham-1", "00002", "second ham");
  Add("easy-ham-1", "00001", binary);
  Write(dir_ + "/easy-ham-1/README", "ignored");
  absl::StatusOr<std::vector<SpamMessage>> corpus =
      ReadSpamCorpus(dir_, SpamCorpusOptions{.expect_full_corpus = false});
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  ASSERT_EQ(corpus->size(), 3u);
  const SpamMessage& first = (*corpus)[0];
  EXPECT_EQ(first.group, "easy-ham-1");
  EXPECT_EQ(first.stem, "00001." + Md5Hex(binary));
  EXPECT_EQ(first.md5, Md5Hex(binary));
  EXPECT_EQ(first.label, 0);
  EXPECT_EQ(first.text, binary);
  EXPECT_EQ((*corpus)[1].text, "second ham");
  EXPECT_EQ((*corpus)[2].group, "spam-2");
  EXPECT_EQ((*corpus)[2].label, 1);
  EXPECT_EQ((*corpus)[2].md5, Md5Hex("Subject: WIN $$$\n"));
}

TEST_F(SpamCorpusTest, JsonMayReorderEscapeAndAddFields) {
  const std::string md5 = Md5Hex("abc");
  ASSERT_EQ(md5, "900150983cd24fb0d6963f7d28e17f72");  // RFC 1321
  const std::string base = dir_ + "/hard-ham-1/00003." + md5;
  Write(base + ".txt", "abc");
  Write(base + ".json",
        " {\"text\": \"a\\u00e9\\\"\\n\",\n"
        "  \"extra\": [1, -2.5e3, true, null, {\"x\": []}],\n"
        "  \"checksum\": {\"value\": \"" +
            md5 +
            "\", \"type\": \"MD5\"},\n"
            "  \"gr\\u006fup\": \"hard-ham-1\", \"id\": \"00003\"}\n");
  EXPECT_TRUE(ReadFixture().ok()) << ReadFixture();
}

TEST_F(SpamCorpusTest, MissingDirGroupOrFileIsNotFound) {
  absl::Status s = ReadSpamCorpus(dir_ + "/nope").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/nope"));

  const std::string base = Add("spam-1", "00001", "spam text");
  std::filesystem::remove(base + ".txt");
  s = ReadFixture();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(base + ".txt"));

  Add("spam-1", "00001", "spam text");
  std::filesystem::remove(base + ".json");
  s = ReadFixture();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(base + ".json"));

  std::filesystem::remove_all(dir_ + "/hard-ham-1");
  s = ReadFixture();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/hard-ham-1"));
}

TEST_F(SpamCorpusTest, ContentNotMatchingChecksumIsDataLoss) {
  const std::string base = Add("easy-ham-2", "00010", "original");
  Write(base + ".txt", "tampered");
  const absl::Status s = ReadFixture();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(base + ".txt: MD5 " + Md5Hex("tampered")));
}

// The known exception accepts its pinned MD5 only, not its name's.
TEST_F(SpamCorpusTest, KnownExceptionIsPinned) {
  const std::string md5 = "244a63cd74c81123ef26129453e32c95";
  const std::string base = dir_ + "/hard-ham-1/00230." + md5;
  Write(base + ".txt", "not the shipped content");
  Write(base + ".json", Json("00230", "hard-ham-1", md5, "x"));
  const absl::Status s = ReadFixture();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("expected 30e1fcfccb8a25b8550c292233698b67"));
}

TEST_F(SpamCorpusTest, MalformedJsonIsDataLossNamingTheFile) {
  const std::string base = Add("spam-2", "00004", "text");
  const std::string md5 = Md5Hex("text");
  const std::string good = Json("00004", "spam-2", md5, "text");
  const std::vector<std::string> bad = {
      good.substr(0, good.size() / 2),                                  // truncated
      good.substr(0, good.size() - 1),                                  // truncated at the end
      "",                                                               // empty
      "not json",                                                       //
      good + " x",                                                      // trailing bytes
      "{\"id\":\"00004\" \"group\":\"spam-2\"}",                        // no comma
      "{\"id\":\"00\\q04\"}",                                           // bad escape
      "{\"id\":\"0000\x01\"}",                                          // raw control character
      Json("00005", "spam-2", md5, "text"),                             // id disagrees
      Json("00004", "spam-1", md5, "text"),                             // group disagrees
      Json("00004", "spam-2", Md5Hex("other"), "text"),                 // checksum disagrees
      "{\"id\":\"00004\",\"group\":\"spam-2\"}",                        // no checksum
      "{\"x\":" + std::string(100, '[') + std::string(100, ']') + "}",  // too deep
  };
  for (const std::string& json : bad) {
    Write(base + ".json", json);
    const absl::Status s = ReadFixture();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << json << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(base + ".json: ")) << json;
  }
}

TEST_F(SpamCorpusTest, BadFileNameIsDataLoss) {
  Write(dir_ + "/spam-1/00001.nothex.txt", "x");
  const absl::Status s = ReadFixture();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/spam-1/00001.nothex.txt"));
}

TEST_F(SpamCorpusTest, FullCorpusCheckRefusesOtherTotals) {
  Add("spam-1", "00001", "one");
  const absl::Status s = ReadSpamCorpus(dir_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("1 messages (1 spam), expected 6046 (1896 spam)"));
}

TEST(SpamSplitTest, TestMessageIsMd5ModFive) {
  EXPECT_TRUE(IsTestMessage("00000000000000000000000000000000"));
  EXPECT_FALSE(IsTestMessage("00000000000000000000000000000001"));
  EXPECT_TRUE(IsTestMessage("00000000000000000000000000000005"));
  EXPECT_TRUE(IsTestMessage("0000000000000000000000000000000f"));   // 15
  EXPECT_TRUE(IsTestMessage("00000000000000000000000000000014"));   // 20
  EXPECT_FALSE(IsTestMessage("00000000000000000000000000000010"));  // 16
  EXPECT_TRUE(IsTestMessage("ffffffffffffffffffffffffffffffff"));   // 2^128 - 1
  EXPECT_EQ(IsTestMessage("900150983cd24fb0d6963f7d28e17f72"), IsTestMessage("900150983CD24FB0D6963F7D28E17F72"));
}

TEST(SpamSplitDeathTest, NonMd5IsACallersBug) {
  EXPECT_DEATH(IsTestMessage("abc"), "not an MD5");
  EXPECT_DEATH(IsTestMessage("zz000000000000000000000000000000"), "not an MD5");
}

std::vector<SpamMessage> SyntheticCorpus(int n) {
  std::vector<SpamMessage> corpus(n);
  for (int i = 0; i < n; ++i) corpus[i].md5 = Md5Hex(absl::StrCat("message ", i));
  return corpus;
}

// Every training message is in exactly one shard; sizes differ by <= 1.
void ExpectShardsPartitionTraining(const std::vector<SpamMessage>& corpus, int workers) {
  std::set<size_t> seen;
  size_t smallest = corpus.size(), largest = 0;
  for (int rank = 0; rank < workers; ++rank) {
    absl::StatusOr<std::vector<size_t>> shard = TrainingShard(corpus, rank, workers);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(*shard, *TrainingShard(corpus, rank, workers));  // deterministic
    for (size_t i : *shard) {
      EXPECT_FALSE(IsTestMessage(corpus[i].md5));
      EXPECT_TRUE(seen.insert(i).second) << "message " << i << " in two shards";
    }
    smallest = std::min(smallest, shard->size());
    largest = std::max(largest, shard->size());
  }
  EXPECT_EQ(seen.size() + TestMessages(corpus).size(), corpus.size());
  EXPECT_LE(largest - smallest, 1u);
}

TEST(SpamSplitTest, ShardsAreDisjointAndCoverTraining) {
  const std::vector<SpamMessage> corpus = SyntheticCorpus(203);
  for (int workers : {1, 2, 3, 7}) ExpectShardsPartitionTraining(corpus, workers);
  // The order of the corpus does not matter, only the checksums.
  std::vector<SpamMessage> reversed(corpus.rbegin(), corpus.rend());
  const std::vector<size_t> shard = TrainingShard(corpus, 1, 3).value();
  const std::vector<size_t> shard_of_reversed = TrainingShard(reversed, 1, 3).value();
  ASSERT_EQ(shard.size(), shard_of_reversed.size());
  for (size_t k = 0; k < shard.size(); ++k) {
    EXPECT_EQ(corpus[shard[k]].md5, reversed[shard_of_reversed[k]].md5);
  }
}

TEST(SpamSplitTest, BadRankIsInvalidArgument) {
  const std::vector<SpamMessage> corpus = SyntheticCorpus(10);
  EXPECT_EQ(TrainingShard(corpus, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainingShard(corpus, -1, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainingShard(corpus, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RealSpamCorpusTest, ReadsAndSplitsTheRealCorpus) {
  if (!std::filesystem::exists(kDefaultSpamDir)) {
    GTEST_SKIP() << kDefaultSpamDir << " absent (scripts/fetch_spam_assassin.sh installs it)";
  }
  absl::StatusOr<std::vector<SpamMessage>> corpus = ReadSpamCorpus(kDefaultSpamDir);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  ASSERT_EQ(corpus->size(), kSpamCorpusMessages);
  size_t test_spam = 0, spam = 0;
  for (const SpamMessage& m : *corpus) {
    spam += m.label;
    if (m.stem == "00230.244a63cd74c81123ef26129453e32c95") {
      EXPECT_EQ(m.md5, "30e1fcfccb8a25b8550c292233698b67");
    }
  }
  const std::vector<size_t> test = TestMessages(*corpus);
  for (size_t i : test) test_spam += (*corpus)[i].label;
  const double test_fraction = static_cast<double>(test.size()) / corpus->size();
  const double test_spam_fraction = static_cast<double>(test_spam) / test.size();
  const double spam_fraction = static_cast<double>(spam) / corpus->size();
  std::printf("test split: %zu of %zu messages (%.4f), %zu spam (%.4f of the test, %.4f overall)\n", test.size(),
              corpus->size(), test_fraction, test_spam, test_spam_fraction, spam_fraction);
  EXPECT_NEAR(test_fraction, 0.2, 0.02);  // 6046 draws: one standard deviation is 0.005
  EXPECT_NEAR(test_spam_fraction, spam_fraction, 0.03);
  EXPECT_EQ(test, TestMessages(*corpus));
  ExpectShardsPartitionTraining(*corpus, 3);
}

}  // namespace
}  // namespace ps
