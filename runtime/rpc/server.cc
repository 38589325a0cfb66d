// server.cc: Server and ServerImpl.
#include "rdmarpc/server.h"

#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "rdmarpc/metrics.h"
#include "runtime/rpc/address.h"
#include "runtime/rpc/attachment_access.h"
#include "runtime/rpc/auth.h"
#include "runtime/rpc/context_access.h"
#include "runtime/rpc/etcd_resolver.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/metrics.h"
#include "runtime/rpc/server_hooks.h"
#include "runtime/rpc/server_impl.h"
#include "runtime/rpc/status_payloads.h"
#include "runtime/transport/shared_receive_queue.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {

Server::Server(const ServerOptions& options)
    : impl_(std::make_unique<internal::ServerImpl>(options)) {}
Server::~Server() {
  // In a forked child: the workers and connections are the parent's.
  if (impl_ != nullptr && impl_->inherited()) (void)impl_.release();
}
absl::Status Server::AddService(Service* service) { return impl_->AddService(service); }
std::vector<std::string> Server::GetServiceNames() const { return impl_->GetServiceNames(); }
absl::Status Server::Start(absl::string_view listen_address) {
  if (impl_->inherited()) return impl_->InheritedError();
  return impl_->Start(listen_address);
}
int Server::port() const { return impl_->port(); }
const std::string& Server::address() const { return impl_->address(); }
void Server::Shutdown(absl::Duration grace) {
  if (!impl_->inherited()) impl_->Shutdown(grace);
}
void Server::Wait() {
  if (!impl_->inherited()) impl_->Wait();
}

namespace internal {
namespace {
// The protocol version this server speaks (a test may change it).
uint16_t ProtocolVersion() {
  ServerHooks* hooks = InstalledServerHooks();
  return hooks != nullptr ? hooks->ProtocolVersion() : kProtocolVersion;
}

// How long a handler-pool thread that ran out of work spins before it
// sleeps. Short: on a 2-core host a spinning pool thread takes the core the
// worker and the peer need.
constexpr absl::Duration kHandlerSpin = absl::Microseconds(20);
// Shutdown waits this long at most for every client to answer its kGoAway.
constexpr absl::Duration kGoAwayAnswerWait = absl::Seconds(1);
// Shutdown waits this long at most for a connection's replies to be
// delivered before it disconnects.
constexpr absl::Duration kCloseWhenSentBound = absl::Seconds(1);
// Most handler threads when ServerOptions::max_handler_threads is 0.
constexpr int kDefaultMaxHandlerThreads = 256;
}  // namespace

ServerImpl::ServerImpl(const ServerOptions& options) : options_(options) {}

ServerImpl::~ServerImpl() {
  // Shut down first: /healthz says 503 while this drains, as while any
  // Shutdown does.
  Shutdown(absl::Seconds(5));
  Wait();
  if (status_registered_) RemoveServerStatusSource(this);
}

bool ServerImpl::Serving() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kRunning;
}

std::string ServerImpl::Address() const { return address_; }

std::string ServerImpl::DescribeForStatusz() const {
  const char* state = "new";
  std::vector<std::string> services;
  {
    absl::MutexLock lock(&mu_);
    switch (state_) {
      case State::kNew: state = "new"; break;
      case State::kRunning: state = "serving"; break;
      case State::kStopping: state = "shutting down"; break;
      case State::kStopped: state = "stopped"; break;
    }
    services.assign(services_.begin(), services_.end());
  }
  std::sort(services.begin(), services.end());
  return absl::StrCat(
      "  server ", address_, ": ", state, ", open connections ", open_connections_.load(),
      ", handlers running ", running_handlers_.load(), ", calls on the handler pool ",
      pool_calls_.load(), "\n", "    services: ",
      services.empty() ? "(none)" : absl::StrJoin(services, ", "), "\n", "    workers ",
      options_.num_workers, ", recv_depth ", options_.recv_depth, " x ",
      options_.recv_buffer_bytes, " bytes, receive queue ",
      options_.receive_queue == ServerOptions::ReceiveQueue::kShared
          ? absl::StrCat("shared (", options_.srq_shared_buffers, " + ",
                         options_.srq_min_credits, " per connection)")
          : std::string("per connection"),
      ", eager_limit ", options_.eager_limit_bytes,
      " bytes, max_message ", options_.max_message_bytes, " bytes, large buffer pool ",
      options_.large_buffer_pool_bytes, " bytes, call metrics ", metrics_installed_ ? "on" : "off",
      ", connection authenticator ", options_.connection_authenticator ? "on" : "off",
      ", auth metadata processor ", auth_installed_ ? "on" : "off", ", ",
      options_.interceptor_creators.size() - (metrics_installed_ ? 1 : 0) -
          (auth_installed_ ? 1 : 0),
      " other interceptors\n");
}

absl::Status ServerImpl::AddService(Service* service) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kNew) {
    return absl::FailedPreconditionError(
        absl::StrCat("AddService(", service->full_name(), ") after Start"));
  }
  if (!services_.insert(service->full_name()).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("service ", service->full_name(), " is already registered"));
  }
  for (const auto& m : service->methods()) methods_[m->full_name()] = m.get();
  return absl::OkStatus();
}

