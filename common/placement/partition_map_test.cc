#include "common/placement/partition_map.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TensorSpec Tensor(std::string name, std::vector<int64_t> shape) {
  return TensorSpec{std::move(name), std::move(shape), Initializer::Zeros()};
}

PlacementSpec Auto(uint64_t slice_bytes = kMiB) {
  PlacementSpec p;
  p.slice_bytes = slice_bytes;
  return p;
}

PartitionMap MustBuild(const std::vector<TensorSpec>& tensors, int num_servers, const PlacementSpec& placement) {
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(tensors, num_servers, placement);
  EXPECT_TRUE(map.ok()) << map.status();
  return map.ok() ? *std::move(map) : PartitionMap();
}

void ExpectCode(const absl::Status& s, absl::StatusCode code, const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(substring));
}

uint64_t TotalBytes(const std::vector<TensorSpec>& tensors) {
  uint64_t total = 0;
  for (const TensorSpec& t : tensors) total += 4 * static_cast<uint64_t>(t.NumElements());
  return total;
}

// A GPT-like model: d_model 512, 6 blocks, vocabulary 5003 (an odd size on
// purpose). 77 tensors: a ~9.8 MiB token embedding, 1-4 MiB attention and MLP
// weights, and many biases and layer-norm vectors of 2-20 KiB.
std::vector<TensorSpec> TransformerLike() {
  constexpr int64_t kD = 512, kFf = 2048, kVocab = 5003, kCtx = 512;
  std::vector<TensorSpec> t = {Tensor("embed.token", {kVocab, kD}), Tensor("embed.position", {kCtx, kD})};
  for (int l = 0; l < 6; ++l) {
    std::string b = absl::StrCat("block", l, ".");
    for (const char* ln : {"ln1", "ln2"}) {
      t.push_back(Tensor(b + ln + ".weight", {kD}));
      t.push_back(Tensor(b + ln + ".bias", {kD}));
    }
    t.push_back(Tensor(b + "attn.qkv.weight", {kD, 3 * kD}));
    t.push_back(Tensor(b + "attn.qkv.bias", {3 * kD}));
    t.push_back(Tensor(b + "attn.out.weight", {kD, kD}));
    t.push_back(Tensor(b + "attn.out.bias", {kD}));
    t.push_back(Tensor(b + "mlp.fc.weight", {kD, kFf}));
    t.push_back(Tensor(b + "mlp.fc.bias", {kFf}));
    t.push_back(Tensor(b + "mlp.proj.weight", {kFf, kD}));
    t.push_back(Tensor(b + "mlp.proj.bias", {kD}));
  }
  t.push_back(Tensor("final_ln.weight", {kD}));
  t.push_back(Tensor("final_ln.bias", {kD}));
  t.push_back(Tensor("lm_head.bias", {kVocab}));
  return t;
}

std::vector<TensorSpec> Mlp3() {
  return {Tensor("fc0.weight", {784, 512}), Tensor("fc0.bias", {512}),       Tensor("fc1.weight", {512, 256}),
          Tensor("fc1.bias", {256}),        Tensor("fc2.weight", {256, 10}), Tensor("fc2.bias", {10})};
}

// Keys dense, and every tensor covered by its slices in offset order with no
// gap or overlap.
void ExpectTiled(const PartitionMap& map, const std::vector<TensorSpec>& tensors) {
  ASSERT_EQ(map.num_tensors(), static_cast<int>(tensors.size()));
  for (size_t k = 0; k < map.slices().size(); ++k) EXPECT_EQ(map.slices()[k].key, k);
  size_t seen = 0;
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    uint64_t next = 0;
    for (uint32_t key : map.SlicesOfTensor(t)) {
      const Slice& s = map.slices()[key];
      EXPECT_EQ(s.tensor, t);
      EXPECT_EQ(s.offset, next) << tensors[t].name << " key " << key;
      EXPECT_GT(s.length, 0u);
      EXPECT_GE(s.server, 0);
      EXPECT_LT(s.server, map.num_servers());
      next = s.offset + s.length;
      ++seen;
    }
    EXPECT_EQ(next, static_cast<uint64_t>(tensors[t].NumElements())) << tensors[t].name;
  }
  EXPECT_EQ(seen, map.slices().size());
}

