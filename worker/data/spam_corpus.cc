#include "worker/data/spam_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"
#include "worker/data/md5.h"

namespace ps {
namespace {

// The one message whose shipped content does not match its checksum:
// GROUP/STEM and the MD5 of the content the package really holds.
constexpr char kKnownExceptionKey[] = "hard-ham-1/00230.244a63cd74c81123ef26129453e32c95";
constexpr char kKnownExceptionMd5[] = "30e1fcfccb8a25b8550c292233698b67";

constexpr int kMaxJsonDepth = 32;

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
// What numbers, true, false and null are made of.
bool IsLiteralByte(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' || c == '-' || c == '.';
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  errno = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (f == nullptr) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnknownError(msg);
  }
  std::string bytes;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) bytes.append(buf, n);
  if (std::ferror(f.get())) {
    return absl::UnknownError(absl::StrCat(path, ": read error: ", std::strerror(errno)));
  }
  return bytes;
}

bool IsHexDigit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// True for "NNNNN.<32 lower-case hex>".
bool IsValidStem(std::string_view stem) {
  if (stem.size() != 5 + 1 + 32 || stem[5] != '.') return false;
  for (size_t i = 0; i < 5; ++i) {
    if (stem[i] < '0' || stem[i] > '9') return false;
  }
  return std::all_of(stem.begin() + 6, stem.end(), IsHexDigit);
}

// A reader for just enough JSON to find a few string fields in a message's
// .json: strings are decoded; everything else is skipped, with numbers and
// literals read leniently as runs of [A-Za-z0-9+-.]. Errors are kDataLoss
// with the byte offset; the caller adds the path.
class JsonCursor {
 public:
  using MemberFn = std::function<absl::Status(const std::string& key, JsonCursor& cursor)>;

  explicit JsonCursor(std::string_view text) : text_(text) {}

  // Reads an object, calling on_member for each key with the cursor just
  // before the member's value; on_member must consume that value.
  absl::Status Object(const MemberFn& on_member, int depth = 0);
  absl::StatusOr<std::string> String();
  absl::Status SkipValue(int depth);
  // OK when nothing but whitespace is left.
  absl::Status ExpectEnd();

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat("malformed JSON at byte ", pos_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && IsJsonSpace(text_[pos_])) ++pos_;
  }
  // Skips whitespace, then consumes `c` if it comes next.
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::Status Expect(char c) {
    if (Consume(c)) return absl::OkStatus();
    if (pos_ >= text_.size()) return Error("truncated");
    return Error(absl::StrCat("expected '", std::string(1, c), "'"));
  }
  absl::Status Escape(std::string* out);
  absl::Status SkipArray(int depth);

  std::string_view text_;
  size_t pos_ = 0;
};

absl::Status JsonCursor::Object(const MemberFn& on_member, int depth) {
  if (depth > kMaxJsonDepth) return Error("nested too deeply");
  PS_RETURN_IF_ERROR(Expect('{'));
  if (Consume('}')) return absl::OkStatus();
  while (true) {
    PS_ASSIGN_OR_RETURN(const std::string key, String());
    PS_RETURN_IF_ERROR(Expect(':'));
    PS_RETURN_IF_ERROR(on_member(key, *this));
    if (Consume(',')) continue;
    return Expect('}');
  }
}

absl::StatusOr<std::string> JsonCursor::String() {
  PS_RETURN_IF_ERROR(Expect('"'));
  std::string out;
  while (pos_ < text_.size()) {
    const char c = text_[pos_++];
    if (c == '"') return out;
    if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    PS_RETURN_IF_ERROR(Escape(&out));
  }
  return Error("truncated");
}

// After a backslash: appends the escaped character (\uXXXX as UTF-8; a
// surrogate half is encoded as it is, which is enough to compare fields).
absl::Status JsonCursor::Escape(std::string* out) {
  if (pos_ >= text_.size()) return Error("truncated");
  const char c = text_[pos_++];
  static constexpr std::pair<char, char> kSimple[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},  {'b', '\b'},
                                                      {'f', '\f'}, {'n', '\n'},  {'r', '\r'}, {'t', '\t'}};
  for (const auto& [name, value] : kSimple) {
    if (c == name) {
      out->push_back(value);
      return absl::OkStatus();
    }
  }
  if (c != 'u') return Error("bad escape");
  if (text_.size() - pos_ < 4) return Error("truncated");
  unsigned code = 0;
  for (int i = 0; i < 4; ++i) {
    const char h = text_[pos_++];
    const int digit = (h >= '0' && h <= '9')   ? h - '0'
                      : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                      : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                               : -1;
    if (digit < 0) return Error("bad \\u escape");
    code = code * 16 + static_cast<unsigned>(digit);
  }
  if (code < 0x80) {
    out->push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (code >> 6)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xe0 | (code >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
  }
  return absl::OkStatus();
}

