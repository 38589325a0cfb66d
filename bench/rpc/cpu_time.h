// cpu_time.h: CPU time (user + system) that a workload costs, in both
// processes of an rpc_bench run, divided by the calls it made.
//
// The client's own time comes from getrusage(RUSAGE_SELF) (µs resolution,
// every thread of the process). The server's comes from
// /proc/<pid>/stat (utime and stime, fields 14 and 15 of proc(5), every
// thread, in clock ticks of 1/sysconf(_SC_CLK_TCK) s: 10 ms at the usual
// 100 Hz), so a measured phase must last seconds for the server's figure to
// be precise (a server that uses a core for 3 s: about 0.3 % per tick). The
// server's pid is known only when both run on this host (--server_pid).
//
// Threads: any; SetServerPid before the workloads start.
#ifndef RDMARPC_BENCH_RPC_CPU_TIME_H_
#define RDMARPC_BENCH_RPC_CPU_TIME_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace rpcbench {

// CPU time consumed by a process so far, in µs.
struct CpuTime {
  double user_us = 0;
  double sys_us = 0;
  double total_us() const { return user_us + sys_us; }
};

// This process, all threads. Any thread.
CpuTime SelfCpuTime();

// Parses one /proc/<pid>/stat line (the command name may hold spaces and
// parentheses: fields are counted after its last ')'). `ticks_per_s` is
// sysconf(_SC_CLK_TCK). INVALID_ARGUMENT naming what is missing.
absl::StatusOr<CpuTime> ParseProcStat(absl::string_view line, long ticks_per_s);
// Another process on this host, all threads. NOT_FOUND when /proc/<pid>/stat
// cannot be read (the process ended, or another PID namespace);
// INVALID_ARGUMENT (from ParseProcStat) when its line is malformed. Either
// way the caller reports no server figure.
absl::StatusOr<CpuTime> ProcessCpuTime(pid_t pid);

// Both processes at one instant; `server` is empty when the server's pid is
// unknown (0) or its stat unreadable.
struct CpuSample {
  CpuTime client;
  std::optional<CpuTime> server;
};
// The pid the samples read the server's time from; 0 = none. Set once by
// rpc_bench's main before any workload runs.
void SetServerPid(pid_t pid);
CpuSample TakeCpuSample();

// CPU µs per call over [before, after] and `calls` calls, client and server
// (user + sys). A figure is -1 when unknown (no server pid, no call).
struct CpuPerCall {
  double client_us = -1;
  double server_us = -1;
  // Both processes; -1 unless both are known.
  double total_us() const { return client_us < 0 || server_us < 0 ? -1 : client_us + server_us; }
};
CpuPerCall PerCall(const CpuSample& before, const CpuSample& after, uint64_t calls);

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_CPU_TIME_H_
