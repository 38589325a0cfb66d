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

void Connection::SendCreditMessage() {
  if (!send_queue_.has_send_buffer() || !send_queue_.has_room()) return;
  WireHeader h;
  h.kind = MsgKind::kCredit;
  PostEager(MsgKind::kCredit, 0, 0, h, {}, {}, {}, {});
}

void Connection::RepostReceives() {
  const absl::StatusOr<int> n = receive_ring_.PostPending(qp_.get());
  if (!n.ok()) {
    Close(absl::UnavailableError(
        absl::StrCat("connection to ", peer_name_, ": ", n.status().message())));
    return;
  }
  credits_->OnReposted(*n);
}

void Connection::RepostSharedReceives() {
  const absl::StatusOr<int> n = srq_->PostPending();
  if (!n.ok()) {
    // The buffers stay pending for the next re-post; this connection,
    // whose step found it, fails rather than wait on credits.
    Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_,
                                              ": shared receive queue: ", n.status().message())));
  }
}

void Connection::OnSrqGranted(SrqShare* share, int n) {
  Connection* c = static_cast<Connection*>(share->owner);
  if (!c->credits_.has_value()) return;
  c->credits_->OnReposted(n);
  c->credits_->SetPeerWindow(share->in_use);
  c->ScheduleEndOfStep();
}

void Connection::RunEndOfStep() {
  // The loop's shared receive queue is re-posted by whichever of its
  // connections ends a step first, closing or not.
  if (srq_ != nullptr && srq_->RepostDue()) RepostSharedReceives();
  if (!usable()) return;
  if (srq_ == nullptr && receive_ring_.RepostDue()) {
    // Batched: one ibv_post_recv per re-post batch (transport.h).
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
