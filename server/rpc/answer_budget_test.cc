#include "server/rpc/answer_budget.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

v1::Orphan OrphanOf(int pid) {
  v1::Orphan o;
  o.set_run_id(std::string(256, 'r'));
  o.set_pid(pid);
  o.set_comm("stubborn");
  o.set_lease_reason(std::string(256, 'l'));
  return o;
}

v1::Event SignalOf(int pid) {
  v1::Event e;
  e.set_event_id(pid);
  e.set_type(v1::EVENT_TYPE_SIGNAL);
  e.set_run_id(std::string(256, 'r'));
  e.set_pid(pid);
  e.set_detail(std::string(200, 'd'));
  return e;
}

// 10,000 orphans of 256-byte run ids (about 5.5 MB, past gRPC's 4 MiB
// limit) become the first ones that fit the budget, in order, and a count.
TEST(AnswerBudgetTest, OrphansPastTheBudgetAreCutAndCounted) {
  v1::ListOrphansResponse a;
  for (int pid = 2; pid < 10002; ++pid) *a.add_orphans() = OrphanOf(pid);
  v1::ZombiePile* pile = a.add_zombie_piles();
  pile->set_run_id("r");
  a.set_zombie_piles_left_off(3);
  a.set_from_lineage(true);
  ASSERT_GT(a.ByteSizeLong(), size_t{4} << 20);
  FitListOrphans(&a);
  EXPECT_LE(a.ByteSizeLong(), kAnswerBudgetBytes);
  ASSERT_GT(a.orphans_size(), 1000);
  EXPECT_EQ(a.orphans_size() + a.orphans_left_off(), 10000);
  for (int i = 0; i < a.orphans_size(); ++i) ASSERT_EQ(a.orphans(i).pid(), i + 2);
  // The pile is kept when it fits what the orphans left; counted either way.
  EXPECT_EQ(a.zombie_piles_size() + a.zombie_piles_left_off(), 4);
  EXPECT_TRUE(a.from_lineage());
}

TEST(AnswerBudgetTest, AnAnswerThatFitsIsLeftAsItIs) {
  v1::ListOrphansResponse a;
  for (int pid = 2; pid < 12; ++pid) *a.add_orphans() = OrphanOf(pid);
  const std::string before = a.SerializeAsString();
  FitListOrphans(&a);
  EXPECT_EQ(a.SerializeAsString(), before);
  v1::SweepResponse s;
  *s.add_targets() = OrphanOf(2);
  *s.add_signals() = SignalOf(2);
  s.set_proof("0 survivors (proven: cgroup empty)");
  const std::string sweep_before = s.SerializeAsString();
  FitSweep(&s);
  EXPECT_EQ(s.SerializeAsString(), sweep_before);
}

// A sweep of many processes: survivors first, then targets, receipts and
// signals; the long proof is cut; the flags stay.
TEST(AnswerBudgetTest, SweepKeepsSurvivorsFirstAndCountsTheRest) {
  v1::SweepResponse a;
  for (int pid = 2; pid < 4002; ++pid) {
    *a.add_targets() = OrphanOf(pid);
    *a.add_signals() = SignalOf(pid);
    v1::KillReceipt* r = a.add_receipts();
    r->set_run_id(std::string(256, 'r'));
    r->set_pid(pid);
  }
  for (int pid = 2; pid < 12; ++pid) *a.add_survivors() = OrphanOf(pid);
  std::string proof;
  while (proof.size() < 200000) absl::StrAppend(&proof, "run ", proof.size(), ": still there; ");
  a.set_proof(proof);
  a.set_proven(false);
  ASSERT_GT(a.ByteSizeLong(), size_t{4} << 20);
  FitSweep(&a);
  EXPECT_LE(a.ByteSizeLong(), kAnswerBudgetBytes);
  EXPECT_EQ(a.survivors_size(), 10);
  EXPECT_EQ(a.survivors_left_off(), 0);
  EXPECT_EQ(a.targets_size() + a.targets_left_off(), 4000);
  EXPECT_EQ(a.receipts_size() + a.receipts_left_off(), 4000);
  EXPECT_EQ(a.signals_size() + a.signals_left_off(), 4000);
  EXPECT_GT(a.targets_size(), 0);
  EXPECT_GT(a.signals_left_off(), 0);
  EXPECT_LE(a.proof().size(), kMaxProofBytes);
  EXPECT_EQ(a.proof().substr(0, 100), proof.substr(0, 100));
  EXPECT_NE(a.proof().find("more bytes)"), std::string::npos);
}

TEST(AnswerBudgetTest, ReconcileTransitionsAreCutAndCounted) {
  v1::ReconcileResponse a;
  for (int i = 0; i < 20000; ++i) {
    v1::Transition* t = a.add_transitions();
    t->set_run_id(absl::StrCat(std::string(250, 't'), i));
  }
  a.set_examined(20000);
  ASSERT_GT(a.ByteSizeLong(), size_t{4} << 20);
  FitReconcile(&a);
  EXPECT_LE(a.ByteSizeLong(), kAnswerBudgetBytes);
  EXPECT_EQ(a.transitions_size() + a.transitions_left_off(), 20000);
  EXPECT_EQ(a.examined(), 20000);
}

}  // namespace
}  // namespace runreaper::server
