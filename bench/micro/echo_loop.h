// echo_loop.h: the timed loop of the end-to-end echo benchmarks that vary
// the server's and channel's options (interceptor_bench.cc,
// metrics_bench.cc): a rdmarpc::Server with a BenchEcho service and a
// Channel to it over softrdma in this process, one untimed call to connect,
// then one synchronous 32 B echo per iteration.
#ifndef RDMARPC_BENCH_MICRO_ECHO_LOOP_H_
#define RDMARPC_BENCH_MICRO_ECHO_LOOP_H_

#include "benchmark/benchmark.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {
namespace bench {

// Skips the benchmark with the status when the server, the channel or a
// call fails. Items processed: the calls.
void RunEchoLoop(benchmark::State& state, const ServerOptions& server_options,
                 const ChannelOptions& channel_options);

}  // namespace bench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_MICRO_ECHO_LOOP_H_
