// interceptor_chain.cc: see interceptor_chain.h; also the public parts of
// rdmarpc/interceptor.h that are not inline.
#include "runtime/rpc/interceptor_chain.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/server_context.h"

namespace rdmarpc {

namespace experimental {

void InterceptorBatchMethods::Fail(absl::Status status) {
  if (status.ok()) {
    status = absl::InternalError(absl::StrCat(
        "an interceptor failed the call with an OK status at hook point ",
        static_cast<int>(hook_)));
  }
  failed_ = true;
  failure_ = std::move(status);
}

const std::string& ClientRpcInfo::peer() const { return context_->peer(); }
const std::string& ServerRpcInfo::method() const { return context_->method(); }
const std::string& ServerRpcInfo::peer() const { return context_->peer(); }

}  // namespace experimental

namespace internal {

using experimental::InterceptionHookPoints;
using experimental::InterceptorBatchMethods;

experimental::RpcType RpcTypeOf(RpcKind kind) {
  switch (kind) {
    case RpcKind::kUnary:
      return experimental::RpcType::UNARY;
    case RpcKind::kClientStreaming:
      return experimental::RpcType::CLIENT_STREAMING;
    case RpcKind::kServerStreaming:
      return experimental::RpcType::SERVER_STREAMING;
    case RpcKind::kBidiStreaming:
      return experimental::RpcType::BIDI_STREAMING;
  }
  return experimental::RpcType::UNARY;
}

InterceptorChain::~InterceptorChain() = default;

std::unique_ptr<InterceptorChain> InterceptorChain::ForClient(const ClientFactories& factories,
                                                              Channel* channel,
                                                              absl::string_view method,
                                                              RpcKind kind,
                                                              ClientContext* context) {
  std::unique_ptr<InterceptorChain> chain(new InterceptorChain);
  experimental::ClientRpcInfo& info = chain->client_info_;
  info.method_ = std::string(method);
  info.type_ = RpcTypeOf(kind);
  info.channel_ = channel;
  info.context_ = context;
  info.start_time_ = absl::Now();
  for (const auto& factory : factories) {
    experimental::Interceptor* i = factory->CreateClientInterceptor(&info);
    if (i != nullptr) chain->interceptors_.emplace_back(i);
  }
  if (chain->interceptors_.empty()) return nullptr;
  chain->entered_ = chain->interceptors_.size();
  return chain;
}

std::unique_ptr<InterceptorChain> InterceptorChain::ForServer(const ServerFactories& factories,
                                                              RpcKind kind,
                                                              ServerContext* context) {
  std::unique_ptr<InterceptorChain> chain(new InterceptorChain);
  experimental::ServerRpcInfo& info = chain->server_info_;
  info.type_ = RpcTypeOf(kind);
  info.context_ = context;
  info.start_time_ = absl::Now();
  for (const auto& factory : factories) {
    experimental::Interceptor* i = factory->CreateServerInterceptor(&info);
    if (i != nullptr) chain->interceptors_.emplace_back(i);
  }
  if (chain->interceptors_.empty()) return nullptr;
  chain->entered_ = chain->interceptors_.size();
  return chain;
}

void InterceptorChain::Run(InterceptorBatchMethods* batch, bool forward, absl::Status* failure) {
  const size_t n = entered_;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = forward ? k : n - 1 - k;
    interceptors_[i]->Intercept(batch);
    if (!batch->failed_) continue;
    if (failure != nullptr) {
      entered_ = i + 1;
      *failure = std::move(batch->failure_);
      return;
    }
    LOG(ERROR) << "interceptor " << i << " called Fail at hook point "
               << static_cast<int>(batch->hook_)
               << ", where a call cannot be failed; ignored: " << batch->failure_;
    batch->failed_ = false;
    batch->failure_ = absl::OkStatus();
  }
}

absl::Status InterceptorChain::ClientSendInitialMetadata(Metadata* metadata) {
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::PRE_SEND_INITIAL_METADATA;
  b.send_initial_metadata_ = metadata;
  absl::Status failure;
  Run(&b, /*forward=*/true, &failure);
  return failure;
}

void InterceptorChain::ClientSendMessage(const google::protobuf::MessageLite& message,
                                         size_t size) {
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::PRE_SEND_MESSAGE;
  b.send_message_ = &message;
  b.send_message_size_ = size;
  Run(&b, /*forward=*/true, /*failure=*/nullptr);
}

void InterceptorChain::ClientSendClose() {
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::PRE_SEND_CLOSE;
  Run(&b, /*forward=*/true, /*failure=*/nullptr);
}

void InterceptorChain::ClientRecvInitialMetadata(Metadata* metadata) {
  if (recv_initial_metadata_done_.exchange(true, std::memory_order_acq_rel)) return;
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::POST_RECV_INITIAL_METADATA;
  b.recv_initial_metadata_ = metadata;
  Run(&b, /*forward=*/false, /*failure=*/nullptr);
}

void InterceptorChain::ClientRecvMessage(google::protobuf::MessageLite* message, size_t size) {
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::POST_RECV_MESSAGE;
  b.recv_message_ = message;
  b.recv_message_size_ = size;
  Run(&b, /*forward=*/false, /*failure=*/nullptr);
}

void InterceptorChain::ClientRecvStatus(absl::Status* status, Metadata* trailing) {
  if (status_done_.exchange(true, std::memory_order_acq_rel)) return;
  client_info_.end_time_ = absl::Now();
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::POST_RECV_STATUS;
  b.recv_status_ = status;
  b.recv_trailing_metadata_ = trailing;
  Run(&b, /*forward=*/false, /*failure=*/nullptr);
}

absl::Status InterceptorChain::ServerRecvInitialMetadata(Metadata* metadata) {
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::POST_RECV_INITIAL_METADATA;
  b.recv_initial_metadata_ = metadata;
  absl::Status failure;
  Run(&b, /*forward=*/true, &failure);
  return failure;
}

void InterceptorChain::ServerRecvMessage(google::protobuf::MessageLite* message, size_t size) {
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::POST_RECV_MESSAGE;
  b.recv_message_ = message;
  b.recv_message_size_ = size;
  Run(&b, /*forward=*/true, /*failure=*/nullptr);
}

void InterceptorChain::ServerSendInitialMetadata(Metadata* metadata) {
  if (send_initial_metadata_done_.exchange(true, std::memory_order_acq_rel)) return;
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::PRE_SEND_INITIAL_METADATA;
  b.send_initial_metadata_ = metadata;
  Run(&b, /*forward=*/false, /*failure=*/nullptr);
}

void InterceptorChain::ServerSendMessage(const google::protobuf::MessageLite& message,
                                         size_t size) {
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::PRE_SEND_MESSAGE;
  b.send_message_ = &message;
  b.send_message_size_ = size;
  Run(&b, /*forward=*/false, /*failure=*/nullptr);
}

void InterceptorChain::ServerSendStatus(absl::Status* status, Metadata* trailing) {
  if (status_done_.exchange(true, std::memory_order_acq_rel)) return;
  server_info_.end_time_ = absl::Now();
  InterceptorBatchMethods b;
  b.hook_ = InterceptionHookPoints::PRE_SEND_STATUS;
  b.send_status_ = status;
  b.send_trailing_metadata_ = trailing;
  Run(&b, /*forward=*/false, /*failure=*/nullptr);
}

}  // namespace internal
}  // namespace rdmarpc
