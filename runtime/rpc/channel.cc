// channel.cc: Channel, CreateChannel and ChannelImpl.
#include "rdmarpc/channel.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "rdmarpc/metrics.h"
#include "runtime/rpc/address.h"
#include "runtime/rpc/admin_endpoint.h"
#include "runtime/rpc/attachment_access.h"
#include "runtime/rpc/auth.h"
#include "runtime/rpc/channel_impl.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/resolver_registry.h"
#include "runtime/rpc/retrying_call.h"
#include "runtime/rpc/status_payloads.h"
#include "runtime/transport/log_limiter.h"
#include "runtime/transport/shared_receive_queue.h"

namespace rdmarpc {

Channel::Channel(std::unique_ptr<internal::ChannelImpl> impl) : impl_(std::move(impl)) {}
Channel::~Channel() {
  // In a forked child: the engines and connections are the parent's.
  if (impl_ != nullptr && impl_->inherited()) (void)impl_.release();
}
const std::string& Channel::target() const { return impl_->target(); }

absl::StatusOr<std::shared_ptr<Channel>> CreateChannel(absl::string_view target,
                                                       const ChannelOptions& options) {
  absl::StatusOr<std::unique_ptr<internal::ChannelImpl>> impl =
      internal::ChannelImpl::Create(target, options);
  if (!impl.ok()) return impl.status();
  return std::shared_ptr<Channel>(new Channel(std::move(*impl)));
}

namespace internal {

void ClientCall::OnResponseMetadata(absl::string_view meta) {
  if (context == nullptr) return;
  meta_error = TakeServerMetadata(meta, *peer, max_metadata_bytes,
                                  ClientContextAccess::ServerInitialMetadata(context),
                                  ClientContextAccess::ServerTrailingMetadata(context));
}

void ClientCall::OnResponseAttachment(Attachment attachment) {
  if (context == nullptr) return;
  ClientContextAccess::SetResponseAttachment(
      context, AttachmentAccess::FromTransport(std::move(attachment)));
}

void ClientCall::OnResponse(absl::StatusCode code, absl::string_view message,
                            absl::string_view payload) {
  if (!meta_error.ok()) {
    Finish(std::move(meta_error));
    return;
  }
  if (code != absl::StatusCode::kOk) {
    absl::Status status(code, message);
    if (!payload.empty() && !DecodeStatusPayloads(payload, &status)) {
      status = absl::InternalError(absl::StrCat(
          "status details of ", payload.size(), " bytes from ", *peer,
          " did not decode; the status was ", absl::StatusCodeToString(code), ": ", message));
    }
    Finish(std::move(status));
    return;
  }
  if (!response->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    Finish(absl::InternalError(absl::StrCat("response of ", payload.size(), " bytes to ", method,
                                            " did not parse as ", response->GetTypeName())));
    return;
  }
  Finish(absl::OkStatus());
}

void ClientCall::OnResponseInBuffer(absl::StatusCode code, absl::string_view message,
                                    absl::string_view payload, PooledBuffer* buffer) {
  if (waiter == nullptr || code != absl::StatusCode::kOk || !meta_error.ok() || !*buffer) {
    OnResponse(code, message, payload);
    return;
  }
  deferred_response = std::move(*buffer);
  deferred_payload = payload;
  Finish(absl::OkStatus());
}

absl::Status ClientCall::ParseDeferredResponse() {
  const bool parsed =
      response->ParseFromArray(deferred_payload.data(), static_cast<int>(deferred_payload.size()));
  const size_t size = deferred_payload.size();
  deferred_response.reset();
  deferred_payload = absl::string_view();
  if (parsed) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("response of ", size, " bytes to ", method,
                                          " did not parse as ", response->GetTypeName()));
}

void ClientCall::OnFailure(absl::Status status) { Finish(std::move(status)); }

void ClientCall::OnNotSent(absl::Status status, OutgoingRequest request) {
  if (status.code() == absl::StatusCode::kUnavailable && channel->RetryElsewhere(this, request)) {
    return;
  }
  Finish(std::move(status));
}

void ClientCall::OnRefused(absl::Status status, OutgoingRequest request) {
  if (channel->RetryElsewhere(this, request)) return;
  Finish(std::move(status));
}

void ClientCall::Finish(absl::Status status) {
  if (bound && !ClientContextAccess::Unbind(context)) {
    // TryCancel won: its task (already posted) ends the call CANCELLED.
    if (timer != 0) loop->CancelTimer(timer);
    timer = 0;
    end_deferred = true;
    return;
  }
  Deliver(std::move(status));
}

void ClientCall::RequestCancel() {
  loop->Post([this] { OnCancelRequested(); });
}

void ClientCall::OnCancelRequested() {
  if (park_id != 0) channel->Unpark(loop, std::exchange(park_id, 0));
  if (timer != 0) loop->CancelTimer(timer);
  timer = 0;
  // Still live on its connection unless it ended meanwhile (a connection
  // fails its calls before it goes away, so `conn` is valid here).
  if (!end_deferred && handle != 0 && conn != nullptr) conn->CancelCall(handle);
  ClientContextAccess::FinishCancel(context);
  Deliver(absl::CancelledError(
      absl::StrCat(method, " to ", *peer, " was cancelled (ClientContext::TryCancel)")));
}

void ClientCall::Deliver(absl::Status status) {
  if (park_id != 0) channel->Unpark(loop, std::exchange(park_id, 0));
  if (pool != nullptr) {
    if (OutlierDetector* od = channel->outlier_detector(); od != nullptr) {
      od->Record(pool, status.code(), absl::Now() - started_at);
    }
    std::exchange(pool, nullptr)->CallEnded();
  }
  if (timer != 0 && loop != nullptr) loop->CancelTimer(timer);
  if (waiter != nullptr) {
    CallWaiter* w = waiter;
    *result = std::move(status);
    w->Notify();  // the caller may free this call from here on
    return;
  }
  auto cb = std::move(done);
  if (home != nullptr) {
    ClientCallCache::Give(this);
  } else {
    delete this;
  }
  std::move(cb)(std::move(status));
}

ChannelImpl::ChannelImpl(std::string target, const ChannelOptions& options)
    : target_(std::move(target)), owner_pid_(::getpid()), options_(options) {
  if (options_.enable_metrics || AnyAdminEndpointRunning()) {
    options_.interceptor_creators.insert(options_.interceptor_creators.begin(),
                                         ClientMetricsInterceptorFactory());
  }
}

class ChannelImpl::ResolverHandler final : public ResolverListener {
 public:
  explicit ResolverHandler(ChannelImpl* channel) : channel_(channel) {}
  void OnAddresses(std::vector<std::string> addresses) override {
    channel_->OnResolvedAddresses(std::move(addresses));
  }
  void OnError(absl::Status status) override { channel_->OnResolverError(std::move(status)); }

