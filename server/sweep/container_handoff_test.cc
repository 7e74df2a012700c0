// ContainerHandoff over real processes (a shell stands in for conmon's
// binary: ConmonOptions names it; its child stands in for the container's
// process) and a fake podman at the edge: which members are handed, and
// what the stop-and-remove step does with kept, labelled, gone and failing
// containers. sweeper_podman_test runs the real podman.
#include "server/sweep/container_handoff.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/proc_parse.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

namespace containers = scanner::containers;

constexpr char kCid[] = "75bb4bd58a4eb2a776b0fbf2b8648d1e5b744aeb479b68634114ea5f6235dda9";

class FakePodman : public containers::RuntimeApi {
 public:
  containers::Runtime runtime() const override { return containers::Runtime::kPodman; }
  absl::StatusOr<containers::ObjectState> Inspect(containers::ObjectKind,
                                                  absl::string_view id) override {
    if (id != kCid || gone) return absl::NotFoundError("no such container");
    containers::ObjectState s;
    s.id = kCid;
    s.name = "c";
    s.running = true;
    s.conmon_pid = conmon_pid;
    s.labels = labels;
    return s;
  }
  absl::Status Stop(absl::string_view, absl::Duration grace) override {
    stops.push_back(grace);
    return stop_status;
  }
  absl::Status Remove(containers::ObjectKind, absl::string_view) override {
    ++removes;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> ListByLabel(containers::ObjectKind, absl::string_view,
                                                       absl::string_view) override {
    return std::vector<std::string>();
  }
  int conmon_pid = 0;
  bool gone = false;
  std::map<std::string, std::string> labels;
  absl::Status stop_status;
  std::vector<absl::Duration> stops;
  int removes = 0;
};

scanner::ProcessInfo InfoOf(int pid) {
  scanner::ProcessInfo p;
  absl::StatusOr<std::string> text =
      base::ReadFileToString(absl::StrCat("/proc/", pid, "/stat"), 4096);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return p;
  absl::StatusOr<scanner::ProcStat> st = scanner::ParseStat(*text);
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return p;
  p.pid = st->pid;
  p.ppid = st->ppid;
  p.pgid = st->pgrp;
  p.sid = st->session;
  p.start_time = st->start_time;
  p.comm = st->comm;
  p.state = st->state;
  return p;
}

// A shell named like conmon's argv (-c kCid) with a sleeping child.
class FakeConmon {
 public:
  FakeConmon() {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(p[0], 0);
      ::execl("/usr/bin/dash", "/usr/bin/dash", "-c", "sleep 900 & read _x", "conmon", "-c", kCid,
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(p[0]);
    hold_ = p[1];
    EXPECT_TRUE(base::WaitFor([&] {
      absl::StatusOr<std::string> kids =
          base::ReadFileToString(absl::StrCat("/proc/", pid_, "/task/", pid_, "/children"), 4096);
      if (!kids.ok() || kids->empty()) return false;
      child_ = std::stoi(*kids);
      return InfoOf(child_).comm == "sleep";
    }));
  }
  ~FakeConmon() {
    if (child_ > 0) ::kill(child_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::close(hold_);
    ::waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }
  int child() const { return child_; }

 private:
  int pid_ = -1;
  int child_ = -1;
  int hold_ = -1;
};

containers::ConmonOptions DashAsConmon() {
  containers::ConmonOptions o;
  o.binaries = {"/usr/bin/dash"};
  o.comm = "dash";
  return o;
}

scanner::Member MemberOf(int pid, int run_index) {
  scanner::Member m;
  m.run_index = run_index;
  m.process = InfoOf(pid);
  m.source = scanner::MatchSource::kCookie;
  return m;
}

std::vector<scanner::RunSpec> Specs() {
  std::vector<scanner::RunSpec> specs(2);
  specs[0].run_id = "r0";
  specs[1].run_id = "r1";
  return specs;
}

TEST(ContainerHandoffTest, ConmonAndItsDescendantsAreHandedOthersAreNot) {
  FakeConmon c;
  FakePodman podman;
  podman.conmon_pid = c.pid();
  scanner::ProcFs procfs;
  ContainerHandoff handoff(&procfs, &podman, DashAsConmon());
  scanner::Membership members;
  members.members = {MemberOf(c.child(), 1), MemberOf(c.pid(), 1), MemberOf(::getpid(), 0)};
  handoff.Mark(Specs(), &members);
  EXPECT_TRUE(members.members[0].handed);
  EXPECT_TRUE(members.members[1].handed);
  EXPECT_FALSE(members.members[2].handed);
  EXPECT_FALSE(members.members[0].Signallable());
  ASSERT_EQ(handoff.containers().size(), 1u);
  EXPECT_EQ(handoff.containers().at(kCid).run_id, "r1");
  EXPECT_EQ(handoff.containers().at(kCid).conmon.pid, c.pid());

  const ContainerHandoff::Outcome out = handoff.StopAndRemove(absl::Seconds(3));
  ASSERT_EQ(out.rows.size(), 1u);
  EXPECT_EQ(out.rows[0].state(), v1::CONTAINER_STATE_REMOVED);
  EXPECT_EQ(out.rows[0].attribution(), "conmon");
  EXPECT_EQ(out.rows[0].run_id(), "r1");
  EXPECT_EQ(podman.stops, std::vector<absl::Duration>{absl::Seconds(3)});
  EXPECT_EQ(podman.removes, 1);
  EXPECT_TRUE(out.left_of.empty());
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(out.events[0].type(), v1::EVENT_TYPE_CONTAINER_REMOVED);
  EXPECT_EQ(out.events[0].result(), "REMOVED");
}

TEST(ContainerHandoffTest, AChildAloneIsHandedThroughItsConmon) {
  FakeConmon c;
  FakePodman podman;
  podman.conmon_pid = c.pid();
  scanner::ProcFs procfs;
  ContainerHandoff handoff(&procfs, &podman, DashAsConmon());
  scanner::Membership members;
  members.members = {MemberOf(c.child(), 0)};
  handoff.Mark(Specs(), &members);
  EXPECT_TRUE(members.members[0].handed);
  EXPECT_EQ(handoff.containers().at(kCid).run_id, "r0");
}

TEST(ContainerHandoffTest, WithoutPodmansWordOrWithoutPodmanNothingIsHanded) {
  FakeConmon c;
  FakePodman podman;
  podman.conmon_pid = c.pid() + 1;
  scanner::ProcFs procfs;
  for (containers::RuntimeApi* api : {static_cast<containers::RuntimeApi*>(&podman),
                                      static_cast<containers::RuntimeApi*>(nullptr)}) {
    ContainerHandoff handoff(&procfs, api, DashAsConmon());
    scanner::Membership members;
    members.members = {MemberOf(c.child(), 0), MemberOf(c.pid(), 0)};
    handoff.Mark(Specs(), &members);
    EXPECT_FALSE(members.members[0].handed);
    EXPECT_FALSE(members.members[1].handed);
    EXPECT_TRUE(handoff.containers().empty());
  }
}

TEST(ContainerHandoffTest, KeptLabelledGoneAndFailingContainers) {
  FakeConmon c;
  scanner::ProcFs procfs;
  auto handed = [&](FakePodman* podman, bool kept, const std::string& lease) {
    ContainerHandoff handoff(&procfs, podman, DashAsConmon());
    scanner::Membership members;
    members.members = {MemberOf(c.pid(), 0)};
    members.members[0].kept = kept;
    members.members[0].lease_reason = lease;
    handoff.Mark(Specs(), &members);
    return handoff.StopAndRemove(absl::Seconds(1));
  };
  {
    FakePodman podman;
    podman.conmon_pid = c.pid();
    const ContainerHandoff::Outcome out = handed(&podman, true, "");
    EXPECT_EQ(out.events.at(0).type(), v1::EVENT_TYPE_CONTAINER_KEPT);
    EXPECT_TRUE(podman.stops.empty());
    EXPECT_TRUE(out.left_of.empty());  // RUNREAPER_KEEP: the run is done
  }
  {
    FakePodman podman;
    podman.conmon_pid = c.pid();
    const ContainerHandoff::Outcome out = handed(&podman, true, "debugging");
    EXPECT_EQ(out.events.at(0).type(), v1::EVENT_TYPE_CONTAINER_KEPT);
    EXPECT_EQ(out.left_of.at("r0"), 1);  // a lease: swept again after it
  }
  {
    FakePodman podman;
    podman.conmon_pid = c.pid();
    podman.labels["io.runreaper.keep"] = "1";
    const ContainerHandoff::Outcome out = handed(&podman, false, "");
    EXPECT_EQ(out.events.at(0).type(), v1::EVENT_TYPE_CONTAINER_KEPT);
    EXPECT_TRUE(podman.stops.empty());
    EXPECT_EQ(podman.removes, 0);
  }
  {
    FakePodman podman;
    podman.conmon_pid = c.pid();
    podman.stop_status = absl::UnknownError("podman stop: exit 125");
    const ContainerHandoff::Outcome out = handed(&podman, false, "");
    EXPECT_EQ(out.events.at(0).result(), "ERROR");
    EXPECT_EQ(out.rows.at(0).state(), v1::CONTAINER_STATE_LIVE);
    EXPECT_EQ(out.left_of.at("r0"), 1);
    EXPECT_EQ(podman.removes, 0);
  }
  {
    FakePodman podman;
    podman.conmon_pid = c.pid();
    ContainerHandoff handoff(&procfs, &podman, DashAsConmon());
    scanner::Membership members;
    members.members = {MemberOf(c.pid(), 0)};
    handoff.Mark(Specs(), &members);
    podman.gone = true;  // removed by other hands after the listing
    const ContainerHandoff::Outcome out = handoff.StopAndRemove(absl::Seconds(1));
    EXPECT_EQ(out.events.at(0).result(), "GONE");
    EXPECT_EQ(out.rows.at(0).state(), v1::CONTAINER_STATE_GONE);
    EXPECT_TRUE(podman.stops.empty());
  }
}

TEST(ContainerHandoffTest, RecordedAgainstTheRunOrLeftToAnotherRow) {
  FakeConmon c;
  scanner::ProcFs procfs;
  base::TempDir dir("rr_handoff");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<store::RunStore> store,
                       store::RunStore::Open(dir.path() + "/runs.db"));
  {
    // A row the store already holds for another run (here: unattributed,
    // as the API proxy records a creation it cannot attribute) is left to
    // that row: nothing stopped, nothing removed.
    v1::Container theirs;
    theirs.set_runtime("podman");
    theirs.set_kind("container");
    theirs.set_id(kCid);
    theirs.set_attribution("peer not a run's member");
    ASSERT_OK(store->RecordContainer(theirs).status());
    FakePodman podman;
    podman.conmon_pid = c.pid();
    ContainerHandoff handoff(&procfs, &podman, DashAsConmon());
    scanner::Membership members;
    members.members = {MemberOf(c.pid(), 0)};
    handoff.Mark(Specs(), &members);
    EXPECT_TRUE(members.members[0].handed);  // never signalled all the same
    const ContainerHandoff::Outcome out = handoff.StopAndRemove(absl::Seconds(1), store.get());
    EXPECT_TRUE(out.rows.empty());
    EXPECT_TRUE(podman.stops.empty());
    EXPECT_EQ(podman.removes, 0);
  }
}

}  // namespace
}  // namespace runreaper::server
