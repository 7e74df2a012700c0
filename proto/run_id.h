// Run ids are namespaced by the uid that registers them (docs/SECURITY.md
// "Run ids"), so that an id one uid chose never blocks, nor reveals, another
// uid's run of the same name:
//
// - a run registered by root (unix uid 0, or the TCP admin token) is stored
//   under the id sent ("ci-job-5678");
// - a run registered by a non-root unix caller U is stored under the
//   canonical id "<id>@u<U>" ("ci-job-5678@u1001"); U may send either form.
//
// An id ending in "@u<digits>" is reserved for the second kind: root may not
// register one, and U only its own "@u<U>". Lookups (GetRun, WaitRun,
// FinishRun, Sweep RUN, ...) resolve a non-root caller's short id to its own
// canonical one; an id already ending in "@u<digits>", and every id root
// sends, is taken as is, except that "<id>@u0" names root's run "<id>" (the
// only way a non-root caller can name it). Answers carry the stored id.
//
// Pure functions of the contract, for runreaperd and its clients alike
// (runreaperctl exec puts the canonical id in its child's environment
// before it registers).
#ifndef RUNREAPER_PROTO_RUN_ID_H_
#define RUNREAPER_PROTO_RUN_ID_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace runreaper {

// The longest run id (runreaper.v1 RegisterRunRequest.run_id: 1..256 bytes),
// a non-root caller's canonical id included.
inline constexpr size_t kMaxRunIdBytes = 256;

// Whether `run_id` ends in "@u" followed by one or more ASCII digits (any
// number of them, leading zeros included): the form reserved for the runs of
// non-root callers.
bool HasUidSuffix(absl::string_view run_id);

// The id under which a run registered by `uid` as `run_id` is stored: `run_id`
// for uid 0, and for an id that already ends in "@u<uid>" (uid in decimal,
// without leading zeros: the caller's own canonical form); otherwise
// `run_id` + "@u" + uid. Checks nothing: see RegisteredRunId.
std::string CanonicalRunId(absl::string_view run_id, uint32_t uid);

// The id a registration of `run_id` by `uid` stores (CanonicalRunId), or
// INVALID_ARGUMENT, the message starting "run_id: " and never quoting the id:
// - root (uid 0) sent an id ending in "@u<digits>" (reserved for the runs of
//   non-root callers);
// - a non-root uid sent an id ending in "@u<digits>" other than its own
//   "@u<uid>" (another uid's form);
// - the canonical id is longer than kMaxRunIdBytes.
absl::StatusOr<std::string> RegisteredRunId(absl::string_view run_id, uint32_t uid);

// The stored id that a lookup of `run_id` by `uid` names, for every caller:
// - "<id>@u0" (exactly "@u0", `id` not empty): root's run "<id>" (root's
//   runs carry no suffix, so a non-root caller names them this way);
// - any other id ending in "@u<digits>" (another uid's canonical id, or the
//   caller's own): as sent. Every run may be read by every caller;
// - otherwise `run_id` as sent for uid 0, and CanonicalRunId(run_id, uid),
//   the caller's own run of that short id, for any other uid.
std::string ResolveRunId(absl::string_view run_id, uint32_t uid);

}  // namespace runreaper

#endif  // RUNREAPER_PROTO_RUN_ID_H_
