// rdmarpc/client_context.h: per-call settings and results on the client side.
//
// A ClientContext carries the deadline of one call and, after the call, what
// the runtime learned about it. Use a fresh ClientContext for every call, as
// in gRPC:
//
//   rdmarpc::ClientContext ctx;
//   ctx.set_timeout(absl::Milliseconds(50));
//   absl::Status s = stub->Echo(&ctx, request, &response);
//   if (absl::IsDeadlineExceeded(s)) { ... }
//
// Thread safety: a ClientContext belongs to one call; it may be set up on any
// thread but must not be touched while its call is in flight.
#ifndef RDMARPC_CLIENT_CONTEXT_H_
#define RDMARPC_CLIENT_CONTEXT_H_

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

class RDMARPC_EXPORT ClientContext {
 public:
  ClientContext() = default;
  ClientContext(const ClientContext&) = delete;
  ClientContext& operator=(const ClientContext&) = delete;

  // The absolute time after which the call fails with DEADLINE_EXCEEDED.
  // Default: absl::InfiniteFuture() (no deadline, as in gRPC). The deadline
  // also bounds connection set-up; the channel's connect_timeout applies
  // on top of it.
  void set_deadline(absl::Time deadline) { deadline_ = deadline; }
  // Shorthand for set_deadline(absl::Now() + timeout).
  void set_timeout(absl::Duration timeout) { deadline_ = absl::Now() + timeout; }
  absl::Time deadline() const { return deadline_; }

  // After the call completes: the server address ("ip:port") that served it,
  // or empty when no connection was made.
  const std::string& peer() const { return peer_; }
  void set_peer_for_runtime(std::string peer) { peer_ = std::move(peer); }

 private:
  absl::Time deadline_ = absl::InfiniteFuture();
  std::string peer_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_CLIENT_CONTEXT_H_
