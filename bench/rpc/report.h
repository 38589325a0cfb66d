// report.h: rpc_bench's output — the comparison table, the JSON file
// (units in field names, ratios of the first system over the second) and
// the gnuplot data bench/run.sh plots. Pure functions of the results.
#ifndef RDMARPC_BENCH_RPC_REPORT_H_
#define RDMARPC_BENCH_RPC_REPORT_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "bench/rpc/results.h"

namespace rdmarpc {
namespace rpcbench {

// "32 B", "4 KiB", "16 MiB" (binary units when exact).
std::string SizeLabel(size_t bytes);

// One row of the comparison: a figure, its unit, and each system's value.
struct Figure {
  std::string key;    // JSON key of the ratio, e.g. "latency_32_B_p50"
  std::string label;  // table row
  std::string unit;
  std::map<std::string, double> value;  // by system
  // What the table shows for a system without a value: "-" (not run), or
  // "n/a" for a figure only rdmarpc measures (stream, mixed).
  std::string absent = "-";
};

// Every figure of `all`, in workload order; a figure a system did not
// measure has no value for it.
std::vector<Figure> Figures(const std::vector<SystemResults>& all);

// The table printed at the end of a client run: one row per figure, one
// column per system and, with two systems, their ratio; then each system's
// verbs budget per call; then each system's notes (budget, streaming).
std::string FormatTable(const std::vector<SystemResults>& all, const std::vector<Figure>& figures);

// The JSON document: tool, time_utc, config (the object `config_json`
// verbatim), systems (latency, rate, bandwidth, budget, budget_note,
// stream, mixed, streaming_note per system), ratios (figure key -> first/second, with two systems) and
// ratio_of ("rdmarpc/grpc").
std::string Json(const std::vector<SystemResults>& all, const std::vector<Figure>& figures,
                 absl::string_view time_utc, absl::string_view config_json);

// gnuplot input: latency.dat (size_bytes, rdmarpc p50/p99, grpc p50/p99 in
// µs), rate.dat and bandwidth.dat ("label" rdmarpc grpc). "NaN" where a
// system has no value, which gnuplot skips; header lines start with '#'.
struct PlotData {
  std::string latency;
  std::string rate;
  std::string bandwidth;
};
PlotData MakePlotData(const std::vector<SystemResults>& all);

// Writes `text` to `path`: INVALID_ARGUMENT when it cannot be opened (with
// strerror), DATA_LOSS on a short write.
absl::Status WriteFile(const std::string& path, const std::string& text);

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_REPORT_H_