std::vector<std::string> ServerImpl::GetServiceNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names(services_.begin(), services_.end());
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status ServerImpl::Start(absl::string_view listen_address) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kNew) return absl::FailedPreconditionError("Server already started");
  }
  if (options_.handler_threads < 0 || options_.max_handler_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServerOptions: handler_threads ", options_.handler_threads, " and max_handler_threads ",
        options_.max_handler_threads, " (>= 0)"));
  }
  if (options_.num_workers < 1 || options_.recv_depth < 2 || options_.recv_depth > 65535 ||
      options_.recv_buffer_bytes < 256 || options_.eager_limit_bytes < 256 ||
      options_.max_message_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServerOptions: num_workers ", options_.num_workers, " (>= 1), recv_depth ",
        options_.recv_depth, " (2..65535), recv_buffer_bytes ", options_.recv_buffer_bytes,
        " (>= 256), eager_limit_bytes ", options_.eager_limit_bytes, " (>= 256), max_message_bytes ",
        options_.max_message_bytes, " (>= 1)"));
  }
  if (options_.receive_queue == ServerOptions::ReceiveQueue::kShared) {
    absl::Status srq = SharedReceiveQueue::CheckUserOptions(
        "ServerOptions", options_.srq_min_credits, options_.srq_shared_buffers);
    if (!srq.ok()) return srq;
  }
  if (options_.max_concurrent_streams < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ServerOptions: max_concurrent_streams ",
                                                   options_.max_concurrent_streams,
                                                   " (>= 0; 0 for no cap)"));
  }
  if (options_.max_message_bytes > kMaxProtobufMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServerOptions: max_message_bytes ", options_.max_message_bytes, " exceeds ",
        kMaxProtobufMessageBytes, ", the largest message protobuf serialises"));
  }
  absl::StatusOr<ResolvedAddress> addr = ParseHostPort(listen_address, /*allow_port_zero=*/true);
  if (!addr.ok()) return addr.status();
  if (!options_.register_target.empty()) {
    absl::StatusOr<EtcdTarget> t = ParseEtcdTarget(options_.register_target);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ServerOptions::register_target: ", t.status().message()));
    }
    const std::string ip = addr->addr.IpString();
    if (options_.register_address.empty() && (ip == "0.0.0.0" || ip == "::")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ServerOptions::register_target: the wildcard address ", addr->name,
          " cannot be registered; set ServerOptions::register_address"));
    }
    if (!options_.register_address.empty()) {
      absl::StatusOr<ResolvedAddress> r = ParseHostPort(options_.register_address, false);
      if (!r.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("ServerOptions::register_address: ", r.status().message()));
      }
    }
  }
  const std::string admin_listen =
      options_.admin_listen.empty() ? AdminListenFlag() : options_.admin_listen;
  if (!admin_listen.empty()) {
    absl::StatusOr<std::shared_ptr<AdminEndpoint>> admin = AdminEndpoint::Acquire(admin_listen);
    if (!admin.ok()) return admin.status();
    admin_ = std::move(*admin);
  }
  // A Start that fails below lets go of the endpoint (a later Start asks
  // again).
  auto release_admin = absl::MakeCleanup([this] { admin_.reset(); });
  if (!metrics_installed_ &&
      (options_.enable_metrics || admin_ != nullptr || AnyAdminEndpointRunning())) {
    options_.interceptor_creators.insert(options_.interceptor_creators.begin(),
                                         ServerMetricsInterceptorFactory());
    metrics_installed_ = true;
    for (const auto& [name, handler] : methods_) {
      InitializeServerMethodMetrics(name, handler->kind());
    }
  }
  if (!auth_installed_ && options_.auth_metadata_processor != nullptr) {
    options_.interceptor_creators.insert(
        options_.interceptor_creators.begin() + (metrics_installed_ ? 1 : 0),
        AuthMetadataInterceptorFactory(options_.auth_metadata_processor));
    auth_installed_ = true;
  }
  ChooseProvider();
  device_ = std::make_shared<DeviceResources>(options_.large_buffer_pool_bytes,
                                              options_.large_buffer_pool_bytes);
  const int handler_threads =
      options_.handler_threads > 0
          ? options_.handler_threads
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (options_.max_handler_threads != 0 && options_.max_handler_threads < handler_threads) {
    return absl::InvalidArgumentError(
        absl::StrCat("ServerOptions: max_handler_threads ", options_.max_handler_threads,
                     " is below handler_threads ", handler_threads));
  }
  const int max_threads =
      options_.max_handler_threads != 0 ? options_.max_handler_threads
                                        : std::max(handler_threads, kDefaultMaxHandlerThreads);
  pool_ = std::make_unique<HandlerPool>(handler_threads, max_threads, "rdmarpc-handler",
                                        kHandlerSpin);
  for (int i = 0; i < options_.num_workers; ++i) {
    auto w = std::make_unique<Worker>();
    w->server = this;
    w->loop = std::make_unique<EventLoop>(absl::StrCat("rdmarpc-worker-", i));
    if (absl::Status s = w->loop->Start(); !s.ok()) {
      for (auto& x : workers_) x->loop->Stop();
      return absl::UnavailableError(absl::StrCat("starting worker: ", s.message()));
    }
    workers_.push_back(std::move(w));
  }
  Listener::Options lo;
  lo.connection_options = [this] {
    ConnectionOptions copts;
    copts.eager_limit_bytes = options_.eager_limit_bytes;
    copts.recv_buffer_bytes = options_.recv_buffer_bytes;
    copts.recv_depth = options_.recv_depth;
    copts.shared_receive_queue =
        options_.receive_queue == ServerOptions::ReceiveQueue::kShared;
    // A floor above the most a connection may hold is that most.
    copts.srq_min_credits =
        std::min(options_.srq_min_credits, std::max(kMinRecvDepth, options_.recv_depth));
    copts.srq_extra_buffers = options_.srq_shared_buffers;
    copts.max_message_bytes = options_.max_message_bytes;
    copts.max_exposed_bytes =
        options_.max_exposed_bytes_per_connection != 0
            ? options_.max_exposed_bytes_per_connection
            : std::max<size_t>(options_.large_buffer_pool_bytes / 2,
                               2 * options_.max_message_bytes + (1u << 20));
    if (InstalledServerHooks() != nullptr) {
      copts.request_read_delay = [] {
        ServerHooks* hooks = InstalledServerHooks();
        return hooks != nullptr ? hooks->RequestReadDelay() : absl::ZeroDuration();
      };
    }
    return copts;
  };
  lo.protocol_version = [] { return ProtocolVersion(); };
  if (options_.connection_authenticator != nullptr) {
    lo.check_token = CheckTokenFn(options_.connection_authenticator);
  }
  lo.recv_depth = options_.recv_depth;
  lo.recv_buffer_bytes = options_.recv_buffer_bytes;
  lo.large_buffer_pool_bytes = options_.large_buffer_pool_bytes;
  std::vector<Listener::Target> targets;
  for (auto& w : workers_) targets.push_back(Listener::Target{w->loop.get(), w.get()});
  // On the worker's loop, once it set the connection up.
  auto on_accepted = [this](size_t worker, Connection* conn) {
    workers_[worker]->conns.insert(conn);
    open_connections_.fetch_add(1);
  };
  listener_ = std::make_unique<Listener>(device_.get(), std::move(lo), std::move(targets),
                                         std::move(on_accepted));
  if (absl::Status s = listener_->Listen(addr->addr, addr->name); !s.ok()) {
    listener_.reset();
    for (auto& w : workers_) w->loop->Stop();
    workers_.clear();
    absl::MutexLock lock(&mu_);
    state_ = State::kStopped;
    return s;
  }
  port_ = listener_->port();
  // The address bound: with port 0 in `listen_address`, the port chosen.
  SocketAddress bound = addr->addr;
  bound.set_port(static_cast<uint16_t>(port_));
  address_ = bound.ToString();
  std::move(release_admin).Cancel();
  AddServerStatusSource(this);
  status_registered_ = true;
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kRunning;
  }
  LOG(INFO) << "rdmarpc server listening on " << address_ << " (asked for "
            << addr->name << ", " << ProviderName() << ")";
  if (!options_.register_target.empty()) {
    // Numeric and normalised, as resolvers hand addresses to channels.
    std::string registered = address_;
    if (!options_.register_address.empty()) {
      registered = ParseHostPort(options_.register_address, false)->name;
    }
    absl::StatusOr<std::unique_ptr<EtcdRegistration>> r =
        EtcdRegistration::Start(options_.register_target, registered, options_.register_ttl);
    if (!r.ok()) {
      Shutdown(absl::ZeroDuration());
      return r.status();
    }
    registration_ = std::move(*r);
    LOG(INFO) << "rdmarpc server registered " << registered << " at "
              << options_.register_target;
  }
  return absl::OkStatus();
}

