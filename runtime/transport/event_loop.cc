// event_loop.cc: the EventLoop (see event_loop.h).
#include "runtime/transport/event_loop.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "runtime/transport/receive_ring.h"
#include "runtime/transport/transport.h"

DEFINE_int64(rdmarpc_spin_us, absl::ToInt64Microseconds(rdmarpc::internal::kDefaultSpin),
             "Microseconds an rdmarpc completion loop (client loop, server worker, or a "
             "caller waiting for its synchronous call) keeps busy-polling its CQ after the "
             "last completion before arming the CQ and sleeping on the completion channel. "
             "While calls are in flight it polls on (up to 2 ms without a completion). "
             "0 = never spin: every wait sleeps on the completion channel. See transport.h "
             "for the measurements behind the default.");

DEFINE_int32(rdmarpc_spin_yield_every,
             static_cast<int32_t>(rdmarpc::internal::kDefaultSpinYieldEvery),
             "Empty busy-poll iterations of an rdmarpc completion loop between two "
             "sched_yield calls while another thread wants the core; the others issue a "
             "CPU pause hint. Yields that find the core idle stretch the interval, up to "
             "256 iterations (spin_pause.h). 1 = yield on every iteration. Values below 1 "
             "count as 1.");

#ifdef NDEBUG
inline constexpr bool kDefaultMutexDeadlockCheck = false;
#else
inline constexpr bool kDefaultMutexDeadlockCheck = true;
#endif
DEFINE_bool(rdmarpc_mutex_deadlock_check, kDefaultMutexDeadlockCheck,
            "Leave absl::Mutex deadlock detection on in this process (Debian's libabsl is "
            "built with it on: a lock-graph update per Lock, ~0.35 us per softrdma round "
            "trip, measured with softrdma_pingpong). false (the default in Release builds "
            "of rdmarpc) calls absl::SetMutexDeadlockDetectionMode(kIgnore) once, when the "
            "first rdmarpc loop (Channel or Server) is made: process-wide, as an absl "
            "built with NDEBUG would be. Debug and sanitizer builds keep it on.");

namespace rdmarpc {
namespace internal {
namespace {

// Applies --rdmarpc_mutex_deadlock_check once per process.
void ApplyMutexDeadlockCheckFlag() {
  static const bool applied = [] {
    if (!FLAGS_rdmarpc_mutex_deadlock_check) {
      absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    }
    return true;
  }();
  (void)applied;
}

// Loops that ForEachLiveLoop visits.
struct LiveLoops {
  absl::Mutex mu;
  std::vector<EventLoop*> loops ABSL_GUARDED_BY(mu);
};
LiveLoops& GetLiveLoops() {
  static LiveLoops* const live = new LiveLoops;  // never destroyed: loops may outlive main
  return *live;
}

absl::Status SetNonBlocking(int fd, absl::string_view what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return ErrnoToStatus(absl::StrCat("fcntl(O_NONBLOCK) on ", what), errno);
  }
  return absl::OkStatus();
}

}  // namespace

thread_local EventLoop* EventLoop::t_current_ = nullptr;

EventLoop::EventLoop(std::string name)
    : name_(std::move(name)),
      spin_(absl::Microseconds(std::max<int64_t>(0, FLAGS_rdmarpc_spin_us))),
      spin_yield_every_(
          static_cast<uint32_t>(std::clamp<int32_t>(FLAGS_rdmarpc_spin_yield_every, 1, 1 << 20))),
      in_flight_spin_(spin_ == absl::ZeroDuration() ? absl::ZeroDuration() : kMaxInFlightSpin),
      spin_policy_(spin_, in_flight_spin_),
      cq_free_(kCqDepth),
      cq_depth_(kCqDepth) {
  ApplyMutexDeadlockCheckFlag();
  RegisterEngineStats(&stats_);
  // Room for the connections of a busy step, so that scheduling one
  // allocates nothing.
  end_of_step_.reserve(64);
  end_of_step_batch_.reserve(64);
  holding_receives_.reserve(64);  // the first connection to hold receives back
}

void EventLoop::ForEachLiveLoop(absl::FunctionRef<void(EventLoop*)> fn) {
  LiveLoops& live = GetLiveLoops();
  absl::MutexLock lock(&live.mu);
  for (EventLoop* loop : live.loops) fn(loop);
}

absl::Status EventLoop::ReserveCqEntries(int n) {
  if (cq_ == nullptr) {
    cq_free_ -= n;  // EnsureCq sizes the CQ for what is reserved by then
    return absl::OkStatus();
  }
  if (n > cq_free_) {
    // Grow the CQ (ibv_resize_cq keeps the CQEs not yet polled): double it,
    // or more when one reservation needs more, up to the device's max_cqe.
    const int64_t used = static_cast<int64_t>(cq_depth_) - cq_free_;
    const int64_t want = std::min<int64_t>(
        std::max<int64_t>(2 * static_cast<int64_t>(cq_depth_), used + n), cq_max_depth_);
    if (want >= used + n) {
      if (int rc = Verbs().resize_cq(cq_.get(), static_cast<int>(want)); rc == 0) {
        const int depth = std::max(cq_.get()->cqe, static_cast<int>(want));
        cq_free_ += depth - cq_depth_;
        cq_depth_ = depth;
        stats_.cq_resizes.Add();
      } else {
        return absl::ResourceExhaustedError(
            absl::StrCat(name_, ": completion queue has room for ", cq_free_, " more entries of ",
                         cq_depth_, "; a connection needs ", n, " and growing it to ", want,
                         " failed: ", ErrnoToStatus("ibv_resize_cq", rc).message()));
      }
    }
  }
  if (n > cq_free_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name_, ": completion queue has room for ", cq_free_, " more entries of ", cq_depth_,
        " (the device's max_cqe is ", cq_max_depth_, "); a connection needs ", n));
  }
  cq_free_ -= n;
  return absl::OkStatus();
}

