// context_access.h: the runtime's access to ClientContext and ServerContext
// internals (the LevelDB WriteBatchInternal pattern: the public classes expose
// no runtime plumbing, and befriend these classes instead).
#ifndef RDMARPC_RUNTIME_RPC_CONTEXT_ACCESS_H_
#define RDMARPC_RUNTIME_RPC_CONTEXT_ACCESS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/security.h"
#include "rdmarpc/server_context.h"

namespace rdmarpc {
namespace internal {

// What ClientContext::TryCancel asks of the call bound to the context.
class CallCanceller {
 public:
  // Called once, from the thread in TryCancel, after it won the race with the
  // call's end: the call must end with CANCELLED (on its own loop thread),
  // and only through this path (ClientContextAccess::Unbind fails for it).
  virtual void RequestCancel() = 0;

 protected:
  ~CallCanceller() = default;
};

class ClientContextAccess {
 public:
  static void SetPeer(ClientContext* ctx, const std::string& peer) { ctx->peer_ = peer; }
  static void SetResponseAttachment(ClientContext* ctx, Buffer attachment) {
    ctx->response_attachment_ = std::move(attachment);
  }
  static const std::multimap<std::string, std::string>& Metadata(const ClientContext* ctx) {
    return ctx->metadata_;
  }
  // The metadata the call sends, for interceptors (rdmarpc/interceptor.h).
  static std::multimap<std::string, std::string>* MutableMetadata(ClientContext* ctx) {
    return &ctx->metadata_;
  }
  static std::multimap<std::string, std::string>* ServerInitialMetadata(ClientContext* ctx) {
    return &ctx->server_initial_metadata_;
  }
  static std::multimap<std::string, std::string>* ServerTrailingMetadata(ClientContext* ctx) {
    return &ctx->server_trailing_metadata_;
  }
  // Binds a starting call. False when TryCancel ran before: the call must
  // fail CANCELLED without being sent.
  static bool Bind(ClientContext* ctx, CallCanceller* canceller) {
    ctx->canceller_ = canceller;
    int expected = ClientContext::kIdle;
    return ctx->cancel_state_.compare_exchange_strong(expected, ClientContext::kBound,
                                                      std::memory_order_acq_rel);
  }
  // The call ended on its own. False when TryCancel won meanwhile: the call
  // must not deliver its end; RequestCancel is on its way and delivers
  // CANCELLED.
  static bool Unbind(ClientContext* ctx) {
    int expected = ClientContext::kBound;
    return ctx->cancel_state_.compare_exchange_strong(expected, ClientContext::kIdle,
                                                      std::memory_order_acq_rel);
  }
  // The cancel path ends the call: the context is free again.
  static void FinishCancel(ClientContext* ctx) {
    ctx->cancel_state_.store(ClientContext::kIdle, std::memory_order_release);
  }
};

class ServerContextAccess {
 public:
  // `method` and `peer` must outlive the context (no copy per call).
  // `connection_identity`: the connection's AuthContext
  // (Connection::peer_identity), nullptr without one. Its only producer is
  // auth.h's CheckTokenFn, which stores a const AuthContext.
  static void Init(ServerContext* ctx, const std::string* method, const std::string* peer,
                   absl::Time deadline, const std::shared_ptr<const void>& connection_identity) {
    ctx->method_ = method;
    ctx->peer_ = peer;
    ctx->deadline_ = deadline;
    ctx->request_attachment_ = Buffer();
    ctx->response_attachment_ = Buffer();
    if (connection_identity != nullptr) {
      ctx->auth_context_ = std::static_pointer_cast<const AuthContext>(connection_identity);
    }
  }
  // The auth metadata processor's result (auth.cc), before the handler
  // runs.
  static void SetRequestAttachment(ServerContext* ctx, Buffer attachment) {
    ctx->request_attachment_ = std::move(attachment);
  }
  static void SetAuthContext(ServerContext* ctx, std::shared_ptr<const AuthContext> auth) {
    ctx->auth_context_ = std::move(auth);
  }
  static std::multimap<std::string, std::string>* ClientMetadata(ServerContext* ctx) {
    return &ctx->client_metadata_;
  }
  static const std::multimap<std::string, std::string>& InitialMetadata(const ServerContext* ctx) {
    return ctx->initial_metadata_;
  }
  static const std::multimap<std::string, std::string>& TrailingMetadata(
      const ServerContext* ctx) {
    return ctx->trailing_metadata_;
  }
  // The metadata the handler added, for interceptors (rdmarpc/interceptor.h).
  // The context is the call's own (const only where the runtime holds it so).
  static std::multimap<std::string, std::string>* MutableInitialMetadata(
      const ServerContext* ctx) {
    return &const_cast<ServerContext*>(ctx)->initial_metadata_;
  }
  static std::multimap<std::string, std::string>* MutableTrailingMetadata(
      const ServerContext* ctx) {
    return &const_cast<ServerContext*>(ctx)->trailing_metadata_;
  }
  // Marks the call cancelled and runs its on-cancel callbacks on this
  // thread. False when it was cancelled already.
  static bool Cancel(ServerContext* ctx) { return ctx->Cancel(); }
  static uint64_t AddRemovableOnCancelCallback(const ServerContext& ctx,
                                               absl::AnyInvocable<void() &&> callback) {
    return const_cast<ServerContext&>(ctx).AddRemovableOnCancelCallback(std::move(callback));
  }
  static void RemoveOnCancelCallback(const ServerContext& ctx, uint64_t id) {
    const_cast<ServerContext&>(ctx).RemoveOnCancelCallback(id);
  }
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_CONTEXT_ACCESS_H_