void ServerImpl::Worker::OnRequest(Connection* conn, const IncomingRequest& req) {
  server->Dispatch(this, conn, req);
}

ServerImpl::PoolCall* ServerImpl::Worker::FindPoolCall(Connection* conn,
                                                       const RequestToken& token) {
  auto calls = pool_calls.find(conn);
  if (calls == pool_calls.end()) return nullptr;
  auto it = calls->second.find(token.handle());
  if (it == calls->second.end() || it->second->answered) return nullptr;
  return it->second;
}

void ServerImpl::Worker::OnStreamMessage(Connection* conn, const RequestToken& token,
                                         absl::string_view payload, bool has_message,
                                         bool end_stream, Attachment attachment) {
  PoolCall* call = FindPoolCall(conn, token);
  if (call != nullptr && call->stream != nullptr) {
    call->stream->OnMessage(payload, has_message, end_stream, std::move(attachment));
  }
}

void ServerImpl::Worker::OnWindow(Connection* conn, const RequestToken& token,
                                  uint32_t messages) {
  PoolCall* call = FindPoolCall(conn, token);
  if (call != nullptr && call->stream != nullptr) call->stream->OnWindow(messages);
}

void ServerImpl::CancelPoolCall(PoolCall* call) {
  // The context first: a handler woken from Read/Write by the stream's
  // cancel then sees IsCancelled().
  ServerContextAccess::Cancel(&call->context);
  if (call->callback != nullptr) {
    call->callback->OnCancelled();  // the stream too, then OnCancel
  } else if (call->stream != nullptr) {
    call->stream->Cancel();
  }
}

void ServerImpl::Worker::OnCancel(Connection* conn, const RequestToken& token) {
  PoolCall* call = FindPoolCall(conn, token);
  if (call == nullptr) return;
  call->answered = true;
  // Answered now, so the client may reuse the buffers it exposed; the
  // handler's own answer will be dropped.
  conn->SendResponse(token, absl::StatusCode::kCancelled,
                     absl::StrCat(*call->method, " was cancelled by the client"), std::string());
  CancelPoolCall(call);
}

void ServerImpl::Worker::OnGoAway(Connection*) { server->goaway_unanswered_.fetch_sub(1); }

void ServerImpl::Worker::OnClosed(Connection* conn, const absl::Status&) {
  if (conn->goaway_unanswered()) server->goaway_unanswered_.fetch_sub(1);
  if (conns.erase(conn) > 0) server->open_connections_.fetch_sub(1);
  if (auto old = answered_calls.extract(conn); !old.empty()) {
    for (PoolCall* call : old.mapped()) call->conn = nullptr;
  }
  auto calls = pool_calls.extract(conn);
  if (calls.empty()) return;
  // The client is gone: its calls' handlers are told, their answers dropped.
  for (auto& [key, call] : calls.mapped()) {
    call->conn = nullptr;
    call->answered = true;
    CancelPoolCall(call);
  }
}

void ServerImpl::Dispatch(Worker* worker, Connection* conn, const IncomingRequest& req) {
  if (draining_.load(std::memory_order_relaxed)) {
    conn->RefuseRequest(req.token, absl::StrCat("server ", address_, " shutting down: ",
                                                req.method, " was not started"));
    return;
  }
  // Heterogeneous lookup: no std::string made for the method name.
  auto it = methods_.find(req.method);
  if (it == methods_.end()) {
    conn->SendResponse(req.token, absl::StatusCode::kUnimplemented,
                       absl::StrCat("method ", req.method, " is not implemented by this server"),
                       std::string());
    return;
  }
  const MethodHandler* handler = it->second;
  if (req.stream != (handler->kind() != RpcKind::kUnary)) {
    conn->SendResponse(req.token, absl::StatusCode::kInternal,
                       absl::StrCat(req.method, " is ",
                                    handler->kind() == RpcKind::kUnary ? "a unary" : "a streaming",
                                    " method on this server but was called as ",
                                    req.stream ? "a stream" : "a unary call"),
                       std::string());
    return;
  }
  // A request above kMaxInlineRequestBytes goes to the pool even for a
  // run_inline method: parsing, handling and serialising megabytes is
  // blocking work for the worker, which serves every other call on its
  // connections.
  if (handler->run_inline() && !handler->callback() &&
      req.payload.size() <= kMaxInlineRequestBytes) {
    RunInline(worker, conn, req, &it->first, handler);
    return;
  }
  if (options_.max_concurrent_streams > 0) {
    const size_t open = CallsInProgress(worker, conn);
    if (open >= static_cast<size_t>(options_.max_concurrent_streams)) {
      conn->SendResponse(
          req.token, absl::StatusCode::kResourceExhausted,
          absl::StrCat("connection from ", conn->peer(), " has ", open,
                       " calls in progress, the server's max_concurrent_streams; ", req.method,
                       " was not started"),
          std::string());
      return;
    }
  }
  SubmitToPool(worker, conn, req, &it->first, handler);
}

