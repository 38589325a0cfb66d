// device.cc: the device "softrdma0", contexts, PDs, MRs and their keys.
#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "glog/logging.h"
#include "softrdma/faults.h"
#include "softrdma/faults_internal.h"
#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {
namespace {

ibv_device* TheDevice() {
  static ibv_device* dev = [] {
    auto* d = new ibv_device();
    std::memset(d, 0, sizeof(*d));
    d->node_type = IBV_NODE_CA;
    // RoCE devices report the IB transport with an Ethernet link layer.
    d->transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d->name, sizeof(d->name), "softrdma0");
    std::snprintf(d->dev_name, sizeof(d->dev_name), "usoftrdma0");
    std::snprintf(d->dev_path, sizeof(d->dev_path), "/nonexistent/softrdma0");
    std::snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/nonexistent/softrdma0");
    return d;
  }();
  return dev;
}

constexpr uint64_t kNodeGuid = 0x5f7f'0000'0000'0001ull;

// SetIwarpMode: -1 = not set (SOFTRDMA_IWARP decides), 0 = off, 1 = on.
std::atomic<int> g_iwarp_mode{-1};

bool IwarpModeNow() {
  const int m = g_iwarp_mode.load();
  if (m >= 0) return m == 1;
  const char* v = std::getenv("SOFTRDMA_IWARP");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// The key table: lkeys and rkeys of live MRs, and rkeys of bound memory
// windows. Keys come from getrandom(2) so a peer cannot guess an rkey (nor an
// rkey from its MR's lkey: the two are independent draws), and are never
// issued twice in a process so a stale rkey can never reach a later
// registration. A window owns all 256 keys of its 24-bit index (the low byte
// is the consumer "key" that ibv_inc_rkey / type-2 binds change), so indexes
// of windows are kept apart from every MR key.
struct KeyTable {
  // Writers hold it exclusively (KeyTableWriteLock); readers shared only
  // while a writer is at work (ScopedMrAccess).
  absl::Mutex mu;
  std::atomic<bool> writer{false};  // a KeyTableWriteLock is held or wanted
  absl::flat_hash_map<uint32_t, SoftMr*> lkeys ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint32_t, SoftMr*> rkeys ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint32_t, SoftMw*> mw_rkeys ABSL_GUARDED_BY(mu);  // bound windows
  absl::flat_hash_map<uint32_t, SoftMw*> live_mws ABSL_GUARDED_BY(mu);  // by ibv_mw::handle
  absl::flat_hash_set<uint32_t> ever_issued ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<uint32_t> ever_issued_index ABSL_GUARDED_BY(mu);  // key >> 8, all keys
  absl::flat_hash_set<uint32_t> mw_index ABSL_GUARDED_BY(mu);           // key >> 8, windows
};
KeyTable& Keys() {
  static KeyTable* t = new KeyTable();
  return *t;
}

uint32_t RandomU32() {
  uint32_t k = 0;
  if (::getrandom(&k, sizeof(k), 0) != sizeof(k)) {
    PLOG(FATAL) << "softrdma: getrandom";
  }
  return k;
}

uint32_t FreshKeyLocked(KeyTable& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  for (;;) {
    const uint32_t k = RandomU32();
    if (k == 0 || t.ever_issued.contains(k) || t.mw_index.contains(k >> 8)) continue;
    t.ever_issued.insert(k);
    t.ever_issued_index.insert(k >> 8);
    return k;
  }
}

}  // namespace

namespace {

// Blocks a thread keeps for its life (its counters, its key-reader slot),
// never freed: a thread takes one an exited thread gave back, or a new one.
template <typename T>
struct ThreadBlocks {
  absl::Mutex mu;
  std::vector<T*> all ABSL_GUARDED_BY(mu);      // every block made
  std::vector<T*> unowned ABSL_GUARDED_BY(mu);  // given back by threads that exited
  T* Take() {
    absl::MutexLock l(&mu);
    if (!unowned.empty()) {
      T* b = unowned.back();
      unowned.pop_back();
      return b;
    }
    all.push_back(new T());
    return all.back();
  }
  void GiveBack(T* b) {
    absl::MutexLock l(&mu);
    unowned.push_back(b);
  }
};

struct CounterRegistry : ThreadBlocks<Counters> {
  // The counts' sums at the last ResetStats, which GetStats subtracts (the
  // gauges and maxima stay zero here).
  Stats base ABSL_GUARDED_BY(mu);
};
CounterRegistry& Registry() {
  static CounterRegistry* r = new CounterRegistry;
  return *r;
}

// This thread's block; trivially destructible, so Stat() stays usable in
// other thread_local destructors (a block taken then is simply kept).
thread_local Counters* t_counters = nullptr;

// Gives the thread's block back when the thread exits.
struct CounterReturn {
  bool armed = false;
  ~CounterReturn() {
    if (t_counters == nullptr) return;
    Registry().GiveBack(t_counters);
    t_counters = nullptr;
  }
};
thread_local CounterReturn t_counter_return;

Counters* TakeCounters() {
  Counters* c = Registry().Take();
  t_counter_return.armed = true;  // constructed now: returns the block at thread exit
  return c;
}

}  // namespace

