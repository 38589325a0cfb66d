// main() of rdmarpc_micro_bench: Google Benchmark's, plus glog set up so the
// runtime's log lines carry no "logging before InitGoogleLogging" noise, and
// the softrdma provider by default (these machines have no RDMA NIC; a run on
// one can pick rdma-core with RDMARPC_PROVIDER=rdma-core).
#include <cstdlib>

#include "benchmark/benchmark.h"
#include "glog/logging.h"

int main(int argc, char** argv) {
  // Before anything touches the verbs table, which reads it once.
  setenv("RDMARPC_PROVIDER", "soft", /*overwrite=*/0);
  google::InitGoogleLogging(argv[0]);
  // Server start/stop lines would interleave with the result table.
  FLAGS_minloglevel = google::GLOG_WARNING;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