EventLoop::~EventLoop() {
  Stop();
  UnregisterEngineStats(&stats_);
}

void EventLoop::LeaveLiveLoops() {
  if (!registered_) return;
  LiveLoops& live = GetLiveLoops();
  absl::MutexLock lock(&live.mu);
  live.loops.erase(std::find(live.loops.begin(), live.loops.end(), this));
  registered_ = false;
}

absl::Status EventLoop::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return ErrnoToStatus("epoll_create1", errno);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return ErrnoToStatus("eventfd", errno);
  absl::StatusOr<EventChannelPtr> ch = CreateEventChannel();
  if (!ch.ok()) return ch.status();
  event_channel_ = std::move(*ch);
  if (absl::Status s = SetNonBlocking(event_channel_->fd, "rdma_cm event channel"); !s.ok()) {
    return s;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    return ErrnoToStatus("epoll_ctl(eventfd)", errno);
  }
  rdma_event_channel* channel = event_channel_.get();
  fd_handlers_[channel->fd] = [channel] { DispatchOneCmEvent(channel); };
  ev.data.fd = channel->fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, channel->fd, &ev) != 0) {
    return ErrnoToStatus("epoll_ctl(cm channel)", errno);
  }
  thread_ = std::thread([this] { Loop(); });
  {
    LiveLoops& live = GetLiveLoops();
    absl::MutexLock lock(&live.mu);
    live.loops.push_back(this);
    registered_ = true;
  }
  started_.store(true);
  return absl::OkStatus();
}

void EventLoop::Stop(absl::AnyInvocable<void()> before_exit) {
  // A loop cannot join itself: e.g. the last reference to a Channel
  // dropped inside one of its own call callbacks.
  CHECK(!thread_.joinable() || !InLoopThread())
      << name_ << ": a Channel or Server must not be destroyed on its own loop thread "
      << "(from a call's callback or a handler)";
  // A stopping loop runs no more posted tasks: ForEachLiveLoop must not
  // offer it (a snapshot would wait for it in vain).
  LeaveLiveLoops();
  if (!thread_.joinable()) {
    // Never started (or already stopped): release what Start made.
    if (!stopped_) Teardown();
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    before_exit_ = std::move(before_exit);
  }
  stop_.store(true);
  Wake();
  thread_.join();
}

void EventLoop::Post(TaskQueue::Task* task) {
  tasks_.Push(task);
  if (sleeping_.load()) Wake();
}

void EventLoop::Post(absl::AnyInvocable<void()> task) {
  tasks_.Push(std::move(task));
  // A sleeping loop thread must run it. A leading caller runs it too, and
  // EndLead wakes the loop thread if it is left over (it re-checks the
  // queue after giving the poller back).
  if (sleeping_.load()) Wake();
}

bool EventLoop::TryAcquire(int who) {
  int expected = 0;
  return holder_.compare_exchange_strong(expected, who, std::memory_order_acquire);
}

bool EventLoop::TryLead() {
  if (stop_.load() || !started_.load()) return false;
  if (!TryAcquire(kCallerHolds)) {
    // Another caller leads: follow. The loop thread polls for other calls
    // in flight: follow too (at concurrency > 1 one thread, the loop's,
    // serves everyone; taking over would wake it once per call). Only an
    // loop thread spinning out its idle window is asked to step aside, by
    // one caller at a time (so at most one thread spins on this CQ).
    if (holder_.load() == kCallerHolds || calls_in_flight_.load(std::memory_order_relaxed) > 0) {
      return false;
    }
    int no_one = 0;
    if (!wants_.compare_exchange_strong(no_one, 1)) return false;
    // It looks between two polls; a long user callback may keep it.
    const absl::Time give_up = absl::Now() + absl::Milliseconds(1);
    bool got = false;
    while (!(got = TryAcquire(kCallerHolds))) {
      if (holder_.load() == kCallerHolds || stop_.load() || absl::Now() >= give_up) break;
      std::this_thread::yield();
    }
    wants_.store(0);
    if (!got) return false;
  }
  if (stop_.load()) {  // raced with Stop: leave it to the loop thread
    holder_.store(0);
    if (parked_.load()) Wake();
    return false;
  }
  saved_current_ = t_current_;
  t_current_ = this;
  ++leads_;
  return true;
}

