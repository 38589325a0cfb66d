// rdmarpc/impl/method_handler.h: server-side glue between the runtime and
// generated code. Not for direct use.
//
// The runtime looks a call's method up by full name ("/package.Service/Method").
// For a unary method it asks the handler for empty request and response
// messages, parses the request bytes into the first (INTERNAL when they do
// not parse), calls Invoke, and serialises the second as the response when
// Invoke returns OK. For a streaming method it calls InvokeStream with the
// call's stream, on a handler-pool thread, and ends the stream with the
// status it returns. For a callback method (a generated CallbackService's)
// it calls InvokeCallback, which returns the call's reactor; the call ends
// when the reactor finishes (rdmarpc/server_callback.h).
#ifndef RDMARPC_IMPL_METHOD_HANDLER_H_
#define RDMARPC_IMPL_METHOD_HANDLER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/export.h"
#include "rdmarpc/impl/stream_call.h"
#include "rdmarpc/server_callback.h"
#include "rdmarpc/server_context.h"
#include "rdmarpc/sync_stream.h"

namespace rdmarpc {
namespace internal {

class RDMARPC_EXPORT MethodHandler {
 public:
  // `run_inline`: the handler never blocks and runs on the worker thread
  // that received the call ((rdmarpc.method).run_inline); otherwise it runs
  // on the server's handler pool. Honoured for unary methods and for
  // callback methods of any kind (a callback method only makes its reactor;
  // the reactor carries the call); a synchronous streaming handler blocks
  // in Read/Write, so it always runs on the pool.
  // `callback`: a CallbackService's method (InvokeCallback, not Invoke).
  explicit MethodHandler(std::string full_name, bool run_inline = false,
                         RpcKind kind = RpcKind::kUnary, bool callback = false)
      : full_name_(std::move(full_name)),
        run_inline_(run_inline),
        kind_(kind),
        callback_(callback) {}
  virtual ~MethodHandler() = default;

  // "/package.Service/Method".
  const std::string& full_name() const { return full_name_; }
  // True when the handler runs on the worker thread, not the handler pool.
  // Synchronous streaming handlers always run on the pool (they block in
  // Read/Write).
  bool run_inline() const { return run_inline_ && (kind_ == RpcKind::kUnary || callback_); }
  RpcKind kind() const { return kind_; }
  // True for a callback method: InvokeCallback starts it.
  bool callback() const { return callback_; }

  virtual std::unique_ptr<google::protobuf::MessageLite> NewRequest() const = 0;
  virtual std::unique_ptr<google::protobuf::MessageLite> NewResponse() const = 0;
  // Calls the user's method. `request` and `response` come from NewRequest()
  // and NewResponse() of this handler. Runs on a handler-pool thread, or on
  // the worker thread when run_inline().
  // Unary only.
  virtual absl::Status Invoke(ServerContext* context,
                              const google::protobuf::MessageLite& request,
                              google::protobuf::MessageLite* response) const = 0;
  // Streaming only: runs the user's method over `stream`; the stream ends
  // with the returned status.
  virtual absl::Status InvokeStream(ServerContext* /*context*/, ServerStream* /*stream*/) const {
    return absl::InternalError(absl::StrCat(full_name_, " is not a streaming method"));
  }
  // Callback methods only: calls the user's method, which returns the
  // call's reactor (nullptr: the call finishes UNIMPLEMENTED). `request`
  // (unary, server streaming) and `response` (unary, client streaming) come
  // from NewRequest() / NewResponse() and live until the reactor's OnDone.
  // Runs on a handler-pool thread, or on the worker when run_inline().
  virtual ServerReactorBase* InvokeCallback(CallbackServerContext* /*context*/,
                                            const google::protobuf::MessageLite* /*request*/,
                                            google::protobuf::MessageLite* /*response*/) const {
    return nullptr;
  }

