// internal.h: softrdma's object model, shared by its .cc files.
//
// Every verbs / rdma_cm object is one of our structs with the rdma-core struct
// as its FIRST member, so a pointer handed to the user (ibv_qp*, ibv_cq*, ...)
// converts back with a reinterpret_cast (container_of at offset 0).
//
// Locking order (outer to inner):
//   a listening id's SoftCmId::mu  ->  its child id's SoftCmId::mu  ->
//   DeferredTimers::mu  ->
//   SoftQp::mu  ->  { SoftSrq::mu, SoftCq::mu -> SoftCompChannel::mu,
//                     Conn::write_mu_, key table mutex, SoftContext::mu }
//   SoftCmId::mu  ->  { SoftEventChannel::mu -> cm id registry,
//                       event channel registry, Conn's attachment mutex,
//                       ProgressThread::mu_ }
//   SoftCq::ex_mu (held by the user from start_poll to end_poll)  ->
//   everything poll_cq takes (SoftQp::mu, SoftCq::mu, ...)
// The key table mutex is innermost but for the counter registry's (taken
// only by a thread's first count, Stat()) and the key readers' registry
// (KeyReaders::mu, taken by a thread's first read and by writers while
// they wait for readers): the table is held for reading (ScopedMrAccess)
// across an access check and the copy it vouches for, with no other lock
// taken inside.
// rdma_cm has no process-wide lock (cm.cc): each id's connection state is
// guarded by its own SoftCmId::mu, which the calls on that id and the progress
// thread's control frames for it (CONNECT_REQ, ACCEPT, REJECT, RTU,
// DISCONNECT) take, never across blocking work (socket and shared-memory
// set-up happen before it is taken). Ids, QPs and connections refer to each
// other through weak_ptrs: whoever follows one locks the id and re-checks that
// it is alive and still attached. The cm id registry (live ids by address and
// serial, and their unacked events) and the event channel registry are held
// only for a lookup, insert or erase. Data frames go to the QP under the
// Conn's attachment mutex and the QP's own, in arrival order per connection.
// The fork handlers take the two registries and then the key table. The data
// path of the user (post_send, post_recv, poll_cq) takes no cm lock.
// SoftQp::mu, SoftSrq::mu and SoftCq::mu are DomainMutexes: for the objects
// of one thread domain they are one exclusion, which the owner enters
// without a lock (SoftTd). A QP joins its parent domain's thread domain only
// if its CQs and SRQ are in that one or in none, so two domains are never
// held in both orders.
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
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "softrdma/frame_pool.h"
#include "softrdma/ring_queue.h"
#include "softrdma/shm_hint.h"
#include "softrdma/shm_record.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

class Conn;
class ShmLink;
struct SoftCmId;

