// What the metrics cost (issue 11): a reconcile pass over 10,000 RUNNING
// records and 10,000 RegisterRun calls, metrics on (everything the daemon
// feeds: PassDone/SetWatcher/SetRunCounts(CountRuns) after a pass, the
// store's write-transaction hook, the RPC interceptor, the event counter on
// the hub) vs off (a disabled facade: none of it).
//
//   bazel run -c opt //server:metrics_bench -- [--records=10000]
//       [--registrations=10000] [--rounds=20] [--aa]
//
// How, because a 2 % effect drowns in the wall-time noise of a shared
// machine (an A/A of either loop, both sides off, differs by 10-30 %):
//  - pass: one store, passes alternating on/off; the figure is the time
//    measured inside the metrics calls of the "on" passes, over the median
//    "off" pass (pass_metrics_overhead_pct). The plain difference of the
//    medians is printed too (pass_on_minus_off_pct) and is not a measure.
//  - RegisterRun: two in-process daemons' stacks on unix sockets, one with
//    metrics, batches alternating; the figure is process CPU time per call
//    (client + server + the hub's delivery), on vs off. --aa gives the noise
//    floor of that comparison.
// Prints one JSON object; metrics_overhead_pct is the larger of the two
// (goal: under 2).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file_util.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "scanner/identity_proto.h"
#include "scanner/procfs.h"
#include "server/metrics/metrics.h"
#include "server/reconcile/reconciler.h"
#include "server/rpc/event_hub.h"
#include "server/rpc/service.h"
#include "server/sweep/sweeper.h"
#include "store/run_store.h"

ABSL_FLAG(int, records, 10000, "RUNNING records in the reconcile pass.");
ABSL_FLAG(int, registrations, 10000, "RegisterRun calls per side (on, off).");
ABSL_FLAG(bool, aa, false,
          "A/A run: the RegisterRun \"on\" side runs with metrics off too; "
          "register_metrics_overhead_pct is then the noise floor.");
ABSL_FLAG(int, rounds, 20, "Alternating on/off rounds (passes; RegisterRun batches).");

namespace runreaper::server {
namespace {

[[noreturn]] void Die(const std::string& what) {
  fprintf(stderr, "metrics_bench: %s\n", what.c_str());
  exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
}

// CPU time of this whole process (client, server and background threads):
// unlike wall time, barely moved by other processes competing for the cores.
absl::Duration ProcessCpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double OverheadPct(double on, double off) { return off > 0 ? 100.0 * (on - off) / off : 0; }

class CountingSubscriber : public EventSubscriber {
 public:
  explicit CountingSubscriber(Metrics* m) : metrics_(m) {}
  void OnEvents(const std::vector<v1::Event>& events) override { metrics_->CountEvents(events); }
  void OnShutdown() override {}

