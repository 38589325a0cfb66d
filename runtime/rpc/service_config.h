// service_config.h: per-method call policies — gRPC's service config
// (grpc/grpc doc/service_config.md) with the retry and hedging policies of
// gRFC A6 ("gRPC Retry Design"), and the channel's retry throttle.
//
// A channel takes its config from ChannelOptions::service_config_json; a
// generated Stub passes the IDL's (rdmarpc/options.proto) for its method,
// used when the channel's config names nothing for that method.
#ifndef RDMARPC_RUNTIME_RPC_SERVICE_CONFIG_H_
#define RDMARPC_RUNTIME_RPC_SERVICE_CONFIG_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

// gRFC A6 ("Limits on Retries and Hedges"): maxAttempts above this counts as
// this, so a config from a resolver cannot multiply a call's load further.
inline constexpr int kMaxAttemptsCap = 5;

// A set of status codes, bit (1 << code).
using StatusCodeSet = uint32_t;
inline bool Contains(StatusCodeSet set, absl::StatusCode code) {
  const int c = static_cast<int>(code);
  return c >= 0 && c < 32 && (set & (1u << c)) != 0;
}

// retryPolicy: attempt n + 1 (n >= 1) starts after a delay drawn uniformly
// from [0, min(initial_backoff * backoff_multiplier^(n-1), max_backoff)).
struct RetryPolicy {
  int max_attempts = 0;  // including the first; 2..kMaxAttemptsCap
  absl::Duration initial_backoff;
  absl::Duration max_backoff;
  double backoff_multiplier = 0;
  StatusCodeSet retryable_codes = 0;  // never empty
};

// hedgingPolicy: up to max_attempts copies of the call, the next one
// hedging_delay after the previous (at once after a non-fatal failure), to
// distinct servers where there are enough; the first answer that is OK or
// fatal wins and the others are cancelled.
struct HedgingPolicy {
  int max_attempts = 0;  // including the first; 2..kMaxAttemptsCap
  absl::Duration hedging_delay = absl::ZeroDuration();
  StatusCodeSet non_fatal_codes = 0;
};

// One methodConfig entry. At most one of retry and hedging is set.
struct MethodConfig {
  std::optional<RetryPolicy> retry;
  std::optional<HedgingPolicy> hedging;
  // "timeout": the call's deadline is at most this after it starts.
  absl::Duration timeout = absl::InfiniteDuration();
};

// retryThrottling, in thousandths of a token (gRPC keeps the same units:
// tokenRatio has at most three decimals).
struct RetryThrottleConfig {
  int max_milli_tokens = 0;   // maxTokens * 1000; maxTokens 1..1000
  int token_ratio_milli = 0;  // tokenRatio * 1000; > 0
};

class ServiceConfig {
 public:
  // Parses a service config JSON text. Understood: "methodConfig" (name,
  // timeout, retryPolicy, hedgingPolicy), "retryThrottling",
  // "loadBalancingConfig" (the first policy of the list this channel knows)
  // and the older "loadBalancingPolicy"; other fields are ignored, as gRPC
  // does. INVALID_ARGUMENT names the bad field by its path
  // ("methodConfig[0].retryPolicy.maxAttempts") and value.
  static absl::StatusOr<std::shared_ptr<const ServiceConfig>> Parse(absl::string_view json);

  // The config for `method` ("/pkg.Service/Method" or "pkg.Service/Method"):
  // its own entry, else its service's, else the default one (a name with
  // no service); nullptr when none applies.
  const MethodConfig* Find(absl::string_view method) const;

  const std::optional<RetryThrottleConfig>& throttle() const { return throttle_; }
  // "round_robin", "pick_first" or "least_request"; empty when unset.
  const std::string& load_balancing_policy() const { return load_balancing_policy_; }

 private:
  // Keyed "pkg.Service/Method", "pkg.Service/" and "" (the default).
  absl::flat_hash_map<std::string, MethodConfig> by_name_;
  std::optional<RetryThrottleConfig> throttle_;
  std::string load_balancing_policy_;
};

// One methodConfig object without "name" (the generated code's form of the
// IDL options). INVALID_ARGUMENT as ServiceConfig::Parse.
absl::StatusOr<MethodConfig> ParseMethodConfig(absl::string_view json);

// gRPC's retry throttle (gRFC A6 "Throttling Retry Attempts and Hedged
// RPCs"): tokens start at maxTokens; a call that fails with a retryable or
// non-fatal code (or whose server pushed back "do not retry") takes one,
// an OK call gives tokenRatio back; retries and further hedges are allowed
// only while tokens > maxTokens / 2. Any thread, lock-free.
class RetryThrottle {
 public:
  explicit RetryThrottle(const RetryThrottleConfig& config);
  bool RetryAllowed() const;
  void RecordFailure();
  void RecordSuccess();
  // In thousandths (for tests).
  int milli_tokens() const { return milli_tokens_.load(std::memory_order_relaxed); }

 private:
  const RetryThrottleConfig config_;
  std::atomic<int> milli_tokens_;
};

// Parses a status code name as gRPC's service config spells it
// ("UNAVAILABLE", any case) or its number (0..16).
std::optional<absl::StatusCode> ParseStatusCodeName(absl::string_view name);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_SERVICE_CONFIG_H_
