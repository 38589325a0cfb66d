// server_impl.h: the runtime behind rdmarpc::Server — an acceptor engine that
// owns the rdma_cm listener, worker engines that own connections and run
// handlers, and method dispatch.
#ifndef RDMARPC_RUNTIME_RPC_SERVER_IMPL_H_
#define RDMARPC_RUNTIME_RPC_SERVER_IMPL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rdmarpc/server.h"
#include "rdmarpc/service.h"
#include "runtime/transport/completion_poller.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/device.h"

namespace rdmarpc {
namespace internal {

class ServerImpl final : public CmEventHandler {
 public:
  explicit ServerImpl(const ServerOptions& options);
  ~ServerImpl() override;

  absl::Status AddService(Service* service);
  absl::Status Start(absl::string_view listen_address);
  int port() const { return port_; }
  void Shutdown(absl::Duration grace);
  void Wait();

  // Listener events (acceptor engine thread).
  void OnCmEvent(const CmEvent& event) override;

 private:
  // Per worker: its connections and the dispatch upcall.
  struct Worker final : ConnectionHandler {
    ServerImpl* server = nullptr;
    std::unique_ptr<Engine> engine;
    absl::flat_hash_set<Connection*> conns;  // engine thread only
    // Request/response messages kept per method and reused (Clear keeps
    // their buffers), so a small call allocates nothing in steady state.
    // Engine thread only; `busy` while a handler runs (never nested today,
    // but a nested dispatch would then fall back to fresh messages).
    struct Messages {
      std::unique_ptr<google::protobuf::MessageLite> request;
      std::unique_ptr<google::protobuf::MessageLite> response;
      bool busy = false;
    };
    absl::flat_hash_map<const MethodHandler*, Messages> messages;
    void OnRequest(Connection* conn, const IncomingRequest& req) override;
    void OnClosed(Connection* conn, const absl::Status&) override { conns.erase(conn); }
  };
  enum class State { kNew, kRunning, kStopping, kStopped };

  void Dispatch(Worker* worker, Connection* conn, const IncomingRequest& req);
  void OnConnectRequest(const CmEvent& event);
  static void Reject(rdma_cm_id* id, uint32_t reason);
  absl::Status ProbeRegistration();
  // Start: registers the large-buffer pool's size once when RLIMIT_MEMLOCK
  // may be too low for it (with `ring_bytes` of receive ring beside it).
  absl::Status ProbeLargePool(ibv_pd* pd, size_t ring_bytes);

  const ServerOptions options_;
  absl::flat_hash_map<std::string, const MethodHandler*> methods_;
  absl::flat_hash_set<std::string> services_;
  std::unique_ptr<DeviceResources> device_;
  std::unique_ptr<Engine> acceptor_;
  CmIdPtr listen_id_;  // acceptor thread after Start
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint32_t> next_worker_{0};
  std::atomic<bool> accepting_{false};
  std::atomic<int> in_flight_{0};
  int port_ = 0;

  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVER_IMPL_H_
