#include "common/placement/partition_map.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/hash.h"

namespace ps {
namespace {

constexpr uint64_t kBytesPerElement = 4;
// Keys are uint32; far below that, a map this large is a configuration mistake
// (a tiny slice_bytes on a huge tensor), so Build refuses it.
// The map travels in one header (common/wire/codec.h: kMaxHeaderWords); a slice
// takes 4 words there, so this leaves room for the tensor list as well.
constexpr uint64_t kMaxSlices = uint64_t{1} << 17;
constexpr int32_t kUnassigned = -1;

std::string_view LayerOf(std::string_view name) {
  size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(0, dot);
}

// Elements per slice under kAuto. Rounding slice_bytes down to whole elements
// keeps every slice within slice_bytes even when it is not a multiple of 4;
// for multiples of 4 the slice count is exactly ceil(bytes / slice_bytes).
uint64_t MaxSliceElements(const PlacementSpec& placement) { return placement.slice_bytes / kBytesPerElement; }

bool IsExplicit(const PlacementSpec& placement, const std::string& name) {
  return placement.explicit_ranks.count(name) != 0;
}

uint64_t SliceCount(const TensorSpec& t, const PlacementSpec& placement) {
  if (placement.rule != PlacementRule::kAuto || IsExplicit(placement, t.name)) return 1;
  uint64_t n = static_cast<uint64_t>(t.NumElements());
  uint64_t max_elems = MaxSliceElements(placement);
  return (n + max_elems - 1) / max_elems;
}

// The same checks as ModelSpec::Validate for the parts a map depends on, plus
// the ones that need the server count.
absl::Status ValidateInputs(const std::vector<TensorSpec>& tensors, int num_servers, const PlacementSpec& placement,
                            int num_tables) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_servers is ", num_servers, "; must be at least 1"));
  }
  if (num_tables < 0) return absl::InvalidArgumentError(absl::StrCat("num_tables is ", num_tables));
  if (placement.table_shards > kMaxTableShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement table_shards is ", placement.table_shards, "; must be in [0, ", kMaxTableShards, "]"));
  }
  if (tensors.empty() && num_tables == 0) return absl::InvalidArgumentError("model has no tensors and no tables");
  if (!tensors.empty()) {  // a model of tables only has no dense part to check
    ModelSpec spec;
    spec.tensors = tensors;
    for (TensorSpec& t : spec.tensors) t.stage = 0;  // placement does not depend on stages
    spec.placement = placement;
    absl::Status s = spec.Validate();
    if (!s.ok()) return s;
  }
  for (const auto& [name, rank] : placement.explicit_ranks) {
    if (rank >= num_servers) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement of tensor '", name, "': server rank ", rank, " is outside [0, ", num_servers, ")"));
    }
  }
  uint64_t total = static_cast<uint64_t>(num_tables) * TableShardsOf(placement.table_shards, num_servers);
  for (const TensorSpec& t : tensors) total += SliceCount(t, placement);
  if (total > kMaxSlices) {
    return absl::InvalidArgumentError(absl::StrCat("placement would create ", total, " slices; at most ", kMaxSlices,
                                                   " allowed (raise slice_bytes)"));
  }
  return absl::OkStatus();
}

// Near-equal lengths: the first numel % count slices are one element longer.
void AppendAutoSlices(uint32_t tensor, uint64_t numel, uint64_t count, std::vector<Slice>* out) {
  uint64_t base = numel / count;
  uint64_t longer = numel % count;
  uint64_t offset = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t length = base + (i < longer ? 1 : 0);
    out->push_back(Slice{0, tensor, offset, length, kUnassigned});
    offset += length;
  }
}

// Cuts every tensor in list order. Explicit and kLayer slices get their server
// here; kAuto slices are left kUnassigned for AssignLpt.
std::vector<Slice> CutTensors(const std::vector<TensorSpec>& tensors, int num_servers, const PlacementSpec& placement) {
  std::vector<Slice> slices;
  std::vector<std::string_view> layers;  // in order of first appearance
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    uint64_t numel = static_cast<uint64_t>(t.NumElements());
    auto it = placement.explicit_ranks.find(t.name);
    if (it != placement.explicit_ranks.end()) {
      slices.push_back(Slice{0, i, 0, numel, it->second});
    } else if (placement.rule == PlacementRule::kLayer) {
      std::string_view layer = LayerOf(t.name);
      auto pos = std::find(layers.begin(), layers.end(), layer);
      if (pos == layers.end()) pos = layers.insert(layers.end(), layer);
      int32_t server = static_cast<int32_t>((pos - layers.begin()) % num_servers);
      slices.push_back(Slice{0, i, 0, numel, server});
    } else {
      AppendAutoSlices(i, numel, SliceCount(t, placement), &slices);
    }
  }
  for (uint32_t key = 0; key < slices.size(); ++key) slices[key].key = key;
  return slices;
}