size_t ServerImpl::CallsInProgress(Worker* worker, Connection* conn) {
  size_t n = 0;
  if (auto calls = worker->pool_calls.find(conn); calls != worker->pool_calls.end()) {
    n += calls->second.size();
  }
  if (auto answered = worker->answered_calls.find(conn);
      answered != worker->answered_calls.end()) {
    n += answered->second.size();
  }
  return n;
}

namespace {

// The handler's initial and trailing metadata for its answer, encoded; when
// an entry breaks gRPC's rules, none, and `*status` becomes why (INTERNAL).
std::string EncodeHandlerMetadata(const Metadata& initial, const Metadata& trailing,
                                  absl::Status* status) {
  if (initial.empty() && trailing.empty()) return std::string();
  absl::Status md = ValidateMetadata(initial, ~size_t{0}, "server initial metadata");
  if (md.ok()) {
    md = ValidateMetadata(trailing, ~size_t{0}, "server trailing metadata",
                          /*allow_pushback=*/true);
  }
  if (!md.ok()) {
    *status = std::move(md);
    return std::string();
  }
  return EncodeResponseMetadata(initial, trailing);
}

absl::Time DeadlineFrom(uint64_t timeout_us) {
  return timeout_us == kNoTimeout ? absl::InfiniteFuture()
                                  : absl::Now() + absl::Microseconds(timeout_us);
}

absl::Status ParseFailure(const IncomingRequest& req, const std::string& method,
                          const google::protobuf::MessageLite& request) {
  return absl::InternalError(absl::StrCat("request of ", req.payload.size(), " bytes to ", method,
                                          " did not parse as ", request.GetTypeName()));
}

}  // namespace

void ServerImpl::RunInline(Worker* worker, Connection* conn, const IncomingRequest& req,
                           const std::string* method, const MethodHandler* handler) {
  Worker::Messages& cached = worker->messages[handler];
  std::unique_ptr<google::protobuf::MessageLite> fresh_request, fresh_response;
  google::protobuf::MessageLite* request;
  google::protobuf::MessageLite* response;
  const bool reuse = !cached.busy;
  if (reuse) {
    if (cached.request == nullptr) {
      cached.request = handler->NewRequest();
      cached.response = handler->NewResponse();
    }
    cached.busy = true;
    request = cached.request.get();
    response = cached.response.get();
    response->Clear();
  } else {
    fresh_request = handler->NewRequest();
    fresh_response = handler->NewResponse();
    request = fresh_request.get();
    response = fresh_response.get();
  }
  // Parsed straight from the receive buffer (ParseFromArray clears first).
  if (!request->ParseFromArray(req.payload.data(), static_cast<int>(req.payload.size()))) {
    SendReply(conn, req.token, ParseFailure(req, *method, *request), nullptr);
  } else {
    ServerContext context;
    ServerContextAccess::Init(&context, method, &conn->peer(), DeadlineFrom(req.timeout_us),
                              conn->peer_identity());
    if (absl::Status md = TakeClientMetadata(req, &context); !md.ok()) {
      SendReply(conn, req.token, std::move(md), nullptr);
    } else {
      running_handlers_.fetch_add(1, std::memory_order_relaxed);
      absl::Status status = options_.interceptor_creators.empty()
                                ? handler->Invoke(&context, *request, response)
                                : InvokeUnary(handler, &context, request, response);
      running_handlers_.fetch_sub(1, std::memory_order_relaxed);
      SendReply(conn, req.token, std::move(status), response, &context);
    }
    AttachmentAccess::ExemptIfKeptPastCall(context.request_attachment(),
                                           context.response_attachment(), req.attachment ? 1 : 0);
  }
  if (reuse) cached.busy = false;
}

ServerImpl::PoolCall::~PoolCall() { LetGoOfAttachments(); }

void ServerImpl::PoolCall::LetGoOfAttachments() {
  request_holder = Attachment();  // the call's own reference, not a keeper
  if (stream != nullptr) {
    // A stream's request attachment is on its watch list (written back on
    // the stream, it stays counted); the context's copy is not a keeper.
    ServerContextAccess::SetRequestAttachment(&context, Buffer());
    stream->ExemptKeptAttachments();
    return;
  }
  AttachmentAccess::ExemptIfKeptPastCall(context.request_attachment(),
                                         context.response_attachment());
}

std::unique_ptr<ServerImpl::PoolCall> ServerImpl::Worker::TakeSpareCall(
    const MethodHandler* handler) {
  auto spares = spare_calls.find(handler);
  if (spares == spare_calls.end() || spares->second.empty()) return std::make_unique<PoolCall>();
  std::unique_ptr<PoolCall> call = std::move(spares->second.back());
  spares->second.pop_back();
  ASAN_UNPOISON_MEMORY_REGION(call.get(), sizeof(PoolCall));
  return call;
}

ServerImpl::Worker::~Worker() {
  for (auto& [handler, spares] : spare_calls) {
    for (auto& call : spares) ASAN_UNPOISON_MEMORY_REGION(call.get(), sizeof(PoolCall));
  }
}

void ServerImpl::Worker::KeepSpareCall(std::unique_ptr<PoolCall> call) {
  if (call->stream != nullptr || call->callback != nullptr || call->request == nullptr ||
      call->response == nullptr || call->request_bytes > kMaxSpareMessageBytes ||
      call->response->ByteSizeLong() > kMaxSpareMessageBytes) {
    return;  // only small synchronous unary calls are reused
  }
  std::vector<std::unique_ptr<PoolCall>>& spares = spare_calls[call->handler];
  if (spares.size() >= kMaxSpareCalls) return;
  // Everything back to a new call's state but the messages (their buffers
  // are what is worth keeping; ParseFromArray and Clear reset them).
  call->conn = nullptr;
  call->token = RequestToken();
  call->refused = false;
  call->answered = false;
  call->phase.store(PoolCall::kQueued, std::memory_order_relaxed);
  call->LetGoOfAttachments();
  call->context.~CallbackServerContext();
  new (&call->context) CallbackServerContext();
  call->request_buffer.reset();
  call->request_payload = absl::string_view();
  call->large_pool = nullptr;
  call->eager_limit = 0;
  call->response_buffer.reset();
  call->response_size = 0;
  call->interceptors.reset();
  call->finish_status = absl::OkStatus();
  call->request_bytes = 0;
  ASAN_POISON_MEMORY_REGION(call.get(), sizeof(PoolCall));
  spares.push_back(std::move(call));
}

