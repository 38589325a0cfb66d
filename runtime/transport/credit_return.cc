// credit_return.cc: where credits come back. Receives consumed in one CQ
// poll batch are re-posted with one chained ibv_post_recv and become credits
// owed to the peer; they ride in the next outgoing header, or — when traffic
// is one-sided — in an explicit kCredit message (see CreditWindow for the
// reserve that keeps this deadlock-free).
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {
namespace {
constexpr uint64_t kRecvTag = uint64_t{1} << 63;
}  // namespace

void Connection::SendCreditMessage() {
  if (send_slab_->free_count() == 0 ||
      sq_head_ - sq_tail_ >= static_cast<uint64_t>(kSendQueueDepth)) {
    return;
  }
  WireHeader h;
  h.kind = MsgKind::kCredit;
  PostEager(MsgKind::kCredit, 0, 0, h, {}, {}, {}, {});
}

void Connection::AfterPollBatch() {
  if (!usable()) return;
  if (!to_repost_.empty()) {
    // Re-post the batch's receives in one chained ibv_post_recv.
    const size_t n = to_repost_.size();
    std::vector<ibv_recv_wr> wrs(n);
    std::vector<ibv_sge> sges(n);
    for (size_t i = 0; i < n; ++i) {
      const int idx = to_repost_[i];
      sges[i] = ibv_sge{reinterpret_cast<uint64_t>(recv_slab_->data(idx)),
                        static_cast<uint32_t>(recv_slab_->buffer_bytes()), recv_slab_->lkey()};
      wrs[i].wr_id = kRecvTag | static_cast<uint64_t>(idx);
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(qp_.get(), wrs.data(), &bad);
    to_repost_.clear();
    if (rc != 0) {
      Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_, ": ",
                                                ErrnoToStatus("ibv_post_recv", rc).message())));
      return;
    }
    recv_posted_ += static_cast<int>(n);
    credits_->OnReposted(static_cast<int>(n));
  }
  Flush();
  if (usable() && credits_.has_value() && credits_->ShouldSendCreditMessage()) {
    SendCreditMessage();
    Doorbell();
  }
}

}  // namespace internal
}  // namespace rdmarpc
