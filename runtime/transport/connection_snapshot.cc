// connection_snapshot.cc: see connection_snapshot.h.
#include "runtime/transport/connection_snapshot.h"

#include <memory>

#include "absl/synchronization/mutex.h"

namespace rdmarpc {
namespace internal {

std::vector<EngineSnapshot> SnapshotConnections(absl::Duration timeout) {
  // Shared with the posted tasks, which may run (or be destroyed unrun)
  // after this returns.
  struct Shared {
    absl::Mutex mu;
    std::vector<EngineSnapshot> engines ABSL_GUARDED_BY(mu);
    int pending ABSL_GUARDED_BY(mu) = 0;
  };
  auto shared = std::make_shared<Shared>();
  EventLoop::ForEachLiveLoop([&](EventLoop* loop) {
    size_t index;
    {
      absl::MutexLock lock(&shared->mu);
      index = shared->engines.size();
      EngineSnapshot e;
      e.engine = loop->name();
      shared->engines.push_back(std::move(e));
      ++shared->pending;
    }
    loop->Post([shared, index, loop] {
      std::vector<ConnectionStatus> connections;
      // Connection is the only LoopClient (event_loop.h).
      loop->ForEachClient([&](LoopClient* client) {
        connections.push_back(static_cast<const Connection*>(client)->Describe());
      });
      absl::MutexLock lock(&shared->mu);
      shared->engines[index].answered = true;
      shared->engines[index].connections = std::move(connections);
      --shared->pending;
    });
  });
  absl::MutexLock lock(&shared->mu);
  auto all_answered = [&shared]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
    return shared->pending == 0;
  };
  shared->mu.AwaitWithTimeout(absl::Condition(&all_answered), timeout);
  return shared->engines;
}

}  // namespace internal
}  // namespace rdmarpc
