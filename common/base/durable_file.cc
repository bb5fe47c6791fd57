#include "common/base/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/file_errors.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"

namespace ps {
namespace {

// Closes the descriptor it holds when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error close() gives (a deferred write error).
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

uint32_t Crc(uint32_t crc, absl::string_view data) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

// A large body is checksummed and written in pieces of this size, with the
// caller's `between` after each (a server's heartbeats go on meanwhile).
constexpr size_t kPieceBytes = size_t{64} << 20;

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), std::min(data.size(), kPieceBytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "writing", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Reads exactly out->size() bytes from `offset`; kDataLoss if the file ends first.
absl::Status ReadAll(int fd, uint64_t offset, std::string* out, const std::string& path) {
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = ::pread(fd, out->data() + done, out->size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "reading", path);
    }
    if (n == 0) return absl::DataLossError(absl::StrCat(path, ": truncated: the file ended while reading it"));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Writes the pieces into `tmp` and makes them durable.
absl::Status WriteFile(const std::string& tmp, const std::vector<absl::string_view>& pieces,
                       absl::FunctionRef<void()> between) {
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoError(errno, "creating", tmp);
  for (absl::string_view piece : pieces) {
    for (size_t at = 0; at < piece.size(); at += kPieceBytes) {
      PS_RETURN_IF_ERROR(WriteAll(fd.get(), piece.substr(at, kPieceBytes), tmp));
      between();
    }
  }
  if (::fsync(fd.get()) != 0) return ErrnoError(errno, "fsync of", tmp);
  if (fd.Close() != 0) return ErrnoError(errno, "closing", tmp);
  return absl::OkStatus();
}

// The header fields after the magic, checked against the file's real size:
// the body's length.
absl::StatusOr<uint64_t> CheckHeader(absl::string_view header, uint64_t file_size, const std::string& path,
                                     const FrameKind& kind, uint32_t* format, uint32_t* crc) {
  if (header.substr(0, kind.magic.size()) != kind.magic) {
    return absl::DataLossError(absl::StrCat(path, ": bad magic: not a ", kind.name));
  }
  header.remove_prefix(kind.magic.size());
  *format = TakeRaw<uint32_t>(&header);
  const uint64_t length = TakeRaw<uint64_t>(&header);
  *crc = TakeRaw<uint32_t>(&header);
  if (*format < kind.min_format || *format > kind.max_format) {
    return absl::DataLossError(absl::StrCat(path, ": ", kind.name, " format version ", *format,
                                            "; this build reads versions ", kind.min_format, " to ", kind.max_format));
  }
  const uint64_t available = file_size - kFramedHeaderBytes;
  if (length > available) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: the header promises a body of ", length,
                                            " bytes, the file holds ", available));
  }
  if (length < available) {
    return absl::DataLossError(absl::StrCat(path, ": ", available - length, " trailing bytes after the body"));
  }
  return length;
}

}  // namespace

absl::Status WriteFramedFile(const std::string& path, const FrameKind& kind, uint32_t format,
                             std::initializer_list<absl::string_view> body, uint64_t* bytes,
                             absl::FunctionRef<void()> between) {
  uint64_t length = 0;
  uint32_t crc = Crc(0, {});
  for (absl::string_view piece : body) {
    length += piece.size();
    for (size_t at = 0; at < piece.size(); at += kPieceBytes) {
      crc = Crc(crc, piece.substr(at, kPieceBytes));
      between();
    }
  }
  std::string header(kind.magic);
  PutRaw<uint32_t>(&header, format);
  PutRaw<uint64_t>(&header, length);
  PutRaw<uint32_t>(&header, crc);
  std::vector<absl::string_view> pieces = {header};
  pieces.insert(pieces.end(), body.begin(), body.end());

  PS_ASSIGN_OR_RETURN(const std::string dir, MakeParentDirectory(path));
  const std::string tmp = path + ".tmp";
  absl::Status s = WriteFile(tmp, pieces, between);
  // Until this rename the previous file is the one a reader sees.
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError(errno, "renaming to", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  PS_RETURN_IF_ERROR(FsyncDirectory(dir));
  if (bytes != nullptr) *bytes = kFramedHeaderBytes + length;
  return absl::OkStatus();
}

absl::StatusOr<FramedRecord> ReadFramedFile(const std::string& path, const FrameKind& kind) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no ", kind.name, " at ", path));
    return ErrnoError(errno, "opening", path);
  }
  PS_ASSIGN_OR_RETURN(const FramedHeader header, ReadFramedHeader(fd.get(), path, kind));
  FramedRecord record;
  record.format = header.format;
  record.body.assign(header.body_bytes, '\0');  // no more than the file's real size
  PS_RETURN_IF_ERROR(ReadAll(fd.get(), kFramedHeaderBytes, &record.body, path));
  const uint32_t actual = Crc(Crc(0, {}), record.body);
  if (actual != header.crc) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (header says ", header.crc, ", body has ",
                                            actual, "): the file is corrupt"));
  }
  return record;
}

absl::StatusOr<FramedHeader> ReadFramedHeader(int fd, const std::string& path, const FrameKind& kind) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, "stat of", path);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kFramedHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", file_size, " bytes, shorter than the ",
                                            kFramedHeaderBytes, "-byte header"));
  }
  std::string bytes(kFramedHeaderBytes, '\0');
  PS_RETURN_IF_ERROR(ReadAll(fd, 0, &bytes, path));
  FramedHeader header;
  PS_ASSIGN_OR_RETURN(header.body_bytes, CheckHeader(bytes, file_size, path, kind, &header.format, &header.crc));
  return header;
}

}  // namespace ps
