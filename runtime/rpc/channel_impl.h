// channel_impl.h: the runtime behind rdmarpc::Channel — loops, the device,
// one ConnectionPool per server address, and client call state.
#ifndef RDMARPC_RUNTIME_RPC_CHANNEL_IMPL_H_
#define RDMARPC_RUNTIME_RPC_CHANNEL_IMPL_H_

#include <algorithm>
#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/resolver.h"
#include "runtime/rpc/call_waiter.h"
#include "runtime/rpc/client_call_cache.h"
#include "runtime/rpc/context_access.h"
#include "runtime/rpc/outlier_detection.h"
#include "runtime/rpc/service_config.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/fork_guard.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/connection_pool.h"
#include "runtime/transport/device.h"

namespace rdmarpc {
namespace internal {

class ChannelImpl;
class RetryingCall;

// One unary call in flight. Touched only by the loop's poller holder
// after Start. Asynchronous: from ClientCallCache (or the heap, `home`
// nullptr), owned by itself once started, given back (or deleted) right
// before `done` runs. Synchronous: on the caller's stack; Finish stores the
// status in `*result` and notifies `waiter` (its last touch).
class ClientCall final : public ResponseSink, public CallCanceller {
 public:
  // The ClientCallCache shard it came from (nullptr: new'd, deleted at the
  // end); its link in that shard's lists is the last member.
  ClientCallCache::Shard* home = nullptr;
  // ChannelImpl::Start's hand-off to the call's loop, in the call's own
  // node (no allocation), to StartOnLoop with the route it picked.
  TaskQueue::Task start_task;
  ConnectionPool* start_pool = nullptr;
  int start_slot = -1;

  absl::string_view method;  // valid while the call lives (see method_storage)
  // The request, one of: `request_message` (synchronous small request,
  // serialised straight into the send buffer when posted), `registered`
  // (serialised into registered memory), `payload` (serialised bytes).
  const google::protobuf::MessageLite* request_message = nullptr;
  size_t request_size = 0;
  PooledBuffer registered;
  size_t registered_len = 0;
  // The response's metadata did not decode or is over the limit.
  absl::Status meta_error;
  size_t max_metadata_bytes = 0;  // ChannelOptions::max_metadata_bytes
  absl::Time deadline = absl::InfiniteFuture();
  google::protobuf::MessageLite* response = nullptr;
  ClientContext* context = nullptr;
  absl::AnyInvocable<void(absl::Status) &&> done;  // asynchronous
  CallWaiter* waiter = nullptr;                    // synchronous
  absl::Status* result = nullptr;                  // synchronous

  // EventLoop-side state.
  ChannelImpl* channel = nullptr;
  EventLoop* loop = nullptr;
  // Waiting on `loop` for the channel's first addresses (ChannelImpl::Park).
  uint64_t park_id = 0;
  Connection* conn = nullptr;
  uint32_t handle = 0;
  EventLoop::TimerId timer = 0;
  const std::string* peer = nullptr;  // the pool's name; outlives the call
  absl::Time started_at;  // when it went to its connection (outlier detection)

  // The context's cancellation is bound (ClientContextAccess::Bind).
  bool bound = false;
  // The call ended while TryCancel was handing it its cancellation: the
  // cancel task delivers the end.
  bool end_deferred = false;

