#include "server/containers/api_proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "base/file_util.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "scanner/containers/api_json.h"
#include "scanner/containers/http1.h"
#include "scanner/containers/unix_http.h"
#include "server/containers/peer.h"

namespace runreaper::server::containers {
namespace {

namespace sc = scanner::containers;
namespace http1 = scanner::containers::http1;

// An HTTP answer that ends the connection, with the JSON body the docker
// CLI prints as "Error response from daemon: <message>".
std::string ErrorAnswer(int status, absl::string_view reason, absl::string_view message) {
  const std::string body = absl::StrCat("{\"message\":", sc::JsonQuote(message), "}\n");
  return absl::StrCat("HTTP/1.1 ", status, " ", reason,
                      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ",
                      body.size(), "\r\n\r\n", body);
}

absl::Status WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return absl::UnavailableError(absl::StrCat("write: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// One side of a connection: its descriptor and what was read from it but
// not used yet.
struct Side {
  int fd = -1;
  std::string buf;
  bool eof = false;
};

// Reads more from `from` into its buffer. While waiting, a hang-up of
// `watch` (the other side, -1 = none) aborts: a client that went away
// ends a stream it was following. false at end of stream.
absl::StatusOr<bool> Fill(Side& from, int watch) {
  while (true) {
    struct pollfd p[2] = {{from.fd, POLLIN, 0}, {watch, POLLRDHUP, 0}};
    int n = ::poll(p, watch >= 0 ? 2 : 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "poll");
    }
    if (watch >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 && p[0].revents == 0) {
      return absl::CancelledError("the other side hung up");
    }
    if (p[0].revents == 0) continue;
    char chunk[65536];
    ssize_t r = ::read(from.fd, chunk, sizeof chunk);
    if (r > 0) {
      from.buf.append(chunk, static_cast<size_t>(r));
      return true;
    }
    if (r == 0) {
      from.eof = true;
      return false;
    }
    if (errno == EINTR || errno == EAGAIN) continue;
    return absl::UnavailableError(absl::StrCat("read: ", std::strerror(errno)));
  }
}

// Reads a whole head from `from`; 0 at a clean end of stream before any
// byte of it.
absl::StatusOr<size_t> ReadHead(Side& from, int watch) {
  while (true) {
    ASSIGN_OR_RETURN(size_t len, http1::HeadLength(from.buf));
    if (len > 0) return len;
    ASSIGN_OR_RETURN(bool more, Fill(from, watch));
    if (!more) {
      if (from.buf.empty()) return 0;
      return absl::UnavailableError("connection closed inside a head");
    }
  }
}

using Sink = std::function<absl::Status(absl::string_view)>;

// A sink writing to `fd`.
Sink ToFd(int fd) {
  return [fd](absl::string_view bytes) { return WriteAll(fd, bytes); };
}

// Passes a body framed as `framing` from `from` to `sink` unchanged, as it
// arrives. `decoded` (optional) collects the body without its chunked
// coding, bounded by `max` (RESOURCE_EXHAUSTED past it).
absl::Status RelayBody(Side& from, const Sink& sink, const http1::Framing& framing, int watch,
                       std::string* decoded = nullptr, size_t max = 0) {
  auto pass = [&](size_t n) -> absl::Status {
    RETURN_IF_ERROR(sink(absl::string_view(from.buf).substr(0, n)));
    from.buf.erase(0, n);
    return absl::OkStatus();
  };
  switch (framing.kind) {
    case http1::BodyKind::kNone:
      return absl::OkStatus();
    case http1::BodyKind::kLength: {
      uint64_t left = framing.length;
      while (left > 0) {
        if (from.buf.empty()) {
          ASSIGN_OR_RETURN(bool more, Fill(from, watch));
          if (!more) return absl::UnavailableError("connection closed inside a body");
        }
        size_t n = from.buf.size() < left ? from.buf.size() : static_cast<size_t>(left);
        if (decoded != nullptr) {
          if (decoded->size() + n > max) return absl::ResourceExhaustedError("body too large");
          decoded->append(from.buf, 0, n);
        }
        RETURN_IF_ERROR(pass(n));
        left -= n;
      }
      return absl::OkStatus();
    }
    case http1::BodyKind::kChunked: {
      http1::ChunkedScanner scanner(decoded, max);
      while (true) {
        ASSIGN_OR_RETURN(size_t used, scanner.Feed(from.buf));
        RETURN_IF_ERROR(pass(used));
        if (scanner.done()) return absl::OkStatus();
        ASSIGN_OR_RETURN(bool more, Fill(from, watch));
        if (!more) return absl::UnavailableError("connection closed inside a chunked body");
      }
    }
    case http1::BodyKind::kUntilClose:
      while (true) {
        RETURN_IF_ERROR(pass(from.buf.size()));
        ASSIGN_OR_RETURN(bool more, Fill(from, watch));
        if (!more) return absl::OkStatus();
      }
  }
  return absl::OkStatus();
}

// Copies both ways until both ends have closed (docker's attach and exec
// streams: stdin one way, output the other); an end's EOF is passed on as
// a half-close.
void Splice(Side& a, Side& b) {
  if (!a.buf.empty() && WriteAll(b.fd, a.buf).ok()) a.buf.clear();
  if (!b.buf.empty() && WriteAll(a.fd, b.buf).ok()) b.buf.clear();
  while (!a.eof || !b.eof) {
    struct pollfd p[2] = {{a.eof ? -1 : a.fd, POLLIN, 0}, {b.eof ? -1 : b.fd, POLLIN, 0}};
    int n = ::poll(p, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    Side* sides[2] = {&a, &b};
    for (int i = 0; i < 2; ++i) {
      if (p[i].revents == 0) continue;
      Side& from = *sides[i];
      Side& to = *sides[1 - i];
      char chunk[65536];
      ssize_t r = ::read(from.fd, chunk, sizeof chunk);
      if (r > 0) {
        if (!WriteAll(to.fd, absl::string_view(chunk, static_cast<size_t>(r))).ok()) return;
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        if (r < 0) return;
        from.eof = true;
        ::shutdown(to.fd, SHUT_WR);
      }
    }
  }
}

bool KeepAlive(const http1::Head& head) {
  if (head.HasToken("Connection", "close")) return false;
  return head.version_minor >= 1 || head.HasToken("Connection", "keep-alive");
}

}  // namespace

bool IsCreate(absl::string_view method, absl::string_view target, CreateRequest* create) {
  if (method != "POST") return false;
  bool libpod = false;
  const std::string path = http1::ApiPath(target, &libpod);
  create->libpod = libpod;
  if (path == "/containers/create") {
    create->kind = sc::ObjectKind::kContainer;
  } else if (path == "/networks/create") {
    create->kind = sc::ObjectKind::kNetwork;
  } else if (path == "/volumes/create") {
    create->kind = sc::ObjectKind::kVolume;
  } else {
    return false;
  }
  return true;
}

// One client connection and its upstream connection.
class ApiProxy::Connection {
 public:
  Connection(ApiProxy* proxy, int client, const Peer& peer) : proxy_(proxy), peer_(peer) {
    client_.fd = client;
  }

  void Run() {
    absl::StatusOr<base::Fd> up = sc::ConnectUnix(proxy_->options_.upstream);
    if (!up.ok()) {
      Answer(
          502, "Bad Gateway",
          absl::StrCat("runreaper proxy: cannot reach ", sc::RuntimeName(proxy_->options_.runtime),
                       " at ", proxy_->options_.upstream, ": ", up.status().message()));
      return;
    }
    // Blocking from here on: this thread does nothing else.
    ::fcntl(up->get(), F_SETFL, ::fcntl(up->get(), F_GETFL) & ~O_NONBLOCK);
    upstream_fd_ = std::move(*up);
    upstream_.fd = upstream_fd_.get();
    if (!proxy_->Register(upstream_.fd)) return;
    while (Exchange()) {
    }
    proxy_->Unregister(upstream_.fd);
  }

 private:
  // One request and its answer; false when the connection ends.
  bool Exchange() {
    // Idle between requests: an upstream that closes its end (dockerd
    // restarting, its idle timeout) ends this connection too, so the
    // client opens a new one rather than writing into a dead one.
    absl::StatusOr<size_t> head_len = ReadHead(client_, upstream_.fd);
    if (!head_len.ok()) {
      if (head_len.status().code() == absl::StatusCode::kResourceExhausted) {
        Answer(431, "Request Header Fields Too Large",
               "runreaper proxy: request head larger than 64 KiB");
      }
      return false;
    }
    if (*head_len == 0) return false;
    const std::string raw_head = client_.buf.substr(0, *head_len);
    client_.buf.erase(0, *head_len);
    absl::StatusOr<http1::Head> request = http1::ParseRequestHead(raw_head);
    absl::StatusOr<http1::Framing> framing = request.ok()
                                                 ? http1::RequestFraming(*request)
                                                 : absl::StatusOr<http1::Framing>(request.status());
    if (!framing.ok()) {
      Answer(400, "Bad Request", absl::StrCat("runreaper proxy: ", framing.status().message()));
      return false;
    }
    CreateRequest create;
    if (IsCreate(request->method, request->target, &create))
      return Create(*request, *framing, create);

    if (!WriteAll(upstream_.fd, raw_head).ok()) return false;
    if (!RelayBody(client_, ToFd(upstream_.fd), *framing, -1).ok()) return false;
    const bool leaves_http = http1::IsUpgradeRequest(*request) || http1::IsHijackEndpoint(*request);
    while (true) {  // interim 1xx answers, then the final one
      // While the answer is awaited, a client that hung up ends the
      // exchange; not for an upgrade, whose client may half-close early.
      absl::StatusOr<size_t> len = ReadHead(upstream_, leaves_http ? -1 : client_.fd);
      if (!len.ok() || *len == 0) return false;
      const std::string answer_head = upstream_.buf.substr(0, *len);
      upstream_.buf.erase(0, *len);
      absl::StatusOr<http1::Head> answer = http1::ParseResponseHead(answer_head);
      if (!answer.ok()) return false;
      if (!WriteAll(client_.fd, answer_head).ok()) return false;
      absl::StatusOr<http1::Framing> body = http1::ResponseFraming(*answer, request->method);
      if (!body.ok()) return false;
      if (answer->status == 101 ||
          (leaves_http && answer->status < 300 && body->kind == http1::BodyKind::kUntilClose)) {
        Splice(client_, upstream_);
        return false;
      }
      if (answer->status < 200) continue;
      if (!RelayBody(upstream_, ToFd(client_.fd), *body, client_.fd).ok()) return false;
      return body->kind != http1::BodyKind::kUntilClose && KeepAlive(*request) &&
             KeepAlive(*answer);
    }
  }

  // A create: attributed, stamped, forwarded, and its answer recorded
  // before the client sees it.
  bool Create(http1::Head request, const http1::Framing& framing, const CreateRequest& create) {
    const ProxyOptions& o = proxy_->options_;
    std::string body;
    if (framing.kind == http1::BodyKind::kLength && framing.length > o.max_create_body) {
      Answer(413, "Payload Too Large",
             "runreaper proxy: create body larger than the proxy accepts");
      return false;
    }
    // Read whole (into `body`), not passed on as it arrives.
    const Sink discard = [](absl::string_view) { return absl::OkStatus(); };
    absl::Status read = RelayBody(client_, discard, framing, -1, &body, o.max_create_body);
    if (!read.ok()) {
      if (read.code() == absl::StatusCode::kResourceExhausted) {
        Answer(413, "Payload Too Large",
               "runreaper proxy: create body larger than the proxy accepts");
      }
      return false;
    }
    std::string name = http1::QueryParam(request.target, "name").value_or("");
    if (name.empty()) {
      absl::StatusOr<sc::JsonValue> doc = sc::ParseJson(body);
      if (doc.ok() && doc->type == sc::JsonValue::Type::kObject) {
        const sc::JsonValue* n = doc->Field("Name");
        if (n != nullptr && n->type == sc::JsonValue::Type::kString) name = n->text;
      }
    }
    absl::StatusOr<Claim> claim =
        proxy_->ledger_->BeforeCreate(peer_, o.runtime, create.kind, name);
    if (!claim.ok()) {
      Answer(503, "Service Unavailable",
             absl::StrCat("runreaper proxy: cannot record this ", sc::KindName(create.kind),
                          " create, so it is not forwarded: ", claim.status().message()));
      return false;
    }
    absl::StatusOr<std::string> stamped = sc::StampLabel(
        body, sc::CreateLabelsKey(create.kind, create.libpod), sc::kClaimLabel, claim->nonce);
    if (!stamped.ok()) {
      proxy_->ledger_->Failed(*claim, false);
      Answer(400, "Bad Request", absl::StrCat("runreaper proxy: ", stamped.status().message()));
      return false;
    }
    const std::string& out = claim->nonce.empty() ? body : *stamped;
    http1::SetContentLength(request, out.size());
    if (!WriteAll(upstream_.fd, http1::SerializeRequestHead(request) + out).ok()) {
      proxy_->ledger_->Failed(*claim, true);
      return false;
    }
    // The answer, read whole (bounded) before anything of it is passed on.
    std::string answer_bytes;
    http1::Head answer;
    http1::Framing answer_framing;
    while (true) {
      absl::StatusOr<size_t> len = ReadHead(upstream_, -1);
      absl::StatusOr<http1::Head> head =
          len.ok() && *len > 0
              ? http1::ParseResponseHead(absl::string_view(upstream_.buf).substr(0, *len))
              : absl::StatusOr<http1::Head>(absl::UnavailableError("no answer"));
      absl::StatusOr<http1::Framing> f = head.ok() ? http1::ResponseFraming(*head, "POST")
                                                   : absl::StatusOr<http1::Framing>(head.status());
      if (!f.ok()) {
        proxy_->ledger_->Failed(*claim, true);
        return false;
      }
      answer_bytes.append(upstream_.buf, 0, *len);
      upstream_.buf.erase(0, *len);
      answer = *std::move(head);
      answer_framing = *f;
      if (answer.status >= 200) break;
    }
    std::string answer_body;
    const Sink keep = [&answer_bytes](absl::string_view bytes) {
      answer_bytes.append(bytes.data(), bytes.size());
      return absl::OkStatus();
    };
    if (!RelayBody(upstream_, keep, answer_framing, -1, &answer_body, sc::kMaxAnswerBytes).ok()) {
      proxy_->ledger_->Failed(*claim, true);
      return false;
    }
    if (answer.status >= 200 && answer.status < 300) {
      absl::StatusOr<sc::CreateAnswer> created = sc::ParseCreateAnswer(create.kind, answer_body);
      if (created.ok()) {
        const auto it = created->labels.find(sc::kClaimLabel);
        const bool has_claim = create.kind != sc::ObjectKind::kVolume ||
                               (it != created->labels.end() && it->second == claim->nonce);
        absl::Status recorded = proxy_->ledger_->Created(*claim, created->id, has_claim);
        if (!recorded.ok()) {
          base::LogError(
              "container proxy: ", sc::KindName(create.kind), " ", created->id,
              " created but not recorded (the start-up check will): ", recorded.ToString());
        }
      } else {
        proxy_->ledger_->Failed(*claim, true);
        base::LogError("container proxy: ", sc::RuntimeName(o.runtime), " answered a ",
                       sc::KindName(create.kind), " create with ", answer.status,
                       " but no id: ", created.status().ToString());
      }
    } else {
      proxy_->ledger_->Failed(*claim, false);
    }
    if (!WriteAll(client_.fd, answer_bytes).ok()) return false;
    return answer_framing.kind != http1::BodyKind::kUntilClose && KeepAlive(request) &&
           KeepAlive(answer);
  }

  void Answer(int status, absl::string_view reason, absl::string_view message) {
    WriteAll(client_.fd, ErrorAnswer(status, reason, message)).IgnoreError();
  }

  ApiProxy* const proxy_;
  const Peer peer_;
  Side client_;
  Side upstream_;
  base::Fd upstream_fd_;
};

}  // namespace runreaper::server::containers

namespace runreaper::server::containers {
namespace {

// Owner, group and mode of `upstream` onto the socket `name` in `dir`
// (just bound, 0660 root:root): owner-only first, so that at no moment
// does anyone have access the upstream socket does not give. Returns the
// socket's inode.
absl::StatusOr<ino_t> CopyAccess(const SocketPlace& place, const struct stat& upstream) {
  const base::Fd inode(
      ::openat(place.dir.get(), place.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!inode.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", place.path));
  struct stat st;
  if (::fstat(inode.get(), &st) != 0) return absl::ErrnoToStatus(errno, "fstat " + place.path);
  if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(place.path, " is not the socket just bound"));
  }
  const std::string magic = absl::StrCat("/proc/self/fd/", inode.get());
  if (::chmod(magic.c_str(), 0600) != 0)
    return absl::ErrnoToStatus(errno, "chmod 0600 " + place.path);
  if (::fchownat(inode.get(), "", upstream.st_uid, upstream.st_gid, AT_EMPTY_PATH) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("chown ", upstream.st_uid, ":", upstream.st_gid, " ", place.path));
  }
  const mode_t mode = upstream.st_mode & 0777;
  if (::chmod(magic.c_str(), mode) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("chmod %o %s", mode, place.path));
  }
  return st.st_ino;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiProxy>> ApiProxy::Start(const ProxyOptions& options,
                                                          CreationLedger* ledger) {
  struct stat up;
  if (::stat(options.upstream.c_str(), &up) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "container proxy: upstream socket ", options.upstream, ": ", std::strerror(errno)));
  }
  if (!S_ISSOCK(up.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("container proxy: upstream ", options.upstream, " is not a socket"));
  }
  // Jobs must reach the socket: a missing directory is made 0755
  // (PrepareSocketPath would make it 0750).
  const std::string dir = DirName(options.listen);
  RETURN_IF_ERROR(MakeDirs(dir, 0755));
  ASSIGN_OR_RETURN(SocketPlace place, PrepareSocketPath(options.listen));
  struct stat dst;
  if (::fstat(place.dir.get(), &dst) == 0 && (dst.st_mode & 0011) != 0011) {
    base::LogWarning(
        "container proxy: directory ", dir,
        absl::StrFormat(" has mode %o: users other than its owner and group cannot reach ",
                        dst.st_mode & 07777),
        options.listen, " (chmod a+x ", dir, ")");
  }
  ASSIGN_OR_RETURN(base::Fd listen, ListenUnix(place, -1));
  ASSIGN_OR_RETURN(ino_t inode, CopyAccess(place, up));
  std::unique_ptr<ApiProxy> proxy(
      new ApiProxy(options, ledger, std::move(place), std::move(listen)));
  proxy->socket_inode_ = inode;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
  proxy->stop_read_.Reset(p[0]);
  proxy->stop_write_.Reset(p[1]);
  proxy->accept_thread_ = std::thread([raw = proxy.get()] { raw->AcceptLoop(); });
  base::LogInfo(absl::StrFormat("container proxy: %s on %s -> %s (owner %d, group %d, mode %o)",
                                sc::RuntimeName(options.runtime), options.listen, options.upstream,
                                up.st_uid, up.st_gid, up.st_mode & 0777));
  return proxy;
}

ApiProxy::ApiProxy(const ProxyOptions& options, CreationLedger* ledger, SocketPlace place,
                   base::Fd listen)
    : options_(options), ledger_(ledger), place_(std::move(place)), listen_(std::move(listen)) {}

ApiProxy::~ApiProxy() {
  if (stop_write_.valid()) {
    const char c = 0;
    base::WriteFull(stop_write_.get(), &c, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  mu_.Await(absl::Condition(
      +[](int* active) { return *active == 0; }, &active_));
  struct stat st;
  if (place_.dir.valid() &&
      ::fstatat(place_.dir.get(), place_.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISSOCK(st.st_mode) && st.st_ino == socket_inode_) {
    ::unlinkat(place_.dir.get(), place_.name.c_str(), 0);
  }
}

bool ApiProxy::Register(int fd) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  open_fds_.insert(fd);
  return true;
}

void ApiProxy::Unregister(int fd) {
  absl::MutexLock lock(&mu_);
  open_fds_.erase(fd);
}

void ApiProxy::AcceptLoop() {
  while (true) {
    struct pollfd p[2] = {{listen_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      base::LogError("container proxy: poll ", options_.listen, ": ", std::strerror(errno));
      return;
    }
    if (p[1].revents != 0) return;
    if (p[0].revents == 0) continue;
    base::Fd client(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid()) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      // EMFILE and the like: the connection waits in the backlog; try later.
      base::LogWarning("container proxy: accept on ", options_.listen, ": ", std::strerror(errno));
      ::poll(nullptr, 0, 100);
      continue;
    }
    const uint64_t accepted = BootTicksNow();
    struct ucred cred = {};
    socklen_t len = sizeof cred;
    if (::getsockopt(client.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
    std::string refusal;
    {
      absl::MutexLock lock(&mu_);
      if (active_ >= options_.max_connections) {
        refusal =
            absl::StrCat("runreaper proxy: ", active_, " connections open, the most it serves (",
                         options_.max_connections, "); retry later");
      } else if (per_uid_[cred.uid] >= options_.max_connections_per_uid) {
        refusal = absl::StrCat("runreaper proxy: uid ", cred.uid, " has ", per_uid_[cred.uid],
                               " connections open, the most one user may (",
                               options_.max_connections_per_uid, "); close some and retry");
      } else {
        ++active_;
        ++per_uid_[cred.uid];
        open_fds_.insert(client.get());
      }
    }
    if (!refusal.empty()) {
      // A short write on a fresh connection: the socket buffer takes it.
      struct timeval tv = {1, 0};
      ::setsockopt(client.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      WriteAll(client.get(), ErrorAnswer(503, "Service Unavailable", refusal)).IgnoreError();
      continue;
    }
    std::thread([this, fd = client.Release(), uid = cred.uid, accepted] {
      Serve(fd, uid, accepted);
    }).detach();
  }
}

void ApiProxy::Serve(int client, uid_t uid, uint64_t accepted_ticks) {
  {
    absl::StatusOr<PinnedPeer> peer = ReadPeer(client, accepted_ticks);
    if (peer.ok()) {
      Connection(this, client, peer->peer).Run();
    } else {
      base::LogWarning("container proxy: peer of a connection to ", options_.listen, ": ",
                       peer.status().ToString());
    }
  }
  absl::MutexLock lock(&mu_);
  open_fds_.erase(client);
  ::close(client);
  if (--per_uid_[uid] == 0) per_uid_.erase(uid);
  --active_;
}

}  // namespace runreaper::server::containers
