// metrics.h: the call-metrics registry behind rdmarpc/metrics.h.
//
// One MethodMetrics per (side, method), made on first use and kept for the
// life of the process. Its counters are sharded by thread (kShards
// cache-line-sized shards; a thread keeps the shard it first got), so
// threads counting calls of one method rarely write the same line; a read
// sums the shards.
#ifndef RDMARPC_RUNTIME_RPC_METRICS_H_
#define RDMARPC_RUNTIME_RPC_METRICS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdmarpc/impl/stream_call.h"
#include "rdmarpc/interceptor.h"

namespace rdmarpc {
namespace internal {

enum class MetricsSide { kServer, kClient };

// Upper bounds of the handling-time histogram, in ns, then +Inf.
inline constexpr int kNumLatencyBuckets = 19;
inline constexpr int kNumStatusCodes = 17;  // absl::StatusCode 0..16

class MethodMetrics {
 public:
  MethodMetrics(MetricsSide side, std::string service, std::string method,
                experimental::RpcType type)
      : side_(side), service_(std::move(service)), method_(std::move(method)), type_(type) {}

  // Any thread.
  void Started() { Mine().started.fetch_add(1, std::memory_order_relaxed); }
  void MessageReceived() { Mine().msg_received.fetch_add(1, std::memory_order_relaxed); }
  void MessageSent() { Mine().msg_sent.fetch_add(1, std::memory_order_relaxed); }
  // The call ended with `code` after `elapsed`.
  void Handled(int code, absl::Duration elapsed);

  struct Totals {
    uint64_t started = 0;
    uint64_t msg_received = 0;
    uint64_t msg_sent = 0;
    uint64_t handled[kNumStatusCodes] = {};
    uint64_t buckets[kNumLatencyBuckets + 1] = {};  // per bucket, not cumulative; last: +Inf
    uint64_t sum_ns = 0;
  };
  Totals Read() const;

  MetricsSide side() const { return side_; }
  const std::string& service() const { return service_; }
  const std::string& method() const { return method_; }
  experimental::RpcType type() const { return type_; }

 private:
  static constexpr int kShards = 8;
  struct alignas(64) Shard {
    std::atomic<uint64_t> started{0};
    std::atomic<uint64_t> msg_received{0};
    std::atomic<uint64_t> msg_sent{0};
    std::atomic<uint64_t> handled[kNumStatusCodes] = {};
    std::atomic<uint64_t> buckets[kNumLatencyBuckets + 1] = {};
    std::atomic<uint64_t> sum_ns{0};
  };
  Shard& Mine();

  const MetricsSide side_;
  const std::string service_;
  const std::string method_;
  const experimental::RpcType type_;
  Shard shards_[kShards];
};

// The metrics of `full_name` ("/package.Service/Method") on `side`, made
// the first time (with `type`; later calls keep the first type). Never
// nullptr; lives until the process exits. Any thread.
MethodMetrics* GetMethodMetrics(MetricsSide side, absl::string_view full_name,
                                experimental::RpcType type);

// Makes a server method's series appear (at 0) before its first call.
void InitializeServerMethodMetrics(absl::string_view full_name, RpcKind kind);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_METRICS_H_
