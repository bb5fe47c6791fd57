#include "worker/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"

namespace ps {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr uint32_t kMaxCount = uint32_t{1} << 20;
constexpr uint32_t kMaxSide = uint32_t{1} << 12;
constexpr int kNumClasses = 10;
constexpr size_t kChunkBytes = size_t{1} << 20;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// One open IDX file, gzip or plain (gzread passes plain files through).
// Every error it returns names the file. Not thread-safe.
class IdxReader {
 public:
  static absl::StatusOr<IdxReader> Open(const std::string& path);

  // Reads the magic number and `dims` 32-bit dimensions that follow it.
  absl::StatusOr<std::vector<uint32_t>> ReadHeader(uint32_t magic, int dims);

  // Reads exactly `n` bytes of `what`, handing them to `sink` a chunk at a
  // time, then requires end of file.
  template <typename Sink>
  absl::Status ReadPayload(uint64_t n, const char* what, Sink&& sink);

  absl::Status DataLoss(absl::string_view msg) const {
    return absl::DataLossError(absl::StrCat("file ", path_, ": ", msg));
  }
  absl::Status Invalid(absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("file ", path_, ": ", msg));
  }

 private:
  IdxReader(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  // Reads up to `n` bytes; fewer only at end of file.
  absl::StatusOr<size_t> Read(uint8_t* out, size_t n);
  absl::Status CheckGzError() const;

  std::string path_;
  std::unique_ptr<gzFile_s, GzCloser> file_;
};

absl::StatusOr<IdxReader> IdxReader::Open(const std::string& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    const std::string msg = absl::StrCat("file ", path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnknownError(msg);
  }
  gzbuffer(file, 1 << 17);
  return IdxReader(path, file);
}

absl::Status IdxReader::CheckGzError() const {
  int code = Z_OK;
  const char* msg = gzerror(file_.get(), &code);
  if (code == Z_OK) return absl::OkStatus();
  if (code == Z_ERRNO) return DataLoss(absl::StrCat("read error: ", std::strerror(errno)));
  // gzread reports a stream cut short as Z_BUF_ERROR ("unexpected end of
  // file") and bad deflate data or a CRC mismatch as Z_DATA_ERROR.
  const char* kind = code == Z_BUF_ERROR ? "truncated gzip data: " : "corrupt gzip data: ";
  return DataLoss(absl::StrCat(kind, msg));
}

absl::StatusOr<size_t> IdxReader::Read(uint8_t* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    // gzread takes an unsigned length and returns an int.
    const unsigned want = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(file_.get(), out + got, want);
    PS_RETURN_IF_ERROR(CheckGzError());
    if (r < 0) return DataLoss("read failed");
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

absl::StatusOr<std::vector<uint32_t>> IdxReader::ReadHeader(uint32_t magic, int dims) {
  std::array<uint8_t, 16> buf{};
  const size_t size = 4 + 4 * static_cast<size_t>(dims);
  PS_ASSIGN_OR_RETURN(const size_t got, Read(buf.data(), size));
  // The magic comes first so that a short file of the wrong kind reports that.
  if (got >= 4 && BigEndian32(buf.data()) != magic) {
    return DataLoss(absl::StrFormat("bad magic number 0x%08x, expected 0x%08x", BigEndian32(buf.data()), magic));
  }
  if (got < size) {
    return DataLoss(absl::StrCat("truncated: expected ", size, " bytes of header, got ", got));
  }
  std::vector<uint32_t> out;
  for (int i = 0; i < dims; ++i) out.push_back(BigEndian32(buf.data() + 4 + 4 * i));
  return out;
}

template <typename Sink>
absl::Status IdxReader::ReadPayload(uint64_t n, const char* what, Sink&& sink) {
  // Chunked, so memory grows only as data arrives: a header that claims far
  // more than the file holds fails as truncated instead of allocating it.
  std::vector<uint8_t> chunk(std::min<uint64_t>(n, kChunkBytes));
  uint64_t total = 0;
  while (total < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - total, chunk.size()));
    PS_ASSIGN_OR_RETURN(const size_t got, Read(chunk.data(), want));
    PS_RETURN_IF_ERROR(sink(chunk.data(), got, total));
    total += got;
    if (got < want) {
      return DataLoss(absl::StrCat("truncated: expected ", n, " bytes of ", what, ", got ", total));
    }
  }
  // Reading past the end also makes zlib verify the gzip trailer's CRC.
  uint8_t extra = 0;
  PS_ASSIGN_OR_RETURN(const size_t more, Read(&extra, 1));
  if (more != 0) return DataLoss(absl::StrCat("trailing bytes after ", n, " bytes of ", what));
  return absl::OkStatus();
}

