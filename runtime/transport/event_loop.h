// event_loop.h: EventLoop — a completion queue, an rdma_cm event channel,
// timers and the connections assigned to them, driven by whichever thread
// holds the loop's *poller*: its own thread, or a caller waiting for a
// synchronous call (leader/follower).
//
// The loop drains posted tasks, fires due timers and polls the CQ. It
// busy-polls while calls are in flight (bounded by kMaxInFlightSpin without
// a completion, or the loop thread's learnt budget, never below the idle
// window) and for --rdmarpc_spin_us after the last completion, and only
// while it holds one of the process's spinning slots (spin_governor.h); then it
// arms the CQ, polls once more (a completion that landed between the last
// poll and the arm raises no event), and sleeps in epoll on the completion
// channel, the cm event channel and a wake-up eventfd (an idle loop burns
// no core).
//
// Leader/follower (as in the ACE/TAO Leader/Followers pattern, and in the way
// eRPC and Seastar let the thread that waits drive the queue): a thread making
// a blocking call try-locks the poller (TryLead). Holding it, it *is* the
// loop: it starts its call inline, polls the CQ and dispatches every
// completion it finds, other calls' too, and hands the poller back once its
// own call is done (EndLead), waking the loop thread only when calls remain
// in flight or work is pending. A caller that finds the poller taken by
// another caller, or the loop thread serving other calls in flight, posts
// its call and sleeps (so on 2 cores at most one thread per loop spins on
// its CQ, and at concurrency > 1 the loop thread alone serves everyone);
// one that finds the loop thread merely spinning out its idle window asks
// it to step aside (it checks between polls) and leads.
//
// Threads: Post(), TryLead() from any thread; everything else only while
// holding the poller (InLoopThread() is true), i.e. on the loop thread or
// a leading caller.
#ifndef RDMARPC_RUNTIME_TRANSPORT_EVENT_LOOP_H_
#define RDMARPC_RUNTIME_TRANSPORT_EVENT_LOOP_H_

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/transport/shared_receive_queue.h"
#include "runtime/transport/spin_governor.h"
#include "runtime/transport/spin_pause.h"
#include "runtime/transport/task_queue.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

class EventLoop;

// A copy of one rdma_cm event, taken before the event is acked so that the
// handler may destroy ids freely.
struct CmEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = 0;
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  std::string private_data;
};

// Receives the cm events of ids whose context points at it.
class CmEventHandler {
 public:
  virtual ~CmEventHandler() = default;
  virtual void OnCmEvent(const CmEvent& event) = 0;
};

// LoopClient: all an EventLoop knows of a connection it owns and drives.
// The loop hands each work completion to the client registered for its QP
// number (MapQp), runs the client's end-of-step work once after every step
// in which the client asked for it (ScheduleEndOfStep: re-post receives,
// send what is queued, ring one doorbell), asks it to re-post held-back
// receives when it goes idle, and destroys it when the loop stops. The
// transport's Connection (connection.h) is the one implementation.
//
// No virtual call on the data path (STYLE.md): OnCompletion, RunEndOfStep
// and RequestIdleRepost are plain members that connection.cc defines as
// direct calls into Connection's members of the same name (a tail jump, no
// indirect branch). Teardown (ForceDestroy, the destructor) is the control
// plane and virtual.
//
// Threads: the loop's poller holder only.
class LoopClient {
 public:
  virtual ~LoopClient() = default;
  LoopClient(const LoopClient&) = delete;
  LoopClient& operator=(const LoopClient&) = delete;

  // One work completion of this client's QP (send or receive).
  void OnCompletion(const ibv_wc& wc);
  // The device reported QP `qp` in error (an async event): the client
  // checks it is its own QP (numbers are reused) and fails it.
  void OnQpAsyncError(const ibv_qp* qp);
  // The work asked for with ScheduleEndOfStep, at the end of a loop step.
  void RunEndOfStep();
  // The loop is about to sleep: receives held back for a re-post batch go
  // back at the next RunEndOfStep. Returns true when there were any (the
  // loop then schedules that RunEndOfStep itself). Asked only of clients
  // noted with NoteHeldReceives since the loop last asked.
  bool RequestIdleRepost();
  // The loop stops: fails what is in flight and destroys the connection's
  // device resources at once (QP first); it Retires itself.
  virtual void ForceDestroy() = 0;

  // Asks for RunEndOfStep once the loop's current step ends; several calls
  // in one step ask once.
  inline void ScheduleEndOfStep();

