#include "common/model_file/streaming_writer.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps::internal {

absl::StatusOr<std::vector<uint64_t>> CheckArraySpecs(const std::string& path, const std::vector<ArraySpec>& arrays) {
  std::vector<uint64_t> bytes;
  bytes.reserve(arrays.size());
  absl::flat_hash_set<absl::string_view> names;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const ArraySpec& a = arrays[i];
    if (a.name.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": array ", i, " has an empty name"));
    if (!names.insert(a.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": two arrays named '", absl::CHexEscape(a.name), "'"));
    }
    const std::optional<uint64_t> size = ArrayByteSize(a.dtype, a.shape);
    if (!size) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": array '", absl::CHexEscape(a.name),
                                                     "': ", DTypeName(a.dtype), " shape ", ShapeString(a.shape),
                                                     " is too big (over 2^63 bytes or ", kMaxRank, " dimensions)"));
    }
    bytes.push_back(*size);
  }
  return bytes;
}

StreamingWriter::StreamingWriter(std::unique_ptr<AtomicOutputFile> file, std::vector<ArraySpec> arrays,
                                 std::vector<uint64_t> bytes)
    : file_(std::move(file)), path_(file_->path()), arrays_(std::move(arrays)), bytes_(std::move(bytes)) {}

absl::Status StreamingWriter::Start() {
  if (arrays_.empty()) return absl::OkStatus();
  if (absl::Status s = BeginArray(0); !s.ok()) return Fail(s);
  return Advance();
}

absl::Status StreamingWriter::Advance() {
  while (current_ < arrays_.size() && written_ == bytes_[current_]) {
    if (absl::Status s = EndArray(current_); !s.ok()) return Fail(s);
    ++current_;
    written_ = 0;
    if (current_ == arrays_.size()) break;
    if (absl::Status s = BeginArray(current_); !s.ok()) return Fail(s);
  }
  return absl::OkStatus();
}

absl::Status StreamingWriter::Fail(absl::Status status) {
  failure_ = status;
  file_.reset();
  return status;
}

absl::Status StreamingWriter::CheckUsable() const {
  if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": the writer is closed"));
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": an earlier write failed: ", failure_.message()));
  }
  return absl::OkStatus();
}

absl::Status StreamingWriter::Append(absl::string_view data) {
  PS_RETURN_IF_ERROR(CheckUsable());
  if (data.size() > remaining()) {
    if (current_ == arrays_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": ", data.size(), " bytes appended after every array is complete"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path_, ": array '", absl::CHexEscape(arrays_[current_].name),
                                                   "' needs ", remaining(), " more bytes; got ", data.size()));
  }
  if (data.empty()) return absl::OkStatus();
  if (absl::Status s = WriteArrayData(data); !s.ok()) return Fail(s);
  written_ += data.size();
  return Advance();
}

absl::Status StreamingWriter::Close() {
  PS_RETURN_IF_ERROR(CheckUsable());
  if (current_ < arrays_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": array '", absl::CHexEscape(arrays_[current_].name),
                                                      "' (", current_ + 1, " of ", arrays_.size(), ") has ", written_,
                                                      " of its ", bytes_[current_], " bytes"));
  }
  if (absl::Status s = Finish(); !s.ok()) return Fail(s);
  if (absl::Status s = file_->Commit(); !s.ok()) return Fail(s);
  file_.reset();
  closed_ = true;
  return absl::OkStatus();
}

}  // namespace ps::internal
