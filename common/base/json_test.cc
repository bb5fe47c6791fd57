#include "common/base/json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

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

TEST(JsonLineTest, FieldsInTheOrderAdded) {
  EXPECT_EQ(JsonLine().Str(), "{}");
  EXPECT_EQ(JsonLine().Add("bench", "pushpull").Add("bytes", int64_t{1048576}).Add("gbps", 12.3456, 3).Str(),
            "{\"bench\":\"pushpull\",\"bytes\":1048576,\"gbps\":12.346}");
}

TEST(JsonLineTest, EscapesKeysAndStrings) {
  const std::string name = "fc\"0\"\n";
  EXPECT_EQ(JsonLine().Add("name", name).Add("k\\", std::string("v")).Str(),
            "{\"name\":\"fc\\\"0\\\"\\n\",\"k\\\\\":\"v\"}");
}

TEST(JsonLineTest, IntegersBooleansAndNull) {
  EXPECT_EQ(JsonLine().Add("i", 7).Add("neg", -3L).Add("u", uint64_t{18446744073709551615u}).Str(),
            "{\"i\":7,\"neg\":-3,\"u\":18446744073709551615}");
  EXPECT_EQ(JsonLine().Add("yes", true).Add("no", false).AddNull("none").Str(),
            "{\"yes\":true,\"no\":false,\"none\":null}");
}

TEST(JsonLineTest, DoublesKeepTheirPrecisionAndNonFiniteIsNull) {
  EXPECT_EQ(JsonLine().Add("a", 1.0, 1).Add("b", 0.12345, 4).Add("c", 2.0, 0).Str(),
            "{\"a\":1.0,\"b\":0.1235,\"c\":2}");
  EXPECT_EQ(JsonLine()
                .Add("nan", std::numeric_limits<double>::quiet_NaN(), 3)
                .Add("inf", -std::numeric_limits<double>::infinity(), 3)
                .Str(),
            "{\"nan\":null,\"inf\":null}");
  EXPECT_EQ(JsonLine().Add("some", std::optional<double>(1.5), 2).Add("none", std::optional<double>(), 2).Str(),
            "{\"some\":1.50,\"none\":null}");
}

TEST(JsonLineTest, SignificantDigitsAndRawValues) {
  EXPECT_EQ(JsonSignificant(0.123456789, 6), "0.123457");
  EXPECT_EQ(JsonSignificant(1e-9, 6), "1e-09");
  EXPECT_EQ(JsonSignificant(std::nan(""), 6), "null");
  EXPECT_EQ(JsonLine().AddRaw("obj", "{\"x\":1}").Str(), "{\"obj\":{\"x\":1}}");
}

}  // namespace
}  // namespace ps
