#include "server/export/exporter.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/model_file/model_file_writer.h"
#include "common/placement/partition_map.h"
#include "server/disk/table_disk.h"
#include "server/export/checkpoint_scan.h"

namespace ps {
namespace {

constexpr uint64_t kChunkFloats = 1 << 18;  // 1 MiB through the buffer at a time
constexpr size_t kRowBatch = 4096;

using Scans = std::vector<std::unique_ptr<CheckpointScan>>;
// A slice and the checkpoint that holds it.
using Piece = std::pair<const CheckpointScan*, const ScannedSlice*>;

// DIR/server-<r>.ckpt of every rank there, in rank order; the ranks below
// the highest whose file is missing go to *missing.
absl::StatusOr<Scans> OpenAll(const std::string& dir, std::vector<int>* missing) {
  std::error_code error;
  std::vector<int> ranks;
  const std::regex name("server-([0-9]{1,6})\\.ckpt");
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) ranks.push_back(std::stoi(m[1].str()));
  }
  if (error) return absl::NotFoundError(absl::StrCat("cannot read ", dir, ": ", error.message()));
  if (ranks.empty()) return absl::NotFoundError(absl::StrCat("no server checkpoint (server-<rank>.ckpt) in ", dir));
  std::sort(ranks.begin(), ranks.end());
  Scans scans;
  for (int r = 0; r < ranks.back(); ++r) {
    if (!std::binary_search(ranks.begin(), ranks.end(), r)) missing->push_back(r);
  }
  for (int r : ranks) {
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<CheckpointScan> scan,
        CheckpointScan::Open((std::filesystem::path(dir) / absl::StrCat("server-", r, ".ckpt")).string()));
    if (scan->info().server_rank != r) {
      return absl::DataLossError(absl::StrCat(scan->path(), " holds server ", scan->info().server_rank, "'s state"));
    }
    scans.push_back(std::move(scan));
  }
  return scans;
}

// Checkpoints of some ranks are missing (`missing`): fine only where the
// job kept replicas (some slice is in two checkpoints) or its slices moved
// (a slice placed on a missing rank is held by another: servers drained),
// and the others hold a copy of every table shard (dense tensors:
// TensorPieces checks them).
absl::Status CheckMissing(const Scans& scans, const std::vector<int>& missing, const std::string& dir) {
  if (missing.empty()) return absl::OkStatus();
  std::map<uint32_t, int> holders;                // slice key -> checkpoints holding it
  int top = 0;                                    // the highest rank the partition map placed a slice on
  std::map<uint32_t, std::set<uint32_t>> shards;  // table -> keys of its shards held
  for (const auto& scan : scans) {
    for (const ScannedSlice& s : scan->slices()) {
      ++holders[s.slice.key];
      top = std::max(top, s.slice.server);
      if (s.slice.table) shards[s.slice.tensor].insert(s.slice.key);
    }
  }
  std::vector<int> present;
  for (const auto& scan : scans) present.push_back(scan->info().server_rank);
  const bool replicated = std::any_of(holders.begin(), holders.end(), [](const auto& h) { return h.second > 1; });
  bool moved = false;
  for (const auto& scan : scans) {
    for (const ScannedSlice& s : scan->slices()) {
      moved |= std::find(missing.begin(), missing.end(), s.slice.server) != missing.end();
    }
  }
  if (!replicated && !moved) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " has no checkpoint of server ", missing[0],
                                                      " (it has ranks ", absl::StrJoin(present, ", "), ")"));
  }
  // Shards move between servers (servers joined or left): each is looked
  // for by key, wherever it is.
  const ModelSpec& model = scans[0]->spec().model;
  const size_t want = static_cast<size_t>(TableShardsOf(model.placement.table_shards, top + 1));
  for (uint32_t t = 0; t < model.tables.size(); ++t) {
    if (shards[t].size() == want) continue;
    return absl::FailedPreconditionError(absl::StrCat("table '", model.tables[t].name, "': the checkpoints in ", dir,
                                                      " hold ", shards[t].size(), " of its ", want,
                                                      " shards (they have ranks ", absl::StrJoin(present, ", "), ")"));
  }
  return absl::OkStatus();
}

// The checkpoints must be of one job: its incarnation, model and workers.
absl::Status CheckOneJob(const Scans& scans) {
  const CheckpointScan& first = *scans[0];
  for (const auto& scan : scans) {
    const uint64_t a = first.info().incarnation, b = scan->info().incarnation;
    if (a != b && a != 0 && b != 0) {
      return absl::FailedPreconditionError(absl::StrCat(first.path(), " and ", scan->path(),
                                                        " are checkpoints of different jobs (incarnations ",
                                                        absl::Hex(a), " and ", absl::Hex(b), ")"));
    }
    if (!(scan->spec().model == first.spec().model) || scan->spec().num_workers != first.spec().num_workers) {
      return absl::FailedPreconditionError(
          absl::StrCat(first.path(), " and ", scan->path(), " hold different models or worker counts"));
    }
  }
  return absl::OkStatus();
}

