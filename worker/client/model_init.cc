#include "worker/client/model_init.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/model_file/model_file_reader.h"

namespace ps {
namespace {

constexpr uint64_t kRowsPerAssign = 65536;

// What is wrong with `in` for the model: one line per array at fault.
std::vector<std::string> Problems(const ModelSpec& model, const ModelFileReader& in) {
  std::vector<std::string> problems;
  absl::flat_hash_set<std::string> known;
  for (const TensorSpec& t : model.tensors) {
    known.insert(t.name);
    const ArrayInfo* a = in.Find(t.name);
    const std::vector<uint64_t> shape(t.shape.begin(), t.shape.end());
    if (a == nullptr) {
      problems.push_back(absl::StrCat("tensor '", t.name, "' is missing"));
    } else if (a->dtype != DType::kFloat32) {
      problems.push_back(absl::StrCat("'", t.name, "' is ", DTypeName(a->dtype), ", not float32"));
    } else if (a->shape != shape && !(a->shape.empty() && t.NumElements() == 1)) {
      problems.push_back(
          absl::StrCat("'", t.name, "' has shape ", ShapeString(a->shape), "; the model's is ", ShapeString(shape)));
    }
  }
  for (const TableSpec& t : model.tables) {
    const std::string ids_name = t.name + ".ids", rows_name = t.name + ".rows";
    known.insert(ids_name);
    known.insert(rows_name);
    const ArrayInfo* ids = in.Find(ids_name);
    const ArrayInfo* rows = in.Find(rows_name);
    if (ids == nullptr && rows == nullptr) continue;  // the table starts from its initializer
    const bool ids_ok =
        ids != nullptr && ids->shape.size() == 1 && (ids->dtype == DType::kUInt64 || ids->dtype == DType::kInt64);
    const std::vector<uint64_t> want = {ids_ok ? ids->shape[0] : 0, static_cast<uint64_t>(t.dim)};
    if (!ids_ok || rows == nullptr || rows->dtype != DType::kFloat32 || rows->shape != want) {
      problems.push_back(absl::StrCat("table '", t.name, "' needs '", ids_name, "' (uint64 or int64, [n]) and '",
                                      rows_name, "' (float32, [n, ", t.dim, "])"));
    }
  }
  for (const ArrayInfo& a : in.arrays()) {
    if (!known.contains(a.name)) problems.push_back(absl::StrCat("'", a.name, "' is no tensor or table of the model"));
  }
  return problems;
}

absl::Status AssignTensors(KVClient& client, ModelFileReader& in) {
  for (size_t t = 0; t < client.model().tensors.size(); ++t) {
    const TensorSpec& spec = client.model().tensors[t];
    std::vector<float> values(spec.NumElements());  // checked: the file's array has this many floats
    PS_RETURN_IF_ERROR(in.ReadRange(spec.name, 0, {reinterpret_cast<char*>(values.data()), values.size() * 4}));
    const ConstTensorBuffer buffer{static_cast<int>(t), values};
    PS_RETURN_IF_ERROR(client.Wait(client.Assign({&buffer, 1})));
  }
  return absl::OkStatus();
}

absl::Status AssignRows(KVClient& client, ModelFileReader& in) {
  for (size_t t = 0; t < client.model().tables.size(); ++t) {
    const TableSpec& spec = client.model().tables[t];
    const ArrayInfo* ids = in.Find(spec.name + ".ids");
    if (ids == nullptr) continue;
    const uint64_t n = ids->shape[0], dim = static_cast<uint64_t>(spec.dim);
    std::vector<uint64_t> id_part;
    std::vector<float> rows;
    for (uint64_t at = 0; at < n; at += kRowsPerAssign) {
      const uint64_t k = std::min(kRowsPerAssign, n - at);
      id_part.resize(k);
      rows.resize(k * dim);
      PS_RETURN_IF_ERROR(in.ReadRange(ids->name, at * 8, {reinterpret_cast<char*>(id_part.data()), k * 8}));
      PS_RETURN_IF_ERROR(
          in.ReadRange(spec.name + ".rows", at * dim * 4, {reinterpret_cast<char*>(rows.data()), k * dim * 4}));
      const ConstRowBuffer buffer{static_cast<int>(t), id_part, rows};
      PS_RETURN_IF_ERROR(client.Wait(client.Assign({}, {&buffer, 1})));
    }
  }
  return absl::OkStatus();
}

// Reads every array to its end, so that a checksum that does not match (a
// corrupt .npz) is found before anything is sent.
absl::Status ReadThrough(ModelFileReader& in) {
  std::vector<char> buffer(1 << 20);
  for (const ArrayInfo& a : in.arrays()) {
    for (uint64_t at = 0; at < a.bytes; at += buffer.size()) {
      const uint64_t n = std::min<uint64_t>(buffer.size(), a.bytes - at);
      PS_RETURN_IF_ERROR(in.ReadRange(a.name, at, absl::MakeSpan(buffer.data(), n)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelFileReader>> OpenChecked(const ModelSpec& model, const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ModelFileReader> in, ModelFileReader::Open(path));
  const std::vector<std::string> problems = Problems(model, *in);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " does not match the model: ", absl::StrJoin(problems, "; ")));
  }
  PS_RETURN_IF_ERROR(ReadThrough(*in));
  return in;
}

}  // namespace

absl::Status CheckModelFile(const ModelSpec& model, const std::string& path) {
  return OpenChecked(model, path).status();
}

absl::Status StartFromModelFile(KVClient& client, const std::string& path, absl::Duration timeout) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ModelFileReader> in, OpenChecked(client.model(), path));
  PS_ASSIGN_OR_RETURN(const int64_t resume, client.ResumeStep());
  if (resume > 0) return absl::OkStatus();
  if (client.rank() == 0) {
    PS_RETURN_IF_ERROR(AssignTensors(client, *in));
    PS_RETURN_IF_ERROR(AssignRows(client, *in));
  }
  return client.Barrier("ps.init_from", timeout);
}

}  // namespace ps
