// device.cc: see device.h.
#include "runtime/transport/device.h"

#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_bool(rdmarpc_memory_windows, true,
            "Expose rendezvous buffers to a peer through a type-2 memory window bound to its "
            "connection's QP for one stream, where the device has them; off: the buffers' MRs "
            "grant remote access themselves and are re-registered each time an exposure ends");

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
  ibv_device_attr attr{};
  const bool has_windows = Verbs().query_device(context, &attr) == 0 &&
                           (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0 &&
                           attr.max_mw > 0;
  memory_windows_ = has_windows && FLAGS_rdmarpc_memory_windows;
  VLOG(1) << "rendezvous buffers exposed through "
          << (memory_windows_ ? "type-2 memory windows" : "their MRs' rkeys");
  pool_ = std::make_unique<LargeBufferPool>(pd_.get(), large_limit_bytes_, large_keep_bytes_,
                                            memory_windows_ ? kWindowedAccess : kRemoteAccess);
  return pd_.get();
}

bool DeviceResources::memory_windows() const {
  absl::MutexLock lock(&mu_);
  return memory_windows_;
}

LargeBufferPool* DeviceResources::large_pool() const {
  absl::MutexLock lock(&mu_);
  return pool_.get();
}

}  // namespace internal
}  // namespace rdmarpc
