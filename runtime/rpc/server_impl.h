// server_impl.h: the runtime behind rdmarpc::Server — the transport's
// listener (its own acceptor loop), worker loops that own connections and
// run handlers, and method dispatch.
#ifndef RDMARPC_RUNTIME_RPC_SERVER_IMPL_H_
#define RDMARPC_RUNTIME_RPC_SERVER_IMPL_H_

#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rdmarpc/server.h"
#include "rdmarpc/server_callback.h"
#include "rdmarpc/service.h"
#include "runtime/rpc/admin_endpoint.h"
#include "runtime/rpc/etcd_resolver.h"
#include "runtime/rpc/handler_pool.h"
#include "runtime/rpc/interceptor_chain.h"
#include "runtime/rpc/server_callback.h"
#include "runtime/rpc/server_stream.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/fork_guard.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/device.h"
#include "runtime/transport/listener.h"

namespace rdmarpc {
namespace internal {

// The largest request a run_inline method handles on the worker; larger
// ones run on the handler pool. An echo of 1 MiB (parse, copy, serialise)
// holds the worker ~0.3 ms on the 2-vCPU build VM, of 64 MiB ~25 ms; with
// every rendezvous request on the pool, bench/rpc_bench's 1 MiB x4
// bandwidth fell ~20 % and 64 KiB p50 latency rose 32 -> 39-45 us (the
// hand-off to a pool thread), so requests of 1 MiB (and their protobuf
// framing) stay inline.
inline constexpr size_t kMaxInlineRequestBytes = (1 << 20) + (64 << 10);  // with its framing

class ServerImpl final : public ServerStatusSource {
 public:
  explicit ServerImpl(const ServerOptions& options);
  ~ServerImpl() override;

  absl::Status AddService(Service* service);
  // Sorted full names of the registered services.
  std::vector<std::string> GetServiceNames() const;
  absl::Status Start(absl::string_view listen_address);
  int port() const { return port_; }
  const std::string& address() const { return address_; }
  void Shutdown(absl::Duration grace);
  void Wait();

  // ServerStatusSource (admin_endpoint.h): any thread.
  bool Serving() const override;
  std::string Address() const override;
  std::string DescribeForStatusz() const override;

  // Made before a fork() and used in the child (runtime/transport/
  // fork_guard.h): Start refuses, Shutdown and Wait return at once, and
  // the Server's destructor lets go of nothing (no GOAWAY reaches the
  // parent's clients). Any thread.
  bool inherited() const { return ForkGeneration() != fork_generation_; }
  absl::Status InheritedError() const { return InheritedAcrossFork("server", owner_pid_); }

