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
  // `run_inline`: the handler never blocks and runs on the worker thread
  // that received the call ((rdmarpc.method).run_inline); otherwise it runs
  // on the server's handler pool.
  explicit MethodHandler(std::string full_name, bool run_inline = false)
      : full_name_(std::move(full_name)), run_inline_(run_inline) {}
  virtual ~MethodHandler() = default;

  // "/package.Service/Method".
  const std::string& full_name() const { return full_name_; }
  // True when the handler runs on the worker thread, not the handler pool.
  bool run_inline() const { return run_inline_; }

  virtual std::unique_ptr<google::protobuf::MessageLite> NewRequest() const = 0;
  virtual std::unique_ptr<google::protobuf::MessageLite> NewResponse() const = 0;
  // Calls the user's method. `request` and `response` come from NewRequest()
  // and NewResponse() of this handler. Runs on a handler-pool thread, or on
  // the worker thread when run_inline().
  virtual absl::Status Invoke(ServerContext* context,
                              const google::protobuf::MessageLite& request,
                              google::protobuf::MessageLite* response) const = 0;

 private:
  std::string full_name_;
  bool run_inline_;
};

// A unary RPC: `absl::Status (ServiceT::*)(ServerContext*, const Req&, Resp*)`.
template <class ServiceT, class Req, class Resp>
class UnaryMethodHandler final : public MethodHandler {
 public:
  using Method = absl::Status (ServiceT::*)(ServerContext*, const Req&, Resp*);
  UnaryMethodHandler(std::string full_name, ServiceT* service, Method method,
                     bool run_inline = false)
      : MethodHandler(std::move(full_name), run_inline), service_(service), method_(method) {}

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