TEST(PartitionMapTest, BuildIsDeterministic) {
  std::vector<TensorSpec> tensors = TransformerLike();
  PlacementSpec p = Auto();
  p.explicit_ranks["block3.mlp.fc.weight"] = 1;
  for (int n : {2, 3, 8}) {
    PartitionMap a = MustBuild(tensors, n, p);
    PartitionMap b = MustBuild(tensors, n, p);
    ASSERT_EQ(a.slices().size(), b.slices().size());
    for (size_t k = 0; k < a.slices().size(); ++k) EXPECT_EQ(a.slices()[k], b.slices()[k]);
    EXPECT_EQ(a.Describe(tensors), b.Describe(tensors));
  }
}

TEST(PartitionMapTest, EveryTensorIsTiledExactly) {
  std::vector<TensorSpec> tensors = TransformerLike();
  for (int n : {1, 2, 3, 4, 8, 100}) {
    SCOPED_TRACE(n);
    ExpectTiled(MustBuild(tensors, n, Auto()), tensors);
    ExpectTiled(MustBuild(tensors, n, Auto(12345)), tensors);
    PlacementSpec layer;
    layer.rule = PlacementRule::kLayer;
    ExpectTiled(MustBuild(tensors, n, layer), tensors);
  }
}

TEST(PartitionMapTest, NoSliceExceedsSliceBytesUnderAuto) {
  std::vector<TensorSpec> realistic = TransformerLike();
  realistic.push_back(Tensor("odd", {7, 11, 13}));
  // Tiny slice sizes on a small list, to keep the slice count modest.
  std::vector<TensorSpec> small = {Tensor("odd", {7, 11, 13}), Tensor("v", {1001}), Tensor("w", {64, 33}),
                                   Tensor("s", {1})};
  for (uint64_t slice_bytes :
       {uint64_t{4}, uint64_t{6}, uint64_t{1000}, uint64_t{4096}, uint64_t{65537}, kMiB, uint64_t{1000003}}) {
    SCOPED_TRACE(slice_bytes);
    const std::vector<TensorSpec>& tensors = slice_bytes < 4096 ? small : realistic;
    PartitionMap map = MustBuild(tensors, 3, Auto(slice_bytes));
    ExpectTiled(map, tensors);
    for (const Slice& s : map.slices()) EXPECT_LE(s.length * 4, slice_bytes);
  }
}

TEST(PartitionMapTest, SliceCountIsCeilOfBytesOverSliceBytes) {
  std::vector<TensorSpec> tensors = TransformerLike();
  PartitionMap map = MustBuild(tensors, 4, Auto());
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    uint64_t bytes = 4 * static_cast<uint64_t>(tensors[t].NumElements());
    EXPECT_EQ(map.SlicesOfTensor(t).size(), (bytes + kMiB - 1) / kMiB) << tensors[t].name;
  }
}

TEST(PartitionMapTest, SlicesHaveNearEqualLengthsLongestFirst) {
  std::vector<TensorSpec> tensors = {Tensor("a", {10}), Tensor("b", {1000}), Tensor("c", {3})};
  PartitionMap map = MustBuild(tensors, 2, Auto(16));  // at most 4 elements a slice
  std::vector<uint64_t> lengths;
  for (uint32_t key : map.SlicesOfTensor(0)) lengths.push_back(map.slices()[key].length);
  EXPECT_THAT(lengths, ElementsAre(4, 3, 3));
  EXPECT_EQ(map.SlicesOfTensor(1).size(), 250u);
  ASSERT_EQ(map.SlicesOfTensor(2).size(), 1u);  // small tensors go whole
  EXPECT_EQ(map.slices()[map.SlicesOfTensor(2)[0]].length, 3u);
}

TEST(PartitionMapTest, AssignsLargestFirstToLeastLoadedServer) {
  // Bytes 12, 8, 8, 4, 8: a->0, b->1, c->1 (8 < 12), e->0 (12 < 16; key 4 is
  // placed before d), d->1 (16 <= 20; ties go to the lower rank).
  std::vector<TensorSpec> tensors = {Tensor("a", {3}), Tensor("b", {2}), Tensor("c", {2}), Tensor("d", {1}),
                                     Tensor("e", {2})};
  PartitionMap map = MustBuild(tensors, 2, Auto());
  std::vector<int32_t> servers;
  for (const Slice& s : map.slices()) servers.push_back(s.server);
  EXPECT_THAT(servers, ElementsAre(0, 1, 1, 1, 0));
  EXPECT_THAT(map.BytesPerServer(), ElementsAre(20, 20));
}