  void OnQueued(uint32_t h) override { handle = h; }
  void OnResponseMetadata(absl::string_view meta) override;
  // Into the context (ClientContext::response_attachment).
  void OnResponseAttachment(Attachment attachment) override;
  void OnSent() override {
    if (context != nullptr) ClientContextAccess::SetPeer(context, *peer);
  }
  void OnResponse(absl::StatusCode code, absl::string_view message,
                  absl::string_view payload) override;
  // Synchronous calls keep a large OK response's buffer and parse it on the
  // caller's thread (ParseDeferredResponse), not on the thread polling the
  // channel: a parse of megabytes would hold up every call it serves.
  void OnResponseInBuffer(absl::StatusCode code, absl::string_view message,
                          absl::string_view payload, PooledBuffer* buffer) override;
  // The caller's thread, after the call ended OK with a deferred response:
  // parses it into `response`; INTERNAL when it does not parse.
  absl::Status ParseDeferredResponse();
  PooledBuffer deferred_response;
  absl::string_view deferred_payload;
  void OnFailure(absl::Status status) override;
  // Never started on a server: sent to another one when it can be
  // (ChannelImpl::RetryElsewhere), else ends with `status`.
  void OnNotSent(absl::Status status, OutgoingRequest request) override;
  void OnRefused(absl::Status status, OutgoingRequest request) override;
  // Where the call went last (its CallStarted is counted there until the
  // call ends or moves), the request bytes it handed the transport, and
  // how often it was sent elsewhere.
  ConnectionPool* pool = nullptr;
  size_t sent_payload_bytes = 0;
  int transparent_retries = 0;
  // TryCancel (any thread): posts OnCancelRequested to the call's loop.
  void RequestCancel() override;
  // Loop thread: retires the call on its connection (the server is told)
  // and ends it CANCELLED.
  void OnCancelRequested();
  // The call's own end (response, failure, deadline): delivered unless
  // TryCancel won the race, then OnCancelRequested delivers CANCELLED.
  void Finish(absl::Status status);
  // Asynchronous: gives this back to ClientCallCache (or deletes it), then
  // runs `done`. Synchronous: stores the status and wakes the caller.
  void Deliver(absl::Status status);

  // Last, together: what ClientCallCache keeps of an ended call (the
  // strings' room, and its link in the cache), left unpoisoned while the
  // rest of a cached call is poisoned.
  std::string method_storage;  // asynchronous calls own their method name
  std::string payload;         // the serialised request (see request_message)
  std::string meta;            // the context's metadata, encoded (runtime/rpc/metadata.h)
  ClientCall* next_free = nullptr;
};

// The runtime's access to Channel's internals (the public class exposes none).
class ChannelAccess {
 public:
  static ChannelImpl* Impl(const Channel* channel) { return channel->impl_.get(); }
};

class ChannelImpl {
 public:
  static absl::StatusOr<std::unique_ptr<ChannelImpl>> Create(absl::string_view target,
                                                             const ChannelOptions& options);
  ~ChannelImpl();  // fails calls in flight with UNAVAILABLE, joins loops

