#include "tools/load_calls.h"

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
#include "tools/bench_util.h"
#include "tools/load_proc.h"

namespace runreaper::load {
namespace {

namespace v1 = ::runreaper::v1;
using bench::MonoNanos;

// One connection per client, as separate runner processes would have: a
// private subchannel pool keeps gRPC from sharing one connection among the
// channels of this process.
std::unique_ptr<v1::Reconciler::Stub> Connect(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::Reconciler::NewStub(grpc::CreateCustomChannel(
      "unix:" + socket, grpc::InsecureChannelCredentials(), args));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(timeout));
}

grpc::Status Register(v1::Reconciler::Stub* stub, const std::string& run_id,
                      absl::Duration timeout) {
  v1::RegisterRunRequest req;
  req.set_run_id(run_id);
  // The daemon reads this process's identity itself (as for
  // `runreaperctl register --pid`); keep: no sweep ever signals us.
  req.set_pid(::getpid());
  req.set_keep(true);
  (*req.mutable_labels())["runreaper-load"] = "1";
  v1::Run run;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  return stub->RegisterRun(&ctx, req, &run);
}

grpc::Status Finish(v1::Reconciler::Stub* stub, const std::string& run_id,
                    absl::Duration timeout) {
  v1::FinishRunRequest req;
  req.set_run_id(run_id);
  req.set_exit_code(0);
  v1::Run run;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  return stub->FinishRun(&ctx, req, &run);
}

struct ClientOut {
  long ops = 0;
  long errors = 0;
  std::string first_error;
  std::vector<double> first_ms;
  std::vector<double> second_ms;
  int last_page_runs = 0;
};

// Times one call: its latency in ms goes to *lat when it succeeds; a
// failure is counted in *out. Returns whether it succeeded.
template <typename F>
bool Timed(F&& call, std::vector<double>* lat, ClientOut* out) {
  const int64_t t0 = MonoNanos();
  const grpc::Status s = call();
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

void ClientLoop(const PhasePlan& plan, int index, v1::Reconciler::Stub* stub,
                int64_t end_ns, long max_ops, ClientOut* out) {
  const absl::Duration timeout = plan.call_timeout;
  long seq = 0;
  while (out->ops < max_ops && out->errors < plan.max_errors_per_client &&
         MonoNanos() < end_ns) {
    switch (plan.call) {
      case Call::kRegisterFinish: {
        const std::string id = absl::StrCat(plan.run_prefix, "-c", plan.clients,
                                            "-t", index, "-", seq++);
        if (!Timed([&] { return Register(stub, id, timeout); }, &out->first_ms,
                   out)) {
          continue;
        }
        if (!Timed([&] { return Finish(stub, id, timeout); }, &out->second_ms,
                   out)) {
          continue;
        }
        break;
      }
      case Call::kGetRun: {
        v1::GetRunRequest req;
        req.set_run_id(plan.getrun_id);
        v1::Run run;
        if (!Timed(
                [&] {
                  grpc::ClientContext ctx;
                  SetDeadline(&ctx, timeout);
                  return stub->GetRun(&ctx, req, &run);
                },
                &out->first_ms, out)) {
          continue;
        }
        break;
      }
      case Call::kListRuns: {
        v1::ListRunsRequest req;
        req.set_page_size(plan.list_page_size);
        v1::ListRunsResponse resp;
        if (!Timed(
                [&] {
                  grpc::ClientContext ctx;
                  SetDeadline(&ctx, timeout);
                  return stub->ListRuns(&ctx, req, &resp);
                },
                &out->first_ms, out)) {
          continue;
        }
        out->last_page_runs = resp.runs_size();
        break;
      }
    }
    ++out->ops;
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
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown call '", name, "' (register_finish, getrun, listruns)"));
}

absl::Status SeedRun(const std::string& socket, const std::string& run_id,
                     absl::Duration timeout) {
  std::unique_ptr<v1::Reconciler::Stub> stub = Connect(socket);
  for (const grpc::Status& s : {Register(stub.get(), run_id, timeout),
                                Finish(stub.get(), run_id, timeout)}) {
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "seeding run ", run_id, " on ", socket, ": ", s.error_code(), ": ",
          s.error_message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PhaseResult> RunPhase(const PhasePlan& plan) {
  const int n = plan.clients;
  std::vector<std::unique_ptr<v1::Reconciler::Stub>> stubs;
  std::vector<ClientOut> outs(n);
  const long per_client = std::max<long>(1, plan.max_ops / n);
  for (int i = 0; i < n; ++i) {
    stubs.push_back(Connect(plan.socket));
    outs[i].first_ms.reserve(4096);
    outs[i].second_ms.reserve(plan.call == Call::kRegisterFinish ? 4096 : 0);
  }
  // Connect every client before the clock starts.
  for (int i = 0; i < n; ++i) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, plan.call_timeout);
    v1::GetRunRequest req;
    req.set_run_id("__load_connect__");
    v1::Run run;
    stubs[i]->GetRun(&ctx, req, &run);  // NOT_FOUND is the answer
  }

  absl::StatusOr<uint64_t> daemon0 = ReadCpuTicks(plan.daemon_pid);
  if (!daemon0.ok()) return daemon0.status();
  absl::StatusOr<uint64_t> self0 = ReadCpuTicks(::getpid());
  if (!self0.ok()) return self0.status();
  const int64_t t0 = MonoNanos();
  const int64_t end_ns = t0 + absl::ToInt64Nanoseconds(plan.duration);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back(ClientLoop, std::cref(plan), i, stubs[i].get(),
                         end_ns, per_client, &outs[i]);
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
    r.second_ms.insert(r.second_ms.end(), o.second_ms.begin(),
                       o.second_ms.end());
    r.last_page_runs = std::max(r.last_page_runs, o.last_page_runs);
  }
  return r;
}

}  // namespace runreaper::load
