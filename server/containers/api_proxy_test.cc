// The proxy with the real dockerd and the plain docker CLI pointed at it by
// DOCKER_HOST. The ledger here records into a vector: the real one
// (server/containers/store_ledger.h) is tested in store_ledger_test; what matters here is
// what the proxy asks of it and when.
#include "server/containers/api_proxy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/containers/api_json.h"
#include "scanner/containers/container_test_util.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/containers/unix_http.h"

namespace runreaper::server::containers {
namespace {

namespace sc = scanner::containers;
using sc::testing::Sh;

struct Entry {
  std::string op;  // "before", "created", "failed"
  Peer peer;
  std::string peer_comm;  // read while the peer was pinned
  sc::ObjectKind kind = sc::ObjectKind::kContainer;
  std::string name;
  std::string nonce;
  std::string id;
  bool flag = false;  // created: labels_have_claim; failed: maybe_created
};

class RecordingLedger : public CreationLedger {
 public:
  absl::StatusOr<Claim> BeforeCreate(const Peer& peer, sc::Runtime, sc::ObjectKind kind,
                                     absl::string_view name) override {
    absl::MutexLock lock(&mu_);
    if (refuse_) return absl::UnavailableError("the store is read-only (test)");
    Entry e{
        "before", peer, "", kind, std::string(name), absl::StrCat("nonce-", ::getpid(), "-", ++n_),
        "",       false};
    std::ifstream comm(absl::StrCat("/proc/", peer.pid, "/comm"));
    std::getline(comm, e.peer_comm);
    entries_.push_back(e);
    return Claim{e.nonce, "run-1", ""};
  }
  absl::Status Created(const Claim& claim, absl::string_view id, bool labels_have_claim) override {
    absl::MutexLock lock(&mu_);
    entries_.push_back(
        {"created", {}, "", {}, "", claim.nonce, std::string(id), labels_have_claim});
    return absl::OkStatus();
  }
  void Failed(const Claim& claim, bool maybe_created) override {
    absl::MutexLock lock(&mu_);
    entries_.push_back({"failed", {}, "", {}, "", claim.nonce, "", maybe_created});
  }
  std::vector<Entry> entries() {
    absl::MutexLock lock(&mu_);
    return entries_;
  }
  void set_refuse(bool refuse) {
    absl::MutexLock lock(&mu_);
    refuse_ = refuse;
  }

 private:
  absl::Mutex mu_;
  std::vector<Entry> entries_;
  int n_ = 0;
  bool refuse_ = false;
};

constexpr char kDockerSock[] = "/var/run/docker.sock";

class ApiProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> image = sc::testing::ContainerEnv("docker");
    ASSERT_TRUE(image.ok()) << image.status();
    image_ = *image;
    ProxyOptions o;
    o.upstream = kDockerSock;
    o.listen = dir_.path() + "/run/docker.sock";
    absl::StatusOr<std::unique_ptr<ApiProxy>> proxy = ApiProxy::Start(o, &ledger_);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
    prefix_ = absl::StrCat("rr-proxy-", ::getpid(), "-");
    upstream_ = sc::NewSocketApi(sc::Runtime::kDocker, kDockerSock, absl::Seconds(20));
  }
  void TearDown() override {
    // Only what this test made, straight at dockerd.
    for (const char* kind : {"container", "network", "volume"}) {
      Sh(absl::StrCat("docker -H unix://", kDockerSock, " ", kind, " ls -q ",
                      std::string(kind) == "container" ? "-a " : "", "--filter name=", prefix_,
                      " | xargs -r docker -H unix://", kDockerSock, " ", kind, " rm -f"))
          .IgnoreError();
    }
  }
  // `args` run by the docker CLI with DOCKER_HOST at the proxy.
  absl::StatusOr<std::string> Docker(const std::string& args) {
    return Sh(absl::StrCat("DOCKER_HOST=unix://", proxy_->options().listen, " docker ", args));
  }
  // The ledger's entries for the create of `name`: before, then its end.
  std::vector<Entry> For(const std::string& name) {
    std::vector<Entry> all = ledger_.entries();
    std::string nonce;
    for (const Entry& e : all) {
      if (e.op == "before" && e.name == name) nonce = e.nonce;
    }
    std::vector<Entry> out;
    for (const Entry& e : all) {
      if (!nonce.empty() && e.nonce == nonce) out.push_back(e);
    }
    return out;
  }

  base::TempDir dir_{"rr_prx"};
  RecordingLedger ledger_;
  std::unique_ptr<ApiProxy> proxy_;
  std::unique_ptr<sc::RuntimeApi> upstream_;
  std::string image_;
  std::string prefix_;
};

TEST_F(ApiProxyTest, SocketHasTheUpstreamsOwnerGroupAndMode) {
  struct stat up, mine;
  ASSERT_EQ(::stat(kDockerSock, &up), 0);
  ASSERT_EQ(::stat(proxy_->options().listen.c_str(), &mine), 0);
  EXPECT_TRUE(S_ISSOCK(mine.st_mode));
  EXPECT_EQ(mine.st_uid, up.st_uid);
  EXPECT_EQ(mine.st_gid, up.st_gid);
  EXPECT_EQ(mine.st_mode & 07777, up.st_mode & 07777);
}