// Longest-processing-time greedy: the largest unassigned slice goes to the
// server holding the fewest bytes. Assigned slices count from the start.
void AssignLpt(int num_servers, std::vector<Slice>* slices) {
  std::vector<uint64_t> bytes(num_servers, 0);
  std::vector<uint32_t> pending;
  for (const Slice& s : *slices) {
    if (s.server == kUnassigned) {
      pending.push_back(s.key);
    } else {
      bytes[s.server] += s.length * kBytesPerElement;
    }
  }
  std::sort(pending.begin(), pending.end(), [&](uint32_t a, uint32_t b) {
    uint64_t la = (*slices)[a].length, lb = (*slices)[b].length;
    return la != lb ? la > lb : a < b;
  });
  // Min-heap on (bytes, rank): ties go to the lower rank.
  using Load = std::pair<uint64_t, int32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (int32_t r = 0; r < num_servers; ++r) heap.push({bytes[r], r});
  for (uint32_t key : pending) {
    auto [load, rank] = heap.top();
    heap.pop();
    Slice& s = (*slices)[key];
    s.server = rank;
    heap.push({load + s.length * kBytesPerElement, rank});
  }
}

// The per-slice checks that do not depend on other slices (kInvalidArgument).
absl::Status CheckSliceFields(const Slice& s, uint32_t index, size_t num_tensors, int num_servers) {
  if (s.key != index) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice at index ", index, " has key ", s.key, "; keys must be dense from 0"));
  }
  if (s.tensor >= num_tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice key ", s.key, ": tensor index ", s.tensor, " is outside [0, ", num_tensors, ")"));
  }
  if (s.server < 0 || s.server >= num_servers) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice key ", s.key, ": server ", s.server, " is outside [0, ", num_servers, ")"));
  }
  return absl::OkStatus();
}

// `end` is where the previous slice of the same tensor ended (kDataLoss).
absl::Status CheckSliceTiling(const Slice& s, const TensorSpec& t, uint64_t end) {
  uint64_t numel = static_cast<uint64_t>(t.NumElements());
  auto fail = [&](auto... what) {
    return absl::DataLossError(
        absl::StrCat("tensor '", t.name, "': slice key ", s.key, " [", s.offset, ", +", s.length, ") ", what...));
  };
  if (s.length == 0) return fail("is empty");
  if (s.offset > end) return fail("leaves a gap after element ", end);
  if (s.offset < end) return fail("overlaps elements before ", end);
  if (s.length > numel - s.offset) return fail("runs past the tensor's ", numel, " elements");
  return absl::OkStatus();
}

absl::Status CheckSlices(const std::vector<TensorSpec>& tensors, int num_servers, const std::vector<Slice>& slices) {
  std::vector<uint64_t> end(tensors.size(), 0);
  for (uint32_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    absl::Status st = CheckSliceFields(s, i, tensors.size(), num_servers);
    if (!st.ok()) return st;
    st = CheckSliceTiling(s, tensors[s.tensor], end[s.tensor]);
    if (!st.ok()) return st;
    end[s.tensor] = s.offset + s.length;
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    uint64_t numel = static_cast<uint64_t>(tensors[t].NumElements());
    if (end[t] != numel) {
      return absl::DataLossError(
          absl::StrCat("tensor '", tensors[t].name, "': slices cover [0, ", end[t], ") of ", numel, " elements"));
    }
  }
  return absl::OkStatus();
}

// `shards` shards per table after the dense slices, as Build lays them out:
// shard v of each table starts on server v mod num_servers.
void AppendTableSlices(int num_tables, int shards, int num_servers, std::vector<Slice>* slices) {
  for (int t = 0; t < num_tables; ++t) {
    for (int v = 0; v < shards; ++v) {
      const auto key = static_cast<uint32_t>(slices->size());
      slices->push_back(Slice{key, static_cast<uint32_t>(t), 0, 0, v % num_servers, true});
    }
  }
}

