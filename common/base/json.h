#ifndef PS_COMMON_BASE_JSON_H_
#define PS_COMMON_BASE_JSON_H_

// The JSON lines the binaries print (progress, events, benchmark figures):
// strings quoted and escaped as RFC 8259 requires, so a tensor name, a path
// or an error message with a quote, a backslash or a control character still
// gives a line that parses. Scripts and tests parse these lines field by
// field: the number formats below are part of the output.

#include <concepts>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps {

// `s` as a JSON string: in double quotes, with ", \ and control characters
// escaped (\n, \t, ... or \u00XX). Bytes >= 0x80 pass through (UTF-8).
// Thread-safe (no state).
std::string JsonQuote(absl::string_view s);

// `v` with `precision` digits after the point ("%.*f"); null when `v` is NaN
// or infinite, which JSON cannot hold.
std::string JsonFixed(double v, int precision);
// `v` with at most `digits` significant digits ("%.*g"); null when not finite.
std::string JsonSignificant(double v, int digits);

// One JSON object on one line, its fields in the order they were added:
//
//   JsonLine().Add("bench", "pushpull").Add("bytes", n).Add("gbps", x, 3).Str()
//   -> {"bench":"pushpull","bytes":1048576,"gbps":12.345}
//
// Keys and string values are escaped with JsonQuote; integers are printed
// whole; a double always names its precision (JsonFixed), so that a figure
// keeps its format wherever it is printed. Not thread-safe.
class JsonLine {
 public:
  JsonLine() = default;

  JsonLine& Add(absl::string_view key, absl::string_view value) { return AddRaw(key, JsonQuote(value)); }
  JsonLine& Add(absl::string_view key, const char* value) { return Add(key, absl::string_view(value)); }
  JsonLine& Add(absl::string_view key, const std::string& value) { return Add(key, absl::string_view(value)); }
  JsonLine& Add(absl::string_view key, bool value) { return AddRaw(key, value ? "true" : "false"); }
  template <typename Int>
  requires std::integral<Int> &&
      (!std::same_as<Int, bool>)&&(!std::same_as<Int, char>)JsonLine& Add(absl::string_view key, Int value) {
    return AddRaw(key, absl::StrCat(value));
  }
  // Fixed-point with `precision` decimals; null for NaN or infinity.
  JsonLine& Add(absl::string_view key, double value, int precision) { return AddRaw(key, JsonFixed(value, precision)); }
  // As above; null when there is no value.
  JsonLine& Add(absl::string_view key, std::optional<double> value, int precision) {
    return value.has_value() ? Add(key, *value, precision) : AddNull(key);
  }
  JsonLine& AddNull(absl::string_view key) { return AddRaw(key, "null"); }
  // `json` is already a JSON value (a number formatted elsewhere, a nested
  // object); it is written as it is.
  JsonLine& AddRaw(absl::string_view key, absl::string_view json);

  // The object, "{...}", without a newline.
  std::string Str() const { return absl::StrCat("{", body_, "}"); }

 private:
  std::string body_;
};

}  // namespace ps

#endif  // PS_COMMON_BASE_JSON_H_
