// results.h: what rpc_bench measures, one struct per workload, in the units
// their field names carry (bench/README.md says what each figure means).
#ifndef RDMARPC_BENCH_RPC_RESULTS_H_
#define RDMARPC_BENCH_RPC_RESULTS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
};

// Verbs work over `calls` calls, both processes.
struct BudgetResult {
  size_t size_bytes = 0;
  int in_flight = 1;
  uint64_t calls = 0;
  VerbsCounters client, server;  // differences over the run
};

// Everything measured for one system.
struct SystemResults {
  std::string system;
  std::vector<LatencyResult> latency;
  std::optional<ThroughputResult> rate;
  std::vector<ThroughputResult> bandwidth;
  std::vector<BudgetResult> budget;
  std::string budget_note;  // why there is no budget, when there is none
};

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_RESULTS_H_
