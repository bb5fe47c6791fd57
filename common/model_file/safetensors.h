#ifndef PS_COMMON_MODEL_FILE_SAFETENSORS_H_
#define PS_COMMON_MODEL_FILE_SAFETENSORS_H_

// Internal to common/model_file: the .safetensors writer and reader behind
// ModelFileWriter::Create and ModelFileReader::Open (whose headers give the
// contracts).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_file/array_spec.h"
#include "common/model_file/model_file_reader.h"
#include "common/model_file/model_file_writer.h"

namespace ps::internal {

absl::StatusOr<std::unique_ptr<ModelFileWriter>> CreateSafetensorsWriter(
    const std::string& path, const std::vector<ArraySpec>& arrays, const std::map<std::string, std::string>& metadata);

absl::StatusOr<std::unique_ptr<ModelFileReader>> OpenSafetensorsReader(const std::string& path);

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_SAFETENSORS_H_
