#include "server/daemon_orphans.h"

#include "server/sweeper.h"

namespace runreaper::server {
namespace {

class SweeperSide : public OrphanSide {
 public:
  SweeperSide(store::RunStore* store, const scanner::ProcFs* procfs)
      : sweeper_(store, procfs) {}

  bool available() const override { return true; }

  OrphanHooks hooks() override {
    OrphanHooks h;
    h.list_orphans = [this](const std::string& run_id) {
      return sweeper_.ListOrphans(run_id);
    };
    h.sweep = [this](const v1::SweepRequest& request) {
      return sweeper_.Sweep(request);
    };
    h.sweep_run = [this](const std::string& run_id) {
      return sweeper_.SweepRun(run_id);
    };
    return h;
  }

  absl::StatusOr<v1::SweepResponse> SweepAll(bool dry_run) override {
    v1::SweepRequest request;
    request.set_dry_run(dry_run);
    return sweeper_.Sweep(request);
  }

 private:
  Sweeper sweeper_;
};

}  // namespace

std::unique_ptr<OrphanSide> OrphanSide::Create(store::RunStore* store,
                                               const scanner::ProcFs* procfs) {
  return std::make_unique<SweeperSide>(store, procfs);
}

}  // namespace runreaper::server
