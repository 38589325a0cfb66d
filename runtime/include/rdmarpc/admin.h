// rdmarpc/admin.h: the admin HTTP endpoint of a process — what a person
// or a Prometheus server reads of a running rdmarpc server or client.
//
//   // A server: --rdmarpc_admin_listen=127.0.0.1:9464, or
//   rdmarpc::ServerOptions so;
//   so.admin_listen = "127.0.0.1:9464";
//   // A client process, for as long as `admin` lives:
//   absl::StatusOr<std::unique_ptr<rdmarpc::AdminServer>> admin =
//       rdmarpc::AdminServer::StartFromFlags();
//
//   GET /metrics   Prometheus text exposition (rdmarpc/metrics.h), with
//                  Content-Type kMetricsContentType.
//   GET /statusz   plain text for a person: the process (pid, uptime,
//                  provider), each server (address, state, services,
//                  workers, open connections), each completion engine's
//                  shared receive queue, when it has one (buffers, bytes
//                  registered, posted, not granted, connections attached
//                  and borrowing), each connection of every completion
//                  engine (peer, role, state, device and port,
//                  QP number and state, credits each way and whether
//                  they are granted from a shared receive queue, streams in
//                  flight, queued frames, rendezvous transfers, buffers
//                  exposed, messages and bytes each way, credit-stall time,
//                  error completions and the last error), registered memory
//                  and buffer pools, and every --rdmarpc_* flag with its
//                  value (and default, where it was changed).
//   GET /healthz   200 "ok" while every rdmarpc::Server of the process is
//                  serving (and in a process with none); 503 naming the
//                  servers that are not (shutting down).
//   anything else  404; POST, PUT, DELETE or PATCH on those paths, 405; a
//                  malformed request (a POST without Content-Length), 400.
//
// A Server serves it when --rdmarpc_admin_listen=HOST:PORT is set (or
// ServerOptions::admin_listen): it starts with the server's Start (which
// then fails, with the endpoint's error, when the address cannot be bound)
// and stops when the last server using it is destroyed; servers of one
// process given the same address share one endpoint. A client process
// asks for it with AdminServer::StartFromFlags (or Start). While an
// endpoint runs, channels and servers made in the process count call
// metrics (enable_metrics) by themselves.
//
// HTTP is served by cpp-httplib (Debian's libcpp-httplib-dev) on threads
// of its own: one accepts, 8 answer, one request per connection, and a
// client that sends nothing is dropped after 1 s (so 8 such clients at once
// delay the others by up to 1 s). /statusz asks each engine for its
// connections on the engine's own thread and waits up to 1 s (an engine
// that does not answer in time is listed as such). Plain HTTP, no
// authentication: bind it to loopback or a management network.
#ifndef RDMARPC_ADMIN_H_
#define RDMARPC_ADMIN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

namespace internal {
class AdminEndpoint;
}  // namespace internal

class RDMARPC_EXPORT AdminServer {
 public:
  // Serves the endpoint on `host_port` ("127.0.0.1:9464"; port 0 picks a
  // free one, see port()). An endpoint of this process already on the same
  // address is shared, not started twice. INVALID_ARGUMENT for an address
  // that does not parse; UNAVAILABLE when it cannot be bound (the message
  // names it: in use, or not an address of this host). Any thread.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Start(absl::string_view host_port);
  // Start(--rdmarpc_admin_listen), or nullptr (and OK) when the flag is
  // empty. For a client process; a Server does this itself.
  static absl::StatusOr<std::unique_ptr<AdminServer>> StartFromFlags();

  // Stops serving once no other holder (a Server or AdminServer on the same
  // address) uses the endpoint; waits for requests being answered (up to
  // about 1 s for a /statusz). Not from a request handler of the endpoint.
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // The TCP port bound.
  int port() const;

 private:
  explicit AdminServer(std::shared_ptr<internal::AdminEndpoint> endpoint);
  std::shared_ptr<internal::AdminEndpoint> endpoint_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_ADMIN_H_
