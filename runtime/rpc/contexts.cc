// contexts.cc: ClientContext and ServerContext — cancellation, and calls made
// on behalf of a server call.
//
// TryCancel and the call's own end race; one atomic decides who delivers the
// end (ClientContext::CancelState): TryCancel moves kBound to kCancelRequested
// and asks the call's canceller to end it CANCELLED; a call that ends on its
// own moves kBound back to kIdle. Whoever loses does nothing, so the call
// ends exactly once and no thread touches a call that already ended.
#include "absl/functional/any_invocable.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/server_context.h"
#include "runtime/rpc/context_access.h"

namespace rdmarpc {

ClientContext::~ClientContext() {
  if (parent_ != nullptr && parent_callback_ != 0) {
    internal::ServerContextAccess::RemoveOnCancelCallback(*parent_, parent_callback_);
  }
}

std::unique_ptr<ClientContext> ClientContext::FromServerContext(
    const ServerContext& server_context) {
  auto ctx = std::make_unique<ClientContext>();
  ctx->set_deadline(server_context.deadline());
  ctx->parent_ = &server_context;
  ClientContext* raw = ctx.get();
  ctx->parent_callback_ = internal::ServerContextAccess::AddRemovableOnCancelCallback(
      server_context, [raw] { raw->TryCancel(); });
  if (ctx->parent_callback_ == 0) ctx->TryCancel();  // the parent is cancelled already
  return ctx;
}

void ClientContext::TryCancel() {
  int state = cancel_state_.load(std::memory_order_acquire);
  while (true) {
    if (state == kBound) {
      if (cancel_state_.compare_exchange_weak(state, kCancelRequested,
                                              std::memory_order_acq_rel)) {
        // The call cannot end meanwhile (its Unbind fails now), so
        // canceller_ stays valid until RequestCancel has ended it.
        canceller_->RequestCancel();
        return;
      }
    } else if (state == kIdle) {
      if (cancel_state_.compare_exchange_weak(state, kCancelledEarly,
                                              std::memory_order_acq_rel)) {
        return;
      }
    } else {
      return;  // already cancelled
    }
  }
}

const std::string& ServerContext::EmptyString() {
  static const std::string* const empty = new std::string();
  return *empty;
}

void ServerContext::AddOnCancelCallback(absl::AnyInvocable<void() &&> callback) {
  {
    absl::MutexLock lock(&mu_);
    if (!IsCancelled()) {
      on_cancel_.emplace_back(next_callback_id_++, std::move(callback));
      return;
    }
  }
  std::move(callback)();
}

uint64_t ServerContext::AddRemovableOnCancelCallback(absl::AnyInvocable<void() &&> callback) {
  absl::MutexLock lock(&mu_);
  if (IsCancelled()) return 0;
  const uint64_t id = next_callback_id_++;
  on_cancel_.emplace_back(id, std::move(callback));
  return id;
}

void ServerContext::RemoveOnCancelCallback(uint64_t id) {
  absl::MutexLock lock(&mu_);
  for (auto it = on_cancel_.begin(); it != on_cancel_.end(); ++it) {
    if (it->first == id) {
      on_cancel_.erase(it);
      return;
    }
  }
  // Taken by Cancel: it may be running right now; the caller frees what the
  // callback touches once this returns.
  mu_.Await(absl::Condition(
      +[](bool* running) { return !*running; }, &callbacks_running_));
}

bool ServerContext::Cancel() {
  std::vector<std::pair<uint64_t, absl::AnyInvocable<void() &&>>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.exchange(true, std::memory_order_acq_rel)) return false;
    callbacks.swap(on_cancel_);
    callbacks_running_ = true;
  }
  for (auto& [id, cb] : callbacks) std::move(cb)();
  absl::MutexLock lock(&mu_);
  callbacks_running_ = false;
  return true;
}

}  // namespace rdmarpc
