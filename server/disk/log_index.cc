#include "server/disk/log_index.h"

#include "common/base/hash.h"

namespace ps {
namespace {

constexpr size_t kFirstSlots = 16;

}  // namespace

LogIndex::LogIndex(int tag_bits) : tag_bits_(tag_bits) {}

uint64_t LogIndex::KeyOf(uint64_t id) const {
  const uint64_t h = Mix64(id);
  const uint64_t part = h >> 58;
  const uint64_t tag = (h >> (58 - tag_bits_)) & ((uint64_t{1} << tag_bits_) - 1);
  return part << 32 | tag;
}

LogIndex::Locations LogIndex::Candidates(uint64_t id) const {
  const uint64_t key = KeyOf(id);
  const Part& p = parts_[key >> 32];
  Locations out;
  if (p.slots.empty()) return out;
  const auto tag = static_cast<uint32_t>(key);
  for (size_t i = Home(p, tag); p.slots[i] != kEmpty; i = i + 1 == p.slots.size() ? 0 : i + 1) {
    if (TagOfSlot(p.slots[i]) == tag) out.push_back(static_cast<uint32_t>(p.slots[i]));
  }
  return out;
}

size_t LogIndex::Find(const Part& p, uint64_t slot) const {
  if (p.slots.empty()) return 0;
  for (size_t i = Home(p, TagOfSlot(slot)); p.slots[i] != kEmpty; i = i + 1 == p.slots.size() ? 0 : i + 1) {
    if (p.slots[i] == slot) return i;
  }
  return p.slots.size();
}

bool LogIndex::Holds(uint64_t id, uint32_t location) const {
  const uint64_t key = KeyOf(id);
  const Part& p = parts_[key >> 32];
  return Find(p, Slot(static_cast<uint32_t>(key), location)) < p.slots.size();
}

void LogIndex::Grow(Part& p) {
  std::vector<uint64_t> old(std::max(kFirstSlots, 2 * p.slots.size()), kEmpty);
  old.swap(p.slots);
  for (uint64_t slot : old) {
    if (slot == kEmpty) continue;
    size_t i = Home(p, TagOfSlot(slot));
    while (p.slots[i] != kEmpty) i = i + 1 == p.slots.size() ? 0 : i + 1;
    p.slots[i] = slot;
  }
}

void LogIndex::Insert(Part& p, uint64_t slot) {
  if (5 * (p.used + 1) > 4 * p.slots.size()) Grow(p);  // load at most 0.8
  size_t i = Home(p, TagOfSlot(slot));
  while (p.slots[i] != kEmpty) i = i + 1 == p.slots.size() ? 0 : i + 1;
  p.slots[i] = slot;
  ++p.used;
}

void LogIndex::Erase(Part& p, size_t at) {
  // Backward shift: later slots of the run move up when their home allows,
  // so that no probe stops early at the hole.
  const size_t n = p.slots.size();
  size_t hole = at;
  for (size_t j = at + 1 == n ? 0 : at + 1; p.slots[j] != kEmpty; j = j + 1 == n ? 0 : j + 1) {
    const size_t home = Home(p, TagOfSlot(p.slots[j]));
    // The entry at j may fill the hole when its home is not in (hole, j].
    const bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!between) {
      p.slots[hole] = p.slots[j];
      hole = j;
    }
  }
  p.slots[hole] = kEmpty;
  --p.used;
}

void LogIndex::Add(uint64_t id, uint32_t location) {
  const uint64_t key = KeyOf(id);
  Insert(parts_[key >> 32], Slot(static_cast<uint32_t>(key), location));
}

bool LogIndex::Move(uint64_t id, uint32_t from, uint32_t to) {
  const uint64_t key = KeyOf(id);
  Part& p = parts_[key >> 32];
  const size_t i = Find(p, Slot(static_cast<uint32_t>(key), from));
  if (i >= p.slots.size()) return false;
  p.slots[i] = Slot(static_cast<uint32_t>(key), to);  // same tag: same home, same run
  return true;
}

bool LogIndex::Remove(uint64_t id, uint32_t location) {
  const uint64_t key = KeyOf(id);
  Part& p = parts_[key >> 32];
  const size_t i = Find(p, Slot(static_cast<uint32_t>(key), location));
  if (i >= p.slots.size()) return false;
  Erase(p, i);
  return true;
}

uint64_t LogIndex::size() const {
  uint64_t n = 0;
  for (const Part& p : parts_) n += p.used;
  return n;
}

uint64_t LogIndex::bytes() const {
  uint64_t n = 0;
  for (const Part& p : parts_) n += p.slots.capacity() * sizeof(uint64_t);
  return n;
}

std::vector<LogIndex::Entry> LogIndex::Entries() const {
  std::vector<Entry> out;
  out.reserve(size());
  for (uint64_t part = 0; part < parts_.size(); ++part) {
    for (uint64_t slot : parts_[part].slots) {
      if (slot != kEmpty) out.push_back({part << 32 | TagOfSlot(slot), static_cast<uint32_t>(slot)});
    }
  }
  return out;
}

void LogIndex::AddEntry(const Entry& e) {
  Insert(parts_[(e.key >> 32) & 63], Slot(static_cast<uint32_t>(e.key), e.location));
}

}  // namespace ps