// Device limits, reported by query_device / query_port and enforced;
// max_qp_wr, max_srq_wr and max_cqe are ConnectX-5/6's (ibv_devinfo -v).
inline constexpr uint32_t kMaxQpWr = 32768;
inline constexpr uint32_t kMaxSrqWr = 32767;
inline constexpr uint32_t kMaxSge = 16;
inline constexpr int kMaxCqe = 4194303;
inline constexpr uint32_t kMaxInlineData = 256;
inline constexpr uint32_t kMaxMsgSize = 1u << 31;  // bytes, per WR
inline constexpr int kMaxRdAtom = 16;
inline constexpr int kMaxMw = 1 << 20;  // memory windows per process
// Receiver-not-ready back-off between retries for a responder QP whose
// min_rnr_timer the application never set (rdma_cm's own QPs; see softrdma.h).
inline constexpr int kRnrDelayMicros = 1000;
// The RNR NAK timer a min_rnr_timer code (5 bits) stands for, in microseconds
// (IBA vol. 1 table 45: 0 = 655.36 ms, 1 = 0.01 ms, ..., 31 = 491.52 ms).
inline int64_t RnrTimerMicros(uint8_t code) {
  static constexpr int32_t kTenMicros[32] = {
      65536, 1,    2,    3,    4,    6,    8,     12,    16,    24,    32,
      48,    64,   96,   128,  192,  256,  384,   512,   768,   1024,  1536,
      2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return int64_t{kTenMicros[code & 31]} * 10;
}

// ---- counters ---------------------------------------------------------------
// A count in one thread's block (Counters). Only the block's owner writes it,
// so counting is a relaxed load and store, not a lock-prefixed
// read-modify-write: the locked add of poll_cq_calls alone was 44 % of an
// empty ibv_poll_cq's cycles (softrdma_pingpong profile). Any thread reads
// it (GetStats). A block passes to another thread only through the
// registry's mutex (Stat()), which orders the two owners' writes.
template <typename T>
class OwnerCount {
 public:
  T load() const { return v_.load(std::memory_order_relaxed); }
  operator T() const { return load(); }  // NOLINT: reads like the atomic it replaces
  void Add(T n) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void operator++(int) { Add(1); }
  void operator--(int) { Add(static_cast<T>(-1)); }
  OwnerCount& operator+=(T n) {
    Add(n);
    return *this;
  }

 private:
  std::atomic<T> v_{0};
};

// One block per thread (Stat()), on a cache line of its own, so counting a
// work request touches no line another thread writes; GetStats sums the
// blocks (the max_* fields: their maximum). ResetStats writes no count: it
// keeps a baseline that GetStats subtracts (device.cc). The max_* fields
// are raised with a compare-exchange and zeroed by ResetStats.
struct alignas(64) Counters {
  OwnerCount<uint64_t> send, send_with_imm, rdma_write, rdma_write_with_imm, rdma_read, atomic,
      recv, bytes_sent, rnr_retries, post_send_calls, post_recv_calls, reg_mr, rem_access_errors,
      signaled_sends, wc_polled, poll_cq_calls, qps_on_shm, qps_on_tcp, shm_fallbacks,
      shm_doorbells, shm_marked_qps, shm_marked_drains, shm_ring_rewinds, shm_publishes,
      rd_atomic_waits, domain_visits, owner_timers, grace_timers;
  std::atomic<uint64_t> max_send_bytes{0}, max_rd_atomic_out{0};
  OwnerCount<int64_t> live_cm_ids, live_qps, live_cqs, live_mrs, live_pds, live_mws;
};
// The calling thread's block. A thread takes one at its first count and
// leaves it, with its counts, to the next thread that starts when it exits;
// blocks are never freed.
Counters& Stat();
// The fork handlers hold the registry's mutex across fork (innermost).
void LockCountersForFork();
void UnlockCountersForFork();

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
  // iWARP-like device (SetIwarpMode / SOFTRDMA_IWARP=1 when it was opened).
  bool iwarp = false;
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

// Async events (async_events.cc). Posts an event (e.g. IBV_EVENT_CQ_ERR) and
// makes async_fd readable.
void PostAsyncEvent(ibv_context* context, const ibv_async_event& event);
// Events get_async_event returned for one QP, SRQ or CQ; ack_async_event
// counts them back in the object's own rdma-core field (events_completed /
// async_events_completed) under its pthread mutex and signals its cond.
struct AsyncEventCount {
  std::atomic<uint32_t> reported{0};  // written under SoftContext::mu
};
// For destroy_qp / destroy_srq / destroy_cq, once nothing can raise another
// event for the object: drops its events that get_async_event has not returned
// yet (their `element` would dangle, as the kernel drops them), then blocks
// until every event already returned for it was acknowledged, as rdma-core's
// destroy verbs wait for events_completed to reach events_reported.
void DrainAsyncEvents(ibv_qp* qp);
void DrainAsyncEvents(ibv_srq* srq);
void DrainAsyncEvents(ibv_cq* cq);

// The context that rdma_cm ids use (librdmacm likewise opens each device once).
ibv_context* CmContext();

// A thread domain (ibv_alloc_td, domain.cc): the user's promise that one
// thread at a time uses the QPs, SRQs and CQs made in it (through a parent
// domain naming it; a CQ made IBV_CREATE_CQ_ATTR_SINGLE_THREADED without one
// gets a domain of its own). The objects of a domain share one exclusion
// (DomainMutex) instead of a mutex each. The thread in one of the user's
// verbs on an object of the domain (post_send, post_recv, post_srq_recv,
// poll_cq, req_notify_cq: the "owner") goes in with plain stores; any other
// thread that must touch the objects (the progress thread's timers and
// doorbells, another domain's poller, the control verbs) is a "visitor" that
// takes `visit_mu`, raises `visiting` and waits for the owner to leave. The
// owner's store-then-load and the visitor's store, membarrier(2), load are an
// asymmetric Dekker pair: one of the two sees the other (the technique of
// liburcu's and folly's asymmetric memory barriers: the cheap side issues only
// a compiler barrier, the rare side makes every running thread of the process
// pass a full barrier). Without MEMBARRIER_CMD_PRIVATE_EXPEDITED (`fast`
// false) the owner takes `visit_mu` too.
struct SoftQp;
// Transport timers of a fast domain's QPs that fired on the progress thread:
// rather than visit (a membarrier each, at 10,000 QPs about 150,000 a second)
// they wait here for the owner, who runs them at its next poll of a CQ of the
// domain (OwnerPoll); what is left after kOwnerTimerGrace the progress thread
// runs itself, as a visitor. A timer whose owner armed a CQ to sleep runs at
// once instead (qp.cc, OnAckTimer). Shared with that grace timer, which may outlive
// the domain.
struct DeferredTimers {
  std::atomic<bool> due{false};  // `qps` is not empty
  absl::Mutex mu;
  std::vector<std::weak_ptr<SoftQp>> qps ABSL_GUARDED_BY(mu);  // held while they run
  bool grace_armed ABSL_GUARDED_BY(mu) = false;
};
inline constexpr absl::Duration kOwnerTimerGrace = absl::Milliseconds(10);

struct SoftTd {
  ibv_td td;  // first member
  std::atomic<int> refs{0};  // parent domains naming it; dealloc_td: EBUSY
  // Who keeps the struct: the user's handle until dealloc_td, and each
  // DomainMutex set to it, whose object (a QP a timer or frame still holds)
  // may outlive dealloc_td. The last one frees it (ReleaseThreadDomain).
  std::atomic<int> holders{1};
  bool fast = false;  // set at allocation: the owner may go in without a lock
  absl::Mutex visit_mu;
  std::atomic<uint32_t> owner_in{0};  // 1 while an owner is in without visit_mu
  std::atomic<bool> visiting{false};  // a visitor holds or waits for the domain
  std::shared_ptr<DeferredTimers> deferred = std::make_shared<DeferredTimers>();
};
inline SoftTd* ToSoft(ibv_td* t) { return reinterpret_cast<SoftTd*>(t); }
// Makes a domain (ibv_alloc_td, or a single-threaded CQ's own), held once
// by the caller.
SoftTd* NewThreadDomain(ibv_context* context);
// Drops one hold (SoftTd::holders); the last frees the domain.
void ReleaseThreadDomain(SoftTd* td);

// One step of waiting for other threads to leave a section that is short
// but now and then long (a verb copying megabytes with process_vm_writev):
// 64 spins, then yields up to round 2048, then 50 µs sleeps. The numbers are
// ours: the spins cover a verb of a few hundred ns, the yields hand a shared
// core to the thread waited for for about a millisecond, and only waits
// longer than that (a large copy) sleep. `round` starts at 0.
void BackOff(int& round);

// The mutex of a QP, SRQ or CQ: the object's own absl::Mutex, or, once
// set_domain gave it one, its thread domain's exclusion (SoftTd). Lock and
// Unlock nest per thread for one domain (a QP's lock, then its CQ's).
class ABSL_LOCKABLE DomainMutex {
 public:
  DomainMutex() = default;
  ~DomainMutex() {
    if (td_ != nullptr) ReleaseThreadDomain(td_);
  }
  DomainMutex(const DomainMutex&) = delete;
  DomainMutex& operator=(const DomainMutex&) = delete;
  // Before the object is reachable by any other thread; holds the domain
  // until the object is freed.
  void set_domain(SoftTd* td) {
    if (td != nullptr) td->holders.fetch_add(1, std::memory_order_relaxed);
    td_ = td;
  }
  SoftTd* domain() const { return td_; }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (td_ == nullptr) {
      mu_.Lock();
    } else {
      EnterDomain(td_);
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (td_ == nullptr) {
      mu_.Unlock();
    } else {
      LeaveDomain(td_);
    }
  }

 private:
  static void EnterDomain(SoftTd* td);
  static void LeaveDomain(SoftTd* td);
  absl::Mutex mu_;
  SoftTd* td_ = nullptr;
};

class ABSL_SCOPED_LOCKABLE DomainLock {
 public:
  explicit DomainLock(DomainMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~DomainLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  DomainLock(const DomainLock&) = delete;
  DomainLock& operator=(const DomainLock&) = delete;

 private:
  DomainMutex* const mu_;
};

// The owner's poll of a CQ of `td` (may be null): runs the transport timers
// that wait for it (DeferredTimers).
void RunDeferredTimers(SoftTd* td);
inline void OwnerPoll(SoftTd* td) {
  if (td != nullptr && td->deferred->due.load(std::memory_order_relaxed)) RunDeferredTimers(td);
}

// Marks the calling thread as the owner of `td` (may be null) for the
// duration of one of the user's data-path verbs on an object of it: the
// thread's locks of that domain's objects take the owner's way in.
// __thread, not thread_local: constant-initialised, so other files read it
// without calling a TLS init wrapper.
extern __thread SoftTd* t_owner_of;
class OwnerScope {
 public:
  explicit OwnerScope(SoftTd* td) : saved_(t_owner_of) { t_owner_of = td; }
  ~OwnerScope() { t_owner_of = saved_; }
  OwnerScope(const OwnerScope&) = delete;
  OwnerScope& operator=(const OwnerScope&) = delete;

 private:
  SoftTd* saved_;
};

struct SoftPd {
  ibv_pd pd;  // first member
  // MRs, QPs, SRQs and parent domains made on this PD. dealloc_pd fails with
  // EBUSY while any is alive, as ibv_dealloc_pd does; freeing it anyway would
  // leave MRs whose `pd` could match a later PD allocated at the same address.
  std::atomic<int> refs{0};
  // A parent domain (ibv_alloc_parent_domain, domain.cc) stands for
  // `protection` wherever a PD is used, and adds its thread domain `td` (or
  // none); both null for a protection domain.
  SoftPd* protection = nullptr;
  SoftTd* td = nullptr;
};
inline SoftPd* ToSoft(ibv_pd* p) { return reinterpret_cast<SoftPd*>(p); }
// The PD that access checks compare (an MR's, a window's, a QP's): the
// protection domain a parent domain stands for, or `p` itself. An MR
// registered on a parent domain serves the QPs of its protection domain, and
// the other way round, as on mlx5.
inline ibv_pd* ProtectionDomain(ibv_pd* p) {
  SoftPd* s = ToSoft(p);
  return s->protection != nullptr ? &s->protection->pd : p;
}
// The thread domain of a QP, SRQ or CQ made on `p` (null: none).
inline SoftTd* ThreadDomainOf(ibv_pd* p) { return p == nullptr ? nullptr : ToSoft(p)->td; }

struct SoftMr {
  ibv_mr mr;  // first member
  int access = 0;
  uint64_t pinned = 0;  // bytes counted against the memlock cap (faults.h)
};

// A memory window (mw.cc). Its binding is guarded by the key table's mutex so
// that a remote access sees a binding and its MR consistently.
struct SoftMw {
  ibv_mw mw;  // first member; mw.rkey is the current rkey
  bool bound = false;
  uint32_t bound_rkey = 0;  // the key table's key for it while bound
  uint32_t mr_lkey = 0;  // the MR bound to; the binding dies with the MR
  uintptr_t addr = 0;
  size_t length = 0;
  int access = 0;        // IBV_ACCESS_REMOTE_* of the bind
  uint32_t qp_num = 0;   // type 2: the QP it was bound through
};
inline SoftMw* ToSoft(ibv_mw* m) { return reinterpret_cast<SoftMw*>(m); }

// A BIND_MW work request (or the ibv_bind_mw verb's) as posted. The window
// and the MR are named by handle and lkey and their pointers only compared,
// so one deallocated or deregistered before the bind's turn is found missing.
struct MwBindRequest {
  const ibv_mw* mw = nullptr;
  uint32_t mw_handle = 0;
  uint32_t new_rkey = 0;
  const ibv_mr* mr = nullptr;  // NULL (or length 0): unbind
  uint32_t mr_lkey = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  unsigned int access = 0;  // mw_access_flags
  bool verb = false;        // ibv_bind_mw: the handle's rkey moved at post
};

// A snapshot of a registered region (or a bound memory window), taken while
// the key table is held for reading (ScopedMrAccess).
struct MrView {
  ibv_pd* pd = nullptr;  // its protection domain (ProtectionDomain)
  uintptr_t addr = 0;
  size_t length = 0;
  int access = 0;
  uint32_t qp_num = 0;  // a type-2 window: only this QP may use the rkey; else 0
};
// Looks up a key; `remote` selects the rkey namespace (MR rkeys and the rkeys
// of bound memory windows). False when unknown.
bool LookupKey(uint32_t key, bool remote, MrView* view);

// Holds the key table for reading, so no MR can be deregistered until it
// ends: memory a lookup vouched for stays registered (and, for a well-behaved
// user, allocated) while the device copies into or out of it. A NIC likewise
// never touches an MR's memory once ibv_dereg_mr has returned; without this a
// dereg_mr + free racing with the progress thread's memcpy would write into
// freed memory instead of failing the access with REM_ACCESS_ERR.
// A reader takes no lock and writes no shared line: it marks a slot of its
// own thread, fences, and checks that no writer is at work (a Dekker pair
// with the writers, who raise a flag, fence and wait for every marked slot;
// device.cc), taking the table's mutex shared only when one is. Nests. The
// key table is innermost: take no other lock while holding it.
struct KeyReaderSlot;
class ScopedMrAccess {
 public:
  ScopedMrAccess();
  ~ScopedMrAccess();
  ScopedMrAccess(const ScopedMrAccess&) = delete;
  ScopedMrAccess& operator=(const ScopedMrAccess&) = delete;

 private:
  KeyReaderSlot* slot_ = nullptr;  // null: the thread's slot is gone, locked_
  bool locked_ = false;
};
// LookupKey for a caller inside a ScopedMrAccess.
bool LookupKeyHeld(uint32_t key, bool remote, MrView* view);
// For the fork handlers: a child must not inherit the key table locked by a
// thread (e.g. one copying a send's payload) that does not exist in it.
void LockKeyTableForFork();
void UnlockKeyTableForFork();

// Memory-window keys (device.cc, under the key table's lock).
// A fresh MW rkey: its upper 24 bits (the window's index) were never part of
// any key issued in this process, and no MR key will ever use them, so the 256
// rkeys a window cycles through (ibv_inc_rkey) never name anything else.
uint32_t NewMwRkey();
// A window allocated by alloc_mw becomes findable by its handle.
void MwRegister(SoftMw* mw);
// Sets the handle's rkey (the bind verb, at post) under the key table's lock,
// where MwBind reads it.
void MwSetHandleRkey(SoftMw* mw, uint32_t rkey);
// Binds or unbinds a window as a bind work request asks (MwBindRequest, kept
// in the SQ until its turn). Returns IBV_WC_SUCCESS or the completion status
// a NIC reports for the failed bind (IBV_WC_MW_BIND_ERR): also when the
// window was deallocated or the MR deregistered since post. kCheck only
// checks (the verb's EINVAL at post); kApply binds. `qp` is the QP the bind
// was posted on.
enum class MwBindStep { kCheck, kApply };
ibv_wc_status MwBind(const MwBindRequest& r, ibv_qp* qp, MwBindStep step);
// Invalidates the type-2 window whose rkey is `rkey` (LOCAL_INV, or
// SEND_WITH_INV at the responder `qp`, which must be the QP it is bound to
// when `require_qp`). False when no such window (an MR rkey or a type-1
// window cannot be invalidated).
bool MwInvalidate(uint32_t rkey, ibv_qp* qp, bool require_qp);
// Removes a window's rkey from the table (dealloc_mw).
void MwForget(SoftMw* mw);
// Type-1 bind verb: posts an IBV_WR_BIND_MW on `qp` (qp.cc).
int BindMwVerb(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
// ibv_context_ops entries for windows (mw.cc).
ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type);
int DeallocMw(ibv_mw* mw);

// ---- completion queues ---------------------------------------------------------
struct SoftCompChannel {
  ibv_comp_channel ch;  // first member; ch.fd is an eventfd in semaphore mode
  absl::Mutex mu;
  // Pending events, oldest first. A vector, not a deque: it keeps its room,
  // so raising an event allocates nothing once it has grown (few are ever
  // pending at once, so taking the front is cheap).
  std::vector<ibv_cq*> events ABSL_GUARDED_BY(mu);
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
  // First member. A CQ made by create_cq_ex is handed out as `cqx`, whose
  // leading members are ibv_cq's (ibv_cq_ex_to_cq is a cast).
  union {
    ibv_cq cq;
    ibv_cq_ex cqx;
  };
  // create_cq_ex: whether it was made single-threaded (its thread domain,
  // mu.domain(), is its parent domain's or, without one, its own), its
  // parent domain, and the CQE that the extended poll functions
  // (start_poll, next_poll, read_*) read.
  bool single_threaded = false;
  // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: a CQE that finds the CQ full is
  // dropped (its WR's slot freed) and the CQ stays usable, no CQ_ERR.
  bool ignore_overrun = false;
  uint64_t dropped ABSL_GUARDED_BY(mu) = 0;  // CQEs so dropped
  SoftPd* parent_domain = nullptr;  // create_cq_ex's; held (refs) until destroy_cq
  // The extended poll functions of a CQ outside any thread domain hold
  // ex_mu from start_poll to end_poll, as mlx5 holds its CQ lock.
  absl::Mutex ex_mu;
  bool ex_locked ABSL_GUARDED_BY(ex_mu) = false;
  ibv_wc ex_wc = {};
  DomainMutex mu;
  std::vector<ibv_wc> ring ABSL_GUARDED_BY(mu);
  std::vector<SlotRelease> release ABSL_GUARDED_BY(mu);  // parallel to ring
  size_t head ABSL_GUARDED_BY(mu) = 0;
  size_t count ABSL_GUARDED_BY(mu) = 0;
  bool armed ABSL_GUARDED_BY(mu) = false;
  bool armed_solicited_only ABSL_GUARDED_BY(mu) = false;  // ibv_req_notify_cq(cq, 1)
  bool overrun ABSL_GUARDED_BY(mu) = false;  // CQ error: a CQE found no room
  std::atomic<int> qp_refs{0};
  AsyncEventCount events;
  // DelayCompletions (faults.h): when each CQE of `ring` becomes pollable, in
  // absl::GetCurrentTimeNanos() units; 0 = at once.
  std::vector<int64_t> visible_at ABSL_GUARDED_BY(mu);
  uint64_t serial = 0;  // names the CQ to the delayed-event timers
  bool ever_armed ABSL_GUARDED_BY(mu) = false;  // for FaultOp::kArmNewCq
  // QPs of this CQ on the same-host link, whose incoming rings poll_cq and
  // req_notify_cq drain (shm_link.h). Pollers read an immutable snapshot
  // without a lock (a busy poll takes none when nothing arrived): they count
  // themselves in `shm_readers` around it, and a writer (under links_mu)
  // publishes a new snapshot and frees the old ones once no reader is left;
  // a removal waits for that, so no poller touches a destroyed QP.
  //
  // A QP with a slot in `hints` (shm_hint.h) is looked at only when its
  // peer marked the slot, once the peer acknowledged the offer; until then,
  // and for QPs without a slot, on every poll (`scan`). Every
  // kCheckRingsEvery polls, and each sleep, look at kRingsChecked of `all`
  // too, in turn from `check_cursor`.
  //
  // Snapshot entries are plain pointers (a publication copies n of them, no
  // reference counts): `shm_qps` owns the links, and a link it lets go of
  // waits in `shm_retired_links` as long as a retired snapshot may name it.
  struct ShmEntry {
    SoftQp* qp;
    ShmLink* link;
    int slot = -1;  // in `hints`; -1: none
  };
  struct ShmMember {
    SoftQp* qp;
    std::shared_ptr<ShmLink> link;
    int slot = -1;
    // link->marked_by_peer() was seen true (it stays true for the link), so
    // a publication need not load each link's cold flag again.
    bool marked = false;
  };
  struct ShmSnapshot {
    std::vector<ShmEntry> all;
    std::vector<ShmEntry> scan;     // no slot, or the peer does not mark it yet
    std::vector<ShmEntry> by_slot;  // indexed by slot; qp == nullptr: free
  };
  absl::Mutex links_mu;
  std::vector<ShmMember> shm_qps ABSL_GUARDED_BY(links_mu);
  std::vector<std::shared_ptr<ShmLink>> shm_retired_links ABSL_GUARDED_BY(links_mu);
  // Made with the first QP that gets a slot; lives until destroy_cq.
  std::unique_ptr<ShmHintTable> hints ABSL_GUARDED_BY(links_mu);
  std::atomic<ShmHintTable*> hints_for_pollers{nullptr};
  // The producers ring doorbells (the poller slept since it last told them
  // it polls, or a QP was added); the next poll while the CQ is not armed
  // tells them a poller is active again: the table's poller_active and the
  // `scan` rings' need_doorbell.
  std::atomic<bool> rings_sleeping{true};
  std::atomic<size_t> check_cursor{0};  // into the snapshot's `all`
  std::vector<ShmSnapshot*> shm_retired ABSL_GUARDED_BY(links_mu);
  std::atomic<ShmSnapshot*> shm_snapshot{nullptr};  // nullptr: none
  std::atomic<int> shm_readers{0};
  // CQEs in `ring`, readable without `mu`: an idle poll_cq takes no lock.
  std::atomic<size_t> ready{0};
  std::atomic<bool> overrun_hint{false};  // `overrun`, readable without `mu`
  // `armed`, readable without `mu`: a poll after req_notify_cq (the usual
  // "arm, poll again, sleep") must not cancel the doorbells the sleep needs.
  std::atomic<bool> armed_hint{false};
  // The watchdog that notices when this CQ's busy poller stops (cq.cc). A
  // separate shared object so a timer can outlive destroy_cq safely.
  struct ShmWatch {
    absl::Mutex mu;
    SoftCq* cq ABSL_GUARDED_BY(mu) = nullptr;  // nullptr once destroy_cq ran
    std::atomic<uint64_t> polls{0};
    std::atomic<uint64_t> polls_at_arm{0};  // `polls` when the timer was armed
    std::atomic<bool> armed{false};
  };
  std::shared_ptr<ShmWatch> watch = std::make_shared<ShmWatch>();
};
inline SoftCq* ToSoft(ibv_cq* c) { return reinterpret_cast<SoftCq*>(c); }

// Adds one CQE; raises the channel event when armed. On overrun the CQ enters
// the error state (poll_cq then fails) and IBV_EVENT_CQ_ERR is posted.
// `slots` names the work-queue slots the CQE frees once polled. `solicited`:
// a receive of a message sent with IBV_SEND_SOLICITED; a CQ armed
// solicited-only raises its event only for such a CQE or an error CQE.
void CqPush(ibv_cq* cq, const ibv_wc& wc, SlotRelease slots = SlotRelease(),
            bool solicited = false);

int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc);
// Registers / forgets a QP whose rings the CQ's pollers drain. Call without
// the QP's mutex held. With `want_slot`, CqAddShmQp also gives the QP a slot
// of the CQ's table (shm_hint.h) and fills `*offer` for its peer (true),
// else returns false.
bool CqAddShmQp(ibv_cq* cq, SoftQp* qp, std::shared_ptr<ShmLink> link, bool want_slot,
                HintOffer* offer);
void CqRemoveShmQp(ibv_cq* cq, SoftQp* qp);
int ReqNotifyCq(ibv_cq* cq, int solicited_only);

// ---- wire frames ------------------------------------------------------------------
struct Frame;

// ---- queue pairs ---------------------------------------------------------------
// A work request's scatter/gather list. Four entries live inside the WQE
// (rdmarpc posts one or two), so posting one allocates nothing; longer lists
// (up to the QP's max_*_sge) spill to the heap.
using SgeList = absl::InlinedVector<ibv_sge, 4>;

struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  // A local operation (BIND_MW, LOCAL_INV): sends nothing; it takes effect
  // when the send queue reaches it (every WR before it has gone out) and
  // completes when it reaches the head, in order with the others.
  bool local_op = false;
  // RDMA READ or atomic: counts against the QP's max_rd_atomic while it is
  // out (sent, not yet answered).
  bool rd_atomic = false;
  // Gone out since post or the last RNR rewind; for a local operation:
  // carried out (never again). The sent WRs are a prefix of the SQ
  // (SoftQp::sq_sent).
  bool sent = false;
  // Checked at post and not gone out since: its lkeys need no second look.
  bool checked_now = false;
  // Has gone out at least once (VanishAfterWrs counts first transmissions).
  bool ever_sent = false;
  uint32_t psn = 0;
  uint32_t byte_len = 0;
  ibv_wc_status local_error = IBV_WC_SUCCESS;  // found at post; completes in order
  std::shared_ptr<const std::vector<uint8_t>> frame;  // kept for RNR retransmit
  SgeList read_sges;                                  // RDMA READ destination
  // SEND / WRITE (not inline): the payload's SGEs, whose lkeys are checked
  // again whenever the WR goes out after post (a NIC reads the buffers when
  // it executes or retransmits the WR).
  SgeList data_sges;
  // BIND_MW / LOCAL_INV, kept from post until the operation is carried out.
  MwBindRequest bind;
  uint32_t invalidate_rkey = 0;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  SgeList sges;
};