TEST(PartitionMapTest, EqualSlicesGoToLowerRanksInKeyOrder) {
  std::vector<TensorSpec> tensors = {Tensor("a", {5}), Tensor("b", {5}), Tensor("c", {5})};
  PartitionMap map = MustBuild(tensors, 4, Auto());
  EXPECT_EQ(map.slices()[0].server, 0);
  EXPECT_EQ(map.slices()[1].server, 1);
  EXPECT_EQ(map.slices()[2].server, 2);
  EXPECT_TRUE(map.SlicesOnServer(3).empty());
}

TEST(PartitionMapTest, BalancesRealisticModelWithinTenPercent) {
  std::vector<TensorSpec> tensors = TransformerLike();
  ASSERT_GE(tensors.size(), 50u);
  for (int n : {2, 3, 4, 8}) {
    PartitionMap map = MustBuild(tensors, n, Auto());
    std::vector<uint64_t> bytes = map.BytesPerServer();
    uint64_t total = std::accumulate(bytes.begin(), bytes.end(), uint64_t{0});
    ASSERT_EQ(total, TotalBytes(tensors));
    double mean = static_cast<double>(total) / n;
    double max = static_cast<double>(*std::max_element(bytes.begin(), bytes.end()));
    std::printf(
        "[ balance  ] %zu tensors, %zu slices, %d servers: max %.0f B, mean %.0f B, "
        "max/mean %.4f\n",
        tensors.size(), map.slices().size(), n, max, mean, max / mean);
    EXPECT_LE(max, 1.10 * mean) << n << " servers";
  }
}

TEST(PartitionMapTest, ExplicitPlacementKeepsTensorWhole) {
  std::vector<TensorSpec> tensors = TransformerLike();
  PlacementSpec p = Auto();
  p.explicit_ranks["embed.token"] = 2;  // ~9.8 MiB, far above slice_bytes
  p.explicit_ranks["lm_head.bias"] = 3;
  PartitionMap map = MustBuild(tensors, 4, p);
  ExpectTiled(map, tensors);
  ASSERT_EQ(map.SlicesOfTensor(0).size(), 1u);
  const Slice& embed = map.slices()[map.SlicesOfTensor(0)[0]];
  EXPECT_EQ(embed.server, 2);
  EXPECT_EQ(embed.length, static_cast<uint64_t>(tensors[0].NumElements()));
  uint32_t head = static_cast<uint32_t>(tensors.size() - 1);
  ASSERT_EQ(map.SlicesOfTensor(head).size(), 1u);
  EXPECT_EQ(map.slices()[map.SlicesOfTensor(head)[0]].server, 3);
  // The rest is sliced automatically, and the explicit bytes are counted in.
  EXPECT_GT(map.SlicesOfTensor(1).size(), 0u);
  for (const Slice& s : map.slices()) {
    if (s.tensor != 0) {
      EXPECT_LE(s.length * 4, kMiB);
    }
  }
  std::vector<uint64_t> bytes = map.BytesPerServer();
  double mean = static_cast<double>(TotalBytes(tensors)) / 4;
  EXPECT_LE(static_cast<double>(*std::max_element(bytes.begin(), bytes.end())), 1.10 * mean);
}

TEST(PartitionMapTest, ExplicitBytesCountBeforeAutoAssignment) {
  std::vector<TensorSpec> tensors = {Tensor("big", {100}), Tensor("x", {10}), Tensor("y", {10})};
  PlacementSpec p = Auto();
  p.explicit_ranks["big"] = 0;
  PartitionMap map = MustBuild(tensors, 2, p);
  EXPECT_EQ(map.slices()[0].server, 0);
  EXPECT_EQ(map.slices()[1].server, 1);
  EXPECT_EQ(map.slices()[2].server, 1);
}

TEST(PartitionMapTest, LayerRulePlacesLayersRoundRobin) {
  std::vector<TensorSpec> tensors = Mlp3();
  PlacementSpec p;
  p.rule = PlacementRule::kLayer;
  p.slice_bytes = 1024;  // ignored by kLayer: layers go whole
  PartitionMap map = MustBuild(tensors, 2, p);
  ASSERT_EQ(map.slices().size(), 6u);
  std::vector<int32_t> servers;
  for (const Slice& s : map.slices()) {
    servers.push_back(s.server);
    EXPECT_EQ(s.offset, 0u);
    EXPECT_EQ(s.length, static_cast<uint64_t>(tensors[s.tensor].NumElements()));
  }
  EXPECT_THAT(servers, ElementsAre(0, 0, 1, 1, 0, 0));
}

