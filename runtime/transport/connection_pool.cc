// connection_pool.cc: see connection_pool.h.
#include "runtime/transport/connection_pool.h"

#include "runtime/transport/log_limiter.h"

namespace rdmarpc {
namespace internal {

ConnectionPool::ConnectionPool(sockaddr_in address, std::string name, int size,
                               const std::vector<EventLoop*>& loops, DeviceResources* device,
                               const ConnectionOptions& options)
    : address_(address), name_(std::move(name)), device_(device), options_(options) {
  for (int i = 0; i < size; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->loop = loops[static_cast<size_t>(i) % loops.size()];
    slots_.push_back(std::move(slot));
  }
}

int ConnectionPool::PickSlot() {
  return static_cast<int>(next_.fetch_add(1, std::memory_order_relaxed) % slots_.size());
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
    return c.status();
  }
  s.conn = *c;
  return s.conn;
}

void ConnectionPool::Slot::OnEstablished(Connection* c) {
  if (conn != c || !lost) return;
  lost = false;
  LogConnectionEvent(c->peer(), "reconnected; the last connection ended: ", lost_reason);
}

void ConnectionPool::CloseConnectionsOf(EventLoop* loop, const absl::Status& reason) {
  for (auto& s : slots_) {
    if (s->loop != loop || s->conn == nullptr) continue;
    Connection* c = s->conn;
    s->conn = nullptr;
    c->Shutdown(reason);
  }
}

}  // namespace internal
}  // namespace rdmarpc