bool IsBuffer(const ModelSpec& model, const Slice& slice) { return !slice.table && model.tensors[slice.tensor].buffer; }

// Per server, the highest step its slices reached; for a sync model every
// slice (buffers aside) must stand at the same one.
absl::StatusOr<std::vector<uint64_t>> Steps(const Scans& scans) {
  const ModelSpec& model = scans[0]->spec().model;
  std::vector<uint64_t> steps;
  uint64_t low = UINT64_MAX, high = 0;
  for (const auto& scan : scans) {
    uint64_t top = 0;
    for (const ScannedSlice& s : scan->slices()) {
      if (IsBuffer(model, s.slice)) continue;
      top = std::max(top, s.version);
      // Only the sync slices must agree: a table of its own async mode
      // (PERSIA's hybrid) counts pushes, not steps.
      if (model.ConsistencyOf(s.slice.table, s.slice.tensor).mode != ConsistencyMode::kSync) continue;
      low = std::min(low, s.version);
      high = std::max(high, s.version);
    }
    steps.push_back(top);
  }
  if (low != UINT64_MAX && low != high) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the servers' checkpoints stand at different steps (", low, " to ", high,
        "; per server: ", absl::StrJoin(steps, ", "),
        "): a sync model's export is one step everywhere; export the checkpoints written as the job ended"));
  }
  return steps;
}

// One piece per slice: with --replicas several servers' checkpoints hold a
// copy of it; the most advanced one is taken (equal versions: the server
// the partition map placed it on, whose copy led it longest), in key order.
std::vector<Piece> OnePerSlice(const Scans& scans) {
  std::map<uint32_t, Piece> best;
  for (const auto& scan : scans) {
    for (const ScannedSlice& s : scan->slices()) {
      auto [it, fresh] = best.try_emplace(s.slice.key, scan.get(), &s);
      if (fresh) continue;
      const ScannedSlice& held = *it->second.second;
      const bool home = scan->info().server_rank == s.slice.server;
      if (s.version > held.version || (s.version == held.version && home)) it->second = Piece(scan.get(), &s);
    }
  }
  std::vector<Piece> out;
  for (const auto& [key, piece] : best) out.push_back(piece);
  return out;
}

// The pieces of every tensor in offset order, checked to cover it exactly.
absl::StatusOr<std::vector<std::vector<Piece>>> TensorPieces(const Scans& scans) {
  const ModelSpec& model = scans[0]->spec().model;
  std::vector<std::vector<Piece>> pieces(model.tensors.size());
  for (const Piece& p : OnePerSlice(scans)) {
    if (!p.second->slice.table) pieces[p.second->slice.tensor].push_back(p);
  }
  for (size_t t = 0; t < pieces.size(); ++t) {
    auto& p = pieces[t];
    std::sort(p.begin(), p.end(),
              [](const Piece& a, const Piece& b) { return a.second->slice.offset < b.second->slice.offset; });
    uint64_t covered = 0;
    for (const Piece& piece : p) {
      if (piece.second->slice.offset != covered) break;
      covered += piece.second->slice.length;
    }
    if (covered != static_cast<uint64_t>(model.tensors[t].NumElements())) {
      return absl::FailedPreconditionError(absl::StrCat("tensor '", model.tensors[t].name, "': the checkpoints hold ",
                                                        covered, " of its ", model.tensors[t].NumElements(),
                                                        " elements from the start (a server's checkpoint is missing)"));
    }
  }
  return pieces;
}

std::vector<std::vector<Piece>> TableShards(const Scans& scans) {
  std::vector<std::vector<Piece>> shards(scans[0]->spec().model.tables.size());
  for (const Piece& p : OnePerSlice(scans)) {
    if (p.second->slice.table) shards[p.second->slice.tensor].push_back(p);
  }
  return shards;
}

// The rows a table's shards hold together.
uint64_t RowsOf(const std::vector<Piece>& shards) {
  uint64_t rows = 0;
  for (const Piece& p : shards) rows += p.second->rows + p.second->disk_only_rows;
  return rows;
}