void EventLoop::EndLead() {
  graveyard_.clear();
  // Decided while still holding the poller; tasks are re-checked after
  // releasing it, against a concurrent Post (which wakes only a sleeping
  // loop thread).
  // A timer counts only when it is due before the sleeping loop thread's
  // own wake-up (it sleeps until its earliest timer as it saw it): a client's
  // keepalive timer must not cost every synchronous call an eventfd write and
  // a wake-up of the loop thread.
  const bool timer_needed =
      !timers_.empty() && timers_.begin()->first.first < sleep_until_;
  const bool loop_thread_needed = calls_in_flight_ > 0 || timer_needed || !end_of_step_.empty();
  t_current_ = saved_current_;
  holder_.store(0);
  if (parked_.load() || wants_.load() > 0) {
    Wake();
  } else if (sleeping_.load() && (loop_thread_needed || tasks_.size() > 0)) {
    Wake();
  }
}

bool EventLoop::Step() {
  bool worked = RunTasks();
  if (++empty_steps_ >= kEmptyStepsPerClockRead) ReadClock();
  RunDueTimers();
  RunScheduledEndOfSteps();
  worked |= PollCq() > 0;
  PollFds();
  graveyard_.clear();
  if (worked) ReadClock();
  return worked;
}

void EventLoop::Park() {
  // Dekker pairing with EndLead: we publish parked_ then look at holder_;
  // the leader clears holder_ then looks at parked_. One of us sees the other.
  parked_.store(true);
  if (holder_.load() != 0 && !stop_.load()) {
    pollfd p{wake_fd_, POLLIN, 0};
    // Bounded, so a missed hand-over costs at most this much.
    poll(&p, 1, 10);
    uint64_t v;
    while (read(wake_fd_, &v, sizeof(v)) > 0) {
    }
  }
  parked_.store(false);
}

void EventLoop::AcquireForLoopThread() {
  while (!TryAcquire(kLoopThreadHolds)) Park();
}

void EventLoop::Wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0 && write(wake_fd_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
    PLOG(ERROR) << "eventfd write";
  }
}

EventLoop::TimerId EventLoop::AddTimer(absl::Time when, absl::AnyInvocable<void()> fn,
                                 bool needs_completions) {
  const TimerId id = next_timer_++;
  if (!needs_completions) quiet_timers_.insert(id);
  if (spare_timer_nodes_.empty()) {
    timers_.emplace(std::make_pair(when, id), std::move(fn));
  } else {
    // Reuse a node of a timer that fired or was cancelled: a call's deadline
    // timer costs no allocation in steady state.
    TimerMap::node_type node = std::move(spare_timer_nodes_.back());
    spare_timer_nodes_.pop_back();
    node.key() = std::make_pair(when, id);
    node.mapped() = std::move(fn);
    timers_.insert(std::move(node));
  }
  timer_when_[id] = when;
  return id;
}

void EventLoop::RecycleTimerNode(TimerMap::node_type node) {
  node.mapped() = nullptr;  // drop the callback's captures now
  if (spare_timer_nodes_.size() < kMaxSpareTimerNodes) {
    spare_timer_nodes_.push_back(std::move(node));
  }
}

void EventLoop::CancelTimer(TimerId id) {
  auto it = timer_when_.find(id);
  if (it == timer_when_.end()) return;
  RecycleTimerNode(timers_.extract(std::make_pair(it->second, id)));
  timer_when_.erase(it);
  quiet_timers_.erase(id);
}

absl::StatusOr<SharedReceiveQueue*> EventLoop::EnsureSrq(
    ibv_pd* pd, const SharedReceiveQueue::Options& options) {
  if (srq_ != nullptr) {
    const SharedReceiveQueue::Options& o = srq_->options();
    if (srq_->pd() != pd || o.buffer_bytes != options.buffer_bytes ||
        o.min_credits != options.min_credits || o.max_credits != options.max_credits ||
        o.extra_buffers != options.extra_buffers) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, ": its shared receive queue has buffers of ", o.buffer_bytes, " bytes, ",
          o.min_credits, "..", o.max_credits, " credits per connection and ", o.extra_buffers,
          " shared; asked for ", options.buffer_bytes, ", ", options.min_credits, "..",
          options.max_credits, " and ", options.extra_buffers,
          srq_->pd() != pd ? " on another protection domain" : ""));
    }
    return srq_.get();
  }
  if (!srq_unsupported_.ok()) return srq_unsupported_;
  absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> q =
      SharedReceiveQueue::Create(pd, options, this, &stats_);
  if (absl::IsUnimplemented(q.status())) srq_unsupported_ = q.status();
  if (!q.ok()) return q.status();
  ibv_context* context = pd->context;
  const int fd = context->async_fd;
  if (absl::Status s = SetNonBlocking(fd, "async event fd"); !s.ok()) return s;
  if (absl::Status s = WatchFd(fd, [this, context] { ReadAsyncEvents(context); }); !s.ok()) {
    return s;
  }
  async_fd_ = fd;
  srq_ = std::move(*q);
  return srq_.get();
}

