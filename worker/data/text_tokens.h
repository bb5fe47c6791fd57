#ifndef PS_WORKER_DATA_TEXT_TOKENS_H_
#define PS_WORKER_DATA_TEXT_TOKENS_H_

// Turning a message into hashed token ids, for a bag-of-n-grams text
// classifier whose embedding rows a parameter server keys by those ids.
//
// Tokens. The whole text (for e-mail: headers included, they carry real
// signal) is read as bytes and lower-cased (ASCII only). A token is
//   - a maximal run of [a-z0-9] ("received", "2002", "0800"), or
//   - a maximal run of one kept punctuation character, '$' or '!' ("$",
//     "!!!"): money and shouting are among the strongest spam signals, and
//     they would vanish if punctuation only separated words.
// Every other byte (other punctuation, whitespace, bytes >= 0x80) separates
// tokens. Only the first `max_tokens` tokens of a message count, so that one
// huge attachment does not outweigh everything else.
//
// Ids. A unigram's id is Mix(Fnv1a64(token) ^ kUnigramSalt); a bigram's (two
// adjacent tokens a, b) is Mix(Fnv1a64(a + ' ' + b) ^ kBigramSalt), where
// Fnv1a64 is 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime
// 0x100000001b3) and Mix is the splitmix64 finaliser. The space cannot occur
// in a token, so "a b" never collides by construction with a unigram's bytes,
// and the salts keep the two kinds apart. Ids are any 64-bit value (no
// modulo): the tables are keyed by the full id. These functions are part of
// the model's format: changing them invalidates trained tables.
//
// Free functions with no state: thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/hash.h"  // Fnv1a64, SplitMix64Finalize

namespace ps {

inline constexpr uint64_t kUnigramSalt = 0x756e6967'72616d31;  // "unigram1"
inline constexpr uint64_t kBigramSalt = 0x62696772'616d3232;   // "bigram22"

struct TokenOptions {
  // Tokens read per message; the rest of the message is ignored.
  size_t max_tokens = 20000;
  // Whether to emit the bigrams of adjacent tokens as well as the unigrams.
  bool bigrams = true;
};

// The tokens of `text` as strings (lower-cased), at most `max_tokens`.
std::vector<std::string> SplitTokens(std::string_view text, size_t max_tokens);

// The ids of a token and of a pair of adjacent tokens. Both lower-case their
// arguments (ASCII) first: UnigramId("Free") == UnigramId("free").
uint64_t UnigramId(std::string_view token);
uint64_t BigramId(std::string_view first, std::string_view second);

// The ids of `text`, in text order: for each token t_i, UnigramId(t_i), then
// (when options.bigrams and i > 0) BigramId(t_{i-1}, t_i). Repeated tokens
// repeat their ids (the classifier averages over occurrences). At most
// 2 * max_tokens - 1 ids; none for a text without tokens.
std::vector<uint64_t> HashedTokens(std::string_view text, const TokenOptions& options);

}  // namespace ps

#endif  // PS_WORKER_DATA_TEXT_TOKENS_H_
