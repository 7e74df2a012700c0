// Conmon recognition: the argv parse (fixtures), the binary check against
// real processes (a shell stands in for conmon's binary: the check is about
// the running image's path, owner and mode, and the argv), and the
// confirmation through a RuntimeApi (a fake at that edge; the podman test
// confirms a real conmon).
#include "scanner/containers/conmon.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/proc_parse.h"

namespace runreaper::scanner::containers {
namespace {

constexpr char kCid[] = "75bb4bd58a4eb2a776b0fbf2b8648d1e5b744aeb479b68634114ea5f6235dda9";
constexpr char kOther[] = "1111111111111111111111111111111111111111111111111111111111111111";

std::string Argv(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += a + '\0';
  return out;
}

TEST(ParseConmonArgvTest, PodmansOwnArgv) {
  // As podman 4.3.1 starts it (libpod/oci_conmon_common.go sharedConmonArgs).
  const std::string cmdline = Argv({"/usr/bin/conmon",
                                    "--api-version",
                                    "1",
                                    "-c",
                                    kCid,
                                    "-u",
                                    kCid,
                                    "-r",
                                    "/usr/bin/runc",
                                    "-b",
                                    "/var/lib/containers/storage/overlay-containers/x/userdata",
                                    "-p",
                                    "/run/pidfile",
                                    "-n",
                                    "t31p-probe",
                                    "--exit-dir",
                                    "/run/libpod/exits",
                                    "--full-attach",
                                    "--exit-command",
                                    "/usr/bin/podman",
                                    "--exit-command-arg",
                                    "-n"});
  ASSERT_OK_AND_ASSIGN(ConmonArgs a, ParseConmonArgv(cmdline));
  EXPECT_EQ(a.container_id, kCid);
  EXPECT_EQ(a.cuuid, kCid);
  EXPECT_EQ(a.name, "t31p-probe");
  EXPECT_EQ(a.runtime, "/usr/bin/runc");
  EXPECT_EQ(a.exit_dir, "/run/libpod/exits");
  EXPECT_TRUE(IsContainerConmon(a));
}

TEST(ParseConmonArgvTest, LongFormsEqualsFormsAndLastValueWins) {
  ASSERT_OK_AND_ASSIGN(ConmonArgs a, ParseConmonArgv(Argv({"conmon", "--cid", kOther, "--name=x",
                                                           "--cid=" + std::string(kCid),
                                                           "--runtime", "/usr/bin/crun"})));
  EXPECT_EQ(a.container_id, kCid);
  EXPECT_EQ(a.name, "x");
  EXPECT_EQ(a.runtime, "/usr/bin/crun");
}

TEST(ParseConmonArgvTest, AnExecSessionIsNotTheContainersConmon) {
  ASSERT_OK_AND_ASSIGN(ConmonArgs a, ParseConmonArgv(Argv({"conmon", "-c", kCid, "-u", kOther})));
  EXPECT_FALSE(IsContainerConmon(a));
}

TEST(ParseConmonArgvTest, NoOrMalformedContainerIdIsRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(ParseConmonArgv(Argv({"conmon"})).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseConmonArgv(Argv({"conmon", "-c"})).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseConmonArgv(Argv({"conmon", "-c", "abc"})).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParseConmonArgv(Argv({"conmon", "-c", absl::StrCat(kCid, "0")})).status()));
  std::string upper(kCid);
  upper[0] = 'F';
  EXPECT_TRUE(absl::IsInvalidArgument(ParseConmonArgv(Argv({"conmon", "-c", upper})).status()));
  // argv[0] is never an option.
  EXPECT_TRUE(absl::IsInvalidArgument(ParseConmonArgv(Argv({"-c", kCid})).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseConmonArgv("").status()));
}

// A process running `exe` with argv `args` (argv[0] = exe), held until
// destroyed; stdin is a pipe that is never written.
class Proc {
 public:
  Proc(const std::string& exe, std::vector<std::string> args) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(p[0], 0);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(exe.c_str()));
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(p[0]);
    hold_ = p[1];
    // Exec'd once its exe is no longer ours and its argv is in place: the
    // kernel switches the exe before it writes the new argv, and a
    // cmdline read in between is empty.
    EXPECT_TRUE(base::WaitFor([&] {
      char link[4096];
      const ssize_t n =
          ::readlink(absl::StrCat("/proc/", pid_, "/exe").c_str(), link, sizeof(link) - 1);
      if (n <= 0 || std::string(link, static_cast<size_t>(n)) == SelfExe()) return false;
      absl::StatusOr<std::string> cmdline =
          base::ReadFileToString(absl::StrCat("/proc/", pid_, "/cmdline"), 65536);
      return cmdline.ok() && !cmdline->empty();
    }));
    absl::StatusOr<std::string> stat =
        base::ReadFileToString(absl::StrCat("/proc/", pid_, "/stat"), 4096);
    EXPECT_TRUE(stat.ok());
    if (stat.ok()) start_time_ = ParseStat(*stat)->start_time;
  }
  ~Proc() {
    ::kill(pid_, SIGKILL);
    ::close(hold_);
    ::waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }
  uint64_t start_time() const { return start_time_; }

 private:
  static std::string SelfExe() {
    char link[4096];
    const ssize_t n = ::readlink("/proc/self/exe", link, sizeof(link) - 1);
    return n > 0 ? std::string(link, static_cast<size_t>(n)) : "";
  }
  int pid_ = -1;
  int hold_ = -1;
  uint64_t start_time_ = 0;
};

ConmonOptions Allow(const std::string& exe) {
  ConmonOptions o;
  o.binaries = {exe};
  o.comm = "sh";
  return o;
}