 private:
  std::string full_name_;
  bool run_inline_;
  RpcKind kind_;
  bool callback_;
};

// Base of the callback handlers: Invoke is not theirs.
class RDMARPC_EXPORT CallbackMethodHandler : public MethodHandler {
 public:
  CallbackMethodHandler(std::string full_name, bool run_inline, RpcKind kind)
      : MethodHandler(std::move(full_name), run_inline, kind, /*callback=*/true) {}
  std::unique_ptr<google::protobuf::MessageLite> NewRequest() const override { return nullptr; }
  std::unique_ptr<google::protobuf::MessageLite> NewResponse() const override { return nullptr; }
  absl::Status Invoke(ServerContext*, const google::protobuf::MessageLite&,
                      google::protobuf::MessageLite*) const override {
    return absl::InternalError(absl::StrCat(full_name(), " is a callback method"));
  }
};

// Callback rpc M(Req) returns (Resp):
// `ServerUnaryReactor* (ServiceT::*)(CallbackServerContext*, const Req*, Resp*)`.
template <class ServiceT, class Req, class Resp>
class CallbackUnaryMethodHandler final : public CallbackMethodHandler {
 public:
  using Method = ServerUnaryReactor* (ServiceT::*)(CallbackServerContext*, const Req*, Resp*);
  CallbackUnaryMethodHandler(std::string full_name, ServiceT* service, Method method,
                             bool run_inline = false)
      : CallbackMethodHandler(std::move(full_name), run_inline, RpcKind::kUnary),
        service_(service),
        method_(method) {}
  std::unique_ptr<google::protobuf::MessageLite> NewRequest() const override {
    return std::make_unique<Req>();
  }
  std::unique_ptr<google::protobuf::MessageLite> NewResponse() const override {
    return std::make_unique<Resp>();
  }
  ServerReactorBase* InvokeCallback(CallbackServerContext* context,
                                    const google::protobuf::MessageLite* request,
                                    google::protobuf::MessageLite* response) const override {
    return (service_->*method_)(context, static_cast<const Req*>(request),
                                static_cast<Resp*>(response));
  }

 private:
  ServiceT* service_;
  Method method_;
};

// Callback rpc M(Req) returns (stream Resp):
// `ServerWriteReactor<Resp>* (ServiceT::*)(CallbackServerContext*, const Req*)`.
template <class ServiceT, class Req, class Resp>
class CallbackServerStreamingMethodHandler final : public CallbackMethodHandler {
 public:
  using Method = ServerWriteReactor<Resp>* (ServiceT::*)(CallbackServerContext*, const Req*);
  // `run_inline`: the method (which only makes the reactor) runs on the
  // worker. Generated code passes false (the IDL option is for unary
  // methods); services/health's Watch passes true.
  CallbackServerStreamingMethodHandler(std::string full_name, ServiceT* service, Method method,
                                       bool run_inline = false)
      : CallbackMethodHandler(std::move(full_name), run_inline, RpcKind::kServerStreaming),
        service_(service),
        method_(method) {}
  std::unique_ptr<google::protobuf::MessageLite> NewRequest() const override {
    return std::make_unique<Req>();
  }
  ServerReactorBase* InvokeCallback(CallbackServerContext* context,
                                    const google::protobuf::MessageLite* request,
                                    google::protobuf::MessageLite* /*response*/) const override {
    return (service_->*method_)(context, static_cast<const Req*>(request));
  }

 private:
  ServiceT* service_;
  Method method_;
};

// Callback rpc M(stream Req) returns (Resp):
// `ServerReadReactor<Req>* (ServiceT::*)(CallbackServerContext*, Resp*)`.
template <class ServiceT, class Req, class Resp>
class CallbackClientStreamingMethodHandler final : public CallbackMethodHandler {
 public:
  using Method = ServerReadReactor<Req>* (ServiceT::*)(CallbackServerContext*, Resp*);
  CallbackClientStreamingMethodHandler(std::string full_name, ServiceT* service, Method method)
      : CallbackMethodHandler(std::move(full_name), /*run_inline=*/false,
                              RpcKind::kClientStreaming),
        service_(service),
        method_(method) {}
  std::unique_ptr<google::protobuf::MessageLite> NewResponse() const override {
    return std::make_unique<Resp>();
  }
  ServerReactorBase* InvokeCallback(CallbackServerContext* context,
                                    const google::protobuf::MessageLite* /*request*/,
                                    google::protobuf::MessageLite* response) const override {
    return (service_->*method_)(context, static_cast<Resp*>(response));
  }

 private:
  ServiceT* service_;
  Method method_;
};

// Callback rpc M(stream Req) returns (stream Resp):
// `ServerBidiReactor<Req, Resp>* (ServiceT::*)(CallbackServerContext*)`.
template <class ServiceT, class Req, class Resp>
class CallbackBidiStreamingMethodHandler final : public CallbackMethodHandler {
 public:
  using Method = ServerBidiReactor<Req, Resp>* (ServiceT::*)(CallbackServerContext*);
  // `run_inline`: the method (which only makes the reactor) runs on the
  // worker. Generated code passes false; services/reflection passes true.
  CallbackBidiStreamingMethodHandler(std::string full_name, ServiceT* service, Method method,
                                     bool run_inline = false)
      : CallbackMethodHandler(std::move(full_name), run_inline, RpcKind::kBidiStreaming),
        service_(service),
        method_(method) {}
  ServerReactorBase* InvokeCallback(CallbackServerContext* context,
                                    const google::protobuf::MessageLite* /*request*/,
                                    google::protobuf::MessageLite* /*response*/) const override {
    return (service_->*method_)(context);
  }

