// The .safetensors writer: the header (every tensor's offsets are known from
// the declared shapes) goes first, then the tensors' bytes as they come.

#include <utility>

#include "common/base/status_macros.h"
#include "common/model_file/safetensors.h"
#include "common/model_file/safetensors_header.h"
#include "common/model_file/streaming_writer.h"

namespace ps::internal {
namespace {

class SafetensorsWriter final : public StreamingWriter {
 public:
  SafetensorsWriter(std::unique_ptr<AtomicOutputFile> file, std::vector<ArraySpec> arrays, std::vector<uint64_t> bytes)
      : StreamingWriter(std::move(file), std::move(arrays), std::move(bytes)) {}
  using StreamingWriter::Start;

 private:
  absl::Status BeginArray(size_t) override { return absl::OkStatus(); }
  absl::Status WriteArrayData(absl::string_view data) override { return file().Write(data); }
  absl::Status EndArray(size_t) override { return absl::OkStatus(); }
  absl::Status Finish() override { return absl::OkStatus(); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFileWriter>> CreateSafetensorsWriter(
    const std::string& path, const std::vector<ArraySpec>& arrays, const std::map<std::string, std::string>& metadata) {
  PS_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes, CheckArraySpecs(path, arrays));
  PS_RETURN_IF_ERROR(CheckSafetensorsNames(path, arrays, bytes, metadata));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<AtomicOutputFile> file, AtomicOutputFile::Create(path));
  PS_RETURN_IF_ERROR(file->Write(EncodeSafetensorsHeader(arrays, bytes, metadata)));
  auto writer = std::make_unique<SafetensorsWriter>(std::move(file), arrays, std::move(bytes));
  PS_RETURN_IF_ERROR(writer->Start());
  return writer;
}

}  // namespace ps::internal
