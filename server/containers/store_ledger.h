// The creation ledger over the run store (server/containers/creation_ledger.h):
// a create is attributed (server/containers/attribution.h) and recorded
// PENDING under a fresh nonce before the runtime sees it, made LIVE before
// the client sees the answer, and, after a kill -9 in between, resolved at
// the next start by the claim label the nonce was stamped as
// (docs/DESIGN.md "Containers").
#ifndef RUNREAPER_SERVER_CONTAINERS_STORE_LEDGER_H_
#define RUNREAPER_SERVER_CONTAINERS_STORE_LEDGER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/lineage.h"
#include "scanner/procfs.h"
#include "server/containers/creation_ledger.h"
#include "store/run_store.h"

namespace runreaper::server::containers {

// 128 random bits (getrandom) as 32 lowercase hex digits. INTERNAL when the
// kernel gives none.
absl::StatusOr<std::string> NewNonce();

// The attribution text of a row attributed through the proxy, and of one
// resolved after a restart by its claim label.
inline constexpr char kAttributedByApi[] = "api";
inline constexpr char kAttributedByClaim[] = "claim";
inline constexpr char kVolumeExisted[] = "volume existed before this create";

class StoreLedger : public CreationLedger {
 public:
  // Nothing owned; `lineage` may be null (lineage off, or not started
  // yet: SetLineage).
  StoreLedger(store::RunStore* store, const scanner::ProcFs* procfs,
              scanner::LineageTracker* lineage)
      : store_(store), procfs_(procfs), lineage_(lineage) {}

  // The tracker attribution asks from now on (the daemon starts lineage
  // after the proxies); it must outlive the ledger. Safe while creates run.
  void SetLineage(scanner::LineageTracker* lineage) { lineage_.store(lineage); }

  // Attribution over the RUNNING runs, then AddContainerClaim (PENDING).
  // Errors: the store's (the create is refused), or no random nonce.
  absl::StatusOr<Claim> BeforeCreate(const Peer& peer, scanner::containers::Runtime runtime,
                                     scanner::containers::ObjectKind kind,
                                     absl::string_view name) override;
  // SetContainerCreated; a volume answered without our claim label existed
  // before: recorded unattributed (kVolumeExisted), never the run's.
  absl::Status Created(const Claim& claim, absl::string_view id, bool labels_have_claim) override;
  // DropContainerClaim unless `maybe_created` (then the start-up check
  // resolves the PENDING row through the runtime).
  void Failed(const Claim& claim, bool maybe_created) override;

  // Whether a create under `nonce` is between BeforeCreate and
  // Created/Failed here: its object may not exist yet, so a resolution
  // must leave its PENDING row alone.
  bool InFlight(const std::string& nonce) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    scanner::containers::ObjectKind kind;
    std::string name;
  };
  // The RUNNING runs, re-read only when the store changed since.
  absl::StatusOr<std::vector<v1::Run>> Running() ABSL_LOCKS_EXCLUDED(mu_);

  store::RunStore* store_;
  const scanner::ProcFs* procfs_;
  std::atomic<scanner::LineageTracker*> lineage_;
  mutable absl::Mutex mu_;
  int64_t running_version_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<v1::Run> running_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);  // by nonce
};

// What ResolvePending did with the PENDING rows of one runtime.
struct PendingOutcome {
  int live = 0;         // exactly one object carried the claim: LIVE
  int dropped = 0;      // no object carries it: the create never happened
  int conflicting = 0;  // several objects carry it: each unattributed
  int unreachable = 0;  // the runtime did not answer: still PENDING
  int waiting = 0;      // no object yet, but the row is younger than the settle: still PENDING
};

// Resolves every PENDING row of `api`'s runtime through the objects that
// carry its claim label (ListByLabel(kind, io.runreaper.claim, nonce)), by
// ResolvePendingRow. A runtime that does not answer leaves the rest PENDING
// (UNAVAILABLE returned after counting them, to retry when it appears).
// A row whose create `ledger` (optional) has in flight is left alone. A row
// with no object that was written less than `settle` ago waits (a create a
// killed runreaperd forwarded may still be under way in the runtime; zero:
// none waits). Errors: the store's; UNAVAILABLE as said.
absl::StatusOr<PendingOutcome> ResolvePending(store::RunStore& store,
                                              scanner::containers::RuntimeApi& api,
                                              const StoreLedger* ledger = nullptr,
                                              absl::Duration settle = absl::ZeroDuration());

// One PENDING `row` resolved through `ids`, the runtime's objects that
// carry its claim label: exactly one -> LIVE with attribution "claim";
// several -> each recorded unattributed ("claim label on N objects") and the
// claim dropped; none -> dropped, unless the row was written after
// `waits_after` (then it waits). Counted in `out`. Errors: the store's.
absl::Status ResolvePendingRow(store::RunStore& store, const v1::Container& row,
                               const std::vector<std::string>& ids, absl::Time waits_after,
                               PendingOutcome* out);

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_STORE_LEDGER_H_
