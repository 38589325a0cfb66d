#include "health/health_check_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "rdmarpc/impl/method_handler.h"

namespace rdmarpc {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::grpc::health::v1::HealthListRequest;
using ::grpc::health::v1::HealthListResponse;

// One Watch call. It writes at most one message at a time and never queues
// more than one: a status that changes while a write is out replaces the
// one waiting, so a slow watcher gets the latest status, not a backlog (as
// gRPC's DefaultHealthCheckService's WatchReactor does). A status equal to
// the last one written is not sent again.
//
// Threads: SendHealth runs on whichever thread sets a status (under the
// service's mu_); the reactions run on the call's worker. state_mu_ orders
// them; the service's mu_ is taken before it, never after.
class HealthCheckService::WatchReactor final : public ServerWriteReactor<HealthCheckResponse> {
 public:
  WatchReactor(HealthCheckService* service, std::string service_name)
      : service_(service), service_name_(std::move(service_name)) {}

  const std::string& service_name() const { return service_name_; }

  // Any thread: `status` is the name's status now.
  void SendHealth(ServingStatus status) ABSL_LOCKS_EXCLUDED(state_mu_) {
    absl::MutexLock lock(&state_mu_);
    if (finished_) return;
    if (write_pending_) {
      next_ = status;
      has_next_ = true;
      return;
    }
    WriteLocked(status);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&state_mu_);
    write_pending_ = false;
    if (!ok) {
      // Cancelled (OnCancel finishes) or the connection is gone.
      FinishLocked(absl::CancelledError(absl::StrCat("Watch of '", service_name_, "' ended")));
      return;
    }
    if (has_next_) {
      has_next_ = false;
      WriteLocked(next_);
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&state_mu_);
    FinishLocked(absl::CancelledError(absl::StrCat("Watch of '", service_name_, "' cancelled")));
  }

  void OnDone() override {
    service_->RemoveWatcher(service_name_, this);
    delete this;
  }

 private:
  void WriteLocked(ServingStatus status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_) {
    if (finished_ || status == response_.status()) return;
    response_.set_status(status);
    write_pending_ = true;
    StartWrite(&response_);
  }

  void FinishLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  HealthCheckService* const service_;
  const std::string service_name_;

  absl::Mutex state_mu_;
  // The message being written (unchanged until OnWriteDone), and so the
  // last status sent; UNKNOWN, which is never sent, before the first.
  HealthCheckResponse response_ ABSL_GUARDED_BY(state_mu_);
  bool write_pending_ ABSL_GUARDED_BY(state_mu_) = false;
  // The status to write once the pending write reacted.
  bool has_next_ ABSL_GUARDED_BY(state_mu_) = false;
  ServingStatus next_ ABSL_GUARDED_BY(state_mu_) = HealthCheckResponse::UNKNOWN;
  bool finished_ ABSL_GUARDED_BY(state_mu_) = false;
};

HealthCheckService::HealthCheckService() : Service("grpc.health.v1.Health") {
  // Registered by hand rather than through a generated Health::Service,
  // because the verbatim health.proto cannot carry rdmarpc's run_inline
  // option (gRPC's DefaultHealthCheckService also registers its methods
  // itself). The names and message types are the proto's, in its order.
  AddMethod(std::make_unique<
            internal::UnaryMethodHandler<HealthCheckService, HealthCheckRequest, HealthCheckResponse>>(
      "/grpc.health.v1.Health/Check", this, &HealthCheckService::Check, /*run_inline=*/true));
  AddMethod(std::make_unique<
            internal::UnaryMethodHandler<HealthCheckService, HealthListRequest, HealthListResponse>>(
      "/grpc.health.v1.Health/List", this, &HealthCheckService::List, /*run_inline=*/true));
  AddMethod(std::make_unique<internal::CallbackServerStreamingMethodHandler<
                HealthCheckService, HealthCheckRequest, HealthCheckResponse>>(
      "/grpc.health.v1.Health/Watch", this, &HealthCheckService::Watch, /*run_inline=*/true));
  services_[""].status = HealthCheckResponse::SERVING;
}