absl::Status JsonCursor::SkipArray(int depth) {
  PS_RETURN_IF_ERROR(Expect('['));
  if (Consume(']')) return absl::OkStatus();
  while (true) {
    PS_RETURN_IF_ERROR(SkipValue(depth + 1));
    if (Consume(',')) continue;
    return Expect(']');
  }
}

absl::Status JsonCursor::SkipValue(int depth) {
  if (depth > kMaxJsonDepth) return Error("nested too deeply");
  SkipSpace();
  if (pos_ >= text_.size()) return Error("truncated");
  const char c = text_[pos_];
  if (c == '"') return String().status();
  if (c == '[') return SkipArray(depth);
  if (c == '{') {
    auto skip = [depth](const std::string&, JsonCursor& cursor) { return cursor.SkipValue(depth + 1); };
    return Object(skip, depth + 1);
  }
  const size_t start = pos_;
  while (pos_ < text_.size() && IsLiteralByte(text_[pos_])) ++pos_;
  return pos_ > start ? absl::OkStatus() : Error("expected a value");
}

absl::Status JsonCursor::ExpectEnd() {
  SkipSpace();
  return pos_ == text_.size() ? absl::OkStatus() : Error("trailing bytes");
}

// The fields of a message's .json that the reader checks.
struct MessageMeta {
  std::string id;
  std::string group;
  std::string checksum_type;
  std::string checksum_value;
};

absl::Status StringInto(JsonCursor& cursor, std::string* out) {
  PS_ASSIGN_OR_RETURN(*out, cursor.String());
  return absl::OkStatus();
}

absl::StatusOr<MessageMeta> ParseMeta(std::string_view json) {
  MessageMeta meta;
  JsonCursor cursor(json);
  auto on_checksum = [&meta](const std::string& key, JsonCursor& c) {
    if (key == "type") return StringInto(c, &meta.checksum_type);
    if (key == "value") return StringInto(c, &meta.checksum_value);
    return c.SkipValue(2);
  };
  auto on_member = [&](const std::string& key, JsonCursor& c) {
    if (key == "id") return StringInto(c, &meta.id);
    if (key == "group") return StringInto(c, &meta.group);
    if (key == "checksum") return c.Object(on_checksum, 1);
    return c.SkipValue(1);
  };
  PS_RETURN_IF_ERROR(cursor.Object(on_member));
  PS_RETURN_IF_ERROR(cursor.ExpectEnd());
  return meta;
}

