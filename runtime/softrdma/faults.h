// faults.h: fault-injection knobs on softrdma, for tests of the layers above.
//
// Each knob makes softrdma fail the way a NIC, a host or a network does, so a
// test can check that the caller recovers (LevelDB's EnvWrapper idea, but as
// switches on the device itself since verbs objects are plain C structs):
//
//   softrdma::FailNext(softrdma::FaultOp::kCreateQp, 1, ENOMEM);
//   softrdma::DropAfterWrs(8);          // the link dies after 8 sends completed
//   softrdma::DelayCompletions(2000);   // CQEs become pollable 2 ms late
//   softrdma::RecvBeforeSend(true);     // a reply's RECV CQE before its SEND CQE
//   softrdma::SetMemlockLimit(64 << 10);// reg_mr past 64 KiB fails with ENOMEM
//   softrdma::VanishPeer(id);           // id's peer host crashed: silence
//   softrdma::ResetFaults();            // every knob off again
//
// All knobs are process-wide and thread-safe; a test turns them on, and
// ResetFaults() (or the setter with 0 / false) turns them off.
//
// Environment variables. Every knob can also be set from the environment, so
// an unmodified program (or one linked with libsoftrdma_preload.so) runs under
// a fault. They are read once, at the first softrdma call that consults a knob
// (or the first setter call, so a setter always wins over the environment).
// A malformed value prints the variable and the expected format to stderr and
// aborts the process: a fault test that silently ran without its fault would
// pass for the wrong reason.
//
//   SOFTRDMA_FAULT_FAIL_ALLOC_PD=count:errno[:after]      FailNext(kAllocPd, ...)
//   SOFTRDMA_FAULT_FAIL_REG_MR=count:errno[:after]        FailNext(kRegMr, ...)
//   SOFTRDMA_FAULT_FAIL_CREATE_CQ=count:errno[:after]     FailNext(kCreateCq, ...)
//   SOFTRDMA_FAULT_FAIL_REQ_NOTIFY_CQ=count:errno[:after] FailNext(kReqNotifyCq, ...)
//   SOFTRDMA_FAULT_FAIL_CREATE_QP=count:errno[:after]     FailNext(kCreateQp, ...)
//   SOFTRDMA_FAULT_FAIL_ARM_NEW_CQ=count:errno[:after]    FailNext(kArmNewCq, ...)
//   SOFTRDMA_FAULT_FAIL_RESIZE_CQ=count:errno[:after]     FailNext(kResizeCq, ...)
//   SOFTRDMA_FAULT_FAIL_CREATE_SRQ=count:errno[:after]    FailNext(kCreateSrq, ...)
//       count, after: decimal >= 0 (after defaults to 0); errno: decimal
//       (12) or a name (ENOMEM, EINVAL, EPERM, ENOSPC, EAGAIN, EBUSY, ENODEV,
//       EIO, EFAULT, EACCES, EOPNOTSUPP), e.g. SOFTRDMA_FAULT_FAIL_REG_MR=2:ENOMEM
//       or SOFTRDMA_FAULT_FAIL_CREATE_QP=1:ENOMEM:1.
//   SOFTRDMA_FAULT_DROP_AFTER_WRS=N               DropAfterWrs(N)
//   SOFTRDMA_FAULT_DROP_AFTER_BYTES=N             DropAfterBytes(N)
//   SOFTRDMA_FAULT_DELAY_COMPLETION_US=D          DelayCompletions(D)
//   SOFTRDMA_FAULT_RECV_BEFORE_SEND=1             RecvBeforeSend(true) (0: off)
//   SOFTRDMA_FAULT_MEMLOCK_BYTES=N                SetMemlockLimit(N)
//   SOFTRDMA_FAULT_VANISH_AFTER_WRS=N             VanishAfterWrs(N)
//       N, D: decimal; the byte counts also take a K, M or G suffix (KiB,
//       MiB, GiB), e.g. SOFTRDMA_FAULT_MEMLOCK_BYTES=64K.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_FAULTS_H_
#define RDMARPC_RUNTIME_SOFTRDMA_FAULTS_H_

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <vector>

