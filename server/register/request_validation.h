// Request validation for the runreaper.v1.Reconciler service: pure checks of
// the fields a client sent (never of the process or the store), one function
// per request. Each returns OK or INVALID_ARGUMENT with a message that starts
// with the name of the first bad field. The limits are part of the contract
// (documented in the proto, docs/DESIGN.md and docs/OPERATIONS.md).
#ifndef RUNREAPER_SERVER_REGISTER_REQUEST_VALIDATION_H_
#define RUNREAPER_SERVER_REGISTER_REQUEST_VALIDATION_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/map.h"
#include "proto/run_id.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::server {

namespace v1 = ::runreaper::v1;

// Request limits. A run id's is the contract's (proto/run_id.h), which a
// non-root caller's canonical "<id>@u<uid>" must fit too.
using ::runreaper::kMaxRunIdBytes;
inline constexpr size_t kMaxLabelKeyBytes = 63;
inline constexpr size_t kMaxLabelValueBytes = 256;
inline constexpr int kMaxLabels = 64;
inline constexpr int kMaxReasonBytes = 1024;
// Tokens we hand out are a few dozen bytes; a longer one is not ours.
inline constexpr size_t kMaxPageTokenBytes = 1024;
// The page size a request gets when it sends 0.
inline constexpr int kDefaultPageSize = 100;

// A run id to look up: 1..kMaxRunIdBytes bytes (a record written before
// the character set below was enforced stays reachable).
absl::Status ValidateRunId(absl::string_view run_id);
// A run id (and a label key) a registration creates: 1..kMaxRunIdBytes
// (kMaxLabelKeyBytes) bytes of printable ASCII 0x21..0x7e: no space, no
// control character, no byte above 0x7e. So a run id can be printed in a
// log line, a table or a shell command as it is. Label values may hold any
// UTF-8. The message names the bad byte's position and value, never quotes it.
absl::Status ValidateNewRunId(absl::string_view run_id);
// Empty (= every run) or a valid run id.
absl::Status ValidateOptionalRunId(absl::string_view run_id);
// 0 (the default) .. store::RunStore::kMaxPageSize.
absl::Status ValidatePageSize(int page_size);
// At most kMaxLabels labels, keys 1..kMaxLabelKeyBytes, values up to
// kMaxLabelValueBytes (a registration's keys are also checked as new run
// ids are); `field` names the map in the message.
absl::Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels,
                            absl::string_view field);

// Sweep on end (RegisterRunRequest.sweep_grace): unset = kDefaultSweepGrace,
// at most kMaxSweepGrace.
inline constexpr absl::Duration kDefaultSweepGrace = absl::Seconds(5);
inline constexpr absl::Duration kMaxSweepGrace = absl::Hours(1);

// Also the owner's fields as far as they can be checked without /proc
// (owner_pid not negative, not 1, not the leader; owner_start_time_ticks
// only with an owner), sweep_grace (only with sweep_on_end, 0..1 h) and
// release_pipes (0..1 h).
absl::Status ValidateRegisterRequest(const v1::RegisterRunRequest& request);
// The grace of a validated request's sweep on end.
absl::Duration SweepGraceOf(const v1::RegisterRunRequest& request);

// Release of pipe holders (RegisterRunRequest.release_pipes): 0..1 h when
// sent (docs/ORPHANS.md "Pipe holders"); the shipped integrations send 10 s.
inline constexpr absl::Duration kMaxReleasePipes = absl::Hours(1);

// Match cookies (docs/ORPHANS.md "Cookies").
inline constexpr int kMaxCookies = 8;
inline constexpr size_t kMaxCookieNameBytes = 64;
inline constexpr size_t kMaxCookieValueBytes = 256;
inline constexpr int kMaxCookieNames = 16;
// runreaperd --cookie_names by default: RUNREAPER_RUN_ID and the runners'
// job cookies (GitHub Actions, GitLab CI, Buildkite, Jenkins, Nomad).
inline constexpr char kDefaultCookieNames[] =
    "RUNREAPER_RUN_ID,RUNNER_TRACKING_ID,CI_JOB_ID,BUILDKITE_JOB_ID,JENKINS_NODE_COOKIE,"
    "NOMAD_ALLOC_ID";
// The names runreaperd lets runs ask for (--cookie_names): 1..16 names, each
// [A-Za-z_][A-Za-z0-9_]*, at most 64 bytes, never RUNREAPER_KEEP, no
// duplicates. INVALID_ARGUMENT naming the flag and the name otherwise.
absl::Status ValidateCookieNames(const std::vector<std::string>& names);
// A request's cookies: at most kMaxCookies; each name one of `allowed`;
// each value 1..256 bytes of printable ASCII (0x20..0x7e) and not a
// runner's documented opt-out ("dontKillMe"). INVALID_ARGUMENT naming
// cookies[i].name or cookies[i].value otherwise.
absl::Status ValidateCookies(const google::protobuf::RepeatedPtrField<v1::Cookie>& cookies,
                             const std::vector<std::string>& allowed);

// Leases (runreaperctl keep).
inline constexpr absl::Duration kDefaultMaxLease = absl::Hours(24);
// pid > 0, or a container instead (pid 0; container 1..256 bytes of
// UTF-8 without control characters or '/'; container_runtime "",
// "docker" or "podman"); 0 < duration <= max_lease; reason 1..256 bytes,
// valid UTF-8 without control characters. INVALID_ARGUMENT naming the
// field otherwise.
absl::Status ValidateKeepRequest(const v1::KeepProcessRequest& request, absl::Duration max_lease);
absl::Status ValidateCancelRequest(const v1::CancelRunRequest& request);
absl::Status ValidateListRunsRequest(const v1::ListRunsRequest& request);
absl::Status ValidateListEventsRequest(const v1::ListEventsRequest& request);
absl::Status ValidateWatchEventsRequest(const v1::WatchEventsRequest& request);
// The WaitRun timeout: absl::InfiniteDuration() when the request has none.
absl::StatusOr<absl::Duration> WaitTimeout(const v1::WaitRunRequest& request);

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_REGISTER_REQUEST_VALIDATION_H_
