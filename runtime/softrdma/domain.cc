// domain.cc: thread domains, parent domains and extended CQs -- the verbs a
// program uses to tell the provider that one thread at a time drives a set of
// QPs and CQs (ibv_alloc_td(3), ibv_alloc_parent_domain(3),
// ibv_create_cq_ex(3)), as mlx5 offers them. Their checks follow rdma-core's
// man pages and mlx5's verbs.c where softrdma has the feature: a parent
// domain stands for its protection domain wherever a PD is taken, keeps it
// and its thread domain busy (EBUSY) while it lives, and is kept busy by the
// QPs, SRQs, MRs and CQs made on it.
#include <errno.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/base/attributes.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "softrdma/internal.h"
#include "softrdma/progress_thread.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {
namespace {

int Membarrier(int cmd) { return static_cast<int>(::syscall(__NR_membarrier, cmd, 0, 0)); }

// Whether this process may use MEMBARRIER_CMD_PRIVATE_EXPEDITED (Linux 4.14;
// a seccomp filter or an older kernel may refuse it). Registered once.
bool ExpeditedMembarrier() {
  static const bool ok = [] {
    const int cmds = Membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
    return Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return ok;
}

// The domains this thread holds: how it went in and how many DomainMutex
// locks of that domain it holds. A thread holds at most a few at once (a
// QP's domain, then a CQ's or SRQ's of another).
enum class Way : uint8_t { kOwnerFast, kOwnerLocked, kVisitor };
struct Held {
  SoftTd* td;
  uint32_t depth;
  Way way;
};
constexpr int kMaxHeld = 8;
thread_local Held t_held[kMaxHeld];
thread_local int t_nheld = 0;

Held* FindHeld(SoftTd* td) {
  for (int i = t_nheld - 1; i >= 0; --i) {
    if (t_held[i].td == td) return &t_held[i];
  }
  return nullptr;
}

[[noreturn]] ABSL_ATTRIBUTE_NOINLINE void DomainMisuse(const char* what) {
  LOG(FATAL) << "softrdma: " << what;
  std::abort();
}

// Everything but the owner's way in without a lock: `h` is this thread's new
// entry for `td`.
ABSL_ATTRIBUTE_NOINLINE void EnterSlow(SoftTd* td, Held* h) {
  if (td == t_owner_of) {
    h->way = Way::kOwnerLocked;
    td->visit_mu.Lock();
    return;
  }
  h->way = Way::kVisitor;
  td->visit_mu.Lock();
  if (!td->fast) return;
  Stat().domain_visits++;
  td->visiting.store(true, std::memory_order_relaxed);
  // The visitor's half: every running thread of the process passes a full
  // barrier, so the owner either saw `visiting` or its owner_in is seen.
  if (Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
    // Registered when the domain was made, so this does not fail; a plain
    // fence here would not order the owner's side.
    PLOG(FATAL) << "softrdma: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)";
  }
  for (int round = 0; td->owner_in.load(std::memory_order_acquire) != 0;) BackOff(round);
}

void Enter(SoftTd* td) {
  if (Held* h = FindHeld(td)) {
    ++h->depth;
    return;
  }
  if (t_nheld == kMaxHeld) DomainMisuse("too many thread domains held by one thread");
  Held* h = &t_held[t_nheld++];
  h->td = td;
  h->depth = 1;
  if (td == t_owner_of && td->fast) {
    // The owner's half of the Dekker pair: store, compiler barrier, load. A
    // second thread here at once breaks the domain's promise; say so rather
    // than corrupt the queues (not every such race is caught).
    if (td->owner_in.load(std::memory_order_relaxed) != 0) {
      DomainMisuse("two threads use the objects of one thread domain at once");
    }
    td->owner_in.store(1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!td->visiting.load(std::memory_order_acquire)) {
      h->way = Way::kOwnerFast;
      return;
    }
    td->owner_in.store(0, std::memory_order_release);  // let the visitor in
  }
  EnterSlow(td, h);
}

void Leave(SoftTd* td) {
  Held* h = FindHeld(td);
  if (h == nullptr) DomainMisuse("a thread domain left that was not held");
  if (--h->depth > 0) return;
  const Way way = h->way;
  Held* last = &t_held[t_nheld - 1];
  if (h != last) *h = *last;  // order among held domains does not matter
  --t_nheld;
  switch (way) {
    case Way::kOwnerFast:
      td->owner_in.store(0, std::memory_order_release);
      break;
    case Way::kOwnerLocked:
      td->visit_mu.Unlock();
      break;
    case Way::kVisitor:
      if (td->fast) td->visiting.store(false, std::memory_order_release);
      td->visit_mu.Unlock();
      break;
  }
}

}  // namespace

__thread SoftTd* t_owner_of = nullptr;

void BackOff(int& round) {
  if (round >= 2048) {
    absl::SleepFor(absl::Microseconds(50));
  } else if (round >= 64) {
    std::this_thread::yield();
  }
  ++round;
}

SoftTd* NewThreadDomain(ibv_context* context) {
  auto* t = new SoftTd();
  t->td.context = context;
  t->fast = ExpeditedMembarrier();
  // What deferring a timer would allocate the first time, allocated now: room
  // for 16 waiting QPs, and the progress thread's lane for the grace delay
  // (a timer with no owner, which fires as a no-op).
  {
    absl::MutexLock l(&t->deferred->mu);
    t->deferred->qps.reserve(16);
  }
  ProgressThread::Get().RunAfter(kOwnerTimerGrace, std::weak_ptr<void>(),
                                 +[](const std::shared_ptr<void>& /*owner*/) {});
  return t;
}

void ReleaseThreadDomain(SoftTd* td) {
  if (td->holders.fetch_sub(1, std::memory_order_acq_rel) == 1) delete td;
}

void DomainMutex::EnterDomain(SoftTd* td) { Enter(td); }
void DomainMutex::LeaveDomain(SoftTd* td) { Leave(td); }

}  // namespace internal

