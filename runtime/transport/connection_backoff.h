// connection_backoff.h: how long to wait before the next attempt to
// connect to an address whose last attempt failed, as gRPC's connection
// backoff (doc/connection-backoff.md in grpc/grpc): the first wait is
// INITIAL_BACKOFF 1 s, each next one MULTIPLIER 1.6 times longer up to
// MAX_BACKOFF 120 s, each spread by JITTER ±20 %, and a success starts over.
//
// One thread (the slot's loop); no locking.
#ifndef RDMARPC_RUNTIME_TRANSPORT_CONNECTION_BACKOFF_H_
#define RDMARPC_RUNTIME_TRANSPORT_CONNECTION_BACKOFF_H_

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

class ConnectionBackoff {
 public:
  static constexpr absl::Duration kInitial = absl::Seconds(1);
  static constexpr double kMultiplier = 1.6;
  static constexpr double kJitter = 0.2;
  static constexpr absl::Duration kMax = absl::Seconds(120);

  // The wait after one more failed attempt. `unit` in [0, 1) picks where in
  // the ±kJitter band it falls (a uniform random number; tests pass fixed
  // values).
  absl::Duration NextDelay(double unit) {
    const absl::Duration base = current_;
    current_ = std::min(current_ * kMultiplier, kMax);
    const double spread = 1.0 + kJitter * (2.0 * std::clamp(unit, 0.0, 1.0) - 1.0);
    return base * spread;
  }
  // The attempt succeeded: the next failure waits kInitial again.
  void Reset() { current_ = kInitial; }

 private:
  absl::Duration current_ = kInitial;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_CONNECTION_BACKOFF_H_