Counters& Stat() {
  if (t_counters == nullptr) t_counters = TakeCounters();
  return *t_counters;
}

void LockCountersForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { Registry().mu.Lock(); }
void UnlockCountersForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { Registry().mu.Unlock(); }

// A thread's mark that it reads the key table (ScopedMrAccess), on a cache
// line of its own. Slots are never freed: a thread's goes to the next thread
// that starts after it exits.
struct alignas(64) KeyReaderSlot {
  std::atomic<uint32_t> active{0};  // 1 while the thread reads without the mutex
  uint32_t depth = 0;               // the thread's nested ScopedMrAccess
  bool locked = false;              // the outermost took the mutex shared
};

namespace {

using KeyReaders = ThreadBlocks<KeyReaderSlot>;
KeyReaders& Readers() {
  static KeyReaders* r = new KeyReaders;
  return *r;
}

// As t_counters: trivially destructible, given back by a reaper made with
// it; a ScopedMrAccess in a thread_local destructor run after the reaper
// takes the mutex shared.
thread_local KeyReaderSlot* t_key_slot = nullptr;
thread_local bool t_key_slot_gone = false;
struct KeySlotReturn {
  bool armed = false;
  ~KeySlotReturn() {
    t_key_slot_gone = true;
    if (t_key_slot == nullptr) return;
    Readers().GiveBack(t_key_slot);
    t_key_slot = nullptr;
  }
};
thread_local KeySlotReturn t_key_slot_return;

KeyReaderSlot* ThisThreadsKeySlot() {
  if (t_key_slot != nullptr || t_key_slot_gone) return t_key_slot;
  t_key_slot = Readers().Take();
  t_key_slot_return.armed = true;  // constructed now: gives the slot back at thread exit
  return t_key_slot;
}

// Writers' half: raise the flag, fence, wait until no slot is marked. A
// reader that marked its slot before the fence is waited for; one that
// marks it after sees the flag and takes the mutex shared, which the writer
// holds exclusively.
void WaitForKeyReaders(KeyTable& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  t.writer.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  KeyReaders& r = Readers();
  absl::MutexLock l(&r.mu);
  for (KeyReaderSlot* slot : r.all) {
    for (int round = 0; slot->active.load(std::memory_order_acquire) != 0;) BackOff(round);
  }
}

// The key table held for writing (every change of a key, MR or window).
class ABSL_SCOPED_LOCKABLE KeyTableWriteLock {
 public:
  explicit KeyTableWriteLock(KeyTable& t) ABSL_EXCLUSIVE_LOCK_FUNCTION(t.mu) : t_(t) {
    t_.mu.Lock();
    WaitForKeyReaders(t_);
  }
  ~KeyTableWriteLock() ABSL_UNLOCK_FUNCTION() {
    t_.writer.store(false, std::memory_order_release);
    t_.mu.Unlock();
  }
  KeyTableWriteLock(const KeyTableWriteLock&) = delete;
  KeyTableWriteLock& operator=(const KeyTableWriteLock&) = delete;

 private:
  KeyTable& t_;
};

}  // namespace

ScopedMrAccess::ScopedMrAccess() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  KeyTable& t = Keys();
  slot_ = ThisThreadsKeySlot();
  if (slot_ == nullptr) {
    t.mu.ReaderLock();
    locked_ = true;
    return;
  }
  if (slot_->depth++ > 0) return;  // the outermost holds the table
  slot_->active.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Acquire: a reader that sees the last writer's flag go down sees its
  // changes to the maps too.
  if (t.writer.load(std::memory_order_acquire)) {
    slot_->active.store(0, std::memory_order_release);
    t.mu.ReaderLock();
    slot_->locked = true;
  }
}

