#ifndef PS_COMMON_WIRE_CODEC_INTERNAL_H_
#define PS_COMMON_WIRE_CODEC_INTERNAL_H_

// What common/wire/codec.cc and common/wire/codec_model.cc (the model spec's part of
// the wire format) share: the errors a decoder throws, which codec.cc's
// entry points turn into statuses, and the helpers that check what a peer
// sent. Not for use outside the codec.

#include <cstdint>
#include <string>

#include "common/model/model_spec.h"
#include "schemas/ps.capnp.h"

namespace ps::codec_internal {

// An enum value a peer sent that this build does not know.
struct BadEnum {
  const char* what;
  uint32_t value;
};

// A header whose fields contradict each other.
struct Malformed {
  std::string what;
};
// A list longer than its cap (common/wire/codec.h).
struct TooLong {
  const char* what;
  size_t size;
  size_t max;
};

// `list`, when it holds at most `max` elements; checked before anything is
// copied out of it.
template <typename List>
List Capped(List list, size_t max, const char* what) {
  if (list.size() > max) throw TooLong{what, list.size(), max};
  return list;
}

template <typename To, typename From>
To CheckedEnum(From value, To max, const char* what) {
  const auto raw = static_cast<uint32_t>(value);
  if (raw > static_cast<uint32_t>(max)) throw BadEnum{what, raw};
  return static_cast<To>(raw);
}

// Text both ways by (data, size): a NUL inside a string must survive.
inline capnp::Text::Reader Txt(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }
inline std::string Str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

// The model spec (its tensors, tables, optimizer, placement and compression).
void Put(const ModelSpec& in, wire::ModelSpec::Builder out);
ModelSpec Get(wire::ModelSpec::Reader in);

}  // namespace ps::codec_internal

#endif  // PS_COMMON_WIRE_CODEC_INTERNAL_H_
