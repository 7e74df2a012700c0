// The answer budget: how large one answer of runreaperd may grow, whatever
// the store or /proc holds, so that every client can read it. gRPC's
// default receive limit is 4 MiB (runreaperctl's and most clients'; the
// daemon's own send limit is unbounded); an answer past it fails whole
// ("Received message larger than max"). The budget leaves room below that
// for what is added after the fit: MakeValidUtf8's repair of /proc text
// (at most 4 bytes for each one repaired: a comm is at most 15 bytes) and
// the live overlay of ListRuns (a timestamp per run).
//
// Lists of stored rows are paged within it (ListRuns and ListEvents: the
// store ends a page early, store::ListRunsQuery::max_bytes,
// RunStore::ListEventsPage). Lists of a moment, a /proc walk or a sweep,
// cannot be paged (a later call sees another moment): their answers are
// cut to fit here, first entries first, with a count of what was left off.
#ifndef RUNREAPER_SERVER_RPC_ANSWER_BUDGET_H_
#define RUNREAPER_SERVER_RPC_ANSWER_BUDGET_H_

#include <cstddef>

#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// The one budget: 1 MiB, a quarter of gRPC's default 4 MiB receive limit.
inline constexpr size_t kAnswerBudgetBytes = size_t{1} << 20;
// SweepResponse.proof is cut to this (with a note of how much was cut).
inline constexpr size_t kMaxProofBytes = size_t{64} << 10;

// Each keeps the first entries of each list that fit `budget` bytes
// together (store::AnswerEntryBytes each), in the order named, drops the
// rest and counts them in the answer's *_left_off fields (added to what is
// there). An answer that fits is left as it is. The scalar fields are
// never touched.

// orphans, then zombie_piles.
void FitListOrphans(v1::ListOrphansResponse* answer, size_t budget = kAnswerBudgetBytes);
// proof (cut to kMaxProofBytes first), then survivors, targets, receipts,
// signals.
void FitSweep(v1::SweepResponse* answer, size_t budget = kAnswerBudgetBytes);
// transitions.
void FitReconcile(v1::ReconcileResponse* answer, size_t budget = kAnswerBudgetBytes);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_ANSWER_BUDGET_H_