 private:
  ChannelImpl* const channel_;
};

absl::StatusOr<std::unique_ptr<ChannelImpl>> ChannelImpl::Create(absl::string_view target,
                                                                 const ChannelOptions& options) {
  std::shared_ptr<ResolverFactory> factory = FindResolverFactory(target);
  std::vector<ResolvedAddress> servers;
  if (factory == nullptr) {
    absl::StatusOr<std::vector<ResolvedAddress>> parsed = ParseTarget(target);
    if (!parsed.ok()) return parsed.status();
    servers = std::move(*parsed);
  }
  if (options.pool_size < 1 || options.engine_threads < 1 || options.recv_depth < 2 ||
      options.recv_depth > 65535 || options.eager_limit_bytes < 256 ||
      options.max_message_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ChannelOptions: pool_size ", options.pool_size, " (>= 1), engine_threads ",
        options.engine_threads, " (>= 1), recv_depth ", options.recv_depth,
        " (2..65535), eager_limit_bytes ", options.eager_limit_bytes, " (>= 256), max_message_bytes ",
        options.max_message_bytes, " (>= 1)"));
  }
  if (options.receive_queue == ChannelOptions::ReceiveQueue::kShared) {
    absl::Status srq = SharedReceiveQueue::CheckUserOptions(
        "ChannelOptions", options.srq_min_credits, options.srq_shared_buffers);
    if (!srq.ok()) return srq;
  }
  if (options.max_message_bytes > kMaxProtobufMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ChannelOptions: max_message_bytes ", options.max_message_bytes, " exceeds ",
        kMaxProtobufMessageBytes, ", the largest message protobuf serialises"));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ChannelOptions: connect_timeout ", absl::FormatDuration(options.connect_timeout),
        " (> 0)"));
  }
  std::shared_ptr<const ServiceConfig> service_config;
  if (!options.service_config_json.empty()) {
    absl::StatusOr<std::shared_ptr<const ServiceConfig>> parsed =
        ServiceConfig::Parse(options.service_config_json);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ChannelOptions: service_config_json: ", parsed.status().message()));
    }
    service_config = std::move(*parsed);
  }
  // The channel's own choice wins; else the service config's.
  std::string lb_name = options.load_balancing_policy;
  if (lb_name.empty()) {
    lb_name = service_config != nullptr && !service_config->load_balancing_policy().empty()
                  ? service_config->load_balancing_policy()
                  : "round_robin";
  }
  LbPolicy policy;
  if (lb_name == "round_robin") {
    policy = LbPolicy::kRoundRobin;
  } else if (lb_name == "pick_first") {
    policy = LbPolicy::kPickFirst;
  } else if (lb_name == "least_request") {
    policy = LbPolicy::kLeastRequest;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "ChannelOptions: load_balancing_policy \"", options.load_balancing_policy,
        "\" is not round_robin, pick_first or least_request"));
  }
  if (options.outlier_detection.enabled) {
    if (absl::Status s = ValidateOutlierDetection(options.outlier_detection); !s.ok()) return s;
  }
  if (options.resolver_refresh_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ChannelOptions: resolver_refresh_interval ",
                     absl::FormatDuration(options.resolver_refresh_interval), " (> 0)"));
  }
  ChooseProvider();
  std::unique_ptr<ChannelImpl> impl(new ChannelImpl(std::string(target), options));
  impl->lb_policy_ = policy;
  impl->service_config_ = std::move(service_config);
  if (impl->service_config_ != nullptr && impl->service_config_->throttle().has_value()) {
    impl->throttle_ = std::make_unique<RetryThrottle>(*impl->service_config_->throttle());
  }
  // Client large buffers are cached up to 4 × max message, unbounded in use.
  impl->device_ = std::make_shared<DeviceResources>(0, 256u << 20);
  std::vector<EventLoop*> loops;
  for (int i = 0; i < options.engine_threads; ++i) {
    auto e = std::make_unique<EventLoop>(absl::StrCat("rdmarpc-client-", i));
    e->set_always_arm(false);  // see EventLoop::set_always_arm
    if (absl::Status s = e->Start(); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("starting channel loop: ", s.message()));
    }
    loops.push_back(e.get());
    impl->loops_.push_back(std::move(e));
  }
  ConnectionOptions copts;
  copts.eager_limit_bytes = options.eager_limit_bytes;
  // Our receives get responses: the server sends at most our eager limit.
  copts.recv_buffer_bytes = options.eager_limit_bytes;
  copts.recv_depth = options.recv_depth;
  copts.shared_receive_queue =
      options.receive_queue == ChannelOptions::ReceiveQueue::kShared;
  // A floor above the most a connection may hold is that most (as the
  // server's).
  copts.srq_min_credits =
      std::min(options.srq_min_credits, std::max(kMinRecvDepth, options.recv_depth));
  copts.srq_extra_buffers = options.srq_shared_buffers;
  copts.max_message_bytes = options.max_message_bytes;
  copts.max_exposed_bytes =
      options.max_exposed_bytes_per_connection != 0
          ? options.max_exposed_bytes_per_connection
          : std::max<size_t>(size_t{4} << 30, 4 * options.max_message_bytes + (1u << 20));
  copts.connect_timeout = options.connect_timeout;
  if (options.connection_credentials != nullptr) {
    copts.connect_token = ConnectTokenFn(options.connection_credentials);
  }
  impl->loop_ptrs_ = loops;
  impl->connection_options_ = copts;
  impl->parking_.resize(loops.size());
  impl->retrying_.resize(loops.size());
  if (options.outlier_detection.enabled) {
    ChannelImpl* raw = impl.get();
    impl->outlier_ = std::make_unique<OutlierDetector>(
        std::string(target), options.outlier_detection, [raw] { return raw->CurrentPools(); });
  }
  if (factory == nullptr) {
    for (const ResolvedAddress& a : servers) {
      impl->pools_.push_back(impl->MakePool(a.addr, a.name));
      // With somewhere else to send calls, a server whose connections fail
      // is skipped and reconnected in the background (connection_pool.h).
      if (servers.size() > 1) impl->pools_.back()->EnableBackgroundReconnect();
      impl->static_pools_.push_back(impl->pools_.back().get());
    }
    // Its looks read static_pools_: only once it is complete.
    if (impl->outlier_ != nullptr) impl->outlier_->Start(loops[0]);
    return impl;
  }
  impl->resolver_handler_ = std::make_unique<ResolverHandler>(impl.get());
  ResolverArgs args;
  args.target = std::string(target);
  args.refresh_interval = options.resolver_refresh_interval;
  args.listener = impl->resolver_handler_.get();
  absl::StatusOr<std::unique_ptr<Resolver>> resolver = factory->Create(args);
  if (!resolver.ok()) return resolver.status();
  if (impl->outlier_ != nullptr) impl->outlier_->Start(loops[0]);
  absl::MutexLock lock(&impl->mu_);
  impl->resolver_ = std::move(*resolver);
  return impl;
}

