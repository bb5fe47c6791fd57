#ifndef PS_COMMON_BASE_STATUS_MACROS_H_
#define PS_COMMON_BASE_STATUS_MACROS_H_

// The two macros every Status-returning function wants; Abseil 20220623 has
// neither.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PS_CONCAT_INNER_(a, b) a##b
#define PS_CONCAT_(a, b) PS_CONCAT_INNER_(a, b)

// Returns from the current function when `expr` (an absl::Status) is not OK.
#define PS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ps_status_ = (expr);      \
    if (!ps_status_.ok()) return ps_status_; \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or returns its status.
#define PS_ASSIGN_OR_RETURN(lhs, expr) PS_ASSIGN_OR_RETURN_IMPL_(PS_CONCAT_(ps_statusor_, __LINE__), lhs, expr)
#define PS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // PS_COMMON_BASE_STATUS_MACROS_H_