void EventLoop::ReadAsyncEvents(ibv_context* context) {
  // Several loops may watch one device's fd; whichever reads an event
  // hands it on. Acked before handing on: destroying the QP waits for it.
  ibv_async_event ev{};
  while (Verbs().get_async_event(context, &ev) == 0) {
    const ibv_event_type type = ev.event_type;
    const bool qp_error = type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR ||
                          type == IBV_EVENT_QP_ACCESS_ERR ||
                          type == IBV_EVENT_QP_LAST_WQE_REACHED;
    const ibv_qp* qp = qp_error ? ev.element.qp : nullptr;
    const uint32_t qp_num = qp != nullptr ? qp->qp_num : 0;
    VLOG(1) << name_ << ": async event " << ibv_event_type_str(type)
            << (qp != nullptr ? absl::StrCat(" on QP ", qp_num) : std::string());
    Verbs().ack_async_event(&ev);
    if (qp == nullptr) continue;
    ForEachLiveLoop([qp, qp_num](EventLoop* loop) {
      loop->Post([loop, qp, qp_num] {
        auto it = loop->qp_map_.find(qp_num);
        if (it != loop->qp_map_.end()) it->second->OnQpAsyncError(qp);
      });
    });
  }
}

ibv_pd* EventLoop::LoopPd(ibv_pd* pd) {
  if (!thread_domain_tried_) {
    thread_domain_tried_ = true;
    loop_pd_of_ = pd;
    const char* env = std::getenv("RDMARPC_THREAD_DOMAINS");
    if (env != nullptr && std::strcmp(env, "0") == 0) {
      LOG_FIRST_N(INFO, 1) << "rdmarpc: RDMARPC_THREAD_DOMAINS=0: loops make no thread domains";
    } else if (absl::StatusOr<ThreadDomain> d = AllocThreadDomain(pd); d.ok()) {
      thread_domain_ = std::move(*d);
      LOG_FIRST_N(INFO, 1) << "rdmarpc: each loop makes its QPs and CQ in a thread domain of its "
                              "own (RDMARPC_THREAD_DOMAINS=0 turns that off)";
    } else {
      LOG_FIRST_N(INFO, 1) << "rdmarpc: " << name_ << ": no thread domain (" << d.status()
                           << "); the provider locks each work request";
    }
  }
  if (pd != loop_pd_of_ || thread_domain_.parent == nullptr) return pd;
  return thread_domain_.parent.get();
}

