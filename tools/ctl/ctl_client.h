// runreaperctl's connection to runreaperd: the channel (unix socket or TCP
// target), the bearer token sent on every call, and the per-call deadline.
#ifndef RUNREAPER_TOOLS_CTL_CTL_CLIENT_H_
#define RUNREAPER_TOOLS_CTL_CTL_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "runreaper/v1/runreaper.grpc.pb.h"
#include "tools/ctl/ctl_args.h"

namespace runreaper::tools {

// The flags --target (a gRPC target) or --socket (default
// ./var/runreaper.sock), --json and the per-call deadline. Connect() once,
// after LoadToken when there is a token; then Context() for each call.
class Client {
 public:
  Client(const ParsedArgs& args, absl::Duration rpc_timeout);

  // Connects (after LoadToken, when there is a token). The channel sends
  // "authorization: Bearer <token>" on every call, also on the calls that
  // ExecRun makes with its own contexts.
  void Connect();

  // Reads the token (a line, at most 64 KiB, surrounding whitespace
  // dropped). An error names the file; an empty token is INVALID_ARGUMENT.
  absl::Status LoadToken(const std::string& path);

  // A context with the token and, unless `unbounded`, the RPC deadline.
  std::unique_ptr<grpc::ClientContext> Context(bool unbounded = false);

  const std::string& target() const { return target_; }
  // Whether the target is a unix socket ("unix:" or "unix-abstract:"),
  // where runreaperd knows the caller's uid (SO_PEERCRED); over TCP a
  // caller acts as root with the admin token, or reads only.
  bool unix_socket() const;
  bool json() const { return json_; }
  absl::Duration rpc_timeout() const { return rpc_timeout_; }
  ::runreaper::v1::Reconciler::Stub* stub() { return stub_.get(); }
  grpc::Channel* channel() { return channel_.get(); }

 private:
  bool json_;
  absl::Duration rpc_timeout_;
  std::string target_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<::runreaper::v1::Reconciler::Stub> stub_;
};

}  // namespace runreaper::tools

#endif  // RUNREAPER_TOOLS_CTL_CTL_CLIENT_H_
