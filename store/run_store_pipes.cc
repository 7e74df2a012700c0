// RunStore, pipe holders: a run's pipe-held fact (docs/ORPHANS.md "Pipe
// holders") and its PIPE_HELD audit event, written in one transaction.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "store/rows.h"
#include "store/run_store.h"
#include "store/run_store_impl.h"
#include "store/sqlite.h"

namespace runreaper::store {
namespace {

// "pid 812 (sleep) fd 1 pipe:[53318]; pid 813 ..." (comm as /proc gave it;
// the presentation layer escapes it).
std::string HoldersDetail(const v1::PipeHeld& held) {
  std::string out =
      absl::StrJoin(held.holders(), "; ", [](std::string* o, const v1::PipeHolder& h) {
        absl::StrAppend(o, "pid ", h.pid(), " (", h.comm(), ") fd ", h.fd(), " pipe:[",
                        h.pipe_inode(), "]", h.member() ? "" : " not a member",
                        h.leased() ? " leased" : "", h.kept() ? " kept" : "");
      });
  if (held.unreadable() > 0) {
    absl::StrAppend(&out, "; ", held.unreadable(), " member(s) unreadable");
  }
  return out;
}

}  // namespace

absl::StatusOr<v1::Run> RunStore::RecordPipeHeld(absl::string_view run_id,
                                                 const v1::PipeHeld& held) {
  if (held.holders().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("record pipe held for run \"", run_id, "\" in ", path(), ": no holders"));
  }
  Impl& m = *impl_;
  v1::Run out;
  RETURN_IF_ERROR(m.Write([&]() -> absl::Status {
    m.mu.AssertHeld();  // the writer thread runs it with mu held
    ASSIGN_OR_RETURN(StoredRun r, m.FindOrNotFound(run_id));
    if (r.run.has_pipe_held()) {
      out = std::move(r.run);
      return absl::OkStatus();
    }
    std::string blob;
    if (!held.SerializeToString(&blob)) {
      return absl::InternalError(absl::StrCat("serialize pipe held of run \"", run_id, "\""));
    }
    {
      ASSIGN_OR_RETURN(ScopedStatement s,
                       m.db->Prepare("UPDATE runs SET pipe_held = ?2 WHERE seq = ?1"));
      s->BindInt(1, r.seq).BindBlob(2, blob);
      RETURN_IF_ERROR(s->Run());
    }
    v1::Event e;
    e.set_type(v1::EVENT_TYPE_PIPE_HELD);
    e.set_run_id(r.run.run_id());
    e.set_from_state(r.run.state());
    e.set_to_state(r.run.state());
    e.set_pid(held.holders(0).pid());
    e.set_detail(HoldersDetail(held));
    RETURN_IF_ERROR(m.InsertEvent(e, m.NowMicros()).status());
    out = std::move(r.run);
    *out.mutable_pipe_held() = held;
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace runreaper::store