TEST_F(ApiProxyTest, DockerCliWorksAndEveryCreateIsRecordedAndStamped) {
  const std::string c = prefix_ + "d";
  ASSERT_OK_AND_ASSIGN(std::string id, Docker(absl::StrCat("run -d --name ", c, " ", image_,
                                                           " sh -c 'echo hello-logs; sleep 900'")));
  std::vector<Entry> e = For(c);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind, sc::ObjectKind::kContainer);
  EXPECT_GT(e[0].peer.pid, 1);
  EXPECT_EQ(e[0].peer.uid, ::getuid());
  EXPECT_GE(e[0].peer.pidfd, 0);
  EXPECT_GT(e[0].peer.start_time_ticks, 0u);
  EXPECT_EQ(e[0].peer_comm, "docker");
  EXPECT_EQ(e[1].op, "created");
  EXPECT_EQ(e[1].id, id);
  ASSERT_OK_AND_ASSIGN(sc::ObjectState st, upstream_->Inspect(sc::ObjectKind::kContainer, id));
  EXPECT_EQ(st.labels[sc::kClaimLabel], e[0].nonce);

  // Logs, exec and an attached run go through (hijacked streams included).
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<std::string> logs = Docker("logs " + c);
    return logs.ok() && *logs == "hello-logs";
  }));
  ASSERT_OK_AND_ASSIGN(std::string out, Docker(absl::StrCat("exec ", c, " echo from-exec")));
  EXPECT_EQ(out, "from-exec");
  ASSERT_OK_AND_ASSIGN(
      out, Docker(absl::StrCat("run --rm --name ", prefix_, "rm ", image_, " echo attached-out")));
  EXPECT_EQ(out, "attached-out");
  ASSERT_OK_AND_ASSIGN(
      out, Sh(absl::StrCat("echo piped-in | DOCKER_HOST=unix://", proxy_->options().listen,
                           " docker run --rm -i --name ", prefix_, "in ", image_, " cat")));
  EXPECT_EQ(out, "piped-in");
  e = For(prefix_ + "rm");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].op, "created");

  const std::string net = prefix_ + "n";
  ASSERT_OK_AND_ASSIGN(std::string net_id, Docker("network create " + net));
  e = For(net);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind, sc::ObjectKind::kNetwork);
  EXPECT_EQ(e[1].id, net_id);
  ASSERT_OK_AND_ASSIGN(st, upstream_->Inspect(sc::ObjectKind::kNetwork, net_id));
  EXPECT_EQ(st.labels[sc::kClaimLabel], e[0].nonce);

  const std::string vol = prefix_ + "v";
  ASSERT_OK_AND_ASSIGN(out, Docker("volume create " + vol));
  e = For(vol);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind, sc::ObjectKind::kVolume);
  EXPECT_EQ(e[1].id, vol);
  EXPECT_TRUE(e[1].flag);
  ASSERT_OK_AND_ASSIGN(st, upstream_->Inspect(sc::ObjectKind::kVolume, vol));
  EXPECT_EQ(st.labels[sc::kClaimLabel], e[0].nonce);
  // Creating it again answers with the existing volume: not this claim's.
  ASSERT_OK(Docker("volume create " + vol).status());
  e = For(vol);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_FALSE(e[1].flag);
}

TEST_F(ApiProxyTest, ForgedAndAmbiguousLabelsAreRefused) {
  const std::string sock = proxy_->options().listen;
  const std::string forged = absl::StrCat(
      "{\"Image\":\"", image_, "\",\"Labels\":{\"io.runreaper.claim\":\"someone-else\"}}");
  ASSERT_OK_AND_ASSIGN(sc::HttpAnswer a,
                       sc::HttpCall(sock, "POST", "/v1.41/containers/create?name=" + prefix_ + "f",
                                    forged, absl::Seconds(20)));
  EXPECT_EQ(a.head.status, 400);
  EXPECT_TRUE(absl::StrContains(sc::ErrorMessage(a.body), "reserved for runreaper")) << a.body;
  std::vector<Entry> e = For(prefix_ + "f");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].op, "failed");
  EXPECT_FALSE(e[1].flag);
  EXPECT_EQ(upstream_->Inspect(sc::ObjectKind::kContainer, prefix_ + "f").status().code(),
            absl::StatusCode::kNotFound);

  const std::string dup =
      absl::StrCat("{\"Image\":\"", image_, "\",\"Labels\":{},\"labels\":{\"a\":\"b\"}}");
  ASSERT_OK_AND_ASSIGN(a, sc::HttpCall(sock, "POST", "/containers/create?name=" + prefix_ + "g",
                                       dup, absl::Seconds(20)));
  EXPECT_EQ(a.head.status, 400);
  EXPECT_TRUE(absl::StrContains(a.body, "top-level keys")) << a.body;
  // The CLI's own label flag cannot forge one either.
  absl::StatusOr<std::string> cli = Docker(
      absl::StrCat("run -d --name ", prefix_, "h --label io.runreaper.claim=x ", image_, " true"));
  ASSERT_FALSE(cli.ok());
  EXPECT_TRUE(absl::StrContains(cli.status().message(), "reserved for runreaper")) << cli.status();
}

