// server_stream.h: the server end of one stream (internal::ServerStream's
// state), between the handler-pool thread running a streaming handler and
// the worker loop that owns the stream's connection.
//
// The worker appends the client's messages to an inbox, adds the windows
// the client grants and marks the end of the client's side or the call's
// cancellation; the handler blocks on those under one mutex. The handler's
// writes and window grants go to the worker as posted tasks (in order, and
// all before the task that answers the call, which the handler's thread
// posts last).
//
// A callback call (rdmarpc/server_callback.h) uses the same state without
// blocking: StartRead and StartWrite leave a pending operation (one of each
// at most) where Read and Write would wait, and the worker's upcall (a
// message, a window grant, the cancel) completes it and calls the call's
// ServerStreamReactions, on the worker thread. Operations that can complete
// at once do so in a task posted to the worker, never inline.
#ifndef RDMARPC_RUNTIME_RPC_SERVER_STREAM_H_
#define RDMARPC_RUNTIME_RPC_SERVER_STREAM_H_

#include <cstdint>
#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/impl/stream_call.h"
#include "rdmarpc/server_context.h"
#include "runtime/rpc/interceptor_chain.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

// What a callback call's stream reports (ServerCallbackCall implements it).
// Worker thread.
class ServerStreamReactions {
 public:
  virtual void OnHeadersSent(bool ok) = 0;
  virtual void OnReadDone(bool ok) = 0;
  virtual void OnWriteDone(bool ok) = 0;

 protected:
  ~ServerStreamReactions() = default;
};

class ServerStreamState {
 public:
  // `conn` points at the call's connection pointer, which the worker clears
  // when the connection closes; both live until the call is answered.
  // `context` is the call's (its initial metadata goes before the first
  // message).
  // `max_header_bytes` is the most initial metadata (encoded) the stream
  // sends (the server's max_message_bytes: headers above the eager limit
  // travel by rendezvous).
  ServerStreamState(EventLoop* loop, Connection* const* conn, RequestToken token,
                    size_t max_message_bytes, size_t max_header_bytes,
                    const ServerContext* context)
      : loop_(loop),
        conn_(conn),
        token_(token),
        max_message_bytes_(max_message_bytes),
        max_header_bytes_(max_header_bytes),
        context_(context) {}

  // Handler thread. `attachment` (may be null: dropped) receives the
  // bytes the client sent beside the message read, empty without; one
  // passed to Write goes beside the message (Connection::SendStreamMessage).
  bool Read(google::protobuf::MessageLite* message, Buffer* attachment = nullptr);
  bool Write(const google::protobuf::MessageLite& message, Attachment attachment = Attachment());
  // Why the handler's status is replaced (a message did not parse, or was
  // too large to send); OK otherwise. After the handler returned.
  absl::Status failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  // The call's context (its response attachment goes with a client-
  // streaming call's response).
  const ServerContext* context() const { return context_; }
  // The initial metadata went out before a message (handler thread, or
  // after the handler returned).
  bool headers_sent() const { return headers_sent_.load(std::memory_order_acquire); }

  // The call's interceptors (nullptr: none), set before the handler runs
  // and cleared after it returned; messages read and written and the
  // initial metadata run their hooks. Not owned.
  void set_interceptors(InterceptorChain* interceptors) { interceptors_ = interceptors; }

  // Callback side (any thread); completions call `reactions` on the
  // worker. SetReactions before any of the others.
  void SetReactions(ServerStreamReactions* reactions) { reactions_ = reactions; }
  // Sends the context's initial metadata now (once; nothing when empty).
  void StartSendHeaders();
  // `attachment` (may be null) as for Read; it must stay valid until
  // OnReadDone.
  void StartRead(google::protobuf::MessageLite* message, Buffer* attachment = nullptr);
  // `react`: OnWriteDone follows (not for a write that goes with Finish).
  void StartWrite(const google::protobuf::MessageLite& message, bool react,
                  Attachment attachment = Attachment());
  // Runs `finish` on the worker once every write started before it was
  // sent or failed.
  void FinishAfterWrites(absl::AnyInvocable<void() &&> finish);

  // The call ended (its handler returned or its reactor finished): the
  // attachments the handler read and still holds elsewhere (stored, not
  // written back) leave their pool's limit
  // (AttachmentAccess::ExemptIfStillHeld). Any thread, once nothing reads.
  void ExemptKeptAttachments();
  // Watches the call's request attachment (a server-streaming call's) as
  // one the handler read. Before the handler runs.
  void WatchRequestAttachment(const Buffer& attachment) {
    absl::MutexLock lock(&mu_);
    WatchHandedOut(attachment);
  }

  // Worker thread.
  void OnMessage(absl::string_view payload, bool has_message, bool end_stream,
                 Attachment attachment = Attachment());
  void OnWindow(uint32_t messages);
  // The call was cancelled or its connection closed (or, for a callback
  // call, answered): blocked reads and writes return false, pending ones
  // react false.
  void Cancel();

 private:
  EventLoop* const loop_;
  Connection* const* const conn_;
  const RequestToken token_;
  const size_t max_message_bytes_;
  const size_t max_header_bytes_;
  const ServerContext* const context_;
  // Sends the initial metadata unless sent; false (failure_ set) when it
  // breaks the rules or is too large. Any thread.
  bool SendHeadersOnce();
  // Worker: parses into `message` (`have` false: no message) and reacts.
  void CompleteRead(google::protobuf::MessageLite* message, bool have,
                    absl::string_view payload);
  // Worker: counts a message read; grants the window back in batches.
  void CountRead();
  // Notes an attachment handed to the handler (ExemptKeptAttachments).
  void WatchHandedOut(const Buffer& attachment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A written attachment the handler read stays counted (the client may
  // hold it exposed): it is no longer watched. When the write is handed
  // to the connection (SendOnWorker).
  void UnwatchWritten(const Attachment& attachment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Worker: hands one message to the connection; false when it closed.
  bool SendOnWorker(std::string payload, Attachment attachment);
  // Worker: sends the pending write if the window allows, then the finish.
  void SendPendingWrite();

  uint32_t consumed_ = 0;  // handler thread (worker for a callback call)
  InterceptorChain* interceptors_ = nullptr;
  std::atomic<bool> headers_sent_{false};
  ServerStreamReactions* reactions_ = nullptr;

  // A message the client sent and the handler has not read yet.
  struct InboxMessage {
    std::string payload;
    Buffer attachment;
  };
  absl::Mutex mu_;
  std::deque<InboxMessage> inbox_ ABSL_GUARDED_BY(mu_);
  uint32_t send_window_ ABSL_GUARDED_BY(mu_) = kStreamWindow;
  bool client_done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // Attachments handed to the handler; expired ones are pruned when the
  // list doubles.
  std::vector<std::weak_ptr<ExternalRegion>> handed_out_ ABSL_GUARDED_BY(mu_);
  size_t prune_at_ ABSL_GUARDED_BY(mu_) = 16;
  // Callback side: the pending operations, and a finish waiting for the
  // pending write.
  google::protobuf::MessageLite* pending_read_ ABSL_GUARDED_BY(mu_) = nullptr;
  Buffer* pending_read_attachment_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::string pending_write_ ABSL_GUARDED_BY(mu_);
  Attachment pending_write_attachment_ ABSL_GUARDED_BY(mu_);
  bool pending_write_react_ ABSL_GUARDED_BY(mu_) = false;
  absl::AnyInvocable<void() &&> finish_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVER_STREAM_H_
