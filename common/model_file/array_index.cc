#include "common/model_file/array_index.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ps::internal {

bool ArrayIndex::Add(ArrayInfo info) {
  if (!by_name_.emplace(info.name, arrays_.size()).second) return false;
  arrays_.push_back(std::move(info));
  return true;
}

const ArrayInfo* ArrayIndex::Find(absl::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &arrays_[it->second];
}

absl::StatusOr<size_t> ArrayIndex::Locate(const std::string& path, absl::string_view name, uint64_t offset,
                                          uint64_t n) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat(path, " has no array '", absl::CHexEscape(name), "'"));
  }
  const ArrayInfo& info = arrays_[it->second];
  if (offset > info.bytes || n > info.bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(path, ": array '", absl::CHexEscape(name), "': bytes [", offset, ", +", n,
                                              ") pass its end (", info.bytes, " bytes)"));
  }
  return it->second;
}

}  // namespace ps::internal
