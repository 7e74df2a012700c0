// OrphanSide for a build without server/sweeper: every orphan RPC answers
// UNIMPLEMENTED and --sweep reports that it is not available.
#include "server/daemon_orphans.h"

namespace runreaper::server {
namespace {

class NoSweeper : public OrphanSide {
 public:
  bool available() const override { return false; }
  OrphanHooks hooks() override { return {}; }
  absl::StatusOr<v1::SweepResponse> SweepAll(bool) override {
    return absl::UnimplementedError("this runreaperd was built without the sweeper");
  }
};

}  // namespace

std::unique_ptr<OrphanSide> OrphanSide::Create(store::RunStore*,
                                               const scanner::ProcFs*) {
  return std::make_unique<NoSweeper>();
}

}  // namespace runreaper::server