// A shell that reads stdin for ever, its argv ending in conmon's options.
Proc FakeConmon(const std::string& exe, const std::vector<std::string>& options) {
  std::vector<std::string> args = {"-c", "read _x", "conmon"};
  args.insert(args.end(), options.begin(), options.end());
  return Proc(exe, args);
}

TEST(CheckConmonProcessTest, AnAllowedRootOwnedBinaryWithAContainerIdPasses) {
  Proc p = FakeConmon("/usr/bin/dash", {"-c", kCid, "-n", "x"});
  ASSERT_OK_AND_ASSIGN(ConmonArgs a,
                       CheckConmonProcess(Allow("/usr/bin/dash"), p.pid(), p.start_time()));
  EXPECT_EQ(a.container_id, kCid);
  EXPECT_EQ(a.name, "x");
}

TEST(CheckConmonProcessTest, ABinaryNotOnTheListIsRefused) {
  Proc p = FakeConmon("/usr/bin/dash", {"-c", kCid});
  const absl::Status s = CheckConmonProcess(ConmonOptions(), p.pid(), p.start_time()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("/usr/bin/dash"), absl::string_view::npos) << s;
}

TEST(CheckConmonProcessTest, AWritableOrForeignOwnedCopyIsRefused) {
  base::TempDir dir("rr_conmon");
  const std::string copy = dir.path() + "/conmon";
  ASSERT_OK_AND_ASSIGN(std::string image, base::ReadFileToString("/usr/bin/dash", 1 << 24));
  {
    FILE* f = ::fopen(copy.c_str(), "we");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(::fwrite(image.data(), 1, image.size(), f), image.size());
    ::fclose(f);
  }
  ASSERT_EQ(::chmod(copy.c_str(), 0777), 0);
  {
    Proc p = FakeConmon(copy, {"-c", kCid});
    const absl::Status s = CheckConmonProcess(Allow(copy), p.pid(), p.start_time()).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  }
  ASSERT_EQ(::chmod(copy.c_str(), 0755), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(copy.c_str(), 1, 1), 0);
    Proc p = FakeConmon(copy, {"-c", kCid});
    const absl::Status s = CheckConmonProcess(Allow(copy), p.pid(), p.start_time()).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  }
}

TEST(CheckConmonProcessTest, ReusedPidExecSessionAndMissingIdAreRefused) {
  Proc p = FakeConmon("/usr/bin/dash", {"-c", kCid, "-u", kOther});
  EXPECT_TRUE(absl::IsFailedPrecondition(
      CheckConmonProcess(Allow("/usr/bin/dash"), p.pid(), p.start_time()).status()));
  EXPECT_TRUE(absl::IsNotFound(
      CheckConmonProcess(Allow("/usr/bin/dash"), p.pid(), p.start_time() + 1).status()));
  Proc q = FakeConmon("/usr/bin/dash", {"-n", "x"});
  EXPECT_TRUE(absl::IsInvalidArgument(
      CheckConmonProcess(Allow("/usr/bin/dash"), q.pid(), q.start_time()).status()));
}

class FakePodman : public RuntimeApi {
 public:
  Runtime runtime() const override { return Runtime::kPodman; }
  absl::StatusOr<ObjectState> Inspect(ObjectKind, absl::string_view id) override {
    ++inspects;
    if (id != kCid) return absl::NotFoundError("no such container");
    ObjectState s;
    s.id = kCid;
    s.name = "x";
    s.conmon_pid = conmon_pid;
    return s;
  }
  absl::Status Stop(absl::string_view, absl::Duration) override { return absl::OkStatus(); }
  absl::Status Remove(ObjectKind, absl::string_view) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<std::string>> ListByLabel(ObjectKind, absl::string_view,
                                                       absl::string_view) override {
    return std::vector<std::string>();
  }
  int conmon_pid = 0;
  int inspects = 0;
};

TEST(ConmonRecognizerTest, OnlyTheConmonPodmanNamesIsRecognizedAndEachIsAskedOnce) {
  Proc p = FakeConmon("/usr/bin/dash", {"-c", kCid});
  FakePodman podman;
  podman.conmon_pid = p.pid();
  ConmonRecognizer r(&podman, Allow("/usr/bin/dash"));
  ASSERT_OK_AND_ASSIGN(Conmon c, r.Recognize(p.pid(), p.start_time(), "sh"));
  EXPECT_EQ(c.container_id, kCid);
  EXPECT_EQ(c.pid, p.pid());
  ASSERT_OK(r.Recognize(p.pid(), p.start_time(), "sh").status());
  EXPECT_EQ(podman.inspects, 1);
  // Another name is never read or asked about.
  EXPECT_TRUE(absl::IsNotFound(r.Recognize(p.pid(), p.start_time(), "conmon").status()));
  EXPECT_EQ(podman.inspects, 1);
}

TEST(ConmonRecognizerTest, AMadeUpIdOrAnotherConmonPidIsNotRecognized) {
  Proc p = FakeConmon("/usr/bin/dash", {"-c", kCid});
  FakePodman podman;
  podman.conmon_pid = p.pid() + 1;  // podman's conmon of that container is another process
  ConmonRecognizer r(&podman, Allow("/usr/bin/dash"));
  EXPECT_TRUE(absl::IsNotFound(r.Recognize(p.pid(), p.start_time(), "sh").status()));
  Proc q = FakeConmon("/usr/bin/dash", {"-c", kOther});  // podman has no such container
  EXPECT_TRUE(absl::IsNotFound(r.Recognize(q.pid(), q.start_time(), "sh").status()));
  ConmonRecognizer without(nullptr, Allow("/usr/bin/dash"));
  EXPECT_TRUE(absl::IsNotFound(without.Recognize(p.pid(), p.start_time(), "sh").status()));
}

}  // namespace
}  // namespace runreaper::scanner::containers