ScopedMrAccess::~ScopedMrAccess() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  KeyTable& t = Keys();
  if (slot_ == nullptr) {
    if (locked_) t.mu.ReaderUnlock();
    return;
  }
  if (--slot_->depth > 0) return;
  if (slot_->locked) {
    slot_->locked = false;
    t.mu.ReaderUnlock();
  } else {
    slot_->active.store(0, std::memory_order_release);
  }
}

// The writer's protocol, so a child inherits no reader mid-copy, and the
// readers' registry, which a thread may hold while it takes its slot.
void LockKeyTableForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  KeyTable& t = Keys();
  t.mu.Lock();
  WaitForKeyReaders(t);
  Readers().mu.Lock();
}
void UnlockKeyTableForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Readers().mu.Unlock();
  KeyTable& t = Keys();
  t.writer.store(false, std::memory_order_release);
  t.mu.Unlock();
}

bool LookupKey(uint32_t key, bool remote, MrView* view) {
  ScopedMrAccess access;
  return LookupKeyHeld(key, remote, view);
}

bool LookupKeyHeld(uint32_t key, bool remote, MrView* view) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  KeyTable& t = Keys();
  auto& map = remote ? t.rkeys : t.lkeys;
  auto it = map.find(key);
  if (it == map.end()) {
    if (!remote) return false;
    auto w = t.mw_rkeys.find(key);
    if (w == t.mw_rkeys.end()) return false;
    const SoftMw* mw = w->second;
    // The binding lives only as long as the MR under it.
    if (!t.lkeys.contains(mw->mr_lkey)) return false;
    view->pd = internal::ProtectionDomain(mw->mw.pd);
    view->addr = mw->addr;
    view->length = mw->length;
    view->access = mw->access;
    view->qp_num = mw->mw.type == IBV_MW_TYPE_2 ? mw->qp_num : 0;
    return true;
  }
  const SoftMr* m = it->second;
  view->pd = internal::ProtectionDomain(m->mr.pd);
  view->addr = reinterpret_cast<uintptr_t>(m->mr.addr);
  view->length = m->mr.length;
  view->access = m->access;
  view->qp_num = 0;
  return true;
}

uint32_t NewMwRkey() {
  KeyTable& t = Keys();
  KeyTableWriteLock l(t);
  for (;;) {
    const uint32_t k = RandomU32();
    if (k == 0 || t.ever_issued_index.contains(k >> 8)) continue;
    t.ever_issued_index.insert(k >> 8);
    t.mw_index.insert(k >> 8);
    return k;
  }
}

void MwSetHandleRkey(SoftMw* mw, uint32_t rkey) {
  KeyTable& t = Keys();
  KeyTableWriteLock l(t);
  mw->mw.rkey = rkey;
}

void MwRegister(SoftMw* mw) {
  KeyTable& t = Keys();
  KeyTableWriteLock l(t);
  t.live_mws[mw->mw.handle] = mw;
}