 private:
  const uint64_t fork_generation_ = ForkGeneration();
  const int owner_pid_ = ::getpid();
  struct Worker;
  // A call whose handler runs (or waits to run) on the handler pool. Owned
  // by the pool task until the handler returned, then by the loop task
  // that answers it. A callback call is owned by its ServerCallbackCall
  // once the method started, and freed after its reactor's OnDone.
  struct PoolCall {
    // A request attachment the handler kept leaves the pool's limit
    // (LetGoOfAttachments).
    ~PoolCall();
    // The call is over (destroyed or kept as a spare): drops its own hold
    // on the request's payload, then a request attachment, and a stream's
    // attachments the handler read, that something else still holds leave
    // the pool's limit (AttachmentAccess::ExemptIfKeptPastCall,
    // ServerStreamState::ExemptKeptAttachments).
    void LetGoOfAttachments();
    Worker* worker = nullptr;
    // Loop thread only: nullptr once the connection closed.
    Connection* conn = nullptr;
    RequestToken token;
    // Not started because the server is draining: answered with
    // Connection::RefuseRequest, so the client may send it elsewhere.
    bool refused = false;
    const MethodHandler* handler = nullptr;
    const std::string* method = nullptr;  // key in methods_
    std::string peer;                     // the connection may close first
    std::unique_ptr<google::protobuf::MessageLite> request;
    std::unique_ptr<google::protobuf::MessageLite> response;
    // A CallbackServerContext for every call (a ServerContext to
    // synchronous handlers).
    CallbackServerContext context;
    // Loop thread only: the client was answered already (cancelled by it,
    // or by Shutdown); the handler's own answer is dropped.
    bool answered = false;
    // kQueued until claimed, once: kStarted by the thread that runs the
    // handler, kRefused by a draining server that answers it unstarted
    // (only a call never started may be sent elsewhere by its client).
    enum Phase : int { kQueued = 0, kStarted = 1, kRefused = 2 };
    std::atomic<int> phase{kQueued};
    // Streaming calls: the stream the handler reads and writes.
    std::unique_ptr<ServerStreamState> stream;
    // A unary request pulled by rendezvous: its registered buffer and the
    // payload in it, parsed on the pool thread (a parse of megabytes would
    // hold up every connection of the worker).
    PooledBuffer request_buffer;
    // Or, a unary request pulled with its attachment: the attachment,
    // whose memory holds the payload too.
    Attachment request_holder;
    absl::string_view request_payload;
    // A large OK response without metadata, serialised on the pool thread
    // into registered memory at kRegisteredResponseOffset (`response_size`
    // bytes); the worker only posts it. `large_pool` and `eager_limit` are
    // the connection's, taken at dispatch.
    LargeBufferPool* large_pool = nullptr;
    size_t eager_limit = 0;
    PooledBuffer response_buffer;
    size_t response_size = 0;
    // Callback methods: the reactor's side of the call.
    std::unique_ptr<ServerCallbackCall> callback;
    // Callback methods on a server with interceptors: the call's chain,
    // kept until the call is freed (after OnDone).
    std::unique_ptr<InterceptorChain> interceptors;
    // Synchronous calls: the hand-back from the pool thread to the worker
    // (FinishPoolCall with `finish_status`), in a node of the call's own.
    TaskQueue::Task finish_task;
    absl::Status finish_status;
    // Unary: the request's serialised size (whether the call is worth
    // keeping as a spare, Worker::KeepSpareCall).
    size_t request_bytes = 0;
  };
  // Per worker: its connections and the dispatch upcall.
  struct Worker final : ConnectionHandler {
    ServerImpl* server = nullptr;
    std::unique_ptr<EventLoop> loop;
    absl::flat_hash_set<Connection*> conns;  // loop thread only
    // Pool calls not answered yet, by connection and request token
    // (RequestToken::handle()). Loop thread only.
    absl::flat_hash_map<Connection*, absl::flat_hash_map<uint32_t, PoolCall*>> pool_calls;
    // Answered pool calls whose key a newer call of the same connection
    // took (the client reuses slot and generation) and whose handlers still
    // run. Loop thread only.
    absl::flat_hash_map<Connection*, std::vector<PoolCall*>> answered_calls;
    // Request/response messages kept per method and reused (Clear keeps
    // their buffers), so a small call allocates nothing in steady state.
    // Loop thread only; `busy` while a handler runs (never nested today,
    // but a nested dispatch would then fall back to fresh messages).
    struct Messages {
      std::unique_ptr<google::protobuf::MessageLite> request;
      std::unique_ptr<google::protobuf::MessageLite> response;
      bool busy = false;
    };
    absl::flat_hash_map<const MethodHandler*, Messages> messages;
    // Synchronous unary pool calls that ended, kept per method with their
    // messages for the next call (at most kMaxSpareCalls each, and only
    // those whose request and response were at most kMaxSpareMessageBytes:
    // a message keeps the room it grew), so a small call on the handler
    // pool allocates nothing in steady state. Under AddressSanitizer a
    // spare is poisoned until it is taken. Loop thread only.
    static constexpr size_t kMaxSpareCalls = 64;
    static constexpr size_t kMaxSpareMessageBytes = 64 * 1024;
    ~Worker() override;
    absl::flat_hash_map<const MethodHandler*, std::vector<std::unique_ptr<PoolCall>>> spare_calls;
    // A spare call of `handler` (ready for its next request), or a new one.
    std::unique_ptr<PoolCall> TakeSpareCall(const MethodHandler* handler);
    // Keeps an ended synchronous unary call as a spare; frees any other.
    void KeepSpareCall(std::unique_ptr<PoolCall> call);
    void OnRequest(Connection* conn, const IncomingRequest& req) override;
    void OnCancel(Connection* conn, const RequestToken& token) override;
    void OnStreamMessage(Connection* conn, const RequestToken& token, absl::string_view payload,
                         bool has_message, bool end_stream, Attachment attachment) override;
    void OnWindow(Connection* conn, const RequestToken& token, uint32_t messages) override;
    // The pool call of `token` on `conn` not answered yet, or nullptr.
    PoolCall* FindPoolCall(Connection* conn, const RequestToken& token);
    void OnClosed(Connection* conn, const absl::Status&) override;
    void OnGoAway(Connection* conn) override;
  };
  enum class State { kNew, kRunning, kStopping, kStopped };

