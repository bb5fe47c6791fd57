#include "server/serving/serving_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/model/initializer.h"
#include "common/model_file/model_file_reader.h"
#include "server/export/exporter.h"

namespace ps {
namespace {

// The arrays of a model, by name, as an export names them.
struct NamedArrays {
  std::vector<ArraySpec> specs;
  std::vector<std::string> bytes;
  const std::string* Find(absl::string_view name, const ArraySpec** spec) const {  // spec: may be null
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].name == name) {
        if (spec != nullptr) *spec = &specs[i];
        return &bytes[i];
      }
    }
    return nullptr;
  }
};

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Table `name` from its two arrays; `spec` when the source has it.
absl::StatusOr<ServingModel::Table> TableOf(const NamedArrays& arrays, const std::string& name,
                                            std::optional<TableSpec> spec, const std::string& from) {
  const ArraySpec *ids_spec = nullptr, *rows_spec = nullptr;
  const std::string* ids = arrays.Find(name + ".ids", &ids_spec);
  const std::string* rows = arrays.Find(name + ".rows", &rows_spec);
  if (ids == nullptr || rows == nullptr) {
    return absl::DataLossError(
        absl::StrCat(from, ": table '", name, "' needs both ", name, ".ids and ", name, ".rows"));
  }
  if (ids_spec->dtype != DType::kUInt64 || ids_spec->shape.size() != 1 || rows_spec->dtype != DType::kFloat32 ||
      rows_spec->shape.size() != 2 || rows_spec->shape[0] != ids_spec->shape[0] || rows_spec->shape[1] == 0) {
    return absl::DataLossError(absl::StrCat(from, ": table '", name, "': ", name, ".ids ", ShapeString(ids_spec->shape),
                                            " uint64 and ", name, ".rows ", ShapeString(rows_spec->shape),
                                            " float32 do not go together (ids, then ids x dim)"));
  }
  ServingModel::Table table;
  table.dim = static_cast<uint32_t>(rows_spec->shape[1]);
  table.spec = std::move(spec);
  const uint64_t n = ids_spec->shape[0];
  table.index.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id;
    std::memcpy(&id, ids->data() + i * sizeof(id), sizeof(id));
    if (!table.index.try_emplace(id, static_cast<uint32_t>(i)).second) {
      return absl::DataLossError(absl::StrCat(from, ": table '", name, "' holds id ", id, " twice"));
    }
  }
  table.rows = Floats(*rows);
  return table;
}

absl::StatusOr<std::unique_ptr<ServingModel>> FromCheckpoints(const std::string& dir) {
  PS_ASSIGN_OR_RETURN(ExportedArrays exported, ExportCheckpointsToMemory(dir));
  const ModelSpec& model = exported.summary.model;
  const NamedArrays arrays{std::move(exported.arrays), std::move(exported.bytes)};
  absl::flat_hash_map<std::string, ServingModel::Tensor> tensors;
  for (const TensorSpec& t : model.tensors) {
    tensors[t.name] = {t.shape, Floats(*arrays.Find(t.name, nullptr))};
  }
  absl::flat_hash_map<std::string, ServingModel::Table> tables;
  for (const TableSpec& t : model.tables) {
    PS_ASSIGN_OR_RETURN(tables[t.name], TableOf(arrays, t.name, t, dir));
  }
  const std::vector<uint64_t>& steps = exported.summary.steps;
  ServingVersion version;
  version.step = steps.empty() ? 0 : *std::max_element(steps.begin(), steps.end());
  // The export refuses a sync model whose servers stand at different steps.
  version.exact = model.consistency.mode == ConsistencyMode::kSync;
  version.synced_at = absl::Now();
  version.source = dir;
  return std::make_unique<ServingModel>(std::move(tensors), std::move(tables), std::move(version));
}