// The last num_tables x table_shards slices must be the table shards as
// AppendTableSlices lays them out; none before them may be one.
absl::Status CheckTableSlices(const std::vector<Slice>& slices, int num_tables, int table_shards, int num_servers) {
  const uint64_t shards = static_cast<uint64_t>(num_tables) * static_cast<uint64_t>(table_shards);
  if (shards > slices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(slices.size(), " slices cannot hold ", num_tables, " tables of ", table_shards, " shards"));
  }
  std::vector<Slice> expected(slices.begin(), slices.end() - static_cast<ptrdiff_t>(shards));
  for (const Slice& s : expected) {
    if (s.table)
      return absl::InvalidArgumentError(absl::StrCat("slice key ", s.key, ": a table shard among the dense slices"));
  }
  AppendTableSlices(num_tables, table_shards, num_servers, &expected);
  for (size_t i = slices.size() - shards; i < slices.size(); ++i) {
    if (!(slices[i] == expected[i])) {
      return absl::InvalidArgumentError(absl::StrCat("slice key ", slices[i].key, " is not table ", expected[i].tensor,
                                                     "'s shard ", (i - (slices.size() - shards)) % table_shards,
                                                     " on server ", expected[i].server));
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t TableHash(std::string_view name) { return Fnv1a64(name); }

int32_t TableRowShard(uint64_t table_hash, uint64_t id, int shards) {
  return static_cast<int32_t>(Mix64(id ^ table_hash) % static_cast<uint64_t>(shards));
}

int TableShardsOf(uint32_t table_shards, int num_servers) {
  return table_shards == 0 ? num_servers : static_cast<int>(table_shards);
}

PartitionMap::PartitionMap(int num_servers, std::vector<Slice> slices, int num_tensors, int num_tables,
                           int table_shards)
    : num_servers_(num_servers),
      num_tables_(num_tables),
      table_shards_(table_shards),
      slices_(std::move(slices)),
      slices_of_tensor_(num_tensors) {
  first_table_key_ = static_cast<uint32_t>(slices_.size() - static_cast<size_t>(num_tables) * table_shards);
  // Callers guarantee each tensor's slices appear in offset order by key.
  for (const Slice& s : slices_) {
    if (!s.table) slices_of_tensor_[s.tensor].push_back(s.key);
  }
}

absl::StatusOr<PartitionMap> PartitionMap::Build(const std::vector<TensorSpec>& tensors, int num_servers,
                                                 const PlacementSpec& placement, int num_tables) {
  absl::Status s = ValidateInputs(tensors, num_servers, placement, num_tables);
  if (!s.ok()) return s;
  std::vector<Slice> slices = CutTensors(tensors, num_servers, placement);
  AssignLpt(num_servers, &slices);
  const int shards = TableShardsOf(placement.table_shards, num_servers);
  AppendTableSlices(num_tables, shards, num_servers, &slices);
  return PartitionMap(num_servers, std::move(slices), static_cast<int>(tensors.size()), num_tables, shards);
}

absl::StatusOr<PartitionMap> PartitionMap::FromSlices(const std::vector<TensorSpec>& tensors, int num_servers,
                                                      std::vector<Slice> slices, int num_tables,
                                                      uint32_t table_shards) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_servers is ", num_servers, "; must be at least 1"));
  }
  if (num_tables < 0) return absl::InvalidArgumentError(absl::StrCat("num_tables is ", num_tables));
  for (const TensorSpec& t : tensors) {
    absl::Status s = t.Validate();
    if (!s.ok()) return s;
  }
  if (table_shards > kMaxTableShards) {
    return absl::InvalidArgumentError(absl::StrCat("table_shards is ", table_shards, "; at most ", kMaxTableShards));
  }
  const int shards = TableShardsOf(table_shards, num_servers);
  absl::Status s = CheckTableSlices(slices, num_tables, shards, num_servers);
  if (!s.ok()) return s;
  const size_t dense = slices.size() - static_cast<size_t>(num_tables) * shards;
  s = CheckSlices(tensors, num_servers, std::vector<Slice>(slices.begin(), slices.begin() + dense));
  if (!s.ok()) return s;
  return PartitionMap(num_servers, std::move(slices), static_cast<int>(tensors.size()), num_tables, shards);
}

std::vector<uint32_t> PartitionMap::SlicesOnServer(int rank) const {
  std::vector<uint32_t> keys;
  for (const Slice& s : slices_) {
    if (s.server == rank) keys.push_back(s.key);
  }
  return keys;
}

std::vector<uint64_t> PartitionMap::BytesPerServer() const {
  std::vector<uint64_t> bytes(num_servers_, 0);
  for (const Slice& s : slices_) bytes[s.server] += s.length * kBytesPerElement;
  return bytes;
}

std::string PartitionMap::Describe(const std::vector<TensorSpec>& tensors) const {
  std::string out;
  for (size_t t = 0; t < slices_of_tensor_.size(); ++t) {
    if (t > 0) out += '\n';
    absl::StrAppend(&out, t < tensors.size() ? tensors[t].name : absl::StrCat("#", t), " ->");
    const char* sep = " ";
    for (uint32_t key : slices_of_tensor_[t]) {
      const Slice& s = slices_[key];
      absl::StrAppend(&out, sep, "server ", s.server, " [", s.offset, ", ", s.offset + s.length, ")");
      sep = ", ";
    }
  }
  return out;
}

}  // namespace ps
