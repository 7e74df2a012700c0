// The TCP listener's rules: the token file.
#include "server/rpc/tcp_access.h"

#include <stdlib.h>

#include <string>

#include "absl/strings/match.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::server {
namespace {

class TcpAccessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tmp_.path(); }
  const base::TempDir tmp_{"rrt."};
  std::string dir_;
};

TEST_F(TcpAccessTest, TokenFileIsTrimmedAndEmptyIsAnError) {
  const std::string path = dir_ + "/token";
  ASSERT_EQ(system(("printf '  s3cret\\n' > " + path).c_str()), 0);
  ASSERT_OK_AND_ASSIGN(std::string token, ReadTokenFile(path));
  EXPECT_EQ(token, "s3cret");
  ASSERT_EQ(system(("printf '\\n' > " + path).c_str()), 0);
  EXPECT_FALSE(ReadTokenFile(path).ok());
  EXPECT_FALSE(ReadTokenFile(dir_ + "/missing").ok());
}

TEST_F(TcpAccessTest, TokenFileErrorsNameTheFile) {
  const std::string missing = dir_ + "/missing";
  absl::StatusOr<std::string> token = ReadTokenFile(missing);
  ASSERT_FALSE(token.ok());
  EXPECT_TRUE(absl::StrContains(token.status().message(), missing)) << token.status();
  // Larger than any token: refused, not read whole.
  const std::string big = dir_ + "/big";
  ASSERT_EQ(system(("head -c 70000 /dev/zero | tr '\\0' x > " + big).c_str()), 0);
  token = ReadTokenFile(big);
  ASSERT_FALSE(token.ok());
  EXPECT_TRUE(absl::StrContains(token.status().message(), big)) << token.status();
}

}  // namespace
}  // namespace runreaper::server
