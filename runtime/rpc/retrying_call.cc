// retrying_call.cc: see retrying_call.h.
#include "runtime/rpc/retrying_call.h"

#include <algorithm>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/rpc/channel_impl.h"

namespace rdmarpc {
namespace internal {

namespace {

// The server's pushback (gRFC A6 "Pushback"): nullopt when it sent none;
// a negative value (also for a value that does not parse) means "do not
// retry", else the delay in milliseconds.
std::optional<int64_t> Pushback(const ClientContext& context) {
  const auto& trailing = context.GetServerTrailingMetadata();
  auto it = trailing.find(RetryingCall::kPushbackKey);
  if (it == trailing.end()) return std::nullopt;
  int32_t ms = 0;
  if (!absl::SimpleAtoi(it->second, &ms) || ms < 0) return -1;
  return ms;
}

}  // namespace

RetryCounters& GetRetryCounters() {
  static RetryCounters* const counters = new RetryCounters;
  return *counters;
}

void RetryingCall::Start(ChannelImpl* channel, const MethodConfig& config, absl::string_view method,
                         std::string payload, Metadata metadata, ClientContext* context,
                         google::protobuf::MessageLite* response, absl::Time deadline,
                         absl::AnyInvocable<void(absl::Status) &&> done) {
  RetryingCall* call = Make(channel, config, method, std::move(payload), std::move(metadata),
                            context, response, deadline, std::move(done));
  call->home_->Post([call] { call->Begin(); });
}

void RetryingCall::RunBlocking(ChannelImpl* channel, const MethodConfig& config,
                               absl::string_view method, std::string payload, Metadata metadata,
                               ClientContext* context, google::protobuf::MessageLite* response,
                               absl::Time deadline, CallWaiter* waiter,
                               absl::AnyInvocable<void(absl::Status) &&> done) {
  RetryingCall* call = Make(channel, config, method, std::move(payload), std::move(metadata),
                            context, response, deadline, std::move(done));
  EventLoop* home = call->home_;
  if (home->TryLead()) {
    call->Begin();  // may end it: the last touch of `call` here
    if (home->LeadUntil([waiter] { return waiter->done(); })) return;
  } else {
    home->Post([call] { call->Begin(); });
  }
  waiter->Wait();
}

RetryingCall* RetryingCall::Make(ChannelImpl* channel, const MethodConfig& config,
                                 absl::string_view method, std::string payload, Metadata metadata,
                                 ClientContext* context, google::protobuf::MessageLite* response,
                                 absl::Time deadline,
                                 absl::AnyInvocable<void(absl::Status) &&> done) {
  auto* call = new RetryingCall;
  call->channel_ = channel;
  call->config_ = config;
  call->method_ = std::string(method);
  call->payload_ = std::move(payload);
  call->metadata_ = std::move(metadata);
  call->context_ = context;
  call->response_ = response;
  call->deadline_ = deadline;
  call->done_ = std::move(done);
  if (config.retry.has_value()) call->backoff_ = config.retry->initial_backoff;
  call->home_ = channel->PickHomeLoop();
  return call;
}

void RetryingCall::Begin() {
  Ref();
  registration_ = channel_->RegisterRetrying(home_, this);
  if (!ClientContextAccess::Bind(context_, this)) {
    ClientContextAccess::FinishCancel(context_);
    Deliver(absl::CancelledError(
        absl::StrCat(method_, " was cancelled (ClientContext::TryCancel) before it was sent")));
  } else {
    bound_ = true;
    StartAttempt();
  }
  Unref();
}

bool RetryingCall::CanStartMore() const {
  const int max =
      config_.retry.has_value() ? config_.retry->max_attempts : config_.hedging->max_attempts;
  if (delivered_ || cancelled_ || cancel_pending_ || closing_ || started_ >= max) return false;
  if (channel_->destroying() || absl::Now() >= deadline_) return false;
  if (config_.hedging.has_value() && no_more_hedges_) return false;
  // The first attempt always goes; later ones only while the throttle
  // lets them.
  RetryThrottle* throttle = channel_->throttle();
  return started_ == 0 || throttle == nullptr || throttle->RetryAllowed();
}

void RetryingCall::StartAttempt() {
  if (absl::Now() >= deadline_) {
    Commit(nullptr, absl::DeadlineExceededError(absl::StrCat(
                        method_, " exceeded its deadline after ", started_, " attempt",
                        started_ == 1 ? "" : "s",
                        last_failure_.ok()
                            ? ""
                            : absl::StrCat("; the last one failed: ", last_failure_.ToString()))));
    return;
  }
  attempts_.push_back(std::make_unique<Attempt>());
  Attempt* a = attempts_.back().get();
  a->number = started_++;
  if (a->number > 0) {
    (config_.hedging.has_value() ? GetRetryCounters().hedges : GetRetryCounters().retries)
        .fetch_add(1, std::memory_order_relaxed);
  }
  auto* call = new ClientCall;
  call->method_storage = method_;
  call->method = call->method_storage;
  call->payload = payload_;
  if (a->number == 0) {
    if (!metadata_.empty()) call->meta = EncodeMetadata(metadata_);
  } else {
    Metadata md = metadata_;
    md.emplace(kPreviousAttemptsKey, absl::StrCat(a->number));
    call->meta = EncodeMetadata(md);
  }
  call->deadline = deadline_;
  call->max_metadata_bytes = channel_->options().max_metadata_bytes;
  if (config_.hedging.has_value()) {
    a->own_response.reset(response_->New());
    call->response = a->own_response.get();
  } else {
    call->response = response_;
  }
  // Each attempt sends the caller's attachment (a shared handle: no copy).
  a->context.set_request_attachment(context_->request_attachment());
  call->context = &a->context;
  call->done = [this, a](absl::Status status) mutable {
    if (home_->InLoopThread()) {
      OnAttemptDone(a, std::move(status));
    } else {
      home_->Post(
          [this, a, status = std::move(status)]() mutable { OnAttemptDone(a, std::move(status)); });
    }
  };
  const ChannelImpl::Route route = channel_->PickAttemptRoute(home_, used_pools_);
  if (route.pool != nullptr) used_pools_.push_back(route.pool);
  ++in_flight_;
  Ref();  // the attempt's
  if (config_.hedging.has_value() && CanStartMore()) {
    ScheduleTimer(absl::Now() + config_.hedging->hedging_delay);
  }
  // May end the attempt (and run OnAttemptDone) before returning.
  channel_->StartAttempt(call, route, home_);
}

void RetryingCall::ScheduleTimer(absl::Time when) {
  CancelPendingTimer();
  Ref();
  timer_ = home_->AddTimer(std::min(when, deadline_), [this] {
    timer_ = 0;
    if (!delivered_ && !cancelled_ && !cancel_pending_) {
      if (CanStartMore()) {
        StartAttempt();
      } else if (in_flight_ == 0) {
        // Waited out a backoff, and the deadline (or the throttle) says no
        // more: the last failure stands.
        if (absl::Now() >= deadline_) {
          StartAttempt();  // ends DEADLINE_EXCEEDED, naming the last failure
        } else {
          Commit(last_failed_, last_failure_);
        }
      } else {
        no_more_hedges_ = true;
      }
    }
    Unref();
  });
}

void RetryingCall::CancelPendingTimer() {
  if (timer_ == 0) return;
  home_->CancelTimer(std::exchange(timer_, 0));
  Unref();
}

void RetryingCall::OnAttemptDone(Attempt* a, absl::Status status) {
  Ref();
  --in_flight_;
  a->done = true;
  if (delivered_ || (cancel_pending_ && !cancelled_)) {
    // A loser after the winner, an attempt the caller cancelled, or one
    // ending before the posted OnCancel runs (it delivers).
  } else if (cancelled_) {
    if (in_flight_ == 0) {
      Deliver(
          absl::CancelledError(absl::StrCat(method_, " was cancelled (ClientContext::TryCancel)")));
    }
  } else {
    const bool headers = !a->context.GetServerInitialMetadata().empty();
    const std::optional<int64_t> pushback = Pushback(a->context);
    const bool pushback_stop = pushback.has_value() && *pushback < 0;
    RetryThrottle* throttle = channel_->throttle();
    if (status.ok()) {
      if (throttle != nullptr) throttle->RecordSuccess();
      Commit(a, std::move(status));
    } else if (config_.retry.has_value()) {
      // The throttle counts every retryable code and every "do not retry"
      // (gRFC A6), whether or not this call may retry.
      const bool retryable_code = Contains(config_.retry->retryable_codes, status.code());
      if ((retryable_code || pushback_stop) && throttle != nullptr) throttle->RecordFailure();
      const bool retryable = retryable_code && !headers;
      last_failure_ = status;
      last_failed_ = a;
      if (!retryable || pushback_stop || !CanStartMore()) {
        Commit(a, std::move(status));
      } else {
        absl::Duration delay;
        if (pushback.has_value()) {
          delay = absl::Milliseconds(*pushback);
          backoff_ = config_.retry->initial_backoff;
        } else {
          thread_local absl::InsecureBitGen gen;
          delay = absl::Nanoseconds(
              absl::Uniform<double>(gen, 0.0, absl::ToDoubleNanoseconds(backoff_)));
          backoff_ =
              std::min(config_.retry->max_backoff, backoff_ * config_.retry->backoff_multiplier);
        }
        ScheduleTimer(absl::Now() + delay);
      }
    } else {
      const bool non_fatal_code = Contains(config_.hedging->non_fatal_codes, status.code());
      if ((non_fatal_code || pushback_stop) && throttle != nullptr) throttle->RecordFailure();
      if (!non_fatal_code || headers) {
        Commit(a, std::move(status));
      } else {
        last_failure_ = status;
        last_failed_ = a;
        if (pushback_stop) {
          no_more_hedges_ = true;
          CancelPendingTimer();
        }
        if (CanStartMore()) {
          // The next hedge goes now (or after the server's pushback), not
          // after the rest of its delay.
          ScheduleTimer(absl::Now() + absl::Milliseconds(pushback.value_or(0)));
        } else if (in_flight_ == 0) {
          CancelPendingTimer();
          Commit(a, std::move(status));
        }
      }
    }
  }
  Unref();  // the attempt's
  Unref();
}

void RetryingCall::Commit(Attempt* winner, absl::Status status) {
  CancelPendingTimer();
  CancelOthers(winner);
  if (winner != nullptr) {
    ClientContextAccess::SetPeer(context_, winner->context.peer());
    *ClientContextAccess::ServerInitialMetadata(context_) =
        winner->context.GetServerInitialMetadata();
    auto* trailing = ClientContextAccess::ServerTrailingMetadata(context_);
    *trailing = winner->context.GetServerTrailingMetadata();
    if (winner->number > 0) trailing->emplace(kPreviousAttemptsKey, absl::StrCat(winner->number));
    if (status.ok() && winner->own_response != nullptr) {
      response_->Clear();
      response_->CheckTypeAndMergeFrom(*winner->own_response);
    }
  }
  if (bound_ && !ClientContextAccess::Unbind(context_)) {
    // TryCancel won: OnCancel (posted) delivers CANCELLED, and nothing else
    // may end the call meanwhile.
    bound_ = false;
    cancel_pending_ = true;
    return;
  }
  bound_ = false;
  // Only a call delivered OK (not one TryCancel took over) gets the winning
  // attempt's attachment.
  if (winner != nullptr && status.ok()) {
    ClientContextAccess::SetResponseAttachment(context_, winner->context.response_attachment());
  }
  Deliver(std::move(status));
}

void RetryingCall::CancelOthers(const Attempt* except) {
  for (const auto& a : attempts_) {
    if (a.get() != except && !a->done) a->context.TryCancel();
  }
}

void RetryingCall::Deliver(absl::Status status) {
  if (delivered_) return;
  delivered_ = true;
  CancelPendingTimer();
  channel_->UnregisterRetrying(home_, registration_);
  auto done = std::move(done_);
  std::move(done)(std::move(status));  // the caller may free context_ and response_ now
  Unref();                             // the undelivered call's
}

void RetryingCall::RequestCancel() {
  Ref();  // OnCancel's
  home_->Post([this] { OnCancel(); });
}

void RetryingCall::OnCancel() {
  // Holds RequestCancel's reference.
  cancelled_ = true;
  bound_ = false;
  ClientContextAccess::FinishCancel(context_);
  CancelPendingTimer();
  CancelOthers(nullptr);
  // Hedged attempts parse into responses of their own, so the caller may
  // have its end at once; a retry's attempt writes the caller's response,
  // so that one is waited for (its cancellation is on its way).
  if (in_flight_ == 0 || config_.hedging.has_value()) {
    Deliver(
        absl::CancelledError(absl::StrCat(method_, " was cancelled (ClientContext::TryCancel)")));
  }
  Unref();
}

void RetryingCall::OnChannelClosing() {
  Ref();
  closing_ = true;
  CancelPendingTimer();
  if (!delivered_ && !cancelled_ && !cancel_pending_ && in_flight_ == 0) {
    Commit(nullptr,
           absl::CancelledError(absl::StrCat("channel to ", channel_->target(), " destroyed")));
  }
  Unref();
}

void RetryingCall::Unref() {
  if (--refs_ == 0) delete this;
}

}  // namespace internal
}  // namespace rdmarpc
