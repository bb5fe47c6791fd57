// ServingModel::Apply: a round from a training job onto the served model.

#include <mutex>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/placement/partition_map.h"
#include "server/serving/serving_model.h"

namespace ps {
namespace {

uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

void RemoveRow(ServingModel::Table& table, uint64_t id) {
  auto it = table.index.find(id);
  if (it == table.index.end()) return;
  const uint32_t row = it->second;
  const uint32_t last = static_cast<uint32_t>(table.index.size() - 1);
  table.index.erase(it);
  if (row != last) {  // the last row moves into the gap
    table.index[table.ids[last]] = row;
    table.ids[row] = table.ids[last];
    std::copy_n(table.rows.begin() + static_cast<size_t>(last) * table.dim, table.dim,
                table.rows.begin() + static_cast<size_t>(row) * table.dim);
  }
  table.ids.pop_back();
  table.rows.resize(static_cast<size_t>(last) * table.dim);
}

}  // namespace

absl::Status ServingModel::Check(const Update& update) const {
  absl::flat_hash_map<std::string, uint64_t> sizes;
  absl::flat_hash_map<std::string, uint32_t> dims;
  if (update.reset.has_value()) {
    for (const TensorSpec& t : update.reset->tensors) sizes[t.name] = Elements(t.shape);
    for (const TableSpec& t : update.reset->tables) dims[t.name] = static_cast<uint32_t>(t.dim);
  } else {
    for (const auto& [name, t] : tensors_) sizes[name] = t.values.size();
    for (const auto& [name, t] : tables_) dims[name] = t.dim;
  }
  for (const Update::DenseValues& d : update.dense) {
    auto it = sizes.find(d.tensor);
    if (it == sizes.end()) return absl::InvalidArgumentError(absl::StrCat("a round names no tensor '", d.tensor, "'"));
    if (d.offset + d.values.size() > it->second) {
      return absl::InvalidArgumentError(absl::StrCat("a round's values [", d.offset, ", ", d.offset + d.values.size(),
                                                     ") go beyond tensor '", d.tensor, "' of ", it->second));
    }
  }
  for (const Update::TableRows& t : update.tables) {
    auto it = dims.find(t.table);
    if (it == dims.end()) return absl::InvalidArgumentError(absl::StrCat("a round names no table '", t.table, "'"));
    if (t.rows.size() != t.ids.size() * it->second) {
      return absl::InvalidArgumentError(absl::StrCat("a round's ", t.ids.size(), " rows of table '", t.table, "' (dim ",
                                                     it->second, ") come as ", t.rows.size(), " floats"));
    }
  }
  return absl::OkStatus();
}

void ServingModel::ApplyRows(Table& table, const std::string& name, Update::TableRows& part) {
  const uint64_t hash = TableHash(name);
  if (part.shards > 0) {
    const absl::flat_hash_set<uint64_t> kept(part.ids.begin(), part.ids.end());
    std::vector<uint64_t> gone;
    for (const auto& [id, row] : table.index) {
      if (!kept.contains(id) && TableRowShard(hash, id, part.shards) == part.shard) gone.push_back(id);
    }
    for (uint64_t id : gone) RemoveRow(table, id);
  }
  for (uint64_t id : part.removed) RemoveRow(table, id);
  const size_t dim = table.dim;
  for (size_t i = 0; i < part.ids.size(); ++i) {
    // A snapshot from a disk log the shard shares holds others' rows too.
    if (part.shards > 0 && TableRowShard(hash, part.ids[i], part.shards) != part.shard) continue;
    auto [it, added] = table.index.try_emplace(part.ids[i], static_cast<uint32_t>(table.index.size()));
    if (added) {
      table.rows.resize(table.rows.size() + dim);
      table.ids.push_back(part.ids[i]);
    }
    std::copy_n(part.rows.begin() + i * dim, dim, table.rows.begin() + static_cast<size_t>(it->second) * dim);
  }
}

absl::Status ServingModel::Apply(Update update) {
  std::unique_lock lock(mu_);
  PS_RETURN_IF_ERROR(Check(update));
  if (update.reset.has_value()) {
    tensors_.clear();
    tables_.clear();
    for (const TensorSpec& t : update.reset->tensors)
      tensors_[t.name] = {t.shape, std::vector<float>(Elements(t.shape))};
    for (const TableSpec& t : update.reset->tables)
      tables_[t.name] = Table{static_cast<uint32_t>(t.dim), t, {}, {}, {}};
  }
  for (Update::DenseValues& d : update.dense) {
    std::copy(d.values.begin(), d.values.end(), tensors_[d.tensor].values.begin() + static_cast<ptrdiff_t>(d.offset));
  }
  for (Update::TableRows& t : update.tables) ApplyRows(tables_[t.table], t.table, t);
  version_ = std::move(update.version);
  return absl::OkStatus();
}

}  // namespace ps
