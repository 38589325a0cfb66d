// client_stream.h: the client end of one stream (internal::ClientStream's
// state), between the user's thread(s) and the channel loop that owns the
// stream's connection.
//
// The loop side (upcalls from the Connection, started by Start) appends
// the server's messages to an inbox and adds the windows the server grants;
// the user side blocks on those under one mutex (streams take a lock per
// message; unary calls do not). Writes, half-close and window grants go to
// the loop as posted tasks, in order. The state is shared: the loop
// holds a reference until the stream's end is delivered, the ClientStream
// (or the reactor's ClientCallbackStream) the other.
//
// A reactor (rdmarpc/client_callback.h) uses the same state without
// blocking: where Read and Write wait, StartRead and StartWrite leave a
// pending operation (one of each at most, as gRPC allows) that the loop's
// upcall completes, and the reactor's reaction runs there, on the thread
// polling the channel. Operations that can complete at once (a message
// already in the inbox, window left) react from a task posted to the
// loop, never inline in the Start call. A ReactorGate decides when
// OnDone runs.
#ifndef RDMARPC_RUNTIME_RPC_CLIENT_STREAM_H_
#define RDMARPC_RUNTIME_RPC_CLIENT_STREAM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/impl/callback_call.h"
#include "rdmarpc/impl/stream_call.h"
#include "runtime/rpc/channel_impl.h"
#include "runtime/rpc/context_access.h"
#include "runtime/rpc/interceptor_chain.h"
#include "runtime/rpc/reactor_gate.h"

