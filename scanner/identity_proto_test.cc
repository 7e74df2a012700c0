#include "scanner/identity_proto.h"

#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "scanner/identity.h"

namespace runreaper::scanner {
namespace {

namespace v1 = ::runreaper::v1;

Identity Full() {
  Identity id;
  id.pid = 4242;
  id.start_time = 987654321;
  id.pidns_inode = 4026531836;
  id.boot_id = "4a8c1d2e-0000-4000-8000-0123456789ab";
  id.pgid = 4242;
  id.sid = 4200;
  id.uid = 1000;
  id.comm = "make";
  id.cgroup = "/runreaper/r1";
  return id;
}

TEST(IdentityProtoTest, RunRoundTripKeepsEveryField) {
  v1::Run run;
  SetIdentity(Full(), &run, CgroupField::kCopy);
  EXPECT_EQ(run.pid(), 4242);
  EXPECT_EQ(run.start_time_ticks(), 987654321u);
  EXPECT_EQ(run.pidns_inode(), 4026531836u);
  EXPECT_EQ(run.boot_id(), "4a8c1d2e-0000-4000-8000-0123456789ab");
  EXPECT_EQ(run.pgid(), 4242);
  EXPECT_EQ(run.sid(), 4200);
  ASSERT_TRUE(run.has_uid());
  EXPECT_EQ(run.uid(), 1000u);
  EXPECT_EQ(run.comm(), "make");
  EXPECT_EQ(run.cgroup(), "/runreaper/r1");
  EXPECT_EQ(IdentityOf(run), Full());
}

TEST(IdentityProtoTest, RequestRoundTripKeepsEveryField) {
  v1::RegisterRunRequest req;
  SetIdentity(Full(), &req, CgroupField::kCopy);
  EXPECT_TRUE(req.has_pgid() && req.has_sid() && req.has_pidns_inode() &&
              req.has_start_time_ticks() && req.has_boot_id() && req.has_uid() && req.has_comm() &&
              req.has_cgroup());
  EXPECT_EQ(IdentityOf(req), Full());
}

// A leader from a child PID namespace: the record keeps the ids as sent and
// the translation (host) runreaperd found; a request never carries one.
TEST(IdentityProtoTest, HostTranslationIsARecordsOnly) {
  Identity id = Full();
  id.pid = 5;
  id.pidns_inode = 4026532178;
  id.host.pid = 81234;
  id.host.pidns_inode = 4026531836;
  id.host.start_time = id.start_time;
  id.host.boot_id = id.boot_id;
  v1::Run run;
  SetIdentity(id, &run, CgroupField::kCopy);
  EXPECT_EQ(run.pid(), 5);
  EXPECT_EQ(run.host_pid(), 81234);
  EXPECT_EQ(run.host_pidns_inode(), 4026531836u);
  EXPECT_EQ(IdentityOf(run), id);
  v1::RegisterRunRequest req;
  SetIdentity(id, &req, CgroupField::kCopy);
  EXPECT_EQ(IdentityOf(req).host, ProcessRef());
  // LeaderIn: the leader as the observer's namespace numbers it.
  EXPECT_EQ(LeaderIn(id, 4026531836)->pid, 81234);
  EXPECT_EQ(LeaderIn(id, 4026532178)->pid, 5);
  EXPECT_FALSE(LeaderIn(id, 4026539999).has_value());
  EXPECT_FALSE(LeaderIn(id, 0).has_value());
  id.host = ProcessRef();
  EXPECT_FALSE(LeaderIn(id, 4026531836).has_value());
}

TEST(IdentityProtoTest, CgroupIsWrittenOnlyWhenAsked) {
  // An identity read from /proc names the process's current cgroup, which
  // must never become the run's.
  v1::Run run;
  SetIdentity(Full(), &run);
  EXPECT_EQ(run.cgroup(), "");
  v1::RegisterRunRequest req;
  SetIdentity(Full(), &req);
  EXPECT_FALSE(req.has_cgroup());
  // kOmit leaves a cgroup set by the caller alone.
  req.set_cgroup("/runreaper/own");
  SetIdentity(Full(), &req);
  EXPECT_EQ(req.cgroup(), "/runreaper/own");
}

TEST(IdentityProtoTest, MissingFieldsStayMissing) {
  Identity id;
  id.pid = 77;
  id.start_time = 5;
  v1::RegisterRunRequest req;
  SetIdentity(id, &req, CgroupField::kCopy);
  EXPECT_EQ(req.pid(), 77);
  EXPECT_TRUE(req.has_start_time_ticks());
  EXPECT_FALSE(req.has_pgid());
  EXPECT_FALSE(req.has_sid());
  EXPECT_FALSE(req.has_pidns_inode());
  EXPECT_FALSE(req.has_boot_id());
  EXPECT_FALSE(req.has_uid());  // not "root"
  EXPECT_FALSE(req.has_comm());
  EXPECT_FALSE(req.has_cgroup());
  EXPECT_EQ(IdentityOf(req), id);

  v1::Run run;
  SetIdentity(id, &run, CgroupField::kCopy);
  EXPECT_FALSE(run.has_uid());
  EXPECT_EQ(IdentityOf(run), id);
}

TEST(IdentityProtoTest, RootUidIsKnownNotMissing) {
  Identity id = Full();
  id.uid = 0;
  v1::RegisterRunRequest req;
  SetIdentity(id, &req);
  ASSERT_TRUE(req.has_uid());
  EXPECT_EQ(req.uid(), 0u);
  EXPECT_EQ(IdentityOf(req).uid, std::optional<uint32_t>(0));
}

TEST(IdentityProtoTest, SetIdentityReplacesWhatTheMessageHeld) {
  v1::RegisterRunRequest req;
  SetIdentity(Full(), &req, CgroupField::kCopy);
  Identity id;
  id.pid = 9;
  SetIdentity(id, &req, CgroupField::kCopy);
  EXPECT_FALSE(HasIdentityFields(req));
  EXPECT_EQ(IdentityOf(req), id);
}

// Registration: when the caller sends any identity field, the record holds
// exactly what was sent (the service copies IdentityOf(request) into the
// run); a field not sent stays unknown in the record.
TEST(IdentityProtoTest, RecordHoldsExactlyWhatWasSent) {
  v1::RegisterRunRequest req;
  req.set_run_id("r");
  req.set_pid(31);
  req.set_pidns_inode(4026532000);
  req.set_start_time_ticks(1234);
  req.set_uid(0);
  ASSERT_TRUE(HasIdentityFields(req));
  v1::Run run;
  SetIdentity(IdentityOf(req), &run, CgroupField::kCopy);
  EXPECT_EQ(run.pid(), 31);
  EXPECT_EQ(run.pidns_inode(), 4026532000u);
  EXPECT_EQ(run.start_time_ticks(), 1234u);
  ASSERT_TRUE(run.has_uid());
  EXPECT_EQ(run.uid(), 0u);
  EXPECT_EQ(run.pgid(), 0);
  EXPECT_EQ(run.sid(), 0);
  EXPECT_EQ(run.boot_id(), "");
  EXPECT_EQ(run.comm(), "");
  EXPECT_EQ(run.cgroup(), "");

  // Every field sent: every field recorded, the cgroup included.
  v1::RegisterRunRequest all;
  SetIdentity(Full(), &all, CgroupField::kCopy);
  v1::Run full;
  SetIdentity(IdentityOf(all), &full, CgroupField::kCopy);
  EXPECT_EQ(IdentityOf(full), Full());

  // Without uid the record's uid is unset, not root.
  req.clear_uid();
  v1::Run no_uid;
  SetIdentity(IdentityOf(req), &no_uid, CgroupField::kCopy);
  EXPECT_FALSE(no_uid.has_uid());
}

TEST(IdentityProtoTest, EachFieldAloneCountsAsIdentity) {
  v1::RegisterRunRequest bare;
  bare.set_run_id("r");
  bare.set_pid(31);
  EXPECT_FALSE(HasIdentityFields(bare));
  const std::vector<std::function<void(v1::RegisterRunRequest*)>> setters = {
      [](v1::RegisterRunRequest* r) { r->set_pgid(2); },
      [](v1::RegisterRunRequest* r) { r->set_sid(2); },
      [](v1::RegisterRunRequest* r) { r->set_pidns_inode(0); },
      [](v1::RegisterRunRequest* r) { r->set_start_time_ticks(0); },
      [](v1::RegisterRunRequest* r) { r->set_boot_id(""); },
      [](v1::RegisterRunRequest* r) { r->set_uid(0); },
      [](v1::RegisterRunRequest* r) { r->set_comm(""); },
      [](v1::RegisterRunRequest* r) { r->set_cgroup(""); },
  };
  for (size_t i = 0; i < setters.size(); ++i) {
    v1::RegisterRunRequest r = bare;
    setters[i](&r);
    EXPECT_TRUE(HasIdentityFields(r)) << "setter " << i;
  }
}

TEST(ProcessRefTest, RecycledPidIsAnotherKey) {
  ProcessRef a;
  a.pid = 100;
  a.start_time = 5;
  a.pidns_inode = 4026531836;
  a.boot_id = "b";
  ProcessRef recycled = a;
  recycled.start_time = 6;
  ProcessRef other_ns = a;
  other_ns.pidns_inode = 4026532000;
  ProcessRef other_boot = a;
  other_boot.boot_id = "c";
  EXPECT_EQ(a, ProcessRef(a));
  EXPECT_NE(a, recycled);
  EXPECT_NE(a, other_ns);
  EXPECT_NE(a, other_boot);

  absl::flat_hash_set<ProcessRef> hashed = {a, recycled, other_ns, other_boot, a};
  EXPECT_EQ(hashed.size(), 4u);
  std::set<ProcessRef> ordered = {recycled, other_ns, a, other_boot};
  EXPECT_EQ(ordered.size(), 4u);
  ProcessRef lower = a;
  lower.pid = 99;
  lower.start_time = 1000;
  EXPECT_LT(lower, a);  // pid first
}

TEST(ProcessRefTest, IdentityIsUsableAsItsRef) {
  const Identity id = Full();
  const ProcessRef& ref = id;
  EXPECT_EQ(ref.pid, 4242);
  EXPECT_EQ(ref.start_time, 987654321u);
  absl::flat_hash_set<ProcessRef> seen = {id};
  EXPECT_TRUE(seen.contains(ref));
}

}  // namespace
}  // namespace runreaper::scanner