using internal::SoftCq;
using internal::SoftPd;
using internal::SoftTd;

ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* init_attr) {
  if (context == nullptr || init_attr == nullptr || init_attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  return &internal::NewThreadDomain(context)->td;
}

int dealloc_td(ibv_td* td) {
  if (td == nullptr) return EINVAL;
  if (internal::ToSoft(td)->refs.load() > 0) return EBUSY;
  internal::ReleaseThreadDomain(internal::ToSoft(td));  // the user's hold
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnownMask =
      IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (context == nullptr || attr == nullptr || attr->pd == nullptr ||
      attr->pd->context != context || (attr->comp_mask & ~kKnownMask) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  SoftPd* protection = internal::ToSoft(attr->pd);
  // A parent domain is made on a protection domain, not on another parent.
  if (protection->protection != nullptr ||
      (attr->td != nullptr && attr->td->context != context)) {
    errno = EINVAL;
    return nullptr;
  }
  // IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: accepted and not called.
  // softrdma's queues live in its own heap, which no device reads by DMA;
  // where mlx5 would place a QP's or CQ's buffer with the user's allocator
  // there is nothing to place. pd_context is only ever passed to those.
  auto* p = new SoftPd();
  p->pd.context = context;
  p->pd.handle = attr->pd->handle;  // what the kernel would see: the real PD
  p->protection = protection;
  p->td = attr->td != nullptr ? internal::ToSoft(attr->td) : nullptr;
  protection->refs++;
  if (p->td != nullptr) p->td->refs++;
  internal::Stat().live_pds++;
  return &p->pd;
}

namespace internal {
namespace {

SoftCq* FromEx(ibv_cq_ex* cq) { return reinterpret_cast<SoftCq*>(cq); }

// One CQE into ex_wc and the public status / wr_id. ENOENT: none ready.
int PollOneEx(ibv_cq_ex* cq) {
  SoftCq* c = FromEx(cq);
  const int n = PollCq(&c->cq, 1, &c->ex_wc);
  if (n < 0) return EIO;  // CQ overrun: the CQ is in error, as poll_cq says
  if (n == 0) return ENOENT;
  cq->status = c->ex_wc.status;
  cq->wr_id = c->ex_wc.wr_id;
  return 0;
}

// A CQ outside any thread domain may be polled by several threads: one at
// a time between start_poll and end_poll (or start_poll's failure), as
// mlx5 holds its CQ lock there.
int StartPollEx(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (attr == nullptr || attr->comp_mask != 0) return EINVAL;
  SoftCq* c = FromEx(cq);
  const bool lock = c->mu.domain() == nullptr;
  if (lock) c->ex_mu.Lock();
  const int rc = PollOneEx(cq);
  if (lock) {
    if (rc != 0) {
      c->ex_mu.Unlock();  // the user does not call end_poll after a failure
    } else {
      c->ex_locked = true;
    }
  }
  return rc;
}
int NextPollEx(ibv_cq_ex* cq) { return PollOneEx(cq); }
void EndPollEx(ibv_cq_ex* cq) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  SoftCq* c = FromEx(cq);
  if (c->ex_locked) {
    c->ex_locked = false;
    c->ex_mu.Unlock();
  }
}
ibv_wc_opcode ReadOpcodeEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.opcode; }
uint32_t ReadVendorErrEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.vendor_err; }
uint32_t ReadByteLenEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.byte_len; }
__be32 ReadImmDataEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.imm_data; }
uint32_t ReadQpNumEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.qp_num; }
uint32_t ReadSrcQpEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.src_qp; }
unsigned int ReadWcFlagsEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.wc_flags; }
uint32_t ReadSlidEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.slid; }
uint8_t ReadSlEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.sl; }
uint8_t ReadDlidPathBitsEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.dlid_path_bits; }

}  // namespace
}  // namespace internal

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  constexpr uint32_t kKnownMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  if (context == nullptr || attr == nullptr || (attr->comp_mask & ~kKnownMask) != 0 ||
      attr->comp_vector >= static_cast<uint32_t>(context->num_comp_vectors)) {
    errno = EINVAL;
    return nullptr;
  }
  // Timestamps, VLANs, flow tags and tag matching: the device reports none of
  // them (query_device_ex), so a CQ cannot deliver them.
  // Bits beyond the known flags are EINVAL, as on mlx5.
  const uint32_t flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0;
  constexpr uint32_t kKnownFlags =
      IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  if ((flags & ~kKnownFlags) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  if ((attr->wc_flags & ~static_cast<uint64_t>(IBV_WC_STANDARD_FLAGS)) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  SoftTd* td = nullptr;
  SoftPd* parent = nullptr;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
    // Only a parent domain may be given (mlx5: EINVAL for a plain PD).
    ibv_pd* pd = attr->parent_domain;
    if (pd == nullptr || pd->context != context || internal::ToSoft(pd)->protection == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    parent = internal::ToSoft(pd);
    td = parent->td;
  }
  if (attr->cqe < 1 || attr->cqe > static_cast<uint32_t>(internal::kMaxCqe)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq* cq = create_cq(context, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                         static_cast<int>(attr->comp_vector));
  if (cq == nullptr) return nullptr;
  SoftCq* c = internal::ToSoft(cq);
  // Nothing else knows the CQ yet: its lock may change. A single-threaded CQ
  // outside any thread domain is a domain of its own.
  c->single_threaded = (flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0;
  c->ignore_overrun = (flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0;
  if (td == nullptr && c->single_threaded) {
    SoftTd* own = internal::NewThreadDomain(context);
    c->mu.set_domain(own);
    internal::ReleaseThreadDomain(own);  // the CQ's mutex holds it alone
  } else {
    c->mu.set_domain(td);
  }
  // The parent domain stays busy (dealloc_pd: EBUSY) while the CQ lives, as
  // on mlx5.
  c->parent_domain = parent;
  if (parent != nullptr) parent->refs++;
  ibv_cq_ex& x = c->cqx;
  x.comp_mask = 0;
  x.start_poll = internal::StartPollEx;
  x.next_poll = internal::NextPollEx;
  x.end_poll = internal::EndPollEx;
  x.read_opcode = internal::ReadOpcodeEx;
  x.read_vendor_err = internal::ReadVendorErrEx;
  x.read_wc_flags = internal::ReadWcFlagsEx;
  // As mlx5: a field's reader is set only when the CQ was asked for it.
  const uint64_t w = attr->wc_flags;
  if (w & IBV_WC_EX_WITH_BYTE_LEN) x.read_byte_len = internal::ReadByteLenEx;
  if (w & IBV_WC_EX_WITH_IMM) x.read_imm_data = internal::ReadImmDataEx;
  if (w & IBV_WC_EX_WITH_QP_NUM) x.read_qp_num = internal::ReadQpNumEx;
  if (w & IBV_WC_EX_WITH_SRC_QP) x.read_src_qp = internal::ReadSrcQpEx;
  if (w & IBV_WC_EX_WITH_SLID) x.read_slid = internal::ReadSlidEx;
  if (w & IBV_WC_EX_WITH_SL) x.read_sl = internal::ReadSlEx;
  if (w & IBV_WC_EX_WITH_DLID_PATH_BITS) x.read_dlid_path_bits = internal::ReadDlidPathBitsEx;
  return &x;
}

}  // namespace softrdma
