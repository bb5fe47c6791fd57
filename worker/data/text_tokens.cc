#include "worker/data/text_tokens.h"

namespace ps {
namespace {

constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

char ToLowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// 0 for a separator; 1 for [A-Za-z0-9]; the byte itself for a kept
// punctuation character (so that a run of '$' and a run of '!' differ).
int ByteClass(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
  if (c == '$' || c == '!') return static_cast<unsigned char>(c);
  return 0;
}

// Calls fn(token) for the first `max_tokens` tokens of `text`, each as the
// original (not yet lower-cased) bytes.
template <typename Fn>
void ForEachToken(std::string_view text, size_t max_tokens, Fn&& fn) {
  size_t count = 0;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n && count < max_tokens) {
    const int cls = ByteClass(text[i]);
    if (cls == 0) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < n && ByteClass(text[end]) == cls) ++end;
    fn(text.substr(i, end - i));
    ++count;
    i = end;
  }
}

uint64_t FnvAppend(uint64_t h, std::string_view bytes, bool lower) {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(lower ? ToLowerAscii(c) : c);
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

std::vector<std::string> SplitTokens(std::string_view text, size_t max_tokens) {
  std::vector<std::string> tokens;
  ForEachToken(text, max_tokens, [&](std::string_view token) {
    std::string& t = tokens.emplace_back(token);
    for (char& c : t) c = ToLowerAscii(c);
  });
  return tokens;
}

// Both lower-case as they hash, so that HashedTokens can pass the tokens as
// they appear in the text without copying them.
uint64_t UnigramId(std::string_view token) {
  return SplitMix64Finalize(FnvAppend(kFnvOffsetBasis, token, true) ^ kUnigramSalt);
}

uint64_t BigramId(std::string_view first, std::string_view second) {
  uint64_t h = FnvAppend(kFnvOffsetBasis, first, true);
  h = FnvAppend(h, " ", false);
  h = FnvAppend(h, second, true);
  return SplitMix64Finalize(h ^ kBigramSalt);
}

std::vector<uint64_t> HashedTokens(std::string_view text, const TokenOptions& options) {
  std::vector<uint64_t> ids;
  std::string_view previous;
  bool first = true;
  ForEachToken(text, options.max_tokens, [&](std::string_view token) {
    ids.push_back(UnigramId(token));
    if (options.bigrams && !first) ids.push_back(BigramId(previous, token));
    previous = token;
    first = false;
  });
  return ids;
}

}  // namespace ps
