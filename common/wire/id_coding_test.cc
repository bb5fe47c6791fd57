// Table row ids on the wire (common/wire/id_coding.h): ascending ids close
// together shrink to their varint deltas and come back exact; hashed ids,
// unsorted ids and repeated ids travel raw; every malformed section is
// refused, naming the problem, with nothing written; and a table shard's
// compressed push frame (common/wire/wire_frames.h) carries either coding.

#include "common/wire/id_coding.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/base/hash.h"
#include "common/wire/wire_frames.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::vector<uint64_t> RoundTrip(const std::vector<uint64_t>& ids, std::string* section) {
  section->clear();
  AppendIds(ids, /*delta=*/true, section);
  std::vector<uint64_t> back;
  absl::StatusOr<size_t> taken = DecodeIds(*section + "tail", ids.size(), &back);
  EXPECT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken.value_or(0), section->size());
  if (static_cast<uint8_t>((*section)[0]) == kDeltaIds) {  // what a pull request's `coded` holds
    std::vector<uint64_t> all;
    EXPECT_TRUE(DecodeDeltaIds(*section, ids.size(), &all).ok());
    EXPECT_EQ(all, back);
    EXPECT_FALSE(DecodeDeltaIds(*section, ids.size() - 1, &all).ok()) << "more ids than the cap";
  }
  return back;
}

TEST(IdCodingTest, AscendingIdsCloseTogetherTravelAsVarintDeltas) {
  // 8,192 distinct ids out of 10^7, sorted: neighbours about 1,220 apart.
  std::mt19937_64 rng(7);
  std::vector<uint64_t> ids(8192);
  for (uint64_t& id : ids) id = std::uniform_int_distribution<uint64_t>(0, 9999999)(rng);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string section;
  EXPECT_EQ(RoundTrip(ids, &section), ids);
  EXPECT_EQ(static_cast<uint8_t>(section[0]), kDeltaIds);
  std::string alone;
  EXPECT_TRUE(AppendDeltaIds(ids, &alone));
  EXPECT_EQ(alone, section);
  // Two bytes a delta (up to 16,383), three for the first id: about a quarter of 8 bytes an id.
  EXPECT_LE(section.size(), 1 + 3 + 2 * ids.size());
  EXPECT_GE(section.size(), 1 + ids.size());

  // The edges of the range: 0, 2^64 - 1, and steps of one and of 2^63.
  const std::vector<uint64_t> edges = {0, 1, 2, uint64_t{1} << 63, std::numeric_limits<uint64_t>::max()};
  EXPECT_EQ(RoundTrip(edges, &section), edges);
  EXPECT_EQ(static_cast<uint8_t>(section[0]), kDeltaIds);  // 1 + 1 + 1 + 1 + 9 + 9 bytes, not 41
  EXPECT_EQ(section.size(), 22u);
}

TEST(IdCodingTest, IdsThatDeltasWouldNotShortenTravelRaw) {
  std::vector<uint64_t> hashed;  // sorted, but 2^64 / 100 apart: 9 varint bytes a delta
  for (uint64_t i = 0; i < 100; ++i) hashed.push_back(Mix64(i));
  std::sort(hashed.begin(), hashed.end());
  const std::vector<uint64_t> unsorted = {5, 3, 9}, repeated = {4, 4, 6}, none = {};
  for (const std::vector<uint64_t>& ids : {hashed, unsorted, repeated, none}) {
    std::string section;
    EXPECT_EQ(RoundTrip(ids, &section), ids);
    EXPECT_EQ(static_cast<uint8_t>(section[0]), kRawIds);
    EXPECT_EQ(section.size(), 1 + 8 * ids.size());
    std::string alone = "x";
    EXPECT_FALSE(AppendDeltaIds(ids, &alone));
    EXPECT_EQ(alone, "x") << "nothing appended";
  }
}

