#include "worker/data/text_tokens.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

// Lower-case, runs of [a-z0-9], runs of one kept character; bytes >= 0x80
// ("\xc3\xa9", an e-acute in UTF-8) separate.
constexpr char kText[] = "Subject: FREE $$$ money!!! Call 1-800-555-0199 now\xc3\xa9x $!";

TEST(TextTokensTest, SplitsIntoLowerCaseRuns) {
  EXPECT_THAT(SplitTokens(kText, 100), ElementsAre("subject", "free", "$$$", "money", "!!!", "call", "1", "800", "555",
                                                   "0199", "now", "x", "$", "!"));
  EXPECT_THAT(SplitTokens(kText, 3), ElementsAre("subject", "free", "$$$"));
  EXPECT_TRUE(SplitTokens(" \t\n.,;:-\xff", 100).empty());
  EXPECT_TRUE(SplitTokens("", 100).empty());
}

// Published FNV-1a test vectors; the finaliser maps 0 to 0.
TEST(TextTokensTest, HashPrimitives) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(SplitMix64Finalize(0), 0u);
  EXPECT_EQ(SplitMix64Finalize(1), 0x5692161d100b05e5ull);
}

// The exact ids, computed by a separate implementation of the documented
// recipe: they are the keys of trained tables and must never change.
TEST(TextTokensTest, ExactIdsOfAFixedString) {
  const std::vector<uint64_t> want = {
      0x4bfd8107e3e09a63ull, 0x38733cf805dbb0f8ull, 0x38a821ee0f7db796ull, 0xa06265c3347168d0ull, 0x7b58392e56df6918ull,
      0x66d12dd78f2fed18ull, 0x83c7f20d821134d5ull, 0x0da2ded1186066beull, 0xbf1b2e716eec7fb2ull, 0xf76682dc1565c94dull,
      0x7c6fbde42ffab823ull, 0xd8ced02832b6b78bull, 0xa4bfb9cf1e207542ull, 0x546f33d5497c0ac3ull, 0x3faf6526f350fe4bull,
      0x80c1aa36bf3631feull, 0x27e4d25d2231ca0aull, 0x076d92e86db20a78ull, 0x8e73aa689f65a7b2ull, 0x8fac0cc4b798c305ull,
      0x4d720b8d0f277387ull, 0xf1e5fd6b5ef91ae7ull, 0x964d24d4f75907bfull, 0xc33d3f1999df7452ull, 0x7afab730b81c66baull,
      0x8b22035409620de1ull, 0xab58d05ecd19695dull,
  };
  EXPECT_EQ(HashedTokens(kText, TokenOptions{}), want);
}

TEST(TextTokensTest, IdsInterleaveUnigramsAndBigrams) {
  const std::vector<uint64_t> ids = HashedTokens("Win CASH now", TokenOptions{});
  EXPECT_THAT(ids, ElementsAre(UnigramId("win"), UnigramId("cash"), BigramId("win", "cash"), UnigramId("now"),
                               BigramId("cash", "now")));
  EXPECT_EQ(UnigramId("CaSh"), UnigramId("cash"));
  EXPECT_NE(UnigramId("cash"), BigramId("cash", ""));  // salts differ
  EXPECT_NE(BigramId("a", "b"), BigramId("b", "a"));
}

TEST(TextTokensTest, OptionsCapTokensAndDropBigrams) {
  TokenOptions unigrams_only;
  unigrams_only.bigrams = false;
  EXPECT_THAT(HashedTokens("a b a", unigrams_only), ElementsAre(UnigramId("a"), UnigramId("b"), UnigramId("a")));
  TokenOptions capped;
  capped.max_tokens = 2;
  EXPECT_THAT(HashedTokens("a b c d", capped), ElementsAre(UnigramId("a"), UnigramId("b"), BigramId("a", "b")));
  std::string huge;
  for (int i = 0; i < 30000; ++i) huge += "w ";
  EXPECT_EQ(HashedTokens(huge, TokenOptions{}).size(), 2 * 20000u - 1);
  EXPECT_TRUE(HashedTokens("...", TokenOptions{}).empty());
}

}  // namespace
}  // namespace ps
