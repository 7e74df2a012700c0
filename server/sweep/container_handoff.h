// The hand-off of podman's conmons to podman (docs/DESIGN.md "Containers"):
// a sweep's listings mark every member that is a confirmed conmon
// (scanner/containers/conmon.h), or descends from one (the container's
// processes, conmon's exit command), as handed: never a target of the
// ladder, never a survivor. Its container is then the run's (a process of
// it is the run's member by the same rules the ladder acts on), and after
// the process ladder it is stopped through podman with the ladder's grace
// (its own stop signal, then SIGKILL, which conmon records as the
// container's exit) and removed with its anonymous volumes, by the
// container step's own StopAndRemoveContainer
// (server/containers/container_sweep.h); one CONTAINER_REMOVED or
// CONTAINER_KEPT event each, naming conmon's pid.
//
// A handed member that is kept (RUNREAPER_KEEP, a lease, a keep run), or a
// container labelled io.runreaper.keep=1, leaves its container running.
#ifndef RUNREAPER_SERVER_SWEEP_CONTAINER_HANDOFF_H_
#define RUNREAPER_SERVER_SWEEP_CONTAINER_HANDOFF_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/containers/conmon.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/membership.h"
#include "scanner/procfs.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

class ContainerHandoff {
 public:
  // `podman` null: nothing is handed (a conmon is an ordinary process).
  // Neither pointer is owned.
  ContainerHandoff(const scanner::ProcFs* procfs, scanner::containers::RuntimeApi* podman,
                   scanner::containers::ConmonOptions options = {});

  // Marks handed every member of `members` that is a confirmed conmon or
  // descends from one (its ppid chain, through the listing and then /proc,
  // reaches a process podman confirms as a container's conmon; only
  // processes named conmon are asked about, each once per sweep), and keeps
  // that container against the run `specs[run_index]` names (the first
  // such member's run).
  void Mark(const std::vector<scanner::RunSpec>& specs, scanner::Membership* members);

  // A container found by its conmon.
  struct Handed {
    std::string run_id;
    scanner::containers::Conmon conmon;
    bool kept = false;  // a handed member of it was kept
    std::string kept_why;
  };
  // By container id.
  const std::map<std::string, Handed>& containers() const { return containers_; }

  // What StopAndRemove did: one row and one event per container, and the
  // runs (by id) of the containers not removed (an error, or kept).
  struct Outcome {
    std::vector<v1::Container> rows;
    std::vector<v1::Event> events;
    std::map<std::string, int> left_of;
    // How many of `run_id`'s handed containers were not removed.
    int LeftOf(const std::string& run_id) const;
    // "N podman container(s) handed to podman[ (M not removed)]: NAME
    // STATE (detail); ..." for `run_id`'s, or "" when it had none.
    std::string Summary(const std::string& run_id) const;
  };
  // Stops (with `grace`) and removes every handed container that is not
  // kept; a container already gone counts as removed ("GONE"). With a
  // `store`, each is first recorded against its run (RunStore::RecordContainer,
  // attribution "conmon", LIVE) and its outcome then stored with its
  // CONTAINER_REMOVED / CONTAINER_KEPT event (UpdateContainer); a
  // container the store already holds under another attribution (the API
  // proxy's row) or another run is left to that row (the sweep's container
  // step), not acted on here.
  Outcome StopAndRemove(absl::Duration grace, store::RunStore* store = nullptr);

 private:
  const scanner::ProcFs* const procfs_;
  scanner::containers::RuntimeApi* const podman_;
  scanner::containers::ConmonRecognizer recognizer_;
  std::map<std::string, Handed> containers_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_CONTAINER_HANDOFF_H_
