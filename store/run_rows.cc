#include "store/run_rows.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "store/rows.h"

namespace runreaper::store {
namespace {

namespace v1 = ::runreaper::v1;

// Every column of the runs table, in the order RunColumns() selects them:
// X(enumerator, column name).
#define RUNREAPER_RUN_COLUMNS(X)                  \
  X(kSeq, seq)                                    \
  X(kRunId, run_id)                               \
  X(kPid, pid)                                    \
  X(kPgid, pgid)                                  \
  X(kSid, sid)                                    \
  X(kPidnsInode, pidns_inode)                     \
  X(kStartTimeTicks, start_time_ticks)            \
  X(kBootId, boot_id)                             \
  X(kUid, uid)                                    \
  X(kComm, comm)                                  \
  X(kCgroup, cgroup)                              \
  X(kKeep, keep)                                  \
  X(kState, state)                                \
  X(kLiveness, liveness)                          \
  X(kStaleReason, stale_reason)                   \
  X(kExitCode, exit_code)                         \
  X(kRegisteredAtUs, registered_at_us)            \
  X(kLastSeenAliveAtUs, last_seen_alive_at_us)    \
  X(kEndedAtUs, ended_at_us)                      \
  X(kSweepDone, sweep_done)                       \
  X(kRegisteredUid, registered_uid)               \
  X(kIdentityUnverified, identity_unverified)     \
  X(kHostPid, host_pid)                           \
  X(kHostPidnsInode, host_pidns_inode)            \
  X(kObservedKind, observed_kind)                 \
  X(kObservedCode, observed_code)                 \
  X(kObservedSignal, observed_signal)             \
  X(kObservedCore, observed_core)                 \
  X(kObservedAtUs, observed_at_us)                \
  X(kObservedSource, observed_source)             \
  X(kOwnerPid, owner_pid)                         \
  X(kOwnerStartTimeTicks, owner_start_time_ticks) \
  X(kOwnerPidnsInode, owner_pidns_inode)          \
  X(kOwnerBootId, owner_boot_id)                  \
  X(kOwnerPgid, owner_pgid)                       \
  X(kOwnerSid, owner_sid)                         \
  X(kOwnerUid, owner_uid)                         \
  X(kOwnerComm, owner_comm)                       \
  X(kSweepOnEnd, sweep_on_end)                    \
  X(kSweepGraceUs, sweep_grace_us)                \
  X(kCookies, cookies)                            \
  X(kPidfsId, pidfs_id)                           \
  X(kOwnerPidfsId, owner_pidfs_id)                \
  X(kOwnerObservedKind, owner_observed_kind)      \
  X(kOwnerObservedCode, owner_observed_code)      \
  X(kOwnerObservedSignal, owner_observed_signal)  \
  X(kOwnerObservedCore, owner_observed_core)      \
  X(kOwnerObservedAtUs, owner_observed_at_us)     \
  X(kOwnerObservedSource, owner_observed_source)  \
  X(kLeaderAliveTicks, leader_alive_ticks)        \
  X(kLabelBytes, label_bytes)                     \
  X(kStdoutPipe, stdout_pipe)                     \
  X(kStderrPipe, stderr_pipe)                     \
  X(kReleasePipesUs, release_pipes_us)            \
  X(kPipeHeld, pipe_held)

#define RUNREAPER_COLUMN_ENUMERATOR(e, name) e,
enum Col : int { RUNREAPER_RUN_COLUMNS(RUNREAPER_COLUMN_ENUMERATOR) kColumnCount };
#undef RUNREAPER_COLUMN_ENUMERATOR

#define RUNREAPER_COLUMN_NAME(e, name) #name,
constexpr const char* kColumnNames[] = {RUNREAPER_RUN_COLUMNS(RUNREAPER_COLUMN_NAME)};
#undef RUNREAPER_COLUMN_NAME
#undef RUNREAPER_RUN_COLUMNS

static_assert(kColumnCount == kRunColumnCount, "kRunColumnCount counts the column list");
static_assert(sizeof(kColumnNames) / sizeof(kColumnNames[0]) == kColumnCount);
// BindObservedExit and ReadObservedExit take six columns in
// kObservedColumns order from the first.
static_assert(kObservedSource == kObservedKind + 5 &&
                  kOwnerObservedSource == kOwnerObservedKind + 5,
              "an observed exit is six columns in kObservedColumns order");

// The statement parameter of a column: ?<column + 1> (SQLite counts
// parameters from 1), in every statement here.
constexpr int P(Col c) { return c + 1; }

// "name = ?N" for each of `cols`, joined by ", ".
std::string Assignments(std::initializer_list<Col> cols) {
  std::string out;
  for (const Col c : cols) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", kColumnNames[c], " = ?", P(c));
  }
  return out;
}

std::optional<int64_t> OptionalInt(bool has, int64_t value) {
  return has ? std::optional<int64_t>(value) : std::nullopt;
}

}  // namespace

