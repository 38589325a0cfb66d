#include "health/health_service.h"

#include <utility>

namespace rdmarpc {

using health::HealthCheckResponse;

HealthService::HealthService() { serving_.emplace("", true); }

HealthService::~HealthService() = default;

void HealthService::SetServingStatus(absl::string_view service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  serving_[service] = serving;
}

void HealthService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& entry : serving_) entry.second = serving;
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  for (auto& entry : serving_) entry.second = false;
  shut_down_ = true;
}

HealthCheckResponse::ServingStatus HealthService::GetServingStatus(
    absl::string_view service) const {
  absl::MutexLock lock(&mu_);
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

absl::Status HealthService::Check(ServerContext* /*context*/,
                                  const health::HealthCheckRequest& request,
                                  HealthCheckResponse* response) {
  response->set_status(GetServingStatus(request.service()));
  return absl::OkStatus();
}

}  // namespace rdmarpc
