#include "common/base/json.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace ps {

std::string JsonQuote(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string JsonFixed(double v, int precision) {
  return std::isfinite(v) ? absl::StrFormat("%.*f", precision, v) : "null";
}

std::string JsonSignificant(double v, int digits) {
  return std::isfinite(v) ? absl::StrFormat("%.*g", digits, v) : "null";
}

JsonLine& JsonLine::AddRaw(absl::string_view key, absl::string_view json) {
  absl::StrAppend(&body_, body_.empty() ? "" : ",", JsonQuote(key), ":", json);
  return *this;
}

}  // namespace ps
