#include "scanner/pipes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::scanner {
namespace {

TEST(ParsePipeLinkTest, PipeInode) {
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> inode, ParsePipeLink("pipe:[53318]"));
  ASSERT_TRUE(inode.has_value());
  EXPECT_EQ(*inode, 53318u);
  ASSERT_OK_AND_ASSIGN(inode, ParsePipeLink("pipe:[18446744073709551615]"));
  EXPECT_EQ(*inode, 18446744073709551615u);
}

TEST(ParsePipeLinkTest, OtherTargetsAreNotPipes) {
  for (const char* link : {"/dev/null", "socket:[53319]", "anon_inode:[eventfd]", "/tmp/30763.out",
                           "/dev/pts/0", "", "pipe", "pipe:"}) {
    ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> inode, ParsePipeLink(link));
    EXPECT_FALSE(inode.has_value()) << link;
  }
}

TEST(ParsePipeLinkTest, GarbledPipeLinkIsAnError) {
  for (const char* link : {"pipe:[]", "pipe:[12", "pipe:[12]x", "pipe:[-1]", "pipe:[1 2]",
                           "pipe:[0]", "pipe:[18446744073709551616]", "pipe:[0x10]"}) {
    EXPECT_EQ(ParsePipeLink(link).status().code(), absl::StatusCode::kInvalidArgument) << link;
  }
}

TEST(ParseFdInfoFlagsTest, PipeEnds) {
  // As Linux 6.x writes fdinfo of a pipe's two ends (O_LARGEFILE set by the
  // 64-bit ABI, O_CLOEXEC shown as 02000000).
  constexpr absl::string_view kWriteEnd = R"(pos:	0
flags:	0100001
mnt_id:	15
ino:	53318
)";
  constexpr absl::string_view kReadEnd = R"(pos:	0
flags:	02100000
mnt_id:	15
ino:	53318
)";
  ASSERT_OK_AND_ASSIGN(uint32_t w, ParseFdInfoFlags(kWriteEnd));
  EXPECT_EQ(w, 0100001u);
  EXPECT_TRUE(FlagsWrite(w));
  ASSERT_OK_AND_ASSIGN(uint32_t r, ParseFdInfoFlags(kReadEnd));
  EXPECT_EQ(r, 02100000u);
  EXPECT_FALSE(FlagsWrite(r));
  EXPECT_TRUE(FlagsWrite(O_RDWR));
}

