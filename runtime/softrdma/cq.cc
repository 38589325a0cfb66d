// cq.cc: completion queues and completion channels.
#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "softrdma/progress_thread.h"
#include "softrdma/faults_internal.h"
#include "softrdma/internal.h"
#include "softrdma/shm_link.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

namespace {

// Live CQs by serial, for the timers of DelayCompletions: a timer may outlive
// its CQ. Lock order: LiveCqMutex() -> SoftCq::mu.
absl::Mutex& LiveCqMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}
absl::flat_hash_map<uint64_t, SoftCq*>& LiveCqs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(LiveCqMutex()) {
  static auto* m = new absl::flat_hash_map<uint64_t, SoftCq*>();
  return *m;
}
uint64_t g_next_cq_serial ABSL_GUARDED_BY(LiveCqMutex()) = 1;

void RaiseChannelEvent(ibv_cq* cq) {
  auto* ch = reinterpret_cast<SoftCompChannel*>(cq->channel);
  {
    absl::MutexLock l(&ch->mu);
    ch->events.push_back(cq);
  }
  SignalEventFd(ch->ch.fd);
}

// With delayed CQEs, an armed CQ fires when its oldest CQE becomes visible.
void ScheduleDelayedEventLocked(SoftCq* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu);

void OnDelayedEventTimer(uint64_t serial) {
  absl::MutexLock live(&LiveCqMutex());
  auto it = LiveCqs().find(serial);
  if (it == LiveCqs().end()) return;  // destroyed meanwhile
  SoftCq* c = it->second;
  bool notify = false;
  {
    internal::DomainLock l(&c->mu);
    if (!c->armed || c->count == 0 || c->cq.channel == nullptr) return;
    if (c->visible_at[c->head] <= absl::GetCurrentTimeNanos()) {
      c->armed = false;
      c->armed_hint.store(false, std::memory_order_relaxed);
      notify = true;
    } else {
      ScheduleDelayedEventLocked(c);
    }
  }
  // The channel lives while a CQ is attached to it, and the CQ cannot be
  // destroyed while we hold LiveCqMutex().
  if (notify) RaiseChannelEvent(&c->cq);
}

void ScheduleDelayedEventLocked(SoftCq* c) {
  const int64_t wait = c->visible_at[c->head] - absl::GetCurrentTimeNanos();
  const uint64_t serial = c->serial;
  ProgressThread::Get().RunAfter(absl::Nanoseconds(std::max<int64_t>(wait, 0)),
                         [serial] { OnDelayedEventTimer(serial); });
}

}  // namespace

namespace {
void ReleaseSlots(const SlotRelease& r);
}  // namespace

void CqPush(ibv_cq* cq, const ibv_wc& wc, SlotRelease slots, bool solicited) {
  SoftCq* c = ToSoft(cq);
  const int64_t delay_ns = CompletionDelayNanos();
  bool notify = false;
  bool overrun_now = false;
  bool dropped_now = false;
  bool first_drop = false;
  int cqe = 0;  // for the log line; resize_cq writes cq->cqe under c->mu
  {
    internal::DomainLock l(&c->mu);
    if (c->overrun) return;  // already in error; hardware stops writing CQEs
    if (c->count == c->ring.size() && c->ignore_overrun) {
      // The user sized the CQ itself and asked for no overrun error: the
      // completion is lost (its WR's slot is freed below) and the CQ stays
      // usable.
      dropped_now = true;
      first_drop = c->dropped++ == 0;
      cqe = cq->cqe;
    } else if (c->count == c->ring.size()) {
      // Hardware does not drop a CQE silently: the CQ goes to error and an
      // IBV_EVENT_CQ_ERR async event is raised.
      c->overrun = true;
      c->overrun_hint.store(true);
      overrun_now = true;
      cqe = cq->cqe;
    } else {
      const size_t at = (c->head + c->count) % c->ring.size();
      c->ring[at] = wc;
      RecordCqe(wc);  // faults.h: TakeErrorCqes
      c->release[at] = std::move(slots);
      c->visible_at[at] = delay_ns > 0 ? absl::GetCurrentTimeNanos() + delay_ns : 0;
      ++c->count;
      c->ready.store(c->count, std::memory_order_release);
      // Solicited-only arming fires for a solicited receive or any error
      // CQE (ibv_req_notify_cq(3); IBA's solicited-event rules).
      const bool wanted =
          !c->armed_solicited_only || solicited || wc.status != IBV_WC_SUCCESS;
      if (c->armed && wanted && cq->channel != nullptr) {
        if (c->visible_at[c->head] > absl::GetCurrentTimeNanos()) {
          // Not visible yet: the event comes when it is.
          ScheduleDelayedEventLocked(c);  // extra timers find it disarmed
        } else {
          c->armed = false;  // one event per arm, as hardware
          c->armed_hint.store(false, std::memory_order_relaxed);
          notify = true;
        }
      }
    }
  }
  if (dropped_now) {
    ReleaseSlots(slots);
    LOG_IF(WARNING, first_drop) << "softrdma: CQ full (cqe " << cqe << "), made with "
                                << "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: completions are dropped";
    return;
  }
  if (overrun_now) {
    LOG(ERROR) << "softrdma: CQ overrun (cqe " << cqe << "); CQ is now in error";
    ibv_async_event ev{};
    ev.element.cq = cq;
    ev.event_type = IBV_EVENT_CQ_ERR;
    PostAsyncEvent(cq->context, ev);
    return;
  }
  if (notify) RaiseChannelEvent(cq);
}

