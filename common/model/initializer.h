#ifndef PS_COMMON_MODEL_INITIALIZER_H_
#define PS_COMMON_MODEL_INITIALIZER_H_

// Initial values of a tensor, computed element by element from a counter-based
// generator: element i of a tensor gets the same value whichever slice or
// server computes it. Thread-safe (no state).

#include <cstdint>

#include "absl/types/span.h"
#include "common/model/model_spec.h"

namespace ps {

// Writes the initial values of elements [offset, offset + out.size()) of
// `tensor` into `out`. Requires tensor.Validate().ok() and the range to lie
// inside the tensor.
void FillInitialValues(const TensorSpec& tensor, uint64_t offset, absl::Span<float> out);

// Writes the initial row `id` of `table` (table.dim floats) into `out`.
// Depends only on (table.init, table.name, id): the same on every server and
// after every restart. Requires table.Validate().ok() and out.size() == dim.
void FillInitialRow(const TableSpec& table, uint64_t id, absl::Span<float> out);

}  // namespace ps

#endif  // PS_COMMON_MODEL_INITIALIZER_H_
