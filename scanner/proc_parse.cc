#include "scanner/proc_parse.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace runreaper::scanner {
namespace {

// True when `s` is one or more ASCII digits and nothing else. absl::SimpleAtoi
// alone would also accept surrounding whitespace and a sign; the kernel never
// prints those for the fields we read, so their presence means garbled text.
bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

template <typename T>
bool ParseUnsignedField(absl::string_view s, T* out) {
  return AllDigits(s) && absl::SimpleAtoi(s, out);
}

// A non-negative int (pids, pgids, sids are never negative in procfs).
bool ParseIntField(absl::string_view s, int* out) { return ParseUnsignedField(s, out); }

absl::Status StatError(absl::string_view why, absl::string_view text) {
  // The text is short (< 1 KiB); quoting a prefix helps when a log shows it.
  return absl::InvalidArgumentError(absl::StrCat("malformed /proc stat line (", why, "): \"",
                                                 absl::CEscape(text.substr(0, 128)), "\""));
}

// Splits off the next space-separated field from `*rest`. The last field of
// the line may end with '\n' or at the end of the text. Returns false when no
// field is left or the field is empty (two separators in a row).
bool NextField(absl::string_view* rest, absl::string_view* field) {
  if (rest->empty()) return false;
  size_t end = 0;
  while (end < rest->size() && (*rest)[end] != ' ' && (*rest)[end] != '\n') {
    ++end;
  }
  if (end == 0) return false;
  *field = rest->substr(0, end);
  rest->remove_prefix(end < rest->size() ? end + 1 : end);
  return true;
}

// Parses a whitespace (space or tab) separated list of non-negative ints.
bool ParseIntList(absl::string_view s, std::vector<int>* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    if (i == s.size()) break;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    int v = 0;
    if (!ParseIntField(s.substr(i, j - i), &v)) return false;
    out->push_back(v);
    i = j;
  }
  return !out->empty();
}

// The first whitespace-separated token of a status value.
absl::string_view FirstToken(absl::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  size_t j = i;
  while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
  return s.substr(i, j - i);
}

}  // namespace

absl::StatusOr<ProcStat> ParseStat(absl::string_view text) {
  // Layout (proc(5)): "pid (comm) state ppid pgrp session tty_nr tpgid flags
  // minflt cminflt majflt cmajflt utime stime cutime cstime priority nice
  // num_threads itrealvalue starttime ...". comm is the raw task name and may
  // itself hold ") " sequences, so it runs from the first '(' to the *last*
  // ')'. Everything after that ')' is kernel-formatted numbers.
  ProcStat st;
  const size_t open = text.find(" (");
  if (open == absl::string_view::npos) return StatError("no ' ('", text);
  if (!ParseIntField(text.substr(0, open), &st.pid) || st.pid <= 0) {
    return StatError("bad pid", text);
  }
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos || close < open + 2) {
    return StatError("no ')' after comm", text);
  }
  const absl::string_view comm = text.substr(open + 2, close - open - 2);

  absl::string_view rest = text.substr(close + 1);
  if (rest.empty() || rest[0] != ' ') return StatError("cut after comm", text);
  rest.remove_prefix(1);

  absl::string_view f;
  // Field 3: state, one character.
  if (!NextField(&rest, &f) || f.size() != 1) return StatError("state", text);
  st.state = f[0];
  if (!NextField(&rest, &f) || !ParseIntField(f, &st.ppid)) {
    return StatError("ppid", text);
  }
  if (!NextField(&rest, &f) || !ParseIntField(f, &st.pgrp)) {
    return StatError("pgrp", text);
  }
  if (!NextField(&rest, &f) || !ParseIntField(f, &st.session)) {
    return StatError("session", text);
  }
  // Fields 7..21 are not used; they must be present (tty_nr and a few others
  // may be negative, so they are only checked for being non-empty).
  for (int field = 7; field <= 21; ++field) {
    if (!NextField(&rest, &f)) return StatError("cut before starttime", text);
  }
  if (!NextField(&rest, &f) || !ParseUnsignedField(f, &st.start_time)) {
    return StatError("starttime", text);
  }
  // The kernel always prints more fields (vsize, ...) after starttime. A
  // starttime that runs to the end of the text may have been cut ("123" of
  // "123456"), so it must be followed by a separator.
  if (f.data() + f.size() == text.data() + text.size()) {
    return StatError("cut inside starttime", text);
  }
  st.comm.assign(comm.data(), comm.size());
  return st;
}