absl::StatusOr<ibv_cq*> EventLoop::EnsureCq(ibv_pd* pd) {
  ibv_context* context = pd->context;
  if (cq_ != nullptr) {
    if (cq_->context != context) {
      return absl::UnimplementedError("one loop serves one RDMA device");
    }
    return cq_.get();
  }
  absl::StatusOr<CompChannelPtr> ch = CreateCompChannel(context);
  if (!ch.ok()) return ch.status();
  if (absl::Status s = SetNonBlocking((*ch)->fd, "completion channel"); !s.ok()) return s;
  // Entries reserved before the CQ existed (ReserveCqEntries) must fit.
  const int64_t reserved = static_cast<int64_t>(cq_depth_) - cq_free_;
  int64_t depth = std::max<int64_t>(kCqDepth, reserved);
  int max_depth = kCqDepth;
  ibv_device_attr attr{};
  if (Verbs().query_device(context, &attr) == 0 && attr.max_cqe > 0) {
    if (reserved > attr.max_cqe) {
      return absl::ResourceExhaustedError(
          absl::StrCat(name_, ": ", reserved, " completion queue entries were reserved before its "
                       "CQ was made; the device's max_cqe is ", attr.max_cqe));
    }
    depth = std::min<int64_t>(depth, attr.max_cqe);
    max_depth = std::max<int>(attr.max_cqe, static_cast<int>(depth));
  } else {
    // The device's limit is unknown: grow no further than a device that
    // cannot resize starts.
    max_depth = static_cast<int>(std::max<int64_t>(depth, kCqDepthWithoutResize));
  }
  // In the loop's thread domain where it has one; a device that takes
  // thread domains but not single-threaded CQs gets a plain CQ (the
  // loop's QPs then take its lock, and only its lock, per completion).
  ibv_pd* loop_pd = LoopPd(pd);
  auto make_cq = [&](int64_t cqe) -> absl::StatusOr<CqPtr> {
    if (loop_pd != pd) {
      absl::StatusOr<CqPtr> cq = CreateSingleThreadedCq(loop_pd, static_cast<int>(cqe), ch->get());
      // A device that refuses the parent domain or the flag (EOPNOTSUPP,
      // EINVAL) gets a plain CQ; one out of resources fails the set-up.
      if (cq.ok() || !(absl::IsUnimplemented(cq.status()) ||
                       absl::IsInvalidArgument(cq.status()))) {
        return cq;
      }
    }
    return CreateCq(context, static_cast<int>(cqe), ch->get());
  };
  absl::StatusOr<CqPtr> cq = make_cq(depth);
  if (!cq.ok()) return cq.status();
  if (depth < max_depth) {
    // The loop grows its CQ with ibv_resize_cq; one step now tells whether
    // the device can. One that cannot (EOPNOTSUPP, ENOSYS) gets a CQ of
    // kCqDepthWithoutResize entries at once, which is all it will have.
    const int64_t want = std::min<int64_t>(2 * depth, max_depth);
    const int rc = Verbs().resize_cq(cq->get(), static_cast<int>(want));
    if (rc == 0) {
      depth = std::max<int64_t>((*cq)->cqe, want);
    } else if (rc == EOPNOTSUPP || rc == ENOSYS) {
      const int64_t fixed =
          std::min<int64_t>(std::max<int64_t>(kCqDepthWithoutResize, reserved), max_depth);
      LOG_FIRST_N(WARNING, 1) << "rdmarpc: " << name_ << ": the device cannot resize completion "
                              << "queues (ibv_resize_cq: " << std::strerror(rc) << "); each "
                              << "loop's CQ is made with " << fixed << " entries";
      cq->reset();
      cq = make_cq(fixed);
      if (!cq.ok()) return cq.status();
      depth = fixed;
      max_depth = static_cast<int>(fixed);
    }
    // Any other failure: the loop tries again when it needs more room.
  }
  // Arm and watch the new CQ before the loop adopts it: if either fails the
  // CQ and its channel are freed on return, so the next connection tries
  // afresh instead of getting a CQ nobody would ever wake up for.
  if (int rc = ibv_req_notify_cq(cq->get(), 0); rc != 0) {
    return ErrnoToStatus("ibv_req_notify_cq", rc);
  }
  ibv_comp_channel* comp = ch->get();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = comp->fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, comp->fd, &ev) != 0) {
    return ErrnoToStatus("epoll_ctl(completion channel)", errno);
  }
  // Consumes the event only; the loop re-arms right before it sleeps again
  // (arming here would make every completion while spinning or while a
  // caller leads raise another event).
  fd_handlers_[comp->fd] = [comp] {
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    if (Verbs().get_cq_event(comp, &ev_cq, &ev_ctx) == 0) {
      Verbs().ack_cq_events(ev_cq, 1);
    }
  };
  cq_free_ = static_cast<int>(depth - reserved);
  cq_depth_ = static_cast<int>(depth);
  cq_max_depth_ = max_depth;
  comp_channel_ = std::move(*ch);
  cq_ = std::move(*cq);
  return cq_.get();
}

absl::Status EventLoop::WatchFd(int fd, absl::AnyInvocable<void()> on_readable) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) return ErrnoToStatus("epoll_ctl", errno);
  fd_handlers_[fd] = std::move(on_readable);
  return absl::OkStatus();
}

void EventLoop::UnwatchFd(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  fd_handlers_.erase(fd);
}

LoopClient* EventLoop::Adopt(std::unique_ptr<LoopClient> conn) {
  LoopClient* raw = conn.get();
  conns_[raw] = std::move(conn);
  many_connections_ = conns_.size() > kLeanConnections;
  return raw;
}

void EventLoop::Retire(LoopClient* conn) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  graveyard_.push_back(std::move(it->second));
  conns_.erase(it);
  many_connections_ = conns_.size() > kLeanConnections;
}

bool EventLoop::DispatchOneCmEvent(rdma_event_channel* channel) {
  rdma_cm_event* raw = nullptr;
  if (Verbs().get_cm_event(channel, &raw) != 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) PLOG(ERROR) << "rdma_get_cm_event";
    return false;
  }
  CmEvent ev;
  ev.type = raw->event;
  ev.status = raw->status;
  ev.id = raw->id;
  ev.listen_id = raw->listen_id;
  if (raw->param.conn.private_data != nullptr && raw->param.conn.private_data_len > 0) {
    ev.private_data.assign(static_cast<const char*>(raw->param.conn.private_data),
                           raw->param.conn.private_data_len);
  }
  auto* handler = static_cast<CmEventHandler*>(raw->id != nullptr ? raw->id->context : nullptr);
  // Ack first: rdma_destroy_id waits for every event of its id to be acked,
  // and handlers may destroy ids.
  Verbs().ack_cm_event(raw);
  VLOG(1) << "cm event " << rdma_event_str(ev.type) << " status " << ev.status;
  if (handler != nullptr) handler->OnCmEvent(ev);
  return true;
}

