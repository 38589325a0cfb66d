// health_service.h: a ready-made implementation of rdmarpc.health.Health.
//
// Register it beside your own services and flip each service's status as it
// becomes ready or starts draining:
//
//   rdmarpc::HealthService health;             // "" (the whole server) is SERVING
//   rdmarpc::Server server;
//   server.AddService(&my_service);
//   server.AddService(&health);
//   health.SetServingStatus("my.pkg.MyService", true);
//   ...
//   health.Shutdown();                          // everything NOT_SERVING, then
//   server.Shutdown();                          // stop the server
//
// A probe calls rdmarpc::health::Health::Stub::Check with the full service
// name (empty for the server as a whole) and reads HealthCheckResponse.status:
// SERVING, NOT_SERVING, or SERVICE_UNKNOWN for a name never registered here.
//
// Thread safety: every method may be called from any thread, also while the
// server is answering Check calls.
#ifndef RDMARPC_SERVICES_HEALTH_HEALTH_SERVICE_H_
#define RDMARPC_SERVICES_HEALTH_HEALTH_SERVICE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "health.pb.h"
#include "health.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {

class HealthService final : public health::Health::Service {
 public:
  // Starts with the overall status ("") SERVING and no other service known.
  HealthService();
  ~HealthService() override;

  // Sets the status reported for `service` (full protobuf name, or "" for
  // the whole server): SERVING when `serving`, NOT_SERVING otherwise. After
  // Shutdown() this is ignored, so a late "ready" cannot undo draining.
  void SetServingStatus(absl::string_view service, bool serving);

  // Sets the status of every known service, and of "", at once.
  void SetServingStatus(bool serving);

  // Marks everything NOT_SERVING for good, as gRPC's HealthCheckService does
  // while a server drains; later SetServingStatus calls have no effect.
  void Shutdown();

  // The status Check would report for `service` right now.
  health::HealthCheckResponse::ServingStatus GetServingStatus(absl::string_view service) const;

  // rdmarpc.health.Health.Check. Returns OK with SERVING, NOT_SERVING or
  // SERVICE_UNKNOWN in `response`.
  absl::Status Check(ServerContext* context, const health::HealthCheckRequest& request,
                     health::HealthCheckResponse* response) override;

 private:
  mutable absl::Mutex mu_;
  // Full service name -> serving?
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SERVICES_HEALTH_HEALTH_SERVICE_H_
