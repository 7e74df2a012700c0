// Small Status helpers missing from Abseil 20220623 (no status_macros.h).
#ifndef RUNREAPER_BASE_STATUS_MACROS_H_
#define RUNREAPER_BASE_STATUS_MACROS_H_

#include <cerrno>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RR_CONCAT_INNER_(a, b) a##b
#define RR_CONCAT_(a, b) RR_CONCAT_INNER_(a, b)

// Returns from the current function when `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                                       \
  do {                                                              \
    const ::absl::Status RR_CONCAT_(rr_status_, __LINE__) = (expr); \
    if (!RR_CONCAT_(rr_status_, __LINE__).ok()) {                   \
      return RR_CONCAT_(rr_status_, __LINE__);                      \
    }                                                               \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F());` declares x from an OK StatusOr, otherwise
// returns its status. Not usable as the sole statement of an unbraced if.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  RR_ASSIGN_OR_RETURN_IMPL_(RR_CONCAT_(rr_statusor_, __LINE__), lhs, rexpr)

#define RR_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) {                                 \
    return std::move(statusor).status();                \
  }                                                     \
  lhs = *std::move(statusor)

#endif  // RUNREAPER_BASE_STATUS_MACROS_H_
