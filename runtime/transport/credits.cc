// credits.cc: see credits.h.
#include "runtime/transport/credits.h"

#include <algorithm>

#include "glog/logging.h"

namespace rdmarpc {
namespace internal {

CreditWindow::CreditWindow(int peer_recv_depth, int local_recv_depth)
    : credits_(peer_recv_depth),
      threshold_(std::max(2, local_recv_depth / 2)),
      ring_threshold_(threshold_) {}

void CreditWindow::Consume() {
  CHECK_GT(credits_, 0) << "send without a credit would provoke RNR";
  --credits_;
}

uint16_t CreditWindow::TakeOwed() {
  const int n = std::min(owed_, 0xFFFF);
  owed_ -= n;
  return static_cast<uint16_t>(n);
}

}  // namespace internal
}  // namespace rdmarpc