ibv_wc_status MwBind(const MwBindRequest& r, ibv_qp* qp, MwBindStep step) {
  constexpr int kBindable = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
  KeyTable& t = Keys();
  KeyTableWriteLock l(t);
  // The window must still be allocated (dealloc_mw between post and the
  // bind's turn in the send queue fails the bind, as on a NIC).
  auto live = t.live_mws.find(r.mw_handle);
  if (live == t.live_mws.end() || &live->second->mw != r.mw) return IBV_WC_MW_BIND_ERR;
  SoftMw* mw = live->second;
  const bool unbind = r.mr == nullptr || r.length == 0;
  // A type-2 window binds only from the free state (IB spec 10.6.7.2.1).
  if (mw->mw.type == IBV_MW_TYPE_2 && (mw->bound || unbind)) return IBV_WC_MW_BIND_ERR;
  // Either type: a QP of the window's PD, and the window's index kept.
  if (ProtectionDomain(qp->pd) != ProtectionDomain(mw->mw.pd) ||
      (r.new_rkey >> 8) != (mw->mw.rkey >> 8)) {
    return IBV_WC_MW_BIND_ERR;
  }
  const SoftMr* m = nullptr;
  if (!unbind) {
    // By lkey (never issued twice), so an MR deregistered since post is
    // found missing, not touched.
    auto it = t.lkeys.find(r.mr_lkey);
    if (it == t.lkeys.end() || &it->second->mr != r.mr) return IBV_WC_MW_BIND_ERR;
    m = it->second;
    const uintptr_t base = reinterpret_cast<uintptr_t>(m->mr.addr);
    if (ProtectionDomain(m->mr.pd) != ProtectionDomain(mw->mw.pd) ||
        !(m->access & IBV_ACCESS_MW_BIND) || (r.access & ~kBindable) != 0 || r.addr < base ||
        r.addr + r.length < r.addr ||
        r.addr + r.length > base + m->mr.length) {
      return IBV_WC_MW_BIND_ERR;
    }
    // Remote write or atomic through a window needs local write on the MR.
    if ((r.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(m->access & IBV_ACCESS_LOCAL_WRITE)) {
      return IBV_WC_MW_BIND_ERR;
    }
  }
  if (step == MwBindStep::kCheck) return IBV_WC_SUCCESS;
  if (mw->bound) t.mw_rkeys.erase(mw->bound_rkey);
  // The ibv_bind_mw verb moved the handle's rkey at post (as mlx5 does); a
  // BIND_MW work request moves it now.
  if (!r.verb) mw->mw.rkey = r.new_rkey;
  mw->bound = !unbind;
  if (mw->bound) {
    mw->bound_rkey = r.new_rkey;
    mw->mr_lkey = r.mr_lkey;
    mw->addr = static_cast<uintptr_t>(r.addr);
    mw->length = r.length;
    mw->access = static_cast<int>(r.access) & ~IBV_ACCESS_LOCAL_WRITE;
    mw->qp_num = qp->qp_num;
    t.mw_rkeys[r.new_rkey] = mw;
  }
  return IBV_WC_SUCCESS;
}

bool MwInvalidate(uint32_t rkey, ibv_qp* qp, bool require_qp) {
  KeyTable& t = Keys();
  KeyTableWriteLock l(t);
  auto it = t.mw_rkeys.find(rkey);
  if (it == t.mw_rkeys.end()) return false;
  SoftMw* mw = it->second;
  if (mw->mw.type != IBV_MW_TYPE_2 || ProtectionDomain(mw->mw.pd) != ProtectionDomain(qp->pd)) {
    return false;
  }
  if (require_qp && mw->qp_num != qp->qp_num) return false;
  t.mw_rkeys.erase(it);
  mw->bound = false;
  return true;
}

void MwForget(SoftMw* mw) {
  KeyTable& t = Keys();
  KeyTableWriteLock l(t);
  if (mw->bound) t.mw_rkeys.erase(mw->bound_rkey);
  mw->bound = false;
  t.live_mws.erase(mw->mw.handle);
}

ibv_context* CmContext() {
  static ibv_context* ctx = softrdma::open_device(TheDevice());
  return ctx;
}

}  // namespace internal

using internal::SoftContext;
using internal::SoftMr;
using internal::SoftPd;
using internal::Stat;

// ---- devices -----------------------------------------------------------------

ibv_device** get_device_list(int* num_devices) {
  auto** list = new ibv_device*[2];
  list[0] = internal::TheDevice();
  list[1] = nullptr;
  if (num_devices != nullptr) *num_devices = 1;
  return list;
}

void free_device_list(ibv_device** list) { delete[] list; }

const char* get_device_name(ibv_device* device) {
  return device != nullptr ? device->name : nullptr;
}

ibv_context* open_device(ibv_device* device) {
  if (device != internal::TheDevice()) {
    errno = ENODEV;
    return nullptr;
  }
  auto* c = new SoftContext();
  std::memset(&c->ctx, 0, sizeof(c->ctx));
  c->iwarp = internal::IwarpModeNow();
  // The one device struct describes the kind of device last opened.
  device->node_type = c->iwarp ? IBV_NODE_RNIC : IBV_NODE_CA;
  device->transport_type = c->iwarp ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB;
  c->ctx.device = device;
  c->ctx.ops.poll_cq = internal::PollCq;
  c->ctx.ops.req_notify_cq = internal::ReqNotifyCq;
  c->ctx.ops.post_send = internal::PostSend;
  c->ctx.ops.post_recv = internal::PostRecv;
  c->ctx.ops.post_srq_recv = internal::PostSrqRecv;
  // verbs.h's ibv_alloc_mw / ibv_bind_mw / ibv_dealloc_mw are inlines that call
  // these ops.
  c->ctx.ops.alloc_mw = internal::AllocMw;
  c->ctx.ops.bind_mw = internal::BindMwVerb;
  c->ctx.ops.dealloc_mw = internal::DeallocMw;
  c->ctx.cmd_fd = -1;  // no kernel uverbs device behind us
  c->ctx.async_fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (c->ctx.async_fd < 0) {
    int e = errno;
    delete c;
    errno = e;
    return nullptr;
  }
  c->ctx.num_comp_vectors = 1;
  pthread_mutex_init(&c->ctx.mutex, nullptr);
  // An extended context, with the ops of device_ex.cc / qp_ex.cc.
  internal::InitVerbsContext(c);
  return &c->ctx;
}