 private:
  ServiceT* service_;
  Method method_;
};

// Base of the streaming handlers: they have no unary request or response.
class RDMARPC_EXPORT StreamMethodHandler : public MethodHandler {
 public:
  StreamMethodHandler(std::string full_name, RpcKind kind)
      : MethodHandler(std::move(full_name), /*run_inline=*/false, kind) {}
  std::unique_ptr<google::protobuf::MessageLite> NewRequest() const override { return nullptr; }
  std::unique_ptr<google::protobuf::MessageLite> NewResponse() const override { return nullptr; }
  absl::Status Invoke(ServerContext*, const google::protobuf::MessageLite&,
                      google::protobuf::MessageLite*) const override {
    return absl::InternalError(absl::StrCat(full_name(), " is a streaming method"));
  }
};

// rpc M(stream Req) returns (Resp):
// `absl::Status (ServiceT::*)(ServerContext*, ServerReader<Req>*, Resp*)`.
// The response is sent when the method returns OK, with the context's
// response attachment.
template <class ServiceT, class Req, class Resp>
class ClientStreamingMethodHandler final : public StreamMethodHandler {
 public:
  using Method = absl::Status (ServiceT::*)(ServerContext*, ServerReader<Req>*, Resp*);
  ClientStreamingMethodHandler(std::string full_name, ServiceT* service, Method method)
      : StreamMethodHandler(std::move(full_name), RpcKind::kClientStreaming),
        service_(service),
        method_(method) {}
  absl::Status InvokeStream(ServerContext* context, ServerStream* stream) const override {
    ServerReader<Req> reader(stream);
    Resp response;
    absl::Status status = (service_->*method_)(context, &reader, &response);
    if (status.ok() && !stream->Write(response, context->response_attachment())) {
      return absl::CancelledError(absl::StrCat(full_name(), " was cancelled"));
    }
    return status;
  }

 private:
  ServiceT* service_;
  Method method_;
};

// rpc M(Req) returns (stream Resp):
// `absl::Status (ServiceT::*)(ServerContext*, const Req&, ServerWriter<Resp>*)`.
template <class ServiceT, class Req, class Resp>
class ServerStreamingMethodHandler final : public StreamMethodHandler {
 public:
  using Method = absl::Status (ServiceT::*)(ServerContext*, const Req&, ServerWriter<Resp>*);
  ServerStreamingMethodHandler(std::string full_name, ServiceT* service, Method method)
      : StreamMethodHandler(std::move(full_name), RpcKind::kServerStreaming),
        service_(service),
        method_(method) {}
  absl::Status InvokeStream(ServerContext* context, ServerStream* stream) const override {
    Req request;
    if (!stream->Read(&request)) {
      return context->IsCancelled()
                 ? absl::CancelledError(absl::StrCat(full_name(), " was cancelled"))
                 : absl::InternalError(
                       absl::StrCat(full_name(), ": the client sent no request message"));
    }
    ServerWriter<Resp> writer(stream);
    return (service_->*method_)(context, request, &writer);
  }

 private:
  ServiceT* service_;
  Method method_;
};

// rpc M(stream Req) returns (stream Resp):
// `absl::Status (ServiceT::*)(ServerContext*, ServerReaderWriter<Resp, Req>*)`.
template <class ServiceT, class Req, class Resp>
class BidiStreamingMethodHandler final : public StreamMethodHandler {
 public:
  using Method = absl::Status (ServiceT::*)(ServerContext*, ServerReaderWriter<Resp, Req>*);
  BidiStreamingMethodHandler(std::string full_name, ServiceT* service, Method method)
      : StreamMethodHandler(std::move(full_name), RpcKind::kBidiStreaming),
        service_(service),
        method_(method) {}
  absl::Status InvokeStream(ServerContext* context, ServerStream* stream) const override {
    ServerReaderWriter<Resp, Req> rw(stream);
    return (service_->*method_)(context, &rw);
  }

 private:
  ServiceT* service_;
  Method method_;
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
