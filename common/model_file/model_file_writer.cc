#include "common/model_file/model_file_writer.h"

#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/model_file/npz.h"
#include "common/model_file/safetensors.h"

namespace ps {

absl::StatusOr<std::unique_ptr<ModelFileWriter>> ModelFileWriter::Create(
    const std::string& path, const std::vector<ArraySpec>& arrays, const std::map<std::string, std::string>& metadata) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension == ".safetensors") return internal::CreateSafetensorsWriter(path, arrays, metadata);
  if (extension == ".npz") {
    if (!metadata.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": an .npz has no place for metadata (", metadata.size(), " keys given)"));
    }
    return internal::CreateNpzWriter(path, arrays);
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": unknown model file extension '", absl::CHexEscape(extension),
                                                 "' (expected .npz or .safetensors)"));
}

}  // namespace ps