 protected:
  explicit LoopClient(EventLoop* loop) : loop_(loop) {}
  EventLoop* const loop_;

 private:
  friend class EventLoop;
  bool end_of_step_scheduled_ = false;
  bool holds_receives_ = false;  // in the loop's holding_receives_
};

class EventLoop {
 public:
  using TimerId = uint64_t;

  explicit EventLoop(std::string name);
  ~EventLoop();  // Stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Creates the event channel and wake-up fd and starts the thread.
  absl::Status Start();
  // Runs `before_exit` (if any) on the loop thread, destroys all its
  // connections (handlers get OnClosed), then joins. Idempotent.
  void Stop(absl::AnyInvocable<void()> before_exit = nullptr);

  // Any thread: runs `task` on the loop (by whichever thread holds the
  // poller next), in order.
  void Post(absl::AnyInvocable<void()> task);
  // The same with a node the caller keeps (TaskQueue::Task): no allocation.
  void Post(TaskQueue::Task* task);
  // True when this thread drives this loop: the loop's own thread, or a
  // caller between TryLead and EndLead (e.g. inside a completion callback it
  // dispatched).
  bool InLoopThread() const { return t_current_ == this; }

  // --- leader/follower, for synchronous calls (any thread but the loop's) ---
  // Tries to take the poller: at once when it is free; when the loop thread
  // holds it, asks it to step aside and waits for that (it checks between two
  // polls, i.e. within microseconds); never when another caller leads or the
  // loop is stopping. On true this thread drives the loop until EndLead.
  bool TryLead();
  // Leader: one loop step (tasks, due timers, CQ poll, deferred sends).
  // Returns true when it found work. Timers are due by the loop's clock
  // (kEmptyStepsPerClockRead), read at the end of a Step that found work.
  bool Step();
  // Leader: polls until `done()` returns true, or until no completion came
  // for the in-flight spin bound (kMaxInFlightSpin), or at once when it
  // finds no spinning slot free (spin_governor.h) or --rdmarpc_spin_us is 0;
  // then hands the poller back (EndLead). Returns `done()` at that point: false means the caller
  // must sleep until its call completes (the loop thread goes on polling for it).
  template <class Done>
  bool LeadUntil(Done done) {
    absl::Time last = ReadClock();
    SpinPause pause(spin_yield_every_);
    SpinSlot slot(&SpinSlots::Process());
    while (!done()) {
      if (Step()) {
        last = now_;  // read at the end of the Step
        continue;
      }
      if (done()) break;
      if (stop_.load(std::memory_order_relaxed) || now_ - last >= in_flight_spin_) break;
      if (!slot.Acquire()) {
        stats_.spins_refused.Add();
        break;
      }
      pause.Pause();  // yields now and then: a software device may need this core
    }
    slot.Release();
    const bool finished = done();
    EndLead();
    return finished;
  }
  // Leader: gives the poller back; wakes the loop thread when calls are
  // still in flight, tasks or timers are pending, or it waits for the poller.
  void EndLead();
  // Calls started and not finished on this loop's connections (client).
  // Written by the poller holder only; an atomic so TryLead may peek.
  void CallStarted() {
    calls_in_flight_.store(calls_in_flight_.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
  }
  void CallFinished() {
    calls_in_flight_.store(calls_in_flight_.load(std::memory_order_relaxed) - 1,
                           std::memory_order_relaxed);
  }
  int calls_in_flight() const { return calls_in_flight_.load(std::memory_order_relaxed); }
  // By default the loop arms the CQ whenever it sleeps. A client loop
  // (Channel) sets false: it arms only while calls are in flight or timers
  // that expect a completion run (not for a keepalive alone), or once it
  // has slept unarmed for kUnarmedSleep without work. Between calls made
  // back to back by a leading caller, not arming spares the loop thread a
  // wake-up per call — and, on softrdma's same-host link, the peer a
  // doorbell per message (an armed CQ marks its rings' consumer asleep);
  // a client that stays idle arms after kUnarmedSleep, so what a server
  // sends on its own (kGoAway when it drains) wakes it. A late response or
  // a kCredit may wait for the next poll; a lost peer shows as a cm event.
  // Before Start.
  void set_always_arm(bool v) { always_arm_ = v; }
  // How long an idle client loop sleeps with its CQ unarmed before it
  // wakes once to arm it (set_always_arm): what a server's kGoAway waits
  // for at most. While a caller leads synchronous calls the loop thread
  // wakes once per kUnarmedSleep and sleeps on unarmed; calls further apart
  // than that each cost it a wake-up (the armed CQ's event). Our own
  // choice: a tenth of the server's 1 s wait for the answer; measured with
  // ASan, 10 ms made synchronous calls 20 ms apart cost the client 40 %
  // more CPU.
  static constexpr absl::Duration kUnarmedSleep = absl::Milliseconds(100);

  // Poller holder only (the loop thread or a leading caller).
  // `needs_completions` false marks a timer that expects no completion
  // before it fires (a keepalive): a client loop with only such timers
  // and no call in flight sleeps with its CQ unarmed (see set_always_arm).
  TimerId AddTimer(absl::Time when, absl::AnyInvocable<void()> fn,
                   bool needs_completions = true);
  void CancelTimer(TimerId id);
  rdma_event_channel* event_channel() const { return event_channel_.get(); }
  // The PD the loop's QPs and SRQ are made on: a parent domain over `pd`
  // with a thread domain of the loop's own (AllocThreadDomain), since one
  // thread at a time (the poller holder) uses them, so the provider takes no
  // lock per work request; `pd` itself where the device has no thread
  // domains or RDMARPC_THREAD_DOMAINS=0 (logged once). Made on first use;
  // a later call with another pd (one loop serves one device) gets that pd.
  // Poller holder only.
  ibv_pd* LoopPd(ibv_pd* pd);
  // The loop's CQ, made on first use on `pd`'s device (the one rdma_cm chose),
  // in the loop's thread domain when it has one (LoopPd).
  absl::StatusOr<ibv_cq*> EnsureCq(ibv_pd* pd);
  // Connections: the loop owns them; Retire defers deletion to the end of
  // the current loop iteration.
  LoopClient* Adopt(std::unique_ptr<LoopClient> conn);
  void Retire(LoopClient* conn);
  // CQ entries are shared by the loop's QPs; a QP may only be made when
  // its send + receive depth still fits, or the CQ could overflow (fatal on
  // a NIC). When it does not fit the CQ grows (ibv_resize_cq, doubling, up
  // to the device's max_cqe; never shrinks). RESOURCE_EXHAUSTED names the
  // numbers when even max_cqe cannot hold `n` more, or the resize failed:
  // the caller refuses the connection. Before the CQ exists (EnsureCq)
  // every reservation succeeds, and EnsureCq makes the CQ big enough for
  // them. Loop thread only.
  absl::Status ReserveCqEntries(int n);
  void ReleaseCqEntries(int n) { cq_free_ += n; }
  // Every connection the loop owns now (not the retired ones), in no
  // particular order.
  void ForEachClient(absl::FunctionRef<void(LoopClient*)> fn) {
    for (auto& [raw, owned] : conns_) fn(raw);
  }
  // The loop's shared receive queue (shared_receive_queue.h), made on first
  // use on `pd` (the loop's CQ must exist). Every later caller must pass the
  // same pd and options: FAILED_PRECONDITION names the difference. Other
  // codes from SharedReceiveQueue::Create. Destroyed after the loop's
  // connections, before its CQ.
  //
  // A QP on an SRQ that enters the error state flushes no receive (its
  // receives are the SRQ's), so the loop also watches the device's async
  // events: a QP error event (IBV_EVENT_QP_FATAL, _QP_REQ_ERR,
  // _QP_ACCESS_ERR, _QP_LAST_WQE_REACHED) is acked at once and handed to
  // the loop that owns the QP (a task to every live loop; the owner finds
  // it in its QP map), which fails the connection as a flushed receive
  // would (after the grace for a peer's disconnect). A device without SRQs
  // is asked once: its UNIMPLEMENTED is returned to every later call.
  absl::StatusOr<SharedReceiveQueue*> EnsureSrq(ibv_pd* pd,
                                                const SharedReceiveQueue::Options& options);
  SharedReceiveQueue* srq() const { return srq_.get(); }
  void MapQp(uint32_t qp_num, LoopClient* conn) { qp_map_[qp_num] = conn; }
  void UnmapQp(uint32_t qp_num) { qp_map_.erase(qp_num); }
  // Asks for conn->RunEndOfStep() (re-post receives, send what is queued,
  // one doorbell) once the current loop step ends.
  void ScheduleEndOfStep(LoopClient* conn) { end_of_step_.push_back(conn); }
  // `conn` holds back consumed receives for a re-post batch: when the loop
  // next goes idle (RequestIdleReposts) it asks them back
  // (RequestIdleRepost) of the clients noted since it last did, not of
  // every connection.
  inline void NoteHeldReceives(LoopClient* conn);
  // Points at a flag that is true while the loop holds more than
  // kLeanConnections connections: their send queues then signal so as not
  // to grow past their first chunk of send buffers for a call or two in
  // flight (SendQueue::set_lean). Stable for the loop's life. 64 is our own
  // choice: past it, 16 send buffers per connection (128 KiB at the default
  // 8 KiB eager limit) would pass 8 MiB per loop. What lean queues do at
  // 2,000 and 10,000 connections: bench/README.md.
  static constexpr size_t kLeanConnections = 64;
  const bool* many_connections_flag() const { return &many_connections_; }
  // Poller holder only: polls the CQ now and dispatches what it finds (a
  // connection told of its peer's disconnect takes what arrived first).
  int PollCompletionsNow() { return PollCq(); }
  // Registers a fd with its own readiness callback (e.g. a listener channel).
  absl::Status WatchFd(int fd, absl::AnyInvocable<void()> on_readable);
  void UnwatchFd(int fd);
  // Reads one cm event from `channel` (non-blocking) and dispatches it to the
  // CmEventHandler in id->context. Returns false when none was ready.
  static bool DispatchOneCmEvent(rdma_event_channel* channel);
  const std::string& name() const { return name_; }
  // This engine's device counters (engine_stats.h): bumped by the poller
  // holder, read from any thread.
  EngineStats& stats() { return stats_; }

  // Any thread: calls `fn` with every loop started and not yet being
  // destroyed, under a registry lock (so `fn` must not block, and may only
  // Post to the loop: the loop stays alive until the lock is released).
  static void ForEachLiveLoop(absl::FunctionRef<void(EventLoop*)> fn);

 private:
  void Loop();
  // Leaves the registry ForEachLiveLoop walks (Stop, any thread).
  void LeaveLiveLoops();
  bool TryAcquire(int who);
  void AcquireForLoopThread();
  void Park();
  bool RunTasks();
  void RunDueTimers();
  int PollCq();
  void RequestIdleReposts();
  // Reads every pending async event of `context` (non-blocking).
  void ReadAsyncEvents(ibv_context* context);
  void PollFds();
  void RunFdHandlers(const epoll_event* events, int n);
  // Waits in epoll until an fd is ready, the first timer is due or
  // `wake_by`, whichever comes first. Returns the number of fds that were
  // ready (1 when tasks were waiting and it did not sleep; 0 on a timeout).
  int Sleep(absl::Time wake_by);
  void Wake();
  void Teardown();
  void RunScheduledEndOfSteps();

  const std::string name_;
  EngineStats stats_;
  bool registered_ = false;  // in the live-loop registry (Start to Stop)
  std::thread thread_;
  std::thread::id thread_id_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  EventChannelPtr event_channel_;
  CompChannelPtr comp_channel_;
  // LoopPd: the loop's thread domain and the parent domain over `loop_pd_of_`
  // (declared before cq_ and srq_: freed after them).
  ThreadDomain thread_domain_;
  ibv_pd* loop_pd_of_ = nullptr;
  bool thread_domain_tried_ = false;
  CqPtr cq_;
  std::unique_ptr<SharedReceiveQueue> srq_;  // after cq_: destroyed first
  // EnsureSrq found the device has no SRQs (UNIMPLEMENTED): kept, so later
  // connections do not ask the device again.
  absl::Status srq_unsupported_;
  int async_fd_ = -1;  // the device's, watched while srq_ exists
  bool stopped_ = false;

  TaskQueue tasks_;  // lock-free: one exchange per Post
  std::atomic<bool> sleeping_{false};  // loop thread in epoll_wait
  // Poller ownership: 0 free, kLoopThreadHolds, kCallerHolds. A CAS, not a mutex:
  // taken once per synchronous call, never blocked on.
  static constexpr int kLoopThreadHolds = 1;
  static constexpr int kCallerHolds = 2;
  std::atomic<int> holder_{0};
  std::atomic<int> wants_{0};          // 1 while a caller waits in TryLead
  std::atomic<bool> parked_{false};    // loop thread waiting for the poller
  static thread_local EventLoop* t_current_;
  EventLoop* saved_current_ = nullptr;    // leader's previous t_current_
  absl::Duration spin_;                // --rdmarpc_spin_us
  uint32_t spin_yield_every_;          // --rdmarpc_spin_yield_every
  absl::Duration in_flight_spin_;      // kMaxInFlightSpin, 0 when spin_ is 0
  // How long the loop thread spins a wait for calls in flight, learnt from
  // its waits (poller holder only).
  AdaptiveSpin spin_policy_;
  // TryLead successes (poller holder): a loop thread that slept through
  // leaders' calls does not take their waits for its own.
  uint64_t leads_ = 0;
  bool always_arm_ = true;
  // When the loop thread, asleep, wakes on its own: its earliest timer as
  // it went to sleep (written before it releases the poller, read by a
  // leader in EndLead).
  absl::Time sleep_until_ = absl::InfiniteFuture();
  std::atomic<int> calls_in_flight_{0};  // written by the poller holder only
  bool flushing_ = false;
  // Non-blocking looks at the fds (cm events, async events, the completion
  // channel) while spinning: after kFdPollInterval Steps (about 0.1 ms of
  // empty ones) or kFdPollPeriod by the loop's clock (Steps that work take
  // longer), whichever comes first; that is how late a cm event may be seen
  // while the loop spins. Each look is an epoll_wait(2), 0.35 us here; at
  // every 64 Steps a spinning rpc_bench server made 150,000 of them a
  // second (5 % of its time). Our own choice of both bounds.
  static constexpr int kFdPollInterval = 1024;
  static constexpr absl::Duration kFdPollPeriod = absl::Microseconds(200);
  int steps_since_fd_poll_ = 0;
  absl::Time last_fd_poll_ = absl::InfinitePast();
  // The poller holder's clock (ReadClock): what due timers and spin budgets
  // are measured against. Read at the end of every Step that found work and
  // once every kEmptyStepsPerClockRead empty Steps, not on every poll: a
  // clock read (absl::Now, clock_gettime through the vDSO) was 15 % of a
  // spinning client's cycles in the 32 B latency profile, two per empty
  // poll. So timers fire and spins end at most kEmptyStepsPerClockRead empty
  // Steps late: about 2 us of polling at 0.1 us a Step (our own choice of
  // the count), plus any time the thread was descheduled in between.
  static constexpr uint32_t kEmptyStepsPerClockRead = 16;
  uint32_t empty_steps_ = 0;
  absl::Time now_ = absl::InfinitePast();
  absl::Time ReadClock() {
    empty_steps_ = 0;
    now_ = absl::Now();
    return now_;
  }
  absl::Mutex mu_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> started_{false};
  absl::AnyInvocable<void()> before_exit_ ABSL_GUARDED_BY(mu_);

  // Loop-thread state.
  using TimerMap = std::map<std::pair<absl::Time, TimerId>, absl::AnyInvocable<void()>>;
  void RecycleTimerNode(TimerMap::node_type node);
  TimerMap timers_;
  // Nodes of fired/cancelled timers kept for reuse (bounded).
  static constexpr size_t kMaxSpareTimerNodes = 1024;
  std::vector<TimerMap::node_type> spare_timer_nodes_;
  absl::flat_hash_map<TimerId, absl::Time> timer_when_;
  absl::flat_hash_set<TimerId> quiet_timers_;  // needs_completions == false
  TimerId next_timer_ = 1;
  int cq_free_;
  int cq_depth_;  // entries of cq_ (kCqDepth until the CQ is made)
  int cq_max_depth_ = 0;  // the device's max_cqe, once the CQ is made
  absl::flat_hash_map<LoopClient*, std::unique_ptr<LoopClient>> conns_;
  std::vector<std::unique_ptr<LoopClient>> graveyard_;
  absl::flat_hash_map<uint32_t, LoopClient*> qp_map_;
  absl::flat_hash_map<int, absl::AnyInvocable<void()>> fd_handlers_;
  std::vector<LoopClient*> end_of_step_;
  // NoteHeldReceives since the last RequestIdleReposts (each once; keeps
  // its capacity, so noting allocates nothing in steady state).
  std::vector<LoopClient*> holding_receives_;
  bool many_connections_ = false;               // conns_.size() > kLeanConnections
  std::vector<LoopClient*> end_of_step_batch_;  // RunScheduledEndOfSteps's scratch (keeps capacity)
};

inline void EventLoop::NoteHeldReceives(LoopClient* conn) {
  if (!conn->holds_receives_) {
    conn->holds_receives_ = true;
    holding_receives_.push_back(conn);
  }
}

inline void LoopClient::ScheduleEndOfStep() {
  if (!end_of_step_scheduled_) {
    end_of_step_scheduled_ = true;
    loop_->ScheduleEndOfStep(this);
  }
}

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_EVENT_LOOP_H_
