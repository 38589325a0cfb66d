// credit_return.cc: where credits come back. Consumed receives are re-posted
// with one chained ibv_post_recv once a batch of them is pending (or the
// completion loop goes idle) and become credits owed to the peer; they ride in the next outgoing header, or — when traffic
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

void Connection::RepostReceives() {
  // One chained ibv_post_recv for everything pending; scratch arrays sized
  // recv_depth at set-up, so no allocation here.
  const size_t n = to_repost_.size();
  for (size_t i = 0; i < n; ++i) {
    const int idx = to_repost_[i];
    recv_sges_[i] = ibv_sge{reinterpret_cast<uint64_t>(recv_slab_->data(idx)),
                            static_cast<uint32_t>(recv_slab_->buffer_bytes()), recv_slab_->lkey()};
    recv_wrs_[i].wr_id = kRecvTag | static_cast<uint64_t>(idx);
    recv_wrs_[i].sg_list = &recv_sges_[i];
    recv_wrs_[i].num_sge = 1;
    recv_wrs_[i].next = i + 1 < n ? &recv_wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(qp_.get(), recv_wrs_.data(), &bad);
  to_repost_.clear();
  force_repost_ = false;
  if (rc != 0) {
    Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_, ": ",
                                              ErrnoToStatus("ibv_post_recv", rc).message())));
    return;
  }
  recv_posted_ += static_cast<int>(n);
  credits_->OnReposted(static_cast<int>(n));
}

void Connection::RunEndOfStep() {
  if (!usable()) return;
  // Batched: one ibv_post_recv per repost_batch_ messages (transport.h).
  if (!to_repost_.empty() &&
      (static_cast<int>(to_repost_.size()) >= repost_batch_ || force_repost_)) {
    RepostReceives();
    if (!usable()) return;
  }
  Flush();
  if (usable() && credits_.has_value() && credits_->ShouldSendCreditMessage()) {
    SendCreditMessage();
    Doorbell();
  }
}

}  // namespace internal
}  // namespace rdmarpc
