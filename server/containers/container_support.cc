#include "server/containers/container_support.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/file_util.h"
#include "base/log.h"
#include "server/socket_path.h"

namespace runreaper::server::containers {
namespace {

namespace sc = scanner::containers;

bool IsSocket(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The deepest existing directory on the way to `path`'s directory.
std::string NearestDir(const std::string& path) {
  std::string dir = DirName(path);
  struct stat st;
  while (dir != "/" && dir != "." && !(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode))) {
    dir = DirName(dir);
  }
  return dir;
}

}  // namespace

std::unique_ptr<ContainerSupport> ContainerSupport::Start(const ContainerOptions& options,
                                                          std::unique_ptr<CreationLedger> ledger) {
  std::unique_ptr<ContainerSupport> cs(new ContainerSupport());
  cs->ledger_ = std::move(ledger);
  if (!options.enabled) {
    base::LogInfo("containers: off (--containers=off): no API proxy, no container attribution");
    return cs;
  }
  struct Spec {
    sc::Runtime runtime;
    std::string upstream;
  };
  for (const Spec& s : {Spec{sc::Runtime::kDocker, options.docker_socket},
                        Spec{sc::Runtime::kPodman, options.podman_socket}}) {
    if (s.upstream.empty()) continue;
    cs->apis_.push_back(sc::NewSocketApi(s.runtime, s.upstream, absl::Seconds(30)));
    Upstream u;
    u.proxy.runtime = s.runtime;
    u.proxy.upstream = s.upstream;
    u.proxy.listen = absl::StrCat(options.proxy_dir, "/", sc::RuntimeName(s.runtime), ".sock");
    absl::MutexLock lock(&cs->mu_);
    cs->upstreams_.push_back(std::move(u));
  }
  bool all;
  {
    absl::MutexLock lock(&cs->mu_);
    all = cs->StartPresent();
    for (const Upstream& u : cs->upstreams_) {
      if (u.running == nullptr && u.last_error.empty()) {
        base::LogInfo("containers: no ", sc::RuntimeName(u.proxy.runtime), " socket at ",
                      u.proxy.upstream, " yet; its proxy ", u.proxy.listen,
                      " starts when it appears");
      }
    }
  }
  if (!all) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      base::LogError("containers: pipe2: ", std::strerror(errno),
                     "; sockets that appear later are not noticed");
      return cs;
    }
    cs->stop_read_.Reset(p[0]);
    cs->stop_write_.Reset(p[1]);
    cs->watcher_ = std::thread([raw = cs.get()] { raw->Watch(); });
  }
  return cs;
}

ContainerSupport::~ContainerSupport() {
  if (stop_write_.valid()) {
    const char c = 0;
    base::WriteFull(stop_write_.get(), &c, 1);
  }
  if (watcher_.joinable()) watcher_.join();
  absl::MutexLock lock(&mu_);
  upstreams_.clear();  // proxies stop before the ledger goes
}

bool ContainerSupport::StartPresent() {
  bool all = true;
  for (Upstream& u : upstreams_) {
    if (u.running != nullptr) continue;
    if (!IsSocket(u.proxy.upstream)) {
      all = false;
      continue;
    }
    absl::StatusOr<std::unique_ptr<ApiProxy>> proxy = ApiProxy::Start(u.proxy, ledger_.get());
    if (proxy.ok()) {
      u.running = *std::move(proxy);
      u.last_error.clear();
    } else {
      all = false;
      std::string error = proxy.status().ToString();
      if (error != u.last_error) {
        base::LogError("containers: no proxy for ", u.proxy.upstream, ": ", error);
        u.last_error = std::move(error);
      }
    }
  }
  return all;
}

void ContainerSupport::Watch() {
  while (true) {
    // Watches are set afresh each round: a directory on the way may have
    // appeared (or gone) since.
    base::Fd in(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!in.valid()) {
      base::LogError("containers: inotify_init1: ", std::strerror(errno),
                     "; sockets that appear later are not noticed");
      return;
    }
    std::set<std::string> dirs;
    {
      absl::MutexLock lock(&mu_);
      if (StartPresent()) return;
      for (const Upstream& u : upstreams_) {
        if (u.running == nullptr) dirs.insert(NearestDir(u.proxy.upstream));
      }
    }
    for (const std::string& d : dirs) {
      if (::inotify_add_watch(in.get(), d.c_str(),
                              IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF) < 0) {
        base::LogWarning("containers: inotify watch on ", d, ": ", std::strerror(errno));
      }
    }
    // A socket made between the check above and the watches.
    {
      absl::MutexLock lock(&mu_);
      if (StartPresent()) return;
    }
    struct pollfd p[2] = {{in.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    while (::poll(p, 2, -1) < 0 && errno == EINTR) {
    }
    if (p[1].revents != 0) return;
    // dockerd binds its socket, then listens: a connect right after the
    // create event may be refused for a moment; a proxy connects per
    // client connection, so that moment is harmless.
  }
}

}  // namespace runreaper::server::containers
