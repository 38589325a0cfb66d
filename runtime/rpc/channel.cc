// channel.cc: Channel, CreateChannel and ChannelImpl.
#include "rdmarpc/channel.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "runtime/rpc/address.h"
#include "rdmarpc/metrics.h"
#include "runtime/rpc/admin_endpoint.h"
#include "runtime/rpc/channel_impl.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/status_payloads.h"

namespace rdmarpc {

Channel::Channel(std::unique_ptr<internal::ChannelImpl> impl) : impl_(std::move(impl)) {}
Channel::~Channel() = default;
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
  if (timer != 0 && loop != nullptr) loop->CancelTimer(timer);
  if (waiter != nullptr) {
    CallWaiter* w = waiter;
    *result = std::move(status);
    w->Notify();  // the caller may free this call from here on
    return;
  }
  auto cb = std::move(done);
  delete this;
  std::move(cb)(std::move(status));
}

ChannelImpl::ChannelImpl(std::string target, const ChannelOptions& options)
    : target_(std::move(target)), options_(options) {
  if (options_.enable_metrics || AnyAdminEndpointRunning()) {
    options_.interceptor_creators.insert(options_.interceptor_creators.begin(),
                                         ClientMetricsInterceptorFactory());
  }
}

absl::StatusOr<std::unique_ptr<ChannelImpl>> ChannelImpl::Create(absl::string_view target,
                                                                 const ChannelOptions& options) {
  absl::StatusOr<std::vector<ResolvedAddress>> servers = ParseTarget(target);
  if (!servers.ok()) return servers.status();
  if (options.pool_size < 1 || options.engine_threads < 1 || options.recv_depth < 2 ||
      options.recv_depth > 65535 || options.eager_limit_bytes < 256 ||
      options.max_message_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ChannelOptions: pool_size ", options.pool_size, " (>= 1), engine_threads ",
        options.engine_threads, " (>= 1), recv_depth ", options.recv_depth,
        " (2..65535), eager_limit_bytes ", options.eager_limit_bytes, " (>= 256), max_message_bytes ",
        options.max_message_bytes, " (>= 1)"));
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
  ChooseProvider();
  std::unique_ptr<ChannelImpl> impl(new ChannelImpl(std::string(target), options));
  // Client large buffers are cached up to 4 × max message, unbounded in use.
  impl->device_ = std::make_unique<DeviceResources>(0, 256u << 20);
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
  copts.max_message_bytes = options.max_message_bytes;
  copts.connect_timeout = options.connect_timeout;
  for (const ResolvedAddress& a : *servers) {
    impl->pools_.push_back(std::make_unique<ConnectionPool>(a.addr, a.name, options.pool_size,
                                                            loops, impl->device_.get(), copts));
    // With somewhere else to send calls, a server whose connections fail is
    // skipped and reconnected in the background (connection_pool.h).
    if (servers->size() > 1) impl->pools_.back()->EnableBackgroundReconnect();
  }
  return impl;
}

ChannelImpl::~ChannelImpl() {
  // Loops first: their connections fail pending calls (CANCELLED, as
  // gRPC's channel destruction does) and tell the pools.
  for (auto& e : loops_) {
    EventLoop* loop = e.get();
    e->Stop([this, loop] {
      for (auto& pool : pools_) {
        pool->CloseConnectionsOf(
            loop, absl::CancelledError(absl::StrCat("channel to ", target_, " destroyed")));
      }
    });
  }
  loops_.clear();
  pools_.clear();
  device_.reset();
}

ChannelImpl::Route ChannelImpl::PickRoute() {
  // Round robin over the servers whose connections are not failing (all of
  // them when every one is: the call then tries its pick).
  const size_t n = pools_.size();
  const uint32_t start = next_server_.fetch_add(1, std::memory_order_relaxed);
  ConnectionPool* pool = pools_[start % n].get();
  for (size_t i = 0; i < n && pool->failing(); ++i) {
    ConnectionPool* next = pools_[(start + 1 + i) % n].get();
    if (!next->failing()) pool = next;
  }
  const int slot = pool->PickSlot();
  return Route{pool, slot, pool->loop_of(slot), &pool->name()};
}

ChannelImpl::Route ChannelImpl::PickRoute(ClientCall* call) {
  const Route r = PickRoute();
  call->loop = r.loop;
  call->peer = r.peer;
  return r;
}

void ChannelImpl::Start(ClientCall* call) {
  const Route r = PickRoute(call);
  call->loop->Post([this, call, r] { StartOnLoop(call, r.pool, r.slot); });
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
    loop->Post([this, call, r] { StartOnLoop(call, r.pool, r.slot); });
  }
  waiter->Wait();
}

void ChannelImpl::StartOnLoop(ClientCall* call, ConnectionPool* pool, int slot) {
  const absl::Time now = absl::Now();
  if (now >= call->deadline) {
    call->Finish(absl::DeadlineExceededError(absl::StrCat(
        "deadline passed before ", call->method, " was sent to ", pool->name())));
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
  absl::StatusOr<Connection*> conn = pool->Get(slot);
  if (!conn.ok()) {
    call->Finish(absl::UnavailableError(conn.status().message()));
    return;
  }
  call->conn = *conn;
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
  }
  req.payload = std::move(call->payload);
  req.meta = std::move(call->meta);
  req.registered = std::move(call->registered);
  req.registered_len = call->registered_len;
  req.deadline = call->deadline;
  // May finish (and delete) the call before returning.
  call->conn->StartCall(std::move(req), call);
}

}  // namespace internal
}  // namespace rdmarpc
