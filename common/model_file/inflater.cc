#include "common/model_file/inflater.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps::internal {
namespace {

constexpr size_t kChunk = 256 << 10;

}  // namespace

absl::StatusOr<std::unique_ptr<Inflater>> Inflater::Start(const InputFile* file, const ZipEntry* entry) {
  std::unique_ptr<Inflater> inflater(new Inflater(file, entry));
  // Negative window bits: a raw deflate stream, as zip stores it.
  const int rc = inflateInit2(&inflater->stream_, -MAX_WBITS);
  if (rc != Z_OK) return absl::InternalError(absl::StrCat("inflateInit2 failed: ", rc));
  inflater->started_ = true;
  return inflater;
}

Inflater::~Inflater() {
  if (started_) inflateEnd(&stream_);
}

absl::Status Inflater::Error(absl::string_view what) const {
  return absl::DataLossError(
      absl::StrCat(file_->path(), ": entry '", absl::CHexEscape(entry_->name), "' (deflated): ", what));
}

absl::Status Inflater::Refill() {
  const uint64_t n = std::min<uint64_t>(kChunk, entry_->compressed_size - consumed_);
  input_.resize(n);
  PS_RETURN_IF_ERROR(file_->ReadAt(entry_->data_offset + consumed_, absl::MakeSpan(input_), "deflated data"));
  consumed_ += n;
  stream_.next_in = reinterpret_cast<Bytef*>(input_.data());
  stream_.avail_in = static_cast<uInt>(n);
  return absl::OkStatus();
}

// One inflate() call into out[0, n), n <= kChunk.
absl::Status Inflater::Step(char* out, size_t n, size_t* produced) {
  if (stream_.avail_in == 0 && consumed_ < entry_->compressed_size) PS_RETURN_IF_ERROR(Refill());
  stream_.next_out = reinterpret_cast<Bytef*>(out);
  stream_.avail_out = static_cast<uInt>(n);
  const int rc = inflate(&stream_, Z_NO_FLUSH);
  *produced = n - stream_.avail_out;
  crc_ = static_cast<uint32_t>(crc32_z(crc_, reinterpret_cast<const Bytef*>(out), *produced));
  if (rc == Z_STREAM_END) {
    ended_ = true;
    return absl::OkStatus();
  }
  if (rc == Z_OK) return absl::OkStatus();
  if (rc == Z_BUF_ERROR && stream_.avail_in == 0 && consumed_ == entry_->compressed_size) {
    return Error(absl::StrCat("the compressed data (", entry_->compressed_size, " bytes) ends inside the stream"));
  }
  return Error(absl::StrCat("corrupt deflate data: ", stream_.msg != nullptr ? stream_.msg : "", " (zlib ", rc, ")"));
}

// Inflates exactly n bytes into out, or drops them when out is null.
absl::Status Inflater::Produce(char* out, uint64_t n) {
  std::string scratch(out == nullptr ? std::min<uint64_t>(n, kChunk) : 0, '\0');
  uint64_t done = 0;
  while (done < n) {
    if (ended_) {
      return Error(absl::StrCat("the deflate stream ends after ", position_, " bytes; the directory says ",
                                entry_->uncompressed_size));
    }
    const size_t want = std::min<uint64_t>(n - done, kChunk);
    char* target = out == nullptr ? scratch.data() : out + done;
    size_t produced = 0;
    PS_RETURN_IF_ERROR(Step(target, want, &produced));
    done += produced;
    position_ += produced;
  }
  return absl::OkStatus();
}

absl::Status Inflater::CheckEnd() {
  char extra = 0;
  while (!ended_) {
    size_t produced = 0;
    PS_RETURN_IF_ERROR(Step(&extra, 1, &produced));
    if (produced > 0) {
      return Error(absl::StrCat("the deflate stream holds more than the ", entry_->uncompressed_size,
                                " bytes the directory says"));
    }
  }
  const uint64_t unused = stream_.avail_in + (entry_->compressed_size - consumed_);
  if (unused != 0) return Error(absl::StrCat(unused, " compressed bytes after the end of the deflate stream"));
  if (crc_ != entry_->crc) {
    return Error(absl::StrFormat("CRC-32 mismatch: the directory says %08x, the data has %08x", entry_->crc, crc_));
  }
  return absl::OkStatus();
}

absl::Status Inflater::Read(uint64_t offset, absl::Span<char> out) {
  CHECK_LE(position_, offset);
  CHECK_LE(offset + out.size(), entry_->uncompressed_size);
  PS_RETURN_IF_ERROR(Produce(nullptr, offset - position_));
  PS_RETURN_IF_ERROR(Produce(out.data(), out.size()));
  if (position_ == entry_->uncompressed_size) return CheckEnd();
  return absl::OkStatus();
}

}  // namespace ps::internal
