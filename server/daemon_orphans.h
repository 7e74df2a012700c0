// The daemon's orphan side: ListOrphans, Sweep, the sweep after CancelRun and
// the automatic / --once sweeps, all backed by server/sweeper.h. Kept in its
// own library so that runreaperd links with or without the sweeper.
#ifndef RUNREAPER_SERVER_DAEMON_ORPHANS_H_
#define RUNREAPER_SERVER_DAEMON_ORPHANS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/procfs.h"
#include "server/service.h"
#include "store/run_store.h"

namespace runreaper::server {

class OrphanSide {
 public:
  // Neither pointer is owned.
  static std::unique_ptr<OrphanSide> Create(store::RunStore* store,
                                            const scanner::ProcFs* procfs);
  virtual ~OrphanSide() = default;

  // False when this build has no sweeper (the hooks are then empty and the
  // RPCs answer UNIMPLEMENTED).
  virtual bool available() const = 0;
  virtual OrphanHooks hooks() = 0;
  // Sweeps every terminal run with orphans.
  virtual absl::StatusOr<v1::SweepResponse> SweepAll(bool dry_run) = 0;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_DAEMON_ORPHANS_H_