void ServerImpl::SubmitToPool(Worker* worker, Connection* conn, const IncomingRequest& req,
                              const std::string* method, const MethodHandler* handler) {
  std::unique_ptr<PoolCall> call = req.stream || handler->callback()
                                       ? std::make_unique<PoolCall>()
                                       : worker->TakeSpareCall(handler);
  if (req.stream) {
    call->stream = std::make_unique<ServerStreamState>(worker->loop.get(), &call->conn,
                                                       req.token, options_.max_message_bytes,
                                                       options_.max_message_bytes, &call->context);
    if (handler->callback() && handler->kind() == RpcKind::kServerStreaming) {
      // The method takes its one request parsed, as a unary one does.
      call->request = handler->NewRequest();
      if (!req.has_message) {
        SendReply(conn, req.token,
                  absl::InternalError(absl::StrCat(*method, ": the client sent no request message")),
                  nullptr);
        return;
      }
      if (!KeepPulledRequest(req, call.get()) &&
          !call->request->ParseFromArray(req.payload.data(),
                                         static_cast<int>(req.payload.size()))) {
        SendReply(conn, req.token, ParseFailure(req, *method, *call->request), nullptr);
        return;
      }
      call->stream->OnMessage(absl::string_view(), /*has_message=*/false, req.end_stream);
    } else {
      // The opening frame's message (server streaming), copied: the receive
      // buffer is re-posted once this step ends.
      call->stream->OnMessage(req.payload, req.has_message, req.end_stream);
    }
    // A callback client-streaming call's response, sent by Finish(OK).
    if (handler->callback()) call->response = handler->NewResponse();
  } else {
    // A spare call brings its messages (ParseFromArray clears the request).
    if (call->request == nullptr) call->request = handler->NewRequest();
    call->request_bytes = req.payload.size();
    if (!KeepPulledRequest(req, call.get()) &&
        !call->request->ParseFromArray(req.payload.data(), static_cast<int>(req.payload.size()))) {
      // Parsed here: the receive buffer is re-posted once this step ends.
      SendReply(conn, req.token, ParseFailure(req, *method, *call->request), nullptr);
      return;
    }
    if (call->response == nullptr) {
      call->response = handler->NewResponse();
    } else {
      call->response->Clear();
    }
    call->large_pool = conn->large_pool();
    call->eager_limit = conn->eager_limit();
  }
  call->worker = worker;
  call->conn = conn;
  call->token = req.token;
  call->handler = handler;
  call->method = method;
  call->peer = conn->peer();
  ServerContextAccess::Init(&call->context, method, &call->peer, DeadlineFrom(req.timeout_us),
                            conn->peer_identity());
  if (absl::Status md = TakeClientMetadata(req, &call->context); !md.ok()) {
    SendReply(conn, req.token, std::move(md), nullptr);
    return;
  }
  if (call->stream != nullptr && call->context.request_attachment()) {
    call->stream->WatchRequestAttachment(call->context.request_attachment());
  }
  PoolCall*& entry =
      worker->pool_calls[conn][req.token.handle()];
  if (entry != nullptr) {
    // The client reused the slot and generation (12 bits wrap) while an
    // earlier call of that key, answered (cancelled) already, still runs:
    // keep that one where OnClosed and Shutdown still find it.
    worker->answered_calls[conn].push_back(entry);
  }
  entry = call.get();
  pool_calls_.fetch_add(1, std::memory_order_relaxed);
  if (handler->callback()) {
    PoolCall* raw = call.get();
    call->callback = std::make_unique<ServerCallbackCall>(
        worker->loop.get(), handler->kind(), call->stream.get(), call->response.get(),
        [this, raw](absl::Status status) { AnswerPoolCall(raw, std::move(status)); },
        [this, raw] {
          delete raw;
          // Last, as in RunOnPool: Shutdown stops the workers after this.
          pool_calls_.fetch_sub(1, std::memory_order_release);
        },
        // A large unary response is serialised by the thread that finishes.
        [this, raw] { SerializeLargeResponse(raw); });
    if (call->stream != nullptr) call->stream->SetReactions(call->callback.get());
    if (handler->run_inline() && !call->request_buffer && !call->request_holder) {
      // A callback method never blocks: run_inline runs it right here
      // (unless its request still has to be parsed from a large buffer).
      StartCallback(std::move(call));
      return;
    }
  }
  pool_->Submit([this, call = std::move(call)]() mutable { RunOnPool(std::move(call)); });
  if (draining_.load(std::memory_order_acquire)) {
    // Shutdown began after Dispatch looked, and may have emptied the queue
    // before this call joined it: answer what is queued now (not started).
    for (auto& task : pool_->TakeQueued()) std::move(task)();
  }
}

bool ServerImpl::KeepPulledRequest(const IncomingRequest& req, PoolCall* call) {
  if (req.payload_in_attachment) {
    call->request_holder = req.attachment;
    call->request_payload = req.payload;
    return true;
  }
  if (req.payload_buffer == nullptr || !*req.payload_buffer) return false;
  call->request_buffer = std::move(*req.payload_buffer);
  call->request_payload = req.payload;
  return true;
}

absl::Status ServerImpl::ParseKeptRequest(PoolCall* call) {
  if (!call->request_buffer && !call->request_holder) return absl::OkStatus();
  const bool parsed = call->request->ParseFromArray(
      call->request_payload.data(), static_cast<int>(call->request_payload.size()));
  const size_t size = call->request_payload.size();
  call->request_buffer.reset();
  call->request_holder = Attachment();
  call->request_payload = absl::string_view();
  if (parsed) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("request of ", size, " bytes to ", *call->method,
                                          " did not parse as ", call->request->GetTypeName()));
}

