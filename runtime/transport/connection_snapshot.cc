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
      const SharedReceiveQueue* srq = loop->srq();
      absl::MutexLock lock(&shared->mu);
      EngineSnapshot& e = shared->engines[index];
      e.answered = true;
      e.connections = std::move(connections);
      if (srq != nullptr) {
        e.srq = true;
        e.srq_capacity = srq->capacity();
        e.srq_posted = srq->posted();
        e.srq_attached = srq->attached();
        e.srq_borrowers = srq->borrowers();
        e.srq_free_credits = srq->free_credits();
        e.srq_registered_bytes = srq->registered_bytes();
      }
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