absl::StatusOr<ProcStatus> ParseStatus(absl::string_view text) {
  ProcStatus st;
  bool have_state = false, have_tgid = false, have_ppid = false, have_uid = false;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    absl::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == absl::string_view::npos ? text.size() : nl + 1);

    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view key = line.substr(0, colon);
    const absl::string_view value = line.substr(colon + 1);

    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed /proc status line \"", absl::CEscape(line), "\" (", what, ")"));
    };
    if (key == "State") {
      absl::string_view tok = FirstToken(value);
      if (tok.size() != 1) return bad("State");
      st.state = tok[0];
      have_state = true;
    } else if (key == "Tgid") {
      if (!ParseIntField(FirstToken(value), &st.tgid)) return bad("Tgid");
      have_tgid = true;
    } else if (key == "PPid") {
      if (!ParseIntField(FirstToken(value), &st.ppid)) return bad("PPid");
      have_ppid = true;
    } else if (key == "Uid") {
      if (!ParseUnsignedField(FirstToken(value), &st.uid)) return bad("Uid");
      have_uid = true;
      // "real effective saved filesystem": the second column, when present.
      const absl::string_view first = FirstToken(value);
      const absl::string_view second =
          FirstToken(value.substr(static_cast<size_t>(first.data() - value.data()) + first.size()));
      if (!second.empty()) {
        uint32_t euid = 0;
        if (!ParseUnsignedField(second, &euid)) return bad("Uid");
        st.euid = euid;
      }
    } else if (key == "NSpid") {
      if (!ParseIntList(value, &st.nspid)) return bad("NSpid");
    } else if (key == "NSpgid") {
      if (!ParseIntList(value, &st.nspgid)) return bad("NSpgid");
    } else if (key == "NSsid") {
      if (!ParseIntList(value, &st.nssid)) return bad("NSsid");
    }
  }
  // The kernel prints one NSpid, NSpgid and NSsid entry per PID namespace
  // level (0 where the group or session leader lies outside that level), so
  // the three lists have the same length; lists that disagree are garbled
  // text, and an innermost entry read from one of them could belong to
  // another level.
  if (st.nspgid.size() != st.nspid.size() || st.nssid.size() != st.nspid.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "/proc status text has ", st.nspid.size(), " NSpid, ", st.nspgid.size(), " NSpgid and ",
        st.nssid.size(), " NSsid entries (one per PID namespace level expected)"));
  }
  if (!have_state || !have_tgid || !have_ppid || !have_uid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "/proc status text lacks", have_state ? "" : " State:", have_tgid ? "" : " Tgid:",
        have_ppid ? "" : " PPid:", have_uid ? "" : " Uid:"));
  }
  return st;
}

absl::StatusOr<uint64_t> ParsePidNsLink(absl::string_view link) {
  constexpr absl::string_view kPrefix = "pid:[";
  uint64_t inode = 0;
  if (link.size() < kPrefix.size() + 2 || link.substr(0, kPrefix.size()) != kPrefix ||
      link.back() != ']' ||
      !ParseUnsignedField(link.substr(kPrefix.size(), link.size() - kPrefix.size() - 1), &inode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed pid namespace link \"", absl::CEscape(link), "\""));
  }
  return inode;
}

absl::StatusOr<std::string> ParseCgroupV2(absl::string_view text) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    absl::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == absl::string_view::npos ? text.size() : nl + 1);
    if (line.substr(0, 3) == "0::") return std::string(line.substr(3));
  }
  return absl::NotFoundError("no cgroup v2 (\"0::\") line");
}

