#include "bench/rpc/cpu_time.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdmarpc {
namespace rpcbench {
namespace {

std::atomic<pid_t> g_server_pid{0};

double TimevalUs(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) * 1e6 + static_cast<double>(tv.tv_usec);
}

}  // namespace

CpuTime SelfCpuTime() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return CpuTime{TimevalUs(ru.ru_utime), TimevalUs(ru.ru_stime)};
}

absl::StatusOr<CpuTime> ParseProcStat(absl::string_view line, long ticks_per_s) {
  const size_t close = line.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("no ')' after the command name in \"", line, "\""));
  }
  // After ") ": field 3 (state) first, so utime (14) and stime (15) are the
  // 12th and 13th fields from here.
  std::vector<absl::string_view> fields =
      absl::StrSplit(line.substr(close + 1), ' ', absl::SkipEmpty());
  if (fields.size() < 13) {
    return absl::InvalidArgumentError(absl::StrCat("/proc stat line has ", fields.size(),
                                                   " fields after the command name, "
                                                   "utime and stime need 13"));
  }
  uint64_t utime = 0, stime = 0;
  if (!absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InvalidArgumentError(
        absl::StrCat("utime \"", fields[11], "\" or stime \"", fields[12], "\" is not a number"));
  }
  if (ticks_per_s <= 0) return absl::InvalidArgumentError("clock ticks per second must be > 0");
  const double us_per_tick = 1e6 / static_cast<double>(ticks_per_s);
  return CpuTime{static_cast<double>(utime) * us_per_tick,
                 static_cast<double>(stime) * us_per_tick};
}

absl::StatusOr<CpuTime> ProcessCpuTime(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line))
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return ParseProcStat(line, sysconf(_SC_CLK_TCK));
}

void SetServerPid(pid_t pid) { g_server_pid.store(pid); }

CpuSample TakeCpuSample() {
  CpuSample s;
  s.client = SelfCpuTime();
  if (const pid_t pid = g_server_pid.load(); pid > 0) {
    absl::StatusOr<CpuTime> server = ProcessCpuTime(pid);
    if (server.ok()) s.server = *server;
  }
  return s;
}

CpuPerCall PerCall(const CpuSample& before, const CpuSample& after, uint64_t calls) {
  CpuPerCall r;
  if (calls == 0) return r;
  const double n = static_cast<double>(calls);
  r.client_us = (after.client.total_us() - before.client.total_us()) / n;
  if (before.server && after.server) {
    r.server_us = (after.server->total_us() - before.server->total_us()) / n;
  }
  return r;
}

}  // namespace rpcbench
}  // namespace rdmarpc