absl::StatusOr<std::unique_ptr<ServingModel>> FromModelFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ModelFileReader> reader, ModelFileReader::Open(path));
  NamedArrays arrays;
  for (const ArrayInfo& a : reader->arrays()) {
    arrays.specs.push_back(a);
    PS_ASSIGN_OR_RETURN(arrays.bytes.emplace_back(), reader->ReadAll(a.name));
  }
  absl::flat_hash_map<std::string, ServingModel::Tensor> tensors;
  absl::flat_hash_map<std::string, ServingModel::Table> tables;
  for (const ArraySpec& a : arrays.specs) {
    if (absl::EndsWith(a.name, ".ids")) {
      const std::string table = a.name.substr(0, a.name.size() - 4);
      PS_ASSIGN_OR_RETURN(tables[table], TableOf(arrays, table, std::nullopt, path));
      continue;
    }
    if (absl::EndsWith(a.name, ".rows") && arrays.Find(a.name.substr(0, a.name.size() - 5) + ".ids", nullptr)) {
      continue;
    }
    if (a.dtype != DType::kFloat32) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor '", a.name, "' is ", DTypeName(a.dtype), "; a model's tensors are float32"));
    }
    tensors[a.name] = {std::vector<int64_t>(a.shape.begin(), a.shape.end()), Floats(*arrays.Find(a.name, nullptr))};
  }
  ServingVersion version;
  version.synced_at = absl::Now();
  version.source = path;
  return std::make_unique<ServingModel>(std::move(tensors), std::move(tables), std::move(version));
}

template <typename Map>
std::string Names(const Map& map) {
  std::vector<std::string> names;
  for (const auto& [name, value] : map) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServingModel>> ServingModel::Load(const std::string& from) {
  std::error_code error;
  if (std::filesystem::is_directory(from, error)) return FromCheckpoints(from);
  if (!std::filesystem::exists(from, error)) {
    return absl::NotFoundError(absl::StrCat(from, ": no such checkpoint directory or model file"));
  }
  return FromModelFile(from);
}

ServingModel::ServingModel(absl::flat_hash_map<std::string, Tensor> tensors,
                           absl::flat_hash_map<std::string, Table> tables, ServingVersion version)
    : tensors_(std::move(tensors)), tables_(std::move(tables)), version_(std::move(version)) {
  for (auto& [name, table] : tables_) {
    table.ids.resize(table.index.size());
    for (const auto& [id, row] : table.index) table.ids[row] = id;
  }
}

absl::Status ServingModel::UnknownTable(absl::string_view table) const {
  return absl::NotFoundError(absl::StrCat("no table '", table, "' in the model served (tables: ", Names(tables_), ")"));
}

absl::StatusOr<uint32_t> ServingModel::TableDim(absl::string_view table) const {
  std::shared_lock lock(mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return UnknownTable(table);
  return it->second.dim;
}

absl::Status ServingModel::Lookup(absl::string_view table, absl::Span<const uint64_t> ids, absl::Span<float> out,
                                  absl::Span<uint8_t> found) const {
  std::shared_lock lock(mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return UnknownTable(table);
  const Table& t = it->second;
  if (out.size() != ids.size() * t.dim || found.size() != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("lookup of ", ids.size(), " ids of dim ", t.dim, " given room for ",
                                                   out.size(), " floats and ", found.size(), " marks"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::Span<float> row = out.subspan(i * t.dim, t.dim);
    auto at = t.index.find(ids[i]);
    found[i] = at != t.index.end();
    if (found[i]) {
      std::memcpy(row.data(), t.rows.data() + static_cast<size_t>(at->second) * t.dim, t.dim * sizeof(float));
    } else if (t.spec.has_value()) {
      FillInitialRow(*t.spec, ids[i], row);
    } else {
      std::fill(row.begin(), row.end(), 0.0f);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ServingModel::Tensor> ServingModel::Dense(absl::string_view name) const {
  std::shared_lock lock(mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no tensor '", name, "' in the model served (tensors: ", Names(tensors_), ")"));
  }
  return it->second;
}

ServingVersion ServingModel::version() const {
  std::shared_lock lock(mu_);
  return version_;
}

ServingModel::Contents ServingModel::Describe() const {
  std::shared_lock lock(mu_);
  Contents contents{version_, {}, {}};
  for (const auto& [name, tensor] : tensors_) contents.tensors.push_back(name);
  for (const auto& [name, table] : tables_) contents.tables.emplace_back(name, table.dim);
  std::sort(contents.tensors.begin(), contents.tensors.end());
  std::sort(contents.tables.begin(), contents.tables.end());
  return contents;
}

}  // namespace ps
