// workloads.h: the things rpc_bench measures on an EchoClient. Each
// runs on the calling thread (the closed loops run on the system's
// completion threads) and returns the client's first failed call status, or
// DATA_LOSS when an echo does not match what was sent.
#ifndef RDMARPC_BENCH_RPC_WORKLOADS_H_
#define RDMARPC_BENCH_RPC_WORKLOADS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/rpc/echo_system.h"
#include "bench/rpc/results.h"

namespace rdmarpc {
namespace rpcbench {

// A request of `size` payload bytes, not all equal (so a reply from a
// shifted or stale buffer cannot match).
EchoRequest MakeRequest(size_t size);

// The bytes CheckEcho compares at each of its three places when not whole.
inline constexpr size_t kEchoWindowBytes = 4096;

// DATA_LOSS naming `what`, the sizes and the first differing offset when
// `got` is not `sent`. `whole`: every byte is compared; otherwise the size
// and kEchoWindowBytes at the start, the middle and the end (a full
// compare of every 16 MiB echo would be a pass over the payload inside
// the measured time, so the closed loops compare each slot's first echo
// whole and the later ones by these windows).
absl::Status CheckEcho(absl::string_view what, absl::string_view sent, absl::string_view got,
                       bool whole);

// Nearest-rank percentile of ascending `sorted`, p in (0, 1]; 0 when empty.
double Percentile(const std::vector<double>& sorted, double p);

struct LatencyOptions {
  int64_t warmup_calls = 20;  // untimed calls first (connect, pools)
  int64_t max_calls = 10000;  // timed calls at most
  double max_seconds = 2.0;   // stop after this long (at least one call)
};

// One blocking call at a time of `size` bytes; each echo compared byte for
// byte outside the timed part. Latencies in µs.
absl::StatusOr<LatencyResult> MeasureLatency(EchoClient& client, size_t size,
                                             const LatencyOptions& options);

// Each of `clients` keeps `in_flight` calls of `size` bytes going with the
// async API, each completion starting the next call (closed loop).
// Completions are counted over `seconds`, after `warmup_seconds` and after
// every client has finished a call (up to 10 s more). `buffer_payload`:
// the payload travels as an attachment (EchoClient::AsyncEchoAttachment)
// instead of in the message.
absl::StatusOr<ThroughputResult> MeasureThroughput(const std::vector<EchoClient*>& clients,
                                                   size_t size, int in_flight, double seconds,
                                                   double warmup_seconds,
                                                   bool buffer_payload = false);

// `calls` calls of run.size_bytes with run.in_flight in flight (blocking
// calls when 1), after 10 untimed ones; the verbs counters of this process
// and of the server (EchoClient::ServerCounters) are read just before and
// after. The second GetStats call adds one request/response to the window.
// UNIMPLEMENTED for a system without counters.
absl::StatusOr<BudgetResult> MeasureBudget(EchoClient& client, const BudgetRun& run,
                                           uint64_t calls);

// Reads `runs` RpcBench.Stream streams of `messages` messages of `size`
// bytes, one after another, each timed from opening the stream to its
// status; every message's size and the first one's bytes are checked.
// An untimed stream of 100 messages comes first.
absl::StatusOr<StreamResult> MeasureStream(EchoClient& client, size_t size, uint64_t messages,
                                           int runs);
// The figures of StreamResult from its runs' durations (pure; the median
// by nearest rank).
StreamResult SummariseStreamRuns(size_t size, uint64_t messages,
                                 const std::vector<double>& run_seconds);

struct MixedOptions {
  size_t small_size = 32;
  size_t large_size = 64 * 1024 * 1024;
  LatencyOptions small;  // each phase's small calls (alone, then loaded)
};

// On `client` (which should have one connection: the caller makes it with
// pool_size 1): one untimed large call, the small calls' latency alone
// (MeasureLatency), then the same while a second thread makes blocking
// large calls back to back; the large calls completed while the loaded
// small calls ran give the throughput. The load thread's first failure is
// returned (DATA_LOSS for an echo of the wrong size).
absl::StatusOr<MixedResult> MeasureMixed(EchoClient& client, const MixedOptions& options);

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_WORKLOADS_H_
