// progress_thread.h: softrdma's progress thread and its TCP connections.
//
// One progress thread per process, started the first time a socket or timer
// needs it (processes that never touch softrdma start no thread). It waits in
// epoll on every listening socket and connection, reads frames and dispatches
// them, finishes writes that did not fit the socket buffer, and runs timers
// (RNR retransmits, connect timeouts).
//
// Sockets are non-blocking; a peer that stops reading only grows that
// connection's write queue and never blocks the progress thread. Reads take at
// most kReadBudget bytes from one connection per wakeup, so a 16 MiB transfer
// on one QP does not starve the others.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_PROGRESS_THREAD_H_
#define RDMARPC_RUNTIME_SOFTRDMA_PROGRESS_THREAD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "softrdma/internal.h"
#include "softrdma/wire.h"

namespace softrdma {
namespace internal {

// Something the progress thread waits on.
class Pollable {
 public:
  virtual ~Pollable() = default;
  // Called on the progress thread with the epoll event bits.
  virtual void OnEvents(uint32_t events) = 0;
};

class ProgressThread {
 public:
  // The process's progress thread, started on first use.
  static ProgressThread& Get();

  // Registers `fd` for `events`; the progress thread keeps `p` alive until Unregister.
  uint64_t Register(std::shared_ptr<Pollable> p, int fd, uint32_t events);
  void Modify(uint64_t token, int fd, uint32_t events);
  void Unregister(uint64_t token, int fd);
  // Runs `fn` on the progress thread after `delay`.
  void RunAfter(absl::Duration delay, std::function<void()> fn);
  // Runs `fn(owner)` on the progress thread after `delay`, unless `owner` is
  // gone by then. For timers re-armed as traffic flows (a QP's transport
  // timer, a CQ's poll watchdog): timers of one delay wait in one FIFO lane,
  // which is in deadline order as it is filled, so arming and firing are
  // O(1) and touch no other timer (a heap's sift went through cold entries:
  // 38 % of RunDueTimers at 10,000 connections). The callers use a few
  // delays (a QP's 31 transport timeouts, the watchdog's, the RTU
  // timeout); past kMaxOwnerLanes distinct delays the rest share a heap, as
  // does a timer due before the last of its lane (the wall clock stepped
  // back), so it is not held up behind that one. Allocates nothing once the
  // lanes have grown to the timers pending at once.
  using OwnerTimerFn = void (*)(const std::shared_ptr<void>& owner);
  void RunAfter(absl::Duration delay, std::weak_ptr<void> owner, OwnerTimerFn fn);

 private:
  ProgressThread();
  void Loop();
  void Wake();

  int epfd_ = -1;
  int wake_fd_ = -1;
  absl::Mutex mu_;
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Pollable>> items_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  struct OwnerTimer {
    absl::Time when;
    std::weak_ptr<void> owner;
    OwnerTimerFn fn;
    // std::push_heap keeps the largest first: the earliest is "largest".
    bool operator<(const OwnerTimer& o) const { return when > o.when; }
  };
  // The owner timers of one delay, oldest first: a ring buffer that doubles
  // when full.
  struct OwnerLane {
    absl::Duration delay;
    std::vector<OwnerTimer> ring;
    size_t head = 0;
    size_t count = 0;
    const OwnerTimer& front() const { return ring[head]; }
    const OwnerTimer& back() const { return ring[(head + count - 1) % ring.size()]; }
    void Push(OwnerTimer t);
    OwnerTimer Pop();
  };
  static constexpr size_t kMaxOwnerLanes = 48;
  std::vector<OwnerLane> owner_lanes_ ABSL_GUARDED_BY(mu_);
  std::vector<OwnerTimer> owner_heap_ ABSL_GUARDED_BY(mu_);  // a min-heap by `when`
  // The lane or heap whose first timer is due earliest, with that deadline;
  // false when no owner timer waits.
  bool EarliestOwnerLocked(OwnerLane** lane, absl::Time* when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The earliest deadline of both kinds; InfiniteFuture when none.
  absl::Time NextDeadlineLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs every timer that is due.
  void RunDueTimers();
};

// One RC connection's TCP socket. Owned by its cm id (shared with the QP for
// sending and with the progress thread while registered).
class Conn : public Pollable, public std::enable_shared_from_this<Conn> {
 public:
  // Takes ownership of a non-blocking socket. `connecting`: a non-blocking
  // connect() is in progress; CmOnConnectDone reports its outcome. `owner`:
  // the cm id it belongs to (cm_id()), attached before the progress thread
  // watches the socket, so no event of it finds the Conn without its id.
  static std::shared_ptr<Conn> Create(int fd, bool connecting,
                                      std::weak_ptr<SoftCmId> owner = {});
  ~Conn() override;

  // Queues a whole frame (header included) for sending; thread-safe. Frames
  // go out in the order of Send calls. Dropped silently once the socket broke
  // (the progress thread then reports the loss through CmOnClosed).
  void Send(std::shared_ptr<const std::vector<uint8_t>> frame);
  // Convenience: header plus a copy of `payload`.
  void SendFrame(const FrameHeader& h, const void* payload = nullptr, uint32_t len = 0);

