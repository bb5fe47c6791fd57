#ifndef PS_SERVER_PUSH_SEQUENCER_H_
#define PS_SERVER_PUSH_SEQUENCER_H_

// The server's half of the replay protocol (the worker's is in
// worker/client/kv_client.cc): per worker rank, which node it is, the sequence
// number of the last push applied and of the last one a checkpoint holds.
// Decides whether a numbered push is applied or dropped as one the state
// already holds (a re-send after a restart), and tells each worker, in every
// reply, how far its pushes are durable so it can drop its copies.
//
// Not thread-safe: the server's request thread owns it.

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/wire/messages.h"
#include "server/store/checkpoint.h"

namespace ps {

class PushSequencer {
 public:
  // `keeps_checkpoints`: false makes DurableSeq kNothingToKeep for everyone.
  explicit PushSequencer(bool keeps_checkpoints) : keeps_checkpoints_(keeps_checkpoints) {}

  // Whether push `seq` of `worker` is new (and now the last applied: a
  // push is numbered even when it is then refused, since the same push
  // re-sent would be refused again) or one the state already holds (counted
  // in duplicates()). 0 is unnumbered: always new.
  bool Admit(int worker, uint64_t seq);
  // Whether the state holds push `seq` of `worker` already (Admit would say
  // it is not new), without counting it.
  bool Holds(int worker, uint64_t seq) const {
    auto it = seqs_.find(worker);
    return seq != 0 && it != seqs_.end() && seq <= it->second.last_seq;
  }

  // The cluster view says `worker` is node `node_id`. Returns true when the
  // rank was another node before (a worker restarted): its numbering starts
  // again from 1. The first node of a rank starts it too, returning false.
  bool SetNode(int worker, uint32_t node_id);

  // Every worker is new (a job restarted from its checkpoints: another
  // incarnation numbers nodes and pushes afresh).
  void Forget() { seqs_.clear(); }

  // The last push seq of `worker` a checkpoint holds; kNothingToKeep when no
  // checkpoints are kept.
  uint64_t DurableSeq(int worker) const;
  // A checkpoint now holds the pushes `written` (its Snapshot) names.
  void MarkDurable(const std::vector<WorkerSeq>& written);

  // What a checkpoint records, and what a restored one gives back (all of it
  // durable).
  std::vector<WorkerSeq> Snapshot() const;
  void Restore(const std::vector<WorkerSeq>& seqs);

  uint64_t duplicates() const { return duplicates_; }

 private:
  struct State {
    uint32_t node_id = 0;
    uint64_t last_seq = 0;
    uint64_t durable_seq = 0;
  };
  const bool keeps_checkpoints_;
  absl::flat_hash_map<int, State> seqs_;
  uint64_t duplicates_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_PUSH_SEQUENCER_H_