// A shared receive queue: receives that any QP attached to it consumes.
struct SoftSrq {
  ibv_srq srq;  // first member
  DomainMutex mu;
  ibv_srq_attr attr ABSL_GUARDED_BY(mu) = {};  // srq_limit 0 = limit event disarmed
  RingQueue<RecvWqe> rq ABSL_GUARDED_BY(mu);
  std::atomic<int> qp_refs{0};
  AsyncEventCount events;
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

  DomainMutex mu;
  // In a thread domain whose owner polls one of its CQs: its transport
  // timers run in the owner's polls (DeferredTimers). Set at creation.
  bool owner_runs_timers = false;
  ibv_qp_cap cap ABSL_GUARDED_BY(mu) = {};
  bool sq_sig_all ABSL_GUARDED_BY(mu) = false;
  ibv_qp_state state ABSL_GUARDED_BY(mu) = IBV_QPS_RESET;
  RingQueue<SendWqe> sq ABSL_GUARDED_BY(mu);
  RingQueue<RecvWqe> rq ABSL_GUARDED_BY(mu);
  uint32_t next_psn ABSL_GUARDED_BY(mu) = 0;  // requester: PSN of the next WR
  uint32_t epsn ABSL_GUARDED_BY(mu) = 0;      // responder: PSN expected next
  uint8_t rnr_retry ABSL_GUARDED_BY(mu) = 7;  // 7 = retry forever (IB spec)
  uint8_t min_rnr_timer ABSL_GUARDED_BY(mu) = 0;
  // modify_qp set min_rnr_timer: RNR NAKs of this responder then ask for its
  // delay; otherwise for kRnrDelayMicros.
  bool min_rnr_timer_set ABSL_GUARDED_BY(mu) = false;
  int rnr_count ABSL_GUARDED_BY(mu) = 0;     // RNR NAKs for the head WR
  bool rnr_wait ABSL_GUARDED_BY(mu) = false;  // waiting to retransmit after RNR
  bool sq_blocked ABSL_GUARDED_BY(mu) = false;  // an errored WR is queued
  uint32_t dest_qpn ABSL_GUARDED_BY(mu) = 0;
  // Incoming RDMA READs / atomics this QP may have outstanding as responder.
  // 0 (rdma_conn_param.responder_resources = 0) means it takes none: a NIC
  // NAKs them with "invalid request", the requester sees REM_INV_REQ_ERR.
  uint8_t max_dest_rd_atomic ABSL_GUARDED_BY(mu) = kMaxRdAtom;
  // READs / atomics this QP may have out at once as requester (IBV_QP_MAX_QP_
  // RD_ATOMIC, or rdma_cm's negotiated initiator depth); the next one waits
  // in the SQ, and every WR behind it, until an answer frees a slot.
  uint8_t max_rd_atomic ABSL_GUARDED_BY(mu) = kMaxRdAtom;
  uint32_t rd_atomic_out ABSL_GUARDED_BY(mu) = 0;  // sent, unanswered
  // How many WRs at the front of `sq` have gone out (SendWqe::sent); the
  // next to go is sq[sq_sent].
  size_t sq_sent ABSL_GUARDED_BY(mu) = 0;
  // As modify_qp(IBV_QP_ACCESS_FLAGS) set it; reported by query_qp.
  int qp_access_flags ABSL_GUARDED_BY(mu) =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  std::shared_ptr<Conn> conn ABSL_GUARDED_BY(mu);
  // Same-host link (shm_link.h): when set, QP frames go through its rings and
  // `conn` carries only doorbells and DISCONNECT.
  std::shared_ptr<ShmLink> shm ABSL_GUARDED_BY(mu);
  // Passive side between rdma_accept and RTU (the link, same-host or TCP, is
  // decided then): WRs queue and go out once QpSetLink runs at RTU.
  bool link_hold ABSL_GUARDED_BY(mu) = false;
  // ACK coalescing while a batch of frames is drained from the ring: one ACK
  // for the last request answers them all (an ACK, NAK or READ response
  // acknowledges every earlier PSN), as a NIC coalesces ACKs.
  bool ack_coalesce ABSL_GUARDED_BY(mu) = false;
  bool ack_pending ABSL_GUARDED_BY(mu) = false;
  uint32_t ack_pending_psn ABSL_GUARDED_BY(mu) = 0;
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

