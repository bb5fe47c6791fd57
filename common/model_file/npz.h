#ifndef PS_COMMON_MODEL_FILE_NPZ_H_
#define PS_COMMON_MODEL_FILE_NPZ_H_

// Internal to common/model_file: the .npz writer and reader behind
// ModelFileWriter::Create and ModelFileReader::Open (whose headers give the
// contracts). Tests include this header for the options.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_file/array_spec.h"
#include "common/model_file/model_file_reader.h"
#include "common/model_file/model_file_writer.h"

namespace ps::internal {

struct NpzWriterOptions {
  // ZIP64 extra fields on every entry and ZIP64 end records, as if every
  // size and offset overflowed: lets a test check the ZIP64 layout against
  // numpy without writing 4 GiB.
  bool force_zip64 = false;
};

absl::StatusOr<std::unique_ptr<ModelFileWriter>> CreateNpzWriter(const std::string& path,
                                                                 const std::vector<ArraySpec>& arrays,
                                                                 const NpzWriterOptions& options = {});

absl::StatusOr<std::unique_ptr<ModelFileReader>> OpenNpzReader(const std::string& path);

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_NPZ_H_