int close_device(ibv_context* context) {
  if (context == nullptr) return EINVAL;
  SoftContext* c = internal::ToSoft(context);
  ibv_pd* pd;
  {
    absl::MutexLock l(&c->mu);
    pd = c->default_pd;
    c->default_pd = nullptr;
  }
  if (pd != nullptr) dealloc_pd(pd);
  ::close(context->async_fd);
  pthread_mutex_destroy(&context->mutex);
  delete c;
  return 0;
}

int query_device(ibv_context* context, ibv_device_attr* a) {
  if (context == nullptr || a == nullptr) return EINVAL;
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "softrdma 0.1");
  a->node_guid = internal::kNodeGuid;
  a->sys_image_guid = internal::kNodeGuid;
  a->max_mr_size = 1ull << 46;
  a->page_size_cap = 4096;
  a->vendor_id = 0;
  a->hw_ver = 1;
  a->max_qp = 65536;
  a->max_qp_wr = internal::kMaxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                        IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a->max_sge = internal::kMaxSge;
  a->max_sge_rd = internal::kMaxSge;
  a->max_cq = 65536;
  a->max_cqe = internal::kMaxCqe;
  a->max_mr = 1 << 20;
  a->max_pd = 65536;
  a->max_qp_rd_atom = internal::kMaxRdAtom;
  a->max_res_rd_atom = internal::kMaxRdAtom * 65536;
  a->max_qp_init_rd_atom = internal::kMaxRdAtom;
  // Atomics are applied by the one progress thread with CPU atomics, so they
  // are atomic with respect to other CPU accesses too (IBV_ATOMIC_GLOB).
  a->atomic_cap = IBV_ATOMIC_GLOB;
  const bool iwarp = internal::ToSoft(context)->iwarp;
  if (iwarp) {
    // iWARP (RFC 5040) has no immediate data and no IB atomics; RNICs report
    // none (siw, cxgb4, irdma in iWARP mode).
    a->atomic_cap = IBV_ATOMIC_NONE;
  }
  a->max_srq = 65536;
  a->max_srq_wr = internal::kMaxSrqWr;
  a->max_srq_sge = internal::kMaxSge;
  a->max_mw = internal::kMaxMw;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
  return 0;
}

void SetIwarpMode(bool on) { internal::g_iwarp_mode = on ? 1 : 0; }