void ServerImpl::StartCallback(std::unique_ptr<PoolCall> call) {
  running_handlers_.fetch_add(1, std::memory_order_relaxed);
  call->phase.store(PoolCall::kStarted, std::memory_order_relaxed);
  PoolCall* raw = call.release();  // freed by its callback's release, after OnDone
  if (absl::Status parsed = ParseKeptRequest(raw); !parsed.ok()) {
    running_handlers_.fetch_sub(1, std::memory_order_relaxed);
    raw->callback->Finish(std::move(parsed));
    return;
  }
  if (!options_.interceptor_creators.empty()) {
    raw->interceptors = InterceptorChain::ForServer(options_.interceptor_creators,
                                                    raw->handler->kind(), &raw->context);
  }
  if (raw->interceptors != nullptr) {
    InterceptorChain* chain = raw->interceptors.get();
    raw->callback->set_interceptors(chain, &raw->context);
    if (raw->stream != nullptr) raw->stream->set_interceptors(chain);
    absl::Status failed =
        chain->ServerRecvInitialMetadata(ServerContextAccess::ClientMetadata(&raw->context));
    if (!failed.ok()) {
      running_handlers_.fetch_sub(1, std::memory_order_relaxed);
      raw->callback->Finish(std::move(failed));
      return;
    }
    // Unary and server streaming: the one request, parsed already.
    if (raw->request != nullptr) {
      chain->ServerRecvMessage(raw->request.get(), raw->request->ByteSizeLong());
    }
  }
  ServerReactorBase* reactor =
      raw->handler->InvokeCallback(&raw->context, raw->request.get(), raw->response.get());
  running_handlers_.fetch_sub(1, std::memory_order_relaxed);
  if (reactor == nullptr) {
    raw->callback->Finish(absl::UnimplementedError(
        absl::StrCat("method ", *raw->method, " is not implemented by this server")));
    return;
  }
  raw->callback->Bind(reactor);
}

void ServerImpl::RunOnPool(std::unique_ptr<PoolCall> call) {
  absl::Status status;
  // Claimed once: a call Shutdown refused (CancelPoolCalls) never starts,
  // and one that starts is never refused.
  int expected = PoolCall::kQueued;
  const bool start = !draining_.load(std::memory_order_acquire) &&
                     call->phase.compare_exchange_strong(expected, PoolCall::kStarted);
  if (!start) {
    expected = PoolCall::kQueued;
    call->phase.compare_exchange_strong(expected, PoolCall::kRefused);
    status = absl::UnavailableError(absl::StrCat("server ", address_, " shutting down: ",
                                                 *call->method, " was not started"));
    call->refused = true;
  } else if (call->callback != nullptr) {
    // Its pool_calls_ count goes when its reactor is done.
    StartCallback(std::move(call));
    return;
  } else {
    running_handlers_.fetch_add(1, std::memory_order_relaxed);
    if (call->stream != nullptr) {
      status = InvokeStream(call.get());
    } else if (status = ParseKeptRequest(call.get()); status.ok()) {
      status = options_.interceptor_creators.empty()
                   ? call->handler->Invoke(&call->context, *call->request, call->response.get())
                   : InvokeUnary(call->handler, &call->context, call->request.get(),
                                 call->response.get());
      if (status.ok()) SerializeLargeResponse(call.get());
    }
    running_handlers_.fetch_sub(1, std::memory_order_relaxed);
  }
  Worker* worker = call->worker;
  // The reply is posted as soon as the worker runs this task: the handler
  // does not wait for other handlers, or for the worker's poll batch. The
  // task's node is the call's own, and the task owns the call.
  PoolCall* raw = call.get();
  raw->finish_status = std::move(status);
  raw->finish_task.fn = [this, owned = std::move(call)]() mutable {
    absl::Status s = std::move(owned->finish_status);
    FinishPoolCall(std::move(owned), std::move(s));
  };
  worker->loop->Post(&raw->finish_task);
  // Last: Shutdown waits for this count before it stops the workers, so
  // the task above is never posted to a stopped loop.
  pool_calls_.fetch_sub(1, std::memory_order_release);
}

absl::Status ServerImpl::InvokeUnary(const MethodHandler* handler, ServerContext* context,
                                     google::protobuf::MessageLite* request,
                                     google::protobuf::MessageLite* response) const {
  std::unique_ptr<InterceptorChain> chain =
      InterceptorChain::ForServer(options_.interceptor_creators, RpcKind::kUnary, context);
  if (chain == nullptr) return handler->Invoke(context, *request, response);
  absl::Status status =
      chain->ServerRecvInitialMetadata(ServerContextAccess::ClientMetadata(context));
  if (status.ok()) {
    chain->ServerRecvMessage(request, request->ByteSizeLong());
    status = handler->Invoke(context, *request, response);
  }
  chain->ServerSendInitialMetadata(ServerContextAccess::MutableInitialMetadata(context));
  if (status.ok()) chain->ServerSendMessage(*response, response->ByteSizeLong());
  chain->ServerSendStatus(&status, ServerContextAccess::MutableTrailingMetadata(context));
  return status;
}

absl::Status ServerImpl::InvokeStream(PoolCall* call) const {
  std::unique_ptr<InterceptorChain> chain;
  if (!options_.interceptor_creators.empty()) {
    chain = InterceptorChain::ForServer(options_.interceptor_creators, call->handler->kind(),
                                        &call->context);
  }
  absl::Status status;
  if (chain != nullptr) {
    status = chain->ServerRecvInitialMetadata(ServerContextAccess::ClientMetadata(&call->context));
    call->stream->set_interceptors(chain.get());
  }
  if (status.ok()) {
    ServerStream stream(call->stream.get());
    status = call->handler->InvokeStream(&call->context, &stream);
    if (absl::Status failure = call->stream->failure(); !failure.ok()) status = failure;
  }
  if (chain != nullptr) {
    // Initial metadata no message carried goes with the trailers.
    if (!call->stream->headers_sent()) {
      chain->ServerSendInitialMetadata(
          ServerContextAccess::MutableInitialMetadata(&call->context));
    }
    chain->ServerSendStatus(&status,
                            ServerContextAccess::MutableTrailingMetadata(&call->context));
    call->stream->set_interceptors(nullptr);
  }
  return status;
}

