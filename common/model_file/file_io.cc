#include "common/model_file/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps::internal {
namespace {

constexpr size_t kBufferBytes = 1 << 20;

}  // namespace

absl::Status Annotate(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

absl::StatusOr<std::unique_ptr<InputFile>> InputFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file at ", path));
    return ErrnoError(errno, "opening", path);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, "stat of", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  return std::unique_ptr<InputFile>(new InputFile(path, fd, static_cast<uint64_t>(st.st_size)));
}

InputFile::~InputFile() { ::close(fd_); }

absl::Status InputFile::ReadAt(uint64_t offset, absl::Span<char> out, absl::string_view what) const {
  if (offset > size_ || out.size() > size_ - offset) {
    return absl::DataLossError(absl::StrCat(path_, ": truncated: ", what, " needs bytes [", offset, ", ",
                                            offset + out.size(), ") but the file has ", size_));
  }
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "reading", path_);
    }
    // The file shrank since Open().
    if (n == 0) return absl::DataLossError(absl::StrCat(path_, ": truncated while reading ", what));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

AtomicOutputFile::AtomicOutputFile(std::string path, std::string dir, int fd)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), dir_(std::move(dir)), fd_(fd) {
  buffer_.reserve(kBufferBytes);
}

absl::StatusOr<std::unique_ptr<AtomicOutputFile>> AtomicOutputFile::Create(const std::string& path) {
  PS_ASSIGN_OR_RETURN(const std::string dir, MakeParentDirectory(path));
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "creating", tmp);
  return std::unique_ptr<AtomicOutputFile>(new AtomicOutputFile(path, dir, fd));
}

AtomicOutputFile::~AtomicOutputFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

absl::Status AtomicOutputFile::WriteOut(uint64_t offset, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "writing", tmp_);
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicOutputFile::Flush() {
  const absl::Status s = WriteOut(position_ - buffer_.size(), buffer_);
  buffer_.clear();
  return s;
}

absl::Status AtomicOutputFile::Write(absl::string_view data) {
  CHECK(!committed_) << "Write after Commit: " << path_;
  if (buffer_.size() + data.size() > kBufferBytes) PS_RETURN_IF_ERROR(Flush());
  if (data.size() >= kBufferBytes) {
    // A big piece goes straight to the file rather than through the buffer.
    PS_RETURN_IF_ERROR(WriteOut(position_, data));
  } else {
    buffer_.append(data.data(), data.size());
  }
  position_ += data.size();
  return absl::OkStatus();
}

absl::Status AtomicOutputFile::WriteAt(uint64_t offset, absl::string_view data) {
  CHECK_LE(offset + data.size(), position_) << "WriteAt past the end of " << tmp_;
  const uint64_t buffered_from = position_ - buffer_.size();
  if (offset >= buffered_from) {
    std::memcpy(buffer_.data() + (offset - buffered_from), data.data(), data.size());
    return absl::OkStatus();
  }
  if (offset + data.size() > buffered_from) PS_RETURN_IF_ERROR(Flush());
  return WriteOut(offset, data);
}

absl::Status AtomicOutputFile::Commit() {
  CHECK(!committed_) << "Commit twice: " << path_;
  PS_RETURN_IF_ERROR(Flush());
  if (::fsync(fd_) != 0) return ErrnoError(errno, "fsync of", tmp_);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return ErrnoError(errno, "closing", tmp_);
  // Until this rename a reader sees the previous file at path_, if any.
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return ErrnoError(errno, "renaming to", path_);
  committed_ = true;
  return FsyncDirectory(dir_);
}

}  // namespace ps::internal
