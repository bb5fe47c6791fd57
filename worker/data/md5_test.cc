#include "worker/data/md5.h"

#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

// The test suite of RFC 1321, appendix A.5.
TEST(Md5Test, RfcTestSuite) {
  EXPECT_EQ(Md5Hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(Md5Hex("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(Md5Hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(Md5Hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(Md5Hex("abcdefghijklmnopqrstuvwxyz"), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(Md5Hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(Md5Hex("1234567890123456789012345678901234567890"
                   "1234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
}

// Lengths around the padding boundaries (55 and 56 bytes need one and two
// final blocks); expected values from md5sum.
TEST(Md5Test, PaddingBoundaries) {
  EXPECT_EQ(Md5Hex(std::string(55, 'a')), "ef1772b6dff9a122358552954ad0df65");
  EXPECT_EQ(Md5Hex(std::string(56, 'a')), "3b0c8ac703f828b04c6c197006d17218");
  EXPECT_EQ(Md5Hex(std::string(63, 'a')), "b06521f39153d618550606be297466d5");
  EXPECT_EQ(Md5Hex(std::string(64, 'a')), "014842d480b571495a4a0363793f7367");
  EXPECT_EQ(Md5Hex(std::string(65, 'a')), "c743a45e0d2e6a95cb859adae0248435");
  EXPECT_EQ(Md5Hex(std::string(119, 'a')), "8a7bd0732ed6a28ce75f6dabc90e1613");
  EXPECT_EQ(Md5Hex(std::string(120, 'a')), "5f61c0ccad4cac44c75ff505e1f1e537");
  EXPECT_EQ(Md5Hex(std::string(1000000, 'a')), "7707d6ae4e027c70eea2a935c2296f21");
}

TEST(Md5Test, EveryByteValue) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(Md5Hex(bytes), "e2c865db4162bed963bfaa9ef6ac18f0");
}

TEST(Md5Test, IncrementalEqualsOneShotAtEverySplit) {
  std::string text;
  for (int i = 0; i < 200; ++i) text.push_back(static_cast<char>(i * 37 + 11));
  const Md5::Digest whole = Md5Digest(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Md5 md5;
    md5.Update(std::string_view(text).substr(0, cut));
    md5.Update(std::string_view(text).substr(cut));
    EXPECT_EQ(md5.Finish(), whole) << "cut at " << cut;
  }
}

TEST(Md5Test, ByteAtATime) {
  const std::string text =
      "The quick brown fox jumps over the lazy dog, repeatedly, "
      "until the message is longer than one block.";
  Md5 md5;
  for (char c : text) md5.Update(std::string_view(&c, 1));
  EXPECT_EQ(Md5ToHex(md5.Finish()), Md5Hex(text));
}

TEST(Md5DeathTest, UpdateAfterFinishIsABug) {
  Md5 md5;
  md5.Finish();
  EXPECT_DEATH(md5.Update("x"), "after Finish");
}

}  // namespace
}  // namespace ps
