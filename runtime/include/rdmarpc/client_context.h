// rdmarpc/client_context.h: per-call settings and results on the client side.
//
// A ClientContext carries the deadline of one call, lets another thread
// cancel it, and after the call tells what the runtime learned about it. Use
// a fresh ClientContext for every call, as in gRPC:
//
//   rdmarpc::ClientContext ctx;
//   ctx.set_timeout(absl::Milliseconds(50));
//   absl::Status s = stub->Echo(&ctx, request, &response);
//   if (absl::IsDeadlineExceeded(s)) { ... }
//
// A call made while serving another one inherits that call's deadline and
// cancellation:
//
//   absl::Status Frontend::Get(rdmarpc::ServerContext* server_ctx, ...) {
//     std::unique_ptr<rdmarpc::ClientContext> ctx =
//         rdmarpc::ClientContext::FromServerContext(*server_ctx);
//     return backend_stub_->Get(ctx.get(), request, response);
//   }
//
// Thread safety: a ClientContext belongs to one call; it may be set up on any
// thread but must not be touched while its call is in flight, except for
// TryCancel, which any thread may call at any time while the context lives.
#ifndef RDMARPC_CLIENT_CONTEXT_H_
#define RDMARPC_CLIENT_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

class CallCredentials;
class ServerContext;
namespace internal {
class ClientContextAccess;
class CallCanceller;
}  // namespace internal

class RDMARPC_EXPORT ClientContext {
 public:
  ClientContext() = default;
  // Detaches from the parent ServerContext (FromServerContext). The call
  // must have finished.
  ~ClientContext();
  ClientContext(const ClientContext&) = delete;
  ClientContext& operator=(const ClientContext&) = delete;

  // A context for a call made while serving `server_context`'s call: its
  // deadline is the server call's deadline, and cancelling the server call
  // (the client gave up, the connection was lost, Shutdown's grace ran out)
  // cancels this one. It must not outlive `server_context`. Any thread.
  static std::unique_ptr<ClientContext> FromServerContext(const ServerContext& server_context);

  // The absolute time after which the call fails with DEADLINE_EXCEEDED.
  // Default: absl::InfiniteFuture() (no deadline, as in gRPC). The deadline
  // also bounds connection set-up; the channel's connect_timeout applies
  // on top of it.
  void set_deadline(absl::Time deadline) { deadline_ = deadline; }
  // Shorthand for set_deadline(absl::Now() + timeout).
  void set_timeout(absl::Duration timeout) { deadline_ = absl::Now() + timeout; }
  absl::Time deadline() const { return deadline_; }

  // Cancels the call: it ends with CANCELLED at once (its callback runs, or
  // its blocking caller returns, without waiting for the server), exactly
  // once. When the request was sent the server is told (its
  // ServerContext::IsCancelled() turns true). Any thread, at any time while
  // this context lives: before the call starts (it then fails CANCELLED
  // without being sent), during it, or after it ended (then nothing
  // happens). A call that completes while TryCancel runs may end either way.
  void TryCancel();

  // Adds a metadata entry the server reads in ServerContext::client_metadata()
  // (gRPC's custom metadata). Keys follow gRPC's rules: lowercase ASCII
  // letters, digits, '-', '_' and '.', not starting with "grpc-" or ':';
  // a key ending in "-bin" carries any bytes, other values printable ASCII
  // (0x20..0x7E). A bad key or value fails the call with INTERNAL naming it,
  // before it is sent. All of a call's metadata together may be at most
  // ChannelOptions::max_metadata_bytes (8 KiB by default, as gRPC's), else
  // the call fails RESOURCE_EXHAUSTED naming both sizes. Before the call.
  void AddMetadata(absl::string_view key, absl::string_view value) {
    metadata_.emplace(std::string(key), std::string(value));
  }
  // Call credentials for this call only (rdmarpc/security.h), applied
  // after the channel's ChannelOptions::call_credentials; the context
  // shares them. Before the call; nullptr (the default) adds none.
  void set_credentials(std::shared_ptr<CallCredentials> credentials) {
    credentials_ = std::move(credentials);
  }
  const std::shared_ptr<CallCredentials>& credentials() const { return credentials_; }
  // After the call (or, for a stream, once the first message or the end
  // arrived): the server's initial and trailing metadata. Empty when it
  // sent none.
  const std::multimap<std::string, std::string>& GetServerInitialMetadata() const {
    return server_initial_metadata_;
  }
  const std::multimap<std::string, std::string>& GetServerTrailingMetadata() const {
    return server_trailing_metadata_;
  }

  // Bytes sent beside the request without being serialised
  // (rdmarpc/buffer.h); the server reads them in
  // ServerContext::request_attachment(). Unary and server-streaming calls
  // (beside their one request); a client- or bidirectional-streaming call
  // with one of 1 byte or more fails INVALID_ARGUMENT (its messages carry
  // attachments instead: rdmarpc/sync_stream.h). One of 0 bytes is not
  // sent (the server sees none). Channels with a retry or hedging policy
  // send it with every attempt. The context keeps a reference until it is
  // destroyed or set again. Errors the call may end with because of it:
  // FAILED_PRECONDITION when the server's rdmarpc predates attachments (on
  // a stream: stream attachments; send the bytes in the message instead);
  // RESOURCE_EXHAUSTED when it is larger than max_message_bytes or the
  // connection's exposure cap. Before the call.
  void set_request_attachment(Buffer attachment) { request_attachment_ = std::move(attachment); }
  const Buffer& request_attachment() const { return request_attachment_; }
  // After the call: the attachment the server sent with its response
  // (ServerContext::set_response_attachment; unary and client-streaming
  // calls), the caller's to keep; empty (holding no memory) when it sent
  // none or one of 0 bytes.
  const Buffer& response_attachment() const { return response_attachment_; }

  // The server address ("ip:port") the call was sent to, set once the
  // request went to a connection, whatever the call's outcome; empty when
  // it never reached one.
  const std::string& peer() const { return peer_; }

 private:
  friend class internal::ClientContextAccess;

  // Cancellation handshake between TryCancel and the call (see
  // runtime/rpc/contexts.cc).
  enum CancelState : int {
    kIdle = 0,             // no call bound
    kBound = 1,            // a call runs; canceller_ is valid
    kCancelRequested = 2,  // TryCancel won: the canceller delivers the end
    kCancelledEarly = 3,   // TryCancel before any call: the next one fails
  };

  absl::Time deadline_ = absl::InfiniteFuture();
  std::string peer_;
  std::multimap<std::string, std::string> metadata_;
  std::shared_ptr<CallCredentials> credentials_;
  Buffer request_attachment_;
  Buffer response_attachment_;
  std::multimap<std::string, std::string> server_initial_metadata_;
  std::multimap<std::string, std::string> server_trailing_metadata_;
  std::atomic<int> cancel_state_{kIdle};
  internal::CallCanceller* canceller_ = nullptr;
  const ServerContext* parent_ = nullptr;
  uint64_t parent_callback_ = 0;
};

}  // namespace rdmarpc

#endif  // RDMARPC_CLIENT_CONTEXT_H_
