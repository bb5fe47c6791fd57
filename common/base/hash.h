#ifndef PS_COMMON_BASE_HASH_H_
#define PS_COMMON_BASE_HASH_H_

// The stable 64-bit hashes the system's placement and initial values depend
// on: their outputs are part of the format (a row's server, a row's initial
// values), so they never change between builds. Thread-safe (pure).

#include <cstdint>
#include <string_view>

namespace ps {

// The splitmix64 finaliser: a bijection on uint64 whose output bits each
// depend on every input bit (0 maps to 0).
constexpr uint64_t SplitMix64Finalize(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One splitmix64 step: the golden-ratio increment, then the finaliser.
constexpr uint64_t Mix64(uint64_t x) { return SplitMix64Finalize(x + 0x9e3779b97f4a7c15ULL); }

// FNV-1a over the bytes of `s`.
constexpr uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

}  // namespace ps

#endif  // PS_COMMON_BASE_HASH_H_
