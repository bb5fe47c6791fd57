#include "server/push_sequencer.h"

#include <algorithm>

namespace ps {

bool PushSequencer::Admit(int worker, uint64_t seq) {
  if (seq == 0) return true;
  State& s = seqs_[worker];
  if (seq <= s.last_seq) {
    ++duplicates_;
    return false;
  }
  s.last_seq = seq;
  return true;
}

bool PushSequencer::SetNode(int worker, uint32_t node_id) {
  State& s = seqs_[worker];
  if (s.node_id == node_id) return false;
  const bool restarted = s.node_id != 0;
  s = State{node_id, 0, 0};
  return restarted;
}

uint64_t PushSequencer::DurableSeq(int worker) const {
  if (!keeps_checkpoints_) return kNothingToKeep;
  auto it = seqs_.find(worker);
  return it == seqs_.end() ? 0 : it->second.durable_seq;
}

void PushSequencer::MarkDurable(const std::vector<WorkerSeq>& written) {
  for (const WorkerSeq& w : written) {
    auto it = seqs_.find(w.rank);
    // A worker that came back as another process since numbers anew.
    if (it == seqs_.end() || it->second.node_id != w.node_id) continue;
    it->second.durable_seq = std::max(it->second.durable_seq, std::min(w.last_seq, it->second.last_seq));
  }
}

std::vector<WorkerSeq> PushSequencer::Snapshot() const {
  std::vector<WorkerSeq> out;
  for (const auto& [worker, s] : seqs_) out.push_back(WorkerSeq{worker, s.node_id, s.last_seq});
  std::sort(out.begin(), out.end(), [](const WorkerSeq& a, const WorkerSeq& b) { return a.rank < b.rank; });
  return out;
}

void PushSequencer::Restore(const std::vector<WorkerSeq>& seqs) {
  seqs_.clear();
  for (const WorkerSeq& w : seqs) seqs_[w.rank] = State{w.node_id, w.last_seq, w.last_seq};
}

}  // namespace ps
