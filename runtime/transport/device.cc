// device.cc: see device.h.
#include "runtime/transport/device.h"

#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace internal {

void ChooseProvider() { (void)Verbs(); }

const char* ProviderName() { return Verbs().provider_name; }

RegisteredMemoryTotals GetRegisteredMemoryTotals() {
  const RegisteredMemory m = GetRegisteredMemory();
  return {m.bytes, m.regions};
}

int64_t GetProviderRnrRetries() { return ProviderRnrRetries(); }

DeviceResources::DeviceResources(size_t large_limit_bytes, size_t large_keep_bytes)
    : large_limit_bytes_(large_limit_bytes), large_keep_bytes_(large_keep_bytes) {}

DeviceResources::~DeviceResources() {
  absl::MutexLock lock(&mu_);
  pool_.reset();  // deregister before the PD goes
  pd_.reset();
}

absl::StatusOr<ibv_pd*> DeviceResources::GetPd(ibv_context* context) {
  absl::MutexLock lock(&mu_);
  if (pd_ != nullptr) {
    if (context != context_) {
      return absl::UnimplementedError(
          "connections on a second RDMA device in one Channel/Server are not supported");
    }
    return pd_.get();
  }
  if (context == nullptr) return absl::UnavailableError("rdma_cm id has no device context");
  absl::StatusOr<PdPtr> pd = AllocPd(context);
  if (!pd.ok()) return pd.status();
  pd_ = std::move(*pd);
  context_ = context;
  pool_ = std::make_unique<LargeBufferPool>(pd_.get(), large_limit_bytes_, large_keep_bytes_);
  return pd_.get();
}

LargeBufferPool* DeviceResources::large_pool() const {
  absl::MutexLock lock(&mu_);
  return pool_.get();
}

}  // namespace internal
}  // namespace rdmarpc
