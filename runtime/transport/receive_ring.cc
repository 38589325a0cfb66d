// receive_ring.cc: ReceiveRing (see receive_ring.h).
#include "runtime/transport/receive_ring.h"

#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {

absl::Status ReceiveRing::Create(ibv_pd* pd, int depth, size_t buffer_bytes) {
  absl::StatusOr<std::unique_ptr<BufferSlab>> slab =
      BufferSlab::Create(pd, depth, buffer_bytes, kLocalAccess);
  if (!slab.ok()) return slab.status();
  slab_ = std::move(*slab);
  const size_t n = static_cast<size_t>(slab_->count());
  repost_batch_ = RepostBatchFor(slab_->count());
  to_repost_.reserve(n);
  wrs_.assign(n, ibv_recv_wr{});
  sges_.assign(n, ibv_sge{});
  return absl::OkStatus();
}

absl::Status ReceiveRing::PostAll(ibv_qp* qp) {
  to_repost_.clear();
  for (int i = 0; i < slab_->count(); ++i) to_repost_.push_back(i);
  absl::StatusOr<int> n = PostPending(qp);
  return n.status();
}

absl::StatusOr<int> ReceiveRing::PostPending(ibv_qp* qp) {
  const size_t n = to_repost_.size();
  if (n == 0) return 0;
  for (size_t i = 0; i < n; ++i) {
    const int idx = to_repost_[i];
    sges_[i] = ibv_sge{reinterpret_cast<uint64_t>(slab_->data(idx)),
                       static_cast<uint32_t>(slab_->buffer_bytes()), slab_->lkey()};
    wrs_[i].wr_id = kWrIdTag | static_cast<uint64_t>(idx);
    wrs_[i].sg_list = &sges_[i];
    wrs_[i].num_sge = 1;
    wrs_[i].next = i + 1 < n ? &wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(qp, wrs_.data(), &bad);
  if (stats_ != nullptr) {
    stats_->recv_doorbells.Add();
    // On a failure the WRs from `bad` on were not posted.
    size_t posted = n;
    if (rc != 0) {
      posted = 0;
      while (posted < n && &wrs_[posted] != bad) ++posted;
    }
    stats_->wrs_posted[static_cast<int>(WrOpcode::kRecv)].Add(static_cast<int64_t>(posted));
  }
  to_repost_.clear();
  force_repost_ = false;
  if (rc != 0) return ErrnoToStatus("ibv_post_recv", rc);
  posted_ += static_cast<int>(n);
  return static_cast<int>(n);
}

}  // namespace internal
}  // namespace rdmarpc
