// connection_snapshot.h: every live connection of this process, as /statusz
// shows it, taken on each connection's own loop.
#ifndef RDMARPC_RUNTIME_TRANSPORT_CONNECTION_SNAPSHOT_H_
#define RDMARPC_RUNTIME_TRANSPORT_CONNECTION_SNAPSHOT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "runtime/transport/connection.h"

namespace rdmarpc {
namespace internal {

struct EngineSnapshot {
  std::string engine;  // the loop's name
  // False when the loop did not answer within the timeout (busy in a long
  // handler or stuck): `connections` is then empty.
  bool answered = false;
  std::vector<ConnectionStatus> connections;
  // The loop's shared receive queue (shared_receive_queue.h), when it has
  // one: its buffers (registered, in whole slabs), those posted now, the
  // connections attached, those holding credits beyond their floor, and
  // posted receives no credit stands for; its bytes registered.
  bool srq = false;
  int srq_capacity = 0;
  int srq_posted = 0;
  int srq_attached = 0;
  int srq_borrowers = 0;
  int srq_free_credits = 0;
  size_t srq_registered_bytes = 0;
};

// Asks every live loop for Describe() of each of its connections (a task
// posted to each, run by whichever thread polls it) and waits up to
// `timeout` for all of them. Any thread but a loop's own (it would wait for
// itself); a loop that ends meanwhile shows as not answered.
std::vector<EngineSnapshot> SnapshotConnections(absl::Duration timeout);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_CONNECTION_SNAPSHOT_H_