TEST(PartitionMapTest, LayerRuleWithExplicitOverrideAndUndottedNames) {
  std::vector<TensorSpec> tensors = {Tensor("embed", {8}), Tensor("fc0.weight", {4}), Tensor("fc0.bias", {2}),
                                     Tensor("head", {3})};
  PlacementSpec p;
  p.rule = PlacementRule::kLayer;
  p.explicit_ranks["fc0.bias"] = 2;
  PartitionMap map = MustBuild(tensors, 3, p);
  std::vector<int32_t> servers;
  for (const Slice& s : map.slices()) servers.push_back(s.server);
  EXPECT_THAT(servers, ElementsAre(0, 1, 2, 2));
}

TEST(PartitionMapTest, RejectsExplicitRankOutOfRange) {
  PlacementSpec p = Auto();
  p.explicit_ranks["fc1.weight"] = 2;
  ExpectCode(PartitionMap::Build(Mlp3(), 2, p).status(), absl::StatusCode::kInvalidArgument,
             "'fc1.weight': server rank 2 is outside [0, 2)");
  p.explicit_ranks["fc1.weight"] = -1;
  ExpectCode(PartitionMap::Build(Mlp3(), 2, p).status(), absl::StatusCode::kInvalidArgument, "'fc1.weight'");
  p.rule = PlacementRule::kLayer;
  p.explicit_ranks["fc1.weight"] = 7;
  ExpectCode(PartitionMap::Build(Mlp3(), 2, p).status(), absl::StatusCode::kInvalidArgument, "rank 7");
}

TEST(PartitionMapTest, RejectsBadServerCount) {
  for (int n : {0, -1}) {
    ExpectCode(PartitionMap::Build(Mlp3(), n, Auto()).status(), absl::StatusCode::kInvalidArgument,
               absl::StrCat("num_servers is ", n));
  }
}

TEST(PartitionMapTest, RejectsInvalidSpec) {
  ExpectCode(PartitionMap::Build({}, 2, Auto()).status(), absl::StatusCode::kInvalidArgument, "no tensors");
  ExpectCode(PartitionMap::Build({Tensor("w", {3, -1})}, 2, Auto()).status(), absl::StatusCode::kInvalidArgument,
             "tensor 'w'");
  ExpectCode(PartitionMap::Build({Tensor("w", {3}), Tensor("w", {4})}, 2, Auto()).status(),
             absl::StatusCode::kInvalidArgument, "duplicate tensor name 'w'");
  ExpectCode(PartitionMap::Build(Mlp3(), 2, Auto(2)).status(), absl::StatusCode::kInvalidArgument, "slice_bytes is 2");
  PlacementSpec p = Auto();
  p.explicit_ranks["nope"] = 0;
  ExpectCode(PartitionMap::Build(Mlp3(), 2, p).status(), absl::StatusCode::kInvalidArgument, "unknown tensor 'nope'");
}

TEST(PartitionMapTest, RejectsAbsurdSliceCount) {
  std::vector<TensorSpec> tensors = {Tensor("huge", {int64_t{1} << 30})};
  ExpectCode(PartitionMap::Build(tensors, 2, Auto(4)).status(), absl::StatusCode::kInvalidArgument, "slices");
}

TEST(PartitionMapTest, FromSlicesRoundTripsBuild) {
  std::vector<TensorSpec> tensors = TransformerLike();
  PlacementSpec p = Auto();
  p.explicit_ranks["embed.position"] = 1;
  PartitionMap built = MustBuild(tensors, 3, p);
  absl::StatusOr<PartitionMap> copy = PartitionMap::FromSlices(tensors, 3, built.slices());
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->num_servers(), 3);
  EXPECT_EQ(copy->slices(), built.slices());
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    EXPECT_THAT(copy->SlicesOfTensor(t), ::testing::ElementsAreArray(built.SlicesOfTensor(t)));
  }
  EXPECT_EQ(copy->BytesPerServer(), built.BytesPerServer());
  EXPECT_EQ(copy->Describe(tensors), built.Describe(tensors));
}

class FromSlicesRejectTest : public ::testing::Test {
 protected:
  void SetUp() override { slices_ = MustBuild(tensors_, 2, Auto(400)).slices(); }