bool EventLoop::RunTasks() {
  // Bounded, so timers and completions are not starved by a flood of posts.
  int ran = 0;
  while (ran < 256 && tasks_.RunOne()) ++ran;
  return ran > 0;
}

void EventLoop::RunDueTimers() {
  // By the loop's clock: a timer fires at most kEmptyStepsPerClockRead
  // empty Steps late.
  while (!timers_.empty() && timers_.begin()->first.first <= now_) {
    auto node = timers_.extract(timers_.begin());
    timer_when_.erase(node.key().second);
    quiet_timers_.erase(node.key().second);
    absl::AnyInvocable<void()> fn = std::move(node.mapped());
    RecycleTimerNode(std::move(node));
    std::move(fn)();
  }
}

int EventLoop::PollCq() {
  if (cq_ == nullptr) return 0;
  ibv_wc wcs[kPollBatch];
  const int n = ibv_poll_cq(cq_.get(), kPollBatch, wcs);
  if (n < 0) {
    LOG(ERROR) << "ibv_poll_cq failed: " << n;
    return 0;
  }
  for (int i = 0; i < n; ++i) {
    // By wr_id, as Connection::OnCompletion does: an error completion's
    // opcode is undefined.
    if (ReceiveRing::IsReceive(wcs[i].wr_id)) {
      stats_.recv_completions.Add();
    } else {
      stats_.send_completions.Add();
    }
    if (wcs[i].status == IBV_WC_WR_FLUSH_ERR) {
      stats_.wc_flushed.Add();
    } else if (wcs[i].status != IBV_WC_SUCCESS) {
      stats_.wc_errors[std::min<int>(wcs[i].status, kNumWcStatus - 1)].Add();
    }
    auto it = qp_map_.find(wcs[i].qp_num);
    if (it == qp_map_.end()) {  // a connection already destroyed
      // Its SRQ receive still holds one of the loop's buffers.
      if (srq_ != nullptr && SharedReceiveQueue::IsReceive(wcs[i].wr_id)) {
        srq_->Orphaned(SharedReceiveQueue::BufferIndex(wcs[i].wr_id));
      }
      continue;
    }
    LoopClient* c = it->second;
    c->OnCompletion(wcs[i]);
    c->ScheduleEndOfStep();
  }
  // The CQ was empty: receives of QPs destroyed before this poll began
  // have all been seen (SharedReceiveQueue::Detach).
  if (srq_ != nullptr && n < kPollBatch) srq_->OnCqDrained();
  RunScheduledEndOfSteps();
  return n;
}

void EventLoop::RunScheduledEndOfSteps() {
  // RunEndOfStep may touch connections again (a response sent from an
  // upcall); loop until quiet. Not re-entered: a nested call (from a
  // callback) leaves the work to the outer loop.
  if (flushing_) return;
  flushing_ = true;
  while (!end_of_step_.empty()) {
    end_of_step_batch_.swap(end_of_step_);  // both keep their capacity: no allocation
    for (LoopClient* c : end_of_step_batch_) {
      if (!conns_.contains(c)) continue;  // retired meanwhile
      c->end_of_step_scheduled_ = false;
      c->RunEndOfStep();
    }
    end_of_step_batch_.clear();
  }
  flushing_ = false;
}

void EventLoop::RequestIdleReposts() {
  // Going to sleep: receives held back for a re-post batch go back now, so
  // the peer gets those credits even if this side stays quiet. The loop's
  // shared receive queue first (its buffers may be a destroyed QP's, noted
  // by no client; starved shares are granted here too), then the clients
  // that consumed receives of their own since the last call.
  if (srq_ != nullptr && srq_->RequestIdleRepost()) {
    if (absl::StatusOr<int> n = srq_->PostPending(); !n.ok()) {
      // The buffers stay pending for the next re-post.
      LOG_EVERY_N(ERROR, 1000) << name_ << ": shared receive queue: " << n.status();
    }
  }
  for (LoopClient* c : holding_receives_) {
    // Retired meanwhile: skipped. (Its address reused by a new client only
    // asks that one for a re-post it may not need.)
    if (!conns_.contains(c)) continue;
    c->holds_receives_ = false;
    if (c->RequestIdleRepost()) c->ScheduleEndOfStep();
  }
  holding_receives_.clear();
  RunScheduledEndOfSteps();
}

