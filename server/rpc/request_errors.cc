#include "server/rpc/request_errors.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/status.h"
#include "server/self/descriptors.h"

namespace runreaper::server {
namespace {

namespace pb = ::google::protobuf;

// What protobuf says (wire_format_lite.cc PrintUTF8ErrorLog) when a parse
// meets a string field with invalid UTF-8.
constexpr absl::string_view kUtf8Prefix = "String field '";
constexpr char kUtf8Parsing[] = "' contains invalid UTF-8 data when parsing";

// The field named by the last such line on this thread, until the
// interceptor of the call being parsed here takes it.
thread_local std::string t_utf8_field;

void ProtobufLog(pb::LogLevel level, const char* filename, int line, const std::string& message) {
  if (absl::StartsWith(message, kUtf8Prefix)) {
    const size_t end = message.find(kUtf8Parsing);
    if (end != std::string::npos) {
      // The call is answered INVALID_ARGUMENT naming the field: no log line
      // per hostile request.
      t_utf8_field = message.substr(kUtf8Prefix.size(), end - kUtf8Prefix.size());
      return;
    }
  }
  const std::string text = absl::StrCat("protobuf: ", message, " (", filename, ":", line, ")");
  switch (level) {
    case pb::LOGLEVEL_INFO:
      base::LogInfo(text);
      return;
    case pb::LOGLEVEL_WARNING:
      base::LogWarning(text);
      return;
    case pb::LOGLEVEL_ERROR:
    case pb::LOGLEVEL_FATAL:
      base::LogError(text);
      return;
  }
  base::LogError(text);
}

const pb::Descriptor* RequestType(absl::string_view method) {
  // "/runreaper.v1.Reconciler/GetRun"
  if (!absl::ConsumePrefix(&method, "/")) return nullptr;
  const size_t slash = method.find('/');
  if (slash == absl::string_view::npos) return nullptr;
  const pb::ServiceDescriptor* service =
      pb::DescriptorPool::generated_pool()->FindServiceByName(std::string(method.substr(0, slash)));
  if (service == nullptr) return nullptr;
  const pb::MethodDescriptor* m = service->FindMethodByName(std::string(method.substr(slash + 1)));
  return m == nullptr ? nullptr : m->input_type();
}

// "run_id" for "<request type>.run_id"; "labels (key)" for
// "<request type>.LabelsEntry.key"; "" when the name is not a field of the
// request.
std::string FieldOf(const pb::Descriptor* request, absl::string_view full) {
  if (request == nullptr || !absl::ConsumePrefix(&full, request->full_name()) ||
      !absl::ConsumePrefix(&full, ".")) {
    return "";
  }
  const size_t dot = full.find('.');
  if (dot == absl::string_view::npos) {
    const pb::FieldDescriptor* f = request->FindFieldByName(std::string(full));
    return f == nullptr ? "" : f->name();
  }
  const pb::Descriptor* entry = request->FindNestedTypeByName(std::string(full.substr(0, dot)));
  if (entry == nullptr || !entry->options().map_entry()) return "";
  const absl::string_view part = full.substr(dot + 1);
  if (part != "key" && part != "value") return "";
  for (int i = 0; i < request->field_count(); ++i) {
    const pb::FieldDescriptor* f = request->field(i);
    if (f->message_type() == entry) return absl::StrCat(f->name(), " (", part, ")");
  }
  return "";
}

class RequestErrorInterceptor : public grpc::experimental::Interceptor {
 public:
  RequestErrorInterceptor(const char* method,
                          const std::function<void(absl::string_view)>* on_out_of_descriptors)
      : method_(method == nullptr ? "" : method), on_out_of_descriptors_(on_out_of_descriptors) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // Runs right after the parse, on its thread: what the log handler kept
      // belongs to this request.
      std::string field = std::move(t_utf8_field);
      t_utf8_field.clear();
      if (methods->GetRecvMessage() == nullptr) {
        unparsed_ = true;
        message_ = DescribeParseFailure(method_, field);
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (unparsed_ && status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        methods->ModifySendStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message_));
      } else if (*on_out_of_descriptors_ &&
                 IsOutOfDescriptors(absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                                 status.error_message()))) {
        (*on_out_of_descriptors_)(method_);
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const std::function<void(absl::string_view)>* on_out_of_descriptors_;
  bool unparsed_ = false;
  std::string message_;
};

}  // namespace

void InstallProtobufLogHandler() { pb::SetLogHandler(&ProtobufLog); }

std::string DescribeParseFailure(absl::string_view method, absl::string_view utf8_field) {
  const pb::Descriptor* request = RequestType(method);
  if (!utf8_field.empty()) {
    const std::string field = FieldOf(request, utf8_field);
    if (!field.empty()) {
      return absl::StrCat(field, ": not valid UTF-8 (a string field must hold UTF-8)");
    }
    return "request is not valid: a string field holds invalid UTF-8";
  }
  if (request == nullptr) return "request could not be parsed";
  return absl::StrCat("request is not a valid ", request->full_name(), " message");
}

grpc::experimental::Interceptor* RequestErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RequestErrorInterceptor(info->method(), &on_out_of_descriptors_);
}

}  // namespace runreaper::server
