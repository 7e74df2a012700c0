// Errors as a client expects them, end to end through the real runreaperd on
// its real unix socket: bytes a client builds by hand (a generic stub, no
// generated message to keep them valid) that are not a valid request answer
// INVALID_ARGUMENT with a message naming the field, on unary and streaming
// calls alike, without a libprotobuf log line, and every answer is counted by
// code (docs/SECURITY.md "Requests").
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace runreaper::e2e {
namespace {

// Sends `bytes` as the one request message of `method` and returns the
// call's status (the answer, if any, is read and dropped). A bidi generic
// call is what a unary or server-streaming call is on the wire: one message,
// then the half-close.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  auto ctx = Ctx();
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(ctx.get(), method, &cq);
  auto step = [&](int tag) {
    void* got = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&got, &ok));
    EXPECT_EQ(got, reinterpret_cast<void*>(static_cast<intptr_t>(tag)));
    return ok;
  };
  auto tag = [](int t) { return reinterpret_cast<void*>(static_cast<intptr_t>(t)); };
  call->StartCall(tag(1));
  step(1);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, tag(2));
  step(2);
  call->WritesDone(tag(3));
  step(3);
  grpc::ByteBuffer answer;
  while (true) {
    call->Read(&answer, tag(4));
    if (!step(4)) break;
  }
  grpc::Status status;
  call->Finish(&status, tag(5));
  step(5);
  cq.Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }
  return status;
}

// Field 1 (length-delimited) holding `value`.
std::string Field1(const std::string& value) {
  return absl::StrCat(std::string(1, '\x0a'), std::string(1, static_cast<char>(value.size())),
                      value);
}

const char kMethod[] = "/runreaper.v1.Reconciler/";

class ErrorsE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(
        dir_.path(), std::vector<std::string>{"--scan_interval=60s", "--metrics=127.0.0.1:0"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
    const std::string marker = "metrics on 127.0.0.1:0 (port ";
    ASSERT_TRUE(base::WaitFor([&] { return absl::StrContains(daemon_->log(), marker); }));
    const std::string log = daemon_->log();
    metrics_port_ = atoi(log.c_str() + log.find(marker) + marker.size());
  }

  base::TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  int metrics_port_ = 0;
};

// Finding 7: invalid UTF-8 in a string field answered UNIMPLEMENTED with an
// empty message and logged a libprotobuf ERROR line per request.
TEST_F(ErrorsE2ETest, InvalidUtf8InAStringFieldIsInvalidArgumentNamingTheField) {
  const std::string bad = "job\xff\xfe";
  grpc::Status s = RawCall(daemon_->channel(), absl::StrCat(kMethod, "GetRun"), Field1(bad));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(), "run_id: not valid UTF-8 (a string field must hold UTF-8)");

  // A write: RegisterRun, its run id and a label's value.
  s = RawCall(daemon_->channel(), absl::StrCat(kMethod, "RegisterRun"), Field1(bad));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "run_id: ")) << s.error_message();
  // labels = 11: an entry (key "k", value bad) inside field 11.
  const std::string entry =
      absl::StrCat("\x0a\x01k", "\x12", std::string(1, static_cast<char>(bad.size())), bad);
  const std::string labels =
      absl::StrCat("\x5a", std::string(1, static_cast<char>(entry.size())), entry);
  s = RawCall(daemon_->channel(), absl::StrCat(kMethod, "RegisterRun"),
              absl::StrCat(Field1("ok-id"), labels));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "labels (value): ")) << s.error_message();

  // WaitRun, the long-lived unary call.
  s = RawCall(daemon_->channel(), absl::StrCat(kMethod, "WaitRun"), Field1(bad));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "run_id: ")) << s.error_message();

  // Nothing was registered, and the daemon still answers.
  v1::ListRunsRequest list;
  v1::ListRunsResponse runs;
  auto ctx = Ctx();
  ASSERT_TRUE(daemon_->stub()->ListRuns(ctx.get(), list, &runs).ok());
  EXPECT_EQ(runs.runs_size(), 0);

  EXPECT_FALSE(absl::StrContains(daemon_->log(), "libprotobuf")) << daemon_->log();
  EXPECT_FALSE(absl::StrContains(daemon_->log(), "invalid UTF-8")) << daemon_->log();
}

// The server stream: WatchEventsRequest has no string field; bytes that are
// no message at all (a varint cut short) get the same answer.
TEST_F(ErrorsE2ETest, AStreamingRequestThatDoesNotParseIsInvalidArgument) {
  grpc::Status s =
      RawCall(daemon_->channel(), absl::StrCat(kMethod, "WatchEvents"), std::string("\x08\xff", 2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(), "request is not a valid runreaper.v1.WatchEventsRequest message");
  // An empty request is a valid one (every field at its default).
  s = RawCall(daemon_->channel(), absl::StrCat(kMethod, "ListEvents"), "");
  EXPECT_TRUE(s.ok()) << s.error_message();
  // An unknown method is still UNIMPLEMENTED (it has no request type).
  s = RawCall(daemon_->channel(), absl::StrCat(kMethod, "NoSuchMethod"), "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  EXPECT_FALSE(absl::StrContains(daemon_->log(), "libprotobuf")) << daemon_->log();
}

// A request larger than gRPC's receive limit (4 MiB) is refused by gRPC
// itself with RESOURCE_EXHAUSTED; the rewrite leaves that answer alone.
TEST_F(ErrorsE2ETest, ARequestPastTheSizeLimitStaysResourceExhausted) {
  const std::string big(5 << 20, 'x');
  grpc::Status s = RawCall(daemon_->channel(), absl::StrCat(kMethod, "GetRun"),
                           absl::StrCat("\x0a\x80\x80\x40", big));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "larger than max")) << s.error_message();
}

// Every answer is counted by method and code; the rewritten answers count as
// INVALID_ARGUMENT, not UNIMPLEMENTED.
TEST_F(ErrorsE2ETest, RewrittenAnswersAreCountedByTheirCode) {
  for (int i = 0; i < 3; ++i) {
    RawCall(daemon_->channel(), absl::StrCat(kMethod, "GetRun"), Field1("\xc3"));
  }
  const std::string body = HttpGet(metrics_port_, "/metrics");
  EXPECT_TRUE(absl::StrContains(body,
                                "runreaper_rpcs_total{code=\"INVALID_ARGUMENT\",method=\"runreaper."
                                "v1.Reconciler/GetRun\"} 3"))
      << body;
  EXPECT_FALSE(
      absl::StrContains(body, "code=\"UNIMPLEMENTED\",method=\"runreaper.v1.Reconciler/GetRun\""))
      << body;
}

}  // namespace
}  // namespace runreaper::e2e
