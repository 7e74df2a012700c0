#include "server/containers/outside_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/file_util.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/proto_time.h"
#include "scanner/containers/api_json.h"
#include "scanner/containers/http1.h"
#include "scanner/containers/unix_http.h"
#include "server/containers/store_ledger.h"

namespace runreaper::server::containers {
namespace {

namespace rt = ::runreaper::scanner::containers;

constexpr rt::ObjectKind kKinds[] = {rt::ObjectKind::kContainer, rt::ObjectKind::kNetwork,
                                     rt::ObjectKind::kVolume};

// The networks a runtime makes itself: nobody's creation.
bool Predefined(rt::ObjectKind kind, absl::string_view name) {
  return kind == rt::ObjectKind::kNetwork &&
         (name == "bridge" || name == "host" || name == "none" || name == "podman");
}

std::string ListTarget(rt::ObjectKind kind) {
  switch (kind) {
    case rt::ObjectKind::kContainer:
      return "/containers/json?all=1";
    case rt::ObjectKind::kNetwork:
      return "/networks";
    case rt::ObjectKind::kVolume:
      return "/volumes";
  }
  return "";
}

}  // namespace

absl::StatusOr<bool> RecordIfOutside(store::RunStore& store, rt::RuntimeApi& api,
                                     rt::ObjectKind kind, absl::string_view id,
                                     const StoreLedger* ledger) {
  absl::StatusOr<rt::ObjectState> st = api.Inspect(kind, id);
  if (absl::IsNotFound(st.status())) return false;  // gone already
  if (!st.ok()) return st.status();
  if (Predefined(kind, st->name)) return false;
  std::string why = kCreatedOutside;
  if (auto claim = st->labels.find(rt::kClaimLabel); claim != st->labels.end()) {
    // Ours while its PENDING row stands: the ledger makes it LIVE, or the
    // resolution at a connect does.
    store::RunStore::ContainerQuery pending;
    pending.states = {v1::CONTAINER_STATE_PENDING};
    ASSIGN_OR_RETURN(const std::vector<v1::Container> rows, store.ListContainers(pending));
    for (const v1::Container& r : rows) {
      if (r.claim() != claim->second) continue;
      // While this runreaperd has the create in flight, its ledger
      // completes the row. Otherwise (a create a killed runreaperd
      // forwarded, or one whose answer was lost) its object is here now.
      if (ledger == nullptr || ledger->InFlight(r.claim())) return false;
      ASSIGN_OR_RETURN(const std::vector<std::string> ids,
                       api.ListByLabel(kind, rt::kClaimLabel, r.claim()));
      PendingOutcome resolved;
      RETURN_IF_ERROR(ResolvePendingRow(store, r, ids, absl::InfiniteFuture(), &resolved));
      return false;
    }
    why = kClaimWithoutRecord;
  }
  v1::Container row;
  row.set_runtime(std::string(rt::RuntimeName(api.runtime())));
  row.set_kind(std::string(rt::KindName(kind)));
  row.set_id(st->id.empty() ? std::string(id) : st->id);
  row.set_name(st->name);
  row.set_attribution(why);
  row.set_state(v1::CONTAINER_STATE_LIVE);
  proto_time::SetTimestamp(absl::Now(), row.mutable_created_at());
  ASSIGN_OR_RETURN(const v1::Container stored, store.RecordContainer(row));
  // RecordContainer keeps an existing row: ours only if it says so.
  return stored.attribution() == why && stored.run_id().empty() && stored.claim().empty();
}

absl::StatusOr<int> CatchUp(store::RunStore& store, rt::RuntimeApi& api,
                            const std::string& socket_path, const StoreLedger* ledger) {
  const std::string runtime(rt::RuntimeName(api.runtime()));
  std::set<std::pair<std::string, std::string>> known;  // (kind, id)
  ASSIGN_OR_RETURN(const std::vector<v1::Container> rows,
                   store.ListContainers(store::RunStore::ContainerQuery()));
  for (const v1::Container& r : rows) {
    if (r.runtime() == runtime && !r.id().empty()) known.emplace(r.kind(), r.id());
  }
  int added = 0;
  for (const rt::ObjectKind kind : kKinds) {
    ASSIGN_OR_RETURN(const rt::HttpAnswer a,
                     rt::HttpCall(socket_path, "GET", ListTarget(kind), "", absl::Seconds(30)));
    if (a.head.status / 100 != 2) {
      return absl::UnavailableError(absl::StrCat(runtime, ": GET ", ListTarget(kind), " answered ",
                                                 a.head.status, ": ", rt::ErrorMessage(a.body)));
    }
    ASSIGN_OR_RETURN(const std::vector<std::string> ids, rt::ParseList(kind, a.body));
    for (const std::string& id : ids) {
      if (known.count({std::string(rt::KindName(kind)), id}) != 0) continue;
      ASSIGN_OR_RETURN(const bool recorded, RecordIfOutside(store, api, kind, id, ledger));
      if (recorded) ++added;
    }
  }
  return added;
}

OutsideWatch::OutsideWatch(store::RunStore* store, rt::Runtime runtime, std::string socket_path,
                           Options options)
    : store_(store),
      runtime_(runtime),
      socket_path_(std::move(socket_path)),
      options_(options),
      api_(rt::NewSocketApi(runtime, socket_path_, options.call_timeout)) {}

OutsideWatch::~OutsideWatch() { Stop(); }

absl::Status OutsideWatch::Start() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, "pipe2 for the container event watch");
  }
  wake_read_ = base::Fd(p[0]);
  wake_write_ = base::Fd(p[1]);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void OutsideWatch::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (wake_write_.valid()) base::WriteFull(wake_write_.get(), "x", 1);
  if (thread_.joinable()) thread_.join();
}