void ServerImpl::FinishPoolCall(std::unique_ptr<PoolCall> call, absl::Status status) {
  AnswerPoolCall(call.get(), std::move(status));
  Worker* worker = call->worker;
  worker->KeepSpareCall(std::move(call));
}

void ServerImpl::AnswerPoolCall(PoolCall* call, absl::Status status) {
  Worker* worker = call->worker;
  if (call->conn == nullptr) return;  // the connection closed: nobody to answer
  auto calls = worker->pool_calls.find(call->conn);
  if (calls != worker->pool_calls.end()) {
    auto it =
        calls->second.find(call->token.handle());
    // An emptied map stays until the connection closes (OnClosed): the
    // next call then inserts without allocating.
    if (it != calls->second.end() && it->second == call) calls->second.erase(it);
  }
  if (auto old = worker->answered_calls.find(call->conn); old != worker->answered_calls.end()) {
    std::vector<PoolCall*>& v = old->second;
    v.erase(std::remove(v.begin(), v.end(), call), v.end());
    if (v.empty()) worker->answered_calls.erase(old);
  }
  if (call->answered) return;
  call->answered = true;
  if (call->refused && call->stream == nullptr) {
    call->conn->RefuseRequest(call->token, std::string(status.message()));
    return;
  }
  if (call->stream != nullptr) {
    // A callback call's stream failure (a message that did not parse, or
    // too large) replaces its status, as RunOnPool does for a handler's.
    if (call->callback != nullptr) {
      if (absl::Status failure = call->stream->failure(); !failure.ok()) status = failure;
    }
    // The stream's trailers: status, message, details and metadata (after
    // every message the handler wrote: those tasks ran before this one).
    const Metadata none;
    const Metadata& initial = call->stream->headers_sent()
                                  ? none
                                  : ServerContextAccess::InitialMetadata(&call->context);
    const Metadata& trailing = ServerContextAccess::TrailingMetadata(&call->context);
    std::string meta = EncodeHandlerMetadata(initial, trailing, &status);
    call->conn->SendResponse(call->token, status.code(), std::string(status.message()),
                             status.ok() ? std::string() : EncodeStatusPayloads(status),
                             std::move(meta));
    return;
  }
  if (call->response_buffer && status.ok()) {
    call->conn->SendRegisteredResponse(call->token, std::move(call->response_buffer),
                                       call->response_size);
    return;
  }
  SendReply(call->conn, call->token, std::move(status), call->response.get(), &call->context);
}

void ServerImpl::SerializeLargeResponse(PoolCall* call) {
  if (call->large_pool == nullptr || !call->context.response_attachment().empty() ||
      !ServerContextAccess::InitialMetadata(&call->context).empty() ||
      !ServerContextAccess::TrailingMetadata(&call->context).empty()) {
    return;  // SendReply on the worker handles metadata
  }
  const size_t size = call->response->ByteSizeLong();
  if (Connection::MessageSendsEagerly(size, call->eager_limit) ||
      size > options_.max_message_bytes) {
    return;
  }
  absl::StatusOr<LargeBuffer*> buf = call->large_pool->Get(kRegisteredResponseOffset + size);
  if (!buf.ok()) return;  // SendReply tries again, then queues it as bytes
  call->response->SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>((*buf)->data + kRegisteredResponseOffset));
  call->response_buffer = PooledBuffer(call->large_pool, *buf);
  call->response_size = size;
}

absl::Status ServerImpl::TakeClientMetadata(const IncomingRequest& req,
                                            ServerContext* context) const {
  if (req.attachment) {
    ServerContextAccess::SetRequestAttachment(context,
                                              AttachmentAccess::FromTransport(req.attachment));
  }
  if (req.meta.empty()) return absl::OkStatus();
  Metadata* md = ServerContextAccess::ClientMetadata(context);
  if (!DecodeMetadata(req.meta, md)) {
    return absl::InternalError(
        absl::StrCat("client metadata of ", req.meta.size(), " bytes did not decode"));
  }
  if (MetadataBytes(*md) > options_.max_metadata_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("client metadata of ", MetadataBytes(*md),
                                                     " bytes exceeds max_metadata_bytes ",
                                                     options_.max_metadata_bytes));
  }
  // ':' keys are the server's own (HTTP/2 pseudo-headers; the auth
  // processor's ":path"): a client cannot send one through ClientContext,
  // so one here is a forgery, refused before anything reads it.
  for (const auto& [key, value] : *md) {
    if (!key.empty() && key[0] == ':') {
      absl::Status reserved = absl::InternalError(
          absl::StrCat("client metadata key '", key, "' is reserved (keys starting with ':')"));
      md->clear();
      return reserved;
    }
  }
  return absl::OkStatus();
}

void ServerImpl::SendReply(Connection* conn, const RequestToken& token, absl::Status status,
                           const google::protobuf::MessageLite* response,
                           const ServerContext* context) {
  std::string meta;
  if (context != nullptr) {
    meta = EncodeHandlerMetadata(ServerContextAccess::InitialMetadata(context),
                                 ServerContextAccess::TrailingMetadata(context), &status);
  }
  if (!status.ok()) {
    // Binary details travel as the payload of the error response.
    conn->SendResponse(token, status.code(), std::string(status.message()),
                       EncodeStatusPayloads(status), std::move(meta));
    return;
  }
  if (context != nullptr && !context->response_attachment().empty()) {
    // With an attachment: the reply goes as bytes beside it.
    std::string payload;
    response->SerializeToString(&payload);
    conn->SendResponse(token, absl::StatusCode::kOk, std::string(), std::move(payload),
                       std::move(meta),
                       AttachmentAccess::ToTransport(context->response_attachment()));
    return;
  }
  if (!meta.empty()) {
    // With metadata: the reply goes as bytes (the transport may put large
    // metadata in front of it).
    std::string payload;
    response->SerializeToString(&payload);
    conn->SendResponse(token, absl::StatusCode::kOk, std::string(), std::move(payload),
                       std::move(meta));
    return;
  }
  const size_t size = response->ByteSizeLong();
  // Small: serialised straight into the registered send buffer.
  const bool sent = conn->TrySendResponseInPlace(
      token, size,
      [](const void* source, char* out) {
        static_cast<const google::protobuf::MessageLite*>(source)
            ->SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out));
      },
      response);
  if (sent) return;
  LargeBufferPool* pool = conn->large_pool();
  if (!Connection::MessageSendsEagerly(size, conn->eager_limit()) && pool != nullptr &&
      size <= options_.max_message_bytes) {
    // Large: serialise straight into registered memory (no extra copy).
    absl::StatusOr<LargeBuffer*> buf = pool->Get(kRegisteredResponseOffset + size);
    if (buf.ok()) {
      response->SerializeWithCachedSizesToArray(
          reinterpret_cast<uint8_t*>((*buf)->data + kRegisteredResponseOffset));
      conn->SendRegisteredResponse(token, PooledBuffer(pool, *buf), size);
      return;
    }
  }
  // Queued behind others or out of credits: serialised now, copied into
  // the send buffer later (counted in EngineStats::payload_bytes_copied).
  std::string payload;
  response->SerializeToString(&payload);
  conn->SendResponse(token, absl::StatusCode::kOk, std::string(), std::move(payload));
}

