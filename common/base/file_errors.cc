#include "common/base/file_errors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status ErrnoError(int err, absl::string_view what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(what, " ", path, ": ", std::generic_category().message(err)));
}

absl::StatusOr<std::string> MakeParentDirectory(const std::string& path) {
  const std::filesystem::path file(path);
  const std::string dir = file.has_parent_path() ? file.parent_path().string() : ".";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoError(ec.value(), "creating directory", dir);
  return dir;
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "opening directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError(err, "fsync of directory", dir);
  return absl::OkStatus();
}

}  // namespace ps
