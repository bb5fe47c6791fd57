#ifndef PS_COMMON_PARTITION_MAP_H_
#define PS_COMMON_PARTITION_MAP_H_

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
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_spec.h"

namespace ps {

struct Slice {
  uint32_t key = 0;     // index in PartitionMap::slices()
  uint32_t tensor = 0;  // index in the tensor list
  uint64_t offset = 0;  // first element
  uint64_t length = 0;  // number of elements, > 0
  int32_t server = 0;   // rank of the server that holds it
  bool operator==(const Slice&) const = default;
};

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
  // Keys: tensors in list order, slices of a tensor in offset order.
  // Errors: kInvalidArgument for num_servers < 1, an invalid spec, or an
  // explicit rank outside [0, num_servers).
  static absl::StatusOr<PartitionMap> Build(const std::vector<TensorSpec>& tensors,
                                            int num_servers,
                                            const PlacementSpec& placement);

  // Rebuilds a map received from a peer. kInvalidArgument (or kDataLoss when
  // the slices do not tile every tensor exactly, in key order) naming the first
  // problem: keys not dense, a tensor index or server out of range, gaps or
  // overlaps.
  static absl::StatusOr<PartitionMap> FromSlices(const std::vector<TensorSpec>& tensors,
                                                 int num_servers, std::vector<Slice> slices);

  int num_servers() const { return num_servers_; }
  int num_tensors() const { return static_cast<int>(slices_of_tensor_.size()); }
  const std::vector<Slice>& slices() const { return slices_; }
  // Keys of the slices of tensor `tensor`, in offset order. Requires a valid index.
  absl::Span<const uint32_t> SlicesOfTensor(uint32_t tensor) const {
    return slices_of_tensor_[tensor];
  }
  // Keys of the slices held by server `rank`, ascending.
  std::vector<uint32_t> SlicesOnServer(int rank) const;
  // Bytes (4 per element) each server holds, indexed by rank.
  std::vector<uint64_t> BytesPerServer() const;
  // One line per tensor: "name -> server 0 [0, 1000), server 1 [1000, 2000)".
  std::string Describe(const std::vector<TensorSpec>& tensors) const;

 private:
  PartitionMap(int num_servers, std::vector<Slice> slices, int num_tensors);

  int num_servers_ = 0;
  std::vector<Slice> slices_;
  std::vector<std::vector<uint32_t>> slices_of_tensor_;
};

}  // namespace ps

#endif  // PS_COMMON_PARTITION_MAP_H_