namespace {

// Gives back `r.count` slots of a QP's SQ or RQ, unless the QP is gone or was
// reset since the CQE was made.
void ReleaseSlots(const SlotRelease& r) {
  if (r.count == 0) return;
  std::shared_ptr<SoftQp> q = r.qp.lock();
  if (q == nullptr || q->slot_generation.load() != r.generation) return;
  std::atomic<uint32_t>& unpolled = r.recv ? q->rq_unpolled : q->sq_unpolled;
  // Saturating: a RESET racing with this poll may have zeroed the count.
  uint32_t cur = unpolled.load();
  while (!unpolled.compare_exchange_weak(cur, cur >= r.count ? cur - r.count : 0)) {
  }
}

}  // namespace

namespace {

// Publishes shm_qps as the pollers' snapshot. `wait`: do not return before
// every poller that may still read an older snapshot has left (a removed QP
// is about to be destroyed); otherwise old snapshots wait in shm_retired.
void PublishShmSnapshot(SoftCq* c, bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->links_mu) {
  SoftCq::ShmSnapshot* next = nullptr;
  if (!c->shm_qps.empty()) {
    next = new SoftCq::ShmSnapshot();
    next->all.reserve(c->shm_qps.size());
    int top_slot = -1;
    for (SoftCq::ShmMember& m : c->shm_qps) {
      const SoftCq::ShmEntry e{m.qp, m.link.get(), m.slot};
      next->all.push_back(e);
      top_slot = std::max(top_slot, m.slot);
      if (m.slot >= 0 && !m.marked) m.marked = m.link->marked_by_peer();
      if (!m.marked) next->scan.push_back(e);
    }
    next->by_slot.assign(static_cast<size_t>(top_slot + 1), SoftCq::ShmEntry{nullptr, nullptr});
    for (const SoftCq::ShmEntry& e : next->all) {
      if (e.slot >= 0) next->by_slot[static_cast<size_t>(e.slot)] = e;
    }
  }
  SoftCq::ShmSnapshot* old = c->shm_snapshot.exchange(next, std::memory_order_seq_cst);
  if (old != nullptr) c->shm_retired.push_back(old);
  // A poller counts itself in before it loads the pointer (both seq_cst), so
  // once the count is seen at 0 after the exchange, none holds an old one.
  if (wait) {
    while (c->shm_readers.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  } else if (c->shm_readers.load(std::memory_order_seq_cst) != 0) {
    return;
  }
  for (SoftCq::ShmSnapshot* s : c->shm_retired) delete s;
  c->shm_retired.clear();
  c->shm_retired_links.clear();
}

}  // namespace

bool CqAddShmQp(ibv_cq* cq, SoftQp* qp, std::shared_ptr<ShmLink> link, bool want_slot,
                HintOffer* offer) {
  SoftCq* c = ToSoft(cq);
  absl::MutexLock l(&c->links_mu);
  SoftCq::ShmMember* entry = nullptr;
  for (SoftCq::ShmMember& e : c->shm_qps) {
    if (e.qp == qp) {
      // Snapshots published before the next one may still name the old link.
      if (e.link != link) {
        c->shm_retired_links.push_back(std::move(e.link));
        e.marked = false;
      }
      e.link = link;
      entry = &e;
    }
  }
  if (entry == nullptr) {
    c->shm_qps.push_back(SoftCq::ShmMember{qp, std::move(link)});
    entry = &c->shm_qps.back();
  }
  if (want_slot && entry->slot < 0) {
    if (c->hints == nullptr) {
      c->hints = ShmHintTable::Create();
      c->hints_for_pollers.store(c->hints.get(), std::memory_order_release);
    }
    if (c->hints != nullptr) entry->slot = c->hints->AllocSlot();
  }
  const bool offered = want_slot && entry->slot >= 0;
  if (offered) {
    offer->slot = static_cast<uint32_t>(entry->slot);
    offer->fd = c->hints->fd();
    offer->inode = c->hints->inode();
    offer->pid = LocalIdentity().pid;
  }
  // The new ring starts in doorbell mode: the next poll tells it (and the
  // others) that a poller is active. Released after the table and the
  // snapshot, so the poll that takes the flag sees both.
  PublishShmSnapshot(c, /*wait=*/false);
  c->rings_sleeping.store(true, std::memory_order_release);
  return offered;
}

namespace {

// The peers of some QPs on `scan` now mark their slots: publish a snapshot
// without them.
void RefreshShmScan(SoftCq* c) {
  absl::MutexLock l(&c->links_mu);
  PublishShmSnapshot(c, /*wait=*/false);
}

}  // namespace

void CqRemoveShmQp(ibv_cq* cq, SoftQp* qp) {
  SoftCq* c = ToSoft(cq);
  absl::MutexLock l(&c->links_mu);
  auto& v = c->shm_qps;
  // The links stay alive until no poller can read a snapshot naming them.
  std::vector<std::shared_ptr<ShmLink>> removed;
  for (SoftCq::ShmMember& e : v) {
    if (e.qp != qp) continue;
    if (e.slot >= 0 && c->hints != nullptr) c->hints->FreeSlot(e.slot);
    removed.push_back(std::move(e.link));
  }
  if (removed.empty()) return;
  v.erase(std::remove_if(v.begin(), v.end(), [qp](const SoftCq::ShmMember& e) { return e.qp == qp; }),
          v.end());
  PublishShmSnapshot(c, /*wait=*/true);
}

namespace {

void ArmWatchdog(std::shared_ptr<SoftCq::ShmWatch> watch, uint64_t polls);

// The same-host rings of the CQ's QPs, drained by the polling thread itself,
// as a NIC's provider reads CQEs from memory: a busy poller sees a peer's SEND
// with no other thread and no syscall involved. `polling`: a poll_cq, which
// tells the producers they need not ring doorbells (unless the CQ is armed
// for a sleeper); else the poller is going to sleep (req_notify_cq, or the
// watchdog found it quiet), and producers must ring again.
void DrainShmRings(SoftCq* c, bool polling) {
  if (c->shm_snapshot.load(std::memory_order_relaxed) == nullptr) {
    // No same-host QP now; a table made for earlier ones must still say
    // that the poller sleeps, or the producers of QPs added later would
    // ring no doorbell while it does.
    if (!polling) {
      if (ShmHintTable* t = c->hints_for_pollers.load(std::memory_order_acquire)) {
        t->SetPollerAsleep();
      }
      c->rings_sleeping.store(true, std::memory_order_relaxed);
    }
    return;
  }
  bool woke = false;
  bool refresh = false;
  c->shm_readers.fetch_add(1, std::memory_order_seq_cst);
  if (const SoftCq::ShmSnapshot* snap = c->shm_snapshot.load(std::memory_order_seq_cst)) {
    const bool armed = c->armed_hint.load(std::memory_order_relaxed);
    // Waking: tell the producers a poller is active (once per wake, not per
    // poll). Decided before the table is read: a QP added meanwhile (which
    // may make the table) sets rings_sleeping after publishing it.
    const bool waking = polling && !armed && c->rings_sleeping.load(std::memory_order_relaxed) &&
                        c->rings_sleeping.exchange(false, std::memory_order_acq_rel);
    ShmHintTable* t = c->hints_for_pollers.load(std::memory_order_acquire);
    auto drain = [](const SoftCq::ShmEntry& e) {
      if (e.link->HasIncoming()) QpDrainShm(e.qp, e.link);
    };
    auto entry = [](const SoftCq::ShmSnapshot* s, int slot) -> const SoftCq::ShmEntry* {
      if (s == nullptr || static_cast<size_t>(slot) >= s->by_slot.size()) return nullptr;
      const SoftCq::ShmEntry* e = &s->by_slot[static_cast<size_t>(slot)];
      return e->qp != nullptr ? e : nullptr;
    };
    auto drain_marked = [&] {
      if (t == nullptr) return;
      const int marked = t->TakeMarked([&](int slot) {
        const SoftCq::ShmEntry* e = entry(snap, slot);
        if (e == nullptr) {
          // A slot newer than this call's snapshot: the current one holds
          // it (safe to read, as this thread still counts in shm_readers,
          // so no snapshot is freed and no QP in one destroyed). A slot in
          // neither was freed: its mark is stale.
          e = entry(c->shm_snapshot.load(std::memory_order_seq_cst), slot);
        }
        if (e != nullptr) drain(*e);
      });
      if (marked > 0) Stat().shm_marked_drains += static_cast<uint64_t>(marked);
    };
    // A few rings in turn whether marked or not (shm_hint.h: a peer may
    // have cleared others' bits): each is a cold cache line or two once
    // there are thousands, so not on every poll. Racing pollers may look
    // at the same ones twice; that costs a load, not a record.
    auto check_some = [&] {
      if (t == nullptr || snap->all.empty()) return;
      const size_t n = snap->all.size();
      size_t cur = c->check_cursor.load(std::memory_order_relaxed) % n;
      for (uint32_t k = 0; k < kRingsChecked && k < n; ++k) {
        drain(snap->all[cur]);
        cur = cur + 1 == n ? 0 : cur + 1;
      }
      c->check_cursor.store(cur, std::memory_order_relaxed);
    };
    // Few rings: each is looked at on every poll and the bits are left
    // alone (kScanAllRingsUpTo). Going to sleep still takes the marked
    // slots: a QP added after `snap` was loaded (or the CQ's 17th) is not
    // in it, and its peer, seeing the poller active, marked its slot
    // rather than ring; drain_marked finds it in the current snapshot.
    const bool scan_all = snap->all.size() <= kScanAllRingsUpTo;
    if (!polling) {
      // Producers must ring again: poller_active to 0 for the rings whose
      // peers mark them, need_doorbell to 1 for the rest; then one fence
      // for all of them, then the drains that recheck (shm_link.h's and
      // shm_hint.h's protocols): one store per CQ plus one per unmarked
      // ring.
      if (t != nullptr) t->SetPollerAsleep();
      for (const SoftCq::ShmEntry& e : snap->scan) e.link->MarkSleeping();
      c->rings_sleeping.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      drain_marked();
      if (scan_all) {
        for (const SoftCq::ShmEntry& e : snap->all) drain(e);
      } else {
        for (const SoftCq::ShmEntry& e : snap->scan) drain(e);
        check_some();
      }
    } else {
      if (waking) {
        if (t != nullptr) woke |= t->SetPollerActive();
        for (const SoftCq::ShmEntry& e : snap->scan) woke |= e.link->MarkPolling();
      }
      if (scan_all) {
        for (const SoftCq::ShmEntry& e : snap->all) drain(e);
      } else {
        drain_marked();
        if (c->watch->polls.load(std::memory_order_relaxed) % kCheckRingsEvery == 0) check_some();
        for (const SoftCq::ShmEntry& e : snap->scan) drain(e);
      }
      for (const SoftCq::ShmEntry& e : snap->scan) {
        if (e.slot >= 0 && e.link->marked_by_peer()) refresh = true;
      }
    }
  }
  c->shm_readers.fetch_sub(1, std::memory_order_release);
  if (refresh) RefreshShmScan(c);
  if (polling) {
    // A load and a store, not a locked add: pollers racing on one CQ may
    // lose a count, but `polls` still moves, which is all the watchdog
    // looks at (and at worst it drains once in a poller's place).
    c->watch->polls.store(c->watch->polls.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
  }
  if (woke && !c->watch->armed.exchange(true)) {
    ArmWatchdog(c->watch, c->watch->polls.load(std::memory_order_relaxed));
  }
}

// While producers rely on this CQ's poller, a timer checks every
// kWatchdogMicros that it still polls; when it stopped without
// req_notify_cq (e.g. it only polls while it waits for something), the
// timer puts the producers back to doorbell mode and drains the rings in
// its place, as going to sleep does (DrainShmRings).
// One timer per polled CQ, not per QP.
void WatchdogFired(const std::shared_ptr<void>& owner) {
  auto watch = std::static_pointer_cast<SoftCq::ShmWatch>(owner);
  const uint64_t now = watch->polls.load(std::memory_order_relaxed);
  if (now != watch->polls_at_arm.load(std::memory_order_relaxed)) {
    return ArmWatchdog(std::move(watch), now);  // still polling
  }
  // Disarm before the flags go up: a poll in between then re-arms.
  watch->armed.store(false);
  absl::MutexLock l(&watch->mu);
  if (watch->cq != nullptr) DrainShmRings(watch->cq, /*polling=*/false);
}

void ArmWatchdog(std::shared_ptr<SoftCq::ShmWatch> watch, uint64_t polls) {
  watch->polls_at_arm.store(polls, std::memory_order_relaxed);
  ProgressThread::Get().RunAfter(absl::Microseconds(kWatchdogMicros),
                                 std::weak_ptr<void>(watch), &WatchdogFired);
}

}  // namespace

namespace {

// PollCq's vector of slots to give back, kept per thread. A thread_local made
// before it (destroyed after it) whose destructor polls finds
// t_spare_releases_gone and works with a vector of its own.
thread_local bool t_spare_releases_gone = false;
struct SpareReleases {
  std::vector<SlotRelease> v;
  ~SpareReleases() { t_spare_releases_gone = true; }
};
thread_local SpareReleases t_spare_releases;

std::vector<SlotRelease> TakeSpareReleases() {
  if (t_spare_releases_gone) return {};
  return std::move(t_spare_releases.v);
}

void KeepSpareReleases(std::vector<SlotRelease> v) {
  if (!t_spare_releases_gone) t_spare_releases.v = std::move(v);
}

}  // namespace

int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  SoftCq* c = ToSoft(cq);
  OwnerScope owner(c->mu.domain());  // the user's data-path verb
  OwnerPoll(c->mu.domain());
  Stat().poll_cq_calls++;  // empty polls too
  DrainShmRings(c, /*polling=*/true);
  // Nothing to take and no error to report: no lock (a CQE pushed meanwhile
  // is seen by the next poll, as with a NIC writing CQEs to memory).
  if (c->ready.load(std::memory_order_acquire) == 0 && !c->overrun_hint.load()) return 0;
  int n = 0;
  // The slots to give back, in a vector this thread keeps (no allocation per
  // poll once it has grown); taken out of the thread_local while in use.
  std::vector<SlotRelease> freed = TakeSpareReleases();
  freed.clear();
  freed.reserve(static_cast<size_t>(std::max(num_entries, 16)));  // once per thread
  {
    internal::DomainLock l(&c->mu);
    int64_t now = 0;  // read only when a CQE carries a delay
    while (n < num_entries && c->count > 0) {
      if (const int64_t at = c->visible_at[c->head]; at != 0) {
        if (now == 0) now = absl::GetCurrentTimeNanos();
        if (at > now) break;  // DelayCompletions: not pollable yet
      }
      wc[n++] = c->ring[c->head];
      if (c->release[c->head].count > 0) freed.push_back(std::move(c->release[c->head]));
      c->release[c->head] = SlotRelease();
      c->head = (c->head + 1) % c->ring.size();
      --c->count;
    }
    c->ready.store(c->count, std::memory_order_relaxed);
    if (n == 0 && c->overrun) {
      KeepSpareReleases(std::move(freed));  // empty: nothing was taken
      return -EIO;
    }
  }
  // Outside SoftCq::mu: nothing here needs it, and QPs are not ours to lock.
  for (const SlotRelease& r : freed) ReleaseSlots(r);
  freed.clear();
  KeepSpareReleases(std::move(freed));
  if (n > 0) Stat().wc_polled += static_cast<uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    if (wc[i].status == IBV_WC_REM_ACCESS_ERR) Stat().rem_access_errors++;
  }
  return n;
}

