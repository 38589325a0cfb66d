// device.h: the protection domain and large-buffer pool shared by all
// connections of one Channel or Server.
//
// rdma_cm picks the device (ibv_context) when it resolves an address, so the
// PD is made lazily from the first connection's id->verbs. A second device is
// not supported yet: GetPd returns UNIMPLEMENTED for it.
//
// Thread-safe.
#ifndef RDMARPC_RUNTIME_TRANSPORT_DEVICE_H_
#define RDMARPC_RUNTIME_TRANSPORT_DEVICE_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

// Chooses the verbs provider (rdma-core or softrdma, see verbs.h) now, so
// the choice is logged at start and not made by the first call. Any thread.
void ChooseProvider();
// The provider chosen: "rdma-core" or "soft" (for logs). Any thread.
const char* ProviderName();

// Memory this process holds registered with the device now, in bytes and
// regions. Any thread.
struct RegisteredMemoryTotals {
  int64_t bytes = 0;
  int64_t regions = 0;
};
RegisteredMemoryTotals GetRegisteredMemoryTotals();
// RNR retries the provider counted for this process, or -1 where it keeps
// no such count (rdma-core: the NIC retries in hardware). Any thread.
int64_t GetProviderRnrRetries();

// Owned by a shared_ptr where attachments are received (Channel, Server):
// an attachment pulled into a buffer of the pool keeps the resources
// alive (keepalive()) until the user drops it, which may be after the
// Channel or Server is gone.
class DeviceResources : public std::enable_shared_from_this<DeviceResources> {
 public:
  // `large_limit_bytes`: most registered memory for rendezvous (0 = none).
  DeviceResources(size_t large_limit_bytes, size_t large_keep_bytes);
  ~DeviceResources();  // every connection using the PD must be gone

  absl::StatusOr<ibv_pd*> GetPd(ibv_context* context);
  // nullptr until GetPd succeeded once.
  LargeBufferPool* large_pool() const;
  // What keeps these resources alive (nullptr when not owned by a
  // shared_ptr, e.g. a test's own on the stack). Any thread.
  std::shared_ptr<void> keepalive() { return weak_from_this().lock(); }
  // Whether buffers are exposed through type-2 memory windows
  // (exposure_table.h): the device reports IBV_DEVICE_MEM_WINDOW_TYPE_2B
  // and max_mw > 0, and --rdmarpc_memory_windows is on. Decided by the
  // first GetPd; false before.
  bool memory_windows() const;

 private:
  const size_t large_limit_bytes_;
  const size_t large_keep_bytes_;
  mutable absl::Mutex mu_;
  ibv_context* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  PdPtr pd_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<LargeBufferPool> pool_ ABSL_GUARDED_BY(mu_);
  bool memory_windows_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_DEVICE_H_