  const std::string& target() const { return target_; }
  const ChannelOptions& options() const { return options_; }
  // Registered large buffers (nullptr until the first connection chose the
  // device). Any thread.
  LargeBufferPool* large_pool() const { return device_->large_pool(); }
  // Any thread: sends `call` to the next server round robin.
  void Start(ClientCall* call);
  // A synchronous call (call->waiter set), from a thread that is not one of
  // this channel's loops: sends it and returns once it finished. When the
  // loop's poller is free (or its thread spins and steps aside) this
  // thread starts the call inline and polls the CQ itself until its
  // response arrives, with no cross-thread wake-up; otherwise it posts the
  // call and sleeps until the thread that polls finishes it.
  void RunBlocking(ClientCall* call);
  // True on one of this channel's loop threads, i.e. inside a completion
  // callback of its calls: a blocking call there would wait for the very
  // thread it blocks.
  // Where a call goes: the next server round robin, and a connection slot
  // of its pool (its loop and the server's name). Any thread. A channel
  // whose resolver has reported no address yet has no server to pick: the
  // route has pool nullptr, the next loop, and the target as peer; the
  // call then waits on that loop (Park).
  struct Route {
    ConnectionPool* pool;
    int slot;
    EventLoop* loop;
    const std::string* peer;  // the pool's name (or the target); outlives every call
  };
  // Any thread: hands `call` to its loop (call->loop, from `r`) to start
  // there, in the call's own task node.
  void PostStart(ClientCall* call, const Route& r);
  Route PickRoute();
  // Loop thread of `loop`: a route whose slot belongs to `loop` (every pool
  // of a resolver's channel has a slot on each loop); pool nullptr when
  // there is still no address.
  Route PickRouteOn(EventLoop* loop);
  // Loop thread of `loop`: runs `resume` on `loop` once the channel has an
  // address (OkStatus: pick again with PickRouteOn), or with UNAVAILABLE
  // when its resolver failed and there is none, or DEADLINE_EXCEEDED at
  // `deadline`, or CANCELLED when the channel is destroyed; at once (before
  // returning 0) when one of those holds already. Otherwise returns an id
  // for Unpark.
  uint64_t Park(EventLoop* loop, absl::Time deadline,
                absl::AnyInvocable<void(absl::Status) &&> resume);
  // Loop thread of `loop`: forgets a parked call without resuming it.
  void Unpark(EventLoop* loop, uint64_t id);
  // The call's loop thread: a call that no server started (its connection
  // failed before sending it, or a draining server refused it) goes to
  // another server, as gRPC's transparent retry, when the request is whole
  // in `request` (or the caller's message), another server is not failing,
  // the deadline has not passed and it was sent elsewhere fewer than
  // kMaxTransparentRetries times. False: the caller ends it.
  bool RetryElsewhere(ClientCall* call, OutgoingRequest& request);
  static constexpr int kMaxTransparentRetries = 3;
  // --- retries and hedging (retrying_call.h) ---
  // The config for `method`: the channel's service config entry, else
  // `idl` (the generated Stub's, from the IDL; may be nullptr). Whether a
  // policy applies (enable_retries, the request's size) is the caller's.
  const MethodConfig* MethodConfigFor(absl::string_view method, const MethodConfig* idl) const {
    if (service_config_ != nullptr) {
      if (const MethodConfig* c = service_config_->Find(method); c != nullptr) return c;
    }
    return idl;
  }
  // The loop a retrying call runs on, in turn. A one-server static
  // target's: among the loops its pool has a slot on (slot i is on loop i
  // mod loops). Otherwise among all (a resolver's pools have a slot on
  // each; a static target's several pools spread over them, so an attempt
  // may hop to its slot's loop). Leaves the servers' round robin alone.
  EventLoop* PickHomeLoop() {
    size_t n = loop_ptrs_.size();
    if (resolver_handler_ == nullptr && static_pools_.size() == 1) {
      n = std::min(n, static_cast<size_t>(options_.pool_size));
    }
    return loop_ptrs_[next_home_.fetch_add(1, std::memory_order_relaxed) % n];
  }
  // Loop thread of `loop`: where an attempt goes: a server not in `avoid`
  // and not failing when there is one (else as PickRoute would choose), a
  // slot on `loop` when the pool has one. pool nullptr: no address yet.
  Route PickAttemptRoute(EventLoop* loop, const std::vector<const ConnectionPool*>& avoid);
  // Loop thread of `home`: starts the attempt `call` on `route` (posted to
  // the route's loop when that is another).
  void StartAttempt(ClientCall* call, const Route& route, EventLoop* home);
  // Loop thread of `loop`: the retrying calls living on it, which the
  // destructor ends (RetryingCall::OnChannelClosing).
  std::list<RetryingCall*>::iterator RegisterRetrying(EventLoop* loop, RetryingCall* call);
  void UnregisterRetrying(EventLoop* loop, std::list<RetryingCall*>::iterator it);
  // The retry throttle of the service config's retryThrottling; nullptr
  // when it sets none.
  RetryThrottle* throttle() const { return throttle_.get(); }
  bool destroying() const { return destroying_.load(std::memory_order_acquire); }
  // Made before a fork() and used in the child (runtime/transport/
  // fork_guard.h): calls fail with InheritedError, and the destructor
  // lets go of nothing. Any thread.
  bool inherited() const { return ForkGeneration() != fork_generation_; }
  absl::Status InheritedError() const {
    return InheritedAcrossFork(absl::StrCat("channel to ", target_), owner_pid_);
  }
  // ChannelOptions::outlier_detection's, when enabled; else nullptr.
  OutlierDetector* outlier_detector() const { return outlier_.get(); }