  void Dispatch(Worker* worker, Connection* conn, const IncomingRequest& req);
  // Runs a synchronous handler inline on the worker; answers at once.
  void RunInline(Worker* worker, Connection* conn, const IncomingRequest& req,
                 const std::string* method, const MethodHandler* handler);
  // Worker: the calls of `conn` on the handler pool or running as
  // callbacks, answered or not (what max_concurrent_streams caps).
  size_t CallsInProgress(Worker* worker, Connection* conn);
  // Worker: parses the request and queues the call on the handler pool.
  void SubmitToPool(Worker* worker, Connection* conn, const IncomingRequest& req,
                    const std::string* method, const MethodHandler* handler);
  // Pool thread: runs the handler (unless Shutdown began before it started),
  // then hands the call back to its worker.
  void RunOnPool(std::unique_ptr<PoolCall> call);
  // Runs a unary handler, through the interceptors when the server has
  // any (the handler's thread).
  absl::Status InvokeUnary(const MethodHandler* handler, ServerContext* context,
                           google::protobuf::MessageLite* request,
                           google::protobuf::MessageLite* response) const;
  // Pool thread: runs a streaming handler over the call's stream, through
  // the interceptors when the server has any.
  absl::Status InvokeStream(PoolCall* call) const;
  // Worker: answers a pool call whose handler returned `status`.
  void FinishPoolCall(std::unique_ptr<PoolCall> call, absl::Status status);
  // Worker: a request pulled by rendezvous is kept in its registered buffer
  // (call->request_buffer, or with its attachment call->request_holder) to
  // be parsed on the pool; false when it is not one (then the caller parses
  // it at once).
  static bool KeepPulledRequest(const IncomingRequest& req, PoolCall* call);
  // Pool thread: parses a kept request (and lets go of its buffer); OK when
  // there was none. INTERNAL naming size, method and type when it does not
  // parse.
  static absl::Status ParseKeptRequest(PoolCall* call);
  // Pool thread, after an OK handler: a response above the eager limit
  // (and without metadata) is serialised into call->response_buffer.
  void SerializeLargeResponse(PoolCall* call);
  // Worker: forgets `call` in its worker's tables and answers it with
  // `status`, unless it was answered already (cancelled).
  void AnswerPoolCall(PoolCall* call, absl::Status status);
  // Pool thread (worker when run_inline): runs a callback method and binds
  // the reactor it returns; from then on the call belongs to its
  // ServerCallbackCall.
  void StartCallback(std::unique_ptr<PoolCall> call);
  // Worker: the answer of a call, serialised straight into registered
  // memory where it fits (see Connection::TrySendResponseInPlace).
  void SendReply(Connection* conn, const RequestToken& token, absl::Status status,
                 const google::protobuf::MessageLite* response,
                 const ServerContext* context = nullptr);
  // Worker: the client's metadata and attachment of `req` into `context`;
  // not OK when the metadata does not decode or is over
  // max_metadata_bytes (then answer with it).
  absl::Status TakeClientMetadata(const IncomingRequest& req, ServerContext* context) const;
  // Worker: cancels every pool call of its connections that is not
  // answered yet, answering it UNAVAILABLE.
  void CancelPoolCalls(Worker* worker);
  // Worker: marks `call` cancelled (context, stream) and runs its
  // on-cancel callbacks.
  static void CancelPoolCall(PoolCall* call);

  // As given, plus the metrics interceptor first when metrics are on; not
  // changed after Start.
  ServerOptions options_;
  // The admin endpoint this server serves (rdmarpc/admin.h), or nullptr.
  std::shared_ptr<AdminEndpoint> admin_;
  bool status_registered_ = false;  // AddServerStatusSource was called
  bool metrics_installed_ = false;  // the metrics interceptor leads interceptor_creators
  bool auth_installed_ = false;     // the auth metadata interceptor follows it
  std::string address_;             // "host:port" bound
  // ServerOptions::register_target's registration, while running.
  std::unique_ptr<EtcdRegistration> registration_;
  absl::flat_hash_map<std::string, const MethodHandler*> methods_;
  absl::flat_hash_set<std::string> services_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<DeviceResources> device_;  // shared with attachments received
  std::vector<std::unique_ptr<Worker>> workers_;
  // Accepts onto the workers' loops in turn (after Start).
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<HandlerPool> pool_;
  // Set when Shutdown begins: no handler starts after it.
  std::atomic<bool> draining_{false};
  // Pool calls submitted and not yet handed back to their worker.
  std::atomic<int> pool_calls_{0};
  // Handlers running now (pool and inline).
  std::atomic<int> running_handlers_{0};
  // Connections accepted and not closed (all workers).
  std::atomic<int> open_connections_{0};
  // Shutdown's drain: clients told kGoAway that have not answered yet, and
  // workers that have sent theirs.
  std::atomic<int> goaway_unanswered_{0};
  std::atomic<int> goaway_workers_done_{0};
  int port_ = 0;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVER_IMPL_H_