  // Transport timer (IB "local ACK timeout"): while sent WRs are unanswered,
  // every 4.096 us * 2^timeout without a sign of the peer counts one timeout;
  // retry_cnt + 1 in a row fail the head WR with IBV_WC_RETRY_EXC_ERR. timeout
  // 0 means infinite (IB spec). 14 (67 ms) is what query_qp always reported.
  uint8_t timeout ABSL_GUARDED_BY(mu) = 14;
  uint8_t retry_cnt ABSL_GUARDED_BY(mu) = 7;
  bool ack_timer_armed ABSL_GUARDED_BY(mu) = false;
  int timeouts ABSL_GUARDED_BY(mu) = 0;  // consecutive, with no progress
  uint64_t progress ABSL_GUARDED_BY(mu) = 0;  // answers received
  uint64_t seen_progress ABSL_GUARDED_BY(mu) = 0;
  // The same-host peer process's CPU time (clock ticks, /proc/PID/stat) at
  // the last period that saw no progress; peer_cpu_known false: not read
  // since progress was last seen (see PeerProcessStalledLocked in qp.cc).
  bool peer_cpu_known ABSL_GUARDED_BY(mu) = false;
  uint64_t peer_cpu_ticks ABSL_GUARDED_BY(mu) = 0;
  // Silent periods not counted because the same-host peer had not attached
  // its ring yet (PeerNotAttachedLocked in qp.cc), in nanoseconds.
  int64_t unattached_wait_ns ABSL_GUARDED_BY(mu) = 0;
  // RecvBeforeSend (faults.h): the responder's ACK being held back.
  bool ack_held ABSL_GUARDED_BY(mu) = false;
  uint32_t ack_held_psn ABSL_GUARDED_BY(mu) = 0;
  bool ack_hold_timer ABSL_GUARDED_BY(mu) = false;