  absl::Status From(const std::vector<Slice>& slices, int num_servers = 2) {
    return PartitionMap::FromSlices(tensors_, num_servers, slices).status();
  }

  // "a" is cut into 3 slices of 100 elements (keys 0-2), "b" goes whole (key 3).
  std::vector<TensorSpec> tensors_ = {Tensor("a", {300}), Tensor("b", {50})};
  std::vector<Slice> slices_;
};

TEST_F(FromSlicesRejectTest, FixtureIsValid) {
  ASSERT_EQ(slices_.size(), 4u);
  EXPECT_TRUE(From(slices_).ok());
}

TEST_F(FromSlicesRejectTest, Gap) {
  slices_[1].length -= 1;
  ExpectCode(From(slices_), absl::StatusCode::kDataLoss, "gap");
}

TEST_F(FromSlicesRejectTest, GapAtTheEnd) {
  slices_[3].length -= 1;
  ExpectCode(From(slices_), absl::StatusCode::kDataLoss, "tensor 'b': slices cover [0, 49)");
}

TEST_F(FromSlicesRejectTest, MissingSlice) {
  slices_.pop_back();
  ExpectCode(From(slices_), absl::StatusCode::kDataLoss, "tensor 'b'");
}

TEST_F(FromSlicesRejectTest, Overlap) {
  slices_[2].offset -= 1;
  slices_[2].length += 1;
  ExpectCode(From(slices_), absl::StatusCode::kDataLoss, "overlaps");
}

TEST_F(FromSlicesRejectTest, OutOfOrderOffsets) {
  std::swap(slices_[0].offset, slices_[1].offset);
  ExpectCode(From(slices_), absl::StatusCode::kDataLoss, "tensor 'a': slice key 0");
}

TEST_F(FromSlicesRejectTest, RunsPastTheEnd) {
  slices_[2].length += 1;
  ExpectCode(From(slices_), absl::StatusCode::kDataLoss, "runs past");
}

TEST_F(FromSlicesRejectTest, EmptySlice) {
  slices_.insert(slices_.begin() + 3, Slice{3, 1, 0, 0, 0});
  slices_[4].key = 4;
  ExpectCode(From(slices_), absl::StatusCode::kDataLoss, "empty");
}

TEST_F(FromSlicesRejectTest, KeysNotDense) {
  slices_[2].key = 5;
  ExpectCode(From(slices_), absl::StatusCode::kInvalidArgument, "slice at index 2 has key 5; keys must be dense");
}

TEST_F(FromSlicesRejectTest, ServerOutOfRange) {
  slices_[1].server = 2;
  ExpectCode(From(slices_), absl::StatusCode::kInvalidArgument, "slice key 1: server 2");
  slices_[1].server = -1;
  ExpectCode(From(slices_), absl::StatusCode::kInvalidArgument, "server -1");
}

TEST_F(FromSlicesRejectTest, TensorIndexOutOfRange) {
  slices_[3].tensor = 2;
  ExpectCode(From(slices_), absl::StatusCode::kInvalidArgument, "tensor index 2");
}

TEST_F(FromSlicesRejectTest, BadServerCountOrTensor) {
  ExpectCode(From(slices_, 0), absl::StatusCode::kInvalidArgument, "num_servers is 0");
  tensors_[1].shape = {0};
  ExpectCode(From(slices_), absl::StatusCode::kInvalidArgument, "tensor 'b'");
}

TEST(PartitionMapTest, SlicesOnServerAndBytesPerServerAgreeWithSlices) {
  std::vector<TensorSpec> tensors = TransformerLike();
  PartitionMap map = MustBuild(tensors, 3, Auto());
  std::vector<uint64_t> bytes = map.BytesPerServer();
  ASSERT_EQ(bytes.size(), 3u);
  size_t seen = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<uint32_t> keys = map.SlicesOnServer(r);
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
    uint64_t sum = 0;
    for (uint32_t key : keys) {
      EXPECT_EQ(map.slices()[key].server, r);
      sum += 4 * map.slices()[key].length;
    }
    EXPECT_EQ(sum, bytes[r]);
    seen += keys.size();
  }
  EXPECT_EQ(seen, map.slices().size());
  EXPECT_TRUE(map.SlicesOnServer(3).empty());
  EXPECT_TRUE(map.SlicesOnServer(-1).empty());
}

