// outlier_detection.h: a channel's outlier detection (ChannelOptions::
// outlier_detection): the rules of gRFC A50 ("xDS Outlier Detection
// Support", after Envoy's outlier detection), Envoy's consecutive-failures
// rule and a latency rule, over the channel's ConnectionPools.
#ifndef RDMARPC_RUNTIME_RPC_OUTLIER_DETECTION_H_
#define RDMARPC_RUNTIME_RPC_OUTLIER_DETECTION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdmarpc/channel.h"
#include "runtime/transport/connection_pool.h"
#include "runtime/transport/event_loop.h"

namespace rdmarpc {
namespace internal {

// OK, or INVALID_ARGUMENT naming the bad field and its value.
absl::Status ValidateOutlierDetection(const OutlierDetectionOptions& o);

class OutlierDetector;
// Any thread: `fn` with every live detector, under the registry's lock (for
// the metrics page).
void ForEachOutlierDetector(const std::function<void(OutlierDetector*)>& fn);

class OutlierDetector {
 public:
  // `pools` lists the channel's current servers (any thread; it may lock).
  OutlierDetector(std::string target, const OutlierDetectionOptions& options,
                  std::function<std::vector<ConnectionPool*>()> pools);
  ~OutlierDetector();  // after the loop that ran Evaluate stopped

  // Once, when the channel's pools are in place (any thread): looks every
  // `interval` on `loop`, and shows in the metrics from now on.
  void Start(EventLoop* loop);
  // Any thread (a call's loop): one call to `pool` ended with `code` after
  // `latency`.
  void Record(ConnectionPool* pool, absl::StatusCode code, absl::Duration latency);
  // One look at the servers' calls since the last (the timer's).
  void Evaluate(absl::Time now);

  // For metrics: each server seen so far.
  struct ServerState {
    uint64_t channel = 0;  // the detector's id: two channels to one target differ
    std::string server;
    bool ejected = false;
    std::map<std::string, uint64_t> ejections;  // by reason
  };
  std::vector<ServerState> Snapshot();
  const std::string& target() const { return target_; }

 private:
  struct State {
    absl::Time ejected_at;
    int multiplier = 0;
    std::map<std::string, uint64_t> ejections;
  };
  void Arm();
  // Under mu_: takes `pool` out of rotation unless max_ejection_percent of
  // `pools` are out already (one may always be).
  void TryEject(ConnectionPool* pool, const std::vector<ConnectionPool*>& pools, const char* reason,
                absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string target_;
  const OutlierDetectionOptions options_;
  const std::function<std::vector<ConnectionPool*>()> pools_;
  EventLoop* loop_ = nullptr;
  uint64_t id_ = 0;  // process-unique, for the metrics' channel label
  absl::Mutex mu_;
  absl::flat_hash_map<ConnectionPool*, State> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_OUTLIER_DETECTION_H_