int EventLoop::Sleep(absl::Time wake_by) {
  int timeout_ms = -1;
  const absl::Time until =
      timers_.empty() ? wake_by : std::min(wake_by, timers_.begin()->first.first);
  if (until != absl::InfiniteFuture()) {
    const absl::Duration d = until - absl::Now();
    // Capped: a timer weeks away (a long deadline) must not overflow int.
    timeout_ms = d <= absl::ZeroDuration()
                     ? 0
                     : static_cast<int>(std::min<int64_t>(
                           absl::ToInt64Milliseconds(d + absl::Milliseconds(1)), 1 << 30));
  }
  sleep_until_ = until;
  sleeping_.store(true);
  if (tasks_.size() > 0 || stop_.load()) {
    sleeping_.store(false);
    return 1;
  }
  // Asleep, the loop thread does not hold the poller: a caller making a
  // synchronous call takes it and drives the loop without waking us.
  stats_.loop_sleeps.Add();
  holder_.store(0);
  epoll_event events[8];
  const int n = epoll_wait(epoll_fd_, events, 8, timeout_ms);
  sleeping_.store(false);
  AcquireForLoopThread();
  RunFdHandlers(events, n);
  return n > 0 ? n : 0;
}

void EventLoop::RunFdHandlers(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    const int fd = events[i].data.fd;
    if (fd == wake_fd_) {
      // Only the loop thread drains its wake-ups (a leader polling fds
      // must not swallow one meant for the loop thread).
      if (std::this_thread::get_id() == thread_id_) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof(v)) > 0) {
        }
      }
      continue;
    }
    auto it = fd_handlers_.find(fd);
    if (it != fd_handlers_.end()) it->second();
  }
  RunScheduledEndOfSteps();
}

void EventLoop::PollFds() {
  // While spinning, cm events (connection set-up, disconnects) and watched
  // fds are looked at every kFdPollInterval Steps or kFdPollPeriod, so a
  // loop that never sleeps still makes progress on them.
  if (++steps_since_fd_poll_ < kFdPollInterval && now_ - last_fd_poll_ < kFdPollPeriod) return;
  steps_since_fd_poll_ = 0;
  last_fd_poll_ = now_;
  epoll_event events[8];
  const int n = epoll_wait(epoll_fd_, events, 8, 0);
  if (n > 0) RunFdHandlers(events, n);
}

