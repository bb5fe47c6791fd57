#ifndef PS_COMMON_PLACEMENT_PARTITION_MAP_H_
#define PS_COMMON_PLACEMENT_PARTITION_MAP_H_

// Which server holds which part of which tensor.
//
// A tensor is cut into slices: contiguous element ranges [offset, offset+length).
// Every slice has a key, its index in slices(); keys are dense from 0. The map is
// a pure function of (tensor list, server count, placement spec): every node that
// computes it gets the same answer, bit for bit.
//
// Immutable after construction; thread-safe to read.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"

namespace ps {

// A dense slice: elements [offset, offset + length) of tensor `tensor`. Or,
// with `table` set, a shard of table `tensor` (an index in the model's
// tables): the rows whose ids TableRowShard places in it, first held by
// server `server`; offset and length are 0.
struct Slice {
  uint32_t key = 0;     // index in PartitionMap::slices()
  uint32_t tensor = 0;  // index in the tensor list (tables: in the table list)
  uint64_t offset = 0;  // first element
  uint64_t length = 0;  // number of elements, > 0 (tables: 0)
  int32_t server = 0;   // rank of the server that holds it
  bool table = false;
  bool operator==(const Slice&) const = default;
};

// The shard, of `shards`, that holds row `id` of the table named `table`:
// splitmix64(id XOR fnv1a64(table)) mod shards. A pure function of its
// arguments: stable across restarts, independent of the order ids arrive
// in, and the same on every node. The mixer spreads sequential and strided
// ids evenly.
//
// Rows never move between shards; shards move between servers. With one
// shard per server (PlacementSpec::table_shards 0, the layout before
// shards could move) shard r is on server r, so this is the server rank,
// and a change of S could move no row without re-hashing nearly all. With
// V fixed shards (V >= S) a server joining a job of S takes about V/(S+1)
// shards, so about 1/(S+1) of the rows move (common/placement/rebalance.h): Redis
// Cluster's slots and Ceph's placement groups, with the shard the unit the
// replication machinery copies and hands over.
int32_t TableRowShard(uint64_t table_hash, uint64_t id, int shards);
// fnv1a64 of a table's name, the first argument of TableRowShard.
uint64_t TableHash(std::string_view name);
// The shards per table a placement's table_shards (0: one per server) means.
int TableShardsOf(uint32_t table_shards, int num_servers);

class PartitionMap {
 public:
  PartitionMap() = default;

  // Places `tensors` on `num_servers` servers:
  // - a tensor named in placement.explicit_ranks lives whole on that server;
  // - rule kLayer: the other tensors are grouped by layer (the name up to its
  //   last '.', or the whole name when it has none); layers, in order of first
  //   appearance, go whole to servers 0, 1, ..., round-robin;
  // - rule kAuto: a tensor of more than slice_bytes is cut into
  //   ceil(bytes / slice_bytes) slices of near-equal length; slices are then
  //   assigned largest first (ties: lower key first) to the server holding the
  //   fewest bytes so far (ties: lower rank), counting the explicit ones.
  // Keys: tensors in list order, slices of a tensor in offset order; then,
  // for each of `num_tables` tables in order, its shards in order
  // (TableShardsOf(placement.table_shards)), shard v on server v mod S.
  // Errors: kInvalidArgument for num_servers < 1, an invalid spec, or an
  // explicit rank outside [0, num_servers).
  static absl::StatusOr<PartitionMap> Build(const std::vector<TensorSpec>& tensors, int num_servers,
                                            const PlacementSpec& placement, int num_tables = 0);

  // Rebuilds a map received from a peer. kInvalidArgument (or kDataLoss when
  // the slices do not tile every tensor exactly, in key order) naming the first
  // problem: keys not dense, a tensor index or server out of range, gaps or
  // overlaps.
  // Table slices must follow the dense ones as Build places them.
  static absl::StatusOr<PartitionMap> FromSlices(const std::vector<TensorSpec>& tensors, int num_servers,
                                                 std::vector<Slice> slices, int num_tables = 0,
                                                 uint32_t table_shards = 0);

  int num_servers() const { return num_servers_; }
  int num_tensors() const { return static_cast<int>(slices_of_tensor_.size()); }
  int num_tables() const { return num_tables_; }
  // Shards per table.
  int table_shards() const { return table_shards_; }
  // The key of table `table`'s shard `shard`. Requires valid indices.
  uint32_t TableSlice(uint32_t table, int shard) const {
    return first_table_key_ + table * static_cast<uint32_t>(table_shards_) + static_cast<uint32_t>(shard);
  }
  const std::vector<Slice>& slices() const { return slices_; }
  // Keys of the slices of tensor `tensor`, in offset order. Requires a valid index.
  absl::Span<const uint32_t> SlicesOfTensor(uint32_t tensor) const { return slices_of_tensor_[tensor]; }
  // Keys of the slices held by server `rank`, ascending.
  std::vector<uint32_t> SlicesOnServer(int rank) const;
  // Bytes (4 per element) of dense slices each server holds, indexed by rank.
  std::vector<uint64_t> BytesPerServer() const;
  // One line per tensor: "name -> server 0 [0, 1000), server 1 [1000, 2000)".
  std::string Describe(const std::vector<TensorSpec>& tensors) const;

 private:
  PartitionMap(int num_servers, std::vector<Slice> slices, int num_tensors, int num_tables, int table_shards);

  int num_servers_ = 0;
  int num_tables_ = 0;
  int table_shards_ = 0;
  uint32_t first_table_key_ = 0;
  std::vector<Slice> slices_;
  std::vector<std::vector<uint32_t>> slices_of_tensor_;
};

}  // namespace ps

#endif  // PS_COMMON_PLACEMENT_PARTITION_MAP_H_
