// RunStore: opening a store, registration, the run state machine (heartbeat,
// finish, cancel, mark stale) and reading runs (Get, List, ListRunning). The
// reconcile pass, the audit log and sweep bookkeeping are in
// run_store_{pass,events,sweep}.cc; the shared helpers in run_store_impl.h.
#include "store/run_store.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "scanner/identity_proto.h"
#include "store/page_token.h"
#include "store/rows.h"
#include "store/run_rows.h"
#include "store/run_state.h"
#include "store/run_store_impl.h"
#include "store/schema.h"
#include "store/sqlite.h"

namespace runreaper::store {
namespace {

static_assert(RunStore::kSchemaVersion == schema::kVersion,
              "RunStore::kSchemaVersion is the schema's version");

constexpr int kMaxLabelsInQuery = 64;

// Names the first identity field in which `a` and `b` differ, or "" when
// they have the same identity.
std::string IdentityDifferenceOf(const v1::Run& a, const v1::Run& b);

// Why `b` is not the same registration as the stored `a` ("" = it is).
std::string IdentityDifference(const v1::Run& a, const v1::Run& b) {
  if (a.pid() == 0 && b.pid() == 0 && a.start_time_ticks() != b.start_time_ticks()) {
    // A run with no leader starts when it was first registered: a retry
    // carries a later time and is still the same registration.
    v1::Run retry = b;
    retry.set_start_time_ticks(a.start_time_ticks());
    return IdentityDifferenceOf(a, retry);
  }
  return IdentityDifferenceOf(a, b);
}

std::string IdentityDifferenceOf(const v1::Run& a, const v1::Run& b) {
  if (a.pid() != b.pid()) return absl::StrCat("pid ", a.pid(), " vs ", b.pid());
  if (a.pgid() != b.pgid()) {
    return absl::StrCat("pgid ", a.pgid(), " vs ", b.pgid());
  }
  if (a.sid() != b.sid()) return absl::StrCat("sid ", a.sid(), " vs ", b.sid());
  if (a.pidns_inode() != b.pidns_inode()) {
    return absl::StrCat("pidns_inode ", a.pidns_inode(), " vs ", b.pidns_inode());
  }
  if (a.start_time_ticks() != b.start_time_ticks()) {
    return absl::StrCat("start_time_ticks ", a.start_time_ticks(), " vs ", b.start_time_ticks());
  }
  if (a.boot_id() != b.boot_id()) {
    return absl::StrCat("boot_id \"", a.boot_id(), "\" vs \"", b.boot_id(), "\"");
  }
  if (a.has_uid() != b.has_uid() || a.uid() != b.uid()) {
    auto uid = [](const v1::Run& r) {
      return r.has_uid() ? absl::StrCat(r.uid()) : std::string("unset");
    };
    return absl::StrCat("uid ", uid(a), " vs ", uid(b));
  }
  if (a.comm() != b.comm()) {
    return absl::StrCat("comm \"", a.comm(), "\" vs \"", b.comm(), "\"");
  }
  if (a.cgroup() != b.cgroup()) {
    return absl::StrCat("cgroup \"", a.cgroup(), "\" vs \"", b.cgroup(), "\"");
  }
  // Any identity field without a line of its own above: IdentityOf is the
  // one list of them. The translation to runreaperd's namespace (host) is
  // not sent but found at registration: a retry after the leader exited
  // finds none, and is still the same registration.
  scanner::Identity ia = scanner::IdentityOf(a), ib = scanner::IdentityOf(b);
  ia.host = ib.host = scanner::ProcessRef();
  if (ia != ib) return "identity";
  // A pidfs id is compared only when both are known (a retry that read the
  // leader after it exited has none): two known ids are two processes.
  if (scanner::PidfsIdsDiffer(a.pidfs_id(), b.pidfs_id())) {
    return absl::StrCat("pidfs_id ", a.pidfs_id(), " vs ", b.pidfs_id());
  }
  if (std::map<std::string, std::string>(a.labels().begin(), a.labels().end()) !=
      std::map<std::string, std::string>(b.labels().begin(), b.labels().end())) {
    return "labels";
  }
  if (a.keep() != b.keep()) return "keep";
  if (a.owner_pid() != b.owner_pid() || a.owner_start_time_ticks() != b.owner_start_time_ticks()) {
    return absl::StrCat("owner ", a.owner_pid(), " vs ", b.owner_pid());
  }
  if (a.release_pipes().seconds() != b.release_pipes().seconds() ||
      a.release_pipes().nanos() != b.release_pipes().nanos()) {
    return "release_pipes";
  }
  if (a.sweep_on_end() != b.sweep_on_end()) return "sweep_on_end";
  if (a.sweep_grace().seconds() != b.sweep_grace().seconds() ||
      a.sweep_grace().nanos() != b.sweep_grace().nanos()) {
    return "sweep_grace";
  }
  // The cookies as a set of pairs: the order they were sent in is not part
  // of the registration.
  auto cookies = [](const v1::Run& r) {
    std::multiset<std::pair<std::string, std::string>> out;
    for (const v1::Cookie& c : r.cookies()) out.emplace(c.name(), c.value());
    return out;
  };
  if (cookies(a) != cookies(b)) return "cookies";
  return "";
}

}  // namespace

size_t AnswerEntryBytes(const google::protobuf::MessageLite& m) {
  const size_t size = m.ByteSizeLong();
  // The repeated field's tag (field numbers < 16: one byte) and the length.
  return 1 + google::protobuf::io::CodedOutputStream::VarintSize64(size) + size;
}

int64_t LabelBytes(const v1::Run& run) {
  int64_t bytes = 0;
  for (const auto& [key, value] : run.labels()) {
    bytes += static_cast<int64_t>(key.size() + value.size());
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<RunStore>> RunStore::Open(const std::string& path,
                                                         StoreOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db,
                   schema::OpenWriter(path, options.busy_timeout,
                                      options.synchronous == StoreOptions::Sync::kFull));
  ASSIGN_OR_RETURN(std::unique_ptr<Database> reader,
                   schema::OpenReader(path, options.busy_timeout));
  return std::unique_ptr<RunStore>(
      new RunStore(std::make_unique<Impl>(std::move(db), std::move(reader), std::move(options))));
}

RunStore::RunStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunStore::~RunStore() = default;

const std::string& RunStore::path() const { return impl_->path(); }

RunStore::WriteStats RunStore::GetWriteStats() const {
  WriteStats stats;
  stats.commits = impl_->commits.load();
  stats.writes = impl_->committed_writes.load();
  absl::MutexLock lock(&impl_->queue_mu);
  stats.pending = impl_->pending;
  return stats;
}

absl::StatusOr<v1::Run> RunStore::Register(
    const v1::Run& run, const std::function<absl::Status(const UidUsage&)>& admit) {
  if (run.run_id().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("register in ", path(), ": run_id is empty"));
  }
  if (run.liveness() != v1::LIVENESS_UNSPECIFIED && run.liveness() != v1::LIVENESS_ALIVE) {
    return absl::InvalidArgumentError(
        absl::StrCat("register in ", path(), ": run \"", run.run_id(), "\" with liveness ",
                     v1::Liveness_Name(run.liveness()), " (only UNSPECIFIED or ALIVE)"));
  }
  Impl& m = *impl_;
  v1::Run result;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(std::optional<StoredRun> existing, m.Find(run.run_id()));
    if (existing.has_value()) {
      // Another caller's run under this id (run ids are namespaced by uid,
      // proto/run_id.h; only a run an older daemon stored can meet one):
      // never answered as this caller's, and nothing of it is told.
      if (existing->run.registered_uid() != run.registered_uid()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "run \"", run.run_id(), "\" already registered in ", m.path(), " by another uid"));
      }
      const std::string diff = IdentityDifference(existing->run, run);
      if (!diff.empty()) {
        return absl::AlreadyExistsError(absl::StrCat("run \"", run.run_id(),
                                                     "\" already registered in ", m.path(),
                                                     " with a different identity (", diff, ")"));
      }
      result = existing->run;
      return absl::OkStatus();
    }
    if (admit && run.registered_uid() != 0) {
      // The covering partial index runs_by_member (schema 12) answers it:
      // its condition is repeated so that the planner may use it.
      ASSIGN_OR_RETURN(ScopedStatement s,
                       m.db->Prepare("SELECT COUNT(*), COALESCE(SUM(label_bytes), 0) FROM runs "
                                     "WHERE registered_uid = ?1 AND registered_uid != 0"));
      s->BindInt(1, run.registered_uid());
      ASSIGN_OR_RETURN(bool row, s->Step());
      UidUsage usage;
      if (row) {
        usage.runs = s->ColumnInt(0);
        usage.label_bytes = s->ColumnInt(1);
      }
      RETURN_IF_ERROR(admit(usage));
    }
    const int64_t now = m.NowMicros();
    ASSIGN_OR_RETURN(const int64_t seq, InsertRunRow(*m.db, run, now, LabelBytes(run)));
    if (!run.labels().empty()) {
      ASSIGN_OR_RETURN(ScopedStatement s, m.db->Prepare("INSERT INTO run_labels (seq, key, value) "
                                                        "VALUES (?1, ?2, ?3)"));
      for (const auto& [key, value] : run.labels()) {
        s->Reset();
        s->BindInt(1, seq).BindText(2, key).BindText(3, value);
        RETURN_IF_ERROR(s->Run());
      }
    }
    v1::Event e;
    e.set_type(v1::EVENT_TYPE_REGISTERED);
    e.set_run_id(run.run_id());
    e.set_to_state(v1::RUN_STATE_RUNNING);
    e.set_pid(run.pid());
    RETURN_IF_ERROR(m.InsertEvent(e, now).status());
    ASSIGN_OR_RETURN(StoredRun stored, m.FindOrNotFound(run.run_id()));
    result = std::move(stored.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Heartbeat(absl::string_view run_id) {
  Impl& m = *impl_;
  v1::Run result;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    if (IsTerminal(r.run.state())) return m.Terminal(r, "heartbeat for");
    SetTimestamp(m.NowMicros(), r.run.mutable_last_seen_alive_at());
    RETURN_IF_ERROR(m.WriteLiveness(r));
    result = std::move(r.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Finish(absl::string_view run_id, int exit_code) {
  Impl& m = *impl_;
  v1::Run result;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    const v1::Run& run = r.run;
    switch (run.state()) {
      case v1::RUN_STATE_RUNNING: {
        r.run.set_exit_code(exit_code);
        RETURN_IF_ERROR(m.Terminate(r, v1::RUN_STATE_FINISHED, m.NowMicros(), "result published"));
        break;
      }
      case v1::RUN_STATE_FINISHED:
        if (run.has_exit_code() && run.exit_code() == exit_code) break;
        return absl::FailedPreconditionError(
            absl::StrCat("finish run \"", run.run_id(), "\" in ", m.path(), " with exit code ",
                         exit_code, ": already FINISHED with exit code ", run.exit_code()));
      case v1::RUN_STATE_STALE: {
        // The leader's exit was verified before the runner published its
        // result: keep STALE and attach the result (once).
        const bool exited = run.stale_reason() == v1::STALE_REASON_EXITED ||
                            run.stale_reason() == v1::STALE_REASON_ZOMBIE;
        if (!exited) return m.Terminal(r, "finish");
        if (run.has_exit_code()) {
          if (run.exit_code() == exit_code) break;
          return absl::FailedPreconditionError(
              absl::StrCat("finish run \"", run.run_id(), "\" in ", m.path(), " with exit code ",
                           exit_code, ": STALE run already has exit code ", run.exit_code()));
        }
        const int64_t now = m.NowMicros();
        r.run.set_exit_code(exit_code);
        RETURN_IF_ERROR(m.WriteRun(r));
        v1::Event e;
        e.set_type(v1::EVENT_TYPE_RESULT);
        e.set_run_id(run.run_id());
        e.set_from_state(v1::RUN_STATE_STALE);
        e.set_to_state(v1::RUN_STATE_STALE);
        e.set_stale_reason(run.stale_reason());
        e.set_exit_code(exit_code);
        e.set_detail("result published after the exit was verified");
        RETURN_IF_ERROR(m.InsertEvent(e, now).status());
        break;
      }
      default:
        return m.Terminal(r, "finish");
    }
    result = std::move(r.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Cancel(absl::string_view run_id, absl::string_view reason) {
  Impl& m = *impl_;
  v1::Run result;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    if (r.run.state() == v1::RUN_STATE_RUNNING) {
      RETURN_IF_ERROR(m.Terminate(r, v1::RUN_STATE_CANCELLED, m.NowMicros(), reason));
    } else if (r.run.state() != v1::RUN_STATE_CANCELLED) {
      return m.Terminal(r, "cancel");
    }
    result = std::move(r.run);
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::Run> RunStore::Get(absl::string_view run_id) {
  Impl& m = *impl_;
  v1::Run out;
  // One statement reads the run and its labels.
  RETURN_IF_ERROR(m.Read(false, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(d, run_id));
    out = std::move(r.run);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<ListRunsPage> RunStore::List(const ListRunsQuery& query) {
  if (!v1::RunState_IsValid(query.state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("list runs in ", path(), ": invalid state ", static_cast<int>(query.state)));
  }
  if (query.page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("list runs in ", path(), ": negative page_size ", query.page_size));
  }
  if (query.labels.size() > static_cast<size_t>(kMaxLabelsInQuery)) {
    return absl::InvalidArgumentError(absl::StrCat("list runs in ", path(), ": more than ",
                                                   kMaxLabelsInQuery, " labels in the selector"));
  }
  const int page_size =
      query.page_size == 0 ? kDefaultPageSize : std::min(query.page_size, kMaxPageSize);
  const uint64_t fingerprint = page_token::Fingerprint(query.state, query.labels);
  int64_t after_seq = 0;
  if (!query.page_token.empty()) {
    ASSIGN_OR_RETURN(after_seq, page_token::Decode(query.page_token, fingerprint));
  }

  // ?1 after seq, ?2 limit, ?3 state, then ?4/?5, ?6/?7 ... key/value pairs.
  // Each label is one indexed probe of run_labels(key, value, seq).
  std::string sql = absl::StrCat("SELECT ", RunColumns(), " FROM runs WHERE seq > ?1");
  if (query.state != v1::RUN_STATE_UNSPECIFIED) sql += " AND state = ?3";
  for (size_t i = 0; i < query.labels.size(); ++i) {
    absl::StrAppend(&sql, " AND seq IN (SELECT seq FROM run_labels WHERE key = ?", 4 + 2 * i,
                    " AND value = ?", 5 + 2 * i, ")");
  }
  sql += " ORDER BY seq LIMIT ?2";

  Impl& m = *impl_;
  std::vector<StoredRun> runs;
  // How many of `runs` the page holds: up to page_size, fewer when the
  // next would take it past max_bytes. Labels are read only for those (and
  // the one that did not fit), so a page of large runs is not read whole.
  size_t n = 0;
  RETURN_IF_ERROR(m.Read(true, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(runs, Impl::QueryRuns(
                               d, sql,
                               [&](Statement& s) {
                                 s.BindInt(1, after_seq).BindInt(2, page_size + 1);
                                 if (query.state != v1::RUN_STATE_UNSPECIFIED) {
                                   s.BindInt(3, query.state);
                                 }
                                 int i = 4;
                                 for (const auto& [k, v] : query.labels) {
                                   s.BindText(i, k).BindText(i + 1, v);
                                   i += 2;
                                 }
                               },
                               /*with_labels=*/false));
    size_t bytes = 0;
    for (; n < runs.size() && n < static_cast<size_t>(page_size); ++n) {
      RETURN_IF_ERROR(Impl::ReadLabels(d, runs[n].seq, &runs[n].run));
      const size_t entry = AnswerEntryBytes(runs[n].run);
      if (query.max_bytes > 0 && n > 0 && bytes + entry > query.max_bytes) break;
      bytes += entry;
    }
    return absl::OkStatus();
  }));
  ListRunsPage page;
  if (runs.size() > n) {
    runs.resize(n);
    page.next_page_token = page_token::Encode(runs.back().seq, fingerprint);
  }
  page.runs.reserve(runs.size());
  for (StoredRun& r : runs) page.runs.push_back(std::move(r.run));
  return page;
}

absl::StatusOr<std::vector<v1::Run>> RunStore::ListRunning() {
  Impl& m = *impl_;
  std::vector<StoredRun> runs;
  RETURN_IF_ERROR(m.Read(true, [&](Database& d) -> absl::Status {
    ASSIGN_OR_RETURN(
        runs,
        Impl::QueryRuns(
            d, absl::StrCat("SELECT ", RunColumns(), " FROM runs WHERE state = ?1 ORDER BY seq"),
            [](Statement& s) { s.BindInt(1, v1::RUN_STATE_RUNNING); }));
    return absl::OkStatus();
  }));
  std::vector<v1::Run> out;
  out.reserve(runs.size());
  for (StoredRun& r : runs) out.push_back(std::move(r.run));
  return out;
}

}  // namespace runreaper::store
