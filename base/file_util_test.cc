#include "base/file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::base {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tmp_ = new TempDir("file_util_test."); }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static std::string Write(const std::string& name, const std::string& data) {
    const std::string path = tmp_->path() + "/" + name;
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(::write(fd.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
    return path;
  }
  static TempDir* tmp_;
};
TempDir* FileUtilTest::tmp_ = nullptr;

TEST_F(FileUtilTest, ReadsWholeFile) {
  std::string data(100000, 'a');
  data[99999] = 'z';
  const std::string path = Write("big", data);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadFileToString(path, 1 << 20));
  EXPECT_EQ(got, data);
}

TEST_F(FileUtilTest, EmptyFileIsEmptyString) {
  const std::string path = Write("empty", "");
  ASSERT_OK_AND_ASSIGN(std::string got, ReadFileToString(path, 16));
  EXPECT_EQ(got, "");
}

TEST_F(FileUtilTest, FileOfExactlyTheCapIsRead) {
  const std::string path = Write("exact", std::string(4096, 'x'));
  ASSERT_OK_AND_ASSIGN(std::string got, ReadFileToString(path, 4096));
  EXPECT_EQ(got.size(), 4096u);
}

TEST_F(FileUtilTest, FileOverTheCapIsResourceExhausted) {
  const std::string path = Write("over", std::string(4097, 'x'));
  absl::StatusOr<std::string> got = ReadFileToString(path, 4096);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), path)) << got.status();
}

TEST_F(FileUtilTest, EndlessFileStopsAtTheCap) {
  // /dev/zero never reaches end of file: only the cap ends the read.
  absl::StatusOr<std::string> got = ReadFileToString("/dev/zero", 10000);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
}

TEST_F(FileUtilTest, MissingFileIsNotFoundWithPathAndErrno) {
  const std::string path = tmp_->path() + "/missing";
  absl::StatusOr<std::string> got = ReadFileToString(path, 16);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_EQ(got.status().message(), "open " + path + ": No such file or directory");
}

TEST_F(FileUtilTest, DirectoryIsAnError) {
  absl::StatusOr<std::string> got = ReadFileToString(tmp_->path(), 16);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_EQ(got.status().message(), "read " + tmp_->path() + ": Is a directory");
}

