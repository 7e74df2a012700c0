// How runreaperctl shows things: the exit codes, usage and RPC error lines on
// stderr, and runs, run tables, events and orphans on stdout (human text, or
// protobuf's JSON mapping with --json). Everything taken from a reply (run
// ids, comm, cgroups, labels, messages) is escaped with EscapeForLog before
// it reaches the terminal. Kept apart from the commands so that a new field
// is shown in one place.
#ifndef RUNREAPER_TOOLS_CTL_CTL_OUTPUT_H_
#define RUNREAPER_TOOLS_CTL_CTL_OUTPUT_H_

#include <cstdio>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "google/protobuf/timestamp.pb.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.pb.h"

namespace runreaper::tools {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 3;

// Prints "runreaperctl: <message>" and a pointer to --help on stderr;
// returns kExitUsage.
int Usage(const std::string& message);

// kExitOk for an OK status; otherwise prints "runreaperctl: <what>: <CODE>:
// <message>" on stderr and returns kExitNotFound for NOT_FOUND, else
// kExitError.
int ExitFor(const grpc::Status& s, const std::string& what);

// The message in protobuf's JSON mapping with proto field names ("{}" if it
// cannot be printed).
std::string ToJson(const google::protobuf::Message& m);
// "lineage: on (3 runs followed, 1 with a gap, 12 descendants stored)" or
// "lineage: off (<reason>)", escaped for a terminal.
std::string DescribeLineage(const ::runreaper::v1::LineageStatus& lineage);

// RFC 3339 UTC with milliseconds; "-" for an unset timestamp.
std::string Time(const google::protobuf::Timestamp& t);
// ALIVE, DEAD, ... (the enum name without its prefix).
std::string Liveness(::runreaper::v1::Liveness l);
// "42s", "3m10s", "2h05m", "3d04h": how long ago `t` was; "-" when unset.
std::string Age(const google::protobuf::Timestamp& t);
// PGID, SID, CGROUP, ... (the enum name without its prefix).
std::string MatchName(::runreaper::v1::MatchSource s);

// "code 7 (pidfd_info)", "signal SIGSEGV, core dumped (proc_connector)",
// "unknown"; "-" when none was observed (unset).
std::string DescribeObservedExit(const ::runreaper::v1::ObservedExit& e);
// Short, for tables: "7", "SIGKILL", "SIGSEGV+core", "unknown", "-".
std::string ShortObservedExit(const ::runreaper::v1::ObservedExit& e);
// The job's own code by the shell's convention: the observed exit code, or
// 128 + signal; else the runner's exit_code; else -1 (unknown).
int JobCode(const ::runreaper::v1::Run& run);

// One run as "field: value" lines.
void PrintRun(const ::runreaper::v1::Run& r);
// One line per run under a header.
void PrintRunTable(const std::vector<::runreaper::v1::Run>& runs);
// One audit event per line (id, time, description); flushes stdout so that
// `events --follow` shows each event at once.
void PrintEventLine(const ::runreaper::v1::Event& e);
// One line per orphan under a header, with its flags.
// The answer of `holders RUN`: the pipes looked at, then one line per
// holder (pid, comm, fd, pipe, member or not, leased or kept), then the
// recorded pipe-held fact.
void PrintHolders(const ::runreaper::v1::ListPipeHoldersResponse& response);
void PrintOrphans(const google::protobuf::RepeatedPtrField<::runreaper::v1::Orphan>& orphans);
// "(N processes of other users not shown)" when n > 0 ("1 process";
// `one`/`many` name other things, e.g. "zombie pile"/"zombie piles"): a
// non-root caller's listing leaves out other uids' processes
// (docs/SECURITY.md "What a listing shows a non-root caller"); nothing
// otherwise. It says how many were left out, never whether any matched a
// cookie (the count is built without reading their environments).
void PrintHidden(int n, const std::string& one = "process", const std::string& many = "processes");
// `orphans`' zombie section: nothing when there are no piles; else a blank
// line, "zombies:" and one line per pile (run, reaper pid and comm, whether
// it is a member of the run, zombies held), every string escaped, and how
// many piles the daemon left off.
void PrintZombiePiles(const ::runreaper::v1::ListOrphansResponse& response);

// Containers left behind (docs/ORPHANS.md "Containers"): nothing when
// there are none; else a blank line, "containers:" and one line per
// object (runtime, kind, short id, name, run, state and its detail: the
// receipt of a sweep's answer, `receipts`, or why it is left), escaped.
void PrintContainers(const google::protobuf::RepeatedPtrField<::runreaper::v1::Container>& rows,
                     bool receipts);

// "(N <what> left off to keep the answer within runreaperd's answer budget;
// <hint>)" when n > 0 (an answer of a moment that the daemon cut: orphans,
// a sweep, a pass; docs/OPERATIONS.md); nothing otherwise.
void PrintLeftOff(int n, const std::string& what, const std::string& hint);

// "receipts: N" and one line per kill receipt ("receipt run R pid ...",
// proto/describe.h DescribeReceipt), escaped; nothing when there are none.
void PrintReceipts(
    const google::protobuf::RepeatedPtrField<::runreaper::v1::KillReceipt>& receipts);

// The reply of a call that answers a Run: the run (JSON when `json`), or the
// error as ExitFor prints it.
int PrintRunResult(bool json, const grpc::Status& s, const ::runreaper::v1::Run& run,
                   const std::string& what);

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_CTL_CTL_OUTPUT_H_
