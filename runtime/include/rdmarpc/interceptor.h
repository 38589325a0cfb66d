// rdmarpc/interceptor.h: client and server interceptors, shaped as gRPC's
// experimental interceptor API (grpcpp/support/interceptor.h,
// client_interceptor.h, server_interceptor.h).
//
// An interceptor sees every call of a channel or server at fixed hook points
// (InterceptionHookPoints): it may read and change metadata, observe each
// message and the final status, fail a call before it is sent (client) or
// before its handler runs (server), and run code around the handler. A
// factory registered on ChannelOptions / ServerOptions makes one
// Interceptor per call from the call's ClientRpcInfo / ServerRpcInfo:
//
//   class Stamp final : public rdmarpc::experimental::Interceptor {
//    public:
//     void Intercept(rdmarpc::experimental::InterceptorBatchMethods* m) override {
//       using rdmarpc::experimental::InterceptionHookPoints;
//       if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
//         m->GetSendInitialMetadata()->emplace("x-stamp", "1");
//       }
//     }
//   };
//   class StampFactory final
//       : public rdmarpc::experimental::ClientInterceptorFactoryInterface {
//     rdmarpc::experimental::Interceptor* CreateClientInterceptor(
//         rdmarpc::experimental::ClientRpcInfo*) override { return new Stamp; }
//   };
//   rdmarpc::ChannelOptions options;
//   options.interceptor_creators.push_back(std::make_shared<StampFactory>());
//   auto channel = rdmarpc::CreateChannel("10.0.0.7:7000", options);
//
// How this differs from gRPC, and why:
//  - Interception is synchronous. gRPC hands Intercept a batch and waits for
//    the interceptor to call Proceed() (or Hijack()), possibly later and on
//    another thread; here returning from Intercept is Proceed(). Calls run
//    on the thread polling the RDMA completion queue, where a continuation
//    per hook would cost every call a queue hop, and the interceptors this
//    API exists for (metrics, access logs, authentication by metadata) all
//    decide at once. An interceptor that must wait blocks the thread it
//    runs on (see "Threads" below: never do that on a polling thread).
//  - Fail(status) replaces Hijack(): it is how an interceptor ends a call
//    early with a status of its own (see Fail).
//  - Intercept runs once per hook point, so exactly one
//    QueryInterceptionHookPoint is true per call of Intercept (gRPC may set
//    several in one batch; code written for gRPC that tests each point in
//    turn works unchanged).
//  - No exceptions: a hook reports failure only through Fail. rdmarpc is
//    built for code without exceptions; one escaping Intercept is not
//    caught (std::terminate on a runtime thread).
//
// Order. Interceptors run as nested layers, the first registered outermost,
// as gRPC orders them: on the way in to the wire (client PRE_SEND_*) or to
// the handler (server POST_RECV_*) in registration order 0, 1, ..., n-1; on
// the way back (client POST_RECV_*, server PRE_SEND_*) in reverse, n-1, ...,
// 0. So with interceptors A, B, C on a server a unary call runs
//   A B C POST_RECV_INITIAL_METADATA, A B C POST_RECV_MESSAGE, handler,
//   C B A PRE_SEND_INITIAL_METADATA, C B A PRE_SEND_MESSAGE,
//   C B A PRE_SEND_STATUS.
//
// Around the handler. On the server, POST_RECV_INITIAL_METADATA (and a
// unary call's POST_RECV_MESSAGE) run on the thread that then runs the
// handler, right before it; for a synchronous handler PRE_SEND_STATUS runs
// on the same thread right after it returned. So an interceptor may set
// thread-local state (a trace span, a log context, a deadline budget) for
// the handler's whole run and clear it in PRE_SEND_STATUS.
//
// Threads. A unary call's hooks never run at the same time. A stream's may:
// its send-side hooks (PRE_SEND_*) run on the thread that writes,
// half-closes or finishes, its receive-side hooks (POST_RECV_*) on the
// thread that reads and on the thread polling the channel (or the server's
// worker), as the user's Read, Write and Finish run on several threads. Only
// the first hook (client PRE_SEND_INITIAL_METADATA, server
// POST_RECV_INITIAL_METADATA) runs before all others. An interceptor
// keeping state across hooks guards it (a mutex, or atomics for counters).
// Which thread runs each hook is given with the hook below. Hooks on a
// thread polling a completion queue (a channel engine thread, a server
// worker) must not block: every call on that thread waits for them.
//
// Cost. A channel or server without interceptors runs the code it runs
// without this API, plus one test of an empty vector per call (and of a null
// pointer per stream message): no allocation, no virtual call, the same
// verbs. With them, each call allocates its interceptors and one chain, and
// each hook is one virtual call per interceptor; bench/HISTORY.md gives the
// measured cost (~0.15 us per side for one trivial interceptor).
#ifndef RDMARPC_INTERCEPTOR_H_
#define RDMARPC_INTERCEPTOR_H_

