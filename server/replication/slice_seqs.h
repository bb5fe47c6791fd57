#ifndef PS_SERVER_REPLICATION_SLICE_SEQS_H_
#define PS_SERVER_REPLICATION_SLICE_SEQS_H_

// With --replicas, which numbered pushes each slice holds: per slice, per
// (numbering, worker), the last push seq applied to it. A push re-sent after
// a failover may reach a copy by another path than the one that carried it
// first (the worker itself, or a new primary relaying it), and a server may
// hold some of a push's slices and not others (a primary that died between
// its forwards): so duplicates are told apart per slice, not per server,
// and a push applies to the slices that lack it only. A slice's record
// travels with a copy of it (SliceCopyMsg::seqs).
//
// Not thread-safe: the server's loop owns it.

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/wire/messages.h"

namespace ps {

class SliceSeqs {
 public:
  // Which slices of `push` (numbered `seq` by server `origin` for `worker`)
  // lack it, in push order; those are now recorded as holding it. Seq 0
  // (unnumbered) is new everywhere.
  std::vector<bool> Admit(const PushRequestMsg& push, int32_t origin, int worker);
  // What slice `key` holds, for a copy of it; and the same on the copy's side.
  std::vector<OriginSeq> Of(uint32_t key) const;
  void Set(uint32_t key, const std::vector<OriginSeq>& seqs);
  // Slice `key` holds the pushes `seqs` name too (a step forwarded as its
  // sum: server/store/step_forwarding.h); a record never goes back.
  void Merge(uint32_t key, const std::vector<OriginSeq>& seqs);

  uint64_t duplicates() const { return duplicates_; }  // slices a push found holding it already

 private:
  static uint64_t Id(int32_t origin, int worker) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(origin)) << 32) | static_cast<uint32_t>(worker);
  }
  absl::flat_hash_map<uint32_t, absl::flat_hash_map<uint64_t, uint64_t>> last_;  // key -> (origin, worker) -> seq
  uint64_t duplicates_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_SLICE_SEQS_H_
