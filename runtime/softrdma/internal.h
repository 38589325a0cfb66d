// internal.h: softrdma's object model, shared by its .cc files.
//
// Every verbs / rdma_cm object is one of our structs with the rdma-core struct
// as its FIRST member, so a pointer handed to the user (ibv_qp*, ibv_cq*, ...)
// converts back with a reinterpret_cast (container_of at offset 0).
//
// Locking order (outer to inner):
//   CmMutex()  ->  SoftQp::mu  ->  { SoftSrq::mu, SoftCq::mu -> SoftCompChannel::mu,
//                                    Conn::write_mu_, key table mutex,
//                                    SoftContext::mu, SoftEventChannel::mu }
// The key table mutex is innermost: it is held (shared, ScopedMrAccess) across
// an access check and the copy it vouches for, with no other lock taken inside.
// The fork handlers take CmMutex() and then the key table.
// CmMutex() guards all rdma_cm state and the Conn -> (id, QP) attachments; the
// progress thread holds it while it dispatches a received frame, so frames of
// one process are handled one at a time, in arrival order per connection.
// The data path of the user (post_send, post_recv, poll_cq) never takes it.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_INTERNAL_H_
#define RDMARPC_RUNTIME_SOFTRDMA_INTERNAL_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

class Conn;
struct SoftCmId;

// Device limits, reported by query_device / query_port and enforced.
inline constexpr uint32_t kMaxQpWr = 16384;
inline constexpr uint32_t kMaxSge = 16;
inline constexpr int kMaxCqe = 65536;
inline constexpr uint32_t kMaxInlineData = 256;
inline constexpr uint32_t kMaxMsgSize = 1u << 31;  // bytes, per WR
inline constexpr int kMaxRdAtom = 16;
// Receiver-not-ready back-off between retries. IB encodes min_rnr_timer
// (0.01 ms .. 655 ms); we use a fixed 1 ms so tests that exercise RNR stay fast.
inline constexpr int kRnrDelayMicros = 1000;

absl::Mutex& CmMutex();

// ---- counters ---------------------------------------------------------------
struct Counters {
  std::atomic<uint64_t> send{0}, send_with_imm{0}, rdma_write{0},
      rdma_write_with_imm{0}, rdma_read{0}, recv{0}, bytes_sent{0},
      rnr_retries{0}, post_send_calls{0}, post_recv_calls{0}, reg_mr{0},
      max_send_bytes{0}, rem_access_errors{0};
  std::atomic<int64_t> live_cm_ids{0}, live_qps{0}, live_cqs{0}, live_mrs{0},
      live_pds{0};
};
Counters& Stat();

// ---- device objects -----------------------------------------------------------
// The context is a verbs_context, as every rdma-core provider's is, so the
// verbs.h inlines that reach extended verbs through verbs_get_ctx_op()
// (ibv_create_qp_ex, ibv_query_device_ex, ...) find our ops; the ibv_context
// handed to the user is its LAST member (vctx.context).
struct SoftContext {
  verbs_context vctx{};  // first member; zeroed: no extended op but ours
  ibv_context& ctx = vctx.context;  // the handle the user holds
  absl::Mutex mu;
  ibv_pd* default_pd ABSL_GUARDED_BY(mu) = nullptr;  // for rdma_create_qp(pd=NULL)
  std::deque<ibv_async_event> async_events ABSL_GUARDED_BY(mu);
};
inline SoftContext* ToSoft(ibv_context* c) {
  return reinterpret_cast<SoftContext*>(reinterpret_cast<char*>(c) -
                                        offsetof(verbs_context, context));
}

// verbs_context::query_device_ex (device_ex.cc).
int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input,
                  ibv_device_attr_ex* attr, size_t attr_size);
// Makes a new context an extended one (abi_compat, sz, our ops), as
// open_device's last step.
void InitVerbsContext(SoftContext* c);

// Posts an async event (e.g. IBV_EVENT_CQ_ERR) and makes async_fd readable.
void PostAsyncEvent(ibv_context* context, const ibv_async_event& event);

// The context that rdma_cm ids use (librdmacm likewise opens each device once).
ibv_context* CmContext();

struct SoftPd {
  ibv_pd pd;  // first member
  // MRs, QPs and SRQs made on this PD. dealloc_pd fails with EBUSY while any
  // is alive, as ibv_dealloc_pd does; freeing it anyway would leave MRs whose
  // `pd` could match a later PD allocated at the same address.
  std::atomic<int> refs{0};
};
inline SoftPd* ToSoft(ibv_pd* p) { return reinterpret_cast<SoftPd*>(p); }

struct SoftMr {
  ibv_mr mr;  // first member
  int access = 0;
};

// A snapshot of a registered region, taken under the key table's lock so the
// data path does not hold the lock while it copies.
struct MrView {
  ibv_pd* pd = nullptr;
  uintptr_t addr = 0;
  size_t length = 0;
  int access = 0;
};
// Looks up a key; `remote` selects the rkey namespace. False when unknown.
bool LookupKey(uint32_t key, bool remote, MrView* view);

