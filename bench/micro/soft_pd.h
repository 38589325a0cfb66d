// soft_pd.h: a protection domain on the softrdma device, for benchmarks that
// register memory without a connection (buffer pools).
#ifndef RDMARPC_BENCH_MICRO_SOFT_PD_H_
#define RDMARPC_BENCH_MICRO_SOFT_PD_H_

#include <infiniband/verbs.h>

namespace rdmarpc {
namespace bench {

// Opens the first softrdma device and allocates a PD on it; closes both on
// destruction. Bound to softrdma directly (SoftVerbs), not to the process's
// provider choice, so the numbers are softrdma's on every machine.
// pd() is nullptr when the device could not be opened or the PD allocated.
class SoftPd {
 public:
  SoftPd();
  ~SoftPd();
  SoftPd(const SoftPd&) = delete;
  SoftPd& operator=(const SoftPd&) = delete;

  ibv_pd* pd() const { return pd_; }

 private:
  ibv_device** devices_ = nullptr;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

}  // namespace bench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_MICRO_SOFT_PD_H_
