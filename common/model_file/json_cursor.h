#ifndef PS_COMMON_MODEL_FILE_JSON_CURSOR_H_
#define PS_COMMON_MODEL_FILE_JSON_CURSOR_H_

// Internal to common/model_file: a cursor over JSON text (RFC 8259) for a
// reader that knows the shape it expects, such as the safetensors header.
// It builds no tree, so what it allocates is bounded by what the caller
// keeps. (common/base/json.h only writes JSON.) Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::internal {

class JsonCursor {
 public:
  // `name` names the text in errors: "safetensors header".
  JsonCursor(absl::string_view text, absl::string_view name) : text_(text), name_(name) {}

  // Skips whitespace; consumes `c` and returns true when it comes next.
  bool Eat(char c);
  // As Eat, but an error when `c` does not come next.
  absl::Status Expect(char c);
  // True when only whitespace is left.
  bool AtEnd();

  // A string, its escapes decoded (\uXXXX, surrogate pairs included, to UTF-8).
  absl::StatusOr<std::string> String();
  // A non-negative integer without fraction or exponent, at most 2^64 - 1.
  absl::StatusOr<uint64_t> Uint64();

  // An array: '[', `element` for each element (it consumes one value), ']'.
  absl::Status Array(absl::FunctionRef<absl::Status()> element);
  // An object: '{', then for each member its key is read and `member` called
  // with it to consume the value, '}'.
  absl::Status Object(absl::FunctionRef<absl::Status(std::string key)> member);

  // kDataLoss "NAME: WHAT at byte N".
  absl::Status Error(absl::string_view what) const;

 private:
  void SkipSpace();
  absl::StatusOr<uint32_t> Hex4();
  absl::Status Escape(std::string* out);

  absl::string_view text_;
  absl::string_view name_;
  size_t pos_ = 0;
};

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_JSON_CURSOR_H_
