// KVClient's embedding-table calls: grouping a batch's ids by table shard,
// merging repeated ids, building the row frames, and where pulled rows land.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/wire/wire_frames.h"
#include "worker/client/kv_client_internal.h"

namespace ps {
namespace {

// Most distinct ids of one table one request may carry to one shard (the
// server's SliceStore::kMaxRowsPerRequest).
constexpr uint64_t kMaxRowsPerShard = uint64_t{1} << 17;

// A typical delta of ids this far apart takes 8 varint bytes: no gain.
constexpr uint64_t kEightByteDeltas = uint64_t{1} << 49;

// Sorts (id, index) pairs by id: least significant byte first, up to the
// highest byte any id uses (3 passes for ids under 2^24). `spare`: scratch.
void RadixSort(std::vector<std::pair<uint64_t, uint32_t>>& v, std::vector<std::pair<uint64_t, uint32_t>>& spare) {
  uint64_t used = 0;
  for (const auto& p : v) used |= p.first;
  spare.resize(v.size());
  for (int shift = 0; shift < 64 && (used >> shift) != 0; shift += 8) {
    size_t start[257] = {};
    for (const auto& p : v) ++start[((p.first >> shift) & 0xff) + 1];
    for (int b = 0; b < 256; ++b) start[b + 1] += start[b];
    for (const auto& p : v) spare[start[(p.first >> shift) & 0xff]++] = p;
    v.swap(spare);
  }
}

// The ids of one table in one call, grouped by shard: each shard's
// distinct ids in order of first appearance (or, `sorted`, ascending where
// that may shorten them: Sort), and for each input position the shard and
// the index among that shard's ids.
struct RowGroups {
  std::vector<std::vector<uint64_t>> ids;  // per shard
  std::vector<int32_t> shard;              // per input position
  std::vector<uint32_t> local;             // per input position
  bool sorted = false;

  RowGroups(absl::Span<const uint64_t> in, uint64_t table_hash, int shards, bool sort)
      : ids(shards), shard(in.size()), local(in.size()), sorted(sort) {
    std::vector<absl::flat_hash_map<uint64_t, uint32_t>> seen(shards);
    for (size_t i = 0; i < in.size(); ++i) {
      const int32_t s = TableRowShard(table_hash, in[i], shards);
      auto [it, fresh] = seen[s].try_emplace(in[i], static_cast<uint32_t>(ids[s].size()));
      if (fresh) ids[s].push_back(in[i]);
      shard[i] = s;
      local[i] = it->second;
    }
    if (sorted) Sort();
  }

  // Each shard's ids in ascending order (the positions follow), for delta
  // coding (common/wire/id_coding.h); not a shard whose ids are too far apart
  // for their deltas to take under 8 bytes (ids hashed over 64 bits), which
  // travels raw whatever its order.
  void Sort() {
    std::vector<std::pair<uint64_t, uint32_t>> order, spare;
    std::vector<std::vector<uint32_t>> moved(ids.size());  // per shard sorted: old index -> new
    for (size_t s = 0; s < ids.size(); ++s) {
      const uint64_t n = ids[s].size();
      if (n < 2 || *std::max_element(ids[s].begin(), ids[s].end()) / n >= kEightByteDeltas) continue;
      order.resize(n);
      for (uint32_t i = 0; i < n; ++i) order[i] = {ids[s][i], i};
      RadixSort(order, spare);
      moved[s].resize(n);
      for (uint32_t i = 0; i < n; ++i) {
        ids[s][i] = order[i].first;
        moved[s][order[i].second] = i;
      }
    }
    for (size_t i = 0; i < local.size(); ++i) {
      if (!moved[shard[i]].empty()) local[i] = moved[shard[i]][local[i]];
    }
  }