std::vector<ArraySpec> Arrays(const ModelSpec& model, const std::vector<std::vector<Piece>>& shards) {
  std::vector<ArraySpec> arrays;
  for (const TensorSpec& t : model.tensors) {
    arrays.push_back({t.name, DType::kFloat32, std::vector<uint64_t>(t.shape.begin(), t.shape.end())});
  }
  for (size_t t = 0; t < model.tables.size(); ++t) {
    const uint64_t rows = RowsOf(shards[t]);
    const auto dim = static_cast<uint64_t>(model.tables[t].dim);
    arrays.push_back({model.tables[t].name + ".ids", DType::kUInt64, {rows}});
    arrays.push_back({model.tables[t].name + ".rows", DType::kFloat32, {rows, dim}});
  }
  return arrays;
}

template <typename T>
absl::string_view Bytes(absl::Span<const T> v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

absl::Status WriteTensor(const std::vector<Piece>& pieces, ModelFileWriter& out, std::vector<float>& buffer) {
  for (const auto& [scan, slice] : pieces) {
    for (uint64_t at = 0; at < slice->slice.length; at += kChunkFloats) {
      const uint64_t n = std::min(kChunkFloats, slice->slice.length - at);
      buffer.resize(n);
      PS_RETURN_IF_ERROR(scan->ReadValues(*slice, at, absl::MakeSpan(buffer)));
      PS_RETURN_IF_ERROR(out.Append(Bytes<float>(buffer)));
    }
  }
  return absl::OkStatus();
}

// The ids of `shard`'s rows in the checkpoint file, when its server has
// rows on the disk tier too (empty otherwise: not needed).
absl::StatusOr<absl::flat_hash_set<uint64_t>> IdsInFile(const CheckpointScan& scan, const ScannedSlice& shard) {
  absl::flat_hash_set<uint64_t> in_file;
  if (shard.disk_rows == 0) return in_file;
  in_file.reserve(shard.rows);
  PS_RETURN_IF_ERROR(scan.ForEachRow(shard, kRowBatch, [&](absl::Span<const uint64_t> ids, absl::Span<const float>) {
    in_file.insert(ids.begin(), ids.end());
    return absl::OkStatus();
  }));
  return in_file;
}

// The rows of `shard` on its server's disk tier and not in the checkpoint
// file (`in_file`, IdsInFile: the file's copy is the newer), through
// `fn(id, row)`: memory holds the file's ids, never the disk's rows. A log
// the shard shares with its table's other shards on that server (store
// format 4) holds theirs too: only the ids TableRowShard places in shard
// `index` of `shards` (the table hashed `table_hash`) are its.
absl::Status ForEachDiskRow(const CheckpointScan& scan, const ScannedSlice& shard,
                            const absl::flat_hash_set<uint64_t>& in_file, uint64_t table_hash, int index, int shards,
                            absl::FunctionRef<absl::Status(uint64_t, absl::Span<const float>)> fn) {
  if (shard.disk_rows == 0) return absl::OkStatus();
  const bool shared = (shard.disk_log & kKeyedDiskLog) == 0;
  uint64_t seen = 0;
  PS_RETURN_IF_ERROR(TableDisk::ForEachRow(scan.TableSnapshot(), shard.disk_log, shard.floats_per_row,
                                           [&](uint64_t id, const TableDisk::Row& row) {
                                             if (in_file.contains(id)) return absl::OkStatus();
                                             if (shared && TableRowShard(table_hash, id, shards) != index) {
                                               return absl::OkStatus();
                                             }
                                             ++seen;
                                             return fn(id, absl::MakeConstSpan(row.floats).first(shard.dim));
                                           }));
  if (seen != shard.disk_only_rows) {
    return absl::DataLossError(absl::StrCat(scan.TableSnapshot(), ": ", seen, " rows of table shard ", shard.slice.key,
                                            " besides the file's; the checkpoint counts ", shard.disk_only_rows));
  }
  return absl::OkStatus();
}

// The table's ids, then (a second pass) its rows, shard after shard: the
// checkpoint file's, then its disk tier's.
absl::Status WriteTable(const std::vector<Piece>& shards, uint64_t table_hash, ModelFileWriter& out) {
  std::vector<absl::flat_hash_set<uint64_t>> in_file;  // per shard, for both passes
  for (const auto& [scan, shard] : shards) {
    PS_ASSIGN_OR_RETURN(in_file.emplace_back(), IdsInFile(*scan, *shard));
  }
  for (bool ids : {true, false}) {
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto& [scan, shard] = shards[i];
      PS_RETURN_IF_ERROR(
          scan->ForEachRow(*shard, kRowBatch, [&](absl::Span<const uint64_t> id, absl::Span<const float> rows) {
            return out.Append(ids ? Bytes(id) : Bytes(rows));
          }));
      PS_RETURN_IF_ERROR(ForEachDiskRow(*scan, *shard, in_file[i], table_hash, static_cast<int>(i),
                                        static_cast<int>(shards.size()), [&](uint64_t id, absl::Span<const float> row) {
                                          return out.Append(ids ? Bytes(absl::MakeConstSpan(&id, 1)) : Bytes(row));
                                        }));
    }
  }
  return absl::OkStatus();
}