#include <cstddef>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

class Channel;
class ClientContext;
class ServerContext;

namespace internal {
class InterceptorChain;
}  // namespace internal

namespace experimental {

// Where in a call Intercept runs (gRPC's names; the points gRPC has only for
// hijacking, PRE_RECV_* and POST_SEND_MESSAGE, do not exist here).
enum class InterceptionHookPoints {
  // Client: once, before anything is sent; on the thread that starts the
  // call (the caller of the blocking call, of async()->Method, of a
  // stream's constructor, of a streaming reactor's stub method, or of a
  // unary reactor's StartCall). GetSendInitialMetadata
  // is the call's metadata and may be changed (gRPC's key and value rules
  // apply after the hook: a bad entry fails the call INTERNAL). Fail ends
  // the call here, with nothing sent.
  // Server: before the server's initial metadata goes out (with a unary
  // response, or before a stream's first message, or with the trailers when
  // no message went); on the thread that produced it. GetSendInitialMetadata
  // may be changed.
  PRE_SEND_INITIAL_METADATA,
  // Each message sent, before it is: client requests on the writing thread
  // (a unary request with PRE_SEND_INITIAL_METADATA); server responses on
  // the handler's thread (a reactor's: the thread starting the write).
  // GetSendMessage and GetSendMessageSize describe it.
  PRE_SEND_MESSAGE,
  // Server only: the handler's status is about to be sent; on the handler's
  // thread after it returned (a reactor's: the thread calling Finish).
  // GetSendStatus and GetSendTrailingMetadata may be changed. Runs once for
  // every call whose interceptors ran POST_RECV_INITIAL_METADATA, handler
  // run or not; ServerContext::IsCancelled() tells when the client is gone
  // or was answered already (cancelled, deadline, Shutdown), and then
  // nothing more is sent.
  PRE_SEND_STATUS,
  // Client streams only: the client half-closes (WritesDone, a last write,
  // or Finish), on that thread.
  PRE_SEND_CLOSE,
  // Client: the server's initial metadata arrived (GetRecvInitialMetadata);
  // unary: right before POST_RECV_MESSAGE / POST_RECV_STATUS, on the thread
  // that delivers the status, when the request went out (ClientContext::
  // peer() is set); streams: on the thread polling the channel, when the
  // server's headers arrive or, if none came, right before POST_RECV_STATUS
  // when anything came from the server. Not run for a call that never
  // reached a server.
  // Server: once, before the handler runs, on the thread that will run it
  // (a handler-pool thread, or the worker for a run_inline method).
  // GetRecvInitialMetadata is the client's metadata and may be changed (the
  // handler sees the change in ServerContext::client_metadata()). Fail ends
  // the call here: the handler does not run.
  POST_RECV_INITIAL_METADATA,
  // Each message received and parsed: GetRecvMessage and GetRecvMessageSize.
  // Client: a unary response before POST_RECV_STATUS (only when the call is
  // OK); a stream's message in Read (that thread) or, for a reactor, before
  // OnReadDone (the thread polling the channel). Server: a unary request
  // before the handler; a stream's in Read (the handler's thread) or before
  // a reactor's OnReadDone (the worker).
  POST_RECV_MESSAGE,
  // Client only: the call's final status (GetRecvStatus, may be changed:
  // the caller gets the change) and the server's trailing metadata
  // (GetRecvTrailingMetadata). Runs exactly once for every call, whatever
  // ended it (server status, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE, a
  // refusal before sending, an interceptor's Fail), on the thread that
  // delivers the status: the blocking caller, the thread running a unary
  // callback or reactor's OnDone, or the thread polling the channel for a
  // stream (before Finish returns or OnDone runs).
  POST_RECV_STATUS,
  NUM_INTERCEPTION_HOOKS
};

// What Intercept may look at and change at the current hook point. Made by
// the runtime; valid only during Intercept. Each getter says at which hook
// points it returns something; elsewhere it returns nullptr (or 0). Pointers
// are valid until Intercept returns.
class RDMARPC_EXPORT InterceptorBatchMethods {
 public:
  using Metadata = std::multimap<std::string, std::string>;

