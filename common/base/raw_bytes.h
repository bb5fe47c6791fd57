#ifndef PS_COMMON_BASE_RAW_BYTES_H_
#define PS_COMMON_BASE_RAW_BYTES_H_

// Trivially copyable values as raw host-order bytes, for the binary files
// this project writes (common/base/durable_file.h frames, server checkpoints, the
// serialised slice store). Those formats are little-endian, so this header
// refuses to build for another byte order. Thread-safe (no state).

#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

static_assert(std::endian::native == std::endian::little,
              "the project's files are raw little-endian; add byte swapping for this host");

// Appends the bytes of `v` to *out.
template <typename T>
void PutRaw(std::string* out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Appends the bytes of every element of `v` to *out.
template <typename T>
void PutRawArray(std::string* out, absl::Span<const T> v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Reads a T from the front of *in and drops its bytes. Requires
// in->size() >= sizeof(T): the caller checks lengths before it reads.
template <typename T>
T TakeRaw(absl::string_view* in) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v{};
  std::memcpy(&v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return v;
}

}  // namespace ps

#endif  // PS_COMMON_BASE_RAW_BYTES_H_