HealthCheckService::~HealthCheckService() {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, data] : services_) {
    CHECK(data.watchers.empty()) << "HealthCheckService destroyed while " << data.watchers.size()
                                 << " Watch call(s) of '" << name
                                 << "' are open: shut the Server down first";
  }
}

void HealthCheckService::SetServingStatus(absl::string_view service_name, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  auto it = services_.find(service_name);
  if (it == services_.end()) it = services_.emplace(std::string(service_name), ServiceData{}).first;
  SetStatusLocked(&it->second,
                  serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
}

void HealthCheckService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [name, data] : services_) {
    if (data.status == HealthCheckResponse::SERVICE_UNKNOWN) continue;  // only watched
    SetStatusLocked(&data,
                    serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
  }
}

void HealthCheckService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, data] : services_) {
    if (data.status == HealthCheckResponse::SERVICE_UNKNOWN) continue;
    SetStatusLocked(&data, HealthCheckResponse::NOT_SERVING);
  }
}

void HealthCheckService::SetStatusLocked(ServiceData* data, ServingStatus status) {
  data->status = status;
  for (WatchReactor* watcher : data->watchers) watcher->SendHealth(status);
}

HealthCheckService::ServingStatus HealthCheckService::GetServingStatus(
    absl::string_view service_name) const {
  absl::MutexLock lock(&mu_);
  auto it = services_.find(service_name);
  return it == services_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second.status;
}

absl::Status HealthCheckService::Check(ServerContext* /*context*/,
                                       const HealthCheckRequest& request,
                                       HealthCheckResponse* response) {
  const ServingStatus status = GetServingStatus(request.service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    // gRPC's health.proto: "If the requested service is unknown, the call
    // will fail with status NOT_FOUND."
    return absl::NotFoundError(absl::StrCat("unknown service '", request.service(), "'"));
  }
  response->set_status(status);
  return absl::OkStatus();
}

absl::Status HealthCheckService::List(ServerContext* /*context*/,
                                      const HealthListRequest& /*request*/,
                                      HealthListResponse* response) {
  absl::MutexLock lock(&mu_);
  size_t known = 0;
  for (const auto& [name, data] : services_) {
    if (data.status != HealthCheckResponse::SERVICE_UNKNOWN) ++known;
  }
  if (known > kMaxListedServices) {
    return absl::ResourceExhaustedError(absl::StrCat("server health list has ", known,
                                                     " services, more than the maximum ",
                                                     kMaxListedServices));
  }
  auto* statuses = response->mutable_statuses();
  for (const auto& [name, data] : services_) {
    if (data.status == HealthCheckResponse::SERVICE_UNKNOWN) continue;
    (*statuses)[name].set_status(data.status);
  }
  return absl::OkStatus();
}

ServerWriteReactor<HealthCheckResponse>* HealthCheckService::Watch(
    CallbackServerContext* /*context*/, const HealthCheckRequest* request) {
  auto* watcher = new WatchReactor(this, request->service());
  absl::MutexLock lock(&mu_);
  auto it = services_.find(request->service());
  if (it == services_.end()) it = services_.emplace(request->service(), ServiceData{}).first;
  it->second.watchers.insert(watcher);
  // Started before the method returns: the runtime sends it once bound.
  watcher->SendHealth(it->second.status);
  return watcher;
}

void HealthCheckService::RemoveWatcher(const std::string& service_name, WatchReactor* watcher) {
  absl::MutexLock lock(&mu_);
  auto it = services_.find(service_name);
  if (it == services_.end()) return;
  it->second.watchers.erase(watcher);
  if (it->second.watchers.empty() && it->second.status == HealthCheckResponse::SERVICE_UNKNOWN) {
    services_.erase(it);
  }
}

}  // namespace rdmarpc