int ReqNotifyCq(ibv_cq* cq, int solicited_only) {
  if (int err = 0; TakeInjectedFailure(FaultOp::kReqNotifyCq, &err)) return err;
  SoftCq* c = ToSoft(cq);
  OwnerScope owner(c->mu.domain());  // the user's data-path verb
  {
    internal::DomainLock l(&c->mu);
    if (!c->ever_armed) {
      if (int err = 0; TakeInjectedFailure(FaultOp::kArmNewCq, &err)) return err;
      c->ever_armed = true;
    }
    // Arming for any CQE while armed solicited-only widens the arm; the
    // reverse does not narrow it (the pending request stays the wider one).
    c->armed_solicited_only =
        (c->armed ? c->armed_solicited_only : true) && solicited_only != 0;
    c->armed = true;
    c->armed_hint.store(true, std::memory_order_relaxed);
    // CQEs made before the arm but still invisible (DelayCompletions) fire the
    // event when they appear, as a CQE written after the arm does on hardware.
    if (c->count > 0 && cq->channel != nullptr &&
        c->visible_at[c->head] > absl::GetCurrentTimeNanos()) {
      ScheduleDelayedEventLocked(c);
    }
  }
  // The caller may sleep now: the QPs' producers ring doorbells from here on,
  // and what they published before seeing that is drained here (recheck).
  DrainShmRings(c, /*polling=*/false);
  return 0;
}

}  // namespace internal