const std::string& RunColumns() {
  static const std::string* const kList = [] {
    auto* list = new std::string;
    for (int c = 0; c < kColumnCount; ++c) {
      absl::StrAppend(list, c == 0 ? "" : ", ", kColumnNames[c]);
    }
    return list;
  }();
  return *kList;
}

StoredRun ReadRunRow(const Statement& s) {
  StoredRun out;
  out.seq = s.ColumnInt(kSeq);
  v1::Run& r = out.run;
  r.set_run_id(ProtoText(s, kRunId));
  r.set_pid(static_cast<int32_t>(s.ColumnInt(kPid)));
  r.set_pgid(static_cast<int32_t>(s.ColumnInt(kPgid)));
  r.set_sid(static_cast<int32_t>(s.ColumnInt(kSid)));
  r.set_pidns_inode(static_cast<uint64_t>(s.ColumnInt(kPidnsInode)));
  r.set_start_time_ticks(static_cast<uint64_t>(s.ColumnInt(kStartTimeTicks)));
  r.set_boot_id(ProtoText(s, kBootId));
  if (!s.ColumnIsNull(kUid)) r.set_uid(static_cast<uint32_t>(s.ColumnInt(kUid)));
  r.set_comm(ProtoText(s, kComm));
  r.set_cgroup(ProtoText(s, kCgroup));
  r.set_keep(s.ColumnInt(kKeep) != 0);
  r.set_state(static_cast<v1::RunState>(s.ColumnInt(kState)));
  r.set_liveness(static_cast<v1::Liveness>(s.ColumnInt(kLiveness)));
  r.set_stale_reason(static_cast<v1::StaleReason>(s.ColumnInt(kStaleReason)));
  if (!s.ColumnIsNull(kExitCode)) r.set_exit_code(static_cast<int32_t>(s.ColumnInt(kExitCode)));
  SetTimestamp(s.ColumnInt(kRegisteredAtUs), r.mutable_registered_at());
  SetTimestamp(s.ColumnInt(kLastSeenAliveAtUs), r.mutable_last_seen_alive_at());
  if (!s.ColumnIsNull(kEndedAtUs)) SetTimestamp(s.ColumnInt(kEndedAtUs), r.mutable_ended_at());
  r.set_registered_uid(static_cast<uint32_t>(s.ColumnInt(kRegisteredUid)));
  r.set_identity_unverified(s.ColumnInt(kIdentityUnverified) != 0);
  r.set_host_pid(static_cast<int32_t>(s.ColumnInt(kHostPid)));
  r.set_host_pidns_inode(static_cast<uint64_t>(s.ColumnInt(kHostPidnsInode)));
  if (std::optional<v1::ObservedExit> e = ReadObservedExit(s, kObservedKind)) {
    *r.mutable_observed_exit() = *std::move(e);
  }
  if (const int owner_pid = static_cast<int>(s.ColumnInt(kOwnerPid)); owner_pid > 0) {
    r.set_owner_pid(owner_pid);
    r.set_owner_start_time_ticks(static_cast<uint64_t>(s.ColumnInt(kOwnerStartTimeTicks)));
    r.set_owner_pidns_inode(static_cast<uint64_t>(s.ColumnInt(kOwnerPidnsInode)));
    r.set_owner_boot_id(ProtoText(s, kOwnerBootId));
    r.set_owner_pgid(static_cast<int32_t>(s.ColumnInt(kOwnerPgid)));
    r.set_owner_sid(static_cast<int32_t>(s.ColumnInt(kOwnerSid)));
    if (!s.ColumnIsNull(kOwnerUid)) r.set_owner_uid(static_cast<uint32_t>(s.ColumnInt(kOwnerUid)));
    r.set_owner_comm(ProtoText(s, kOwnerComm));
    r.set_owner_pidfs_id(static_cast<uint64_t>(s.ColumnInt(kOwnerPidfsId)));
  }
  if (s.ColumnInt(kSweepOnEnd) != 0) {
    r.set_sweep_on_end(true);
    const int64_t us = s.ColumnInt(kSweepGraceUs);
    r.mutable_sweep_grace()->set_seconds(us / 1000000);
    r.mutable_sweep_grace()->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
  }
  DecodeCookies(ProtoText(s, kCookies), &r);
  r.set_pidfs_id(static_cast<uint64_t>(s.ColumnInt(kPidfsId)));
  if (std::optional<v1::ObservedExit> e = ReadObservedExit(s, kOwnerObservedKind)) {
    *r.mutable_owner_observed_exit() = *std::move(e);
  }
  // NULL: stored before schema 15, no verified moment recorded (unset).
  if (!s.ColumnIsNull(kLeaderAliveTicks)) {
    r.set_leader_alive_ticks(static_cast<uint64_t>(s.ColumnInt(kLeaderAliveTicks)));
  }
  // 0 or NULL: stored before schema 17, no pipes recorded.
  r.set_stdout_pipe(static_cast<uint64_t>(s.ColumnInt(kStdoutPipe)));
  r.set_stderr_pipe(static_cast<uint64_t>(s.ColumnInt(kStderrPipe)));
  if (const int64_t us = s.ColumnInt(kReleasePipesUs); us > 0) {
    r.mutable_release_pipes()->set_seconds(us / 1000000);
    r.mutable_release_pipes()->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
  }
  // A blob that does not parse is left out (never a half-read fact).
  if (!s.ColumnIsNull(kPipeHeld) &&
      !r.mutable_pipe_held()->ParseFromString(s.ColumnBlob(kPipeHeld))) {
    r.clear_pipe_held();
  }
  return out;
}