absl::StatusOr<std::vector<int>> ParseChildrenList(absl::string_view text) {
  std::vector<int> out;
  while (!text.empty()) {
    const size_t sep = text.find_first_of(" \n");
    const absl::string_view token = text.substr(0, sep);
    text.remove_prefix(sep == absl::string_view::npos ? text.size() : sep + 1);
    if (token.empty()) continue;
    int pid = 0;
    if (token.size() > 7 || !absl::SimpleAtoi(token, &pid) || pid < 1 || pid > (1 << 22) ||
        token[0] == '+' || token[0] == '0') {
      return absl::InvalidArgumentError(
          absl::StrCat("children list: \"", absl::CEscape(token.substr(0, 16)), "\" is not a pid"));
    }
    out.push_back(pid);
  }
  return out;
}

std::optional<absl::string_view> FindEnvVar(absl::string_view environ, absl::string_view name) {
  if (name.empty()) return std::nullopt;
  while (!environ.empty()) {
    size_t end = environ.find('\0');
    // The last entry may lack its NUL (e.g. text cut at a buffer boundary).
    absl::string_view entry = environ.substr(0, end);
    environ.remove_prefix(end == absl::string_view::npos ? environ.size() : end + 1);
    if (entry.size() > name.size() && entry[name.size()] == '=' &&
        entry.substr(0, name.size()) == name) {
      return entry.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

std::vector<std::optional<absl::string_view>> FindEnvVars(
    absl::string_view environ, absl::Span<const absl::string_view> names) {
  std::vector<std::optional<absl::string_view>> out(names.size());
  size_t wanted = 0;
  for (const absl::string_view name : names) wanted += name.empty() ? 0 : 1;
  while (!environ.empty() && wanted > 0) {
    const size_t end = environ.find('\0');
    // The last entry may lack its NUL (e.g. text cut at a buffer boundary).
    const absl::string_view entry = environ.substr(0, end);
    environ.remove_prefix(end == absl::string_view::npos ? environ.size() : end + 1);
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    const absl::string_view key = entry.substr(0, eq);
    for (size_t i = 0; i < names.size(); ++i) {
      if (out[i].has_value() || names[i] != key) continue;
      out[i] = entry.substr(eq + 1);
      --wanted;
    }
  }
  return out;
}

KeepValue ParseKeepValue(absl::string_view value) {
  KeepValue out;
  if (value == "1") {
    out.forever = true;
    return out;
  }
  // A bare number other than 1 is not a duration (absl wants a unit): it
  // keeps nothing.
  absl::Duration d;
  if (value.size() <= 32 && absl::ParseDuration(value, &d) && d > absl::ZeroDuration() &&
      d != absl::InfiniteDuration()) {
    out.lease = d;
  }
  return out;
}

uint64_t KeepLeaseEndTicks(uint64_t start_ticks, absl::Duration lease, int64_t ticks_per_second) {
  const int64_t hz = ticks_per_second > 0 ? ticks_per_second : 100;
  // Saturating: a lease of centuries must not wrap to a past tick.
  const double ticks = absl::ToDoubleSeconds(lease) * static_cast<double>(hz);
  const double room = static_cast<double>(UINT64_MAX - start_ticks);
  if (ticks >= room) return UINT64_MAX;
  return start_ticks + static_cast<uint64_t>(ticks);
}

bool KeepHolds(absl::string_view value, uint64_t start_ticks, uint64_t now_ticks,
               int64_t ticks_per_second) {
  const KeepValue keep = ParseKeepValue(value);
  if (keep.forever) return true;
  if (!keep.lease.has_value()) return false;
  return now_ticks == 0 ||
         now_ticks < KeepLeaseEndTicks(start_ticks, *keep.lease, ticks_per_second);
}

}  // namespace runreaper::scanner
