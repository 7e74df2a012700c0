// KeepProcess without the transport (docs/ORPHANS.md "Leases",
// docs/SECURITY.md "Who may lease what"): validation, the one pinned read of
// the process (pid, start time, real uid, in runreaperd's PID namespace and
// boot) or of the container (through its runtime), the uid rule, the store.
#ifndef RUNREAPER_SERVER_REGISTER_LEASES_H_
#define RUNREAPER_SERVER_REGISTER_LEASES_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/procfs.h"
#include "server/containers/container_sweep.h"
#include "server/metrics/metrics.h"
#include "server/register/caller_policy.h"
#include "server/self/daemon_self.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

class Leaser {
 public:
  // None of the pointers is owned.
  // `runtimes`: the container runtimes a container lease is resolved
  // through (server/containers/container_sweep.h; not owned).
  Leaser(store::RunStore* store, const scanner::ProcFs* procfs, const DaemonSelf* self,
         absl::Duration max_lease, Metrics* metrics = Metrics::Off(),
         containers::RuntimeMap runtimes = {});

  // Leases `request.pid` for `caller` until now + duration. Errors:
  // - INVALID_ARGUMENT naming the field (pid, duration — past --max_lease
  //   too —, reason);
  // - FAILED_PRECONDITION: the caller is in another PID namespace than
  //   runreaperd (its pid would name another process here);
  // - NOT_FOUND: no such process (or a zombie: nothing left to keep);
  // - PERMISSION_DENIED: a non-root caller and a process whose real uid is
  //   not the caller's, or whose uid cannot be read;
  // - the store's errors.
  // With `request.container` set (pid 0) a container is leased instead
  // (docs/ORPHANS.md "Leases"): resolved through its runtime
  // (container_runtime, "docker" by default: id, unique id prefix or name)
  // to its full id, and kept from every sweep until then. Root may lease
  // any container; another uid only one attributed to a run of its own
  // (the row's run_uid), never an unattributed one (PERMISSION_DENIED).
  // NOT_FOUND: the runtime has no such container; FAILED_PRECONDITION:
  // runreaperd has no API for that runtime; UNAVAILABLE: it cannot be
  // reached.
  absl::StatusOr<v1::Lease> Keep(const Caller& caller, const v1::KeepProcessRequest& request) const;

 private:
  absl::StatusOr<v1::Lease> KeepContainer(const Caller& caller,
                                          const v1::KeepProcessRequest& request) const;
  absl::StatusOr<v1::Lease> Store(const Caller& caller, const v1::KeepProcessRequest& r,
                                  v1::Lease lease) const;

  store::RunStore* store_;
  const scanner::ProcFs* procfs_;
  const DaemonSelf* self_;
  absl::Duration max_lease_;
  Metrics* metrics_;
  containers::RuntimeMap runtimes_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_LEASES_H_
