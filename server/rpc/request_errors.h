// A request that cannot be parsed answers INVALID_ARGUMENT with a message,
// not gRPC's UNIMPLEMENTED with an empty one (docs/SECURITY.md "Requests").
//
// gRPC 1.51's callback handlers (CallbackUnaryHandler::RunHandler, and the
// server-streaming handler alike) run our handler only when the request was
// deserialised; otherwise they finish the call with UNIMPLEMENTED and "".
// A proto3 `string` field holding invalid UTF-8 makes protobuf's parse fail
// (and protobuf logs "String field '<full name>' contains invalid UTF-8 data
// when parsing ..." through its log handler). So, at the registration layer,
// without touching a handler:
//
//   - InstallProtobufLogHandler routes protobuf's log lines to base/log.h
//     (escaped, one line each) except the UTF-8 parse error, which it keeps
//     (per thread) for the interceptor instead of printing: the client gets
//     it as the answer.
//   - RequestErrorInterceptorFactory's interceptor sees, at
//     POST_RECV_MESSAGE on the thread that just parsed, that no message came
//     out, and at PRE_SEND_STATUS replaces the UNIMPLEMENTED that follows with
//     INVALID_ARGUMENT naming the field ("run_id: not valid UTF-8 ...") or,
//     for bytes that are no message at all, "request is not a valid
//     runreaper.v1.GetRunRequest message".
//
// The same interceptor tells the daemon's health of every answer that is
// RESOURCE_EXHAUSTED for lack of descriptors (server/self/descriptors.h).
//
// The interceptor must be the first in the server's list, so that the
// interceptors after it (the RPC metrics) see the rewritten status.
#ifndef RUNREAPER_SERVER_RPC_REQUEST_ERRORS_H_
#define RUNREAPER_SERVER_RPC_REQUEST_ERRORS_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"

namespace runreaper::server {

// Installs the protobuf log handler (process-wide; idempotent).
void InstallProtobufLogHandler();

// The message for a request of gRPC method `method` ("/pkg.Service/Name")
// that did not parse, given `utf8_field`, the full name protobuf reported
// for a string field with invalid UTF-8 ("" when none): names the field
// relative to the request type when it belongs to it (a map's key or value
// as "labels (key)"), else says what is known. Pure (descriptor lookups).
std::string DescribeParseFailure(absl::string_view method, absl::string_view utf8_field);

class RequestErrorInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `on_out_of_descriptors` (may be empty) is called with the method's path
  // for every answer for which IsOutOfDescriptors holds.
  explicit RequestErrorInterceptorFactory(
      std::function<void(absl::string_view method)> on_out_of_descriptors = nullptr)
      : on_out_of_descriptors_(std::move(on_out_of_descriptors)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  std::function<void(absl::string_view method)> on_out_of_descriptors_;
};

}  // namespace runreaper::server

#endif  // RUNREAPER_SERVER_RPC_REQUEST_ERRORS_H_
