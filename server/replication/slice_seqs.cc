#include "server/replication/slice_seqs.h"

#include <algorithm>

namespace ps {

std::vector<bool> SliceSeqs::Admit(const PushRequestMsg& push, int32_t origin, int worker) {
  std::vector<bool> fresh(push.slices.size(), true);
  if (push.seq == 0) return fresh;
  const uint64_t id = Id(origin, worker);
  for (size_t i = 0; i < push.slices.size(); ++i) {
    uint64_t& last = last_[push.slices[i].key][id];
    if (push.seq <= last) {
      fresh[i] = false;
      ++duplicates_;
    } else {
      last = push.seq;
    }
  }
  return fresh;
}

std::vector<OriginSeq> SliceSeqs::Of(uint32_t key) const {
  std::vector<OriginSeq> out;
  auto it = last_.find(key);
  if (it == last_.end()) return out;
  for (const auto& [id, seq] : it->second) {
    out.push_back(OriginSeq{static_cast<int32_t>(id >> 32), static_cast<int32_t>(id & 0xffffffffu), seq});
  }
  std::sort(out.begin(), out.end(), [](const OriginSeq& a, const OriginSeq& b) {
    return a.origin != b.origin ? a.origin < b.origin : a.worker < b.worker;
  });
  return out;
}

void SliceSeqs::Set(uint32_t key, const std::vector<OriginSeq>& seqs) {
  absl::flat_hash_map<uint64_t, uint64_t>& last = last_[key];
  last.clear();
  for (const OriginSeq& s : seqs) last[Id(s.origin, s.worker)] = s.last_seq;
}

void SliceSeqs::Merge(uint32_t key, const std::vector<OriginSeq>& seqs) {
  absl::flat_hash_map<uint64_t, uint64_t>& last = last_[key];
  for (const OriginSeq& s : seqs) {
    uint64_t& l = last[Id(s.origin, s.worker)];
    l = std::max(l, s.last_seq);
  }
}

}  // namespace ps
