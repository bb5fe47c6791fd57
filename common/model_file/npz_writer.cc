// The .npz writer: one stored zip entry per array. Every size is known when
// the entry starts (the arrays are declared up front), so the local header
// carries the real sizes and only its CRC-32 is written back once the data
// is through; no data descriptors.

#include <zlib.h>

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"
#include "common/model_file/npy_header.h"
#include "common/model_file/npz.h"
#include "common/model_file/streaming_writer.h"
#include "common/model_file/zip.h"

namespace ps::internal {
namespace {

constexpr absl::string_view kSuffix = ".npy";
constexpr size_t kMaxEntryName = 0xFFFF;

uint32_t Crc(uint32_t crc, absl::string_view data) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

class NpzWriter final : public StreamingWriter {
 public:
  NpzWriter(std::unique_ptr<AtomicOutputFile> file, std::vector<ArraySpec> arrays, std::vector<uint64_t> bytes,
            const NpzWriterOptions& options)
      : StreamingWriter(std::move(file), std::move(arrays), std::move(bytes)), options_(options) {
    directory_.reserve(this->arrays().size());
  }

  using StreamingWriter::Start;

 private:
  absl::Status BeginArray(size_t index) override {
    const ArraySpec& spec = arrays()[index];
    const std::string header = EncodeNpyHeader(spec.dtype, spec.shape);
    ZipEntry entry;
    entry.name = absl::StrCat(spec.name, kSuffix);
    entry.uncompressed_size = header.size() + bytes(index);
    entry.compressed_size = entry.uncompressed_size;
    entry.header_offset = file().position();
    PS_RETURN_IF_ERROR(
        file().Write(ZipLocalHeader(entry, options_.force_zip64 || entry.uncompressed_size >= kZip64Threshold)));
    PS_RETURN_IF_ERROR(file().Write(header));
    crc_ = Crc(Crc(0, {}), header);
    directory_.push_back(std::move(entry));
    return absl::OkStatus();
  }

  absl::Status WriteArrayData(absl::string_view data) override {
    crc_ = Crc(crc_, data);
    return file().Write(data);
  }

  absl::Status EndArray(size_t index) override {
    ZipEntry& entry = directory_[index];
    entry.crc = crc_;
    std::string crc;
    PutRaw<uint32_t>(&crc, crc_);
    return file().WriteAt(entry.header_offset + kLocalHeaderCrcOffset, crc);
  }

  absl::Status Finish() override {
    const uint64_t directory_offset = file().position();
    for (const ZipEntry& entry : directory_) {
      PS_RETURN_IF_ERROR(file().Write(ZipCentralHeader(entry, options_.force_zip64)));
    }
    const uint64_t directory_size = file().position() - directory_offset;
    return file().Write(ZipEndRecords(directory_.size(), directory_offset, directory_size, options_.force_zip64));
  }

  const NpzWriterOptions options_;
  std::vector<ZipEntry> directory_;  // one per array begun
  uint32_t crc_ = 0;                 // of the entry being written
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFileWriter>> CreateNpzWriter(const std::string& path,
                                                                 const std::vector<ArraySpec>& arrays,
                                                                 const NpzWriterOptions& options) {
  PS_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes, CheckArraySpecs(path, arrays));
  for (const ArraySpec& a : arrays) {
    if (a.name.size() + kSuffix.size() > kMaxEntryName) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": array name '", absl::CHexEscape(a.name.substr(0, 40)),
                                                     "...' of ", a.name.size(), " bytes is too long for a zip entry (",
                                                     kMaxEntryName - kSuffix.size(), " at most)"));
    }
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<AtomicOutputFile> file, AtomicOutputFile::Create(path));
  auto writer = std::make_unique<NpzWriter>(std::move(file), arrays, std::move(bytes), options);
  PS_RETURN_IF_ERROR(writer->Start());
  return writer;
}

}  // namespace ps::internal
