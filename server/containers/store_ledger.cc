#include "server/containers/store_ledger.h"

#include <sys/random.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/proto_time.h"
#include "server/containers/attribution.h"

namespace runreaper::server::containers {
namespace {

namespace rt = ::runreaper::scanner::containers;

}  // namespace

absl::StatusOr<std::string> NewNonce() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "getrandom for a claim nonce");
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<std::vector<v1::Run>> StoreLedger::Running() {
  ASSIGN_OR_RETURN(const int64_t version, store_->DataVersion());
  absl::MutexLock lock(&mu_);
  if (version != running_version_) {
    ASSIGN_OR_RETURN(running_, store_->ListRunning());
    running_version_ = version;
  }
  return running_;
}

absl::StatusOr<Claim> StoreLedger::BeforeCreate(const Peer& peer, rt::Runtime runtime,
                                                rt::ObjectKind kind, absl::string_view name) {
  AttributionView view;
  view.procfs = procfs_;
  view.lineage = lineage_.load();
  ASSIGN_OR_RETURN(view.running, Running());
  const Attribution a = Attribute(peer, view);
  ASSIGN_OR_RETURN(std::string nonce, NewNonce());
  v1::Container row;
  row.set_runtime(std::string(rt::RuntimeName(runtime)));
  row.set_kind(std::string(rt::KindName(kind)));
  row.set_name(std::string(name));
  row.set_run_id(a.run_id);
  row.set_run_uid(a.run_uid);
  row.set_attribution(a.run_id.empty() ? a.why : kAttributedByApi);
  row.set_creator_pid(peer.pid);
  row.set_creator_start_time_ticks(peer.start_time_ticks);
  row.set_creator_uid(peer.uid);
  row.set_claim(nonce);
  row.set_state(v1::CONTAINER_STATE_PENDING);
  const absl::Time now = absl::Now();
  row.mutable_created_at()->set_seconds(absl::ToUnixSeconds(now));
  row.mutable_created_at()->set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(now - absl::FromUnixSeconds(absl::ToUnixSeconds(now)))));
  RETURN_IF_ERROR(store_->AddContainerClaim(row).status());
  {
    absl::MutexLock lock(&mu_);
    pending_[nonce] = Pending{kind, std::string(name)};
  }
  base::LogInfo(base::LogFields().Run(a.run_id), rt::RuntimeName(runtime), " ", rt::KindName(kind),
                " create by pid ", peer.pid, ": ", a.run_id.empty() ? "unattributed: " : "", a.why);
  Claim claim;
  claim.nonce = std::move(nonce);
  claim.run_id = a.run_id;
  claim.why = a.why;
  return claim;
}

absl::Status StoreLedger::Created(const Claim& claim, absl::string_view id,
                                  bool labels_have_claim) {
  Pending p{rt::ObjectKind::kContainer, ""};
  bool known = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(claim.nonce);
    if (it != pending_.end()) {
      p = it->second;
      known = true;
    }
  }
  // A volume create of an existing name answers with the existing volume,
  // without our label: it is not the run's to remove.
  const bool existed = known && p.kind == rt::ObjectKind::kVolume && !labels_have_claim;
  absl::Status s =
      store_->SetContainerCreated(claim.nonce, id, p.name, existed ? kVolumeExisted : "").status();
  absl::MutexLock lock(&mu_);
  pending_.erase(claim.nonce);  // in flight until its row is LIVE
  return s;
}

void StoreLedger::Failed(const Claim& claim, bool maybe_created) {
  {
    absl::MutexLock lock(&mu_);
    pending_.erase(claim.nonce);
  }
  if (maybe_created) return;  // the start-up check asks the runtime
  if (absl::Status s = store_->DropContainerClaim(claim.nonce); !s.ok()) {
    base::LogWarning(base::LogFields().Run(claim.run_id), "claim ", claim.nonce,
                     ": cannot drop it (", s.ToString(),
                     "); it stays PENDING until the next start resolves it");
  }
}

bool StoreLedger::InFlight(const std::string& nonce) const {
  absl::MutexLock lock(&mu_);
  return pending_.count(nonce) != 0;
}

absl::Status ResolvePendingRow(store::RunStore& store, const v1::Container& row,
                               const std::vector<std::string>& ids, absl::Time waits_after,
                               PendingOutcome* out) {
  if (ids.empty()) {
    // A create a killed runreaperd forwarded may still be under way in the
    // runtime: a young row waits for its object (the event watch resolves
    // it when it appears, or a later resolution drops it).
    if (proto_time::TimeOf(row.created_at()) > waits_after) {
      ++out->waiting;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(store.DropContainerClaim(row.claim()));
    ++out->dropped;
  } else if (ids.size() == 1) {
    absl::StatusOr<v1::Container> live =
        store.SetContainerCreated(row.claim(), ids.front(), row.name(), "", kAttributedByClaim);
    // Recorded already by another row: that first row stands.
    if (absl::IsAlreadyExists(live.status())) {
      RETURN_IF_ERROR(store.DropContainerClaim(row.claim()));
    } else if (!live.ok()) {
      return live.status();
    }
    ++out->live;
  } else {
    // A nonce is ours and random: several objects with it were made by
    // someone copying the label. None is provably the run's.
    for (const std::string& id : ids) {
      v1::Container u;
      u.set_runtime(row.runtime());
      u.set_kind(row.kind());
      u.set_id(id);
      u.set_attribution(absl::StrCat("claim label on ", ids.size(), " objects"));
      u.set_creator_pid(row.creator_pid());
      u.set_creator_start_time_ticks(row.creator_start_time_ticks());
      u.set_creator_uid(row.creator_uid());
      *u.mutable_created_at() = row.created_at();
      u.set_state(v1::CONTAINER_STATE_LIVE);
      RETURN_IF_ERROR(store.RecordContainer(u).status());
    }
    RETURN_IF_ERROR(store.DropContainerClaim(row.claim()));
    ++out->conflicting;
  }
  return absl::OkStatus();
}

absl::StatusOr<PendingOutcome> ResolvePending(store::RunStore& store, rt::RuntimeApi& api,
                                              const StoreLedger* ledger, absl::Duration settle) {
  store::RunStore::ContainerQuery query;
  query.states = {v1::CONTAINER_STATE_PENDING};
  ASSIGN_OR_RETURN(const std::vector<v1::Container> rows, store.ListContainers(query));
  const std::string runtime(rt::RuntimeName(api.runtime()));
  const absl::Time waits_after =
      settle > absl::ZeroDuration() ? absl::Now() - settle : absl::InfiniteFuture();
  PendingOutcome out;
  absl::Status unreachable;
  for (const v1::Container& row : rows) {
    if (row.runtime() != runtime || row.claim().empty()) continue;
    if (ledger != nullptr && ledger->InFlight(row.claim())) continue;
    if (!unreachable.ok()) {
      ++out.unreachable;
      continue;
    }
    ASSIGN_OR_RETURN(const rt::ObjectKind kind, rt::ParseKind(row.kind()));
    absl::StatusOr<std::vector<std::string>> ids =
        api.ListByLabel(kind, rt::kClaimLabel, row.claim());
    if (!ids.ok()) {
      unreachable = ids.status();
      ++out.unreachable;
      continue;
    }
    RETURN_IF_ERROR(ResolvePendingRow(store, row, *ids, waits_after, &out));
  }
  if (!unreachable.ok()) {
    return absl::UnavailableError(
        absl::StrCat(runtime, ": ", out.unreachable,
                     " pending claim(s) left for later: ", unreachable.message()));
  }
  return out;
}

}  // namespace runreaper::server::containers