void EventLoop::Loop() {
  thread_id_ = std::this_thread::get_id();
  t_current_ = this;
  AcquireForLoopThread();
  absl::Time last_work = ReadClock();
  // When the present wait for calls in flight began (the last work before
  // it); InfinitePast when there is none this thread may learn from
  // (spin_governor.h).
  absl::Time in_flight_wait_start = absl::InfinitePast();
  // When this loop went to sleep with its CQ unarmed and has done no work
  // since; InfinitePast when it is not in that state.
  absl::Time unarmed_since = absl::InfinitePast();
  bool back_from_leader = false;
  SpinPause idle_pause(spin_yield_every_);
  // Held while this thread spins; given back before it sleeps or steps
  // aside (a leader takes its own).
  SpinSlot slot(&SpinSlots::Process());
  // Work was found at `now`: a wait for calls in flight that was going on
  // ends there and teaches the budget.
  auto end_in_flight_wait = [&](absl::Time now) {
    if (in_flight_wait_start != absl::InfinitePast()) {
      spin_policy_.OnInFlightWait(now - in_flight_wait_start);
    }
    in_flight_wait_start = absl::InfinitePast();
  };
  while (!stop_.load()) {
    const bool worked = Step();
    if (wants_.load() > 0) {
      // A caller wants to drive a synchronous call itself: step aside until
      // it hands the poller back (and do not snatch it back meanwhile).
      slot.Release();
      in_flight_wait_start = absl::InfinitePast();
      holder_.store(0);
      while (wants_.load() > 0 && holder_.load() == 0 && !stop_.load()) {
        std::this_thread::yield();
      }
      AcquireForLoopThread();
      // Back from a leading caller: spin only for calls still in flight. With
      // none, go to sleep at once (the next caller then takes the free poller
      // without asking us to step aside); spinning out the idle window here
      // would compete for the core with that caller and make each of its
      // calls a hand-over (a poll(2) here and an eventfd write in EndLead).
      last_work = calls_in_flight_ > 0 ? ReadClock() : absl::InfinitePast();
      // Nor flush held-back receives on the way (as a leader's EndLead does
      // not): holding fewer than a re-post batch is safe (transport.h), and
      // flushing here would make the re-post batches depend on when the
      // loop thread happened to be woken.
      back_from_leader = calls_in_flight_ == 0;
      continue;
    }
    if (worked || tasks_.size() > 0) {
      unarmed_since = absl::InfinitePast();
      last_work = worked ? now_ : ReadClock();  // a Step that worked read it
      if (worked) {
        end_in_flight_wait(last_work);
      } else {
        in_flight_wait_start = absl::InfinitePast();
      }
      back_from_leader = false;
      continue;
    }
    const bool in_flight = calls_in_flight_ > 0;
    if (in_flight && in_flight_wait_start == absl::InfinitePast() &&
        last_work != absl::InfinitePast()) {
      in_flight_wait_start = last_work;
    }
    const absl::Duration idle = now_ - last_work;  // the loop's clock
    // With calls in flight, spin for the learnt budget (--rdmarpc_spin_us
    // to kMaxInFlightSpin); otherwise for --rdmarpc_spin_us. Only with a
    // spinning slot.
    if (idle < (in_flight ? std::max(spin_, spin_policy_.in_flight_budget()) : spin_)) {
      if (slot.Acquire()) {
        // Spin politely: a software device (softrdma) or the peer may need
        // this core to make the very progress we are waiting for; a yield
        // on every iteration, though, is a syscall per poll (spin_pause.h).
        idle_pause.Pause();
        continue;
      }
      stats_.spins_refused.Add();
    }
    slot.Release();
    if (!back_from_leader) RequestIdleReposts();
    back_from_leader = false;
    // Arming makes softrdma's same-host link ask the peer for a doorbell per
    // message (the "consumer asleep" flag), so a client loop arms only when
    // a completion is expected, not for its keepalive timer alone, or once
    // it has slept unarmed for kUnarmedSleep (set_always_arm).
    const bool expected = always_arm_ || calls_in_flight_ > 0 ||
                          timers_.size() > quiet_timers_.size();
    const bool unarmed_long =
        unarmed_since != absl::InfinitePast() && ReadClock() - unarmed_since >= kUnarmedSleep;
    bool armed = false;
    if (cq_ != nullptr && (expected || unarmed_long)) {
      // Arm, then poll again: a completion that landed after the last poll
      // but before the arm raises no event, and would wait for the next one.
      if (int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
        // Unarmed, the completion channel would never wake us: keep polling
        // rather than sleep through completions.
        LOG_FIRST_N(WARNING, 1) << name_ << ": " << ErrnoToStatus("ibv_req_notify_cq", rc);
        std::this_thread::yield();
        continue;
      }
      if (PollCq() > 0) {
        unarmed_since = absl::InfinitePast();
        last_work = ReadClock();
        end_in_flight_wait(last_work);
        continue;
      }
      armed = true;
      unarmed_since = absl::InfinitePast();
    }
    absl::Time wake_by = absl::InfiniteFuture();
    if (cq_ != nullptr && !armed) {
      if (unarmed_since == absl::InfinitePast()) unarmed_since = ReadClock();
      wake_by = unarmed_since + kUnarmedSleep;
    }
    const uint64_t leads_before = leads_;
    const int events = Sleep(wake_by);
    graveyard_.clear();
    last_work = ReadClock();
    // Woken only by the unarmed period's end: no spin (nothing happened
    // here); the loop arms at once, or sleeps unarmed again if callers led
    // meanwhile.
    if (events == 0 && last_work >= wake_by) last_work = absl::InfinitePast();
    // Callers led meanwhile: the wait that ends next is not all this
    // thread's, and the loop was not idle. Nor does it flush held-back
    // receives when it sleeps again, as after stepping aside for a leader.
    if (leads_ != leads_before) {
      in_flight_wait_start = absl::InfinitePast();
      unarmed_since = absl::InfinitePast();
      back_from_leader = true;
    }
  }
  slot.Release();
  RunTasks();
  RunScheduledEndOfSteps();
  absl::AnyInvocable<void()> before_exit;
  {
    absl::MutexLock lock(&mu_);
    before_exit = std::move(before_exit_);
  }
  if (before_exit) std::move(before_exit)();
  RunTasks();
  RunScheduledEndOfSteps();
  Teardown();
}

void EventLoop::Teardown() {
  stopped_ = true;
  // Destroy connections: each destroys its QP first, so the device stops
  // touching its buffers, then its id and buffers. Tasks posted late (a call
  // started while the channel is being destroyed) still run, so that their
  // callbacks fire (UNAVAILABLE); loop until both are exhausted.
  do {
    while (tasks_.RunOne()) {
    }
    while (!conns_.empty()) {
      LoopClient* c = conns_.begin()->first;
      c->ForceDestroy();
      if (conns_.contains(c)) Retire(c);
    }
    end_of_step_.clear();
    graveyard_.clear();
  } while (tasks_.size() > 0);
  timers_.clear();
  timer_when_.clear();
  quiet_timers_.clear();
  spare_timer_nodes_.clear();
  qp_map_.clear();
  if (async_fd_ >= 0) UnwatchFd(async_fd_);
  async_fd_ = -1;
  srq_.reset();  // every QP attached to it is gone
  if (comp_channel_ != nullptr) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, comp_channel_->fd, nullptr);
  cq_.reset();  // every CQ event was acked as it was read
  thread_domain_.parent.reset();  // after every QP, the SRQ and the CQ made on it
  thread_domain_.td.reset();
  comp_channel_.reset();
  event_channel_.reset();
  fd_handlers_.clear();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  wake_fd_ = epoll_fd_ = -1;
}

}  // namespace internal
}  // namespace rdmarpc
