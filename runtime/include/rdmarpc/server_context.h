// rdmarpc/server_context.h: what a service method knows about its call.
//
// The runtime creates one ServerContext per incoming call and passes it to the
// user's override of the generated Service method; it lives until the call
// has been answered (for a synchronous handler: until the method returns).
//
//   absl::Status Echo(rdmarpc::ServerContext* ctx, const EchoRequest& req,
//                     EchoResponse* resp) override {
//     for (int i = 0; i < 100; ++i) {
//       if (ctx->IsCancelled()) return absl::CancelledError("client gave up");
//       DoSomeWork();
//     }
//     ...
//   }
//
// A call is cancelled when the client cancels it (ClientContext::TryCancel,
// or its deadline passed and it stopped waiting), when the client's
// connection is lost, or when Server::Shutdown's grace period ran out before
// the handler returned. The client has been answered by then; whatever the
// handler returns afterwards is dropped.
#ifndef RDMARPC_SERVER_CONTEXT_H_
#define RDMARPC_SERVER_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

class AuthContext;
namespace internal {
class ServerContextAccess;
}  // namespace internal

class RDMARPC_EXPORT ServerContext {
 public:
  // A context for calling a service method directly, e.g. in a unit test of
  // the service: no method name, empty peer, no deadline, not cancelled.
  ServerContext() = default;
  ~ServerContext() = default;
  ServerContext(const ServerContext&) = delete;
  ServerContext& operator=(const ServerContext&) = delete;

  // Full method name, "/package.Service/Method".
  const std::string& method() const { return *method_; }
  // The client's address, "ip:port".
  const std::string& peer() const { return *peer_; }
  // The client's deadline translated to this host's clock (the client sends
  // the time remaining when its request goes on the wire, as gRPC's
  // grpc-timeout header does); absl::InfiniteFuture() when it set none.
  absl::Time deadline() const { return deadline_; }

  // The client's metadata (ClientContext::AddMetadata).
  const std::multimap<std::string, std::string>& client_metadata() const {
    return client_metadata_;
  }
  // Metadata sent to the client before the first response message
  // (ClientContext::GetServerInitialMetadata), and with the status
  // (GetServerTrailingMetadata). Keys and values follow the rules of
  // ClientContext::AddMetadata; an entry that breaks them, or metadata over
  // the client's limit, fails the call with INTERNAL / RESOURCE_EXHAUSTED.
  // Initial metadata added after the first message was written is not
  // sent. Handler thread.
  void AddInitialMetadata(absl::string_view key, absl::string_view value) {
    initial_metadata_.emplace(std::string(key), std::string(value));
  }
  // One reserved key may go in the trailing metadata of a unary answer:
  // "grpc-retry-pushback-ms" (gRFC A6 pushback), a decimal count of
  // milliseconds after which a client retrying under a policy should try
  // again, or a negative value for "do not retry".
  void AddTrailingMetadata(absl::string_view key, absl::string_view value) {
    trailing_metadata_.emplace(std::string(key), std::string(value));
  }

  // The attachment the client sent beside the request
  // (ClientContext::set_request_attachment, rdmarpc/buffer.h); empty
  // (holding no memory) when it sent none or one of 0 bytes. The handler
  // may keep it (a copy shares the bytes) past the call, e.g. to store it
  // or send it on. Unary and server-streaming methods (a stream's other
  // messages carry theirs: ServerReader::Read(&message, &buffer)).
  const Buffer& request_attachment() const { return request_attachment_; }
  // Bytes sent beside an OK response (ClientContext::response_attachment);
  // dropped when the call ends with an error status and not sent when it
  // has 0 bytes. Unary and client-streaming methods (beside their one
  // response); server- and bidirectional-streaming methods do not send it
  // (their messages carry attachments: ServerWriter::Write(message,
  // buffer)). The runtime keeps a
  // reference until the client has read them. Errors the call may end
  // with instead:
  // FAILED_PRECONDITION when the client's rdmarpc predates attachments (a
  // client-streaming call's: predates attachments on streams);
  // RESOURCE_EXHAUSTED when it is larger than max_message_bytes or the
  // connection's exposure cap. Handler thread, before the handler returns
  // (or a reactor's Finish).
  void set_response_attachment(Buffer attachment) { response_attachment_ = std::move(attachment); }
  const Buffer& response_attachment() const { return response_attachment_; }

  // Who is calling (rdmarpc/security.h): what the server's
  // ConnectionAuthenticator learned of the connection, plus what its
  // AuthMetadataProcessor added for this call. Never null: an empty
  // context (not authenticated) without either. The context is shared and
  // never changes once the handler runs; it may be kept past the call.
  std::shared_ptr<const AuthContext> auth_context() const;

  // True once the call was cancelled (see the top of this file). Any thread;
  // cheap (one atomic load), so a long handler may poll it.
  bool IsCancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Runs `callback` once when the call is cancelled: on the thread that
  // cancels it (the server worker that owns the call's connection), so it
  // must not block; at once on this thread when the call is cancelled
  // already. Never runs for a call that finishes uncancelled. Any thread,
  // while the context lives. A ClientContext made by FromServerContext from
  // this context must not be destroyed inside such a callback.
  void AddOnCancelCallback(absl::AnyInvocable<void() &&> callback);

 private:
  friend class internal::ServerContextAccess;

  // Marks the call cancelled and runs the callbacks; false when it was
  // cancelled already.
  bool Cancel();
  // Registers a callback that RemoveOnCancelCallback can take back; returns
  // 0 (and runs nothing) when the call is cancelled already.
  uint64_t AddRemovableOnCancelCallback(absl::AnyInvocable<void() &&> callback);
  void RemoveOnCancelCallback(uint64_t id);

  static const std::string& EmptyString();

  const std::string* method_ = &EmptyString();
  const std::string* peer_ = &EmptyString();
  absl::Time deadline_ = absl::InfiniteFuture();
  std::multimap<std::string, std::string> client_metadata_;
  Buffer request_attachment_;
  Buffer response_attachment_;
  std::shared_ptr<const AuthContext> auth_context_;
  std::multimap<std::string, std::string> initial_metadata_;
  std::multimap<std::string, std::string> trailing_metadata_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;  // only for callbacks: never taken on a call's fast path
  uint64_t next_callback_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool callbacks_running_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<uint64_t, absl::AnyInvocable<void() &&>>> on_cancel_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rdmarpc

#endif  // RDMARPC_SERVER_CONTEXT_H_