std::unique_ptr<ConnectionPool> ChannelImpl::MakePool(const SocketAddress& addr,
                                                      const std::string& name) {
  // A resolver's pools have a slot on every loop, so a call parked on any
  // loop finds one there (PickRouteOn). A static target's pools start where
  // the one before ended, so its servers' connections spread over the
  // loops (with a shared receive queue, over their SRQs) instead of every
  // pool's slot 0 sharing loop 0.
  const int size = resolver_handler_ == nullptr
                       ? options_.pool_size
                       : std::max(options_.pool_size, static_cast<int>(loop_ptrs_.size()));
  const int first_loop =
      resolver_handler_ == nullptr
          ? static_cast<int>((pools_.size() * static_cast<size_t>(options_.pool_size)) %
                             loop_ptrs_.size())
          : 0;
  auto pool = std::make_unique<ConnectionPool>(addr, name, size, loop_ptrs_, device_.get(),
                                               connection_options_, first_loop);
  if (resolver_handler_ != nullptr) {
    pool->EnableBackgroundReconnect();
    pool->SetOnFailure([this] { RequestReresolution(); });
  }
  return pool;
}

void ChannelImpl::RequestReresolution() {
  // Under the lock: the destructor takes the resolver away under it.
  absl::MutexLock lock(&mu_);
  if (resolver_ != nullptr) resolver_->RequestReresolution();
}

