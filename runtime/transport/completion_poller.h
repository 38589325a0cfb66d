// completion_poller.h: Engine — one thread that owns a completion queue, an
// rdma_cm event channel, timers and the connections assigned to it.
//
// The loop drains posted tasks, fires due timers and polls the CQ; after
// kBusyPoll without work it arms the CQ's completion channel and sleeps in
// epoll on the completion channel, the cm event channel and a wake-up eventfd
// (so an idle engine burns no core).
//
// Threads: Post() from any thread; everything else only on the engine thread.
#ifndef RDMARPC_RUNTIME_TRANSPORT_COMPLETION_POLLER_H_
#define RDMARPC_RUNTIME_TRANSPORT_COMPLETION_POLLER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/transport/task_queue.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

class Connection;

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

class Engine {
 public:
  using TimerId = uint64_t;

  explicit Engine(std::string name);
  ~Engine();  // Stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Creates the event channel and wake-up fd and starts the thread.
  absl::Status Start();
  // Runs `before_exit` (if any) on the engine thread, destroys all its
  // connections (handlers get OnClosed), then joins. Idempotent.
  void Stop(absl::AnyInvocable<void()> before_exit = nullptr);

  // Any thread: runs `task` on the engine thread, in order.
  void Post(absl::AnyInvocable<void()> task);
  bool InEngineThread() const { return std::this_thread::get_id() == thread_id_; }

  // Engine thread only.
  TimerId AddTimer(absl::Time when, absl::AnyInvocable<void()> fn);
  void CancelTimer(TimerId id);
  rdma_event_channel* event_channel() const { return event_channel_.get(); }
  // The engine's CQ, made on first use from `context` (the device rdma_cm chose).
  absl::StatusOr<ibv_cq*> EnsureCq(ibv_context* context);
  // Connections: the engine owns them; Retire defers deletion to the end of
  // the current loop iteration.
  Connection* Adopt(std::unique_ptr<Connection> conn);
  void Retire(Connection* conn);
  // CQ entries are shared by the engine's QPs; a QP may only be made when
  // its send + receive depth still fits, or the CQ could overflow (fatal on
  // a NIC). RESOURCE_EXHAUSTED names the numbers.
  absl::Status ReserveCqEntries(int n);
  void ReleaseCqEntries(int n) { cq_free_ += n; }
  void MapQp(uint32_t qp_num, Connection* conn) { qp_map_[qp_num] = conn; }
  void UnmapQp(uint32_t qp_num) { qp_map_.erase(qp_num); }
  // Asks for conn->AfterPollBatch() (re-post receives, send what is queued,
  // one doorbell) once the current loop step ends.
  void MarkTouched(Connection* conn) { touched_.push_back(conn); }
  // Registers a fd with its own readiness callback (e.g. a listener channel).
  absl::Status WatchFd(int fd, absl::AnyInvocable<void()> on_readable);
  void UnwatchFd(int fd);
  // Reads one cm event from `channel` (non-blocking) and dispatches it to the
  // CmEventHandler in id->context. Returns false when none was ready.
  static bool DispatchOneCmEvent(rdma_event_channel* channel);
  const std::string& name() const { return name_; }

 private:
  void Loop();
  bool RunTasks();
  void RunDueTimers();
  int PollCq();
  void Sleep();
  void Wake();
  void Teardown();
  void FlushTouched();

  const std::string name_;
  std::thread thread_;
  std::thread::id thread_id_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  EventChannelPtr event_channel_;
  CompChannelPtr comp_channel_;
  CqPtr cq_;
  bool stopped_ = false;

  TaskQueue tasks_;  // lock-free: one exchange per Post
  std::atomic<bool> sleeping_{false};
  absl::Mutex mu_;
  std::atomic<bool> stop_{false};
  absl::AnyInvocable<void()> before_exit_ ABSL_GUARDED_BY(mu_);

  // Engine-thread state.
  std::map<std::pair<absl::Time, TimerId>, absl::AnyInvocable<void()>> timers_;
  absl::flat_hash_map<TimerId, absl::Time> timer_when_;
  TimerId next_timer_ = 1;
  int cq_free_;
  int cq_depth_;  // entries of cq_ (kCqDepth until the CQ is made)
  absl::flat_hash_map<Connection*, std::unique_ptr<Connection>> conns_;
  std::vector<std::unique_ptr<Connection>> graveyard_;
  absl::flat_hash_map<uint32_t, Connection*> qp_map_;
  absl::flat_hash_map<int, absl::AnyInvocable<void()>> fd_handlers_;
  std::vector<Connection*> touched_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_COMPLETION_POLLER_H_
