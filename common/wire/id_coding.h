#ifndef PS_COMMON_WIRE_ID_CODING_H_
#define PS_COMMON_WIRE_ID_CODING_H_

// Table row ids on the wire: a table whose rows travel
// compressed sends each shard's ids in ascending order, and then as the
// differences between neighbours, in LEB128 varints (7 bits a byte), where
// that is shorter than 8 bytes an id. Ids that are small integers (an
// item's or a user's number) shrink to a byte or two each: a shard of
// 8,192 ids out of 10^7 has neighbours about 1,200 apart (2 bytes).
// Ids hashed over the 64-bit space gain little (their neighbours are
// 2^64 / n apart): up to 2^15 of them are not sorted and travel as they
// are (worker/client/kv_client_rows.cc), more at about 7 bytes an id.
//
// An id section: one byte, the coding, then the ids:
//   kRawIds    n little-endian uint64 ids, in any order
//   kDeltaIds  the first id, then each id minus the one before it (>= 1:
//              ascending, distinct), each a LEB128 varint of at most 10
//              bytes whose value fits 64 bits
// Decoding refuses a section that does not match its bytes (kInvalidArgument
// naming the problem) and leaves `out` as it was then.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

inline constexpr uint8_t kRawIds = 0;
inline constexpr uint8_t kDeltaIds = 1;

// Appends the delta-coded section of `ids` to *out and returns true where
// they ascend strictly and it is shorter than the raw one; appends nothing
// and returns false otherwise.
bool AppendDeltaIds(absl::Span<const uint64_t> ids, std::string* out);

// Appends the id section of `ids` to *out: delta coded where `delta` is
// set and AppendDeltaIds takes them, raw otherwise.
void AppendIds(absl::Span<const uint64_t> ids, bool delta, std::string* out);

// Reads the id section at the start of `in` holding `count` ids into *out
// (replaced); returns the bytes it took. The rest of `in` is left to the caller.
absl::StatusOr<size_t> DecodeIds(absl::string_view in, uint64_t count, std::vector<uint64_t>* out);

// Reads a delta-coded section (what AppendDeltaIds writes, nothing else)
// that is the whole of `in`, however many ids it holds up to `max_ids`.
absl::Status DecodeDeltaIds(absl::string_view in, uint64_t max_ids, std::vector<uint64_t>* out);

}  // namespace ps

#endif  // PS_COMMON_WIRE_ID_CODING_H_
