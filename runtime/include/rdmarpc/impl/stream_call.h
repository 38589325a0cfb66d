// rdmarpc/impl/stream_call.h: the runtime's streaming call objects, under
// the typed readers and writers of rdmarpc/sync_stream.h. Not for direct
// use: generated stubs and handlers use them.
//
// A stream carries any number of messages each way, in order, with flow
// control: each side lets the other have at most kStreamWindow messages in
// flight, so a reader that stops reading stops only its own writer (the
// connection's other calls go on) and never holds receive buffers.
#ifndef RDMARPC_IMPL_STREAM_CALL_H_
#define RDMARPC_IMPL_STREAM_CALL_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/export.h"

namespace rdmarpc {
namespace internal {

// The four kinds of RPC, as in gRPC.
enum class RpcKind { kUnary, kClientStreaming, kServerStreaming, kBidiStreaming };

// Messages a receiver buffers per stream (and so a sender may have sent and
// not seen consumed).
inline constexpr uint32_t kStreamWindow = 16;

class ClientStreamState;  // runtime/rpc/client_stream.h
class ServerStreamState;  // runtime/rpc/server_stream.h

// The client end of one stream. One thread may Write (and WritesDone) while
// another Reads; Finish from either once that is done. Nothing here is
// called on a channel engine thread (the blocking calls would wait for the
// thread they block: they return false / FAILED_PRECONDITION there).
class RDMARPC_EXPORT ClientStream {
 public:
  // Opens a stream of `kind` to `method` ("/package.Service/Method"). For a
  // server-streaming call `first` is its one request message, sent with the
  // opening frame (and the client's half-close); it is serialised before
  // this returns and may be freed then. Does not block; a failure (no
  // connection, deadline) shows as Read/Write returning false and in
  // Finish's status. `context` must outlive the stream.
  ClientStream(Channel* channel, absl::string_view method, ClientContext* context, RpcKind kind,
               const google::protobuf::MessageLite* first);
  // Cancels the call when Finish was not called (as TryCancel), and waits
  // until the runtime let go of it.
  ~ClientStream();
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  // Sends `message` (serialised before this returns: it may be reused or
  // freed then); blocks while the server's window is full. False when
  // the stream ended (the server finished, the call failed or was
  // cancelled, or WritesDone was called): Finish tells why.
  bool Write(const google::protobuf::MessageLite& message);
  // As Write, with `attachment` beside the message (rdmarpc/buffer.h;
  // empty: none). The runtime holds the Buffer until the server pulled it.
  // A failure to send it ends the call, and Finish tells why:
  // RESOURCE_EXHAUSTED above max_message_bytes (this returns false) or at
  // the connection's exposure cap (max_exposed_bytes_per_connection),
  // FAILED_PRECONDITION when the server's rdmarpc does not take stream
  // attachments (found on the channel's thread: this may return true).
  bool Write(const google::protobuf::MessageLite& message, const Buffer& attachment);
  // Half-closes: the server's Read returns false once it read everything.
  // False when the stream ended already.
  bool WritesDone();
  // Blocks for the server's next message and parses it into `*message`.
  // False once the server finished (or the call failed): Finish tells why.
  // A message that does not parse ends the call with INTERNAL.
  bool Read(google::protobuf::MessageLite* message);
  // As Read; `*attachment` receives the bytes the server sent beside the
  // message (the caller's to keep), or becomes empty without any.
  bool Read(google::protobuf::MessageLite* message, Buffer* attachment);
  // A client-streaming call's one response: as Read, and its attachment
  // (ServerContext::set_response_attachment) becomes the ClientContext's
  // response_attachment.
  bool ReadResponse(google::protobuf::MessageLite* response);
  // Half-closes if needed, drops messages not read, and waits for the
  // server's status (or the call's failure: DEADLINE_EXCEEDED, UNAVAILABLE,
  // CANCELLED, RESOURCE_EXHAUSTED, ...). Once only.
  absl::Status Finish();

 private:
  std::shared_ptr<ClientStreamState> state_;
  bool finished_ = false;
};

// The server end of one stream, handed to a streaming handler; valid while
// the handler runs. One thread may Read while another Writes.
class RDMARPC_EXPORT ServerStream {
 public:
  explicit ServerStream(ServerStreamState* state) : state_(state) {}
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  // Blocks for the client's next message and parses it into `*message`.
  // False once the client half-closed and everything was read, or the call
  // was cancelled (ServerContext::IsCancelled) or a message did not parse
  // (the handler should return; the client is told INTERNAL).
  bool Read(google::protobuf::MessageLite* message);
  // As Read; `*attachment` receives the bytes the client sent beside the
  // message (the handler's to keep), or becomes empty without any.
  bool Read(google::protobuf::MessageLite* message, Buffer* attachment);
  // Sends `message`; blocks while the client's window is full. False once
  // the call was cancelled (the client is gone or gave up).
  bool Write(const google::protobuf::MessageLite& message);
  // As Write, with `attachment` beside the message (empty: none), held
  // until the client pulled it. A failure to send it ends the call with
  // that status in place of the handler's: RESOURCE_EXHAUSTED above
  // max_message_bytes (this returns false) or at the connection's exposure
  // cap, FAILED_PRECONDITION when the client's rdmarpc does not take stream
  // attachments (found on the worker: this may return true).
  bool Write(const google::protobuf::MessageLite& message, const Buffer& attachment);

 private:
  ServerStreamState* state_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_IMPL_STREAM_CALL_H_