int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* a) {
  if (context == nullptr || a == nullptr || port_num != 1) return EINVAL;
  std::memset(a, 0, sizeof(*a));
  // In iWARP mode the port reads the same: RNICs (siw, cxgb4) also report an
  // Ethernet link layer; what tells iWARP apart is the device's transport_type
  // (IBV_TRANSPORT_IWARP) and node_type (IBV_NODE_RNIC), set at open.
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->max_msg_sz = internal::kMaxMsgSize;
  a->pkey_tbl_len = 1;
  a->active_width = 1;   // 1X
  a->active_speed = 32;  // "EDR" code; a software device has no real speed
  a->phys_state = 5;     // LinkUp
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (context == nullptr || gid == nullptr || port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  // ::ffff:127.0.0.1, an IPv4-mapped GID as RoCE v2 devices report.
  std::memset(gid, 0, sizeof(*gid));
  gid->raw[10] = 0xff;
  gid->raw[11] = 0xff;
  gid->raw[12] = 127;
  gid->raw[15] = 1;
  return 0;
}

// ---- protection domains and memory regions ---------------------------------------

ibv_pd* alloc_pd(ibv_context* context) {
  if (context == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (int err = 0; internal::TakeInjectedFailure(FaultOp::kAllocPd, &err)) {
    errno = err;
    return nullptr;
  }
  auto* p = new SoftPd();
  p->pd.context = context;
  static std::atomic<uint32_t> next_handle{1};
  p->pd.handle = next_handle++;
  Stat().live_pds++;
  return &p->pd;
}

int dealloc_pd(ibv_pd* pd) {
  if (pd == nullptr) return EINVAL;
  SoftPd* p = internal::ToSoft(pd);
  if (p->refs.load() > 0) return EBUSY;
  // A parent domain lets go of its protection and thread domains.
  if (p->protection != nullptr) p->protection->refs--;
  if (p->td != nullptr) p->td->refs--;
  delete p;
  Stat().live_pds--;
  return 0;
}

namespace internal {
namespace {

// PROCMAP_QUERY (Linux 6.11, include/uapi/linux/fs.h): one VMA of
// /proc/<pid>/maps by address, without formatting the whole file. Declared
// here because Debian 12's kernel headers predate it.
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104, "the kernel's struct procmap_query");
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kVmaReadable = 0x01;
constexpr uint64_t kVmaWritable = 0x02;

// MappedForAccess by PROCMAP_QUERY: 1 (yes), 0 (no), -1 (the kernel has no
// PROCMAP_QUERY: read the file instead).
int MappedForAccessByQuery(int fd, uintptr_t start, uintptr_t end, bool write) {
  for (uintptr_t covered = start; covered < end;) {
    ProcmapQuery q{};
    q.size = sizeof(q);
    q.query_addr = covered;  // the VMA covering it, if any
    if (::ioctl(fd, kProcmapQuery, &q) != 0) {
      if (errno == ENOENT) return 0;  // a hole
      return -1;                      // ENOTTY / EINVAL: an older kernel
    }
    if ((q.vma_flags & kVmaReadable) == 0 || (write && (q.vma_flags & kVmaWritable) == 0)) {
      return 0;
    }
    covered = static_cast<uintptr_t>(q.vma_end);
  }
  return 1;
}

// True when every page of [start, end) is mapped readable, and writable when
// `write`, by this process's /proc/self/maps: what get_user_pages demands
// when ib_umem_get pins an MR's pages (FOLL_WRITE for an access that lets the
// device write), failing ibv_reg_mr with EFAULT otherwise. With thousands of
// mappings (a same-host segment per connection) reading the whole file
// takes milliseconds, so PROCMAP_QUERY asks for the VMAs of the range only.
bool MappedForAccess(uintptr_t start, uintptr_t end, bool write) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // cannot tell: as before, trust the caller
  if (const int by_query = MappedForAccessByQuery(fd, start, end, write); by_query >= 0) {
    ::close(fd);
    return by_query == 1;
  }
  std::string maps;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    maps.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  uintptr_t covered = start;  // [start, covered) checked; lines are sorted
  for (size_t pos = 0; pos < maps.size() && covered < end;) {
    size_t eol = maps.find('\n', pos);
    if (eol == std::string::npos) eol = maps.size();
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    const std::string line = maps.substr(pos, eol - pos);
    pos = eol + 1;
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (hi <= covered) continue;
    if (lo > covered) return false;  // a hole
    if (perms[0] != 'r' || (write && perms[1] != 'w')) return false;
    covered = hi;
  }
  return covered >= end;
}

}  // namespace
}  // namespace internal

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (int err = 0; internal::TakeInjectedFailure(FaultOp::kRegMr, &err)) {
    errno = err;
    return nullptr;
  }
  constexpr int kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING;
  if (pd == nullptr || (addr == nullptr && length > 0) || (access & ~kSupported) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  // As the IB spec requires: remote write or atomic access needs local write.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return nullptr;
  }
  const bool device_writes =
      (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                 IBV_ACCESS_MW_BIND)) != 0;  // ib_access_writable()
  const auto start = reinterpret_cast<uintptr_t>(addr);
  if (length > 0 && (start + length < start ||
                     !internal::MappedForAccess(start, start + length, device_writes))) {
    errno = EFAULT;
    return nullptr;
  }
  // Pinning the pages fails past the memlock cap, as ib_umem_get does past
  // RLIMIT_MEMLOCK (rdma-core then reports ENOMEM).
  uint64_t pinned = 0;
  if (!internal::PinPages(addr, length, &pinned)) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* m = new SoftMr();
  m->pinned = pinned;
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->access = access;
  internal::ToSoft(pd)->refs++;
  internal::KeyTable& t = internal::Keys();
  {
    internal::KeyTableWriteLock l(t);
    m->mr.lkey = internal::FreshKeyLocked(t);
    m->mr.rkey = internal::FreshKeyLocked(t);
    m->mr.handle = m->mr.lkey;
    t.lkeys[m->mr.lkey] = m;
    t.rkeys[m->mr.rkey] = m;
  }
  Stat().reg_mr++;
  Stat().live_mrs++;
  return &m->mr;
}