absl::Status WithPath(const absl::Status& s, const std::string& path) {
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

// Checks the .json of GROUP/STEM against its name.
absl::Status CheckMeta(const std::string& json_path, std::string_view json, std::string_view group,
                       std::string_view stem) {
  absl::StatusOr<MessageMeta> meta = ParseMeta(json);
  if (!meta.ok()) return WithPath(meta.status(), json_path);
  const std::string_view id = stem.substr(0, 5);
  const std::string_view md5 = stem.substr(6);
  if (meta->id != id || meta->group != group) {
    return absl::DataLossError(
        absl::StrCat(json_path, ": id/group \"", meta->id, "\"/\"", meta->group, "\" do not match the file name"));
  }
  if (meta->checksum_type != "MD5" || meta->checksum_value != md5) {
    return absl::DataLossError(absl::StrCat(json_path, ": checksum ", meta->checksum_type, " \"", meta->checksum_value,
                                            "\" does not match the file name"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SpamMessage> ReadMessage(const std::string& dir, const std::string& group, const std::string& stem) {
  const std::string base = absl::StrCat(dir, "/", group, "/", stem);
  PS_ASSIGN_OR_RETURN(const std::string json, ReadWholeFile(base + ".json"));
  PS_RETURN_IF_ERROR(CheckMeta(base + ".json", json, group, stem));
  SpamMessage m;
  PS_ASSIGN_OR_RETURN(m.text, ReadWholeFile(base + ".txt"));
  m.group = group;
  m.stem = stem;
  m.label = group.rfind("spam", 0) == 0 ? 1 : 0;
  const bool known_exception = absl::StrCat(group, "/", stem) == kKnownExceptionKey;
  m.md5 = known_exception ? std::string(kKnownExceptionMd5) : stem.substr(6);
  const std::string got = Md5Hex(m.text);
  if (got != m.md5) {
    return absl::DataLossError(absl::StrCat(base, ".txt: MD5 ", got, ", expected ", m.md5));
  }
  return m;
}

// The stems of GROUP's messages, sorted; each has a .txt or a .json (the
// reader then requires both).
absl::StatusOr<std::vector<std::string>> GroupStems(const std::string& dir, const std::string& group) {
  const std::string path = absl::StrCat(dir, "/", group);
  std::error_code ec;
  std::filesystem::directory_iterator it(path, ec);
  if (ec) {
    const std::string msg = absl::StrCat(path, ": cannot list: ", ec.message());
    if (ec == std::errc::no_such_file_or_directory) return absl::NotFoundError(msg);
    if (ec == std::errc::permission_denied) return absl::PermissionDeniedError(msg);
    return absl::UnknownError(msg);
  }
  std::vector<std::string> stems;
  for (const auto& entry : it) {
    const std::filesystem::path name = entry.path().filename();
    const std::string ext = name.extension().string();
    if (ext != ".txt" && ext != ".json") continue;
    std::string stem = name.stem().string();
    if (!IsValidStem(stem)) {
      return absl::DataLossError(absl::StrCat(entry.path().string(), ": not NNNNN.<md5>", ext));
    }
    stems.push_back(std::move(stem));
  }
  std::sort(stems.begin(), stems.end());
  stems.erase(std::unique(stems.begin(), stems.end()), stems.end());
  return stems;
}

absl::Status CheckTotals(const std::string& dir, const std::vector<SpamMessage>& corpus) {
  const size_t spam = std::count_if(corpus.begin(), corpus.end(), [](const SpamMessage& m) { return m.label == 1; });
  if (corpus.size() == kSpamCorpusMessages && spam == kSpamCorpusSpam) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(dir, ": ", corpus.size(), " messages (", spam, " spam), expected ",
                                          kSpamCorpusMessages, " (", kSpamCorpusSpam, " spam)"));
}

// Indices of the messages for which is_test(md5) == want_test, ordered by
// (md5, group, stem).
std::vector<size_t> SortedSide(const std::vector<SpamMessage>& corpus, bool want_test) {
  std::vector<size_t> out;
  for (size_t i = 0; i < corpus.size(); ++i) {
    if (IsTestMessage(corpus[i].md5) == want_test) out.push_back(i);
  }
  std::sort(out.begin(), out.end(), [&corpus](size_t a, size_t b) {
    const SpamMessage& x = corpus[a];
    const SpamMessage& y = corpus[b];
    return std::tie(x.md5, x.group, x.stem) < std::tie(y.md5, y.group, y.stem);
  });
  return out;
}

}  // namespace

absl::StatusOr<std::vector<SpamMessage>> ReadSpamCorpus(const std::string& dir, const SpamCorpusOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no such directory (scripts/fetch_spam_assassin.sh installs the corpus)"));
  }
  std::vector<SpamMessage> corpus;
  for (const char* group : kSpamGroups) {
    PS_ASSIGN_OR_RETURN(const std::vector<std::string> stems, GroupStems(dir, group));
    for (const std::string& stem : stems) {
      PS_ASSIGN_OR_RETURN(SpamMessage m, ReadMessage(dir, group, stem));
      corpus.push_back(std::move(m));
    }
  }
  if (options.expect_full_corpus) PS_RETURN_IF_ERROR(CheckTotals(dir, corpus));
  return corpus;
}

bool IsTestMessage(std::string_view md5_hex) {
  CHECK_EQ(md5_hex.size(), 32u) << "not an MD5: " << md5_hex;
  // 16 = 1 (mod 5), so the 128-bit value is congruent to its digit sum.
  int sum = 0;
  for (char c : md5_hex) {
    if (c >= '0' && c <= '9') {
      sum += c - '0';
    } else if (c >= 'a' && c <= 'f') {
      sum += c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      sum += c - 'A' + 10;
    } else {
      LOG(FATAL) << "not an MD5: " << md5_hex;
    }
  }
  return sum % 5 == 0;
}

std::vector<size_t> TestMessages(const std::vector<SpamMessage>& corpus) {
  return SortedSide(corpus, /*want_test=*/true);
}

absl::StatusOr<std::vector<size_t>> TrainingShard(const std::vector<SpamMessage>& corpus, int rank, int num_workers) {
  if (num_workers < 1 || rank < 0 || rank >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("training shard ", rank, " of ", num_workers, ": need 0 <= rank < num_workers"));
  }
  const std::vector<size_t> train = SortedSide(corpus, /*want_test=*/false);
  std::vector<size_t> shard;
  const size_t stride = static_cast<size_t>(num_workers);
  for (size_t i = static_cast<size_t>(rank); i < train.size(); i += stride) {
    shard.push_back(train[i]);
  }
  return shard;
}

}  // namespace ps
