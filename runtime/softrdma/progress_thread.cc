// progress_thread.cc: the progress thread, connections and listeners.
#include "softrdma/progress_thread.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "glog/logging.h"

namespace softrdma {
namespace internal {

// ---- event fds ------------------------------------------------------------------

void SignalEventFd(int fd) {
  uint64_t one = 1;
  // An eventfd write only fails on counter overflow (2^64 - 2 pending events).
  ssize_t n;
  do {
    n = ::write(fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
  if (n < 0) PLOG(ERROR) << "softrdma: eventfd write";
}

int WaitEventFd(int fd) {
  uint64_t v;
  for (;;) {
    ssize_t n = ::read(fd, &v, sizeof(v));
    if (n == sizeof(v)) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;  // errno from read: EAGAIN when the user made it non-blocking
  }
}

// ---- progress thread ---------------------------------------------------------

namespace {

// The progress thread of this process. A child made by fork() (without exec) has no
// progress thread, so the atfork child handler forgets the parent's progress thread
// (leaking it on purpose: its state is not ours to tear down) and the child
// starts a fresh one on first use. Objects inherited from the parent do not
// work in the child, as with real RDMA devices after fork.
std::atomic<ProgressThread*> g_progress_thread{nullptr};
ABSL_CONST_INIT absl::Mutex g_progress_thread_mu(absl::kConstInit);

void AtForkPrepare() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The child must not inherit the registries of cm ids and event channels
  // (which its first rdma_cm call takes), the key table or the counter
  // registry locked by a thread it does not have, e.g. one inside a
  // ScopedMrAccess (the key table, then the counters, last: the lock order).
  LockCmRegistriesForFork();
  LockKeyTableForFork();
  LockCountersForFork();  // a thread taking its counter block
}
void AtForkParent() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  UnlockCountersForFork();
  UnlockKeyTableForFork();
  UnlockCmRegistriesForFork();
}
void AtForkChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  UnlockCountersForFork();
  UnlockKeyTableForFork();
  UnlockCmRegistriesForFork();
  g_progress_thread.store(nullptr);
}

}  // namespace

ProgressThread& ProgressThread::Get() {
  ProgressThread* e = g_progress_thread.load(std::memory_order_acquire);
  if (e != nullptr) return *e;
  absl::MutexLock l(&g_progress_thread_mu);
  e = g_progress_thread.load(std::memory_order_acquire);
  if (e == nullptr) {
    static const bool registered = [] {
      ::pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
      return true;
    }();
    (void)registered;
    e = new ProgressThread();
    g_progress_thread.store(e, std::memory_order_release);
  }
  return *e;
}

ProgressThread::ProgressThread() {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  PCHECK(epfd_ >= 0) << "softrdma: epoll_create1";
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  PCHECK(wake_fd_ >= 0) << "softrdma: eventfd";
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0 is the wakeup fd
  PCHECK(::epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev) == 0);
  std::thread([this] { Loop(); }).detach();
}

uint64_t ProgressThread::Register(std::shared_ptr<Pollable> p, int fd, uint32_t events) {
  uint64_t token;
  {
    absl::MutexLock l(&mu_);
    token = next_token_++;
    items_[token] = std::move(p);
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    PLOG(ERROR) << "softrdma: epoll_ctl ADD fd " << fd;
  }
  return token;
}