TEST(PartitionMapTest, DescribeListsEachTensorOnOneLine) {
  std::vector<TensorSpec> tensors = {Tensor("w", {2000}), Tensor("b", {10})};
  PartitionMap map = MustBuild(tensors, 2, Auto(4000));
  EXPECT_EQ(map.Describe(tensors),
            "w -> server 0 [0, 1000), server 1 [1000, 2000)\n"
            "b -> server 0 [0, 10)");
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(PartitionMapTablesTest, OneShardPerTableAndServerAfterTheDenseSlices) {
  const std::vector<TensorSpec> tensors = {TensorSpec{"w", {10}, Initializer::Zeros()}};
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(tensors, 3, PlacementSpec{}, 2);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->slices().size(), 1u + 2 * 3);
  for (uint32_t t = 0; t < 2; ++t) {
    for (int r = 0; r < 3; ++r) {
      const Slice& s = map->slices()[map->TableSlice(t, r)];
      EXPECT_TRUE(s.table);
      EXPECT_EQ(s.tensor, t);
      EXPECT_EQ(s.server, r);
      EXPECT_EQ(s.length, 0u);
    }
  }
  EXPECT_EQ(map->SlicesOnServer(1), (std::vector<uint32_t>{map->TableSlice(0, 1), map->TableSlice(1, 1)}));
  EXPECT_EQ(map->BytesPerServer()[0], 40u);  // tables count no bytes
  // A peer's copy comes back the same; one with a table shard misplaced does not.
  std::vector<Slice> slices = map->slices();
  EXPECT_TRUE(PartitionMap::FromSlices(tensors, 3, slices, 2).ok());
  std::swap(slices[2].server, slices[3].server);
  const absl::Status bad = PartitionMap::FromSlices(tensors, 3, slices, 2).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("is not table 0's shard 1 on server 1"));
  // A model of tables only has no dense slices.
  EXPECT_EQ(PartitionMap::Build({}, 2, PlacementSpec{}, 1)->slices().size(), 2u);
}

TEST(PartitionMapTablesTest, FixedShardsPerTableStartRoundRobinOverTheServers) {
  const std::vector<TensorSpec> tensors = {TensorSpec{"w", {10}, Initializer::Zeros()}};
  PlacementSpec placement;
  placement.table_shards = 8;
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(tensors, 3, placement, 2);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->table_shards(), 8);
  ASSERT_EQ(map->slices().size(), 1u + 2 * 8);
  for (uint32_t t = 0; t < 2; ++t) {
    for (int v = 0; v < 8; ++v) {
      const Slice& s = map->slices()[map->TableSlice(t, v)];
      EXPECT_EQ(s.key, 1u + t * 8 + v);
      EXPECT_TRUE(s.table);
      EXPECT_EQ(s.tensor, t);
      EXPECT_EQ(s.server, v % 3);
    }
  }
  EXPECT_TRUE(PartitionMap::FromSlices(tensors, 3, map->slices(), 2, 8).ok());
  // Read as one shard per server, the same slices do not fit.
  EXPECT_EQ(PartitionMap::FromSlices(tensors, 3, map->slices(), 2).status().code(), absl::StatusCode::kInvalidArgument);
  placement.table_shards = kMaxTableShards + 1;
  ExpectCode(PartitionMap::Build({}, 2, placement, 1).status(), absl::StatusCode::kInvalidArgument,
             "table_shards is 4097");
  ExpectCode(PartitionMap::FromSlices({}, 2, {}, 1, kMaxTableShards + 1).status(), absl::StatusCode::kInvalidArgument,
             "table_shards is 4097");
}

TEST(PartitionMapTablesTest, RowsSpreadEvenlyAndStablyOverServers) {
  const uint64_t table = TableHash("tokens");
  EXPECT_EQ(table, TableHash("tokens"));
  EXPECT_NE(table, TableHash("tokens2"));
  std::vector<int> count(4, 0);
  for (uint64_t id = 0; id < 100000; ++id) ++count[TableRowShard(table, id, 4)];
  for (int c : count) EXPECT_NEAR(c, 25000, 750);  // sequential ids, +-3%
  // Pinned values (computed independently, in Python): the placement is part
  // of the format, since a server's checkpoint holds the rows placed on it.
  EXPECT_EQ(table, 0x93fab8f021712b13ULL);
  EXPECT_EQ(TableRowShard(table, 12345, 7), 1);
  EXPECT_EQ(TableRowShard(table, 0, 7), 4);
  EXPECT_EQ(TableRowShard(table, 0, 1), 0);
}

}  // namespace
}  // namespace ps