void ChannelImpl::OnResolvedAddresses(std::vector<std::string> addresses) {
  std::vector<ResolvedAddress> parsed;
  for (const std::string& a : addresses) {
    absl::StatusOr<ResolvedAddress> r =
        ParseHostPort(a, /*allow_port_zero=*/false, AddressForm::kNumeric);
    if (!r.ok()) {
      LogConnectionEvent(target_, "resolver reported an address that does not parse: ",
                         r.status());
      continue;
    }
    parsed.push_back(std::move(*r));
  }
  if (parsed.empty()) {
    OnResolverError(absl::UnavailableError(absl::StrCat(
        "the resolver of ", target_, " reported no usable address (", addresses.size(),
        " given)")));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    std::vector<ConnectionPool*> next;
    absl::flat_hash_map<std::string, bool> listed;
    for (const ResolvedAddress& a : parsed) {
      if (!listed.emplace(a.name, true).second) continue;  // a duplicate
      ConnectionPool*& pool = pool_by_name_[a.name];
      if (pool == nullptr) {
        pools_.push_back(MakePool(a.addr, a.name));
        pool = pools_.back().get();
        pool->ConnectInBackground();
      } else if (pool->retired()) {
        pool->Revive();
      }
      next.push_back(pool);
    }
    for (ConnectionPool* old : active_) {
      if (!listed.contains(old->name())) old->Retire();
    }
    active_ = std::move(next);
    resolver_error_ = absl::OkStatus();
  }
  for (size_t i = 0; i < loop_ptrs_.size(); ++i) {
    loop_ptrs_[i]->Post([this, i] { ResumeParked(i, nullptr); });
  }
}