void ProgressThread::Modify(uint64_t token, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  // ENOENT after Unregister is expected and harmless.
  ::epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void ProgressThread::Unregister(uint64_t token, int fd) {
  ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  std::shared_ptr<Pollable> drop;
  {
    absl::MutexLock l(&mu_);
    auto it = items_.find(token);
    if (it == items_.end()) return;
    drop = std::move(it->second);
    items_.erase(it);
  }
  // `drop` may be the last owner; it dies here, outside mu_.
}

void ProgressThread::RunAfter(absl::Duration delay, std::function<void()> fn) {
  bool wake;
  {
    absl::MutexLock l(&mu_);
    absl::Time when = absl::Now() + delay;
    wake = timers_.empty() || when < timers_.begin()->first;
    timers_.emplace(when, std::move(fn));
  }
  if (wake) Wake();
}

void ProgressThread::OwnerLane::Push(OwnerTimer t) {
  if (count == ring.size()) {
    std::vector<OwnerTimer> bigger;
    bigger.reserve(std::max<size_t>(16, 2 * ring.size()));
    for (size_t i = 0; i < count; ++i) bigger.push_back(std::move(ring[(head + i) % ring.size()]));
    bigger.resize(bigger.capacity());
    ring = std::move(bigger);
    head = 0;
  }
  ring[(head + count) % ring.size()] = std::move(t);
  ++count;
}

ProgressThread::OwnerTimer ProgressThread::OwnerLane::Pop() {
  OwnerTimer t = std::move(ring[head]);
  head = head + 1 == ring.size() ? 0 : head + 1;
  --count;
  return t;
}

void ProgressThread::RunAfter(absl::Duration delay, std::weak_ptr<void> owner, OwnerTimerFn fn) {
  bool wake;
  {
    absl::MutexLock l(&mu_);
    const absl::Time when = absl::Now() + delay;
    wake = when < NextDeadlineLocked();
    OwnerLane* lane = nullptr;
    for (OwnerLane& l : owner_lanes_) {
      if (l.delay == delay) {
        lane = &l;
        break;
      }
    }
    if (lane == nullptr && owner_lanes_.size() < kMaxOwnerLanes) {
      owner_lanes_.push_back(OwnerLane{});
      lane = &owner_lanes_.back();
      lane->delay = delay;
    }
    if (lane != nullptr && (lane->count == 0 || lane->back().when <= when)) {
      lane->Push(OwnerTimer{when, std::move(owner), fn});
    } else {
      owner_heap_.push_back(OwnerTimer{when, std::move(owner), fn});
      std::push_heap(owner_heap_.begin(), owner_heap_.end());
    }
  }
  if (wake) Wake();
}

bool ProgressThread::EarliestOwnerLocked(OwnerLane** lane, absl::Time* when) {
  bool any = false;
  *lane = nullptr;
  if (!owner_heap_.empty()) {
    *when = owner_heap_.front().when;
    any = true;
  }
  for (OwnerLane& l : owner_lanes_) {
    if (l.count == 0 || (any && l.front().when >= *when)) continue;
    *when = l.front().when;
    *lane = &l;
    any = true;
  }
  return any;
}

absl::Time ProgressThread::NextDeadlineLocked() const {
  absl::Time next = absl::InfiniteFuture();
  if (!timers_.empty()) next = timers_.begin()->first;
  if (!owner_heap_.empty()) next = std::min(next, owner_heap_.front().when);
  for (const OwnerLane& l : owner_lanes_) {
    if (l.count != 0) next = std::min(next, l.front().when);
  }
  return next;
}

void ProgressThread::RunDueTimers() {
  // Owner timers are taken in batches, one lock for up to kBatch of them, and
  // their owners locked outside mu_ (each is a cold control block), so the
  // threads that arm timers wait less.
  constexpr size_t kBatch = 32;
  struct Due {
    std::weak_ptr<void> owner;
    OwnerTimerFn fn;
  };
  Due due[kBatch];
  for (;;) {
    std::function<void()> fn;
    size_t n = 0;
    {
      absl::MutexLock l(&mu_);
      const absl::Time now = absl::Now();
      const bool closure_due = !timers_.empty() && timers_.begin()->first <= now;
      const absl::Time closure_when = closure_due ? timers_.begin()->first : absl::InfiniteFuture();
      OwnerLane* lane;
      absl::Time when;
      while (n < kBatch && EarliestOwnerLocked(&lane, &when) && when <= now &&
             (!closure_due || when <= closure_when)) {
        OwnerTimer t;
        if (lane != nullptr) {
          t = lane->Pop();
        } else {
          std::pop_heap(owner_heap_.begin(), owner_heap_.end());
          t = std::move(owner_heap_.back());
          owner_heap_.pop_back();
        }
        due[n].owner = std::move(t.owner);
        due[n].fn = t.fn;
        ++n;
      }
      if (n == 0) {
        if (!closure_due) break;
        fn = std::move(timers_.begin()->second);
        timers_.erase(timers_.begin());
      }
    }
    if (fn) fn();
    for (size_t i = 0; i < n; ++i) {
      std::shared_ptr<void> owner = due[i].owner.lock();
      due[i].owner.reset();
      if (owner != nullptr) due[i].fn(owner);
    }
  }
}

void ProgressThread::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void ProgressThread::Loop() {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  for (;;) {
    int timeout_ms = -1;
    {
      absl::MutexLock l(&mu_);
      const absl::Time next = NextDeadlineLocked();
      if (next != absl::InfiniteFuture()) {
        absl::Duration d = next - absl::Now();
        timeout_ms = d <= absl::ZeroDuration()
                         ? 0
                         : static_cast<int>(absl::ToInt64Milliseconds(d + absl::Microseconds(999)));
      }
    }
    int n = ::epoll_wait(epfd_, events, kMaxEvents, timeout_ms);
    if (n < 0 && errno != EINTR) PLOG(FATAL) << "softrdma: epoll_wait";
    for (int i = 0; i < n; ++i) {
      uint64_t token = events[i].data.u64;
      if (token == 0) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof(v));
        continue;
      }
      std::shared_ptr<Pollable> p;
      {
        absl::MutexLock l(&mu_);
        auto it = items_.find(token);
        if (it != items_.end()) p = it->second;
      }
      if (p) p->OnEvents(events[i].events);
    }
    RunDueTimers();
  }
}