 private:
  Metrics* metrics_;
};

// The daemon's pieces around one store handle, with metrics on or off. The
// on and off stacks open the same database file (each its own handle and
// socket), so both work on the same data and the same WAL.
struct Stack {
  Stack(const std::string& dir, const std::string& db, const std::string& name, bool metrics_on)
      : metrics(metrics_on) {
    store::StoreOptions so;
    // synchronous=NORMAL on both sides: without an fsync per commit the
    // base is faster, so the metrics' share reads larger (conservative).
    so.synchronous = store::StoreOptions::Sync::kNormal;
    store = Check(store::RunStore::Open(absl::StrCat(dir, "/", db, ".db"), metrics.Observe(so)),
                  "open store");
    reconciler = std::make_unique<Reconciler>(store.get(), &procfs, nullptr, ReconcilerOptions());
    SweeperOptions sw;
    sw.metrics = &metrics;
    sweeper = std::make_unique<Sweeper>(store.get(), &procfs, sw);
    hub = std::make_unique<EventHub>(store.get());
    if (absl::Status s = hub->Start(absl::Milliseconds(100)); !s.ok()) Die(s.ToString());
    if (metrics.enabled()) hub->Subscribe(std::make_shared<CountingSubscriber>(&metrics));
    service = std::make_unique<ReconcilerService>(store.get(), &procfs, &self, reconciler.get(),
                                                  hub.get(), sweeper.get());
    socket = absl::StrCat(dir, "/", name, ".sock");
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(service.get());
    builder.experimental().SetInterceptorCreators(metrics.GrpcInterceptors());
    server = builder.BuildAndStart();
    if (server == nullptr) Die("cannot listen on " + socket);
    stub = v1::Reconciler::NewStub(
        grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  }
  ~Stack() {
    hub->Stop();
    server->Shutdown(std::chrono::system_clock::now());
    service->WaitForBackgroundWork();
  }

  // `n` RegisterRun calls over the unix socket, one at a time. Returns the
  // wall time; adds the process CPU time to *cpu.
  absl::Duration Register(int n, int* next_id, absl::Duration* cpu = nullptr) {
    const absl::Time start = absl::Now();
    const absl::Duration cpu_start = ProcessCpu();
    for (int i = 0; i < n; ++i) {
      v1::RegisterRunRequest req;
      req.set_run_id(absl::StrCat("reg-", (*next_id)++));
      req.set_pid(getpid());
      v1::Run run;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      const grpc::Status s = stub->RegisterRun(&ctx, req, &run);
      if (!s.ok()) Die("RegisterRun: " + s.error_message());
    }
    if (!WaitForHub()) Die("event hub did not catch up");
    if (cpu != nullptr) *cpu += ProcessCpu() - cpu_start;
    return absl::Now() - start;
  }

  // The hub has delivered every event written so far (its CPU belongs to
  // the calls that wrote them).
  bool WaitForHub() {
    absl::StatusOr<int64_t> last = store->LastEventId();
    if (!last.ok()) return false;
    return hub->PumpNow().ok();
  }

  Metrics metrics;
  scanner::ProcFs procfs;
  DaemonSelf self{procfs};
  std::unique_ptr<store::RunStore> store;
  std::unique_ptr<Reconciler> reconciler;
  std::unique_ptr<Sweeper> sweeper;
  std::unique_ptr<EventHub> hub;
  std::unique_ptr<ReconcilerService> service;
  std::string socket;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Reconciler::Stub> stub;
};

int Main() {
  const int records = absl::GetFlag(FLAGS_records);
  const int registrations = absl::GetFlag(FLAGS_registrations);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const std::string dir = Check(base::MakeTempDir("/tmp", "rr-mbench."), "temporary directory");

  google::protobuf::Struct out;
  auto set = [&](const std::string& k, double v) {
    (*out.mutable_fields())[k].set_number_value(v);
  };
  {
    // The pass: one store and one reconciler; "on" feeds an enabled facade
    // (store hook included), "off" a disabled one. (Two handles on one file,
    // or two files, differ by more than the metrics cost: an A/A run of
    // either showed 10-20 %.) The store's hook reads the clock twice per
    // transaction whenever a hook is set, on or off: a few tens of ns.
    Metrics enabled(true);
    Metrics* current = &enabled;
    store::StoreOptions so;
    so.synchronous = store::StoreOptions::Sync::kNormal;
    // Time spent inside the metrics calls of "on" passes, measured where it
    // is spent (the hook adds two clock reads in the store on top).
    absl::Duration in_metrics;
    so.on_write_transaction = [&current, &in_metrics](absl::Duration d) {
      const absl::Time t = absl::Now();
      current->StoreTransaction(d);
      if (current->enabled()) in_metrics += absl::Now() - t + absl::Nanoseconds(50);
    };
    std::unique_ptr<store::RunStore> st =
        Check(store::RunStore::Open(dir + "/pass.db", so), "open store");
    scanner::ProcFs procfs;
    Reconciler reconciler(st.get(), &procfs, nullptr, ReconcilerOptions());
    // RUNNING records whose leader is this (live) process: every pass
    // probes and refreshes all of them, none goes STALE.
    const scanner::Identity self = Check(procfs.CaptureIdentity(getpid()), "identity");
    for (int i = 0; i < records; ++i) {
      v1::Run run;
      run.set_run_id(absl::StrCat("run-", i));
      scanner::SetIdentity(self, &run);
      Check(st->Register(run), "register");
    }
    auto pass = [&](Metrics* m) {
      current = m;
      const absl::Time start = absl::Now();
      absl::StatusOr<PassResult> result = reconciler.RunPass();
      if (!result.ok()) Die(result.status().ToString());
      // What DaemonLoops::RunOnePass feeds after each pass.
      const absl::Time fed = absl::Now();
      m->PassDone(fed - start, result.ok());
      m->SetWatcher(0, 0);
      if (m->enabled()) {
        m->SetRunCounts(st->CountRuns());
        in_metrics += absl::Now() - fed;
      }
      return absl::ToDoubleMilliseconds(absl::Now() - start);
    };
    pass(&enabled);  // warm caches
    pass(Metrics::Off());
    std::vector<double> on_ms, off_ms, count_ms;
    in_metrics = absl::ZeroDuration();
    for (int r = 0; r < rounds; ++r) {
      // Alternate which side goes first.
      if (r % 2 == 0) off_ms.push_back(pass(Metrics::Off()));
      on_ms.push_back(pass(&enabled));
      if (r % 2 == 1) off_ms.push_back(pass(Metrics::Off()));
      const absl::Time start = absl::Now();
      Check(st->CountRuns(), "count");
      count_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    }
    set("records", records);
    set("pass_ms_off", Median(off_ms));
    set("pass_ms_on", Median(on_ms));
    // The differencing of two medians is at the mercy of load from other
    // processes and of which passes refresh last_seen_alive (an A/A run of
    // this loop shows 10-20 %); the figure kept is the time measured inside
    // the metrics calls over the off pass's median.
    set("pass_on_minus_off_pct", OverheadPct(Median(on_ms), Median(off_ms)));
    const double metrics_ms = absl::ToDoubleMilliseconds(in_metrics) / rounds;
    set("pass_metrics_ms", metrics_ms);
    set("pass_metrics_overhead_pct", 100.0 * metrics_ms / Median(off_ms));
    set("pass_count_runs_ms", Median(count_ms));  // the largest part of it
  }
  {
    // Two daemons' stacks (own database each; the A/A of this setup is
    // within a few percent either way), RegisterRun calls alternating.
    Stack on(dir, "reg-on", "reg-on", !absl::GetFlag(FLAGS_aa));
    Stack off(dir, "reg-off", "reg-off", false);
    int on_id = 0, off_id = 1000000000;
    on.Register(200, &on_id);  // warm connections and caches
    off.Register(200, &off_id);
    const int batch = std::max(1, registrations / rounds);
    std::vector<double> on_us, off_us, on_cpu, off_cpu;
    auto run = [&](Stack& s, int* id, std::vector<double>* wall, std::vector<double>* cpu) {
      absl::Duration c;
      wall->push_back(absl::ToDoubleMicroseconds(s.Register(batch, id, &c)) / batch);
      cpu->push_back(absl::ToDoubleMicroseconds(c) / batch);
    };
    for (int r = 0; r < rounds; ++r) {
      if (r % 2 == 0) run(off, &off_id, &off_us, &off_cpu);
      run(on, &on_id, &on_us, &on_cpu);
      if (r % 2 == 1) run(off, &off_id, &off_us, &off_cpu);
    }
    set("registrations", batch * rounds);
    set("register_us_off", Median(off_us));
    set("register_us_on", Median(on_us));
    set("register_wall_on_minus_off_pct", OverheadPct(Median(on_us), Median(off_us)));
    // CPU per call (client and server in this process), the figure kept.
    set("register_cpu_us_off", Median(off_cpu));
    set("register_cpu_us_on", Median(on_cpu));
    set("register_metrics_overhead_pct", OverheadPct(Median(on_cpu), Median(off_cpu)));
  }
  set("rounds", rounds);
  set("metrics_overhead_pct",
      std::max(out.fields().at("pass_metrics_overhead_pct").number_value(),
               out.fields().at("register_metrics_overhead_pct").number_value()));
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(out, &json, options);
  printf("%s\n", json.c_str());
  base::RemoveTree(dir).IgnoreError();
  return 0;
}

}  // namespace
}  // namespace runreaper::server

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return runreaper::server::Main();
}