using internal::SoftCompChannel;
using internal::SoftCq;

ibv_comp_channel* create_comp_channel(ibv_context* context) {
  if (context == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ch = new SoftCompChannel();
  ch->events.reserve(16);  // raising an event then allocates nothing
  ch->ch.context = context;
  ch->ch.refcnt = 0;
  // Semaphore mode: each read takes exactly one event, which matches one
  // get_cq_event call; the user may set O_NONBLOCK on it and poll it.
  ch->ch.fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (ch->ch.fd < 0) {
    int e = errno;
    delete ch;
    errno = e;
    return nullptr;
  }
  return &ch->ch;
}

int destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr) return EINVAL;
  auto* ch = reinterpret_cast<SoftCompChannel*>(channel);
  {
    absl::MutexLock l(&ch->mu);
    if (ch->attached_cqs > 0) return EBUSY;
  }
  ::close(channel->fd);
  delete ch;
  return 0;
}

ibv_cq* create_cq(ibv_context* context, int cqe, void* cq_context,
                  ibv_comp_channel* channel, int /*comp_vector*/) {
  if (context == nullptr || cqe < 1 || cqe > internal::kMaxCqe) {
    errno = EINVAL;
    return nullptr;
  }
  if (int err = 0; internal::TakeInjectedFailure(FaultOp::kCreateCq, &err)) {
    errno = err;
    return nullptr;
  }
  auto* c = new SoftCq();
  c->cq.context = context;
  c->cq.channel = channel;
  c->cq.cq_context = cq_context;
  c->cq.cqe = cqe;
  pthread_mutex_init(&c->cq.mutex, nullptr);
  pthread_cond_init(&c->cq.cond, nullptr);
  {
    internal::DomainLock l(&c->mu);
    c->ring.resize(static_cast<size_t>(cqe));
    c->release.resize(static_cast<size_t>(cqe));
    c->visible_at.resize(static_cast<size_t>(cqe));
  }
  {
    absl::MutexLock l(&internal::LiveCqMutex());
    c->serial = internal::g_next_cq_serial++;
    internal::LiveCqs()[c->serial] = c;
  }
  {
    absl::MutexLock l(&c->watch->mu);
    c->watch->cq = c;
  }
  if (channel != nullptr) {
    auto* ch = reinterpret_cast<SoftCompChannel*>(channel);
    absl::MutexLock l(&ch->mu);
    ch->attached_cqs++;
    channel->refcnt++;
  }
  internal::Stat().live_cqs++;
  return &c->cq;
}

