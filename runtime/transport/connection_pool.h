// connection_pool.h: the connections a Channel keeps to one server address.
//
// `size` slots; slot i belongs to loop i % loops and is only touched on
// that loop's thread. A slot's connection is made on the first call that
// picks it and replaced on demand after it fails.
#ifndef RDMARPC_RUNTIME_TRANSPORT_CONNECTION_POOL_H_
#define RDMARPC_RUNTIME_TRANSPORT_CONNECTION_POOL_H_

#include <netinet/in.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

class ConnectionPool {
 public:
  ConnectionPool(sockaddr_in address, std::string name, int size,
                 const std::vector<EventLoop*>& loops, DeviceResources* device,
                 const ConnectionOptions& options);

  const std::string& name() const { return name_; }
  int size() const { return static_cast<int>(slots_.size()); }
  // Any thread: picks the next slot round robin.
  int PickSlot();
  EventLoop* loop_of(int slot) const { return slots_[slot]->loop; }
  // Loop thread of `slot`: its connection, connecting a new one when there
  // is none or it failed. Status says why a connection could not be started.
  absl::StatusOr<Connection*> Get(int slot);
  // Loop thread of `loop`: closes the connections of its slots; their
  // calls fail with `reason`.
  void CloseConnectionsOf(EventLoop* loop, const absl::Status& reason);

 private:
  struct Slot final : ConnectionHandler {
    EventLoop* loop = nullptr;
    Connection* conn = nullptr;  // loop thread only
    // Its connection was lost or failed (not shut down): the next one to be
    // established is a reconnect, logged at WARNING (rate-limited per peer;
    // the failures in between are logged by the connections).
    bool lost = false;
    absl::Status lost_reason;
    void OnClosed(Connection* c, const absl::Status& reason) override {
      if (conn != c) return;
      conn = nullptr;
      lost = true;
      lost_reason = reason;
    }
    void OnEstablished(Connection* c) override;
  };
  const sockaddr_in address_;
  const std::string name_;
  DeviceResources* const device_;
  const ConnectionOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<uint32_t> next_{0};
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_CONNECTION_POOL_H_
