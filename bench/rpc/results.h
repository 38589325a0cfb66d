// results.h: what rpc_bench measures, one struct per workload, in the units
// their field names carry (bench/README.md says what each figure means).
#ifndef RDMARPC_BENCH_RPC_RESULTS_H_
#define RDMARPC_BENCH_RPC_RESULTS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/rpc/cpu_time.h"
#include "bench/rpc/echo_system.h"

namespace rdmarpc {
namespace rpcbench {

// One verbs-budget run: SIZExIN_FLIGHT of --budget_runs.
struct BudgetRun {
  size_t size_bytes = 0;
  int in_flight = 1;
};

// One payload size, one blocking call at a time.
struct LatencyResult {
  size_t size_bytes = 0;
  uint64_t calls = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0, mean_us = 0;
  CpuPerCall cpu;  // over the timed calls (cpu_time.h)
};

// A closed-loop run (rate or bandwidth).
struct ThroughputResult {
  size_t size_bytes = 0;
  int threads = 1;
  int in_flight_per_thread = 1;
  uint64_t calls = 0;
  double seconds = 0;
  double rpc_per_s = 0;
  double gb_per_s = 0;  // request + response payload bytes, 10^9 B/s
  CpuPerCall cpu;       // over the measured seconds (cpu_time.h)
  // The payload went as an rdmarpc::Buffer attachment (rdmarpc/buffer.h)
  // beside an empty message, not as a bytes field.
  bool buffer_payload = false;
};

// Verbs work over `calls` calls, both processes.
struct BudgetResult {
  size_t size_bytes = 0;
  int in_flight = 1;
  uint64_t calls = 0;
  VerbsCounters client, server;  // differences over the run
};

// Server-streaming: `runs` streams one after another, each of
// `messages_per_run` messages of `size_bytes` read on one stream; the
// figures are the median run's (nearest rank: the lower middle one of an
// even count). MB/s = 10^6 B/s of message payload (one direction).
struct StreamResult {
  size_t size_bytes = 0;
  uint64_t messages_per_run = 0;
  std::vector<double> run_seconds;  // each run's, in the order run
  double median_seconds = 0;
  double messages_per_s = 0;
  double mb_per_s = 0;
};

// Small blocking calls one at a time on a one-connection channel, first
// alone, then while another thread keeps large calls going on the same
// connection. large_calls completed within large_seconds (the loaded
// phase); GB/s counts request and response payload (2 x size per call).
struct MixedResult {
  size_t small_size_bytes = 0;
  size_t large_size_bytes = 0;
  int pool_size = 1;
  LatencyResult alone, loaded;  // the small calls
  uint64_t large_calls = 0;
  double large_seconds = 0;
  double large_calls_per_s = 0;
  double large_gb_per_s = 0;
};

// Everything measured for one system.
struct SystemResults {
  std::string system;
  std::vector<LatencyResult> latency;
  std::optional<ThroughputResult> rate;
  std::vector<ThroughputResult> bandwidth;
  std::vector<BudgetResult> budget;
  std::string budget_note;  // why there is no budget, when there is none
  std::vector<StreamResult> stream;
  std::optional<MixedResult> mixed;
  std::string streaming_note;  // why there is no stream / mixed, when there is none
};

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_RESULTS_H_
