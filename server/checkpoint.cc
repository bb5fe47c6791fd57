#include "server/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace ps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoints are raw little-endian; add byte swapping for this host");

constexpr char kMagic[8] = {'P', 'S', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 4;
constexpr size_t kSeqBytes = 4 + 4 + 8;

absl::Status ErrnoError(int err, absl::string_view what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(what, " ", path, ": ", std::generic_category().message(err)));
}

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

template <typename T>
void Put(std::string* out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T Take(absl::string_view* in) {  // requires in->size() >= sizeof(T)
  T v;
  std::memcpy(&v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return v;
}

uint32_t Crc(uint32_t crc, absl::string_view data) {
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

std::string EncodeInfo(const CheckpointInfo& info) {
  std::string out;
  out.reserve(4 + 8 + 8 + 4 + info.seqs.size() * kSeqBytes);
  Put<int32_t>(&out, info.server_rank);
  Put<uint64_t>(&out, info.number);
  Put<int64_t>(&out, info.unix_ms);
  Put<uint32_t>(&out, static_cast<uint32_t>(info.seqs.size()));
  for (const WorkerSeq& s : info.seqs) {
    Put<int32_t>(&out, s.rank);
    Put<uint32_t>(&out, s.node_id);
    Put<uint64_t>(&out, s.last_seq);
  }
  return out;
}

// Parses the info at the front of `body` and leaves the store's part in it.
absl::StatusOr<CheckpointInfo> DecodeInfo(absl::string_view* body) {
  if (body->size() < 4 + 8 + 8 + 4) return absl::DataLossError("body too short for its info");
  CheckpointInfo info;
  info.server_rank = Take<int32_t>(body);
  info.number = Take<uint64_t>(body);
  info.unix_ms = Take<int64_t>(body);
  const uint32_t n = Take<uint32_t>(body);
  if (n > body->size() / kSeqBytes) {
    return absl::DataLossError(absl::StrCat("body too short for its ", n, " worker sequence numbers"));
  }
  info.seqs.resize(n);
  for (WorkerSeq& s : info.seqs) {
    s.rank = Take<int32_t>(body);
    s.node_id = Take<uint32_t>(body);
    s.last_seq = Take<uint64_t>(body);
  }
  return info;
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
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
    const ssize_t n = ::pread(fd, out->data() + done, out->size() - done,
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "reading", path);
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path, ": truncated: the file ended while reading it"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FsyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "opening directory", dir);
  if (::fsync(fd.get()) != 0) return ErrnoError(errno, "fsync of directory", dir);
  return absl::OkStatus();
}

// Writes the pieces into `tmp` and makes them durable.
absl::Status WriteFile(const std::string& tmp, std::initializer_list<absl::string_view> pieces) {
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoError(errno, "creating", tmp);
  for (absl::string_view piece : pieces) PS_RETURN_IF_ERROR(WriteAll(fd.get(), piece, tmp));
  if (::fsync(fd.get()) != 0) return ErrnoError(errno, "fsync of", tmp);
  if (fd.Close() != 0) return ErrnoError(errno, "closing", tmp);
  return absl::OkStatus();
}

// The header fields after the magic, checked against the file's real size.
absl::StatusOr<uint64_t> CheckHeader(absl::string_view header, uint64_t file_size,
                                     const std::string& path, uint32_t* crc) {
  if (header.substr(0, sizeof(kMagic)) != absl::string_view(kMagic, sizeof(kMagic))) {
    return absl::DataLossError(absl::StrCat(path, ": bad magic: not a parameter-server checkpoint"));
  }
  header.remove_prefix(sizeof(kMagic));
  const uint32_t format = Take<uint32_t>(&header);
  const uint64_t length = Take<uint64_t>(&header);
  *crc = Take<uint32_t>(&header);
  if (format != kCheckpointFormat) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint format version ", format,
                                            "; this build reads version ", kCheckpointFormat));
  }
  const uint64_t available = file_size - kHeaderBytes;
  if (length > available) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: the header promises a body of ",
                                            length, " bytes, the file holds ", available));
  }
  if (length < available) {
    return absl::DataLossError(absl::StrCat(path, ": ", available - length,
                                            " trailing bytes after the body"));
  }
  return length;
}

absl::StatusOr<CheckpointInfo> Load(const std::string& path, int rank, SliceStore* store) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no checkpoint at ", path));
    return ErrnoError(errno, "opening", path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "stat of", path);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", file_size,
                                            " bytes, shorter than the ", kHeaderBytes,
                                            "-byte header"));
  }
  std::string header(kHeaderBytes, '\0');
  PS_RETURN_IF_ERROR(ReadAll(fd.get(), 0, &header, path));
  uint32_t crc = 0;
  PS_ASSIGN_OR_RETURN(const uint64_t length, CheckHeader(header, file_size, path, &crc));
  std::string body(length, '\0');  // length <= the file's real size
  PS_RETURN_IF_ERROR(ReadAll(fd.get(), kHeaderBytes, &body, path));
  const uint32_t actual = Crc(crc32_z(0, nullptr, 0), body);
  if (actual != crc) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (header says ", crc,
                                            ", body has ", actual, "): the file is corrupt"));
  }
  absl::string_view rest = body;
  absl::StatusOr<CheckpointInfo> info = DecodeInfo(&rest);
  if (!info.ok()) return absl::DataLossError(absl::StrCat(path, ": ", info.status().message()));
  if (info->server_rank != rank) {
    return absl::DataLossError(absl::StrCat(path, " holds the checkpoint of server ",
                                            info->server_rank, ", not of server ", rank));
  }
  if (absl::Status s = store->Restore(rest); !s.ok()) {
    const absl::StatusCode code = s.code() == absl::StatusCode::kResourceExhausted
                                      ? s.code()
                                      : absl::StatusCode::kDataLoss;
    return absl::Status(code, absl::StrCat(path, ": ", s.message()));
  }
  return info;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / absl::StrCat("server-", rank, ".ckpt")).string();
}

absl::Status WriteCheckpoint(const std::string& dir, const CheckpointInfo& info,
                             const SliceStore& store, uint64_t* bytes) {
  if (info.server_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint for server rank ", info.server_rank));
  }
  std::string state;
  PS_RETURN_IF_ERROR(store.Serialize(&state));
  const std::string meta = EncodeInfo(info);
  const uint64_t length = meta.size() + state.size();
  std::string header(kMagic, sizeof(kMagic));
  Put<uint32_t>(&header, kCheckpointFormat);
  Put<uint64_t>(&header, length);
  Put<uint32_t>(&header, Crc(Crc(crc32_z(0, nullptr, 0), meta), state));

  std::error_code ec;
  std::filesystem::create_directories(dir.empty() ? "." : dir, ec);
  if (ec) return ErrnoError(ec.value(), "creating checkpoint directory", dir);
  const std::string path = CheckpointPath(dir, info.server_rank);
  const std::string tmp = path + ".tmp";
  absl::Status s = WriteFile(tmp, {header, meta, state});
  // Until this rename the previous checkpoint is the one a restart loads.
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError(errno, "renaming to", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  PS_RETURN_IF_ERROR(FsyncDir(dir.empty() ? "." : dir));
  if (bytes != nullptr) *bytes = kHeaderBytes + length;
  return absl::OkStatus();
}

absl::StatusOr<CheckpointInfo> LoadCheckpoint(const std::string& dir, int rank, SliceStore* store) {
  if (store->has_model()) {
    return absl::FailedPreconditionError(
        "cannot load a checkpoint into a server that already holds a model");
  }
  return Load(CheckpointPath(dir, rank), rank, store);
}

}  // namespace ps
