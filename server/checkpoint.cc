#include "server/checkpoint.h"

#include <dirent.h>

#include <cerrno>
#include <cstdio>
#include <vector>
#include <cstring>
#include <filesystem>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/durable_file.h"
#include "common/raw_bytes.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr FrameKind kCheckpointFile{absl::string_view("PSCKPT\r\n", 8), "checkpoint",
                                    /*min_format=*/1, /*max_format=*/kCheckpointFormat};
constexpr size_t kSeqBytes = 4 + 4 + 8;

std::string EncodeInfo(const CheckpointInfo& info) {
  std::string out;
  out.reserve(4 + 8 + 8 + 8 + 4 + info.seqs.size() * kSeqBytes);
  PutRaw<int32_t>(&out, info.server_rank);
  PutRaw<uint64_t>(&out, info.number);
  PutRaw<int64_t>(&out, info.unix_ms);
  PutRaw<uint64_t>(&out, info.incarnation);
  PutRaw<uint32_t>(&out, static_cast<uint32_t>(info.seqs.size()));
  for (const WorkerSeq& s : info.seqs) {
    PutRaw<int32_t>(&out, s.rank);
    PutRaw<uint32_t>(&out, s.node_id);
    PutRaw<uint64_t>(&out, s.last_seq);
  }
  return out;
}

// Parses the info at the front of `body` and leaves the store's part in it.
// Format 1 has no incarnation (it reads as 0: unknown).
absl::StatusOr<CheckpointInfo> DecodeInfo(uint32_t format, absl::string_view* body) {
  const size_t fixed = 4 + 8 + 8 + (format >= 2 ? 8 : 0) + 4;
  if (body->size() < fixed) return absl::DataLossError("body too short for its info");
  CheckpointInfo info;
  info.server_rank = TakeRaw<int32_t>(body);
  info.number = TakeRaw<uint64_t>(body);
  info.unix_ms = TakeRaw<int64_t>(body);
  if (format >= 2) info.incarnation = TakeRaw<uint64_t>(body);
  const uint32_t n = TakeRaw<uint32_t>(body);
  if (n > body->size() / kSeqBytes) {
    return absl::DataLossError(absl::StrCat("body too short for its ", n, " worker sequence numbers"));
  }
  info.seqs.resize(n);
  for (WorkerSeq& s : info.seqs) {
    s.rank = TakeRaw<int32_t>(body);
    s.node_id = TakeRaw<uint32_t>(body);
    s.last_seq = TakeRaw<uint64_t>(body);
  }
  return info;
}

absl::StatusOr<CheckpointInfo> Load(const std::string& path, int rank, SliceStore* store) {
  // Read in place (not moved out of the StatusOr): g++ 12 then sees that the
  // body it parses is initialised.
  const absl::StatusOr<FramedRecord> record = ReadFramedFile(path, kCheckpointFile);
  if (!record.ok()) return record.status();
  absl::string_view rest = record->body;
  absl::StatusOr<CheckpointInfo> info = DecodeInfo(record->format, &rest);
  if (!info.ok()) return absl::DataLossError(absl::StrCat(path, ": ", info.status().message()));
  if (info->server_rank != rank) {
    return absl::DataLossError(absl::StrCat(path, " holds the checkpoint of server ", info->server_rank,
                                            ", not of server ", rank));
  }
  if (absl::Status s = store->Restore(rest); !s.ok()) {
    const absl::StatusCode code =
        s.code() == absl::StatusCode::kResourceExhausted ? s.code() : absl::StatusCode::kDataLoss;
    return absl::Status(code, absl::StrCat(path, ": ", s.message()));
  }
  return info;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / absl::StrCat("server-", rank, ".ckpt")).string();
}

absl::Status WriteCheckpoint(const std::string& dir, const CheckpointInfo& info, const SliceStore& store,
                             uint64_t* bytes) {
  if (info.server_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint for server rank ", info.server_rank));
  }
  std::string state;
  PS_RETURN_IF_ERROR(store.Serialize(&state));
  const std::string meta = EncodeInfo(info);
  return WriteFramedFile(CheckpointPath(dir.empty() ? "." : dir, info.server_rank), kCheckpointFile,
                         kCheckpointFormat, {meta, state}, bytes);
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
