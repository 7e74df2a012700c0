// NewSocketApi against the real runtimes: dockerd on /var/run/docker.sock
// (tests/container_env.sh docker) and a `podman system service` the test
// starts. Objects are created with the CLI, named with a per-test prefix,
// and acted on through the API; the test removes only what it created.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/container_test_util.h"
#include "scanner/containers/runtime_api.h"

namespace runreaper::scanner::containers {
namespace {

using testing::ContainerEnv;
using testing::Sh;

std::string Prefix(absl::string_view what) {
  return absl::StrCat("rr-sapi-", what, "-", ::getpid());
}

// The same checks through either runtime; `cli` is "docker" or
// "podman" (with the limits podman needs here on run).
void ExerciseRuntime(RuntimeApi& api, const std::string& cli, const std::string& run_flags,
                     const std::string& image) {
  const std::string name = Prefix(cli);
  const std::string label = absl::StrCat("rr.test=", name);
  // What this test made goes whatever fails: its containers, network, volume.
  absl::Cleanup remove = [&] {
    Sh(absl::StrCat(cli, " rm -f ", name, "-c ", name, "-u; ", cli, " network rm ", name, "-n; ",
                    cli, " volume rm ", name, "-v"))
        .IgnoreError();
  };
  ASSERT_OK_AND_ASSIGN(std::string id,
                       Sh(absl::StrCat(cli, " run -d ", run_flags, " --name ", name, "-c --label ",
                                       label, " --stop-signal SIGQUIT ", image, " sleep 900")));
  ASSERT_OK_AND_ASSIGN(ObjectState st, api.Inspect(ObjectKind::kContainer, id));
  EXPECT_EQ(st.id, id);
  EXPECT_EQ(st.name, name + "-c");
  EXPECT_TRUE(st.running);
  EXPECT_GT(st.pid, 1);
  EXPECT_EQ(st.labels.at("rr.test"), name);
  EXPECT_TRUE(st.stop_signal == "SIGQUIT" || st.stop_signal == "3") << st.stop_signal;
  if (api.runtime() == Runtime::kPodman) {
    EXPECT_GT(st.conmon_pid, 1);
  }
  // By name too.
  ASSERT_OK_AND_ASSIGN(ObjectState by_name, api.Inspect(ObjectKind::kContainer, name + "-c"));
  EXPECT_EQ(by_name.id, id);

  ASSERT_OK_AND_ASSIGN(std::vector<std::string> ids,
                       api.ListByLabel(ObjectKind::kContainer, "rr.test", name));
  EXPECT_EQ(ids, std::vector<std::string>{id});
  ASSERT_OK_AND_ASSIGN(ids, api.ListByLabel(ObjectKind::kContainer, "rr.test", name + "-none"));
  EXPECT_TRUE(ids.empty());

  // A network with the container attached cannot go; a volume in use
  // neither.
  const std::string net = name + "-n";
  const std::string vol = name + "-v";
  ASSERT_OK(Sh(absl::StrCat(cli, " network create --label ", label, " ", net)).status());
  ASSERT_OK(Sh(absl::StrCat(cli, " volume create --label ", label, " ", vol)).status());
  ASSERT_OK_AND_ASSIGN(std::string user, Sh(absl::StrCat(cli, " run -d ", run_flags, " --name ",
                                                         name, "-u --network ", net, " -v ", vol,
                                                         ":/data ", image, " sleep 900")));
  ASSERT_OK_AND_ASSIGN(ObjectState n, api.Inspect(ObjectKind::kNetwork, net));
  EXPECT_EQ(n.name, net);
  EXPECT_EQ(n.used_by.size(), 1u);
  ASSERT_OK_AND_ASSIGN(ids, api.ListByLabel(ObjectKind::kNetwork, "rr.test", name));
  EXPECT_EQ(ids.size(), 1u);
  ASSERT_OK_AND_ASSIGN(ObjectState v, api.Inspect(ObjectKind::kVolume, vol));
  EXPECT_EQ(v.id, vol);
  EXPECT_EQ(v.labels.at("rr.test"), name);
  ASSERT_EQ(v.used_by.size(), 1u);
  EXPECT_EQ(user.rfind(v.used_by[0], 0), 0u) << user << " vs " << v.used_by[0];
  ASSERT_OK_AND_ASSIGN(ids, api.ListByLabel(ObjectKind::kVolume, "rr.test", name));
  EXPECT_EQ(ids, std::vector<std::string>{vol});
  EXPECT_EQ(api.Remove(ObjectKind::kVolume, vol).code(), absl::StatusCode::kFailedPrecondition);

  // Stop: the container's stop signal, then a kill; stopping again is OK.
  ASSERT_OK(api.Stop(id, absl::Seconds(1)));
  ASSERT_OK_AND_ASSIGN(st, api.Inspect(ObjectKind::kContainer, id));
  EXPECT_FALSE(st.running);
  EXPECT_OK(api.Stop(id, absl::Seconds(1)));

  ASSERT_OK(api.Remove(ObjectKind::kContainer, id));
  EXPECT_EQ(api.Inspect(ObjectKind::kContainer, id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(api.Remove(ObjectKind::kContainer, id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(api.Stop(id, absl::Seconds(1)).code(), absl::StatusCode::kNotFound);
  ASSERT_OK(api.Remove(ObjectKind::kContainer, user));
  ASSERT_OK(api.Remove(ObjectKind::kNetwork, n.id));
  EXPECT_EQ(api.Inspect(ObjectKind::kNetwork, n.id).status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK(api.Remove(ObjectKind::kVolume, vol));
  EXPECT_EQ(api.Remove(ObjectKind::kVolume, vol).code(), absl::StatusCode::kNotFound);
}

TEST(SocketApiTest, Docker) {
  ASSERT_OK_AND_ASSIGN(std::string image, ContainerEnv("docker"));
  std::unique_ptr<RuntimeApi> api =
      NewSocketApi(Runtime::kDocker, "/var/run/docker.sock", absl::Seconds(20));
  EXPECT_EQ(api->runtime(), Runtime::kDocker);
  ExerciseRuntime(*api, "docker", "", image);
}

TEST(SocketApiTest, Podman) {
  ASSERT_OK_AND_ASSIGN(std::string image, ContainerEnv("podman"));
  testing::PodmanService service;
  ASSERT_TRUE(service.ready()) << "podman system service did not answer on " << service.socket();
  std::unique_ptr<RuntimeApi> api =
      NewSocketApi(Runtime::kPodman, service.socket(), absl::Seconds(20));
  ExerciseRuntime(*api, "podman", "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024", image);
}

TEST(SocketApiTest, NobodyListeningIsUnavailable) {
  base::TempDir dir("rr_sapi");
  std::unique_ptr<RuntimeApi> api =
      NewSocketApi(Runtime::kDocker, dir.path() + "/none.sock", absl::Seconds(1));
  absl::Status s = api->Inspect(ObjectKind::kContainer, "x").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("none.sock"), std::string::npos) << s;
}

TEST(RuntimeApiTest, Names) {
  EXPECT_EQ(RuntimeName(Runtime::kPodman), "podman");
  EXPECT_EQ(KindName(ObjectKind::kVolume), "volume");
  ASSERT_OK_AND_ASSIGN(Runtime r, ParseRuntime("docker"));
  EXPECT_EQ(r, Runtime::kDocker);
  ASSERT_OK_AND_ASSIGN(ObjectKind k, ParseKind("network"));
  EXPECT_EQ(k, ObjectKind::kNetwork);
  EXPECT_FALSE(ParseRuntime("Docker").ok());
  EXPECT_FALSE(ParseKind("").ok());
}

}  // namespace
}  // namespace runreaper::scanner::containers
