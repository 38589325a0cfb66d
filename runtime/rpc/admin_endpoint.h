// admin_endpoint.h: the process's admin HTTP endpoints (rdmarpc/admin.h)
// and the servers they report on.
#ifndef RDMARPC_RUNTIME_RPC_ADMIN_ENDPOINT_H_
#define RDMARPC_RUNTIME_RPC_ADMIN_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

// One HTTP server on one address, shared by everyone who asked for that
// address (Acquire); it stops when the last holder lets go.
class AdminEndpoint {
 public:
  // The endpoint on `host_port`, started now or already running. Errors:
  // see AdminServer::Start. Any thread.
  static absl::StatusOr<std::shared_ptr<AdminEndpoint>> Acquire(absl::string_view host_port);
  ~AdminEndpoint();  // stops serving, joins its threads
  AdminEndpoint(const AdminEndpoint&) = delete;
  AdminEndpoint& operator=(const AdminEndpoint&) = delete;

  int port() const { return port_; }

 private:
  struct Http;
  AdminEndpoint() = default;
  std::string address_;  // "ip:port" bound: the key of the endpoint registry
  int port_ = 0;
  std::unique_ptr<Http> http_;
  bool counted_ = false;  // in AnyAdminEndpointRunning's count
};

// True while any admin endpoint of the process runs (metrics then count
// by themselves). Any thread.
bool AnyAdminEndpointRunning();

// The address --rdmarpc_admin_listen names ("" when unset).
std::string AdminListenFlag();

// What /statusz and /healthz know of one rdmarpc::Server. Registered while
// the server runs; its methods may be called from an HTTP thread at any
// time until RemoveServerStatusSource returns.
class ServerStatusSource {
 public:
  virtual ~ServerStatusSource() = default;
  // True while the server accepts calls (Start returned, no Shutdown).
  virtual bool Serving() const = 0;
  // "host:port" as bound.
  virtual std::string Address() const = 0;
  // Lines for /statusz, each ending in '\n'.
  virtual std::string DescribeForStatusz() const = 0;
};
void AddServerStatusSource(const ServerStatusSource* source);
// Returns once no HTTP thread uses `source` any more.
void RemoveServerStatusSource(const ServerStatusSource* source);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_ADMIN_ENDPOINT_H_