int dereg_mr(ibv_mr* mr) {
  if (mr == nullptr) return EINVAL;
  internal::KeyTable& t = internal::Keys();
  {
    internal::KeyTableWriteLock l(t);
    t.lkeys.erase(mr->lkey);
    t.rkeys.erase(mr->rkey);
  }
  internal::ToSoft(mr->pd)->refs--;
  internal::UnpinPages(reinterpret_cast<SoftMr*>(mr)->pinned);
  delete reinterpret_cast<SoftMr*>(mr);
  Stat().live_mrs--;
  return 0;
}

// ---- counters ------------------------------------------------------------------------

namespace internal {
namespace {

// The fields of Stats that count events: ResetStats starts them from zero
// (the gauges live_* and the maxima are not in it).
constexpr uint64_t Stats::*kCountFields[] = {
    &Stats::send,
    &Stats::send_with_imm,
    &Stats::rdma_write,
    &Stats::rdma_write_with_imm,
    &Stats::rdma_read,
    &Stats::atomic,
    &Stats::recv,
    &Stats::bytes_sent,
    &Stats::rnr_retries,
    &Stats::post_send_calls,
    &Stats::post_recv_calls,
    &Stats::reg_mr,
    &Stats::rem_access_errors,
    &Stats::signaled_sends,
    &Stats::wc_polled,
    &Stats::poll_cq_calls,
    &Stats::qps_on_shm,
    &Stats::qps_on_tcp,
    &Stats::shm_fallbacks,
    &Stats::shm_doorbells,
    &Stats::shm_marked_qps,
    &Stats::shm_marked_drains,
    &Stats::shm_ring_rewinds,
    &Stats::shm_publishes,
    &Stats::rd_atomic_waits,
    &Stats::domain_visits,
    &Stats::owner_timers,
    &Stats::grace_timers,
};
// Every field of Stats is a count above, one of its two maxima or one of its
// six gauges: a count added to Stats but not here would never be reset.
static_assert(std::size(kCountFields) + 2 + 6 == sizeof(Stats) / sizeof(uint64_t),
              "a field of Stats is missing from kCountFields");


// Sums every block. Caller holds the registry's mutex.
Stats SumCountersLocked(CounterRegistry& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  Stats s;
  for (const Counters* cp : r.all) {
    const Counters& c = *cp;
    s.send += c.send;
    s.send_with_imm += c.send_with_imm;
    s.rdma_write += c.rdma_write;
    s.rdma_write_with_imm += c.rdma_write_with_imm;
    s.rdma_read += c.rdma_read;
    s.atomic += c.atomic;
    s.recv += c.recv;
    s.bytes_sent += c.bytes_sent;
    s.rnr_retries += c.rnr_retries;
    s.post_send_calls += c.post_send_calls;
    s.post_recv_calls += c.post_recv_calls;
    s.reg_mr += c.reg_mr;
    s.max_send_bytes = std::max<uint64_t>(s.max_send_bytes, c.max_send_bytes);
    s.rem_access_errors += c.rem_access_errors;
    s.signaled_sends += c.signaled_sends;
    s.wc_polled += c.wc_polled;
    s.poll_cq_calls += c.poll_cq_calls;
    s.qps_on_shm += c.qps_on_shm;
    s.qps_on_tcp += c.qps_on_tcp;
    s.shm_fallbacks += c.shm_fallbacks;
    s.shm_doorbells += c.shm_doorbells;
    s.shm_marked_qps += c.shm_marked_qps;
    s.shm_marked_drains += c.shm_marked_drains;
    s.shm_ring_rewinds += c.shm_ring_rewinds;
    s.shm_publishes += c.shm_publishes;
    s.rd_atomic_waits += c.rd_atomic_waits;
    s.domain_visits += c.domain_visits;
    s.owner_timers += c.owner_timers;
    s.grace_timers += c.grace_timers;
    s.max_rd_atomic_out = std::max<uint64_t>(s.max_rd_atomic_out, c.max_rd_atomic_out);
    s.live_cm_ids += c.live_cm_ids;
    s.live_qps += c.live_qps;
    s.live_cqs += c.live_cqs;
    s.live_mrs += c.live_mrs;
    s.live_pds += c.live_pds;
    s.live_mws += c.live_mws;
  }
  return s;
}

}  // namespace
}  // namespace internal

