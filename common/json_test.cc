#include "common/json.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(JsonQuoteTest, EscapesWhatJsonRequires) {
  EXPECT_EQ(JsonQuote("fc0.weight"), "\"fc0.weight\"");
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("a \"b\" c\\d"), "\"a \\\"b\\\" c\\\\d\"");
  EXPECT_EQ(JsonQuote("line\nnext\ttab\r"), "\"line\\nnext\\ttab\\r\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0x\x1f", 6)), "\"nul\\u0000x\\u001f\"");
  EXPECT_EQ(JsonQuote("h\xc3\xa9"), "\"h\xc3\xa9\"");  // UTF-8 passes through
}

}  // namespace
}  // namespace ps