// Holds the key table's lock shared, so no MR can be deregistered until it
// ends: memory a lookup vouched for stays registered (and, for a well-behaved
// user, allocated) while the device copies into or out of it. A NIC likewise
// never touches an MR's memory once ibv_dereg_mr has returned; without this a
// dereg_mr + free racing with the progress thread's memcpy would write into
// freed memory instead of failing the access with REM_ACCESS_ERR.
// The key table lock is innermost: take no other lock while holding it.
class ScopedMrAccess {
 public:
  ScopedMrAccess();
  ~ScopedMrAccess();
  ScopedMrAccess(const ScopedMrAccess&) = delete;
  ScopedMrAccess& operator=(const ScopedMrAccess&) = delete;
};
// LookupKey for a caller inside a ScopedMrAccess.
bool LookupKeyHeld(uint32_t key, bool remote, MrView* view);
// For the fork handlers: a child must not inherit the key table locked by a
// thread (e.g. one copying a send's payload) that does not exist in it.
void LockKeyTableForFork();
void UnlockKeyTableForFork();

// ---- completion queues ---------------------------------------------------------
struct SoftCompChannel {
  ibv_comp_channel ch;  // first member; ch.fd is an eventfd in semaphore mode
  absl::Mutex mu;
  std::deque<ibv_cq*> events ABSL_GUARDED_BY(mu);
  int attached_cqs ABSL_GUARDED_BY(mu) = 0;
};

struct SoftQp;

// Which work-queue slots a CQE gives back when the user polls it. A NIC frees
// a WQE's slot only when ibv_poll_cq consumes a CQE that covers it (mlx5
// advances its SQ/RQ tail in poll_cq): an unsignalled send's slot stays taken
// until a later signalled send's CQE is polled, and a receive's slot until its
// CQE is polled. Without this a QP that never signals, or a poller that falls
// behind, would work on softrdma and hit ENOMEM on hardware.
struct SlotRelease {
  std::weak_ptr<SoftQp> qp;  // empty: the CQE frees nothing
  uint32_t count = 0;        // slots freed
  uint32_t generation = 0;   // SoftQp::slot_generation when pushed
  bool recv = false;         // RQ slots, else SQ slots
};

struct SoftCq {
  ibv_cq cq;  // first member
  absl::Mutex mu;
  std::vector<ibv_wc> ring ABSL_GUARDED_BY(mu);
  std::vector<SlotRelease> release ABSL_GUARDED_BY(mu);  // parallel to ring
  size_t head ABSL_GUARDED_BY(mu) = 0;
  size_t count ABSL_GUARDED_BY(mu) = 0;
  bool armed ABSL_GUARDED_BY(mu) = false;
  bool overrun ABSL_GUARDED_BY(mu) = false;  // CQ error: a CQE found no room
  std::atomic<int> qp_refs{0};
};
inline SoftCq* ToSoft(ibv_cq* c) { return reinterpret_cast<SoftCq*>(c); }

// Adds one CQE; raises the channel event when armed. On overrun the CQ enters
// the error state (poll_cq then fails) and IBV_EVENT_CQ_ERR is posted.
// `slots` names the work-queue slots the CQE frees once polled.
void CqPush(ibv_cq* cq, const ibv_wc& wc, SlotRelease slots = SlotRelease());

int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int ReqNotifyCq(ibv_cq* cq, int solicited_only);

// ---- wire frames ------------------------------------------------------------------
struct Frame;

// ---- queue pairs ---------------------------------------------------------------
struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  uint32_t psn = 0;
  uint32_t byte_len = 0;
  ibv_wc_status local_error = IBV_WC_SUCCESS;  // found at post; completes in order
  std::shared_ptr<const std::vector<uint8_t>> frame;  // kept for RNR retransmit
  std::vector<ibv_sge> read_sges;                     // RDMA READ destination
};

struct RecvWqe {
  uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
};

// A shared receive queue: receives that any QP attached to it consumes.
struct SoftSrq {
  ibv_srq srq;  // first member
  absl::Mutex mu;
  ibv_srq_attr attr ABSL_GUARDED_BY(mu) = {};  // srq_limit 0 = limit event disarmed
  std::deque<RecvWqe> rq ABSL_GUARDED_BY(mu);
  std::atomic<int> qp_refs{0};
};
inline SoftSrq* ToSoft(ibv_srq* s) { return reinterpret_cast<SoftSrq*>(s); }

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// Takes the oldest receive of an SRQ; false when it is empty. Raises
// IBV_EVENT_SRQ_LIMIT_REACHED when the count drops below an armed limit.
bool SrqTake(ibv_srq* srq, RecvWqe* out);

struct WrBuilder;  // qp_ex.cc: the ibv_wr_* work requests being built
void DeleteWrBuilder(WrBuilder* b);

