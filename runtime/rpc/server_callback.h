// server_callback.h: one callback (reactor) call on the server, between its
// reactor's operations (any thread) and the worker that owns the call's
// connection (rdmarpc/server_callback.h is the user's side).
//
// The server makes a ServerCallbackCall beside the call's PoolCall, runs the
// service method (on the handler pool, or inline when run_inline) and binds
// the reactor it returns. Operations go to the call's ServerStreamState (the
// same state a synchronous handler's ServerStream uses); Finish posts the
// answer to the worker once the writes started before it went out. Every
// reaction and OnDone runs on the worker. A ReactorGate counts the finish
// and the operations not reacted yet; when it empties OnDone runs, then the
// server frees the call (this object included).
#ifndef RDMARPC_RUNTIME_RPC_SERVER_CALLBACK_H_
#define RDMARPC_RUNTIME_RPC_SERVER_CALLBACK_H_

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/impl/callback_call.h"
#include "rdmarpc/impl/stream_call.h"
#include "runtime/rpc/interceptor_chain.h"
#include "runtime/rpc/reactor_gate.h"
#include "runtime/rpc/server_stream.h"
#include "runtime/transport/event_loop.h"

namespace rdmarpc {
namespace internal {

// The runtime's access to a server reactor's binding and reactions.
class ServerReactorAccess {
 public:
  static void Bind(ServerReactorBase* reactor, ServerCallbackCall* call) { reactor->Bind(call); }
  static void ReactSendInitialMetadata(ServerReactorBase* r, bool ok) {
    r->ReactSendInitialMetadata(ok);
  }
  static void ReactRead(ServerReactorBase* r, bool ok) { r->ReactRead(ok); }
  static void ReactWrite(ServerReactorBase* r, bool ok) { r->ReactWrite(ok); }
  static void ReactCancel(ServerReactorBase* r) { r->ReactCancel(); }
  static void ReactDone(ServerReactorBase* r) { r->ReactDone(); }
};

class ServerCallbackCall final : public ServerStreamReactions {
 public:
  // `stream`: the call's stream (nullptr for a unary call). `response`:
  // what Finish(OK) sends for a client-streaming call (unused otherwise).
  // `answer`: the server's answer to the call with a status (worker).
  // `release`: frees the call after OnDone (worker; last).
  // `prepare_ok_response` (unary, optional): runs on the thread calling
  // Finish(OK) before the answer is posted to the worker.
  ServerCallbackCall(EventLoop* loop, RpcKind kind, ServerStreamState* stream,
                     const google::protobuf::MessageLite* response,
                     absl::AnyInvocable<void(absl::Status)> answer,
                     absl::AnyInvocable<void()> release,
                     absl::AnyInvocable<void()> prepare_ok_response = nullptr)
      : loop_(loop),
        kind_(kind),
        stream_(stream),
        response_(response),
        answer_(std::move(answer)),
        release_(std::move(release)),
        prepare_ok_response_(std::move(prepare_ok_response)) {}
  ServerCallbackCall(const ServerCallbackCall&) = delete;
  ServerCallbackCall& operator=(const ServerCallbackCall&) = delete;

  // The call's interceptors and context (before Bind or Finish; not
  // owned): Finish runs PRE_SEND_INITIAL_METADATA (when no message carried
  // it), PRE_SEND_MESSAGE (a unary response) and PRE_SEND_STATUS on the
  // thread calling it.
  void set_interceptors(InterceptorChain* interceptors, ServerContext* context) {
    interceptors_ = interceptors;
    context_ = context;
  }

  // Pool or worker thread, once: the service method returned `reactor`.
  // A method that returned nullptr gets Finish(UNIMPLEMENTED) instead.
  void Bind(ServerReactorBase* reactor);

  // The reactor's operations (any thread, after Bind).
  void StartSendInitialMetadata();
  void StartRead(google::protobuf::MessageLite* message, Buffer* attachment);
  void StartWrite(const google::protobuf::MessageLite& message, const Buffer& attachment);
  void StartWriteAndFinish(const google::protobuf::MessageLite& message, absl::Status status,
                           const Buffer& attachment);
  void Finish(absl::Status status);

  // Worker: the call was cancelled (by the client, a lost connection or
  // Shutdown). Fails pending operations and runs OnCancel once bound.
  void OnCancelled();

  // ServerStreamReactions (worker).
  void OnHeadersSent(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;

 private:
  // Worker: answers, fails what is still pending, releases the finish.
  void AnswerOnWorker(absl::Status status);
  // Worker: one count off the gate; OnDone and the release when it was the
  // last.
  void ReleaseGate();
  bool cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

  EventLoop* const loop_;
  const RpcKind kind_;
  ServerStreamState* const stream_;
  const google::protobuf::MessageLite* const response_;
  absl::AnyInvocable<void(absl::Status)> answer_;
  // Unary: runs on the thread calling Finish(OK), before the answer is
  // posted to the worker (the server serialises a large response there).
  absl::AnyInvocable<void()> release_;
  absl::AnyInvocable<void()> prepare_ok_response_;
  ReactorGate gate_;
  InterceptorChain* interceptors_ = nullptr;
  ServerContext* context_ = nullptr;
  // Set by Bind before any operation is forwarded; read by reactions.
  ServerReactorBase* reactor_ = nullptr;
  bool finished_ = false;  // Finish was called (any thread; under mu_)

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVER_CALLBACK_H_