namespace softrdma {

// Verbs calls that FailNext can make fail.
enum class FaultOp {
  kAllocPd,      // ibv_alloc_pd: returns NULL, errno set
  kRegMr,        // ibv_reg_mr: returns NULL, errno set
  kCreateCq,     // ibv_create_cq: returns NULL, errno set
  kReqNotifyCq,  // ibv_req_notify_cq: returns the errno value (as rdma-core)
  kCreateQp,     // ibv_create_qp and rdma_create_qp: NULL / -1, errno set
  kArmNewCq,     // only the FIRST ibv_req_notify_cq of each CQ (its set-up
                 // arm); re-arms of a CQ in use neither fail nor count
  kResizeCq,     // ibv_resize_cq: returns the errno value, the CQ unchanged
  kCreateSrq,    // ibv_create_srq: returns NULL, errno set (EOPNOTSUPP: a
                 // device without shared receive queues)
};

// After `after` more calls of `op` succeed, the next `count` calls (any
// thread, any object) fail with errno `err` before touching anything, so they
// leave no object behind. `after` lets a test reach past the calls another
// party makes first (e.g. fail a server's QP when the client makes its own
// QP first). count 0 clears the knob for `op`.
void FailNext(FaultOp op, int count, int err, int after = 0);

// Same as FailNext(FaultOp::kRegMr, count, err) (e.g. ENOMEM, as when
// RLIMIT_MEMLOCK is exhausted).
void FailNextRegMr(int count, int err);

// Breaks the TCP connection under a connected rdma_cm id, as a dead link
// would: both ends' QPs go to ERROR, flush every outstanding WR with
// IBV_WC_WR_FLUSH_ERR, and both ends get RDMA_CM_EVENT_DISCONNECTED.
// Returns 0, or -1 with errno EINVAL when the id has no connection.
int DropConnection(rdma_cm_id* id);

// Once `n` send WRs (any opcode, signalled or not, counted over every QP of
// the process) have completed successfully, the link of the QP whose WR was
// the n-th dies as with DropConnection: frames already received on it after
// that point are discarded, so no later WR of that QP completes successfully;
// every outstanding one flushes on both ends, and both get DISCONNECTED. The
// knob fires once, then disarms. n 0 disarms it.
void DropAfterWrs(uint64_t n);

// As DropAfterWrs, counting the bytes (ibv_wc.byte_len: payload of SEND and
// WRITE, length of READ) of successfully completed send WRs: the link of the
// QP whose completion brings the total to `n` bytes or more dies. n 0 disarms.
void DropAfterBytes(uint64_t n);

// Every CQE made from now on becomes visible to poll_cq `micros` µs after the
// device made it (a slow PCIe write of the CQE, or a NIC under load). CQEs
// stay in order: a CQ returns nothing past its oldest invisible CQE. An armed
// completion channel fires when the CQE becomes visible, not before, so a
// consumer that polls, arms and sleeps is woken exactly as on hardware.
// Work-queue slots come back only when the CQE is polled, as always. 0: off.
void DelayCompletions(uint32_t micros);

// Responders hold back their ACK of an incoming SEND / WRITE until they next
// transmit a request of their own on that QP (hardware coalesces ACKs and lets
// them ride behind later packets), or at most `max_hold_micros` µs. So when a
// server answers a request with a SEND, the requester's RECV completion for
// the answer is made (and pollable) BEFORE the SEND completion of the request
// it answers — legal on RC, and what a NIC shows when the ACK comes late.
// Keep the hold below the requester's transport timeout (4.096 us * 2^timeout
// * (retry_cnt + 1), 537 ms with rdma_cm defaults): a longer hold fails its
// sends with IBV_WC_RETRY_EXC_ERR, as an ACK that late would on a NIC.
// Off with `on` false.
void RecvBeforeSend(bool on, uint32_t max_hold_micros = 100000);

// Caps the memory registered (pinned) by the process at `bytes`, as a low
// RLIMIT_MEMLOCK does for an unprivileged user on a NIC: reg_mr fails with
// ENOMEM when the pages it would pin (its range rounded out to 4 KiB pages)
// plus those already pinned by live MRs pass the cap; dereg_mr gives them
// back. The process's soft RLIMIT_MEMLOCK is lowered to `bytes` too (its old
// value restored by ClearMemlockLimit), so diagnostics that print the limit
// (getrlimit) tell the truth.
void SetMemlockLimit(uint64_t bytes);
void ClearMemlockLimit();
// Bytes pinned by live MRs (page-rounded, as counted against the cap).
uint64_t PinnedBytes();

// The peer host of `id` crashes, as `id` sees it: from now on nothing from
// the peer reaches id's QP (no ACKs, no responses, no requests), nothing id
// sends reaches the peer, and the peer's TCP FIN or reset is ignored — no
// RDMA_CM_EVENT_DISCONNECTED comes. id's outstanding WRs end only through the
// QP's transport timeout (head WR IBV_WC_RETRY_EXC_ERR after (retry_cnt + 1)
// timeouts of 4.096 µs * 2^timeout each, the rest IBV_WC_WR_FLUSH_ERR, QP in
// ERROR), or flush when the application disconnects (rdma_disconnect posts
// DISCONNECTED locally) or moves the QP to ERROR first. The peer, in the same
// or another process, likewise hears nothing more from id — until id's own
// teardown (rdma_destroy_qp / rdma_destroy_id) closes the TCP connection,
// which the peer does see (that is how an in-process "crashed" peer gets
// cleaned up in tests).
// Returns 0, or -1 with errno EINVAL when the id has no connection.
int VanishPeer(rdma_cm_id* id);

// When the process is about to transmit its (n+1)-th send WR (WRs posted to
// a QP in ERROR or failing their local checks are not transmitted and do not
// count), the peer of that WR's QP vanishes (VanishPeer) first: WRs 1..n
// went out normally (answers not yet back are lost too). Fires once. n 0
// disarms.
void VanishAfterWrs(uint64_t n);

// Turns every knob above off (and restores RLIMIT_MEMLOCK). Does not affect
// connections already dropped or vanished.
void ResetFaults();

// ---- observing the outcome ---------------------------------------------------
// Every CQE with a status other than IBV_WC_SUCCESS that the device makes is
// recorded (the latest 65536), so a test can check what a fault did to the
// QPs inside a library it does not control (e.g. that a QP flushed exactly 8
// WRITEs). Cleared by ResetFaults and TakeErrorCqes.
struct ErrorCqe {
  uint32_t qp_num = 0;
  uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_SUCCESS;
  bool recv = false;  // a receive-queue CQE (opcode & IBV_WC_RECV)
};
// The error CQEs recorded so far, in the order they were made; clears them.
std::vector<ErrorCqe> TakeErrorCqes();
// ACKs that RecvBeforeSend held back and sent behind a request of the
// responder (so the reorder really happened), since the last ResetFaults.
uint64_t AcksSentBehindRequests();

}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_FAULTS_H_