void ChannelImpl::OnResolverError(absl::Status status) {
  if (status.ok()) {
    status = absl::UnavailableError(
        absl::StrCat("the resolver of ", target_, " reported an error without a message"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (!active_.empty()) {
      // The last list stands; the resolver tries again.
      LogConnectionEvent(target_, "resolution failed, keeping the last addresses: ", status);
      return;
    }
    resolver_error_ = status;
  }
  LogConnectionEvent(target_, "resolution failed: ", status);
  for (size_t i = 0; i < loop_ptrs_.size(); ++i) {
    loop_ptrs_[i]->Post([this, i] { ResumeParked(i, nullptr); });
  }
}

size_t ChannelImpl::LoopIndex(EventLoop* loop) const {
  for (size_t i = 0; i < loop_ptrs_.size(); ++i) {
    if (loop_ptrs_[i] == loop) return i;
  }
  LOG(FATAL) << "loop is not one of channel " << target_ << "'s";
  return 0;
}

uint64_t ChannelImpl::Park(EventLoop* loop, absl::Time deadline,
                           absl::AnyInvocable<void(absl::Status) &&> resume) {
  const size_t i = LoopIndex(loop);
  Parking& parking = parking_[i];
  const uint64_t id = parking.next_id++;
  parking.calls.push_back(Parked{id, 0, std::move(resume)});
  if (deadline != absl::InfiniteFuture()) {
    parking.calls.back().timer = loop->AddTimer(deadline, [this, i, id] {
      Parking& p = parking_[i];
      for (auto it = p.calls.begin(); it != p.calls.end(); ++it) {
        if (it->id != id) continue;
        auto resume = std::move(it->resume);
        p.calls.erase(it);
        std::move(resume)(absl::DeadlineExceededError(absl::StrCat(
            "deadline passed while waiting for an address of ", target_)));
        return;
      }
    });
  }
  bool ready;
  {
    absl::MutexLock lock(&mu_);
    ready = !active_.empty() || !resolver_error_.ok();
  }
  // Resumed by a task, never from inside Park: the caller stores the id
  // first.
  if (ready) loop->Post([this, i] { ResumeParked(i, nullptr); });
  return id;
}

void ChannelImpl::Unpark(EventLoop* loop, uint64_t id) {
  Parking& p = parking_[LoopIndex(loop)];
  for (auto it = p.calls.begin(); it != p.calls.end(); ++it) {
    if (it->id != id) continue;
    if (it->timer != 0) loop->CancelTimer(it->timer);
    p.calls.erase(it);
    return;
  }
}

void ChannelImpl::ResumeParked(size_t i, const absl::Status* final) {
  absl::Status status;
  if (final != nullptr) {
    status = *final;
  } else {
    absl::MutexLock lock(&mu_);
    if (active_.empty() && resolver_error_.ok()) return;  // nothing yet
    if (active_.empty()) status = resolver_error_;
  }
  std::list<Parked> calls;
  calls.swap(parking_[i].calls);
  for (Parked& c : calls) {
    if (c.timer != 0) loop_ptrs_[i]->CancelTimer(c.timer);
    std::move(c.resume)(status);
  }
}

bool ChannelImpl::RetryElsewhere(ClientCall* call, OutgoingRequest& request) {
  if (call->transparent_retries >= kMaxTransparentRetries || absl::Now() >= call->deadline ||
      destroying_.load(std::memory_order_acquire)) {
    return false;
  }
  // The request as the call gave it: the transport may have moved the
  // metadata to the front of the payload.
  if (request.meta_in_payload != 0 && request.payload.size() >= request.meta_in_payload) {
    request.meta.assign(request.payload.data(), request.meta_in_payload);
    request.payload.erase(0, request.meta_in_payload);
    request.meta_in_payload = 0;
  }
  const bool whole = call->request_message != nullptr || request.write != nullptr ||
                     (request.registered && request.registered_len == call->sent_payload_bytes) ||
                     (!request.registered && request.payload.size() == call->sent_payload_bytes);
  if (!whole) return false;
  // Another server, not failing.
  ConnectionPool* pool = nullptr;
  {
    const uint32_t start = next_server_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    const std::vector<ConnectionPool*>& pools =
        resolver_handler_ == nullptr ? static_pools_ : active_;
    // Available first; else one outlier detection ejected but that still
    // connects (the call never reached a server: it is not its fault).
    for (int pass = 0; pass < 2 && pool == nullptr; ++pass) {
      for (size_t i = 0; i < pools.size(); ++i) {
        ConnectionPool* p = pools[(start + i) % pools.size()];
        if (p != call->pool && (pass == 0 ? p->available() : !p->failing())) {
          pool = p;
          break;
        }
      }
    }
  }
  if (pool == nullptr) return false;
  ConnectionPool* previous = call->pool;
  // Off its connection (which is closing, or answered it) first, whatever
  // ends it now.
  if (call->timer != 0) call->loop->CancelTimer(call->timer);
  call->timer = 0;
  call->conn = nullptr;
  call->handle = 0;
  if (call->bound) {
    if (!ClientContextAccess::Unbind(call->context)) {
      // TryCancel won: its task (already posted) ends the call CANCELLED.
      call->end_deferred = true;
      return true;
    }
    call->bound = false;
  }
  // A `write` request's bytes are still the call's own (call->payload or
  // its request message).
  if (request.write == nullptr) call->payload = std::move(request.payload);
  call->registered = std::move(request.registered);
  call->registered_len = request.registered_len;
  call->meta = std::move(request.meta);
  if (previous != nullptr) previous->CallEnded();
  call->pool = nullptr;
  ++call->transparent_retries;
  // On this loop when the pool has a slot here (a resolver's always has):
  // no hop, and never onto a loop the channel's destructor stopped already.
  int slot = pool->PickSlotOn(call->loop);
  if (slot < 0) slot = pool->PickSlot();
  call->peer = &pool->name();
  call->loop = pool->loop_of(slot);
  call->loop->Post([this, call, pool, slot] { StartOnLoop(call, pool, slot); });
  return true;
}

void ChannelImpl::ResumeCall(ClientCall* call, absl::Status status) {
  call->park_id = 0;
  if (call->bound) {
    if (!ClientContextAccess::Unbind(call->context)) {
      // TryCancel won: its task (already posted) ends the call CANCELLED.
      call->end_deferred = true;
      return;
    }
    call->bound = false;
  }
  if (!status.ok()) {
    call->Finish(absl::Status(status.code(), absl::StrCat(call->method, ": ", status.message())));
    return;
  }
  const Route r = PickRouteOn(call->loop);
  call->peer = r.peer;
  StartOnLoop(call, r.pool, r.slot);
}

ChannelImpl::~ChannelImpl() {
  destroying_.store(true, std::memory_order_release);  // no call moves loops from now on
  // The resolver first: after this no report changes pools_.
  std::unique_ptr<Resolver> resolver;
  {
    absl::MutexLock lock(&mu_);
    resolver = std::move(resolver_);
  }
  resolver.reset();
  // Loops next: their connections fail pending calls (CANCELLED, as
  // gRPC's channel destruction does) and tell the pools.
  const absl::Status destroyed =
      absl::CancelledError(absl::StrCat("channel to ", target_, " destroyed"));
  for (size_t i = 0; i < loops_.size(); ++i) {
    EventLoop* loop = loops_[i].get();
    loops_[i]->Stop([this, loop, i, &destroyed] {
      if (i < parking_.size()) ResumeParked(i, &destroyed);
      if (i < retrying_.size()) {
        // Each may end (and leave the list) here or when its attempts,
        // failed just below, are in.
        std::vector<RetryingCall*> calls(retrying_[i].begin(), retrying_[i].end());
        for (RetryingCall* c : calls) c->OnChannelClosing();
      }
      for (auto& pool : pools_) {
        pool->CloseConnectionsOf(
            loop, absl::CancelledError(absl::StrCat("channel to ", target_, " destroyed")));
      }
    });
  }
  loops_.clear();
  outlier_.reset();  // before the pools it looks at
  pools_.clear();
  device_.reset();
}

std::vector<ConnectionPool*> ChannelImpl::CurrentPools() {
  if (resolver_handler_ == nullptr) return static_pools_;
  absl::MutexLock lock(&mu_);
  return active_;
}

// Among the available servers (connections not failing, not ejected by
// outlier detection; all of them when none is: the call then tries its
// pick), as the policy says.
ConnectionPool* ChannelImpl::PickFrom(const std::vector<ConnectionPool*>& pools,
                                      uint32_t start) const {
  const size_t n = pools.size();
  if (lb_policy_ == LbPolicy::kPickFirst) {
    for (ConnectionPool* p : pools) {
      if (p->available()) return p;
    }
    return pools[start % n];
  }
  if (lb_policy_ == LbPolicy::kLeastRequest && n > 1) {
    // Two distinct servers at random; the less loaded of those available.
    thread_local absl::InsecureBitGen gen;
    const size_t i = absl::Uniform<size_t>(gen, 0, n);
    size_t j = absl::Uniform<size_t>(gen, 0, n - 1);
    if (j >= i) ++j;
    ConnectionPool* a = pools[i];
    ConnectionPool* b = pools[j];
    if (a->available() && b->available()) return b->outstanding() < a->outstanding() ? b : a;
    if (a->available()) return a;
    if (b->available()) return b;
    // Neither available: round robin's search below.
  }
  ConnectionPool* pool = pools[start % n];
  for (size_t i = 0; i < n && !pool->available(); ++i) {
    ConnectionPool* next = pools[(start + 1 + i) % n];
    if (next->available()) pool = next;
  }
  // None available: an ejected server that still connects beats a failing
  // one.
  for (size_t i = 0; i < n && pool->failing(); ++i) {
    ConnectionPool* next = pools[(start + 1 + i) % n];
    if (!next->failing()) pool = next;
  }
  return pool;
}

ChannelImpl::Route ChannelImpl::PickRoute() {
  const uint32_t start = next_server_.fetch_add(1, std::memory_order_relaxed);
  ConnectionPool* pool;
  if (resolver_handler_ == nullptr) {
    pool = PickFrom(static_pools_, start);
  } else {
    absl::MutexLock lock(&mu_);
    if (active_.empty()) {
      return Route{nullptr, -1, loop_ptrs_[start % loop_ptrs_.size()], &target_};
    }
    pool = PickFrom(active_, start);
  }
  const int slot = pool->PickSlot();
  return Route{pool, slot, pool->loop_of(slot), &pool->name()};
}

ChannelImpl::Route ChannelImpl::PickRouteOn(EventLoop* loop) {
  const uint32_t start = next_server_.fetch_add(1, std::memory_order_relaxed);
  ConnectionPool* pool;
  {
    absl::MutexLock lock(&mu_);
    if (active_.empty()) return Route{nullptr, -1, loop, &target_};
    pool = PickFrom(active_, start);
  }
  const int slot = pool->PickSlotOn(loop);
  return Route{pool, slot, loop, &pool->name()};
}

ChannelImpl::Route ChannelImpl::PickAttemptRoute(EventLoop* loop,
                                                 const std::vector<const ConnectionPool*>& avoid) {
  const uint32_t start = next_server_.fetch_add(1, std::memory_order_relaxed);
  auto pick = [&](const std::vector<ConnectionPool*>& pools) -> ConnectionPool* {
    if (pools.empty()) return nullptr;
    std::vector<ConnectionPool*> fresh;
    if (!avoid.empty()) {
      for (ConnectionPool* p : pools) {
        if (p->available() && std::find(avoid.begin(), avoid.end(), p) == avoid.end()) {
          fresh.push_back(p);
        }
      }
    }
    return fresh.empty() ? PickFrom(pools, start) : PickFrom(fresh, start);
  };
  ConnectionPool* pool;
  if (resolver_handler_ == nullptr) {
    pool = pick(static_pools_);
  } else {
    absl::MutexLock lock(&mu_);
    pool = pick(active_);
  }
  if (pool == nullptr) return Route{nullptr, -1, loop, &target_};
  int slot = pool->PickSlotOn(loop);
  if (slot < 0) slot = pool->PickSlot();
  return Route{pool, slot, pool->loop_of(slot), &pool->name()};
}

void ChannelImpl::StartAttempt(ClientCall* call, const Route& route, EventLoop* home) {
  call->channel = this;
  call->loop = route.loop;
  call->peer = route.peer;
  if (route.loop == home) {
    StartOnLoop(call, route.pool, route.slot);
  } else {
    route.loop->Post([this, call, route] { StartOnLoop(call, route.pool, route.slot); });
  }
}

std::list<RetryingCall*>::iterator ChannelImpl::RegisterRetrying(EventLoop* loop,
                                                                 RetryingCall* call) {
  std::list<RetryingCall*>& calls = retrying_[LoopIndex(loop)];
  return calls.insert(calls.end(), call);
}

void ChannelImpl::UnregisterRetrying(EventLoop* loop, std::list<RetryingCall*>::iterator it) {
  retrying_[LoopIndex(loop)].erase(it);
}

ChannelImpl::Route ChannelImpl::PickRoute(ClientCall* call) {
  const Route r = PickRoute();
  call->channel = this;
  call->loop = r.loop;
  call->peer = r.peer;
  return r;
}

void ChannelImpl::Start(ClientCall* call) { PostStart(call, PickRoute(call)); }

void ChannelImpl::PostStart(ClientCall* call, const Route& r) {
  call->start_pool = r.pool;
  call->start_slot = r.slot;
  call->start_task.fn = [this, call] { StartOnLoop(call, call->start_pool, call->start_slot); };
  call->loop->Post(&call->start_task);
}

void ChannelImpl::RunBlocking(ClientCall* call) {
  const Route r = PickRoute(call);
  EventLoop* loop = call->loop;
  CallWaiter* waiter = call->waiter;
  if (loop->TryLead()) {
    // Leader: this thread is the loop until its call is done.
    StartOnLoop(call, r.pool, r.slot);
    if (loop->LeadUntil([waiter] { return waiter->done(); })) return;
  } else {
    // Follower: whoever holds the poller starts and finishes it.
    PostStart(call, r);
  }
  waiter->Wait();
}

void ChannelImpl::StartOnLoop(ClientCall* call, ConnectionPool* pool, int slot) {
  const absl::Time now = absl::Now();
  if (now >= call->deadline) {
    call->Finish(absl::DeadlineExceededError(absl::StrCat(
        "deadline passed before ", call->method, " was sent to ", *call->peer)));
    return;
  }
  if (call->context != nullptr) {
    if (!ClientContextAccess::Bind(call->context, call)) {
      ClientContextAccess::FinishCancel(call->context);
      call->Finish(absl::CancelledError(absl::StrCat(
          call->method, " was cancelled (ClientContext::TryCancel) before it was sent")));
      return;
    }
    call->bound = true;
  }
  if (pool != nullptr && pool->retired()) {
    // Its address left the list since the call picked it.
    const Route r = PickRouteOn(call->loop);
    pool = r.pool;
    slot = r.slot;
    call->peer = r.peer;
  }
  if (pool == nullptr) {
    // The channel's resolver has no address yet: wait for one.
    call->park_id = Park(call->loop, call->deadline, [this, call](absl::Status s) mutable {
      ResumeCall(call, std::move(s));
    });
    return;
  }
  absl::StatusOr<Connection*> conn = pool->Get(slot);
  if (!conn.ok()) {
    call->Finish(absl::UnavailableError(conn.status().message()));
    return;
  }
  call->conn = *conn;
  call->pool = pool;
  call->started_at = now;
  pool->CallStarted();
  if (call->deadline != absl::InfiniteFuture()) {
    call->timer = call->loop->AddTimer(call->deadline, [call] {
      call->timer = 0;
      // Retire the slot (late responses are dropped, exposed buffers get new
      // rkeys) and fail the call.
      if (call->handle != 0) call->conn->CancelCall(call->handle);
      call->Finish(absl::DeadlineExceededError(absl::StrCat(
          call->method, " to ", *call->peer, " exceeded its deadline")));
    });
  }
  OutgoingRequest req;
  req.method = call->method;
  if (call->request_message != nullptr) {
    // Serialised straight into the send buffer when posted (the message
    // outlives the call: its synchronous caller waits).
    req.write = [](const void* source, char* out) {
      static_cast<const google::protobuf::MessageLite*>(source)->SerializeWithCachedSizesToArray(
          reinterpret_cast<uint8_t*>(out));
    };
    req.source = call->request_message;
    req.source_size = call->request_size;
  } else if (call->home != nullptr && call->meta.empty() && !call->registered) {
    // A cached asynchronous call's serialised request stays in the call
    // (whose string keeps its room for the next call); the transport
    // copies it into the send buffer when posted.
    req.write = [](const void* source, char* out) {
      const auto* bytes = static_cast<const std::string*>(source);
      std::memcpy(out, bytes->data(), bytes->size());
    };
    req.write_copies = true;
    req.source = &call->payload;
    req.source_size = call->payload.size();
  }
  if (req.write == nullptr) req.payload = std::move(call->payload);
  req.meta = std::move(call->meta);
  req.registered = std::move(call->registered);
  req.registered_len = call->registered_len;
  req.deadline = call->deadline;
  if (call->context != nullptr) {
    req.attachment = AttachmentAccess::ToTransport(call->context->request_attachment());
  }
  req.keep_for_retry = resolver_handler_ != nullptr || static_pools_.size() > 1;
  call->sent_payload_bytes = req.payload_size();
  // May finish the call (and end its life) before returning.
  call->conn->StartCall(std::move(req), call);
}

}  // namespace internal
}  // namespace rdmarpc