  // Stops all I/O: unregisters from the progress thread and shuts the socket down so
  // the peer sees EOF. Idempotent; the fd closes when the last owner drops it.
  void Close();

  void OnEvents(uint32_t events) override;

  int fd() const { return fd_; }

  // Fault injection (faults.h). Drop: the link dies now — the socket is shut
  // down and frames already read but not yet dispatched are discarded; the
  // loss is reported (CmOnClosed) on the progress thread. Any thread.
  void Drop();
  // Vanish: the peer host crashed, as this end sees it — frames read are
  // discarded, frames sent are dropped, and EOF / reset is not reported.
  void Vanish();
  bool vanished() const { return vanished_.load(); }
  bool drop_requested() const { return drop_requested_.load(); }
  // Bytes moved through the socket either way; the QP transport timer counts
  // them as signs of a live peer (a NIC restarts it on every ACK).
  uint64_t io_progress() const { return io_progress_.load(std::memory_order_relaxed); }

  // Attachments, each read and written under the Conn's own mutex (a leaf:
  // no other lock is taken inside it). The cm id this connection belongs to,
  // and on the passive side before CONNECT_REQ the listener's id; weak, so a
  // frame handler never touches a destroyed id: it locks the id (its
  // SoftCmId::mu) and checks that the id still owns this Conn.
  std::shared_ptr<SoftCmId> cm_id() const {
    absl::MutexLock l(&attach_mu_);
    return id_.lock();
  }
  void set_cm_id(std::weak_ptr<SoftCmId> id) {
    absl::MutexLock l(&attach_mu_);
    id_ = std::move(id);
  }
  std::shared_ptr<SoftCmId> listen_id() const {
    absl::MutexLock l(&attach_mu_);
    return listen_id_.lock();
  }
  void set_listen_id(std::weak_ptr<SoftCmId> id) {
    absl::MutexLock l(&attach_mu_);
    listen_id_ = std::move(id);
  }
  // Where data frames go: the progress thread dispatches data frames with no
  // cm lock (CmDispatchFrame).
  std::shared_ptr<SoftQp> qp() const {
    absl::MutexLock l(&attach_mu_);
    return qp_;
  }
  void set_qp(std::shared_ptr<SoftQp> qp) {
    absl::MutexLock l(&attach_mu_);
    qp_ = std::move(qp);
  }

 private:
  Conn(int fd, bool connecting);
  void HandleReadable();
  void HandleWritable();
  bool TryWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void Lost();

  static constexpr size_t kReadBudget = 4 << 20;

  const int fd_;
  uint64_t token_ = 0;
  std::atomic<bool> closed_{false};
  std::atomic<bool> drop_requested_{false};
  std::atomic<bool> vanished_{false};
  std::atomic<uint64_t> io_progress_{0};
  bool connecting_;  // progress thread only (after Create)
  bool lost_reported_ = false;

  mutable absl::Mutex attach_mu_;
  std::weak_ptr<SoftCmId> id_ ABSL_GUARDED_BY(attach_mu_);
  std::weak_ptr<SoftCmId> listen_id_ ABSL_GUARDED_BY(attach_mu_);
  std::shared_ptr<SoftQp> qp_ ABSL_GUARDED_BY(attach_mu_);

  absl::Mutex write_mu_;
  // Frames up to this size (header included) are written from the stack
  // when the write queue is empty (SendFrame).
  static constexpr size_t kDirectFrameBytes = 256;
  struct Chunk {
    std::shared_ptr<const std::vector<uint8_t>> buf;
    size_t off = 0;
  };
  std::deque<Chunk> wq_ ABSL_GUARDED_BY(write_mu_);
  bool out_armed_ ABSL_GUARDED_BY(write_mu_) = false;
  bool broken_ ABSL_GUARDED_BY(write_mu_) = false;

  // Read state: progress thread only.
  uint8_t hdr_[kHeaderSize];
  size_t hdr_got_ = 0;
  Frame cur_;
  size_t pay_got_ = 0;
};

// A listening TCP socket for an rdma_cm id in rdma_listen. Each accepted
// socket goes to CmOnIncoming, which locks the listening id and checks that it
// still listens.
class Listener : public Pollable {
 public:
  Listener(int fd, std::weak_ptr<SoftCmId> id) : fd_(fd), id_(std::move(id)) {}
  ~Listener() override;
  void Start();
  // Stops accepting; idempotent, any thread.
  void Close();
  void OnEvents(uint32_t events) override;
  int fd() const { return fd_; }

 private:
  const int fd_;
  const std::weak_ptr<SoftCmId> id_;
  uint64_t token_ = 0;
  std::atomic<bool> closed_{false};
  std::weak_ptr<Listener> self_;
  friend std::shared_ptr<Listener> MakeListener(int fd, std::weak_ptr<SoftCmId> id);
};
std::shared_ptr<Listener> MakeListener(int fd, std::weak_ptr<SoftCmId> id);

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_PROGRESS_THREAD_H_
