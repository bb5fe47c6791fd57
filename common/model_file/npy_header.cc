#include "common/model_file/npy_header.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"

namespace ps::internal {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";
constexpr size_t kAlignment = 64;

absl::string_view Descr(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kInt64: return "<i8";
    case DType::kUInt64: return "<u8";
  }
  return "";
}

std::optional<DType> DTypeOfDescr(absl::string_view descr) {
  for (const DType d : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kUInt64}) {
    if (descr == Descr(d)) return d;
  }
  return std::nullopt;
}

// A cursor over the header's Python dict literal, which numpy writes with
// repr(): single-quoted strings without escapes, True/False, int tuples.
class DictCursor {
 public:
  explicit DictCursor(absl::string_view text) : text_(text) {}

  bool Eat(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }

  absl::StatusOr<std::string> String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return Error("expected a string");
    const char quote = text_[pos_];
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    if (s.find('\\') != std::string::npos) return Error("escapes in a string");
    pos_ = end + 1;
    return s;
  }

  absl::StatusOr<bool> Bool() {
    SkipSpace();
    for (const bool b : {true, false}) {
      const absl::string_view word = b ? "True" : "False";
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return b;
      }
    }
    return Error("expected True or False");
  }

  // "()", "(5,)", "(3, 4)" or "(3, 4,)"; "(5)" is an int in Python, not a tuple.
  absl::StatusOr<std::vector<uint64_t>> Tuple() {
    if (!Eat('(')) return Error("expected a tuple");
    std::vector<uint64_t> dims;
    bool comma = false;
    while (!Eat(')')) {
      if (!dims.empty() && !comma) return Error("expected ',' or ')' in the shape");
      if (dims.size() == kMaxRank) {
        return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxRank, " dimensions"));
      }
      PS_ASSIGN_OR_RETURN(const uint64_t d, Int());
      dims.push_back(d);
      comma = Eat(',');
    }
    if (dims.size() == 1 && !comma) return Error("the shape is not a tuple");
    return dims;
  }

  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat(".npy header: ", what, " at byte ", pos_, " of '", absl::CHexEscape(text_.substr(0, 200)), "'"));
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  absl::StatusOr<uint64_t> Int() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    uint64_t v = 0;
    if (pos_ == start || !absl::SimpleAtoi(text_.substr(start, pos_ - start), &v)) {
      return Error("expected a dimension (a non-negative integer)");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;  // Python 2's long
    return v;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// (A plain string and a flag rather than std::optional<std::string>, which
// makes GCC 12 warn -Wmaybe-uninitialized at -O2.)
struct RawHeader {
  bool has_descr = false;
  std::string descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<uint64_t>> shape;
};

absl::Status ParseField(DictCursor& c, RawHeader& h) {
  PS_ASSIGN_OR_RETURN(const std::string key, c.String());
  if (!c.Eat(':')) return c.Error("expected ':'");
  if ((key == "descr" && h.has_descr) || (key == "fortran_order" && h.fortran_order) || (key == "shape" && h.shape)) {
    return c.Error(absl::StrCat("key '", key, "' twice"));
  }
  if (key == "descr") {
    PS_ASSIGN_OR_RETURN(h.descr, c.String());
    h.has_descr = true;
  } else if (key == "fortran_order") {
    PS_ASSIGN_OR_RETURN(h.fortran_order, c.Bool());
  } else if (key == "shape") {
    PS_ASSIGN_OR_RETURN(h.shape, c.Tuple());
  } else {
    return c.Error(absl::StrCat("unexpected key '", absl::CHexEscape(key), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RawHeader> ParseDict(absl::string_view text) {
  DictCursor c(text);
  RawHeader h;
  if (!c.Eat('{')) return c.Error("expected '{'");
  while (!c.Eat('}')) {
    PS_RETURN_IF_ERROR(ParseField(c, h));
    if (c.Eat(',')) continue;
    if (c.Eat('}')) break;
    return c.Error("expected ',' or '}'");
  }
  if (!c.AtEnd()) return c.Error("bytes after the dict");
  if (!h.has_descr || !h.fortran_order || !h.shape) {
    return c.Error("the dict lacks one of 'descr', 'fortran_order', 'shape'");
  }
  return h;
}

}  // namespace

std::string EncodeNpyHeader(DType dtype, absl::Span<const uint64_t> shape) {
  const std::string dict =
      absl::StrCat("{'descr': '", Descr(dtype), "', 'fortran_order': False, 'shape': ", ShapeString(shape), ", }");
  size_t prefix = kMagic.size() + 2 + 2;
  size_t total = (prefix + dict.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  uint8_t major = 1;
  if (total - prefix > 0xFFFF) {
    major = 2;
    prefix += 2;
    total = (prefix + dict.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  }
  std::string out(kMagic);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  if (major == 1) {
    PutRaw<uint16_t>(&out, static_cast<uint16_t>(total - prefix));
  } else {
    PutRaw<uint32_t>(&out, static_cast<uint32_t>(total - prefix));
  }
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out.push_back('\n');
  return out;
}

absl::StatusOr<uint64_t> NpyHeaderSize(absl::string_view prefix) {
  if (prefix.size() < kMagic.size() + 4 || prefix.substr(0, kMagic.size()) != kMagic) {
    return absl::DataLossError(
        absl::StrCat("bad magic: not a .npy file (starts '", absl::CHexEscape(prefix.substr(0, kMagic.size())), "')"));
  }
  const auto major = static_cast<uint8_t>(prefix[6]);
  const auto minor = static_cast<uint8_t>(prefix[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy format version ", major, ".", minor, " (this build reads 1.0, 2.0 and 3.0)"));
  }
  absl::string_view rest = prefix.substr(8);
  uint64_t length = 0;
  if (major == 1) {
    length = 10 + uint64_t{TakeRaw<uint16_t>(&rest)};
  } else {
    if (rest.size() < 4) return absl::DataLossError(".npy header truncated in its length field");
    length = 12 + uint64_t{TakeRaw<uint32_t>(&rest)};
  }
  if (length > kMaxNpyHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(".npy header of ", length, " bytes; more than the ", kMaxNpyHeaderBytes, " this build reads"));
  }
  return length;
}

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view header) {
  const size_t dict_at = static_cast<uint8_t>(header[6]) == 1 ? 10 : 12;
  PS_ASSIGN_OR_RETURN(const RawHeader raw, ParseDict(header.substr(dict_at)));
  NpyHeader out;
  const std::optional<DType> dtype = DTypeOfDescr(raw.descr);
  if (!dtype) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype '", absl::CHexEscape(raw.descr),
                                                   "' (this build reads '<f4', '<f8', '<i8', '<u8')"));
  }
  out.dtype = *dtype;
  out.shape = *raw.shape;
  int long_dims = 0;
  for (const uint64_t d : out.shape) long_dims += d > 1 ? 1 : 0;
  // With at most one dimension over 1 the Fortran layout is the C layout.
  if (*raw.fortran_order && long_dims > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("fortran_order True for shape ", ShapeString(out.shape), " (only C order is read)"));
  }
  return out;
}

}  // namespace ps::internal
