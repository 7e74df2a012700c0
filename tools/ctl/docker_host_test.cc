#include "tools/ctl/docker_host.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <fstream>
#include <string>

#include "base/fd.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::tools {
namespace {

TEST(DockerHostTest, PointsAtTheProxyOnlyWhenItsSocketExistsAndNothingIsSet) {
  base::TempDir dir("rr_dh");
  DockerHostChoice c = ChooseDockerHost(dir.path(), nullptr);
  EXPECT_FALSE(c.set.has_value());
  EXPECT_EQ(c.note, "");

  // A regular file there is not the proxy.
  std::ofstream(dir.path() + "/docker.sock") << "x";
  EXPECT_FALSE(ChooseDockerHost(dir.path(), nullptr).set.has_value());
  ::unlink((dir.path() + "/docker.sock").c_str());

  base::Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, (dir.path() + "/docker.sock").c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  c = ChooseDockerHost(dir.path(), nullptr);
  ASSERT_TRUE(c.set.has_value());
  EXPECT_EQ(*c.set, "unix://" + dir.path() + "/docker.sock");

  // An explicit DOCKER_HOST is the job's choice: left alone, and said so.
  c = ChooseDockerHost(dir.path(), "tcp://127.0.0.1:2375");
  EXPECT_FALSE(c.set.has_value());
  EXPECT_NE(c.note.find("left alone"), std::string::npos) << c.note;
  c = ChooseDockerHost(dir.path(), ("unix://" + dir.path() + "/docker.sock").c_str());
  EXPECT_FALSE(c.set.has_value());
  EXPECT_EQ(c.note, "");
}

}  // namespace
}  // namespace runreaper::tools