  InterceptorBatchMethods(const InterceptorBatchMethods&) = delete;
  InterceptorBatchMethods& operator=(const InterceptorBatchMethods&) = delete;

  // True when Intercept runs for `type`.
  bool QueryInterceptionHookPoint(InterceptionHookPoints type) const { return type == hook_; }
  InterceptionHookPoints hook_point() const { return hook_; }

  // PRE_SEND_INITIAL_METADATA: the metadata being sent (mutable).
  Metadata* GetSendInitialMetadata() { return send_initial_metadata_; }
  // PRE_SEND_MESSAGE: the message, and its serialised size in bytes (what
  // goes on the wire, without framing).
  const google::protobuf::MessageLite* GetSendMessage() const { return send_message_; }
  size_t GetSendMessageSize() const { return send_message_size_; }
  // PRE_SEND_STATUS (server): the status and trailing metadata to be sent
  // (both mutable).
  absl::Status* GetSendStatus() { return send_status_; }
  Metadata* GetSendTrailingMetadata() { return send_trailing_metadata_; }
  // POST_RECV_INITIAL_METADATA: the peer's initial metadata (mutable on the
  // server; on the client a change is seen by the caller).
  Metadata* GetRecvInitialMetadata() { return recv_initial_metadata_; }
  // POST_RECV_MESSAGE: the parsed message (the caller's or handler's
  // object; mutable, as gRPC's GetRecvMessage is) and its serialised size in
  // bytes.
  google::protobuf::MessageLite* GetRecvMessage() { return recv_message_; }
  size_t GetRecvMessageSize() const { return recv_message_size_; }
  // POST_RECV_STATUS (client): the final status and the server's trailing
  // metadata (both mutable).
  absl::Status* GetRecvStatus() { return recv_status_; }
  Metadata* GetRecvTrailingMetadata() { return recv_trailing_metadata_; }

  // Ends the call early with `status` (must not be OK: an OK status is
  // turned into INTERNAL naming the hook). Honoured at client
  // PRE_SEND_INITIAL_METADATA (nothing is sent; the call ends with `status`
  // as if the server had answered it) and server POST_RECV_INITIAL_METADATA
  // (the handler does not run; the client gets `status` with the trailing
  // metadata added to the ServerContext, ServerRpcInfo::server_context()).
  // Interceptors after this one see nothing of the call (they were made and
  // are deleted unused); this one and those before it then see the call's
  // remaining outward hooks in reverse order: POST_RECV_STATUS (client), or
  // PRE_SEND_INITIAL_METADATA and PRE_SEND_STATUS (server), with `status`.
  // At any other hook point Fail is ignored (and logged at ERROR): a message
  // or status already on its way cannot be recalled.
  //
  // The code is the caller's to act on, so pick it as gRPC's auth and
  // quota interceptors do: UNAUTHENTICATED (no or bad credentials: the
  // caller fixes them, retrying as is fails again), PERMISSION_DENIED
  // (known caller, not allowed: do not retry), RESOURCE_EXHAUSTED (a quota
  // or rate limit: retry later, with backoff), INVALID_ARGUMENT (the
  // request's metadata is malformed: do not retry), UNAVAILABLE (this
  // server should not take the call now: safe to retry elsewhere, since
  // nothing ran). The message reaches the caller unchanged; say what was
  // refused and why ("missing x-token for /pkg.S/M").
  void Fail(absl::Status status);

 private:
  friend class internal::InterceptorChain;
  InterceptorBatchMethods() = default;

  InterceptionHookPoints hook_ = InterceptionHookPoints::NUM_INTERCEPTION_HOOKS;
  Metadata* send_initial_metadata_ = nullptr;
  const google::protobuf::MessageLite* send_message_ = nullptr;
  size_t send_message_size_ = 0;
  absl::Status* send_status_ = nullptr;
  Metadata* send_trailing_metadata_ = nullptr;
  Metadata* recv_initial_metadata_ = nullptr;
  google::protobuf::MessageLite* recv_message_ = nullptr;
  size_t recv_message_size_ = 0;
  absl::Status* recv_status_ = nullptr;
  Metadata* recv_trailing_metadata_ = nullptr;
  absl::Status failure_;
  bool failed_ = false;
};

// One interceptor of one call; made by a factory as the call starts and
// deleted by the runtime after the call's last hook: a unary client call's
// right after POST_RECV_STATUS (before the caller or OnDone hears the end);
// a client stream's when the runtime lets go of the stream (after Finish or
// OnDone, once the stream object is destroyed); a server call's after
// PRE_SEND_STATUS (a callback call's: after its reactor's OnDone).
class RDMARPC_EXPORT Interceptor {
 public:
  virtual ~Interceptor() = default;
  // Runs once per hook point of the call (see InterceptionHookPoints for
  // the thread of each). `methods` is valid only during the call.
  virtual void Intercept(InterceptorBatchMethods* methods) = 0;
};

// The four kinds of RPC (gRPC's ClientRpcInfo::Type / ServerRpcInfo::Type).
enum class RpcType { UNARY, CLIENT_STREAMING, SERVER_STREAMING, BIDI_STREAMING };

// What a client interceptor knows about its call. Lives as long as the
// call's interceptors; read it from any hook.
class RDMARPC_EXPORT ClientRpcInfo {
 public:
  using Type = RpcType;
  ClientRpcInfo(const ClientRpcInfo&) = delete;
  ClientRpcInfo& operator=(const ClientRpcInfo&) = delete;

