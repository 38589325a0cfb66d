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
// the other.
#ifndef RDMARPC_RUNTIME_RPC_CLIENT_STREAM_H_
#define RDMARPC_RUNTIME_RPC_CLIENT_STREAM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/impl/stream_call.h"
#include "runtime/rpc/channel_impl.h"
#include "runtime/rpc/context_access.h"

namespace rdmarpc {
namespace internal {

class ClientStreamState final : public ResponseSink,
                                public CallCanceller,
                                public std::enable_shared_from_this<ClientStreamState> {
 public:
  ClientStreamState(ChannelImpl* channel, absl::string_view method, ClientContext* context,
                    RpcKind kind);

  // User side (any thread but the channel's loops).
  // Sends the opening frame (with `first`, serialised, for server streaming).
  void Start(const google::protobuf::MessageLite* first);
  bool Write(const google::protobuf::MessageLite& message);
  bool WritesDone();
  bool Read(google::protobuf::MessageLite* message);
  // Half-closes when needed, waits for the end, returns its status.
  absl::Status Finish();
  // Ends the call CANCELLED unless it ended, and waits for the end.
  void CancelAndWait();

  // ResponseSink (loop thread).
  void OnQueued(uint32_t h) override { handle_ = h; }
  void OnSent() override;
  void OnStreamHeaders(absl::string_view meta) override;
  void OnResponseMetadata(absl::string_view meta) override;
  void OnStreamMessage(absl::string_view payload) override;
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

  ChannelImpl* const channel_;
  const std::string method_;
  ClientContext* const context_;
  const RpcKind kind_;
  EventLoop* loop_ = nullptr;
  const std::string* peer_ = nullptr;

  std::string meta_;  // the context's metadata, encoded

  // Loop thread only.
  absl::Status meta_error_;  // the server's metadata did not decode / too large
  Connection* conn_ = nullptr;
  uint32_t handle_ = 0;
  EventLoop::TimerId timer_ = 0;
  bool bound_ = false;
  bool end_deferred_ = false;
  bool ended_ = false;  // the end was delivered (or deferred to the cancel)
  std::shared_ptr<ClientStreamState> loop_ref_;  // until the end is delivered

  // User side only (one reader, one writer thread at a time).
  uint32_t consumed_ = 0;  // messages read since the last window grant

  absl::Mutex mu_;
  std::deque<std::string> inbox_ ABSL_GUARDED_BY(mu_);
  uint32_t send_window_ ABSL_GUARDED_BY(mu_) = kStreamWindow;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_CLIENT_STREAM_H_
