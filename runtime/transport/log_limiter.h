// log_limiter.h: at most one log line per key (a peer) per period, with a
// count of the lines held back in between.
//
// Connection set-up failures, losses and reconnects are logged at WARNING by
// default (connection.cc, connection_pool.cc); a peer that keeps failing --
// a channel retrying a dead server at every call -- then writes one line a
// second, and the next line it is allowed says how many it stood for.
//
// Usage:
//   LogConnectionEvent(peer, "connection lost: ", reason);
//
// Every line held back for a key is counted into that key's next allowed
// line; the count of lines held back after a key's last allowed line is
// never written, nor is it when the key is forgotten (max_keys) -- and a
// flood of new keys past max_keys writes nothing for them.
//
// Threads: any; Allow takes a mutex (logging is not on the hot path).
#ifndef RDMARPC_RUNTIME_TRANSPORT_LOG_LIMITER_H_
#define RDMARPC_RUNTIME_TRANSPORT_LOG_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

class LogLimiter {
 public:
  // `period`: the least time between two lines of one key. `max_keys`: keys
  // remembered at once; past it, keys idle for a whole period are forgotten
  // (a forgotten key's next line is allowed, its held-back count lost).
  explicit LogLimiter(absl::Duration period = absl::Seconds(1), size_t max_keys = 4096)
      : period_(period), max_keys_(max_keys) {}

  // True when a line for `key` may be written at `now`; then `*held_back` is
  // the number of lines for it refused since its last allowed one (0 for the
  // first). False: the caller drops the line; it is counted.
  bool Allow(absl::string_view key, absl::Time now, uint64_t* held_back);

 private:
  struct Entry {
    absl::Time last = absl::InfinitePast();
    uint64_t held_back = 0;
  };
  const absl::Duration period_;
  const size_t max_keys_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// The process's limiter for connection events, one key per peer name.
LogLimiter& ConnectionLogLimiter();

// "" for 0; else " (N more for this peer suppressed since the last line)".
std::string SuppressedSuffix(uint64_t held_back);

// Writes "rdmarpc: <what><reason>" at WARNING unless ConnectionLogLimiter()
// holds it back for `peer` (steady clock); names the peer when `reason`'s
// message does not.
void LogConnectionEvent(const std::string& peer, absl::string_view what,
                        const absl::Status& reason);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_LOG_LIMITER_H_