  bool OnLoopThread() const {
    for (const auto& loop : loops_) {
      if (loop->InLoopThread()) return true;
    }
    return false;
  }

 private:
  class ResolverHandler;
  struct Parked {
    uint64_t id = 0;
    EventLoop::TimerId timer = 0;
    absl::AnyInvocable<void(absl::Status) &&> resume;
  };
  struct Parking {  // one loop's; touched only on that loop's thread
    std::list<Parked> calls;
    uint64_t next_id = 1;
  };

  ChannelImpl(std::string target, const ChannelOptions& options);
  Route PickRoute(ClientCall* call);
  void StartOnLoop(ClientCall* call, ConnectionPool* pool, int slot);
  // The parked call's turn: Unbind, then StartOnLoop on a fresh route.
  void ResumeCall(ClientCall* call, absl::Status status);
  enum class LbPolicy { kRoundRobin, kPickFirst, kLeastRequest };
  ConnectionPool* PickFrom(const std::vector<ConnectionPool*>& pools, uint32_t start) const;
  size_t LoopIndex(EventLoop* loop) const;
  // Loop thread of loop `i`: resumes its parked calls when an address or a
  // resolver error is there; `final` (the channel going away) with
  // CANCELLED.
  void ResumeParked(size_t i, const absl::Status* final);
  // The resolver's reports (ResolverHandler).
  void OnResolvedAddresses(std::vector<std::string> addresses);
  void OnResolverError(absl::Status status);
  void RequestReresolution();
  std::unique_ptr<ConnectionPool> MakePool(const SocketAddress& addr, const std::string& name);

  const std::string target_;
  const uint64_t fork_generation_ = ForkGeneration();
  const int owner_pid_;
  // As given, plus the metrics interceptor first when metrics are on.
  ChannelOptions options_;
  std::shared_ptr<DeviceResources> device_;  // shared with attachments received
  std::vector<std::unique_ptr<EventLoop>> loops_;
  LbPolicy lb_policy_ = LbPolicy::kRoundRobin;
  std::atomic<bool> destroying_{false};
  std::vector<EventLoop*> loop_ptrs_;
  ConnectionOptions connection_options_;
  // Static target: every pool, fixed once Create returned, read without a
  // lock. Resolver: every pool ever made (an address that leaves keeps its
  // retired pool, revived if it comes back), appended under mu_.
  std::vector<std::unique_ptr<ConnectionPool>> pools_;
  std::vector<ConnectionPool*> static_pools_;  // static target: pools_, as pointers
  std::atomic<uint32_t> next_server_{0};
  std::atomic<uint32_t> next_home_{0};
  // Addresses from a resolver (nullptr: a static target).
  std::unique_ptr<ResolverHandler> resolver_handler_;
  std::unique_ptr<Resolver> resolver_;
  absl::Mutex mu_;
  // The current list's pools, in the order reported.
  std::vector<ConnectionPool*> active_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ConnectionPool*> pool_by_name_ ABSL_GUARDED_BY(mu_);
  // The resolver's last error while there was no address; OK otherwise.
  absl::Status resolver_error_ ABSL_GUARDED_BY(mu_);
  std::vector<Parking> parking_;  // by loop index
  // ChannelOptions::service_config_json, parsed (nullptr when empty).
  std::shared_ptr<const ServiceConfig> service_config_;
  std::unique_ptr<RetryThrottle> throttle_;
  std::vector<std::list<RetryingCall*>> retrying_;  // by loop index
  std::unique_ptr<OutlierDetector> outlier_;
  // The servers now: static_pools_, or a copy of active_ (taken under mu_).
  std::vector<ConnectionPool*> CurrentPools();
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_CHANNEL_IMPL_H_