TEST_F(ApiProxyTest, ALedgerThatCannotRecordRefusesTheCreate) {
  ledger_.set_refuse(true);
  absl::StatusOr<std::string> out = Docker(absl::StrCat("volume create ", prefix_, "r"));
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "cannot record this volume create"))
      << out.status();
  EXPECT_EQ(upstream_->Inspect(sc::ObjectKind::kVolume, prefix_ + "r").status().code(),
            absl::StatusCode::kNotFound);
  // Reads are not the ledger's business.
  EXPECT_OK(Docker("version --format '{{.Server.Version}}'").status());
}

TEST_F(ApiProxyTest, ConnectionsPerUidAreBounded) {
  ProxyOptions o = proxy_->options();
  o.listen = dir_.path() + "/cap/docker.sock";
  o.max_connections_per_uid = 1;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ApiProxy> capped, ApiProxy::Start(o, &ledger_));
  ASSERT_OK_AND_ASSIGN(base::Fd held, sc::ConnectUnix(o.listen));
  // The first connection is being served once a request on it is answered.
  ASSERT_OK_AND_ASSIGN(base::Fd second_try, sc::ConnectUnix(o.listen));
  second_try.Reset();
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<sc::HttpAnswer> a =
        sc::HttpCall(o.listen, "GET", "/_ping", "", absl::Seconds(5));
    return a.ok() && a->head.status == 503 && absl::StrContains(a->body, "the most one user may");
  }));
  held.Reset();
  ASSERT_TRUE(base::WaitFor([&] {
    absl::StatusOr<sc::HttpAnswer> a =
        sc::HttpCall(o.listen, "GET", "/_ping", "", absl::Seconds(5));
    return a.ok() && a->head.status == 200;
  }));
}

// Podman's API service behind the proxy: its Docker-compatible endpoints
// through the docker CLI, and its own libpod dialect (a volume's labels
// are "Label" there).
TEST(ApiProxyPodmanTest, CompatAndLibpodCreatesAreRecordedAndStamped) {
  ASSERT_OK_AND_ASSIGN(std::string image, sc::testing::ContainerEnv("podman"));
  sc::testing::PodmanService service;
  ASSERT_TRUE(service.ready()) << service.socket();
  base::TempDir dir("rr_prp");
  RecordingLedger ledger;
  ProxyOptions o;
  o.runtime = sc::Runtime::kPodman;
  o.upstream = service.socket();
  o.listen = dir.path() + "/podman.sock";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ApiProxy> proxy, ApiProxy::Start(o, &ledger));
  std::unique_ptr<sc::RuntimeApi> api =
      sc::NewSocketApi(sc::Runtime::kPodman, service.socket(), absl::Seconds(20));
  const std::string prefix = absl::StrCat("rr-proxy-pod-", ::getpid(), "-");
  const std::string docker = absl::StrCat("DOCKER_HOST=unix://", o.listen, " docker ");
  // What this test made goes whatever fails.
  absl::Cleanup remove = [&] {
    Sh(absl::StrCat("podman rm -f ", prefix, "c; podman volume rm ", prefix, "v")).IgnoreError();
  };

  ASSERT_OK_AND_ASSIGN(
      std::string id,
      Sh(absl::StrCat(docker, "run -d --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --name ",
                      prefix, "c ", image, " sleep 900")));
  ASSERT_OK_AND_ASSIGN(sc::ObjectState st, api->Inspect(sc::ObjectKind::kContainer, id));
  std::string nonce;
  for (const Entry& e : ledger.entries()) {
    if (e.op == "before" && e.name == prefix + "c") nonce = e.nonce;
  }
  ASSERT_FALSE(nonce.empty());
  EXPECT_EQ(st.labels[sc::kClaimLabel], nonce);

  const std::string body = absl::StrCat("{\"Name\":\"", prefix, "v\",\"Label\":{\"a\":\"b\"}}");
  ASSERT_OK_AND_ASSIGN(
      sc::HttpAnswer a,
      sc::HttpCall(o.listen, "POST", "/v4.0.0/libpod/volumes/create", body, absl::Seconds(20)));
  ASSERT_EQ(a.head.status / 100, 2) << a.body;
  ASSERT_OK_AND_ASSIGN(sc::ObjectState v, api->Inspect(sc::ObjectKind::kVolume, prefix + "v"));
  EXPECT_EQ(v.labels["a"], "b");
  std::vector<Entry> all = ledger.entries();
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all.back().op, "created");
  EXPECT_EQ(all.back().id, prefix + "v");
  EXPECT_TRUE(all.back().flag) << "the answer's labels carry this claim";
  EXPECT_EQ(v.labels[sc::kClaimLabel], all.back().nonce);

  EXPECT_OK(api->Remove(sc::ObjectKind::kContainer, id));
  EXPECT_OK(api->Remove(sc::ObjectKind::kVolume, prefix + "v"));
}

}  // namespace
}  // namespace runreaper::server::containers