absl::StatusOr<int64_t> InsertRunRow(Database& db, const v1::Run& run, int64_t now_us,
                                     int64_t label_bytes) {
  // Every column but seq (the row id SQLite assigns), each as ?<column + 1>.
  static const std::string* const kSql = [] {
    std::string names;
    std::string params;
    for (int c = kSeq + 1; c < kColumnCount; ++c) {
      const char* sep = c == kSeq + 1 ? "" : ", ";
      absl::StrAppend(&names, sep, kColumnNames[c]);
      absl::StrAppend(&params, sep, "?", P(static_cast<Col>(c)));
    }
    return new std::string(absl::StrCat("INSERT INTO runs (", names, ") VALUES (", params, ")"));
  }();
  ASSIGN_OR_RETURN(ScopedStatement s, db.Prepare(*kSql));
  const bool hosted = run.host_pid() > 0;
  s->BindText(P(kRunId), run.run_id())
      .BindInt(P(kPid), run.pid())
      .BindInt(P(kPgid), run.pgid())
      .BindInt(P(kSid), run.sid())
      .BindInt(P(kPidnsInode), static_cast<int64_t>(run.pidns_inode()))
      .BindInt(P(kStartTimeTicks), static_cast<int64_t>(run.start_time_ticks()))
      .BindText(P(kBootId), run.boot_id())
      .BindOptionalInt(P(kUid), OptionalInt(run.has_uid(), run.uid()))
      .BindText(P(kComm), run.comm())
      .BindText(P(kCgroup), run.cgroup())
      .BindInt(P(kKeep), run.keep() ? 1 : 0)
      .BindInt(P(kState), v1::RUN_STATE_RUNNING)
      .BindInt(P(kLiveness), run.liveness())
      .BindInt(P(kStaleReason), v1::STALE_REASON_UNSPECIFIED)
      .BindNull(P(kExitCode))
      .BindInt(P(kRegisteredAtUs), now_us)
      .BindInt(P(kLastSeenAliveAtUs), now_us)
      .BindNull(P(kEndedAtUs))
      .BindInt(P(kSweepDone), 0)
      .BindInt(P(kRegisteredUid), run.registered_uid())
      .BindInt(P(kIdentityUnverified), run.identity_unverified() ? 1 : 0)
      .BindInt(P(kHostPid), hosted ? run.host_pid() : 0)
      .BindInt(P(kHostPidnsInode), hosted ? static_cast<int64_t>(run.host_pidns_inode()) : 0);
  BindObservedExit(*s, P(kObservedKind), v1::ObservedExit());
  const bool owned = run.owner_pid() > 0;
  s->BindInt(P(kOwnerPid), owned ? run.owner_pid() : 0)
      .BindInt(P(kOwnerStartTimeTicks),
               owned ? static_cast<int64_t>(run.owner_start_time_ticks()) : 0)
      .BindInt(P(kOwnerPidnsInode), owned ? static_cast<int64_t>(run.owner_pidns_inode()) : 0)
      .BindText(P(kOwnerBootId), owned ? run.owner_boot_id() : std::string())
      .BindInt(P(kOwnerPgid), owned ? run.owner_pgid() : 0)
      .BindInt(P(kOwnerSid), owned ? run.owner_sid() : 0)
      .BindOptionalInt(P(kOwnerUid), OptionalInt(owned && run.has_owner_uid(), run.owner_uid()))
      .BindText(P(kOwnerComm), owned ? run.owner_comm() : std::string())
      .BindInt(P(kSweepOnEnd), run.sweep_on_end() ? 1 : 0)
      .BindInt(P(kSweepGraceUs), run.sweep_on_end() ? run.sweep_grace().seconds() * 1000000 +
                                                          run.sweep_grace().nanos() / 1000
                                                    : 0)
      .BindText(P(kCookies), EncodeCookies(run))
      .BindInt(P(kPidfsId), static_cast<int64_t>(run.pidfs_id()))
      .BindInt(P(kOwnerPidfsId), owned ? static_cast<int64_t>(run.owner_pidfs_id()) : 0)
      // Unset: NULL, no verified moment recorded (as a schema-14 run).
      .BindOptionalInt(
          P(kLeaderAliveTicks),
          OptionalInt(run.has_leader_alive_ticks(), static_cast<int64_t>(run.leader_alive_ticks())))
      .BindInt(P(kLabelBytes), label_bytes)
      .BindInt(P(kStdoutPipe), static_cast<int64_t>(run.stdout_pipe()))
      .BindInt(P(kStderrPipe), static_cast<int64_t>(run.stderr_pipe()))
      .BindInt(P(kReleasePipesUs),
               run.has_release_pipes()
                   ? run.release_pipes().seconds() * 1000000 + run.release_pipes().nanos() / 1000
                   : 0)
      .BindNull(P(kPipeHeld));
  BindObservedExit(*s, P(kOwnerObservedKind), v1::ObservedExit());
  RETURN_IF_ERROR(s->Run());
  return db.LastInsertRowid();
}

