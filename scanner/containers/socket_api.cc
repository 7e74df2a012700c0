// RuntimeApi over the Engine API's unix socket (runtime_api.h NewSocketApi):
// dockerd's, or podman's Docker-compatible endpoints, which answer the same
// paths, statuses and bodies for what is used here.
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "scanner/containers/api_json.h"
#include "scanner/containers/http1.h"
#include "scanner/containers/runtime_api.h"
#include "scanner/containers/unix_http.h"

namespace runreaper::scanner::containers {
namespace {

std::string ObjectPath(ObjectKind kind, absl::string_view id) {
  switch (kind) {
    case ObjectKind::kContainer:
      return absl::StrCat("/containers/", http1::PercentEncode(id));
    case ObjectKind::kNetwork:
      return absl::StrCat("/networks/", http1::PercentEncode(id));
    case ObjectKind::kVolume:
      return absl::StrCat("/volumes/", http1::PercentEncode(id));
  }
  return "";
}

class SocketApi : public RuntimeApi {
 public:
  SocketApi(Runtime runtime, std::string socket_path, absl::Duration timeout)
      : runtime_(runtime), socket_path_(std::move(socket_path)), timeout_(timeout) {}

  Runtime runtime() const override { return runtime_; }

  absl::StatusOr<ObjectState> Inspect(ObjectKind kind, absl::string_view id) override {
    std::string target = ObjectPath(kind, id);
    if (kind == ObjectKind::kContainer) {
      target += "/json";
      // Podman's own endpoint names the container's conmon (State.ConmonPid);
      // its compat answer does not. Libpod routes need a version prefix.
      if (runtime_ == Runtime::kPodman) target = "/v4.0.0/libpod" + target;
    }
    ASSIGN_OR_RETURN(HttpAnswer a, Call("GET", target, kind, id));
    ASSIGN_OR_RETURN(ObjectState st, ParseInspect(kind, a.body));
    if (kind == ObjectKind::kVolume) {
      // A volume's users: the containers mounting it (inspect does not say).
      std::string filter = absl::StrCat("{\"volume\":[", JsonQuote(st.id), "]}");
      ASSIGN_OR_RETURN(
          HttpAnswer l,
          Call("GET", absl::StrCat("/containers/json?all=1&filters=", http1::PercentEncode(filter)),
               kind, id));
      ASSIGN_OR_RETURN(st.used_by, ParseList(ObjectKind::kContainer, l.body));
    }
    return st;
  }

  absl::Status Stop(absl::string_view id, absl::Duration grace) override {
    int64_t seconds = static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(grace)));
    if (seconds < 0) seconds = 0;
    std::string target = absl::StrCat(ObjectPath(ObjectKind::kContainer, id), "/stop?t=", seconds);
    // The runtime waits the grace before it kills: the call may take that long.
    ASSIGN_OR_RETURN(HttpAnswer a,
                     Call("POST", target, ObjectKind::kContainer, id, absl::Seconds(seconds)));
    (void)a;  // 204 stopped, 304 already stopped: both OK
    return absl::OkStatus();
  }

  absl::Status Remove(ObjectKind kind, absl::string_view id) override {
    std::string target = ObjectPath(kind, id);
    if (kind == ObjectKind::kContainer) target += "?v=1&force=1";
    ASSIGN_OR_RETURN(HttpAnswer a, Call("DELETE", target, kind, id));
    (void)a;
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> ListByLabel(ObjectKind kind, absl::string_view key,
                                                       absl::string_view value) override {
    std::string filter =
        absl::StrCat("{\"label\":[", JsonQuote(absl::StrCat(key, "=", value)), "]}");
    std::string base;
    switch (kind) {
      case ObjectKind::kContainer:
        base = "/containers/json?all=1&";
        break;
      case ObjectKind::kNetwork:
        base = "/networks?";
        break;
      case ObjectKind::kVolume:
        base = "/volumes?";
        break;
    }
    ASSIGN_OR_RETURN(HttpAnswer a,
                     Call("GET", absl::StrCat(base, "filters=", http1::PercentEncode(filter)), kind,
                          absl::StrCat("label ", key, "=", value)));
    return ParseList(kind, a.body);
  }

 private:
  // One call; a non-2xx/304 answer becomes the status the interface names.
  absl::StatusOr<HttpAnswer> Call(absl::string_view method, const std::string& target,
                                  ObjectKind kind, absl::string_view id,
                                  absl::Duration extra = absl::ZeroDuration()) {
    absl::StatusOr<HttpAnswer> a = HttpCall(socket_path_, method, target, "", timeout_ + extra);
    if (!a.ok()) {
      return absl::Status(a.status().code() == absl::StatusCode::kUnavailable ||
                                  a.status().code() == absl::StatusCode::kDeadlineExceeded
                              ? absl::StatusCode::kUnavailable
                              : a.status().code(),
                          absl::StrCat(RuntimeName(runtime_), ": ", a.status().message()));
    }
    int status = a->head.status;
    if ((status >= 200 && status < 300) || status == 304) return a;
    std::string msg = absl::StrCat(RuntimeName(runtime_), " ", KindName(kind), " ", id, ": ",
                                   method, " answered ", status, ": ", ErrorMessage(a->body));
    switch (status) {
      case 404:
        return absl::NotFoundError(msg);
      case 403:  // a network with endpoints, a predefined network
      case 409:  // in use, or being removed
        return absl::FailedPreconditionError(msg);
      case 400:
        return absl::InvalidArgumentError(msg);
      default:
        return absl::InternalError(msg);
    }
  }

  const Runtime runtime_;
  const std::string socket_path_;
  const absl::Duration timeout_;
};

}  // namespace

std::unique_ptr<RuntimeApi> NewSocketApi(Runtime runtime, std::string socket_path,
                                         absl::Duration timeout) {
  return std::make_unique<SocketApi>(runtime, std::move(socket_path), timeout);
}

}  // namespace runreaper::scanner::containers