  // The rdma_cm id whose QP this is (rdma_create_qp, or the application's own
  // QP named in rdma_connect / rdma_accept); expired when none.
  std::weak_ptr<SoftCmId> cm_id ABSL_GUARDED_BY(mu);
  // A passive (accepted) QP that has not yet received a request: the first
  // one raises IBV_EVENT_COMM_EST.
  bool awaiting_first_request ABSL_GUARDED_BY(mu) = false;
  AsyncEventCount events;
};
inline SoftQp* ToSoft(ibv_qp* q) { return reinterpret_cast<SoftQp*>(q); }

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

// Connects a QP to a TCP connection and moves it to RTS (rdma_cm did RTR/RTS).
// `responder_resources` / `initiator_depth`: the READ / atomic resources the
// IB CM negotiated for this side, which rdma_cm makes the QP's
// max_dest_rd_atomic / max_rd_atomic (the passive side's own accept values;
// on the active side the REP's initiator depth / responder resources).
// `shm`: the same-host link, or nullptr for TCP. `hold`: the link is not
// decided yet (QpSetLink decides); WRs posted meanwhile wait.
// `retry_cnt`: the transport retry count, the active side's
// conn_param.retry_count (rdma_accept ignores its own, as librdmacm).
// `passive`: the accepting side, whose first incoming request raises
// IBV_EVENT_COMM_EST.
// False, and nothing attached, when the QP is in ERR (the application
// moved it there, or it failed).
bool QpAttach(SoftQp* qp, std::shared_ptr<Conn> conn, std::shared_ptr<ShmLink> shm,
              bool hold, uint32_t dest_qpn, uint8_t rnr_retry, uint8_t responder_resources,
              uint8_t initiator_depth, uint8_t retry_cnt, bool passive = false);
