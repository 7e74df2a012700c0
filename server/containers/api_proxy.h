// The container API proxy jobs talk to (docs/DESIGN.md "Containers"): a
// unix socket per runtime that relays the Engine API to the runtime's own
// socket unchanged (keep-alive, streams, attach/exec hijacks), except the
// creates of containers, networks and volumes, which it attributes first:
// CreationLedger::BeforeCreate (refused: 503 to the client), the claim
// label stamped into the body (a forged or ambiguous body: 400), the
// create forwarded, and on a 2xx answer Created before the client sees the
// answer (otherwise Failed).
//
// The socket is made in a held directory by server/socket_path's rules
// (lock file, stale socket replaced, nothing else touched) with the
// upstream socket's owner, group and mode: whoever may use the proxy may
// use the runtime's own socket too, never more. One thread per connection,
// bounded overall and per peer uid; beyond, a 503 says so.
#ifndef RUNREAPER_SERVER_CONTAINERS_API_PROXY_H_
#define RUNREAPER_SERVER_CONTAINERS_API_PROXY_H_

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/fd.h"
#include "scanner/containers/runtime_api.h"
#include "server/containers/creation_ledger.h"
#include "server/socket_path.h"

namespace runreaper::server::containers {

struct ProxyOptions {
  scanner::containers::Runtime runtime = scanner::containers::Runtime::kDocker;
  std::string upstream;  // the runtime's socket, e.g. /var/run/docker.sock
  std::string listen;    // the proxy's socket, e.g. /run/runreaper/docker.sock
  int max_connections = 512;
  int max_connections_per_uid = 128;
  // A create's request body and its answer are read whole: at most this.
  size_t max_create_body = 4 << 20;
};

// A create the proxy recognises: POST [/vX.Y][/libpod]/containers/create,
// /networks/create, /volumes/create. `libpod` says which dialect.
struct CreateRequest {
  scanner::containers::ObjectKind kind;
  bool libpod = false;
};
bool IsCreate(absl::string_view method, absl::string_view target, CreateRequest* create);

class ApiProxy {
 public:
  // Makes the socket (see above) and starts the accept loop. `ledger`
  // outlives the proxy. FAILED_PRECONDITION when the upstream socket is
  // missing or the listen path is refused (socket_path.h).
  static absl::StatusOr<std::unique_ptr<ApiProxy>> Start(const ProxyOptions& options,
                                                         CreationLedger* ledger);
  // Stops accepting, breaks every open connection (a create in flight
  // reports Failed), waits for the threads, removes the socket.
  ~ApiProxy();
  ApiProxy(const ApiProxy&) = delete;
  ApiProxy& operator=(const ApiProxy&) = delete;

  const ProxyOptions& options() const { return options_; }

 private:
  class Connection;
  ApiProxy(const ProxyOptions& options, CreationLedger* ledger, SocketPlace place, base::Fd listen);
  void AcceptLoop();
  void Serve(int client, uid_t uid, uint64_t accepted_ticks);
  // A descriptor a connection uses, shut down when the proxy stops; false
  // (not registered) when it is stopping already.
  bool Register(int fd);
  void Unregister(int fd);

  const ProxyOptions options_;
  CreationLedger* const ledger_;
  SocketPlace place_;
  ino_t socket_inode_ = 0;  // the socket made: removed at stop if still there
  base::Fd listen_;
  base::Fd stop_read_;
  base::Fd stop_write_;
  std::thread accept_thread_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uid_t, int> per_uid_ ABSL_GUARDED_BY(mu_);
  std::set<int> open_fds_ ABSL_GUARDED_BY(mu_);  // shut down at stop
};

}  // namespace runreaper::server::containers

#endif  // RUNREAPER_SERVER_CONTAINERS_API_PROXY_H_