absl::Status CheckDim(const IdxReader& reader, const char* name, uint32_t value, uint32_t max) {
  if (value == 0 || value > max) {
    return reader.Invalid(absl::StrCat(name, " ", value, " is outside 1..", max));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> ReadImages(const std::string& path) {
  PS_ASSIGN_OR_RETURN(IdxReader reader, IdxReader::Open(path));
  PS_ASSIGN_OR_RETURN(const std::vector<uint32_t> dims, reader.ReadHeader(kImagesMagic, 3));
  PS_RETURN_IF_ERROR(CheckDim(reader, "image count", dims[0], kMaxCount));
  PS_RETURN_IF_ERROR(CheckDim(reader, "rows", dims[1], kMaxSide));
  PS_RETURN_IF_ERROR(CheckDim(reader, "cols", dims[2], kMaxSide));
  Dataset ds;
  ds.count = dims[0];
  ds.rows = static_cast<int>(dims[1]);
  ds.cols = static_cast<int>(dims[2]);
  const uint64_t n = static_cast<uint64_t>(ds.count) * ds.features();
  // Capped: reserving only claims address space, but a lying header must not
  // claim terabytes of it. 2^26 floats cover Fashion-MNIST's 47M pixels.
  ds.images.reserve(std::min<uint64_t>(n, uint64_t{1} << 26));
  auto sink = [&ds](const uint8_t* p, size_t len, uint64_t offset) {
    ds.images.resize(offset + len);
    std::transform(p, p + len, ds.images.begin() + offset, [](uint8_t x) { return static_cast<float>(x) / 255.0f; });
    return absl::OkStatus();
  };
  PS_RETURN_IF_ERROR(reader.ReadPayload(n, "pixel data", sink));
  return ds;
}

absl::StatusOr<std::vector<int32_t>> ReadLabels(const std::string& path) {
  PS_ASSIGN_OR_RETURN(IdxReader reader, IdxReader::Open(path));
  PS_ASSIGN_OR_RETURN(const std::vector<uint32_t> dims, reader.ReadHeader(kLabelsMagic, 1));
  PS_RETURN_IF_ERROR(CheckDim(reader, "label count", dims[0], kMaxCount));
  std::vector<int32_t> labels;
  labels.reserve(dims[0]);
  auto sink = [&](const uint8_t* p, size_t len, uint64_t offset) {
    for (size_t i = 0; i < len; ++i) {
      if (p[i] >= kNumClasses) {
        return reader.DataLoss(absl::StrCat("label ", static_cast<int>(p[i]), " at index ", offset + i,
                                            " is outside 0..", kNumClasses - 1));
      }
      labels.push_back(p[i]);
    }
    return absl::OkStatus();
  };
  PS_RETURN_IF_ERROR(reader.ReadPayload(dims[0], "label data", sink));
  return labels;
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// `base`.gz if it exists, else `base`.
absl::StatusOr<std::string> FindIdxFile(const std::string& base) {
  const std::string gz = base + ".gz";
  if (Exists(gz)) return gz;
  if (Exists(base)) return base;
  return absl::NotFoundError(absl::StrCat("neither ", gz, " nor ", base, " exists"));
}

}  // namespace

absl::StatusOr<Dataset> ReadIdx(const std::string& images_path, const std::string& labels_path) {
  PS_ASSIGN_OR_RETURN(Dataset ds, ReadImages(images_path));
  PS_ASSIGN_OR_RETURN(ds.labels, ReadLabels(labels_path));
  if (static_cast<int64_t>(ds.labels.size()) != ds.count) {
    return absl::InvalidArgumentError(absl::StrCat("file ", images_path, " has ", ds.count, " images but file ",
                                                   labels_path, " has ", ds.labels.size(), " labels"));
  }
  return ds;
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "t10k") {
    return absl::InvalidArgumentError(absl::StrCat("unknown split '", split, "', expected 'train' or 't10k'"));
  }
  const std::string prefix = absl::StrCat(dir, "/", split);
  PS_ASSIGN_OR_RETURN(const std::string images, FindIdxFile(prefix + "-images-idx3-ubyte"));
  PS_ASSIGN_OR_RETURN(const std::string labels, FindIdxFile(prefix + "-labels-idx1-ubyte"));
  return ReadIdx(images, labels);
}

}  // namespace ps
