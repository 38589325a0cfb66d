// channel_impl.h: the runtime behind rdmarpc::Channel — engines, the device,
// one ConnectionPool per server address, and client call state.
#ifndef RDMARPC_RUNTIME_RPC_CHANNEL_IMPL_H_
#define RDMARPC_RUNTIME_RPC_CHANNEL_IMPL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_context.h"
#include "runtime/transport/completion_poller.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/connection_pool.h"
#include "runtime/transport/device.h"

namespace rdmarpc {
namespace internal {

// One unary call in flight. Owned by itself once started: deleted right
// after `done` runs. Touched only on the engine thread after Start.
class ClientCall final : public ResponseSink {
 public:
  std::string method;
  std::string payload;  // serialised request, or:
  PooledBuffer registered;  // serialised straight into registered memory
  size_t registered_len = 0;
  absl::Time deadline = absl::InfiniteFuture();
  google::protobuf::MessageLite* response = nullptr;
  ClientContext* context = nullptr;
  absl::AnyInvocable<void(absl::Status) &&> done;

  // Engine-side state.
  Engine* engine = nullptr;
  Connection* conn = nullptr;
  uint32_t handle = 0;
  Engine::TimerId timer = 0;
  std::string peer;

  void OnQueued(uint32_t h) override { handle = h; }
  void OnResponse(absl::StatusCode code, absl::string_view message,
                  absl::string_view payload) override;
  void OnFailure(absl::Status status) override;
  // Runs `done` and deletes this.
  void Finish(absl::Status status);
};

class ChannelImpl {
 public:
  static absl::StatusOr<std::unique_ptr<ChannelImpl>> Create(absl::string_view target,
                                                             const ChannelOptions& options);
  ~ChannelImpl();  // fails calls in flight with UNAVAILABLE, joins engines

  const std::string& target() const { return target_; }
  const ChannelOptions& options() const { return options_; }
  // Registered large buffers (nullptr until the first connection chose the
  // device). Any thread.
  LargeBufferPool* large_pool() const { return device_->large_pool(); }
  // Any thread: sends `call` to the next server round robin.
  void Start(ClientCall* call);
  // True on one of this channel's engine threads, i.e. inside a completion
  // callback of its calls: a blocking call there would wait for the very
  // thread it blocks.
  bool OnEngineThread() const {
    for (const auto& engine : engines_) {
      if (engine->InEngineThread()) return true;
    }
    return false;
  }

 private:
  ChannelImpl(std::string target, const ChannelOptions& options);
  void StartOnEngine(ClientCall* call, ConnectionPool* pool, int slot);

  const std::string target_;
  const ChannelOptions options_;
  std::unique_ptr<DeviceResources> device_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::unique_ptr<ConnectionPool>> pools_;
  std::atomic<uint32_t> next_server_{0};
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_CHANNEL_IMPL_H_