  // "/package.Service/Method".
  const std::string& method() const { return method_; }
  Type type() const { return type_; }
  // The call's channel and context (the context outlives the call's
  // interceptors; the channel too).
  Channel* channel() const { return channel_; }
  ClientContext* client_context() const { return context_; }
  // The server the call went to ("ip:port"): empty until the request was
  // handed to a connection, and still empty at POST_RECV_STATUS when it
  // never was (refused, no connection). ClientContext::peer(), which the
  // thread polling the channel sets: read it at POST_RECV_* hooks (or in a
  // blocking unary call's hooks), not at a stream's PRE_SEND_MESSAGE, where
  // it may be being set.
  const std::string& peer() const;
  // When the call started (before its first hook) and ended (set right
  // before POST_RECV_STATUS; absl::InfinitePast() until then: read it in
  // that hook, where no other hook of the call writes it).
  absl::Time start_time() const { return start_time_; }
  absl::Time end_time() const { return end_time_; }

 private:
  friend class internal::InterceptorChain;
  ClientRpcInfo() = default;
  std::string method_;
  Type type_ = Type::UNARY;
  Channel* channel_ = nullptr;
  ClientContext* context_ = nullptr;
  absl::Time start_time_ = absl::InfinitePast();
  absl::Time end_time_ = absl::InfinitePast();
};

// What a server interceptor knows about its call. Lives as long as the
// call's interceptors; read it from any hook.
class RDMARPC_EXPORT ServerRpcInfo {
 public:
  using Type = RpcType;
  ServerRpcInfo(const ServerRpcInfo&) = delete;
  ServerRpcInfo& operator=(const ServerRpcInfo&) = delete;

  // "/package.Service/Method".
  const std::string& method() const;
  Type type() const { return type_; }
  // The call's context: deadline, IsCancelled, and AddInitialMetadata /
  // AddTrailingMetadata (how an interceptor that Fails sends trailing
  // metadata). For a callback method it is the CallbackServerContext.
  ServerContext* server_context() const { return context_; }
  // The client's address, "ip:port".
  const std::string& peer() const;
  // When the interceptors were made (right before the handler was to run)
  // and when PRE_SEND_STATUS began (absl::InfinitePast() until then: read
  // it in that hook).
  absl::Time start_time() const { return start_time_; }
  absl::Time end_time() const { return end_time_; }

 private:
  friend class internal::InterceptorChain;
  ServerRpcInfo() = default;
  Type type_ = Type::UNARY;
  ServerContext* context_ = nullptr;
  absl::Time start_time_ = absl::InfinitePast();
  absl::Time end_time_ = absl::InfinitePast();
};

// Makes the interceptor of one call. Registered on ChannelOptions::
// interceptor_creators / ServerOptions::interceptor_creators (shared: the
// options are copied; the factory must live while any channel or server
// made with them does). Called on the thread that starts the call (client)
// or will run its handler (server), possibly on several threads at once:
// it must be thread-safe. Returns a new Interceptor, owned by the runtime
// from then on, or nullptr to stay out of this call.
class RDMARPC_EXPORT ClientInterceptorFactoryInterface {
 public:
  virtual ~ClientInterceptorFactoryInterface() = default;
  virtual Interceptor* CreateClientInterceptor(ClientRpcInfo* info) = 0;
};

class RDMARPC_EXPORT ServerInterceptorFactoryInterface {
 public:
  virtual ~ServerInterceptorFactoryInterface() = default;
  virtual Interceptor* CreateServerInterceptor(ServerRpcInfo* info) = 0;
};

}  // namespace experimental
}  // namespace rdmarpc

#endif  // RDMARPC_INTERCEPTOR_H_
