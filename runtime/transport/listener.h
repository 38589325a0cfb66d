// listener.h: a server's rdma_cm listener — the listen id on its own
// acceptor loop, the check of each connect request (handshake.h), and the
// hand-off of an accepted id to a worker's loop, where its Connection is
// set up (Connection::Accept) and owned.
//
// Usage (runtime/rpc's ServerImpl):
//   Listener::Options o;
//   o.connection_options = [] { return ConnectionOptions{...}; };
//   Listener listener(device, std::move(o), {{worker_loop, worker}, ...},
//                     [](size_t worker, Connection* c) { ... });
//   absl::Status s = listener.Listen(addr, "0.0.0.0:50051");
//   ...
//   listener.Close();  // rejects what still comes, destroys the listen id
//
// Threads: Listen, port, StopAccepting and Close from any thread other than
// the acceptor loop; OnCmEvent on the acceptor loop; `on_accepted` on the
// target's loop.
#ifndef RDMARPC_RUNTIME_TRANSPORT_LISTENER_H_
#define RDMARPC_RUNTIME_TRANSPORT_LISTENER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/device.h"
#include "runtime/transport/event_loop.h"

namespace rdmarpc {
namespace internal {

class Listener final : public CmEventHandler {
 public:
  // Where accepted connections go: a worker's loop (which owns them) and the
  // handler of their requests. Targets take new connections in turn.
  struct Target {
    EventLoop* loop = nullptr;
    ConnectionHandler* handler = nullptr;
  };
  struct Options {
    // What each accepted connection gets; asked once per connect request.
    absl::AnyInvocable<ConnectionOptions() const> connection_options;
    // The protocol version accepted and announced in rejects; asked once
    // per connect request. Unset: kProtocolVersion.
    absl::AnyInvocable<uint16_t() const> protocol_version;
    // Checks each connect request's connection token (empty when it has
    // none) from `peer` ("ip:port") on the acceptor loop, before anything is
    // created or registered for the connection. OK accepts, and what it
    // stored in `*identity` goes with the connection
    // (Connection::peer_identity); PERMISSION_DENIED rejects with
    // kRejectPermissionDenied, any other error with kRejectUnauthenticated.
    // Unset: every token is accepted. Must not block for long: connect
    // requests wait behind it.
    absl::AnyInvocable<absl::Status(absl::string_view token, absl::string_view peer,
                                    std::shared_ptr<const void>* identity) const>
        check_token;
    int backlog = 128;
    // Registered once at Listen, when the device is known by then, so that
    // a memlock limit shows at start rather than on the first client: one
    // receive ring (recv_depth x recv_buffer_bytes) and, when RLIMIT_MEMLOCK
    // may be below it, the large-buffer pool's size.
    int recv_depth = 64;
    size_t recv_buffer_bytes = 8 * 1024;
    size_t large_buffer_pool_bytes = 0;
  };
  // Runs on target `target`'s loop (an index into `targets`) once a
  // connection was accepted onto it.
  using AcceptedFn = absl::AnyInvocable<void(size_t target, Connection* conn) const>;

  // `device` and the targets' loops must outlive the listener's use of
  // them (Close, and the targets' loops stopped).
  Listener(DeviceResources* device, Options options, std::vector<Target> targets,
           AcceptedFn on_accepted);
  ~Listener() override;  // Close()
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Starts the acceptor loop, binds `addr` (`name` is how messages name it),
  // probes registration, and listens. INVALID_ARGUMENT: the address cannot
  // be bound (e.g. not local); UNAVAILABLE: the acceptor, bind or listen
  // failed; RESOURCE_EXHAUSTED: buffers cannot be registered (the message
  // names the sizes and RLIMIT_MEMLOCK). On error nothing is left running.
  absl::Status Listen(const SocketAddress& addr, absl::string_view name);
  // The port bound (after Listen).
  int port() const { return port_; }
  // From now on every connect request is rejected as "shutting down".
  void StopAccepting() { accepting_.store(false); }
  // StopAccepting, then destroys the listen id on the acceptor loop and
  // stops it. Idempotent.
  void Close();

  // Acceptor loop: connect requests.
  void OnCmEvent(const CmEvent& event) override;

 private:
  uint16_t ProtocolVersion() const;
  void OnConnectRequest(const CmEvent& event);
  void Reject(rdma_cm_id* id, uint32_t reason) const;

  DeviceResources* const device_;
  const Options options_;
  const std::vector<Target> targets_;
  const AcceptedFn on_accepted_;
  std::unique_ptr<EventLoop> acceptor_;
  CmIdPtr listen_id_;  // acceptor loop after Listen
  std::atomic<uint32_t> next_target_{0};
  std::atomic<bool> accepting_{false};
  int port_ = 0;
};

// The memlock probe (Listener::Listen, and whoever registers a ring at start
// on a known device): registers `recv_depth` x `recv_buffer_bytes` on `pd`,
// and `pool_bytes` once when RLIMIT_MEMLOCK is below the two together (an
// unlimited or large limit costs nothing; a process with CAP_IPC_LOCK simply
// passes). RESOURCE_EXHAUSTED names what could not be registered.
absl::Status ProbeRegistration(ibv_pd* pd, int recv_depth, size_t recv_buffer_bytes,
                               size_t pool_bytes);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_LISTENER_H_
