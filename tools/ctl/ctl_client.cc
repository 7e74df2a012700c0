#include "tools/ctl/ctl_client.h"

#include <chrono>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "grpcpp/support/client_interceptor.h"

namespace runreaper::tools {
namespace {

// Adds "authorization: Bearer <token>" to every call of the channel (also
// the calls that ExecRun makes with its own contexts).
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::string value) : value_(std::move(value)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", value_});
    }
    methods->Proceed();
  }

 private:
  std::string value_;
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token) : value_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(value_);
  }

 private:
  std::string value_;
};

}  // namespace

Client::Client(const ParsedArgs& args, absl::Duration rpc_timeout)
    : json_(args.Bool("json")), rpc_timeout_(rpc_timeout) {
  if (args.Has("target")) {
    target_ = args.Get("target");
  } else {
    // --socket, else $RUNREAPER_SOCKET (set and not empty), else the default.
    const char* env = std::getenv("RUNREAPER_SOCKET");
    std::string socket = "./var/runreaper.sock";
    if (args.Has("socket")) {
      socket = args.Get("socket");
    } else if (env != nullptr && env[0] != '\0') {
      socket = env;
    }
    target_ = "unix:" + socket;
  }
}

bool Client::unix_socket() const {
  return absl::StartsWith(target_, "unix:") || absl::StartsWith(target_, "unix-abstract:");
}

void Client::Connect() {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!token_.empty()) {
    interceptors.push_back(std::make_unique<TokenInterceptorFactory>(token_));
  }
  channel_ = grpc::experimental::CreateCustomChannelWithInterceptors(
      target_, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(),
      std::move(interceptors));
  stub_ = ::runreaper::v1::Reconciler::NewStub(channel_);
}

absl::Status Client::LoadToken(const std::string& path) {
  // A token is a line; the daemon refuses token files over 64 KiB too.
  absl::StatusOr<std::string> text = base::ReadFileToString(path, 64 * 1024);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("token file: ", text.status().message()));
  }
  token_ = std::string(absl::StripAsciiWhitespace(*text));
  if (token_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  return absl::OkStatus();
}

std::unique_ptr<grpc::ClientContext> Client::Context(bool unbounded) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!unbounded) {
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(rpc_timeout_));
  }
  return ctx;
}

}  // namespace runreaper::tools