int OutsideWatch::connects() const {
  absl::MutexLock lock(&mu_);
  return connects_;
}

bool OutsideWatch::Sleep(absl::Duration d) {
  struct pollfd p = {wake_read_.get(), POLLIN, 0};
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(d));
  int n;
  do {
    n = ::poll(&p, 1, ms);
  } while (n < 0 && errno == EINTR);
  absl::MutexLock lock(&mu_);
  return !stop_;
}

void OutsideWatch::Loop() {
  const std::string runtime(rt::RuntimeName(runtime_));
  absl::Duration backoff = options_.min_backoff;
  absl::Status last = absl::OkStatus();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    const absl::Time began = absl::Now();
    absl::Status s = Follow();
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    // A stream that ran a while was healthy: start the backoff over.
    if (absl::Now() - began > options_.max_backoff) backoff = options_.min_backoff;
    if (s.ToString() != last.ToString()) {
      base::LogWarning(base::LogFields(), runtime, " event stream on ", socket_path_, ": ",
                       s.ToString(), "; retrying with backoff");
      last = s;
    }
    if (!Sleep(backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::StatusOr<absl::Time> OutsideWatch::ResolveAndLog() {
  ASSIGN_OR_RETURN(const PendingOutcome p,
                   ResolvePending(*store_, *api_, options_.ledger, options_.pending_settle));
  if (p.live + p.dropped + p.conflicting + p.waiting > 0) {
    base::LogInfo(base::LogFields(), rt::RuntimeName(runtime_),
                  " pending claims resolved: ", p.live, " live, ", p.dropped, " dropped, ",
                  p.conflicting, " on several objects (unattributed); ", p.waiting,
                  " waiting for their object");
  }
  return p.waiting > 0 ? absl::Now() + options_.pending_settle : absl::InfiniteFuture();
}

absl::Status OutsideWatch::Follow() {
  const std::string runtime(rt::RuntimeName(runtime_));
  ASSIGN_OR_RETURN(base::Fd fd, rt::ConnectUnix(socket_path_));
  // The stream first, so nothing created during the catch-up is missed.
  const std::string filters = R"({"type":["container","network","volume"],"event":["create"]})";
  const std::string request =
      absl::StrCat("GET /events?filters=", rt::http1::PercentEncode(filters),
                   " HTTP/1.1\r\nHost: runreaper\r\nUser-Agent: runreaper\r\n\r\n");
  // A fresh unix socket takes a short request whole; a partial write is
  // retried (the socket is non-blocking).
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::write(fd.get(), request.data() + sent, request.size() - sent);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
      return absl::UnavailableError(
          absl::StrCat("write to ", socket_path_, ": ", std::strerror(errno)));
    } else if (n < 0 && errno == EAGAIN) {
      struct pollfd p = {fd.get(), POLLOUT, 0};
      ::poll(&p, 1, 1000);
    }
  }
  std::string buf;
  std::string data;
  rt::http1::ChunkedScanner chunks(&data, rt::kMaxAnswerBytes);
  bool chunked = false;
  bool head_done = false;
  bool caught_up = false;
  absl::Time resolve_again = absl::InfiniteFuture();
  struct pollfd fds[2] = {{fd.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
  while (true) {
    if (head_done && !caught_up) {
      ASSIGN_OR_RETURN(resolve_again, ResolveAndLog());
      ASSIGN_OR_RETURN(const int added, CatchUp(*store_, *api_, socket_path_, options_.ledger));
      if (added > 0) {
        base::LogInfo(base::LogFields(), runtime, ": ", added, " object(s) ", kCreatedOutside,
                      " recorded unattributed");
      }
      caught_up = true;
      absl::MutexLock lock(&mu_);
      ++connects_;
    }
    // Complete lines of the stream (one JSON event each).
    for (size_t nl; (nl = data.find('\n')) != std::string::npos;) {
      const std::string line = data.substr(0, nl);
      data.erase(0, nl + 1);
      absl::StatusOr<rt::JsonValue> ev = rt::ParseJson(line);
      if (!ev.ok()) continue;
      const rt::JsonValue* type = ev->Field("Type");
      const rt::JsonValue* action = ev->Field("Action");
      const rt::JsonValue* actor = ev->Field("Actor");
      const rt::JsonValue* id = actor != nullptr ? actor->Field("ID") : nullptr;
      if (type == nullptr || action == nullptr || id == nullptr || action->text != "create") {
        continue;
      }
      absl::StatusOr<rt::ObjectKind> kind = rt::ParseKind(type->text);
      if (!kind.ok()) continue;
      absl::StatusOr<bool> r = RecordIfOutside(*store_, *api_, *kind, id->text, options_.ledger);
      if (!r.ok()) {
        base::LogWarning(base::LogFields(), runtime, " ", type->text, " ", id->text,
                         ": not recorded: ", r.status().ToString());
      } else if (*r) {
        base::LogInfo(base::LogFields(), runtime, " ", type->text, " ", id->text, " ",
                      kCreatedOutside, ": recorded unattributed");
      }
    }
    // Idle: a blocked poll, with a timeout only while PENDING rows wait for
    // their objects.
    int n;
    do {
      const int ms = resolve_again == absl::InfiniteFuture()
                         ? -1
                         : static_cast<int>(std::max<int64_t>(
                               0, absl::ToInt64Milliseconds(resolve_again - absl::Now()) + 1));
      n = ::poll(fds, 2, ms);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return absl::ErrnoToStatus(errno, "poll on the event stream");
    if (n == 0) {
      ASSIGN_OR_RETURN(resolve_again, ResolveAndLog());
      continue;
    }
    if (fds[1].revents != 0) return absl::OkStatus();  // Stop
    char chunk[16384];
    const ssize_t got = ::read(fd.get(), chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      return absl::UnavailableError(absl::StrCat("the event stream on ", socket_path_, " ended"));
    }
    if (!head_done) {
      buf.append(chunk, static_cast<size_t>(got));
      ASSIGN_OR_RETURN(const size_t head_len, rt::http1::HeadLength(buf));
      if (head_len == 0) continue;
      ASSIGN_OR_RETURN(const rt::http1::Head head,
                       rt::http1::ParseResponseHead(absl::string_view(buf).substr(0, head_len)));
      if (head.status != 200) {
        return absl::UnavailableError(
            absl::StrCat("GET /events on ", socket_path_, " answered ", head.status));
      }
      ASSIGN_OR_RETURN(const rt::http1::Framing framing, rt::http1::ResponseFraming(head, "GET"));
      chunked = framing.kind == rt::http1::BodyKind::kChunked;
      buf.erase(0, head_len);
      head_done = true;
    } else {
      buf.append(chunk, static_cast<size_t>(got));
    }
    if (chunked) {
      ASSIGN_OR_RETURN(const size_t used, chunks.Feed(buf));
      buf.erase(0, used);
      if (chunks.done()) {
        return absl::UnavailableError(absl::StrCat("the event stream on ", socket_path_, " ended"));
      }
    } else {
      data += buf;
      buf.clear();
    }
  }
}

}  // namespace runreaper::server::containers