// ---- connections ---------------------------------------------------------------

std::shared_ptr<Conn> Conn::Create(int fd, bool connecting, std::weak_ptr<SoftCmId> owner) {
  std::shared_ptr<Conn> c(new Conn(fd, connecting));
  c->set_cm_id(std::move(owner));  // before the progress thread can see the socket
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  uint32_t events = EPOLLIN | EPOLLRDHUP | (connecting ? uint32_t{EPOLLOUT} : 0u);
  c->token_ = ProgressThread::Get().Register(c, fd, events);
  return c;
}

Conn::Conn(int fd, bool connecting) : fd_(fd), connecting_(connecting) {}

Conn::~Conn() { ::close(fd_); }

void Conn::Close() {
  if (closed_.exchange(true)) return;
  {
    absl::MutexLock l(&write_mu_);
    broken_ = true;
    wq_.clear();
  }
  ::shutdown(fd_, SHUT_RDWR);
  ProgressThread::Get().Unregister(token_, fd_);
}

void Conn::Drop() {
  drop_requested_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

void Conn::Vanish() {
  vanished_ = true;
  absl::MutexLock l(&write_mu_);
  wq_.clear();  // frames not yet on the wire never arrive
}

void Conn::Send(std::shared_ptr<const std::vector<uint8_t>> frame) {
  if (vanished_.load()) return;  // into the void: the peer is gone
  absl::MutexLock l(&write_mu_);
  if (broken_) return;
  wq_.push_back(Chunk{std::move(frame), 0});
  if (connecting_) return;  // the progress thread drains it once connected
  // Write what the socket takes now, even while EPOLLOUT is armed: a caller
  // queueing many frames on the progress thread (a large READ's response
  // pieces) keeps bytes moving instead of queueing them all first.
  if (!TryWriteLocked()) return;
  if (!wq_.empty() && !out_armed_) {
    out_armed_ = true;
    ProgressThread::Get().Modify(token_, fd_, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
  }
}

void Conn::SendFrame(const FrameHeader& h, const void* payload, uint32_t len) {
  if (kHeaderSize + len <= kDirectFrameBytes && !vanished_.load()) {
    // A small frame (a doorbell, an ACK, a control frame) goes straight to
    // the socket when nothing waits before it: no buffer to allocate.
    uint8_t bytes[kDirectFrameBytes];
    FrameHeader hh = h;
    hh.length = len;
    EncodeHeader(hh, bytes);
    if (len > 0) std::memcpy(bytes + kHeaderSize, payload, len);
    const size_t total = kHeaderSize + len;
    absl::MutexLock l(&write_mu_);
    if (broken_) return;
    if (wq_.empty() && !connecting_) {
      size_t off = 0;
      while (off < total) {
        const ssize_t n = ::send(fd_, bytes + off, total - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          off += static_cast<size_t>(n);
          io_progress_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          broken_ = true;  // the read side reports the loss
          return;
        }
        break;  // the socket is full: queue the rest
      }
      if (off == total) return;
      wq_.push_back(Chunk{std::make_shared<const std::vector<uint8_t>>(bytes, bytes + total), off});
    } else {
      wq_.push_back(Chunk{std::make_shared<const std::vector<uint8_t>>(bytes, bytes + total), 0});
      if (connecting_) return;
    }
    if (!out_armed_) {
      out_armed_ = true;
      ProgressThread::Get().Modify(token_, fd_, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
    }
    return;
  }
  auto buf = NewFrame(h, len);
  if (len > 0) std::memcpy(buf->data() + kHeaderSize, payload, len);
  Send(std::move(buf));
}

// Writes queued bytes until the socket is full. False when the socket broke.
bool Conn::TryWriteLocked() {
  while (!wq_.empty()) {
    Chunk& c = wq_.front();
    const size_t left = c.buf->size() - c.off;
    ssize_t n = ::send(fd_, c.buf->data() + c.off, left, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      broken_ = true;  // EPIPE / ECONNRESET: the read side reports the loss
      wq_.clear();
      return false;
    }
    c.off += static_cast<size_t>(n);
    io_progress_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    if (c.off == c.buf->size()) wq_.pop_front();
  }
  return true;
}

void Conn::HandleWritable() {
  absl::MutexLock l(&write_mu_);
  if (!TryWriteLocked() || wq_.empty()) {
    if (out_armed_) {
      out_armed_ = false;
      ProgressThread::Get().Modify(token_, fd_, EPOLLIN | EPOLLRDHUP);
    }
  } else if (!out_armed_) {
    out_armed_ = true;
    ProgressThread::Get().Modify(token_, fd_, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
  }
}

void Conn::OnEvents(uint32_t events) {
  if (closed_.load()) return;
  // Keep ourselves alive while the handlers below may drop other owners.
  std::shared_ptr<Conn> hold = shared_from_this();
  if (connecting_) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0 && !(events & EPOLLOUT)) err = ECONNRESET;
    {
      absl::MutexLock l(&write_mu_);
      connecting_ = false;
      // EPOLLOUT is still registered from the connect; HandleWritable below
      // drops it once the queue is empty.
      out_armed_ = true;
    }
    CmOnConnectDone(this, err);
    if (err != 0 || closed_.load()) return;
    HandleWritable();  // anything queued while connecting
    return;
  }
  if (events & EPOLLOUT) HandleWritable();
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) HandleReadable();
}

void Conn::Lost() {
  if (vanished_.load()) {  // a vanished peer's FIN is not noticed
    if (!closed_.exchange(true)) ProgressThread::Get().Unregister(token_, fd_);
    return;
  }
  if (lost_reported_) return;
  lost_reported_ = true;
  {
    absl::MutexLock l(&write_mu_);
    broken_ = true;
    wq_.clear();
  }
  CmOnClosed(this);
  Close();
}

namespace {
// The staging buffer of Conn::HandleReadable, in bytes.
constexpr size_t kStageBytes = 64 << 10;
// One per thread, not one per Conn: only the progress thread reads sockets,
// and HandleReadable never runs inside another's frame dispatch. A buffer
// per Conn was 64 KiB of every connection's resident memory (heaptrack of
// a server holding 1,000 idle connections), a third of it.
uint8_t* ReadStage() {
  thread_local const std::unique_ptr<uint8_t[]> stage(new uint8_t[kStageBytes]);
  return stage.get();
}
}  // namespace

void Conn::HandleReadable() {
  uint8_t* const stage = ReadStage();
  if (vanished_.load()) {
    // The peer "crashed": whatever arrives is lost, and its FIN or reset goes
    // unnoticed. Once the socket ends, stop watching it (it would stay
    // readable); the fd closes with the last owner.
    for (;;) {
      ssize_t n = ::recv(fd_, stage, kStageBytes, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (!closed_.exchange(true)) ProgressThread::Get().Unregister(token_, fd_);
      return;
    }
  }
  size_t budget = kReadBudget;
  while (budget > 0 && !closed_.load()) {
    if (drop_requested_.load()) return Lost();
    // A large payload is read straight into its buffer; everything else goes
    // through the staging buffer so small frames cost one recv each batch.
    if (hdr_got_ == kHeaderSize && cur_.h.length - pay_got_ >= kStageBytes) {
      ssize_t n = ::recv(fd_, cur_.payload.get() + pay_got_, cur_.h.length - pay_got_,
                         MSG_DONTWAIT);
      if (n == 0) return Lost();
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return Lost();
      }
      pay_got_ += static_cast<size_t>(n);
      io_progress_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      budget -= std::min(budget, static_cast<size_t>(n));
    } else {
      ssize_t n = ::recv(fd_, stage, kStageBytes, MSG_DONTWAIT);
      if (n == 0) return Lost();
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return Lost();
      }
      io_progress_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      budget -= std::min(budget, static_cast<size_t>(n));
      size_t pos = 0;
      const size_t end = static_cast<size_t>(n);
      while (pos < end || (hdr_got_ == kHeaderSize && pay_got_ == cur_.h.length)) {
        if (hdr_got_ < kHeaderSize) {
          size_t take = std::min(kHeaderSize - hdr_got_, end - pos);
          std::memcpy(hdr_ + hdr_got_, stage + pos, take);
          hdr_got_ += take;
          pos += take;
          if (hdr_got_ < kHeaderSize) break;
          cur_.h = DecodeHeader(hdr_);
          if (cur_.h.length > kMaxFramePayload) {
            LOG(ERROR) << "softrdma: frame payload " << cur_.h.length
                       << " bytes exceeds limit; dropping connection";
            return Lost();
          }
          cur_.payload.reset(cur_.h.length ? new uint8_t[cur_.h.length] : nullptr);
          pay_got_ = 0;
        }
        if (pay_got_ < cur_.h.length) {
          size_t take = std::min<size_t>(cur_.h.length - pay_got_, end - pos);
          std::memcpy(cur_.payload.get() + pay_got_, stage + pos, take);
          pay_got_ += take;
          pos += take;
          if (pay_got_ < cur_.h.length) break;
        }
        // A whole frame.
        Frame f = std::move(cur_);
        cur_ = Frame();
        hdr_got_ = 0;
        pay_got_ = 0;
        if (vanished_.load()) return;  // Vanish() by the frame before
        CmDispatchFrame(this, f);
        if (drop_requested_.load()) return Lost();  // DropAfterWrs fired
        if (closed_.load()) return;
      }
    }
    if (hdr_got_ == kHeaderSize && pay_got_ == cur_.h.length && cur_.h.length > 0) {
      Frame f = std::move(cur_);
      cur_ = Frame();
      hdr_got_ = 0;
      pay_got_ = 0;
      if (vanished_.load()) return;
      CmDispatchFrame(this, f);
      if (drop_requested_.load()) return Lost();
    }
  }
}

// ---- listeners -------------------------------------------------------------------

std::shared_ptr<Listener> MakeListener(int fd, std::weak_ptr<SoftCmId> id) {
  auto l = std::make_shared<Listener>(fd, std::move(id));
  l->self_ = l;
  return l;
}

Listener::~Listener() { ::close(fd_); }

void Listener::Start() {
  token_ = ProgressThread::Get().Register(self_.lock(), fd_, EPOLLIN);
}

void Listener::Close() {
  if (closed_.exchange(true)) return;
  ProgressThread::Get().Unregister(token_, fd_);
}

void Listener::OnEvents(uint32_t) {
  for (;;) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        PLOG(WARNING) << "softrdma: accept";
      }
      return;
    }
    if (closed_.load()) {
      ::close(fd);
      return;
    }
    CmOnIncoming(id_, Conn::Create(fd, /*connecting=*/false));
  }
}

}  // namespace internal
}  // namespace softrdma
