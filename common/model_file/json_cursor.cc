#include "common/model_file/json_cursor.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps::internal {
namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

void JsonCursor::SkipSpace() {
  while (pos_ < text_.size() &&
         (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
    ++pos_;
  }
}

bool JsonCursor::Eat(char c) {
  SkipSpace();
  if (pos_ < text_.size() && text_[pos_] == c) {
    ++pos_;
    return true;
  }
  return false;
}

absl::Status JsonCursor::Expect(char c) {
  if (Eat(c)) return absl::OkStatus();
  return Error(absl::StrCat("expected '", std::string(1, c), "'"));
}

bool JsonCursor::AtEnd() {
  SkipSpace();
  return pos_ == text_.size();
}

absl::Status JsonCursor::Error(absl::string_view what) const {
  return absl::DataLossError(absl::StrCat(name_, ": ", what, " at byte ", pos_));
}

absl::StatusOr<uint32_t> JsonCursor::Hex4() {
  if (text_.size() - pos_ < 4) return Error("truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = text_[pos_++];
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return Error("bad \\u escape");
    v = v * 16 + static_cast<uint32_t>(absl::ascii_isdigit(static_cast<unsigned char>(c))
                                           ? c - '0'
                                           : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10);
  }
  return v;
}

// After the backslash.
absl::Status JsonCursor::Escape(std::string* out) {
  if (pos_ >= text_.size()) return Error("truncated escape");
  const char c = text_[pos_++];
  switch (c) {
    case '"':
    case '\\':
    case '/': out->push_back(c); return absl::OkStatus();
    case 'b': out->push_back('\b'); return absl::OkStatus();
    case 'f': out->push_back('\f'); return absl::OkStatus();
    case 'n': out->push_back('\n'); return absl::OkStatus();
    case 'r': out->push_back('\r'); return absl::OkStatus();
    case 't': out->push_back('\t'); return absl::OkStatus();
    case 'u': break;
    default: return Error(absl::StrCat("bad escape '\\", std::string(1, c), "'"));
  }
  PS_ASSIGN_OR_RETURN(uint32_t cp, Hex4());
  if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("a lone low surrogate");
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    if (text_.substr(pos_, 2) != "\\u") return Error("a high surrogate without its low half");
    pos_ += 2;
    PS_ASSIGN_OR_RETURN(const uint32_t low, Hex4());
    if (low < 0xDC00 || low > 0xDFFF) return Error("a high surrogate without its low half");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
  }
  AppendUtf8(cp, out);
  return absl::OkStatus();
}

absl::StatusOr<std::string> JsonCursor::String() {
  if (!Eat('"')) return Error("expected a string");
  std::string out;
  while (true) {
    if (pos_ >= text_.size()) return Error("unterminated string");
    const char c = text_[pos_++];
    if (c == '"') return out;
    if (c == '\\') {
      PS_RETURN_IF_ERROR(Escape(&out));
    } else if (static_cast<unsigned char>(c) < 0x20) {
      return Error("a control character in a string");
    } else {
      out.push_back(c);
    }
  }
}

absl::StatusOr<uint64_t> JsonCursor::Uint64() {
  SkipSpace();
  const size_t start = pos_;
  while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  const absl::string_view digits = text_.substr(start, pos_ - start);
  if (digits.empty()) return Error("expected a non-negative integer");
  if (digits.size() > 1 && digits[0] == '0') return Error("a number with a leading zero");
  if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
    return Error("expected an integer, not a fraction");
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(digits, &v)) return Error("an integer over 2^64 - 1");
  return v;
}

absl::Status JsonCursor::Array(absl::FunctionRef<absl::Status()> element) {
  PS_RETURN_IF_ERROR(Expect('['));
  if (Eat(']')) return absl::OkStatus();
  while (true) {
    PS_RETURN_IF_ERROR(element());
    if (Eat(',')) continue;
    return Expect(']');
  }
}

absl::Status JsonCursor::Object(absl::FunctionRef<absl::Status(std::string key)> member) {
  PS_RETURN_IF_ERROR(Expect('{'));
  if (Eat('}')) return absl::OkStatus();
  while (true) {
    PS_ASSIGN_OR_RETURN(std::string key, String());
    PS_RETURN_IF_ERROR(Expect(':'));
    PS_RETURN_IF_ERROR(member(std::move(key)));
    if (Eat(',')) continue;
    return Expect('}');
  }
}

}  // namespace ps::internal
