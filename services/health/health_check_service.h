// health_check_service.h: gRPC's health checking service, grpc.health.v1.Health
// (grpc/health/v1/health.proto, a verbatim copy of gRPC's), for rdmarpc
// servers, with the status table gRPC's HealthCheckServiceInterface sets.
//
// Register it beside your own services and flip each service's status as it
// becomes ready or starts draining:
//
//   rdmarpc::HealthCheckService health;        // "" (the whole server) is SERVING
//   rdmarpc::Server server;
//   server.AddService(&my_service);
//   server.AddService(&health);
//   server.Start("0.0.0.0:7000");
//   health.SetServingStatus("my.pkg.MyService", true);
//   ...
//   health.Shutdown();                          // everything NOT_SERVING, then
//   server.Shutdown();                          // stop the server
//
// Clients use the generated ::grpc::health::v1::Health::Stub
// ("grpc/health/v1/health.rdmarpc.pb.h"), as gRPC clients use gRPC's:
//   Check(HealthCheckRequest{service}) -> OK with SERVING or NOT_SERVING;
//       NOT_FOUND for a name whose status was never set ("" is the server
//       as a whole and always known).
//   Watch(HealthCheckRequest{service}) -> a stream: the current status at
//       once (SERVICE_UNKNOWN for a name never set), then one message per
//       change, until the client cancels or the server shuts down.
//   List(HealthListRequest) -> OK with every known service's status;
//       RESOURCE_EXHAUSTED when more than kMaxListedServices are known.
//
// Threads: Check and List run inline on the worker thread that received the
// call (a map lookup under a short lock), and Watch's reactor answers on the
// worker, so a probe is answered while every handler-pool thread is busy,
// and an open Watch holds no thread at all. Every public method may be
// called from any thread, also while the server answers calls.
//
// Lifetime: like every service, this object must outlive the Server it is
// registered with (Server::Shutdown ends open Watch calls: when its grace
// runs out it cancels them, and their clients get UNAVAILABLE).
#ifndef RDMARPC_SERVICES_HEALTH_HEALTH_CHECK_SERVICE_H_
#define RDMARPC_SERVICES_HEALTH_HEALTH_CHECK_SERVICE_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.pb.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {

// The setter side of a health service, shaped like gRPC's
// grpc::HealthCheckServiceInterface (grpcpp/health_check_service_interface.h)
// so code written against that ports by renaming.
class HealthCheckServiceInterface {
 public:
  virtual ~HealthCheckServiceInterface() = default;
  // Sets the status of `service_name` (a full protobuf service name such as
  // "my.pkg.MyService", or "" for the server as a whole): SERVING when
  // `serving`, NOT_SERVING otherwise. The name becomes known to Check and
  // List; watchers of it are told. Ignored after Shutdown().
  virtual void SetServingStatus(absl::string_view service_name, bool serving) = 0;
  // Sets the status of every known service name ("" included) at once.
  // Ignored after Shutdown().
  virtual void SetServingStatus(bool serving) = 0;
  // Marks every known service name NOT_SERVING for good: later
  // SetServingStatus calls have no effect, so a late "ready" cannot undo
  // draining.
  virtual void Shutdown() = 0;
};

// grpc.health.v1.Health over rdmarpc. Not copyable.
class HealthCheckService final : public Service, public HealthCheckServiceInterface {
 public:
  using ServingStatus = ::grpc::health::v1::HealthCheckResponse::ServingStatus;

  // The most services List answers with; with more known it fails
  // RESOURCE_EXHAUSTED, as grpc-go's health server does (its
  // maxAllowedServices, 100), so one reply stays small.
  static constexpr size_t kMaxListedServices = 100;

  // Starts with "" (the whole server) SERVING and no other name known.
  HealthCheckService();
  // The Server it was registered with must have shut down (Server::Wait
  // returned), so no Watch call is open.
  ~HealthCheckService() override;

  void SetServingStatus(absl::string_view service_name, bool serving) override;
  void SetServingStatus(bool serving) override;
  void Shutdown() override;

  // What Watch would report for `service_name` now: SERVING, NOT_SERVING,
  // or SERVICE_UNKNOWN for a name never set (where Check fails NOT_FOUND).
  ServingStatus GetServingStatus(absl::string_view service_name) const;

 private:
  class WatchReactor;

  // One name's status and the Watch calls on it. An entry exists while the
  // name is known or watched.
  struct ServiceData {
    // SERVING or NOT_SERVING once set; SERVICE_UNKNOWN while only watched.
    ServingStatus status = ::grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN;
    absl::flat_hash_set<WatchReactor*> watchers;
  };

  // The methods, registered by the constructor with gRPC's full names.
  // Check, List: inline on the worker (the unary handler's run_inline).
  absl::Status Check(ServerContext* context, const ::grpc::health::v1::HealthCheckRequest& request,
                     ::grpc::health::v1::HealthCheckResponse* response);
  absl::Status List(ServerContext* context, const ::grpc::health::v1::HealthListRequest& request,
                    ::grpc::health::v1::HealthListResponse* response);
  // Watch: a callback method (inline on the worker too); the reactor it
  // returns lives until the call ends and deletes itself in OnDone.
  ServerWriteReactor<::grpc::health::v1::HealthCheckResponse>* Watch(
      CallbackServerContext* context, const ::grpc::health::v1::HealthCheckRequest* request);

  // Sets one known name's status and tells its watchers.
  void SetStatusLocked(ServiceData* data, ServingStatus status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Worker, from a reactor's OnDone: forgets `watcher`, and the entry when
  // it was only watched.
  void RemoveWatcher(const std::string& service_name, WatchReactor* watcher);

  mutable absl::Mutex mu_;
  // Ordered, so List and logs read in name order.
  std::map<std::string, ServiceData, std::less<>> services_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SERVICES_HEALTH_HEALTH_CHECK_SERVICE_H_