TEST(IdCodingTest, MalformedSectionsAreRefusedNamingTheProblem) {
  const std::string delta(1, static_cast<char>(kDeltaIds)), raw(1, static_cast<char>(kRawIds));
  const std::string eleven_bytes = delta + std::string(10, '\xff') + '\x01';
  struct Case {
    std::string section;
    uint64_t count;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {"", 1, "no coding byte"},
           {std::string(1, '\x07') + "abcdefgh", 1, "unknown coding 7"},
           {raw + "abcdefg", 1, "cannot hold 1 ids"},
           {delta + "\x05", 2, "id 1: id varint cut short"},
           {delta + "\x85", 1, "id 0: id varint cut short"},
           {eleven_bytes, 1, "id 0: id varint ending at byte 11 does not fit 64 bits"},
           {delta + std::string(9, '\xff') + '\x02', 1, "does not fit 64 bits"},
           {delta + std::string("\x05\x00", 2), 2, "a step of 0 after 5"},
           {delta + std::string(9, '\xff') + '\x01' + "\x01", 2, "within 64 bits"},
       }) {
    std::vector<uint64_t> out = {42};
    absl::StatusOr<size_t> taken = DecodeIds(c.section, c.count, &out);
    ASSERT_FALSE(taken.ok()) << c.want;
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(taken.status().message()), HasSubstr(c.want));
    EXPECT_EQ(out, std::vector<uint64_t>{42}) << "nothing written: " << c.want;
  }
  std::vector<uint64_t> out;
  EXPECT_THAT(std::string(DecodeDeltaIds(raw + "abcdefgh", 10, &out).message()),
              HasSubstr("id section of coding 0 where only delta coding (1) is taken"));
  EXPECT_THAT(std::string(DecodeDeltaIds(delta + "\x01\x81", 10, &out).message()), HasSubstr("cut short"));
  EXPECT_THAT(std::string(DecodeDeltaIds(delta + "\x01\x01\x01", 2, &out).message()),
              HasSubstr("holds more than 2 ids"));
  EXPECT_TRUE(out.empty());
}

// A table shard's compressed push frame: its ids in either coding, then the
// values' frame; DecodePayload gives back the uncompressed layout (each id
// in two floats' room, then the values).
TEST(IdCodingTest, ARowsFrameCarriesCodedIdsAndDecodesToTheUncompressedLayout) {
  const auto bf16 = Compressor::Create({.kind = CompressionKind::kBf16});
  const std::vector<float> values = {1.0f, -2.0f, 0.5f, 4.0f, 3.0f, -1.0f};  // 3 rows of dim 2
  for (const std::vector<uint64_t>& ids : {std::vector<uint64_t>{10, 11, 300}, {Mix64(1), Mix64(2), Mix64(3)}}) {
    const std::string frame = RowsFrame(ids, /*delta_ids=*/true, values, *bf16);
    const SliceData meta{.key = 4, .length = 6, .rows = 3, .compressed = true};
    std::vector<float> out;
    ASSERT_TRUE(DecodePayload(meta, frame, &out).ok());
    ASSERT_EQ(out.size(), 6 + 6u);
    std::vector<uint64_t> back(3);
    std::memcpy(back.data(), out.data(), 3 * sizeof(uint64_t));
    EXPECT_EQ(back, ids);
    EXPECT_EQ(std::vector<float>(out.begin() + 6, out.end()), values);
    // One row fewer declared than the frame holds: its values' header no longer lines up.
    SliceData short_meta = meta;
    short_meta.rows = 2;
    const absl::Status refused = DecodePayload(short_meta, frame, &out);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.message()), HasSubstr("compressed frame of slice 4"));
  }
  // Delta coded ids that do not ascend: refused, naming the ids.
  const std::string bad = std::string("\x01\x0a\x00\x05", 4);
  std::string frame = bad;
  bf16->Encode(absl::MakeConstSpan(values).subspan(0, 6), 0, &frame);
  std::vector<float> out;
  const absl::Status refused =
      DecodePayload(SliceData{.key = 4, .length = 6, .rows = 3, .compressed = true}, frame, &out);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("the ids of its 3 rows: id 1: a step of 0 after 10"));
}

}  // namespace
}  // namespace ps
