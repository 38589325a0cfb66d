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
#ifndef RDMARPC_RUNTIME_RPC_SERVER_STREAM_H_
#define RDMARPC_RUNTIME_RPC_SERVER_STREAM_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/impl/stream_call.h"
#include "rdmarpc/server_context.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

class ServerStreamState {
 public:
  // `conn` points at the call's connection pointer, which the worker clears
  // when the connection closes; both live until the call is answered.
  // `context` is the call's (its initial metadata goes before the first
  // message).
  // `max_header_bytes` is the most metadata a kHeaders frame carries on
  // this connection (its eager limit less the frame header).
  ServerStreamState(EventLoop* loop, Connection* const* conn, RequestToken token,
                    size_t max_message_bytes, size_t max_header_bytes,
                    const ServerContext* context)
      : loop_(loop),
        conn_(conn),
        token_(token),
        max_message_bytes_(max_message_bytes),
        max_header_bytes_(max_header_bytes),
        context_(context) {}

  // Handler thread.
  bool Read(google::protobuf::MessageLite* message);
  bool Write(const google::protobuf::MessageLite& message);
  // Why the handler's status is replaced (a message did not parse, or was
  // too large to send); OK otherwise. After the handler returned.
  absl::Status failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  // The initial metadata went out before a message (handler thread, or
  // after the handler returned).
  bool headers_sent() const { return headers_sent_; }

  // Worker thread.
  void OnMessage(absl::string_view payload, bool has_message, bool end_stream);
  void OnWindow(uint32_t messages);
  // The call was cancelled or its connection closed: blocked reads and
  // writes return false.
  void Cancel();

 private:
  EventLoop* const loop_;
  Connection* const* const conn_;
  const RequestToken token_;
  const size_t max_message_bytes_;
  const size_t max_header_bytes_;
  const ServerContext* const context_;
  uint32_t consumed_ = 0;  // handler thread: read since the last grant
  bool headers_sent_ = false;  // handler thread

  absl::Mutex mu_;
  std::deque<std::string> inbox_ ABSL_GUARDED_BY(mu_);
  uint32_t send_window_ ABSL_GUARDED_BY(mu_) = kStreamWindow;
  bool client_done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVER_STREAM_H_
