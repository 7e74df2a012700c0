#include "tools/bench/bench_store.h"

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runreaper/v1/runreaper.pb.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "store/run_store.h"
#include "tools/bench/bench_util.h"

namespace runreaper::bench {

void PopulateRuns(const std::string& db, const std::vector<int>& pids, int n, bool finish,
                  bool keep) {
  store::StoreOptions o;
  o.synchronous = store::StoreOptions::Sync::kNormal;
  absl::StatusOr<std::unique_ptr<store::RunStore>> s = store::RunStore::Open(db, o);
  if (!s.ok()) Die(s.status().ToString());
  scanner::ProcFs procfs;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<scanner::Identity> id = procfs.CaptureIdentity(pids[i % pids.size()]);
    if (!id.ok()) Die(id.status().ToString());
    v1::Run run;
    run.set_run_id(absl::StrCat("bench-", i));
    scanner::SetIdentity(*id, &run);
    run.set_cgroup("");
    run.set_keep(keep);
    if (!(*s)->Register(run).ok()) Die("register " + run.run_id());
    if (finish && !(*s)->Finish(run.run_id(), 0).ok()) Die("finish " + run.run_id());
  }
}

}  // namespace runreaper::bench
