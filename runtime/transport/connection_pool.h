// connection_pool.h: the connections a Channel keeps to one server address.
//
// `size` slots; slot i belongs to loop i % loops and is only touched on
// that loop's thread. A slot's connection is made on the first call that
// picks it and replaced on demand after it fails.
//
// With background reconnects on (a channel to several addresses), a slot
// whose connection failed to set up or was lost is *failing* until a new one
// is established: the channel sends calls to other addresses meanwhile
// (PickSlot, failing()), and the slot reconnects by itself, at once after a
// loss and then after gRPC's connection backoff (connection_backoff.h).
//
// A channel whose addresses come from a resolver also retires the pool of
// an address that left the list (no new calls, no reconnects; each
// connection closes once it has no call in flight) and revives it when the
// address comes back.
#ifndef RDMARPC_RUNTIME_TRANSPORT_CONNECTION_POOL_H_
#define RDMARPC_RUNTIME_TRANSPORT_CONNECTION_POOL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/connection_backoff.h"
#include "runtime/transport/socket_address.h"

namespace rdmarpc {
namespace internal {

class ConnectionPool {
 public:
  // `size` slots; slot i connects on loops[(first_loop + i) % loops.size()],
  // so that a channel's pools to several servers spread their connections
  // over its loops instead of all starting on the first.
  ConnectionPool(SocketAddress address, std::string name, int size,
                 const std::vector<EventLoop*>& loops, DeviceResources* device,
                 const ConnectionOptions& options, int first_loop = 0);

  const std::string& name() const { return name_; }
  int size() const { return static_cast<int>(slots_.size()); }
  // Any thread: picks the next slot round robin, skipping failing slots
  // unless all are.
  int PickSlot();
  // The same among the slots of `loop`; -1 when it has none (the pool has
  // fewer slots than the channel has loops).
  int PickSlotOn(EventLoop* loop);
  // Any thread: every slot is failing (see above); always false without
  // background reconnects.
  bool failing() const { return failing_slots_.load(std::memory_order_relaxed) == size(); }
  // Before any call: failed slots reconnect by themselves and count as
  // failing until they do.
  void EnableBackgroundReconnect() { background_reconnect_ = true; }
  // Before any call: runs (on a slot's loop thread) each time one of its
  // connections fails to set up or is lost. Must not block.
  void SetOnFailure(std::function<void()> on_failure) { on_failure_ = std::move(on_failure); }
  // Any thread: every slot without a connection starts one (on its loop).
  void ConnectInBackground();
  // Any thread: see the top of this file. Retire is idempotent; Revive
  // undoes it and connects in the background.
  void Retire();
  void Revive();
  bool retired() const { return retired_.load(std::memory_order_relaxed); }
  // Calls routed to this pool and not ended (least_request). Any thread.
  void CallStarted() { outstanding_.fetch_add(1, std::memory_order_relaxed); }
  void CallEnded() { outstanding_.fetch_sub(1, std::memory_order_relaxed); }
  int outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  EventLoop* loop_of(int slot) const { return slots_[slot]->loop; }

  // --- outlier detection (runtime/rpc/outlier_detection.h) ---
  // How the calls that ended since the last TakeOutcomes went. Any thread.
  struct Outcomes {
    uint64_t ok = 0;
    uint64_t failed = 0;
    uint64_t latency_ns = 0;  // summed over ok + failed
  };
  // Counts one ended call; returns the failures in a row now (0 after a
  // success).
  int RecordOutcome(bool failed, int64_t latency_ns) {
    (failed ? outcome_failed_ : outcome_ok_).fetch_add(1, std::memory_order_relaxed);
    outcome_latency_ns_.fetch_add(static_cast<uint64_t>(latency_ns), std::memory_order_relaxed);
    if (!failed) {
      consecutive_failures_.store(0, std::memory_order_relaxed);
      return 0;
    }
    return consecutive_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  Outcomes TakeOutcomes() {
    Outcomes o;
    o.ok = outcome_ok_.exchange(0, std::memory_order_relaxed);
    o.failed = outcome_failed_.exchange(0, std::memory_order_relaxed);
    o.latency_ns = outcome_latency_ns_.exchange(0, std::memory_order_relaxed);
    return o;
  }
  void ResetConsecutiveFailures() { consecutive_failures_.store(0, std::memory_order_relaxed); }
  // Taken out of rotation by the channel's outlier detection. Any thread.
  bool ejected() const { return ejected_.load(std::memory_order_relaxed); }
  void set_ejected(bool e) { ejected_.store(e, std::memory_order_relaxed); }
  // Where a balancer may send calls: not failing and not ejected.
  bool available() const { return !failing() && !ejected(); }
  // Loop thread of `slot`: its connection, connecting a new one when there
  // is none or it failed. Status says why a connection could not be started.
  absl::StatusOr<Connection*> Get(int slot);
  // Loop thread of `loop`: closes the connections of its slots; their
  // calls fail with `reason`.
  void CloseConnectionsOf(EventLoop* loop, const absl::Status& reason);

 private:
  struct Slot final : ConnectionHandler {
    ConnectionPool* pool = nullptr;
    int index = 0;  // in pool->slots_
    EventLoop* loop = nullptr;
    Connection* conn = nullptr;  // loop thread only
    // Let go of after a GOAWAY, until they close (CloseConnectionsOf still
    // closes them).
    std::vector<Connection*> draining;
    // Its connection was lost or failed (not shut down): the next one to be
    // established is a reconnect, logged at WARNING (rate-limited per peer;
    // the failures in between are logged by the connections).
    bool lost = false;
    absl::Status lost_reason;
    // Background reconnects (loop thread, but `failing` is read by any).
    std::atomic<bool> failing{false};
    Connection* established = nullptr;  // `conn`, once it was established
    ConnectionBackoff backoff;
    absl::BitGen jitter;
    EventLoop::TimerId reconnect_timer = 0;
    bool closed = false;  // CloseConnectionsOf: no reconnect any more
    // Retired: the check (every kRetireCheck) that closes an idle connection.
    EventLoop::TimerId retire_timer = 0;
    void CloseIfRetiredAndIdle();
    void OnClosed(Connection* c, const absl::Status& reason) override;
    void OnEstablished(Connection* c) override;
    // The server is draining: the slot lets go of the connection (its calls
    // finish there; the server closes it) and connects anew, at once when
    // the pool has no background reconnects (the next call), else after
    // the backoff, counting as failing meanwhile.
    void OnGoAway(Connection* c) override;
    // The connection attempt failed or the connection was lost: failing,
    // and a reconnect after `delay`.
    void Fail(absl::Duration delay);
    void Reconnect();
  };
  const SocketAddress address_;
  const std::string name_;
  DeviceResources* const device_;
  const ConnectionOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<uint32_t> next_{0};
  bool background_reconnect_ = false;
  std::function<void()> on_failure_;
  std::atomic<bool> retired_{false};
  std::atomic<int> outstanding_{0};
  std::atomic<int> failing_slots_{0};
  std::atomic<uint64_t> outcome_ok_{0};
  std::atomic<uint64_t> outcome_failed_{0};
  std::atomic<uint64_t> outcome_latency_ns_{0};
  std::atomic<int> consecutive_failures_{0};
  std::atomic<bool> ejected_{false};
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_CONNECTION_POOL_H_