int resize_cq(ibv_cq* cq, int cqe) {
  if (cq == nullptr || cqe < 1 || cqe > internal::kMaxCqe) return EINVAL;
  if (int err = 0; internal::TakeInjectedFailure(FaultOp::kResizeCq, &err)) return err;
  SoftCq* c = internal::ToSoft(cq);
  internal::DomainLock l(&c->mu);
  // As mlx4 / mlx5: the CQEs not yet polled move into the new ring, which
  // must hold them (and a CQ in error stays in error).
  if (static_cast<size_t>(cqe) < c->count) return EINVAL;
  std::vector<ibv_wc> ring(static_cast<size_t>(cqe));
  std::vector<internal::SlotRelease> release(static_cast<size_t>(cqe));
  std::vector<int64_t> visible_at(static_cast<size_t>(cqe));
  for (size_t i = 0; i < c->count; ++i) {
    const size_t from = (c->head + i) % c->ring.size();
    ring[i] = c->ring[from];
    release[i] = std::move(c->release[from]);
    visible_at[i] = c->visible_at[from];
  }
  c->ring = std::move(ring);
  c->release = std::move(release);
  c->visible_at = std::move(visible_at);
  c->head = 0;
  cq->cqe = cqe;
  return 0;
}

int destroy_cq(ibv_cq* cq) {
  if (cq == nullptr) return EINVAL;
  SoftCq* c = internal::ToSoft(cq);
  if (c->qp_refs.load() > 0) return EBUSY;
  // Between start_poll and end_poll of an extended CQ outside a domain.
  if (c->mu.domain() == nullptr) {
    if (!c->ex_mu.TryLock()) return EBUSY;
    c->ex_mu.Unlock();
  }
  {
    absl::MutexLock l(&internal::LiveCqMutex());
    internal::LiveCqs().erase(c->serial);
  }
  {
    absl::MutexLock l(&c->watch->mu);  // a running watchdog finishes first
    c->watch->cq = nullptr;
  }
  // With no QP on it, no CQE and so no IBV_EVENT_CQ_ERR can come: wait until
  // the user acked those it got.
  internal::DrainAsyncEvents(cq);
  if (cq->channel != nullptr) {
    auto* ch = reinterpret_cast<SoftCompChannel*>(cq->channel);
    absl::MutexLock l(&ch->mu);
    // Events not yet taken by get_cq_event would name a dead CQ: drop them.
    // Their eventfd counts stay; get_cq_event skips such empty wakeups.
    ch->events.erase(std::remove(ch->events.begin(), ch->events.end(), cq),
                     ch->events.end());
    ch->attached_cqs--;
    cq->channel->refcnt--;
  }
  {
    absl::MutexLock l(&c->links_mu);  // no QP is attached, so no poller reads these
    delete c->shm_snapshot.exchange(nullptr);
    for (SoftCq::ShmSnapshot* s : c->shm_retired) delete s;
    c->shm_retired.clear();
    c->shm_retired_links.clear();
  }
  if (c->parent_domain != nullptr) c->parent_domain->refs--;
  pthread_cond_destroy(&cq->cond);
  pthread_mutex_destroy(&cq->mutex);
  delete c;
  internal::Stat().live_cqs--;
  return 0;
}

int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (channel == nullptr || cq == nullptr || cq_context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  auto* ch = reinterpret_cast<SoftCompChannel*>(channel);
  for (;;) {
    if (internal::WaitEventFd(channel->fd) != 0) return -1;
    absl::MutexLock l(&ch->mu);
    if (ch->events.empty()) continue;  // the event's CQ was destroyed
    *cq = ch->events.front();
    ch->events.erase(ch->events.begin());
    *cq_context = (*cq)->cq_context;
    return 0;
  }
}

void ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq == nullptr) return;
  // Under the ibv_cq's own mutex and cond, as libibverbs counts acks (its
  // destroy_cq also waits for them; softrdma's does not), not under the
  // provider's lock, which for a CQ in a thread domain a thread other than
  // its owner would enter as a visitor, at the cost of a membarrier.
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

}  // namespace softrdma
