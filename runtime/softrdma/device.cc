// device.cc: the device "softrdma0", contexts, PDs, MRs and their keys.
#include <errno.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "glog/logging.h"
#include "softrdma/faults.h"
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

// The key table: lkeys and rkeys of live MRs. Keys come from getrandom(2) so
// a peer cannot guess an rkey, and are never issued twice in a process so a
// stale rkey can never reach a later registration.
struct KeyTable {
  absl::Mutex mu;
  absl::flat_hash_map<uint32_t, SoftMr*> lkeys ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint32_t, SoftMr*> rkeys ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<uint32_t> ever_issued ABSL_GUARDED_BY(mu);
};
KeyTable& Keys() {
  static KeyTable* t = new KeyTable();
  return *t;
}

uint32_t FreshKeyLocked(KeyTable& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu) {
  for (;;) {
    uint32_t k = 0;
    if (::getrandom(&k, sizeof(k), 0) != sizeof(k)) {
      PLOG(FATAL) << "softrdma: getrandom";
    }
    if (k == 0 || t.ever_issued.contains(k)) continue;
    t.ever_issued.insert(k);
    return k;
  }
}

}  // namespace

Counters& Stat() {
  static Counters* c = new Counters();
  return *c;
}

ScopedMrAccess::ScopedMrAccess() ABSL_NO_THREAD_SAFETY_ANALYSIS { Keys().mu.ReaderLock(); }
ScopedMrAccess::~ScopedMrAccess() ABSL_NO_THREAD_SAFETY_ANALYSIS { Keys().mu.ReaderUnlock(); }

void LockKeyTableForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { Keys().mu.Lock(); }
void UnlockKeyTableForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { Keys().mu.Unlock(); }

bool LookupKey(uint32_t key, bool remote, MrView* view) {
  ScopedMrAccess access;
  return LookupKeyHeld(key, remote, view);
}

bool LookupKeyHeld(uint32_t key, bool remote, MrView* view) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  KeyTable& t = Keys();
  auto& map = remote ? t.rkeys : t.lkeys;
  auto it = map.find(key);
  if (it == map.end()) return false;
  const SoftMr* m = it->second;
  view->pd = m->mr.pd;
  view->addr = reinterpret_cast<uintptr_t>(m->mr.addr);
  view->length = m->mr.length;
  view->access = m->access;
  return true;
}

void PostAsyncEvent(ibv_context* context, const ibv_async_event& event) {
  SoftContext* c = ToSoft(context);
  {
    absl::MutexLock l(&c->mu);
    c->async_events.push_back(event);
  }
  SignalEventFd(context->async_fd);
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
  c->ctx.device = device;
  c->ctx.ops.poll_cq = internal::PollCq;
  c->ctx.ops.req_notify_cq = internal::ReqNotifyCq;
  c->ctx.ops.post_send = internal::PostSend;
  c->ctx.ops.post_recv = internal::PostRecv;
  c->ctx.ops.post_srq_recv = internal::PostSrqRecv;
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
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
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
  a->max_srq = 65536;
  a->max_srq_wr = internal::kMaxQpWr;
  a->max_srq_sge = internal::kMaxSge;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
  return 0;
}

int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* a) {
  if (context == nullptr || a == nullptr || port_num != 1) return EINVAL;
  std::memset(a, 0, sizeof(*a));
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

int get_async_event(ibv_context* context, ibv_async_event* event) {
  if (context == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* c = internal::ToSoft(context);
  for (;;) {
    if (internal::WaitEventFd(context->async_fd) != 0) return -1;
    absl::MutexLock l(&c->mu);
    if (c->async_events.empty()) continue;
    *event = c->async_events.front();
    c->async_events.pop_front();
    return 0;
  }
}

void ack_async_event(ibv_async_event*) {}

// ---- protection domains and memory regions ---------------------------------------

ibv_pd* alloc_pd(ibv_context* context) {
  if (context == nullptr) {
    errno = EINVAL;
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
  if (internal::ToSoft(pd)->refs.load() > 0) return EBUSY;
  delete reinterpret_cast<SoftPd*>(pd);
  Stat().live_pds--;
  return 0;
}

namespace internal {
namespace {
// FailNextRegMr: how many reg_mr calls still fail, and with which errno.
std::atomic<int> g_fail_reg_mr_count{0};
std::atomic<int> g_fail_reg_mr_errno{0};
}  // namespace
}  // namespace internal

void FailNextRegMr(int count, int err) {
  internal::g_fail_reg_mr_errno = err;
  internal::g_fail_reg_mr_count = count;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  for (int left = internal::g_fail_reg_mr_count.load(); left > 0;) {
    if (internal::g_fail_reg_mr_count.compare_exchange_weak(left, left - 1)) {
      errno = internal::g_fail_reg_mr_errno.load();
      return nullptr;
    }
  }
  constexpr int kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_RELAXED_ORDERING;
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
  auto* m = new SoftMr();
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->access = access;
  internal::ToSoft(pd)->refs++;
  internal::KeyTable& t = internal::Keys();
  {
    absl::MutexLock l(&t.mu);
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
    absl::MutexLock l(&t.mu);
    t.lkeys.erase(mr->lkey);
    t.rkeys.erase(mr->rkey);
  }
  internal::ToSoft(mr->pd)->refs--;
  delete reinterpret_cast<SoftMr*>(mr);
  Stat().live_mrs--;
  return 0;
}

// ---- counters ------------------------------------------------------------------------

Stats GetStats() {
  internal::Counters& c = Stat();
  Stats s;
  s.send = c.send;
  s.send_with_imm = c.send_with_imm;
  s.rdma_write = c.rdma_write;
  s.rdma_write_with_imm = c.rdma_write_with_imm;
  s.rdma_read = c.rdma_read;
  s.recv = c.recv;
  s.bytes_sent = c.bytes_sent;
  s.rnr_retries = c.rnr_retries;
  s.post_send_calls = c.post_send_calls;
  s.post_recv_calls = c.post_recv_calls;
  s.reg_mr = c.reg_mr;
  s.max_send_bytes = c.max_send_bytes;
  s.rem_access_errors = c.rem_access_errors;
  s.live_cm_ids = c.live_cm_ids;
  s.live_qps = c.live_qps;
  s.live_cqs = c.live_cqs;
  s.live_mrs = c.live_mrs;
  s.live_pds = c.live_pds;
  return s;
}

void ResetStats() {
  internal::Counters& c = Stat();
  // Gauges count live objects and are not reset.
  c.send = 0;
  c.send_with_imm = 0;
  c.rdma_write = 0;
  c.rdma_write_with_imm = 0;
  c.rdma_read = 0;
  c.recv = 0;
  c.bytes_sent = 0;
  c.rnr_retries = 0;
  c.post_send_calls = 0;
  c.post_recv_calls = 0;
  c.reg_mr = 0;
  c.max_send_bytes = 0;
  c.rem_access_errors = 0;
}

namespace internal {
namespace {

void PrintStatsAtExit() {
  Stats s = GetStats();
  std::fprintf(stderr,
               "softrdma-stats: send=%llu send_with_imm=%llu rdma_write=%llu "
               "rdma_write_with_imm=%llu rdma_read=%llu recv=%llu bytes_sent=%llu "
               "rnr_retries=%llu post_send_calls=%llu post_recv_calls=%llu reg_mr=%llu "
               "max_send_bytes=%llu rem_access_errors=%llu\n",
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
               static_cast<unsigned long long>(s.rem_access_errors));
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
