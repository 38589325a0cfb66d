// keepalive.cc: noticing a server that died silently (client role).
//
// A crashed or cut-off server sends no FIN and no DISCONNECT. Once the
// requests of the calls waiting on it have been acknowledged, the client has
// nothing in flight whose transport timeout could fail, so those calls would
// wait for their deadlines — or forever, without one — on a dead connection
// the pool keeps handing out (DESIGN.md: calls fail UNAVAILABLE, never hang).
//
// So while calls are in flight, a client connection that has received
// nothing for a whole keepalive_interval posts a probe: a signalled
// zero-length RDMA WRITE. It touches no memory, needs no valid rkey (the IB
// spec checks no R_Key for a zero-length access), and uses no receive or
// credit of the peer. A live peer's NIC acknowledges it; for a dead one the
// QP's transport timeout (4.096 us * 2^timeout * (retry_cnt + 1)) fails it
// with IBV_WC_RETRY_EXC_ERR, the connection closes, its calls fail
// UNAVAILABLE and the pool replaces it. (TCP keepalive and eRPC's session
// pings do the same job.) A connection with traffic flowing never probes.
#include "absl/time/clock.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

void Connection::StartKeepalive() {
  if (!is_client_ || options_.keepalive_interval <= absl::ZeroDuration()) return;
  recvs_at_last_probe_ = recvs_seen_;
  keepalive_timer_ = loop_->AddTimer(absl::Now() + options_.keepalive_interval,
                                       [this] { OnKeepaliveTimer(); },
                                       /*needs_completions=*/false);
}

void Connection::OnKeepaliveTimer() {
  keepalive_timer_ = 0;
  if (state_ != ConnState::kEstablished) return;  // closing: no more probes
  const bool heard = recvs_seen_ != recvs_at_last_probe_;
  // One probe at a time: until the last one completes (is retired),
  // its transport timeout is still running, and a second probe would only
  // be flushed behind it (the timeout, 4.096 us * 2^timeout * (retry_cnt +
  // 1), may well exceed keepalive_interval).
  const bool probe_in_flight = probe_posted_ && !send_queue_.retired(probe_seq_);
  if (streams_.busy() > 0 && !heard && !probe_in_flight && qp_ &&
      send_queue_.has_room()) {
    ibv_sge sge{};  // zero-length: PostWr copies one SGE, none is posted
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 0;
    wr.opcode = IBV_WR_RDMA_WRITE;
    probe_posted_ = true;
    loop_->stats().keepalive_probes.Add();
    probe_seq_ = send_queue_.PostWr(&wr, SqEntry{}, /*force_signal=*/true);
    Doorbell();
  }
  StartKeepalive();
}

}  // namespace internal
}  // namespace rdmarpc