Stats GetStats() {
  internal::CounterRegistry& r = internal::Registry();
  absl::MutexLock l(&r.mu);
  Stats s = internal::SumCountersLocked(r);
  for (uint64_t Stats::*f : internal::kCountFields) s.*f -= r.base.*f;
  return s;
}

void ResetStats() {
  internal::CounterRegistry& r = internal::Registry();
  absl::MutexLock l(&r.mu);
  // Counts are written by their blocks' owners only (OwnerCount): remember
  // their sums instead of zeroing them. Maxima restart from zero.
  const Stats now = internal::SumCountersLocked(r);
  for (uint64_t Stats::*f : internal::kCountFields) r.base.*f = now.*f;
  for (internal::Counters* c : r.all) {
    c->max_send_bytes = 0;
    c->max_rd_atomic_out = 0;
  }
}

namespace internal {
namespace {

void PrintStatsAtExit() {
  Stats s = GetStats();
  std::fprintf(stderr,
               "softrdma-stats: send=%llu send_with_imm=%llu rdma_write=%llu "
               "rdma_write_with_imm=%llu rdma_read=%llu recv=%llu bytes_sent=%llu "
               "rnr_retries=%llu post_send_calls=%llu post_recv_calls=%llu reg_mr=%llu "
               "max_send_bytes=%llu rem_access_errors=%llu atomic=%llu\n",
               static_cast<unsigned long long>(s.send),
               static_cast<unsigned long long>(s.send_with_imm),
               static_cast<unsigned long long>(s.rdma_write),
               static_cast<unsigned long long>(s.rdma_write_with_imm),
               static_cast<unsigned long long>(s.rdma_read),
               static_cast<unsigned long long>(s.recv),
               static_cast<unsigned long long>(s.bytes_sent),
               static_cast<unsigned long long>(s.rnr_retries),
               static_cast<unsigned long long>(s.post_send_calls),
               static_cast<unsigned long long>(s.post_recv_calls),
               static_cast<unsigned long long>(s.reg_mr),
               static_cast<unsigned long long>(s.max_send_bytes),
               static_cast<unsigned long long>(s.rem_access_errors),
               static_cast<unsigned long long>(s.atomic));
  // The same-host link, on a line of its own so parsers of the line above
  // keep working.
  std::fprintf(stderr,
               "softrdma-stats-link: qps_on_shm=%llu qps_on_tcp=%llu shm_fallbacks=%llu "
               "shm_doorbells=%llu shm_marked_qps=%llu shm_marked_drains=%llu "
               "shm_ring_rewinds=%llu shm_publishes=%llu\n",
               static_cast<unsigned long long>(s.qps_on_shm),
               static_cast<unsigned long long>(s.qps_on_tcp),
               static_cast<unsigned long long>(s.shm_fallbacks),
               static_cast<unsigned long long>(s.shm_doorbells),
               static_cast<unsigned long long>(s.shm_marked_qps),
               static_cast<unsigned long long>(s.shm_marked_drains),
               static_cast<unsigned long long>(s.shm_ring_rewinds),
               static_cast<unsigned long long>(s.shm_publishes));
  std::fprintf(stderr,
               "softrdma-stats-domains: domain_visits=%llu owner_timers=%llu "
               "grace_timers=%llu\n",
               static_cast<unsigned long long>(s.domain_visits),
               static_cast<unsigned long long>(s.owner_timers),
               static_cast<unsigned long long>(s.grace_timers));
}

// Registered at load time (not at first use) so a process that posted nothing
// still prints its zeros; this costs no thread and no fd.
const bool kStatsAtExit = [] {
  const char* v = std::getenv("RDMARPC_SOFT_STATS");
  if (v != nullptr && std::strcmp(v, "1") == 0) std::atexit(PrintStatsAtExit);
  return true;
}();

}  // namespace
}  // namespace internal

}  // namespace softrdma
