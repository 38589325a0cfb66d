#include "bench/micro/soft_pd.h"

#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace bench {

SoftPd::SoftPd() {
  const internal::VerbsApi& verbs = internal::SoftVerbs();
  int count = 0;
  devices_ = verbs.get_device_list(&count);
  if (devices_ == nullptr || count < 1) return;
  context_ = verbs.open_device(devices_[0]);
  if (context_ == nullptr) return;
  pd_ = verbs.alloc_pd(context_);
}

SoftPd::~SoftPd() {
  const internal::VerbsApi& verbs = internal::SoftVerbs();
  if (pd_ != nullptr) verbs.dealloc_pd(pd_);
  if (context_ != nullptr) verbs.close_device(context_);
  if (devices_ != nullptr) verbs.free_device_list(devices_);
}

}  // namespace bench
}  // namespace rdmarpc
