#include "proto/describe.h"

#include <string.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/text.h"

namespace runreaper {

std::string ShortStateName(v1::RunState state) {
  std::string name = v1::RunState_Name(state);
  if (name.empty()) return absl::StrCat(static_cast<int>(state));
  return std::string(absl::StripPrefix(name, "RUN_STATE_"));
}

std::string ShortReasonName(v1::StaleReason reason) {
  std::string name = v1::StaleReason_Name(reason);
  if (name.empty()) return absl::StrCat(static_cast<int>(reason));
  return std::string(absl::StripPrefix(name, "STALE_REASON_"));
}

namespace {

std::string SignalText(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

// Milliseconds, or microseconds below one (a SIGKILL's end is often seen
// within microseconds).
std::string DurationText(const google::protobuf::Duration& d) {
  const absl::Duration v = absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
  return absl::FormatDuration(
      absl::Trunc(v, v < absl::Milliseconds(1) ? absl::Microseconds(1) : absl::Milliseconds(1)));
}

// "; <who> exit 7", "; <who> SIGSEGV+core", "; <who> exit unknown"; "" when
// nothing was observed.
std::string ObservedText(absl::string_view who, const v1::ObservedExit& e) {
  switch (e.kind()) {
    case v1::OBSERVED_EXIT_KIND_EXITED:
      return absl::StrCat("; ", who, " exit ", e.exit_code());
    case v1::OBSERVED_EXIT_KIND_SIGNALED:
      return absl::StrCat("; ", who, " ", SignalText(e.signal()), e.core_dumped() ? "+core" : "");
    case v1::OBSERVED_EXIT_KIND_UNKNOWN:
      return absl::StrCat("; ", who, " exit unknown");
    default:
      return "";
  }
}

}  // namespace

std::string DescribeReceipt(const v1::KillReceipt& r) {
  std::string out =
      absl::StrCat("pid ", r.pid(), " comm=", r.comm(), " start_time=", r.start_time_ticks(), ": ");
  switch (r.end()) {
    case v1::KillReceipt::END_SIGNAL:
      absl::StrAppend(&out, "ended by ", r.stage(), " ", DurationText(r.after_signal()),
                      " after it");
      break;
    case v1::KillReceipt::END_ON_ITS_OWN:
      absl::StrAppend(&out, "exited on its own");
      break;
    case v1::KillReceipt::END_SURVIVED:
      absl::StrAppend(&out, "survived (last signal ", r.stage().empty() ? "none" : r.stage(), ": ",
                      r.last_result(), ")");
      break;
    default:
      absl::StrAppend(&out, "end unknown");
      break;
  }
  switch (r.exit().kind()) {
    case v1::OBSERVED_EXIT_KIND_EXITED:
      absl::StrAppend(&out, "; exit ", r.exit().exit_code(), " (pidfd_info)");
      break;
    case v1::OBSERVED_EXIT_KIND_SIGNALED:
      absl::StrAppend(&out, "; exit ", SignalText(r.exit().signal()),
                      r.exit().core_dumped() ? "+core" : "", " (pidfd_info)");
      break;
    default:
      if (r.end() != v1::KillReceipt::END_SURVIVED) absl::StrAppend(&out, "; exit status unknown");
      break;
  }
  if (r.zombie()) absl::StrAppend(&out, "; zombie, reaper pid ", r.reaper_pid());
  absl::StrAppend(&out, "; lived ", DurationText(r.lifetime()));
  if (r.stages_sent_size() > 0) {
    absl::StrAppend(&out, "; sent ", absl::StrJoin(r.stages_sent(), ","));
  }
  absl::StrAppend(&out, r.held() ? "; held" : absl::StrCat("; unheld: ", r.unheld_reason()));
  return out;
}

std::string DescribeEvent(const v1::Event& e) {
  return absl::StrCat("event ", e.event_id(), " ", DescribeEventChange(e));
}

std::string DescribeEventChange(const v1::Event& e) {
  // Retention's summary names no run.
  if (e.type() == v1::EVENT_TYPE_PRUNED) return absl::StrCat("retention: ", e.detail());
  std::string out = absl::StrCat("run ", e.run_id(), " ");
  switch (e.type()) {
    case v1::EVENT_TYPE_REGISTERED:
      absl::StrAppend(&out, "registered -> ", ShortStateName(e.to_state()));
      break;
    case v1::EVENT_TYPE_STATE_CHANGED:
      absl::StrAppend(&out, ShortStateName(e.from_state()), " -> ", ShortStateName(e.to_state()));
      if (e.stale_reason() != v1::STALE_REASON_UNSPECIFIED) {
        absl::StrAppend(&out, " (", ShortReasonName(e.stale_reason()), ")");
      }
      if (e.has_exit_code()) absl::StrAppend(&out, " exit_code=", e.exit_code());
      break;
    case v1::EVENT_TYPE_SIGNAL:
      absl::StrAppend(&out, "signal ", e.signal(), " (", e.stage(), ") to pid ", e.pid(), ": ",
                      e.result());
      break;
    case v1::EVENT_TYPE_RESULT:
      absl::StrAppend(&out, "result published");
      if (e.has_exit_code()) absl::StrAppend(&out, " exit_code=", e.exit_code());
      break;
    default: {
      std::string type = v1::EventType_Name(e.type());
      absl::StrAppend(&out, absl::StripPrefix(type, "EVENT_TYPE_"));
      break;
    }
  }
  if (!e.detail().empty()) absl::StrAppend(&out, ": ", e.detail());
  // The leader's observed exit (docs/DESIGN.md), then the owner's, after
  // the detail, so the line starts with the event itself; apart from exit_code.
  if (e.type() == v1::EVENT_TYPE_STATE_CHANGED) {
    absl::StrAppend(&out, ObservedText("observed", e.observed_exit()),
                    ObservedText("owner", e.owner_observed_exit()));
  }
  return out;
}

void MakeValidUtf8(google::protobuf::Message* message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* refl = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(*message, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->is_map()) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
        f->type() == FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < refl->FieldSize(*message, f); ++i) {
          std::string v = refl->GetRepeatedString(*message, f, i);
          if (!base::IsValidUtf8(v)) refl->SetRepeatedString(message, f, i, base::ToValidUtf8(v));
        }
      } else {
        std::string v = refl->GetString(*message, f);
        if (!base::IsValidUtf8(v)) refl->SetString(message, f, base::ToValidUtf8(v));
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < refl->FieldSize(*message, f); ++i) {
          MakeValidUtf8(refl->MutableRepeatedMessage(message, f, i));
        }
      } else {
        MakeValidUtf8(refl->MutableMessage(message, f));
      }
    }
  }
}

absl::Time TimeOf(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

}  // namespace runreaper
