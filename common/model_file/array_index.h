#ifndef PS_COMMON_MODEL_FILE_ARRAY_INDEX_H_
#define PS_COMMON_MODEL_FILE_ARRAY_INDEX_H_

// Internal to common/model_file: a reader's arrays in file order, found by
// name. Not thread-safe while being filled; const use is thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_file/array_spec.h"

namespace ps::internal {

class ArrayIndex {
 public:
  // Appends `info`; false (and nothing added) when its name is already there.
  bool Add(ArrayInfo info);

  const std::vector<ArrayInfo>& arrays() const { return arrays_; }
  // The array called `name`, or null.
  const ArrayInfo* Find(absl::string_view name) const;

  // The index of `name` for a read of bytes [offset, offset + n): kNotFound
  // "PATH has no array 'NAME'", kOutOfRange when the range passes its end.
  absl::StatusOr<size_t> Locate(const std::string& path, absl::string_view name, uint64_t offset, uint64_t n) const;

 private:
  std::vector<ArrayInfo> arrays_;
  absl::flat_hash_map<std::string, size_t> by_name_;
};

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_ARRAY_INDEX_H_