struct SoftQp {
  // First member. `qpx.qp_base` is `qp`, as in rdma-core's verbs_qp, so
  // ibv_qp_to_qp_ex() is a cast; qpx's ops are set only for a QP made with
  // IBV_QP_INIT_ATTR_SEND_OPS_FLAGS (create_qp_ex), `wr` then non-null.
  union {
    ibv_qp_ex qpx;
    ibv_qp qp;
  };
  std::unique_ptr<WrBuilder, void (*)(WrBuilder*)> wr{nullptr, &DeleteWrBuilder};
  std::weak_ptr<SoftQp> self;

  absl::Mutex mu;
  ibv_qp_cap cap ABSL_GUARDED_BY(mu) = {};
  bool sq_sig_all ABSL_GUARDED_BY(mu) = false;
  ibv_qp_state state ABSL_GUARDED_BY(mu) = IBV_QPS_RESET;
  std::deque<SendWqe> sq ABSL_GUARDED_BY(mu);
  std::deque<RecvWqe> rq ABSL_GUARDED_BY(mu);
  uint32_t next_psn ABSL_GUARDED_BY(mu) = 0;  // requester: PSN of the next WR
  uint32_t epsn ABSL_GUARDED_BY(mu) = 0;      // responder: PSN expected next
  uint8_t rnr_retry ABSL_GUARDED_BY(mu) = 7;  // 7 = retry forever (IB spec)
  uint8_t min_rnr_timer ABSL_GUARDED_BY(mu) = 0;
  int rnr_count ABSL_GUARDED_BY(mu) = 0;     // RNR NAKs for the head WR
  bool rnr_wait ABSL_GUARDED_BY(mu) = false;  // waiting to retransmit after RNR
  bool sq_blocked ABSL_GUARDED_BY(mu) = false;  // an errored WR is queued
  uint32_t dest_qpn ABSL_GUARDED_BY(mu) = 0;
  // Incoming RDMA READs / atomics this QP may have outstanding as responder.
  // 0 (rdma_conn_param.responder_resources = 0) means it takes none: a NIC
  // NAKs them with "invalid request", the requester sees REM_INV_REQ_ERR.
  uint8_t max_dest_rd_atomic ABSL_GUARDED_BY(mu) = kMaxRdAtom;
  std::shared_ptr<Conn> conn ABSL_GUARDED_BY(mu);
  // Slots of WRs that completed but whose CQE the user has not polled yet
  // (see SlotRelease): post_send / post_recv count them as taken. Atomic
  // because poll_cq gives them back without taking `mu` (it holds SoftCq::mu,
  // which comes after `mu` in the lock order).
  std::atomic<uint32_t> sq_unpolled{0};
  std::atomic<uint32_t> rq_unpolled{0};
  // Successful unsignalled sends since the last send CQE; the next send CQE
  // frees their slots too.
  uint32_t unsignaled_done ABSL_GUARDED_BY(mu) = 0;
  // Bumped by RESET, which frees every slot: CQEs pushed before it free none.
  std::atomic<uint32_t> slot_generation{0};

  SoftCmId* cm_id ABSL_GUARDED_BY(CmMutex()) = nullptr;
};
inline SoftQp* ToSoft(ibv_qp* q) { return reinterpret_cast<SoftQp*>(q); }

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

// Connects a QP to a TCP connection and moves it to RTS (rdma_cm did RTR/RTS).
// `responder_resources`: this side's rdma_conn_param.responder_resources,
// which rdma_cm makes the QP's max_dest_rd_atomic.
void QpAttach(SoftQp* qp, std::shared_ptr<Conn> conn, uint32_t dest_qpn,
              uint8_t rnr_retry, uint8_t responder_resources);
// Moves a QP to ERROR, flushing every outstanding WR with IBV_WC_WR_FLUSH_ERR,
// and forgets its connection.
void QpFlushToError(SoftQp* qp);
// Handles a data frame (SEND, WRITE, READ_REQ, READ_RESP, ACK, NAK).
void QpOnFrame(SoftQp* qp, Frame& frame);

// ---- rdma_cm glue called by Conn (progress thread, CmMutex() held) ---------------
absl::Mutex& CmMutex();
void CmOnFrame(Conn* conn, Frame& frame) ABSL_EXCLUSIVE_LOCKS_REQUIRED(CmMutex());
void CmOnConnectDone(Conn* conn, int error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(CmMutex());
void CmOnClosed(Conn* conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(CmMutex());
// A listener accepted a TCP connection; CONNECT_REQ will follow on it.
void CmOnIncoming(SoftCmId* listen_id, std::shared_ptr<Conn> conn)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(CmMutex());

// Writes everything to an fd that may have O_NONBLOCK set by the user: used for
// the eventfds behind completion / event channels.
void SignalEventFd(int fd);
// Reads one count from a semaphore eventfd; honours the fd's O_NONBLOCK.
// Returns 0, or -1 with errno (EAGAIN when non-blocking and empty).
int WaitEventFd(int fd);

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_INTERNAL_H_
