// retrying_call.h: a unary call under a retry or hedging policy (gRFC A6).
//
// The call owns its serialised request and makes attempts, each an ordinary
// ClientCall with a context of its own, all started on one loop of the
// channel (the call's home loop), which runs every decision:
//  - retryPolicy: the next attempt after a failure whose code the policy
//    lists, when the server sent no response headers (initial metadata),
//    after a random backoff (or the server's grpc-retry-pushback-ms), while
//    attempts, the deadline and the channel's retry throttle allow;
//  - hedgingPolicy: the next attempt hedging_delay after the previous one,
//    or at once after a non-fatal failure; the first OK or fatal answer wins
//    and the other attempts are cancelled.
// An attempt goes to a server no earlier attempt of the call used, when
// there is one that is not failing. Every attempt after the first carries
// "grpc-previous-rpc-attempts: N" in its metadata, and the winner's count
// shows in the caller's server trailing metadata under the same key. The
// caller's context receives the winning attempt's peer and metadata;
// TryCancel cancels every attempt.
#ifndef RDMARPC_RUNTIME_RPC_RETRYING_CALL_H_
#define RDMARPC_RUNTIME_RPC_RETRYING_CALL_H_

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/client_context.h"
#include "runtime/rpc/call_waiter.h"
#include "runtime/rpc/context_access.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/service_config.h"
#include "runtime/transport/event_loop.h"

namespace rdmarpc {
namespace internal {

class ChannelImpl;
class ConnectionPool;

// Process-wide counts for the metrics page: attempts after the first.
struct RetryCounters {
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> hedges{0};
};
RetryCounters& GetRetryCounters();

class RetryingCall final : public CallCanceller {
 public:
  // Starts the call (any thread but the channel's loops for a blocking
  // caller; any thread for an asynchronous one). `config` has a retry or a
  // hedging policy. `payload` is the serialised request, `metadata` the
  // context's (validated). `context` and `response` must live until `done`
  // runs; `done` runs once, on the thread driving the call's home loop (its
  // engine thread, or a blocking caller leading it).
  static void Start(ChannelImpl* channel, const MethodConfig& config, absl::string_view method,
                    std::string payload, Metadata metadata, ClientContext* context,
                    google::protobuf::MessageLite* response, absl::Time deadline,
                    absl::AnyInvocable<void(absl::Status) &&> done);

  // As Start, for a blocking caller (not on a channel loop) whose `done`
  // notifies `waiter`: when the home loop's poller is free this thread
  // drives the loop until the call ends (as ChannelImpl::RunBlocking), with
  // no thread hop; else the loop thread does. Returns once `waiter` is done.
  static void RunBlocking(ChannelImpl* channel, const MethodConfig& config,
                          absl::string_view method, std::string payload, Metadata metadata,
                          ClientContext* context, google::protobuf::MessageLite* response,
                          absl::Time deadline, CallWaiter* waiter,
                          absl::AnyInvocable<void(absl::Status) &&> done);

  // TryCancel (any thread): posts the cancellation to the home loop.
  void RequestCancel() override;
  // Home loop, the channel being destroyed: no further attempt; the call
  // ends CANCELLED once its attempts (failed by the closing loop) are in.
  void OnChannelClosing();

  // The key of the attempt count (gRFC A6 "Exposed Retry Metadata").
  static constexpr char kPreviousAttemptsKey[] = "grpc-previous-rpc-attempts";
  static constexpr char kPushbackKey[] = "grpc-retry-pushback-ms";

 private:
  struct Attempt {
    int number = 0;  // 0 for the first
    ClientContext context;
    // Hedged attempts run side by side: each parses into its own message.
    std::unique_ptr<google::protobuf::MessageLite> own_response;
    bool done = false;
  };

  static RetryingCall* Make(ChannelImpl* channel, const MethodConfig& config,
                            absl::string_view method, std::string payload, Metadata metadata,
                            ClientContext* context, google::protobuf::MessageLite* response,
                            absl::Time deadline, absl::AnyInvocable<void(absl::Status) &&> done);
  RetryingCall() = default;
  ~RetryingCall() = default;
  void Begin();
  void StartAttempt();
  void OnAttemptDone(Attempt* attempt, absl::Status status);
  void OnCancel();
  // Ends the call with `status`, taking the winner's metadata and (hedged)
  // response from `winner` when there is one; cancels the other attempts.
  void Commit(Attempt* winner, absl::Status status);
  void Deliver(absl::Status status);
  void CancelOthers(const Attempt* except);
  void ScheduleTimer(absl::Time when);
  void CancelPendingTimer();
  bool CanStartMore() const;
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();

  ChannelImpl* channel_ = nullptr;
  EventLoop* home_ = nullptr;
  MethodConfig config_;
  std::string method_;
  std::string payload_;
  Metadata metadata_;
  ClientContext* context_ = nullptr;
  google::protobuf::MessageLite* response_ = nullptr;
  absl::Time deadline_ = absl::InfiniteFuture();
  absl::AnyInvocable<void(absl::Status) &&> done_;

  // Home loop only from Begin on.
  std::list<std::unique_ptr<Attempt>> attempts_;
  std::vector<const ConnectionPool*> used_pools_;
  int started_ = 0;
  int in_flight_ = 0;
  absl::Duration backoff_;        // retry policy: the next delay's bound
  EventLoop::TimerId timer_ = 0;  // the next attempt (backoff or hedge)
  bool no_more_hedges_ = false;
  bool bound_ = false;              // context_ is bound to this call
  bool cancelled_ = false;  // OnCancel ran
  // The end found that TryCancel had won (Unbind failed): only OnCancel,
  // posted already, may deliver now.
  bool cancel_pending_ = false;
  bool closing_ = false;            // the channel is being destroyed
  bool delivered_ = false;          // the caller has its end
  absl::Status last_failure_;       // hedging: the last non-fatal failure
  Attempt* last_failed_ = nullptr;  // and its attempt (kept until the end)
  // 1 until delivered, + attempts in flight, + a pending timer, + a posted
  // OnCancel (taken on TryCancel's thread, hence atomic).
  std::atomic<int> refs_{1};
  std::list<RetryingCall*>::iterator registration_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_RETRYING_CALL_H_
