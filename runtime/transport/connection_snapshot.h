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
};

// Asks every live loop for Describe() of each of its connections (a task
// posted to each, run by whichever thread polls it) and waits up to
// `timeout` for all of them. Any thread but a loop's own (it would wait for
// itself); a loop that ends meanwhile shows as not answered.
std::vector<EngineSnapshot> SnapshotConnections(absl::Duration timeout);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_CONNECTION_SNAPSHOT_H_
