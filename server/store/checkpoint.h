#ifndef PS_SERVER_STORE_CHECKPOINT_H_
#define PS_SERVER_STORE_CHECKPOINT_H_

// A server's checkpoint: its SliceStore plus what it needs to tell a retried
// push from a new one after a restart, in one file per server rank that is
// replaced atomically.
//
// File format (DIR/server-<rank>.ckpt): a framed file (common/base/durable_file.h)
// with magic "PSCKPT\r\n" and format version kCheckpointFormat, whose body
// (server/store/checkpoint_codec.h writes and reads it) is, all integers and
// floats little-endian:
//     i32 server_rank, u64 number, i64 unix_ms, u64 incarnation, u32 n,
//     n x (i32 rank, u32 node_id, u64 last_seq),
//   then the slice store to the end of the body:
//     u32 store format (6)
//     u64 m, then m bytes: EncodeEnvelope of a CreateSlicesRequestMsg holding
//         the model, the slice list and num_workers W (common/wire/codec.h bounds
//         and checks it)
//     u8 x W: active flags
//     u64 pushes_applied, u64 updates_applied, u64 staleness_max,
//     u64 h (0 or SliceStore::kStalenessBuckets), u64 x h: staleness histogram
//     per slice, in slice-list order:
//       u32 key, u64 version, u64 optimizer_steps, u32 arrived,
//       u8 x W pushed, i64 x W worker_clock, u64 x W join_step,
//       u8 has_floor, then i64 x W floor when it is 1,
//       f32 x length values, f32 x StateSize(length) optimizer state,
//       f32 x length step sum (only when arrived > 0)
//       table shards (length 0) then: u8 shared disk log (below; 0 or 1),
//         u32 dim, u64 floats per row (dim and
//         the optimizer state), u64 x 6 counters (evictions, admissions,
//         rejections, gradients dropped, rows pulled, rows pushed), u64 x 7
//         (disk tier rows, reads, writes, refusals; rows expired; updates
//         applied; the update of the next expiry sweep), u64 r, r x (u64
//         id, u64 row steps, f32 x floats per row), u8 x r disk flags (1:
//         changed since read, 2: has a disk copy), u64 x r the update each
//         row was last seen at, u64 p, u64 x p
//         ids of the pending sync step, f32 x p x dim their summed
//         gradients, u32 admission sketch width w (0: none), u16 x 4 x w
//         its counters
// Read, never written: checkpoint format 1 is the same without the
// incarnation (it reads as 0); store format 1 is the same without has_floor
// and floor (no skip floors); store format 2 has no tables; store format 3
// has none of the counters after the first six, no disk flags and no
// last-seen updates; store format 4 is format 5 with its table shards'
// disk rows in one log per table (below); format 5 is format 6 without the
// shared disk log flag (every shard's log its own).
//
// The disk tier (ps_server --table_disk_dir): its rows are not in the file
// but in a snapshot of the tier's store beside it,
// DIR/server-<rank>.tables/<number> (TableSnapshotPath), made by hard link
// when the checkpoint is written (server/disk/table_disk.h); a checkpoint whose
// tables keep rows there needs its snapshot. In it, each table shard's rows
// are in the log named 2^31 + its slice key, or, where its shared disk log
// flag is 1, in the log named t with every other such shard of table t on
// the server (store format 4 had only such logs). Restoring such a store,
// a table's log that holds the rows of the one shard of the table the
// store holds, and no others, becomes that shard's own (the snapshot's log
// restored under the shard's name); any other stays shared, and its shards
// keep the flag in later checkpoints while they have rows on disk.
//
// Free functions with no shared state: thread-safe, but the store must not be
// changed while WriteCheckpoint reads it (SliceStore is not thread-safe: call
// from the thread that owns it).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/durable_file.h"
#include "server/store/slice_store.h"

