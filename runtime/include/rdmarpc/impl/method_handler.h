// rdmarpc/impl/method_handler.h: server-side glue between the runtime and
// generated code. Not for direct use.
//
// The runtime looks a call's method up by full name ("/package.Service/Method"),
// asks the handler for empty request and response messages, parses the request
// bytes into the first (INTERNAL when they do not parse), calls Invoke, and
// serialises the second as the response when Invoke returns OK.
#ifndef RDMARPC_IMPL_METHOD_HANDLER_H_
#define RDMARPC_IMPL_METHOD_HANDLER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/export.h"
#include "rdmarpc/server_context.h"

namespace rdmarpc {
namespace internal {

class RDMARPC_EXPORT MethodHandler {
 public:
  explicit MethodHandler(std::string full_name) : full_name_(std::move(full_name)) {}
  virtual ~MethodHandler() = default;

  // "/package.Service/Method".
  const std::string& full_name() const { return full_name_; }

  virtual std::unique_ptr<google::protobuf::MessageLite> NewRequest() const = 0;
  virtual std::unique_ptr<google::protobuf::MessageLite> NewResponse() const = 0;
  // Calls the user's method. `request` and `response` come from NewRequest()
  // and NewResponse() of this handler. Runs on a server worker thread.
  virtual absl::Status Invoke(ServerContext* context,
                              const google::protobuf::MessageLite& request,
                              google::protobuf::MessageLite* response) const = 0;

 private:
  std::string full_name_;
};

// A unary RPC: `absl::Status (ServiceT::*)(ServerContext*, const Req&, Resp*)`.
template <class ServiceT, class Req, class Resp>
class UnaryMethodHandler final : public MethodHandler {
 public:
  using Method = absl::Status (ServiceT::*)(ServerContext*, const Req&, Resp*);
  UnaryMethodHandler(std::string full_name, ServiceT* service, Method method)
      : MethodHandler(std::move(full_name)), service_(service), method_(method) {}

  std::unique_ptr<google::protobuf::MessageLite> NewRequest() const override {
    return std::make_unique<Req>();
  }
  std::unique_ptr<google::protobuf::MessageLite> NewResponse() const override {
    return std::make_unique<Resp>();
  }
  absl::Status Invoke(ServerContext* context, const google::protobuf::MessageLite& request,
                      google::protobuf::MessageLite* response) const override {
    return (service_->*method_)(context, static_cast<const Req&>(request),
                                static_cast<Resp*>(response));
  }

 private:
  ServiceT* service_;
  Method method_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_IMPL_METHOD_HANDLER_H_
