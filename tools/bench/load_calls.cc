#include "tools/bench/load_calls.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/load_proc.h"

namespace runreaper::load {
namespace {

namespace v1 = ::runreaper::v1;
using bench::MonoNanos;
using Stub = v1::Reconciler::Stub;

// One connection per client, as separate runner processes would have: a
// private subchannel pool keeps gRPC from sharing one connection among the
// channels of this process.
std::unique_ptr<Stub> Connect(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::Reconciler::NewStub(
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args));
}

// A unary call with a deadline `timeout` from now.
template <typename Req, typename Resp>
grpc::Status Invoke(grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                    Stub* stub, const Req& req, Resp* resp, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  return (stub->*method)(&ctx, req, resp);
}

v1::RegisterRunRequest RegisterRequest(const std::string& run_id) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  // The daemon reads this process's identity itself (as for
  // `runreaperctl register --pid`); keep: no sweep ever signals us.
  req.set_pid(::getpid());
  req.set_keep(true);
  (*req.mutable_labels())["runreaper-load"] = "1";
  return req;
}

v1::FinishRunRequest FinishRequest(const std::string& run_id) {
  v1::FinishRunRequest req;
  req.set_run_id(run_id);
  req.set_exit_code(0);
  return req;
}

struct ClientOut {
  long ops = 0;
  long errors = 0;
  std::string first_error;
  std::vector<double> first_ms;
  std::vector<double> second_ms;
  int last_page_runs = 0;
};

// Invoke, timed: the latency in ms goes to *lat when the call succeeds; a
// failure is counted in *out. Returns whether it succeeded.
template <typename Req, typename Resp>
bool Timed(grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*), Stub* stub,
           const Req& req, Resp* resp, absl::Duration timeout, std::vector<double>* lat,
           ClientOut* out) {
  const int64_t t0 = MonoNanos();
  const grpc::Status s = Invoke(method, stub, req, resp, timeout);
  const int64_t t1 = MonoNanos();
  if (!s.ok()) {
    if (out->errors++ == 0) {
      out->first_error = absl::StrCat(s.error_code(), ": ", s.error_message());
    }
    return false;
  }
  lat->push_back((t1 - t0) / 1e6);
  return true;
}

// One op of the phase's kind; false when a call failed.
bool OneOp(const PhasePlan& plan, const std::string& new_run_id, Stub* stub, ClientOut* out) {
  const absl::Duration timeout = plan.call_timeout;
  switch (plan.call) {
    case Call::kRegisterFinish: {
      v1::Run run;
      return Timed(&Stub::RegisterRun, stub, RegisterRequest(new_run_id), &run, timeout,
                   &out->first_ms, out) &&
             Timed(&Stub::FinishRun, stub, FinishRequest(new_run_id), &run, timeout,
                   &out->second_ms, out);
    }
    case Call::kGetRun: {
      v1::GetRunRequest req;
      req.set_run_id(plan.getrun_id);
      v1::Run run;
      return Timed(&Stub::GetRun, stub, req, &run, timeout, &out->first_ms, out);
    }
    case Call::kListRuns: {
      v1::ListRunsRequest req;
      req.set_page_size(plan.list_page_size);
      v1::ListRunsResponse resp;
      if (!Timed(&Stub::ListRuns, stub, req, &resp, timeout, &out->first_ms, out)) {
        return false;
      }
      out->last_page_runs = resp.runs_size();
      return true;
    }
  }
  return false;
}

void ClientLoop(const PhasePlan& plan, int index, Stub* stub, int64_t end_ns, long max_ops,
                ClientOut* out) {
  long seq = 0;
  while (out->ops < max_ops && out->errors < plan.max_errors_per_client && MonoNanos() < end_ns) {
    const std::string id =
        plan.call == Call::kRegisterFinish
            ? absl::StrCat(plan.run_prefix, "-c", plan.clients, "-t", index, "-", seq++)
            : std::string();
    if (OneOp(plan, id, stub, out)) ++out->ops;
  }
}

}  // namespace

absl::string_view CallName(Call call) {
  switch (call) {
    case Call::kRegisterFinish:
      return "register_finish";
    case Call::kGetRun:
      return "getrun";
    case Call::kListRuns:
      return "listruns";
  }
  return "?";
}

absl::StatusOr<Call> ParseCall(absl::string_view name) {
  for (Call c : {Call::kRegisterFinish, Call::kGetRun, Call::kListRuns}) {
    if (name == CallName(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown call '", name, "' (register_finish, getrun, listruns)"));
}

absl::Status SeedRun(const std::string& socket, const std::string& run_id, absl::Duration timeout) {
  std::unique_ptr<Stub> stub = Connect(socket);
  v1::Run run;
  grpc::Status s = Invoke(&Stub::RegisterRun, stub.get(), RegisterRequest(run_id), &run, timeout);
  if (s.ok()) {
    s = Invoke(&Stub::FinishRun, stub.get(), FinishRequest(run_id), &run, timeout);
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("seeding run ", run_id, " on ", socket, ": ",
                                               s.error_code(), ": ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PhaseResult> RunPhase(const PhasePlan& plan) {
  const int n = plan.clients;
  std::vector<std::unique_ptr<Stub>> stubs;
  std::vector<ClientOut> outs(n);
  const long per_client = std::max<long>(1, plan.max_ops / n);
  for (int i = 0; i < n; ++i) {
    stubs.push_back(Connect(plan.socket));
    outs[i].first_ms.reserve(4096);
    outs[i].second_ms.reserve(plan.call == Call::kRegisterFinish ? 4096 : 0);
  }
  // Connect every client before the clock starts (NOT_FOUND is the answer).
  for (int i = 0; i < n; ++i) {
    v1::GetRunRequest req;
    req.set_run_id("__load_connect__");
    v1::Run run;
    Invoke(&Stub::GetRun, stubs[i].get(), req, &run, plan.call_timeout);
  }

  absl::StatusOr<uint64_t> daemon0 = ReadCpuTicks(plan.daemon_pid);
  if (!daemon0.ok()) return daemon0.status();
  absl::StatusOr<uint64_t> self0 = ReadCpuTicks(::getpid());
  if (!self0.ok()) return self0.status();
  const int64_t t0 = MonoNanos();
  const int64_t end_ns = t0 + absl::ToInt64Nanoseconds(plan.duration);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back(ClientLoop, std::cref(plan), i, stubs[i].get(), end_ns, per_client,
                         &outs[i]);
  }
  for (std::thread& t : threads) t.join();
  const int64_t t1 = MonoNanos();
  absl::StatusOr<uint64_t> daemon1 = ReadCpuTicks(plan.daemon_pid);
  if (!daemon1.ok()) return daemon1.status();
  absl::StatusOr<uint64_t> self1 = ReadCpuTicks(::getpid());
  if (!self1.ok()) return self1.status();

  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  PhaseResult r;
  r.wall_s = (t1 - t0) / 1e9;
  r.daemon_cpu_s = (*daemon1 - *daemon0) / tick;
  r.client_cpu_s = (*self1 - *self0) / tick;
  for (ClientOut& o : outs) {
    r.ops += o.ops;
    r.errors += o.errors;
    if (r.first_error.empty()) r.first_error = o.first_error;
    r.first_ms.insert(r.first_ms.end(), o.first_ms.begin(), o.first_ms.end());
    r.second_ms.insert(r.second_ms.end(), o.second_ms.begin(), o.second_ms.end());
    r.last_page_runs = std::max(r.last_page_runs, o.last_page_runs);
  }
  return r;
}

}  // namespace runreaper::load