  // The push frames of `g` (these ids' rows): per shard, its ids then the
  // sums of their rows (repeated ids add up), *sums pointing at those (null
  // for a shard without rows: its empty push, which a sync step waits for).
  // Filled where they do not move (a small frame's bytes live in the
  // message itself), then handed to the requests.
  std::vector<zmq::message_t> SumFrames(const ConstRowBuffer& g, size_t dim, std::vector<float*>* sums) const {
    std::vector<zmq::message_t> frames;
    frames.reserve(ids.size());
    sums->assign(ids.size(), nullptr);
    for (size_t s = 0; s < ids.size(); ++s) {
      zmq::message_t& frame = frames.emplace_back(ids[s].size() * (sizeof(uint64_t) + dim * sizeof(float)));
      if (ids[s].empty()) continue;
      char* bytes = static_cast<char*>(frame.data());
      std::memcpy(bytes, ids[s].data(), ids[s].size() * sizeof(uint64_t));
      (*sums)[s] = reinterpret_cast<float*>(bytes + ids[s].size() * sizeof(uint64_t));
      std::memset((*sums)[s], 0, ids[s].size() * dim * sizeof(float));
    }
    for (size_t i = 0; i < g.ids.size(); ++i) {
      float* dst = (*sums)[shard[i]] + static_cast<size_t>(local[i]) * dim;
      const float* src = g.rows.data() + i * dim;
      for (size_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
    return frames;
  }

  // Values to assign: a repeated id would have its rows summed.
  absl::Status CheckDistinct(const std::string& table, size_t given) const {
    size_t distinct = 0;
    for (const std::vector<uint64_t>& s : ids) distinct += s.size();
    if (distinct == given) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("table '", table, "': rows to load for ", given, " ids of which ",
                                                   distinct, " distinct; each id once"));
  }

  absl::Status CheckSize(const std::string& table) const {
    for (size_t s = 0; s < ids.size(); ++s) {
      if (ids[s].size() > kMaxRowsPerShard) {
        return absl::InvalidArgumentError(absl::StrCat("table '", table, "': ", ids[s].size(),
                                                       " distinct ids for shard ", s, "; at most ", kMaxRowsPerShard,
                                                       " in one request: split the batch"));
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<int> KVClient::Impl::TableIndex(absl::string_view name) const {
  for (size_t i = 0; i < model_.tables.size(); ++i) {
    if (model_.tables[i].name == name) return static_cast<int>(i);
  }
  return absl::NotFoundError(absl::StrCat("no table named '", name, "' in the registered model"));
}

absl::Status KVClient::Impl::CheckRows(absl::Span<const ConstRowBuffer> grads, absl::Span<const RowBuffer> rows) const {
  if (pulled_version_ == nullptr) return absl::FailedPreconditionError("no model registered yet");
  auto check = [&](int table, size_t ids, size_t floats, std::vector<bool>& seen) -> absl::Status {
    if (table < 0 || table >= static_cast<int>(model_.tables.size())) {
      return absl::NotFoundError(absl::StrCat("table index ", table, " not in the model"));
    }
    const TableSpec& spec = model_.tables[table];
    if (seen[table]) return absl::InvalidArgumentError(absl::StrCat("table '", spec.name, "' listed twice"));
    seen[table] = true;
    if (floats != ids * static_cast<uint64_t>(spec.dim)) {
      return absl::InvalidArgumentError(absl::StrCat("table '", spec.name, "': ", ids, " ids of dim ", spec.dim,
                                                     " need ", ids * spec.dim, " floats; buffer has ", floats));
    }
    return absl::OkStatus();
  };
  std::vector<bool> pushed(model_.tables.size(), false), pulled(model_.tables.size(), false);
  for (const ConstRowBuffer& g : grads) PS_RETURN_IF_ERROR(check(g.table, g.ids.size(), g.rows.size(), pushed));
  for (const RowBuffer& r : rows) PS_RETURN_IF_ERROR(check(r.table, r.ids.size(), r.rows.size(), pulled));
  return absl::OkStatus();
}

absl::Status KVClient::Impl::AddPushRows(absl::Span<const ConstRowBuffer> grads, int64_t step, bool assign,
                                         RequestBuilder& requests) {
  for (const ConstRowBuffer& g : grads) {
    const TableSpec& spec = model_.tables[g.table];
    const size_t dim = spec.dim;
    const int shards = map_.table_shards();
    const RowGroups groups(g.ids, table_hash_[g.table], shards, compression_->SortsIds(g.table));
    PS_RETURN_IF_ERROR(groups.CheckSize(spec.name));
    if (assign) PS_RETURN_IF_ERROR(groups.CheckDistinct(spec.name, g.ids.size()));
    std::vector<float*> sums;
    std::vector<zmq::message_t> frames = groups.SumFrames(g, dim, &sums);
    for (int s = 0; s < shards; ++s) {
      const uint32_t key = map_.TableSlice(g.table, s);
      Outgoing& out = requests.For(map_.slices()[key]);
      if (!std::holds_alternative<PushRequestMsg>(out.envelope.body)) {
        out.envelope.body = PushRequestMsg{step, {}, std::nullopt};
      }
      const auto rows = static_cast<uint32_t>(groups.ids[s].size());
      const Compressor* compressor = assign || rows == 0 ? nullptr : compression_->Rows(g.table);
      std::get<PushRequestMsg>(out.envelope.body)
          .slices.push_back(SliceData{key, uint64_t{rows} * dim, pulled_version_[key].load(std::memory_order_relaxed),
                                      rows, compressor != nullptr});
      if (compressor != nullptr) {
        frames[s] = OwnedFrame(
            RowsFrame(groups.ids[s], groups.sorted, absl::MakeConstSpan(sums[s], uint64_t{rows} * dim), *compressor));
      }
      out.payloads.push_back(std::move(frames[s]));
    }
  }
  return absl::OkStatus();
}

absl::Status KVClient::Impl::AddPullRows(absl::Span<const RowBuffer> rows, int64_t step, RequestBuilder& requests) {
  for (const RowBuffer& o : rows) {
    const TableSpec& spec = model_.tables[o.table];
    const auto dim = static_cast<uint32_t>(spec.dim);
    const int shards = map_.table_shards();
    RowGroups groups(o.ids, table_hash_[o.table], shards, compression_->SortsIds(o.table));
    PS_RETURN_IF_ERROR(groups.CheckSize(spec.name));
    // Where each shard's rows land, made whole before a request takes it
    // (a request's destinations may move as it takes more).
    std::vector<client_internal::Destination> dest(shards);
    for (size_t i = 0; i < o.ids.size(); ++i) {
      dest[groups.shard[i]].scatter.emplace_back(groups.local[i], o.rows.data() + i * dim);
    }
    for (int s = 0; s < shards; ++s) {
      if (groups.ids[s].empty()) continue;  // nothing to read there
      const uint32_t key = map_.TableSlice(o.table, s);
      Outgoing& req = requests.For(map_.slices()[key]);
      const auto n = static_cast<uint32_t>(groups.ids[s].size());
      PullRequestMsg& pull = PullOf(req, step);
      pull.rows.push_back(RowsRequest{key, std::move(groups.ids[s]), groups.sorted});
      if (pull.pull_id == 0) pull.pull_id = next_pull_id_.fetch_add(1, std::memory_order_relaxed);
      dest[s].key = key;
      dest[s].length = uint64_t{n} * dim;
      dest[s].rows = n;
      dest[s].dim = dim;
      req.destinations.push_back(std::move(dest[s]));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
