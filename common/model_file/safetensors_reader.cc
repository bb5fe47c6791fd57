// The .safetensors reader: the header is parsed and checked once, then each
// read is one pread, with no state to guard.

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"
#include "common/model_file/array_index.h"
#include "common/model_file/file_io.h"
#include "common/model_file/safetensors.h"
#include "common/model_file/safetensors_header.h"

namespace ps::internal {
namespace {

class SafetensorsReader final : public ModelFileReader {
 public:
  SafetensorsReader(std::unique_ptr<InputFile> file, uint64_t data_offset, SafetensorsLayout layout)
      : file_(std::move(file)),
        data_offset_(data_offset),
        begins_(std::move(layout.begins)),
        metadata_(std::move(layout.metadata)) {
    for (ArrayInfo& info : layout.arrays) index_.Add(std::move(info));  // names are unique: the parser checked
  }

  const std::vector<ArrayInfo>& arrays() const override { return index_.arrays(); }
  const ArrayInfo* Find(absl::string_view name) const override { return index_.Find(name); }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }

  absl::Status ReadRange(absl::string_view name, uint64_t byte_offset, absl::Span<char> out) override {
    PS_ASSIGN_OR_RETURN(const size_t i, index_.Locate(file_->path(), name, byte_offset, out.size()));
    return file_->ReadAt(data_offset_ + begins_[i] + byte_offset, out, absl::StrCat("tensor '", name, "'"));
  }

 private:
  const std::unique_ptr<InputFile> file_;
  const uint64_t data_offset_;  // 8 + the header's length
  const std::vector<uint64_t> begins_;
  const std::map<std::string, std::string> metadata_;
  ArrayIndex index_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFileReader>> OpenSafetensorsReader(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> file, InputFile::Open(path));
  if (file->size() < 8) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated: ", file->size(), " bytes, fewer than the 8-byte header length"));
  }
  char raw[8];
  PS_RETURN_IF_ERROR(file->ReadAt(0, absl::MakeSpan(raw), "the header length"));
  absl::string_view in(raw, 8);
  const uint64_t length = TakeRaw<uint64_t>(&in);
  if (length > kMaxSafetensorsHeader) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", length, " is over the ", kMaxSafetensorsHeader,
                                            " bytes this build reads: not a safetensors file?"));
  }
  if (length > file->size() - 8) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: the header needs ", length, " bytes, the file has ",
                                            file->size() - 8, " after the length"));
  }
  std::string json(length, '\0');
  PS_RETURN_IF_ERROR(file->ReadAt(8, absl::MakeSpan(json), "the header"));
  absl::StatusOr<SafetensorsLayout> layout = ParseSafetensorsHeader(json, file->size() - 8 - length);
  if (!layout.ok()) return Annotate(layout.status(), absl::StrCat(path, ": "));
  return std::make_unique<SafetensorsReader>(std::move(file), 8 + length, *std::move(layout));
}

}  // namespace ps::internal