// Connects a QP the application created itself (ibv_create_qp, its number
// in rdma_conn_param.qp_num) to `conn` without touching its state or
// attributes: the application moves it to RTR / RTS with rdma_init_qp_attr
// and modify_qp, and frames reach it once it is in RTR. `hold`, `passive`: as
// QpAttach. False (nothing done) when the QP is in ERROR or already has a
// connection.
bool QpBindLink(SoftQp* qp, std::shared_ptr<Conn> conn, std::shared_ptr<ShmLink> shm,
                bool hold, bool passive);
// The live QP of this process numbered `qp_num`, or nullptr.
std::shared_ptr<SoftQp> FindQp(uint32_t qp_num);
// Ends a hold: `shm` (or nullptr: TCP) carries the QP's frames from now on.
void QpSetLink(SoftQp* qp, std::shared_ptr<ShmLink> shm);
// Consumes the QP's incoming ring of `link` (processing its frames when the
// QP still uses it, discarding them otherwise). Takes the QP's mutex.
void QpDrainShm(SoftQp* qp, ShmLink* link);
// The transport under a connected QP failed (the TCP connection broke without
// a DISCONNECT): the QP goes to ERROR and IBV_EVENT_QP_FATAL is raised.
void QpTransportFailed(SoftQp* qp);
// Sends the ACK the QP owes for what it has received (a held one included)
// ahead of a DISCONNECT: a NIC has acknowledged a request by the time the
// application sees its completion and asks the CM to disconnect. Waits for a
// frame being handled under the QP's mutex to finish. Takes the QP's mutex.
void QpSendOwedAck(SoftQp* qp);
// Moves a QP to ERROR, flushing every outstanding WR with IBV_WC_WR_FLUSH_ERR,
// and forgets its connection.
void QpFlushToError(SoftQp* qp);
// Handles a data frame (SEND, WRITE, READ_REQ, READ_RESP, ACK, NAK).
void QpOnFrame(SoftQp* qp, Frame& frame);