// Every array's bytes kept in memory, in the writer's order.
class ArraysInMemory final : public ModelFileWriter {
 public:
  explicit ArraysInMemory(std::vector<ArraySpec> arrays) : arrays_(std::move(arrays)), bytes_(arrays_.size()) {
    Advance();
  }
  absl::Status Append(absl::string_view data) override {
    if (data.size() > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat(data.size(), " bytes for array ", arrays_[current_].name,
                                                     ", which needs ", remaining(), " more"));
    }
    bytes_[current_].append(data.data(), data.size());
    Advance();
    return absl::OkStatus();
  }
  absl::Status Close() override {
    if (current_ < arrays_.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("array ", arrays_[current_].name, " has ", bytes_[current_].size(), " of its bytes"));
    }
    return absl::OkStatus();
  }
  const std::vector<ArraySpec>& arrays() const override { return arrays_; }
  size_t current() const override { return current_; }
  uint64_t remaining() const override {
    return current_ < arrays_.size() ? Size(current_) - bytes_[current_].size() : 0;
  }
  std::vector<std::string> Take() { return std::move(bytes_); }

 private:
  uint64_t Size(size_t i) const { return ArrayByteSize(arrays_[i].dtype, arrays_[i].shape).value_or(0); }
  void Advance() {
    while (current_ < arrays_.size() && bytes_[current_].size() == Size(current_)) ++current_;
    if (current_ < arrays_.size()) bytes_[current_].reserve(Size(current_));
  }

  std::vector<ArraySpec> arrays_;
  std::vector<std::string> bytes_;
  size_t current_ = 0;
};

// The export of `checkpoint_dir` into the writer `make_writer` gives for
// the arrays (the caller owns it).
absl::StatusOr<ExportSummary> Export(
    const std::string& checkpoint_dir,
    absl::FunctionRef<absl::StatusOr<ModelFileWriter*>(const std::vector<ArraySpec>&)> make_writer) {
  std::vector<int> missing;
  PS_ASSIGN_OR_RETURN(Scans scans, OpenAll(checkpoint_dir, &missing));
  PS_RETURN_IF_ERROR(CheckOneJob(scans));
  PS_RETURN_IF_ERROR(CheckMissing(scans, missing, checkpoint_dir));
  ExportSummary summary;
  summary.model = scans[0]->spec().model;
  summary.servers = static_cast<int>(scans.size());
  PS_ASSIGN_OR_RETURN(summary.steps, Steps(scans));
  PS_ASSIGN_OR_RETURN(std::vector<std::vector<Piece>> tensors, TensorPieces(scans));
  const std::vector<std::vector<Piece>> tables = TableShards(scans);
  const std::vector<ArraySpec> arrays = Arrays(summary.model, tables);
  PS_ASSIGN_OR_RETURN(ModelFileWriter * writer, make_writer(arrays));
  std::vector<float> buffer;
  for (const auto& pieces : tensors) PS_RETURN_IF_ERROR(WriteTensor(pieces, *writer, buffer));
  for (size_t t = 0; t < tables.size(); ++t) {
    PS_RETURN_IF_ERROR(WriteTable(tables[t], TableHash(summary.model.tables[t].name), *writer));
  }
  PS_RETURN_IF_ERROR(writer->Close());
  summary.tensors = tensors.size();
  for (const auto& shards : tables) summary.table_rows += RowsOf(shards);
  for (const ArraySpec& a : arrays) summary.bytes += ArrayByteSize(a.dtype, a.shape).value_or(0);
  return summary;
}

}  // namespace

absl::StatusOr<ExportSummary> ExportCheckpoints(const std::string& checkpoint_dir, const std::string& out) {
  std::unique_ptr<ModelFileWriter> file;
  return Export(checkpoint_dir, [&](const std::vector<ArraySpec>& arrays) -> absl::StatusOr<ModelFileWriter*> {
    PS_ASSIGN_OR_RETURN(file, ModelFileWriter::Create(out, arrays));
    return file.get();
  });
}

absl::StatusOr<ExportedArrays> ExportCheckpointsToMemory(const std::string& checkpoint_dir) {
  std::optional<ArraysInMemory> memory;
  PS_ASSIGN_OR_RETURN(ExportSummary summary,
                      Export(checkpoint_dir, [&](const std::vector<ArraySpec>& arrays) -> ModelFileWriter* {
                        return &memory.emplace(arrays);
                      }));
  return ExportedArrays{std::move(summary), memory->arrays(), memory->Take()};
}

}  // namespace ps
