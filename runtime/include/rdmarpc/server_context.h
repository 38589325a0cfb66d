// rdmarpc/server_context.h: what a service method knows about its call.
//
// The runtime creates one ServerContext per incoming call and passes it to the
// user's override of the generated Service method; it lives until the method
// returns.
//
//   absl::Status Echo(rdmarpc::ServerContext* ctx, const EchoRequest& req,
//                     EchoResponse* resp) override {
//     if (absl::Now() > ctx->deadline()) return absl::DeadlineExceededError("late");
//     ...
//   }
#ifndef RDMARPC_SERVER_CONTEXT_H_
#define RDMARPC_SERVER_CONTEXT_H_

#include <string>

#include "absl/time/time.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

class RDMARPC_EXPORT ServerContext {
 public:
  ServerContext(std::string method, std::string peer, absl::Time deadline)
      : method_(std::move(method)), peer_(std::move(peer)), deadline_(deadline) {}
  // Runtime use: refers to `*method` and `*peer` without copying them (no
  // allocation per call); both must outlive this context.
  ServerContext(const std::string* method, const std::string* peer, absl::Time deadline)
      : method_ref_(method), peer_ref_(peer), deadline_(deadline) {}
  ServerContext(const ServerContext&) = delete;
  ServerContext& operator=(const ServerContext&) = delete;

  // Full method name, "/package.Service/Method".
  const std::string& method() const { return *method_ref_; }
  // The client's address, "ip:port".
  const std::string& peer() const { return *peer_ref_; }
  // The client's deadline translated to this host's clock (the client sends
  // the time remaining, as gRPC's grpc-timeout header does);
  // absl::InfiniteFuture() when the client set none.
  absl::Time deadline() const { return deadline_; }

 private:
  std::string method_;
  std::string peer_;
  const std::string* method_ref_ = &method_;
  const std::string* peer_ref_ = &peer_;
  absl::Time deadline_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SERVER_CONTEXT_H_
