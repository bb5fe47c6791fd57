#include "common/model_file/model_file_reader.h"

#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/model_file/npz.h"
#include "common/model_file/safetensors.h"

namespace ps {

absl::StatusOr<std::unique_ptr<ModelFileReader>> ModelFileReader::Open(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension == ".npz") return internal::OpenNpzReader(path);
  if (extension == ".safetensors") return internal::OpenSafetensorsReader(path);
  return absl::InvalidArgumentError(absl::StrCat(path, ": unknown model file extension '", absl::CHexEscape(extension),
                                                 "' (expected .npz or .safetensors)"));
}

absl::StatusOr<std::string> ModelFileReader::ReadAll(absl::string_view name) {
  const ArrayInfo* info = Find(name);
  // ReadRange gives the kNotFound.
  std::string out(info == nullptr ? 0 : info->bytes, '\0');
  PS_RETURN_IF_ERROR(ReadRange(name, 0, absl::MakeSpan(out)));
  return out;
}

}  // namespace ps