TEST_F(FileUtilTest, UnreadableFileIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads a mode-000 file";
  const std::string path = Write("secret", "x");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  EXPECT_EQ(ReadFileToString(path, 16).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(FileUtilTest, ProcFileIsRead) {
  // procfs reports size 0 and is generated on read: only end of file ends it.
  ASSERT_OK_AND_ASSIGN(std::string got, ReadFileToString("/proc/self/status", 1 << 16));
  EXPECT_TRUE(absl::StartsWith(got, "Name:")) << got;
}

TEST_F(FileUtilTest, ReadFileAtIsRelativeToDirfdAndNamesDisplay) {
  Write("rel", "hello\n");
  Fd dir(::open(tmp_->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  std::string buf = "old contents that must go";
  ASSERT_OK(ReadFileAt(dir.get(), "rel", "", 16, &buf));
  EXPECT_EQ(buf, "hello\n");

  absl::Status missing = ReadFileAt(dir.get(), "nope", "/shown/nope", 16, &buf);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "open /shown/nope: No such file or directory");
  absl::Status unnamed = ReadFileAt(dir.get(), "nope", "", 16, &buf);
  EXPECT_EQ(unnamed.message(), "open nope: No such file or directory");
}

TEST_F(FileUtilTest, ReadFileAtReusesTheBuffer) {
  const std::string path = Write("reuse", std::string(3000, 'r'));
  std::string buf;
  ASSERT_OK(ReadFileAt(AT_FDCWD, path.c_str(), path, 1 << 16, &buf));
  const char* const data = buf.data();
  const size_t capacity = buf.capacity();
  ASSERT_OK(ReadFileAt(AT_FDCWD, path.c_str(), path, 1 << 16, &buf));
  EXPECT_EQ(buf.size(), 3000u);
  EXPECT_EQ(buf.data(), data) << "no new allocation for a same-size file";
  EXPECT_EQ(buf.capacity(), capacity);
}

TEST(ReadFdToString, LoopsOverShortReadsToEndOfFile) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  Fd rd(p[0]);
  Fd wr(p[1]);
  // Each write arrives as its own short read; only the writer's close ends
  // the data.
  std::thread writer([&] {
    for (int i = 0; i < 50; ++i) {
      ASSERT_EQ(::write(wr.get(), "0123456789", 10), 10);
      ::usleep(100);
    }
    wr.Reset();
  });
  std::string out;
  const int err = ReadFdToString(rd.get(), 1 << 16, &out);
  writer.join();
  ASSERT_EQ(err, 0) << strerror(err);
  EXPECT_EQ(out.size(), 500u);
}

TEST_F(FileUtilTest, PReadFdToBufferReadsFromTheStartWhateverTheOffset) {
  const std::string path = Write("one_line", "one line\n");
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  char buf[64];
  size_t len = 0;
  ASSERT_EQ(ReadFdToBuffer(fd.get(), buf, sizeof(buf), true, &len), 0);
  EXPECT_EQ(std::string(buf, len), "one line\n");
  // The offset is at end of file now: read() gives nothing, pread from 0
  // the whole line again, as often as asked, without moving the offset.
  ASSERT_EQ(ReadFdToBuffer(fd.get(), buf, sizeof(buf), true, &len), 0);
  EXPECT_EQ(len, 0u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(PReadFdToBuffer(fd.get(), buf, sizeof(buf), true, &len), 0);
    EXPECT_EQ(std::string(buf, len), "one line\n");
  }
  EXPECT_EQ(::lseek(fd.get(), 0, SEEK_CUR), 9);
  EXPECT_EQ(PReadFdToBuffer(fd.get(), buf, 9, false, &len), EFBIG);
}

TEST(ReadFdToBuffer, StopsAtNewlineOnlyWhenAsked) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  Fd rd(p[0]);
  Fd wr(p[1]);
  ASSERT_EQ(::write(wr.get(), "line\n", 5), 5);
  char buf[64];
  size_t len = 0;
  // The write end is still open: a read past the newline would block.
  ASSERT_EQ(ReadFdToBuffer(rd.get(), buf, sizeof(buf), true, &len), 0);
  EXPECT_EQ(std::string(buf, len), "line\n");

  ASSERT_EQ(::write(wr.get(), "a\nb", 3), 3);
  wr.Reset();
  ASSERT_EQ(ReadFdToBuffer(rd.get(), buf, sizeof(buf), false, &len), 0);
  EXPECT_EQ(std::string(buf, len), "a\nb");
}

TEST(ReadFdToBuffer, DataThatFillsTheBufferIsEfbig) {
  Fd fd(::open("/dev/zero", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  char buf[128];
  size_t len = 0;
  EXPECT_EQ(ReadFdToBuffer(fd.get(), buf, sizeof(buf), true, &len), EFBIG);
}

TEST(ReadFull, ReadsExactlyNOrStopsAtEndOfFile) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  Fd rd(p[0]);
  Fd wr(p[1]);
  // Two messages arrive in pieces; each ReadFull takes exactly its own.
  std::thread writer([&] {
    const int a = 0x01020304;
    const int b = 0x05060708;
    const char* pa = reinterpret_cast<const char*>(&a);
    const char* pb = reinterpret_cast<const char*>(&b);
    for (size_t i = 0; i < sizeof(a); ++i) {
      ASSERT_TRUE(WriteFull(wr.get(), pa + i, 1));
      ::usleep(100);
    }
    ASSERT_TRUE(WriteFull(wr.get(), pb, sizeof(b)));
    ASSERT_TRUE(WriteFull(wr.get(), "xy", 2));
    wr.Reset();
  });
  int a = 0;
  int b = 0;
  char rest[8] = {};
  EXPECT_EQ(ReadFull(rd.get(), &a, sizeof(a)), ssize_t{sizeof(a)});
  EXPECT_EQ(ReadFull(rd.get(), &b, sizeof(b)), ssize_t{sizeof(b)});
  EXPECT_EQ(ReadFull(rd.get(), rest, sizeof(rest)), 2) << "short at EOF";
  writer.join();
  EXPECT_EQ(a, 0x01020304);
  EXPECT_EQ(b, 0x05060708);
  EXPECT_EQ(std::string(rest, 2), "xy");
  EXPECT_EQ(ReadFull(rd.get(), rest, sizeof(rest)), 0);
}

TEST(ReadFull, ErrorIsMinusOneWithErrno) {
  char c;
  errno = 0;
  EXPECT_EQ(ReadFull(-1, &c, 1), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(WriteFull, ClosedReaderIsEpipe) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  Fd wr(p[1]);
  ::close(p[0]);
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &old), 0);
  errno = 0;
  EXPECT_FALSE(WriteFull(wr.get(), "x", 1));
  EXPECT_EQ(errno, EPIPE);
  ::sigaction(SIGPIPE, &old, nullptr);
}

TEST(OpenAtCloexec, SetsCloexec) {
  Fd fd(OpenAtCloexec(AT_FDCWD, "/proc/self/stat", O_RDONLY));
  ASSERT_TRUE(fd.valid());
  EXPECT_NE(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0);
}

// A tree with a nested directory, a file and a symlink out of the tree: all
// of it goes, and what the symlink points at stays.
TEST_F(FileUtilTest, RemoveTreeRemovesEverythingBelowAndFollowsNoSymlink) {
  ASSERT_OK_AND_ASSIGN(const std::string tree, MakeTempDir(tmp_->path(), "tree."));
  EXPECT_EQ(tree.rfind(tmp_->path() + "/tree.", 0), 0u) << tree;
  const std::string outside = Write("outside", "keep");
  ASSERT_EQ(::mkdir((tree + "/a").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((tree + "/a/b").c_str(), 0700), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (tree + "/a/link").c_str()), 0);
  Fd f(::open((tree + "/a/file").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  ASSERT_OK(RemoveTree(tree));
  struct stat st;
  EXPECT_NE(::lstat(tree.c_str(), &st), 0);
  EXPECT_EQ(::lstat(outside.c_str(), &st), 0);
  EXPECT_OK(RemoveTree(tree));  // already gone
}

TEST(MakeTempDir, MissingParentNamesTheTemplate) {
  absl::StatusOr<std::string> made = MakeTempDir("/nonexistent-rr", "x.");
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(made.status().message(), "/nonexistent-rr/x.XXXXXX"))
      << made.status();
}

}  // namespace
}  // namespace runreaper::base