namespace rdmarpc {
namespace internal {

class ClientStreamState final : public ResponseSink,
                                public CallCanceller,
                                public std::enable_shared_from_this<ClientStreamState> {
 public:
  ClientStreamState(Channel* channel, absl::string_view method, ClientContext* context,
                    RpcKind kind);

  // User side (any thread but the channel's loops, unless a reactor is
  // set).
  // Checks the call and serialises `first` (server streaming: the request,
  // sent with the opening frame); picks the stream's loop. Before Start.
  void Prepare(const google::protobuf::MessageLite* first);
  // Sends the opening frame; a call Prepare refused ends with its status.
  void Start();
  // `attachment` goes beside the message (Connection::SendStreamMessage).
  bool Write(const google::protobuf::MessageLite& message, Attachment attachment = Attachment());
  bool WritesDone();
  // `attachment` (may be null: dropped) receives the bytes the server sent
  // beside the message read, empty without.
  bool Read(google::protobuf::MessageLite* message, Buffer* attachment = nullptr);
  // Half-closes when needed, waits for the end, returns its status.
  absl::Status Finish();
  ClientContext* context() const { return context_; }
  // Ends the call CANCELLED unless it ended, and waits for the end.
  void CancelAndWait();

  // Reactor side (any thread; see the top of this file). SetReactor comes
  // first, before Prepare: `reactor` gets every reaction; `response`
  // (client streaming) receives the server's one message.
  void SetReactor(ClientReactorBase* reactor, google::protobuf::MessageLite* response);
  // `attachment` (may be null) as for Read; it must stay valid until the
  // read reacts.
  void StartRead(google::protobuf::MessageLite* message, Buffer* attachment = nullptr);
  // `last`: the half-close goes with the message.
  void StartWrite(const google::protobuf::MessageLite& message, bool last,
                  Attachment attachment = Attachment());
  void StartWritesDone();
  void AddHolds(int holds);
  void RemoveHold();

  // ResponseSink (loop thread).
  void OnQueued(uint32_t h) override { handle_ = h; }
  void OnSent() override;
  void OnStreamHeaders(absl::string_view meta) override;
  void OnResponseMetadata(absl::string_view meta) override;
  void OnStreamMessage(absl::string_view payload, Attachment attachment) override;
  void OnWindow(uint32_t messages) override;
  void OnResponse(absl::StatusCode code, absl::string_view message,
                  absl::string_view payload) override;
  void OnFailure(absl::Status status) override;
  // CallCanceller (TryCancel's thread).
  void RequestCancel() override;

 private:
  // Loop thread.
  void StartOnLoop(ChannelImpl::Route route, std::string first, bool has_first);
  // The stream's own end (trailers, failure, deadline): delivered unless
  // TryCancel won the race (then OnCancelRequested delivers CANCELLED).
  void End(absl::Status status);
  void OnCancelRequested();
  void Deliver(absl::Status status);
  // Ends the call with `status` from the user's side (e.g. a message that
  // does not parse): retires it on the connection, then delivers.
  void FailFromUser(absl::Status status);
  // The same on the loop thread.
  void FailOnLoop(absl::Status status);

  // Reactor side, loop thread.
  enum class Reaction { kRead, kWrite, kWritesDone };
  void OnReactorMessage(absl::string_view payload, Attachment attachment);
  // Parses `payload` into `message` (`have` false: the stream ended, no
  // message) and reacts.
  void CompleteRead(google::protobuf::MessageLite* message, bool have,
                    absl::string_view payload);
  // Sends the pending write and half-close the window and order allow.
  void SendPendingWrites();
  // Sends one message / half-close; false when the stream ended. While the
  // stream waits for the channel's first address (parked) it is kept, and
  // sent in order once the stream starts.
  bool SendOnLoop(std::string payload, bool no_message, bool end_stream,
                  Attachment attachment = Attachment());
  // The parked stream's turn (ChannelImpl::Park): starts on a fresh route,
  // or ends with `status`.
  void ResumeOnLoop(absl::Status status, std::string first, bool has_first);
  struct HeldSend {
    std::string payload;
    bool no_message = false;
    bool end_stream = false;
    Attachment attachment;
  };
  void MaybeReactInitialMetadata(bool ok);
  // Runs the reaction, then releases its count on the gate.
  void React(Reaction reaction, bool ok);
  void ReleaseGate();
  void ReactDone();
  Channel* const channel_handle_;
  ChannelImpl* const channel_;
  const std::string method_;
  ClientContext* const context_;
  const RpcKind kind_;
  EventLoop* loop_ = nullptr;
  const std::string* peer_ = nullptr;

  std::string meta_;  // the context's metadata, encoded
  // The call's interceptors (nullptr: none); made by Prepare.
  std::unique_ptr<InterceptorChain> interceptors_;

  // Loop thread: the id ChannelImpl::Park gave (0: not parked), and what
  // was sent meanwhile.
  uint64_t park_id_ = 0;
  // The pool counting this stream in flight (least_request), until it ends.
  ConnectionPool* counted_pool_ = nullptr;
  std::vector<HeldSend> held_sends_;

  // Set by Prepare, taken by Start.
  ChannelImpl::Route route_{};
  absl::Status refused_;
  std::string first_payload_;
  bool has_first_ = false;

  // Reactor side: set before Prepare, then read-only.
  ClientReactorBase* reactor_ = nullptr;
  google::protobuf::MessageLite* response_ = nullptr;
  ReactorGate gate_;

  // Loop thread only.
  absl::Status meta_error_;  // the server's metadata did not decode / too large
  Connection* conn_ = nullptr;
  uint32_t handle_ = 0;
  EventLoop::TimerId timer_ = 0;
  bool bound_ = false;
  bool end_deferred_ = false;
  bool ended_ = false;  // the end was delivered (or deferred to the cancel)
  bool heard_from_server_ = false;  // headers, a message or the status came
  bool initial_metadata_reacted_ = false;
  bool got_response_ = false;  // client streaming reactor: response parsed
  std::shared_ptr<ClientStreamState> loop_ref_;  // until the end is delivered

  // User side only (one reader, one writer thread at a time); the loop
  // thread for a reactor.
  uint32_t consumed_ = 0;  // messages read since the last window grant

  // A message the server sent and the user has not read yet.
  struct InboxMessage {
    std::string payload;
    Buffer attachment;
  };
  absl::Mutex mu_;
  std::deque<InboxMessage> inbox_ ABSL_GUARDED_BY(mu_);
  uint32_t send_window_ ABSL_GUARDED_BY(mu_) = kStreamWindow;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  // Reactor side: the opening frame was posted (operations before it wait).
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Reactor side: the pending operations.
  google::protobuf::MessageLite* pending_read_ ABSL_GUARDED_BY(mu_) = nullptr;
  Buffer* pending_read_attachment_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::string pending_write_ ABSL_GUARDED_BY(mu_);
  Attachment pending_write_attachment_ ABSL_GUARDED_BY(mu_);
  bool pending_write_last_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_pending_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_CLIENT_STREAM_H_