namespace ps {

inline constexpr uint32_t kCheckpointFormat = 2;
// How a checkpoint is framed (common/base/durable_file.h), for its readers.
inline constexpr FrameKind kCheckpointFile{absl::string_view("PSCKPT\r\n", 8), "checkpoint",
                                           /*min_format=*/1, /*max_format=*/kCheckpointFormat};

struct WorkerSeq {
  int rank = 0;
  uint32_t node_id = 0;
  uint64_t last_seq = 0;
  bool operator==(const WorkerSeq&) const = default;
};

struct CheckpointInfo {
  int server_rank = -1;
  uint64_t number = 0;  // checkpoints this server has written, 1-based
  int64_t unix_ms = 0;  // when written; the caller sets it
  // The job incarnation the sequence numbers belong to (0: unknown, format 1).
  uint64_t incarnation = 0;
  std::vector<WorkerSeq> seqs;  // per worker: the last push sequence number the state contains
  bool operator==(const CheckpointInfo&) const = default;
};

// The path of rank's checkpoint in dir: DIR/server-<rank>.ckpt.
std::string CheckpointPath(const std::string& dir, int rank);

// Where checkpoint `number` of `rank` keeps its disk tier's snapshot:
// DIR/server-<rank>.tables/<number>.
std::string TableSnapshotPath(const std::string& dir, int rank, uint64_t number);

// Writes DIR/server-<info.server_rank>.ckpt atomically: into
// DIR/server-<rank>.ckpt.tmp, fsync, rename over the old one, fsync DIR; a
// crash at any point leaves the previous checkpoint intact (a leftover .tmp is
// never read and is overwritten by the next write). Creates DIR if missing.
// Stores the file's size in *bytes when bytes is not null.
// Errors: kInvalidArgument for a negative server_rank; kFailedPrecondition
// when the store holds no model; for a failing mkdir/open/write/fsync/rename,
// the code of its errno with a message naming the path and strerror (the
// .tmp is removed, the previous checkpoint untouched).
// `between` runs now and then during the write (EncodeStore's and
// WriteFramedFile's).
absl::Status WriteCheckpoint(
    const std::string& dir, const CheckpointInfo& info, const SliceStore& store, uint64_t* bytes = nullptr,
    absl::FunctionRef<void()> between = [] {});

// WriteCheckpoint in two halves, so that the file can be written on
// another thread while the store changes: the bytes, read from the store
// now (on its thread; errors as above), and their writing (any thread).
struct EncodedCheckpoint {
  int server_rank = 0;
  std::string meta, state;
};
absl::StatusOr<EncodedCheckpoint> EncodeCheckpoint(
    const CheckpointInfo& info, const SliceStore& store, absl::FunctionRef<void()> between = [] {});
absl::Status WriteEncodedCheckpoint(
    const std::string& dir, const EncodedCheckpoint& encoded, uint64_t* bytes = nullptr,
    absl::FunctionRef<void()> between = [] {});

// The rank of the only checkpoint in `dir`: kNotFound when there is none
// (or `dir` cannot be read), kInvalidArgument when there are several (name
// one with --rank).
absl::StatusOr<int> OnlyCheckpointRank(const std::string& dir);

// Loads DIR/server-<rank>.ckpt into `store`, which must hold no model
// (kFailedPrecondition otherwise), and returns its info. Errors:
//   kNotFound when there is no checkpoint;
//   kDataLoss naming the file and the problem: a bad magic, an unknown format
//     version, a truncated file, trailing bytes, a checksum mismatch, a body
//     whose info does not parse or names another server rank, or a store
//     part that DecodeStore (server/store/checkpoint_codec.h) refuses;
//   kResourceExhausted when the model does not fit this store's memory budget;
//   the code of errno for an open or read that fails (naming the path).
// Never allocates more than the file's real size for what it reads, whatever
// the length field says. The store is left empty on any error.
absl::StatusOr<CheckpointInfo> LoadCheckpoint(const std::string& dir, int rank, SliceStore* store);

}  // namespace ps

#endif  // PS_SERVER_STORE_CHECKPOINT_H_
