// The sweeper's container part (docs/DESIGN.md "Containers"): which runs
// have containers left, the container step of a sweep after its process
// ladder (server/containers/container_sweep.h), the containers a listing
// shows, and the census of what is left behind. The run ids it is given
// are terminal runs'; no process is signalled here.
#ifndef RUNREAPER_SERVER_SWEEP_SWEEP_CONTAINERS_H_
#define RUNREAPER_SERVER_SWEEP_SWEEP_CONTAINERS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runreaper/v1/runreaper.pb.h"
#include "server/containers/container_sweep.h"
#include "server/metrics/metrics.h"
#include "store/run_store.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// LIVE rows of `runs`, by run id (one store read; runs without any are
// absent).
using RowsByRun = std::map<std::string, std::vector<v1::Container>>;
absl::StatusOr<RowsByRun> LiveRowsOf(store::RunStore& store, const std::vector<v1::Run>& runs);

// The run ids of `rows`.
std::set<std::string> RunsOf(const RowsByRun& rows);

// The container step of a sweep: every row of `rows` through
// containers::SweepContainers (containers, then networks, then volumes),
// each outcome added to response->containers; returns the runs that still
// have a LIVE row (they are not marked swept clean).
std::set<std::string> SweepRowsOf(store::RunStore& store, const containers::RuntimeMap& runtimes,
                                  const RowsByRun& rows, absl::Duration grace,
                                  v1::SweepResponse* response);

// After a sweep's container step: each run of `with_containers` that had
// no process ladder (not in `with_ladder`) gets a SWEEP_FINISHED event
// counting what `response`'s container outcomes did for it, and those with
// no LIVE row (not in `left`) are marked swept, in one transaction; the
// response's proof gains what the step did. Returns the ids marked (none
// when the store failed: logged).
std::vector<std::string> CloseContainerRuns(store::RunStore& store,
                                            const std::set<std::string>& with_ladder,
                                            const std::set<std::string>& with_containers,
                                            const std::set<std::string>& left,
                                            v1::SweepResponse* response);

// A dry run's or a listing's containers: `rows` as they are (a dry run
// acts on nothing), those of `view_uid`'s runs only when set.
void AddRows(const RowsByRun& rows, std::optional<uint32_t> view_uid,
             google::protobuf::RepeatedPtrField<v1::Container>* out);

// ListOrphans' containers: the LIVE rows of run `run_id` when it is
// terminal (NOT_FOUND for an unknown run), or with `run_id` empty of every
// terminal unswept run plus the unattributed ones; each checked through
// its runtime (containers::CheckListed: a gone one is stored GONE and left
// out). A non-root `view_uid` sees only rows whose run_uid is its uid.
absl::StatusOr<std::vector<v1::Container>> ListedContainers(store::RunStore& store,
                                                            const containers::RuntimeMap& runtimes,
                                                            const std::string& run_id,
                                                            std::optional<uint32_t> view_uid);

// runreaper_containers_left: LIVE rows of terminal runs plus unattributed
// ones, by (runtime, kind).
absl::StatusOr<Metrics::ContainersLeft> CountContainersLeft(store::RunStore& store);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_SWEEP_SWEEP_CONTAINERS_H_