// ---- rdma_cm glue called by Conn and Listener (progress thread) -------------------
// Each locks the cm id concerned itself (see the lock order above); call them
// with no cm lock held.
// The progress thread's entry for every frame read from a connection: control
// frames under the id's mutex, data frames straight to the QP without it.
void CmDispatchFrame(Conn* conn, Frame& frame);
void CmOnConnectDone(Conn* conn, int error);
void CmOnClosed(Conn* conn);
// A listener accepted a TCP connection; CONNECT_REQ will follow on it. The
// connection is closed when `listen_id` no longer listens.
void CmOnIncoming(const std::weak_ptr<SoftCmId>& listen_id, std::shared_ptr<Conn> conn);
// destroy_qp, before it tears the QP down: detaches it from its cm id and, on
// an established connection, tells the peer (DISCONNECT).
void CmOnQpDestroyed(SoftQp* qp);
// For the fork handlers: a child must not inherit the registries of cm ids
// and event channels locked by a thread that does not exist in it.
void LockCmRegistriesForFork();
void UnlockCmRegistriesForFork();

// Writes everything to an fd that may have O_NONBLOCK set by the user: used for
// the eventfds behind completion / event channels.
void SignalEventFd(int fd);
// Reads one count from a semaphore eventfd; honours the fd's O_NONBLOCK.
// Returns 0, or -1 with errno (EAGAIN when non-blocking and empty).
int WaitEventFd(int fd);

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_INTERNAL_H_
