#ifndef PS_SERVER_DISK_LOG_INDEX_H_
#define PS_SERVER_DISK_LOG_INDEX_H_

// The index of a table shard's disk log (server/disk/table_log.h): where each
// row's latest record lies, in 8 bytes a slot. A slot holds a tag of the
// id (32 bits of its hash) and the record's location, not the id: the
// record's header holds the id, so the read that follows a lookup confirms
// it, and the rare ids that share a tag (about one lookup of a new id in
// 2^32 / rows) cost a read each. FASTER's hash index keeps tags the same
// way. At 0.4 to 0.8 load, 10 to 20 bytes a row: an exact map of ids took
// 20 to 35, more than a 64 MiB server could give the 3 million disk rows
// of the click-through benchmark.
//
// 64 open-addressing tables (linear probing, deletion by backward shift),
// picked by 6 more bits of the hash: one that grows rehashes 1/64 of the
// index, so that the copy a rehash holds for a moment stays small. A
// slot's home is computed from its tag alone, so that rehashing and
// deletion need no id. Not thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace ps {

class LogIndex {
 public:
  // Locations are below kNoLocation (segment 0xffff is never used).
  static constexpr uint32_t kNoLocation = 0xffff0000u;

  // `tag_bits` below 32 only in tests: more ids share a tag.
  explicit LogIndex(int tag_bits = 32);

  using Locations = absl::InlinedVector<uint32_t, 2>;
  // The locations held under `id`'s tag (usually none or one), in probe
  // order.
  Locations Candidates(uint64_t id) const;
  // Whether the entry (id's tag, location) is there.
  bool Holds(uint64_t id, uint32_t location) const;
  void Add(uint64_t id, uint32_t location);
  // The entry (id's tag, from) moved to `to`; false when there is none.
  bool Move(uint64_t id, uint32_t from, uint32_t to);
  bool Remove(uint64_t id, uint32_t location);

  uint64_t size() const;
  uint64_t bytes() const;
  // An entry as a snapshot keeps it: `key` (part << 32 | tag) says where
  // it goes without the id.
  struct Entry {
    uint64_t key;
    uint32_t location;
  };
  std::vector<Entry> Entries() const;
  void AddEntry(const Entry& e);
  // The key an entry of `id` has (a record read back is checked against it).
  uint64_t KeyOf(uint64_t id) const;

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Part {
    std::vector<uint64_t> slots;
    uint64_t used = 0;
  };
  static uint64_t Slot(uint32_t tag, uint32_t location) { return uint64_t{tag} << 32 | location; }
  static uint32_t TagOfSlot(uint64_t slot) { return static_cast<uint32_t>(slot >> 32); }
  size_t Home(const Part& p, uint32_t tag) const { return (uint64_t{tag} * p.slots.size()) >> tag_bits_; }
  // The index of slot value `slot` in `p`, or p.slots.size().
  size_t Find(const Part& p, uint64_t slot) const;
  void Insert(Part& p, uint64_t slot);
  void Erase(Part& p, size_t at);
  void Grow(Part& p);

  const int tag_bits_;
  std::array<Part, 64> parts_;
};

}  // namespace ps

#endif  // PS_SERVER_DISK_LOG_INDEX_H_
