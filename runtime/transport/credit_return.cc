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

void Connection::RunEndOfStep() {
  if (!usable()) return;
  // Batched: one ibv_post_recv per re-post batch (transport.h).
  if (receive_ring_.RepostDue()) {
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
