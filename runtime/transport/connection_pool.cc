// connection_pool.cc: see connection_pool.h.
#include "runtime/transport/connection_pool.h"

#include <algorithm>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/transport/log_limiter.h"

namespace rdmarpc {
namespace internal {
namespace {
// How often a retired slot looks whether its connection's calls ended.
constexpr absl::Duration kRetireCheck = absl::Milliseconds(200);
}  // namespace

ConnectionPool::ConnectionPool(SocketAddress address, std::string name, int size,
                               const std::vector<EventLoop*>& loops, DeviceResources* device,
                               const ConnectionOptions& options, int first_loop)
    : address_(address), name_(std::move(name)), device_(device), options_(options) {
  for (int i = 0; i < size; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->pool = this;
    slot->index = i;
    slot->loop = loops[static_cast<size_t>(first_loop + i) % loops.size()];
    slots_.push_back(std::move(slot));
  }
}

int ConnectionPool::PickSlot() {
  const uint32_t start = next_.fetch_add(1, std::memory_order_relaxed);
  const size_t n = slots_.size();
  if (failing_slots_.load(std::memory_order_relaxed) > 0) {
    for (size_t i = 0; i < n; ++i) {
      const size_t slot = (start + i) % n;
      if (!slots_[slot]->failing.load(std::memory_order_relaxed)) return static_cast<int>(slot);
    }
  }
  return static_cast<int>(start % n);
}

int ConnectionPool::PickSlotOn(EventLoop* loop) {
  const uint32_t start = next_.fetch_add(1, std::memory_order_relaxed);
  const size_t n = slots_.size();
  int any = -1;
  for (size_t i = 0; i < n; ++i) {
    const size_t slot = (start + i) % n;
    if (slots_[slot]->loop != loop) continue;
    if (!slots_[slot]->failing.load(std::memory_order_relaxed)) return static_cast<int>(slot);
    if (any < 0) any = static_cast<int>(slot);
  }
  return any;
}

absl::StatusOr<Connection*> ConnectionPool::Get(int slot) {
  Slot& s = *slots_[slot];
  if (s.conn != nullptr && s.conn->usable()) return s.conn;
  absl::StatusOr<Connection*> c =
      Connection::Connect(s.loop, device_, address_, name_, options_, &s);
  if (!c.ok()) {
    // Failed before any rdma_cm event (the connection never existed).
    LogConnectionEvent(name_, "connection set-up failed: ", c.status());
    s.lost = true;
    s.lost_reason = c.status();
    s.Fail(s.backoff.NextDelay(absl::Uniform(s.jitter, 0.0, 1.0)));
    return c.status();
  }
  s.conn = *c;
  return s.conn;
}

void ConnectionPool::Slot::OnEstablished(Connection* c) {
  if (conn != c) return;
  established = c;
  backoff.Reset();
  if (failing.exchange(false)) pool->failing_slots_.fetch_sub(1);
  if (!lost) return;
  lost = false;
  LogConnectionEvent(c->peer(), "reconnected; the last connection ended: ", lost_reason);
}

void ConnectionPool::Slot::OnGoAway(Connection* c) {
  if (conn != c) return;
  conn = nullptr;
  draining.push_back(c);
  established = nullptr;
  lost = true;
  lost_reason = absl::UnavailableError(absl::StrCat(pool->name_, " is shutting down (GOAWAY)"));
  // The server has stopped accepting: wait before trying it again.
  Fail(backoff.NextDelay(absl::Uniform(jitter, 0.0, 1.0)));
}

void ConnectionPool::Slot::OnClosed(Connection* c, const absl::Status& reason) {
  if (auto it = std::find(draining.begin(), draining.end(), c); it != draining.end()) {
    draining.erase(it);
    return;
  }
  if (conn != c) return;
  conn = nullptr;
  lost = true;
  lost_reason = reason;
  const bool was_established = established == c;
  established = nullptr;
  // A lost connection is tried again at once; a failed attempt after the
  // backoff.
  Fail(was_established ? absl::ZeroDuration()
                       : backoff.NextDelay(absl::Uniform(jitter, 0.0, 1.0)));
}

void ConnectionPool::Slot::Fail(absl::Duration delay) {
  if (pool->on_failure_ && !closed) pool->on_failure_();
  if (!pool->background_reconnect_ || closed || pool->retired()) return;
  if (!failing.exchange(true)) pool->failing_slots_.fetch_add(1);
  if (reconnect_timer != 0) return;
  // A timer, not a call from here: this runs inside the connection's Close.
  reconnect_timer = loop->AddTimer(absl::Now() + delay, [this] {
    reconnect_timer = 0;
    Reconnect();
  }, /*needs_completions=*/false);
}

void ConnectionPool::Slot::Reconnect() {
  if (closed || conn != nullptr || pool->retired()) return;  // a call connected meanwhile
  // A failure schedules the next attempt (Get calls Fail).
  pool->Get(index).IgnoreError();
}

void ConnectionPool::ConnectInBackground() {
  for (auto& s : slots_) {
    Slot* slot = s.get();
    slot->loop->Post([slot] {
      if (slot->closed || slot->conn != nullptr || slot->pool->retired()) return;
      slot->pool->Get(slot->index).IgnoreError();  // a failure is retried (Fail)
    });
  }
}

void ConnectionPool::Retire() {
  if (retired_.exchange(true)) return;
  for (auto& s : slots_) {
    Slot* slot = s.get();
    slot->loop->Post([slot] {
      if (slot->retire_timer == 0) slot->CloseIfRetiredAndIdle();  // else its check is due
    });
  }
}

void ConnectionPool::Revive() {
  if (!retired_.exchange(false)) return;
  ConnectInBackground();
}

void ConnectionPool::Slot::CloseIfRetiredAndIdle() {
  retire_timer = 0;
  if (closed || !pool->retired()) return;
  if (reconnect_timer != 0) {
    loop->CancelTimer(reconnect_timer);
    reconnect_timer = 0;
  }
  if (failing.exchange(false)) pool->failing_slots_.fetch_sub(1);
  if (conn == nullptr) return;
  if (conn->calls_in_flight() == 0) {
    Connection* c = conn;
    conn = nullptr;
    established = nullptr;
    lost = false;
    c->Shutdown(absl::UnavailableError(
        absl::StrCat(pool->name_, " left the channel's address list")));
    return;
  }
  retire_timer = loop->AddTimer(absl::Now() + kRetireCheck, [this] { CloseIfRetiredAndIdle(); },
                                /*needs_completions=*/false);
}

void ConnectionPool::CloseConnectionsOf(EventLoop* loop, const absl::Status& reason) {
  for (auto& s : slots_) {
    if (s->loop != loop) continue;
    s->closed = true;
    if (s->reconnect_timer != 0) {
      loop->CancelTimer(s->reconnect_timer);
      s->reconnect_timer = 0;
    }
    if (s->retire_timer != 0) {
      loop->CancelTimer(s->retire_timer);
      s->retire_timer = 0;
    }
    std::vector<Connection*> draining = std::move(s->draining);
    s->draining.clear();
    for (Connection* d : draining) d->Shutdown(reason);
    if (s->conn == nullptr) continue;
    Connection* c = s->conn;
    s->conn = nullptr;
    c->Shutdown(reason);
  }
}

}  // namespace internal
}  // namespace rdmarpc