void ServerImpl::CancelPoolCalls(Worker* worker) {
  for (auto& [conn, calls] : worker->pool_calls) {
    for (auto& [key, call] : calls) {
      if (call->answered) continue;
      call->answered = true;
      int expected = PoolCall::kQueued;
      if (!call->phase.compare_exchange_strong(expected, PoolCall::kRefused) &&
          expected == PoolCall::kStarted) {
        conn->SendResponse(call->token, absl::StatusCode::kUnavailable,
                           absl::StrCat("server shutting down: ", *call->method,
                                        " did not finish within the grace period"),
                           std::string());
      } else {
        conn->RefuseRequest(call->token, absl::StrCat("server ", address_, " shutting down: ",
                                                      *call->method, " was not started"));
      }
      CancelPoolCall(call);
    }
  }
}

void ServerImpl::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kRunning) return;
    state_ = State::kStopping;
  }
  // Out of discovery first: resolvers stop handing out this address.
  if (registration_ != nullptr) registration_->Deregister();
  for (auto& w : workers_) {
    CHECK(!w->loop->InLoopThread()) << "Server::Shutdown called from a service method";
  }
  // 0. Drain (HTTP/2's GOAWAY): no new connection; every client is told
  //    (kGoAway) and answers once it will send no more calls on that
  //    connection, so the calls it sent before arrive and are served as
  //    usual. Bounded by kGoAwayAnswerWait (and the grace).
  listener_->StopAccepting();
  for (auto& w : workers_) {
    Worker* wp = w.get();
    w->loop->Post([this, wp] {
      for (Connection* c : wp->conns) {
        if (c->SendGoAway()) goaway_unanswered_.fetch_add(1);
      }
      goaway_workers_done_.fetch_add(1);
    });
  }
  const absl::Time goaway_until = absl::Now() + std::min(grace, kGoAwayAnswerWait);
  while ((goaway_workers_done_.load() < static_cast<int>(workers_.size()) ||
          goaway_unanswered_.load() > 0) &&
         absl::Now() < goaway_until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  // 1. No handler starts from now on: new requests and queued pool calls
  //    are refused unstarted (UNAVAILABLE). The listener, which refuses
  //    connections since step 0, goes with its acceptor.
  draining_.store(true, std::memory_order_release);
  // Calls still waiting for a pool thread are answered now, here, rather
  // than when a thread frees up (each sees draining_ and starts nothing).
  for (auto& task : pool_->TakeQueued()) std::move(task)();
  listener_->Close();
  // 2. Handlers that run may finish within `grace`; their replies are posted
  //    as they return.
  const absl::Time until = absl::Now() + grace;
  while ((pool_calls_.load(std::memory_order_acquire) > 0 ||
          running_handlers_.load(std::memory_order_relaxed) > 0) &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  // 3. The rest are cancelled: their clients get UNAVAILABLE now, their
  //    contexts report IsCancelled(). Then wait for those handlers to
  //    return (one that ignores IsCancelled() holds Shutdown up; it is
  //    logged by method name every second).
  if (pool_calls_.load(std::memory_order_acquire) > 0) {
    for (auto& w : workers_) {
      Worker* wp = w.get();
      w->loop->Post([this, wp] { CancelPoolCalls(wp); });
    }
    absl::Time next_log = absl::Now() + absl::Seconds(1);
    while (pool_calls_.load(std::memory_order_acquire) > 0) {
      absl::SleepFor(absl::Milliseconds(1));
      if (absl::Now() >= next_log) {
        next_log = absl::Now() + absl::Seconds(1);
        for (auto& w : workers_) {
          Worker* wp = w.get();
          w->loop->Post([wp] {
            for (const auto& [conn, calls] : wp->pool_calls) {
              for (const auto& [key, call] : calls) {
                LOG(WARNING) << "Server::Shutdown waits for a cancelled handler of "
                             << *call->method << " (from " << call->peer
                             << ") that has not returned";
              }
            }
          });
        }
      }
    }
  }
  // 4. Disconnect every client once what was queued for it is delivered
  //    (bounded), then join the workers; EventLoop::Stop destroys the
  //    connections (QP first) after they are closed. Replies posted above
  //    are queued first: a worker runs its tasks in order.
  for (auto& w : workers_) {
    Worker* wp = w.get();
    w->loop->Post([wp] {
      std::vector<Connection*> conns(wp->conns.begin(), wp->conns.end());
      for (Connection* c : conns) {
        c->CloseWhenSent(absl::UnavailableError("server shutting down"), kCloseWhenSentBound);
      }
    });
  }
  const absl::Time close_until = absl::Now() + kCloseWhenSentBound + absl::Milliseconds(100);
  while (open_connections_.load() > 0 && absl::Now() < close_until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  for (auto& w : workers_) {
    Worker* wp = w.get();
    w->loop->Stop([wp] {
      std::vector<Connection*> conns(wp->conns.begin(), wp->conns.end());
      for (Connection* c : conns) {
        c->Shutdown(absl::UnavailableError("server shutting down"));
      }
    });
  }
  pool_->Stop();
  absl::MutexLock lock(&mu_);
  state_ = State::kStopped;
}

void ServerImpl::Wait() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ == State::kStopped || state_ == State::kNew;
  };
  mu_.Await(absl::Condition(&done));
}

}  // namespace internal
}  // namespace rdmarpc