absl::Status UpdateRunState(Database& db, const StoredRun& r) {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "UPDATE runs SET ",
      Assignments({kState, kLiveness, kStaleReason, kExitCode, kLastSeenAliveAtUs, kEndedAtUs,
                   kObservedKind, kObservedCode, kObservedSignal, kObservedCore, kObservedAtUs,
                   kObservedSource, kOwnerObservedKind, kOwnerObservedCode, kOwnerObservedSignal,
                   kOwnerObservedCore, kOwnerObservedAtUs, kOwnerObservedSource}),
      " WHERE seq = ?", P(kSeq)));
  ASSIGN_OR_RETURN(ScopedStatement s, db.Prepare(*kSql));
  const v1::Run& run = r.run;
  s->BindInt(P(kSeq), r.seq)
      .BindInt(P(kState), run.state())
      .BindInt(P(kLiveness), run.liveness())
      .BindInt(P(kStaleReason), run.stale_reason())
      .BindOptionalInt(P(kExitCode), OptionalInt(run.has_exit_code(), run.exit_code()))
      .BindInt(P(kLastSeenAliveAtUs), TimestampMicros(run.last_seen_alive_at()))
      .BindOptionalInt(P(kEndedAtUs),
                       OptionalInt(run.has_ended_at(), TimestampMicros(run.ended_at())));
  BindObservedExit(*s, P(kObservedKind), run.observed_exit());
  BindObservedExit(*s, P(kOwnerObservedKind), run.owner_observed_exit());
  return s->Run();
}

std::string EncodeCookies(const v1::Run& run) {
  std::string out;
  for (const v1::Cookie& c : run.cookies()) {
    if (!out.empty()) out.push_back('\n');
    absl::StrAppend(&out, c.name(), "=", c.value());
  }
  return out;
}

void DecodeCookies(absl::string_view text, v1::Run* run) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    v1::Cookie* c = run->add_cookies();
    c->set_name(std::string(line.substr(0, eq)));
    c->set_value(std::string(line.substr(eq + 1)));
  }
}

}  // namespace runreaper::store
