#include "server/store/checkpoint.h"

#include <dirent.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/durable_file.h"
#include "common/base/status_macros.h"
#include "server/store/checkpoint_codec.h"

namespace ps {
namespace {

absl::StatusOr<CheckpointInfo> Load(const std::string& path, int rank, SliceStore* store) {
  // Read in place (not moved out of the StatusOr): g++ 12 then sees that the
  // body it parses is initialised.
  const absl::StatusOr<FramedRecord> record = ReadFramedFile(path, kCheckpointFile);
  if (!record.ok()) return record.status();
  absl::string_view rest = record->body;
  absl::StatusOr<CheckpointInfo> info = DecodeCheckpointInfo(record->format, &rest);
  if (!info.ok()) return absl::DataLossError(absl::StrCat(path, ": ", info.status().message()));
  if (info->server_rank != rank) {
    return absl::DataLossError(
        absl::StrCat(path, " holds the checkpoint of server ", info->server_rank, ", not of server ", rank));
  }
  if (absl::Status s = DecodeStore(rest, store); !s.ok()) {
    const absl::StatusCode code =
        s.code() == absl::StatusCode::kResourceExhausted ? s.code() : absl::StatusCode::kDataLoss;
    return absl::Status(code, absl::StrCat(path, ": ", s.message()));
  }
  return info;
}

}  // namespace

std::string TableSnapshotPath(const std::string& dir, int rank, uint64_t number) {
  return absl::StrCat(dir, "/server-", rank, ".tables/", number);
}

std::string CheckpointPath(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / absl::StrCat("server-", rank, ".ckpt")).string();
}

absl::StatusOr<EncodedCheckpoint> EncodeCheckpoint(const CheckpointInfo& info, const SliceStore& store,
                                                   absl::FunctionRef<void()> between) {
  if (info.server_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint for server rank ", info.server_rank));
  }
  EncodedCheckpoint out;
  out.server_rank = info.server_rank;
  PS_RETURN_IF_ERROR(EncodeStore(store, &out.state, between));
  out.meta = EncodeCheckpointInfo(info);
  return out;
}

absl::Status WriteEncodedCheckpoint(const std::string& dir, const EncodedCheckpoint& encoded, uint64_t* bytes,
                                    absl::FunctionRef<void()> between) {
  return WriteFramedFile(CheckpointPath(dir.empty() ? "." : dir, encoded.server_rank), kCheckpointFile,
                         kCheckpointFormat, {encoded.meta, encoded.state}, bytes, between);
}

absl::Status WriteCheckpoint(const std::string& dir, const CheckpointInfo& info, const SliceStore& store,
                             uint64_t* bytes, absl::FunctionRef<void()> between) {
  PS_ASSIGN_OR_RETURN(const EncodedCheckpoint encoded, EncodeCheckpoint(info, store, between));
  return WriteEncodedCheckpoint(dir, encoded, bytes, between);
}

absl::StatusOr<int> OnlyCheckpointRank(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("restore_dir ", dir, ": ", std::strerror(errno)));
  std::vector<int> ranks;
  while (dirent* e = readdir(d)) {
    int rank = -1;
    char tail = 0;
    if (std::sscanf(e->d_name, "server-%d.ckp%c", &rank, &tail) == 2 && tail == 't' &&
        CheckpointPath(dir, rank) == absl::StrCat(dir, "/", e->d_name)) {
      ranks.push_back(rank);
    }
  }
  closedir(d);
  if (ranks.empty()) return absl::NotFoundError(absl::StrCat("restore_dir ", dir, " holds no server-<rank>.ckpt"));
  if (ranks.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("restore_dir ", dir, " holds checkpoints of ", ranks.size(),
                                                   " servers; name the one to restore with --rank"));
  }
  return ranks[0];
}

absl::StatusOr<CheckpointInfo> LoadCheckpoint(const std::string& dir, int rank, SliceStore* store) {
  if (store->has_model()) {
    return absl::FailedPreconditionError("cannot load a checkpoint into a server that already holds a model");
  }
  return Load(CheckpointPath(dir, rank), rank, store);
}

}  // namespace ps