TEST(ParseFdInfoFlagsTest, MissingOrGarbledFlags) {
  for (absl::string_view text :
       {absl::string_view("pos:\t0\nmnt_id:\t15\n"), absl::string_view("flags:\t\n"),
        absl::string_view("flags:\t0100009\n"), absl::string_view("flags:\t-1\n"),
        absl::string_view("flags:\t777777777777\n"), absl::string_view("")}) {
    EXPECT_EQ(ParseFdInfoFlags(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(HoldersInTest, OnlyWriteEndsOfTheNamedPipes) {
  const std::vector<PipeFd> fds = {
      {0, 10, false}, {1, 11, true}, {2, 11, true}, {7, 12, true}, {9, 11, false}};
  const std::vector<uint64_t> inodes = {11, 13};
  const std::vector<PipeHolder> held = HoldersIn(42, fds, inodes);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].pid, 42);
  EXPECT_EQ(held[0].fd, 1);
  EXPECT_EQ(held[0].inode, 11u);
  EXPECT_EQ(held[1].fd, 2);
  EXPECT_TRUE(HoldersIn(42, fds, {}).empty());
}

// A real child whose fd 1 (and, with `both`, fd 2) is the write end of
// `write_fd`'s pipe, also holding it at fd `extra_fd` when >= 0 and nothing
// else above fd 2; it pauses until killed.
class PipeChild {
 public:
  PipeChild(int write_fd, bool both, int extra_fd = -1) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(write_fd, 1);
      if (both) ::dup2(write_fd, 2);
      if (extra_fd >= 0) ::dup2(write_fd, extra_fd);
      // Only the descriptors named hold a pipe (not what the test process
      // had open when it forked, such as another child's pipe).
      for (int fd = 3; fd < 1024; ++fd) {
        if (fd != extra_fd && fd != ready[1]) ::close(fd);
      }
      char c = 'r';
      (void)!::write(ready[1], &c, 1);
      while (true) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    while (::read(ready[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(ready[0]);
  }
  ~PipeChild() { Kill(); }
  int pid() const { return pid_; }
  // Kills it and leaves a zombie (nothing reaps it until Reap).
  void KillToZombie() {
    ::kill(pid_, SIGKILL);
    siginfo_t info;
    ::waitid(P_PID, pid_, &info, WEXITED | WNOWAIT);
  }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

struct Pipe {
  Pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) std::abort();
    read_end.Reset(p[0]);
    write_end.Reset(p[1]);
    struct stat st;
    if (::fstat(p[0], &st) != 0) std::abort();
    inode = st.st_ino;
  }
  base::Fd read_end;
  base::Fd write_end;
  uint64_t inode = 0;
};

TEST(PipeReaderTest, OutputPipesOfARealProcess) {
  Pipe out;
  Pipe err;
  // fd 1 -> out; fd 2 -> err, dup'd in the child after fd 1.
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out.write_end.get(), 1);
    ::dup2(err.write_end.get(), 2);
    char c = 'r';
    (void)!::write(ready[1], &c, 1);
    while (true) ::pause();
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  PipeReader reader;
  ASSERT_OK_AND_ASSIGN(OutputPipes pipes, reader.ReadOutputPipes(pid));
  EXPECT_EQ(pipes.stdout_pipe, std::optional<uint64_t>(out.inode));
  EXPECT_EQ(pipes.stderr_pipe, std::optional<uint64_t>(err.inode));
  ::kill(pid, SIGKILL);
  int st;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_EQ(reader.ReadOutputPipes(pid).status().code(), absl::StatusCode::kNotFound);
}

TEST(PipeReaderTest, TwoToOneIsOnePipeAndAReadEndIsNotOutput) {
  Pipe p;
  PipeChild child(p.write_end.get(), /*both=*/true);
  PipeReader reader;
  ASSERT_OK_AND_ASSIGN(OutputPipes pipes, reader.ReadOutputPipes(child.pid()));
  EXPECT_EQ(pipes.stdout_pipe, std::optional<uint64_t>(p.inode));
  EXPECT_EQ(pipes.stderr_pipe, std::optional<uint64_t>(p.inode));

  // Our own stdin as a pipe's read end: fd 0 is not output, and a read end
  // on fd 1 is no output either.
  ASSERT_OK_AND_ASSIGN(std::optional<PipeFd> read_fd,
                       reader.ReadPipeFd(::getpid(), p.read_end.get()));
  ASSERT_TRUE(read_fd.has_value());
  EXPECT_EQ(read_fd->inode, p.inode);
  EXPECT_FALSE(read_fd->writes);
  ASSERT_OK_AND_ASSIGN(std::optional<PipeFd> write_fd,
                       reader.ReadPipeFd(::getpid(), p.write_end.get()));
  ASSERT_TRUE(write_fd.has_value());
  EXPECT_TRUE(write_fd->writes);
}

TEST(PipeReaderTest, ClosedOrNonPipeFdIsNoPipe) {
  PipeReader reader;
  base::Fd null_fd(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(null_fd.valid());
  ASSERT_OK_AND_ASSIGN(std::optional<PipeFd> f, reader.ReadPipeFd(::getpid(), null_fd.get()));
  EXPECT_FALSE(f.has_value());
  const int closed = null_fd.get();
  null_fd.Reset();
  ASSERT_OK_AND_ASSIGN(f, reader.ReadPipeFd(::getpid(), closed));
  EXPECT_FALSE(f.has_value());
}

TEST(PipeReaderTest, ReadPipeFdsListsBothEndsWithTheirDirection) {
  Pipe p;
  PipeReader reader;
  ASSERT_OK_AND_ASSIGN(std::vector<PipeFd> fds, reader.ReadPipeFds(::getpid()));
  bool saw_read = false;
  bool saw_write = false;
  for (const PipeFd& f : fds) {
    if (f.fd == p.read_end.get()) {
      saw_read = true;
      EXPECT_EQ(f.inode, p.inode);
      EXPECT_FALSE(f.writes);
    }
    if (f.fd == p.write_end.get()) {
      saw_write = true;
      EXPECT_EQ(f.inode, p.inode);
      EXPECT_TRUE(f.writes);
    }
  }
  EXPECT_TRUE(saw_read);
  EXPECT_TRUE(saw_write);
  for (size_t i = 1; i < fds.size(); ++i) EXPECT_LT(fds[i - 1].fd, fds[i].fd);
}

TEST(PipeReaderTest, FindHoldersNamesEachWriterAndFd) {
  Pipe step;
  Pipe other;
  PipeChild holder(step.write_end.get(), /*both=*/true, /*extra_fd=*/9);
  PipeChild bystander(other.write_end.get(), /*both=*/false);
  // Only the children hold the write end from here on.
  step.write_end.Reset();
  PipeReader reader;
  int skipped = -1;
  const std::vector<PipeHolder> held =
      reader.FindHolders({bystander.pid(), holder.pid(), holder.pid()}, {step.inode}, &skipped);
  EXPECT_EQ(skipped, 0);
  ASSERT_EQ(held.size(), 3u);
  for (const PipeHolder& h : held) {
    EXPECT_EQ(h.pid, holder.pid());
    EXPECT_EQ(h.inode, step.inode);
  }
  EXPECT_EQ(held[0].fd, 1);
  EXPECT_EQ(held[1].fd, 2);
  EXPECT_EQ(held[2].fd, 9);

  // No inodes: nothing read, nothing held.
  EXPECT_TRUE(reader.FindHolders({holder.pid()}, {}).empty());

  // The holder gone (a zombie's fd table is empty): nobody holds the pipe,
  // and the reader sees end of file.
  holder.KillToZombie();
  EXPECT_TRUE(reader.FindHolders({holder.pid(), bystander.pid()}, {step.inode}, &skipped).empty());
  EXPECT_EQ(skipped, 0);
  char c;
  EXPECT_EQ(::read(step.read_end.get(), &c, 1), 0);
  holder.Kill();
  EXPECT_TRUE(reader.FindHolders({holder.pid()}, {step.inode}, &skipped).empty());
}

TEST(PipeReaderTest, FixtureRootWithoutTheProcessIsNotFound) {
  base::TempDir dir;
  PipeReader reader(dir.path());
  EXPECT_EQ(reader.ReadPipeFds(4242).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reader.ReadOutputPipes(4242).status().code(), absl::StatusCode::kNotFound);
  // A garbled pipe link in a fixture fd directory is an error naming the path.
  ASSERT_EQ(::mkdir(absl::StrCat(dir.path(), "/4242").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(absl::StrCat(dir.path(), "/4242/fd").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("pipe:[12x]", absl::StrCat(dir.path(), "/4242/fd/1").c_str()), 0);
  absl::StatusOr<OutputPipes> garbled = reader.ReadOutputPipes(4242);
  EXPECT_EQ(garbled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(garbled.status().message().find("/4242/fd/1"), absl::string_view::npos)
      << garbled.status();
}

}  // namespace
}  // namespace runreaper::scanner
