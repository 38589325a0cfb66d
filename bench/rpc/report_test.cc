// Tests of rpc_bench's pure parts: flag parsing, percentiles, the JSON, the
// table and the gnuplot data, on hand-made results with known values.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "bench/rpc/cpu_time.h"
#include "bench/rpc/parse.h"
#include "bench/rpc/report.h"
#include "bench/rpc/results.h"
#include "bench/rpc/workloads.h"
#include "gtest/gtest.h"

namespace rdmarpc {
namespace rpcbench {
namespace {

TEST(RpcBenchParse, BudgetRunsAndTheirErrors) {
  absl::StatusOr<std::vector<BudgetRun>> runs = ParseBudgetRuns("32x1,1048576x8");
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].size_bytes, 32u);
  EXPECT_EQ((*runs)[0].in_flight, 1);
  EXPECT_EQ((*runs)[1].size_bytes, 1048576u);
  EXPECT_EQ((*runs)[1].in_flight, 8);

  absl::StatusOr<std::vector<BudgetRun>> zero = ParseBudgetRuns("32x0");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.status().message(), "--budget_runs: '32x0' needs SIZExIN_FLIGHT with IN_FLIGHT >= 1");
  EXPECT_EQ(ParseBudgetRuns("32").status().message(), "--budget_runs: want SIZExIN_FLIGHT");
  EXPECT_EQ(ParseBudgetRuns("").status().message(), "--budget_runs is empty");
}

TEST(RpcBenchParse, SizesAreBoundedByTheMessageLimit) {
  absl::StatusOr<std::vector<size_t>> sizes = ParseSizes("sizes", "32,,4096");
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(*sizes, (std::vector<size_t>{32, 4096}));
  EXPECT_EQ(ParseSizes("sizes", "67108864").status().message(),
            "--sizes: '67108864' is not a size in bytes from 0 to 67104768");
  EXPECT_EQ(ParseSizes("sizes", "1k").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RpcBenchParse, ListRejectsUnknownItems) {
  absl::StatusOr<std::vector<std::string>> modes =
      ParseList("modes", "rate,latency", {"latency", "rate"});
  ASSERT_TRUE(modes.ok());
  EXPECT_EQ(*modes, (std::vector<std::string>{"rate", "latency"}));
  EXPECT_EQ(ParseList("modes", "rate,speed", {"latency", "rate"}).status().message(),
            "--modes: unknown 'speed', expected one of latency,rate");
}

TEST(RpcBenchWorkloads, PercentileIsNearestRank) {
  std::vector<double> sorted;
  for (int i = 1; i <= 1000; ++i) sorted.push_back(i);
  EXPECT_EQ(Percentile(sorted, 0.50), 500);
  EXPECT_EQ(Percentile(sorted, 0.99), 990);
  EXPECT_EQ(Percentile(sorted, 0.999), 999);
  EXPECT_EQ(Percentile(sorted, 1.0), 1000);
  EXPECT_EQ(Percentile({7}, 0.999), 7);
  EXPECT_EQ(Percentile({}, 0.5), 0);
}

TEST(RpcBenchWorkloads, CheckEchoFindsSizeAndByteDifferences) {
  const std::string sent = MakeRequest(64 * 1024).payload();
  EXPECT_TRUE(CheckEcho("t", sent, sent, /*whole=*/true).ok());
  EXPECT_TRUE(CheckEcho("t", sent, sent, /*whole=*/false).ok());

  absl::Status s = CheckEcho("t", sent, absl::string_view(sent).substr(1), /*whole=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "t: sent 65536 bytes, echo has 65535");

  // A byte between the windows: only the whole compare sees it.
  std::string got = sent;
  got[10000] = static_cast<char>(got[10000] ^ 1);
  EXPECT_TRUE(CheckEcho("t", sent, got, /*whole=*/false).ok());
  s = CheckEcho("t", sent, got, /*whole=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), absl::StrCat("t: echo of 65536 bytes differs at offset 10000 (sent ",
                                      static_cast<uint8_t>(sent[10000]), ", got ",
                                      static_cast<uint8_t>(got[10000]), ")"));

  // The start, the middle and the end window are each compared.
  for (size_t at : {size_t{0}, size_t{32768}, size_t{65535}}) {
    got = sent;
    got[at] = static_cast<char>(got[at] ^ 0x80);
    s = CheckEcho("t", sent, got, /*whole=*/false);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << at;
    EXPECT_NE(s.message().find(absl::StrCat("differs at offset ", at, " ")),
              absl::string_view::npos)
        << s;
  }

  // A payload echoed shifted by one byte differs at offset 0.
  const std::string shifted = MakeRequest(64 * 1024 + 1).payload().substr(1);
  s = CheckEcho("t", sent, shifted, /*whole=*/false);
  EXPECT_NE(s.message().find("differs at offset 0 "), absl::string_view::npos) << s;

  // Small echoes are compared whole either way.
  const std::string small = MakeRequest(100).payload();
  got = small;
  got[50] = static_cast<char>(got[50] ^ 1);
  EXPECT_EQ(CheckEcho("t", small, got, /*whole=*/false).code(), absl::StatusCode::kDataLoss);
}

TEST(RpcBenchWorkloads, RequestPayloadIsSizedAndNotConstant) {
  EchoRequest request = MakeRequest(4096);
  ASSERT_EQ(request.payload().size(), 4096u);
  EXPECT_NE(request.payload()[0], request.payload()[8]);
  EXPECT_EQ(MakeRequest(0).payload().size(), 0u);
}

// Two systems with known figures.
std::vector<SystemResults> TwoSystems() {
  SystemResults r;
  r.system = "rdmarpc";
  r.latency.push_back({32, 100, 10.0, 20.0, 40.0, 50.0, 12.5, {}});
  ThroughputResult rate;
  rate.size_bytes = 32;
  rate.in_flight_per_thread = 32;
  rate.calls = 300000;
  rate.seconds = 3;
  rate.rpc_per_s = 100000;
  rate.gb_per_s = 0.0064;
  r.rate = rate;
  BudgetResult budget;
  budget.size_bytes = 32;
  budget.calls = 100;
  budget.client.send_with_imm = 100;
  budget.client.post_send_calls = 100;
  budget.client.signaled_sends = 5;
  budget.client.recv = 100;
  budget.client.post_recv_calls = 10;
  budget.server = budget.client;
  budget.server.payload_bytes_copied = 3400;
  r.budget.push_back(budget);
  r.stream.push_back(SummariseStreamRuns(32, 100000, {0.5, 0.25, 1.0}));
  r.stream.push_back(SummariseStreamRuns(4096, 100000, {0.8, 0.4}));
  MixedResult mixed;
  mixed.small_size_bytes = 32;
  mixed.large_size_bytes = 64 << 20;
  mixed.alone = {32, 1000, 2.0, 4.0, 8.0, 10.0, 2.5, {}};
  mixed.loaded = {32, 500, 20.0, 100.0, 400.0, 500.0, 30.0, {}};
  mixed.large_calls = 10;
  mixed.large_seconds = 2.5;
  mixed.large_calls_per_s = 4;
  mixed.large_gb_per_s = 4 * 2 * double(64 << 20) / 1e9;
  r.mixed = mixed;

  SystemResults g;
  g.system = "grpc";
  g.latency.push_back({32, 100, 40.0, 80.0, 80.0, 100.0, 45.0, {}});
  rate.rpc_per_s = 25000;
  g.rate = rate;
  g.budget_note = "no verbs: gRPC runs over TCP sockets";
  g.streaming_note = "n/a (rdmarpc only)";
  return {r, g};
}

TEST(RpcBenchWorkloads, StreamRunsSummariseToTheMedianRun) {
  StreamResult odd = SummariseStreamRuns(32, 100000, {0.5, 0.25, 1.0});
  EXPECT_EQ(odd.size_bytes, 32u);
  EXPECT_EQ(odd.messages_per_run, 100000u);
  EXPECT_EQ(odd.run_seconds, (std::vector<double>{0.5, 0.25, 1.0}));  // in the order run
  EXPECT_EQ(odd.median_seconds, 0.5);
  EXPECT_EQ(odd.messages_per_s, 200000);
  EXPECT_DOUBLE_EQ(odd.mb_per_s, 6.4);  // 200000 x 32 B
  // Nearest rank: of an even count, the shorter middle run.
  StreamResult even = SummariseStreamRuns(4096, 100000, {0.8, 0.4});
  EXPECT_EQ(even.median_seconds, 0.4);
  EXPECT_EQ(even.messages_per_s, 250000);
  EXPECT_EQ(even.mb_per_s, 1024);
  StreamResult none = SummariseStreamRuns(32, 10, {});
  EXPECT_EQ(none.messages_per_s, 0);
  EXPECT_EQ(none.mb_per_s, 0);
}

TEST(RpcBenchReport, JsonHasUnitsRatiosAndBudgetPerCall) {
  std::vector<SystemResults> all = TwoSystems();
  std::string json = Json(all, Figures(all), "2026-11-30T07:00:00Z", "{\"host\": \"h\"}");
  EXPECT_NE(json.find("\"time_utc\": \"2026-11-30T07:00:00Z\""), std::string::npos);
  EXPECT_NE(json.find("\"config\": {\"host\": \"h\"},"), std::string::npos);
  EXPECT_NE(json.find("{\"size_bytes\": 32, \"calls\": 100, \"p50_us\": 10, \"p99_us\": 20, "
                      "\"p999_us\": 40, \"max_us\": 50, \"mean_us\": 12.5, "
                      "\"client_cpu_us_per_call\": null, \"server_cpu_us_per_call\": null}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"rpc_per_s\": 100000"), std::string::npos);
  // Per call over both processes: 2 sends of 100 calls, 10 signalled.
  EXPECT_NE(json.find("\"post_send_calls_per_call\": 2, \"post_send_calls_per_message\": 1, "
                      "\"send_wrs_per_call\": 2, \"signaled_sends_per_call\": 0.1, "
                      "\"send_wrs_per_signaled_send\": 20"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"recv_wrs_per_post_recv_call\": 10"), std::string::npos);
  EXPECT_NE(json.find("\"payload_bytes_copied_per_call\": 34"), std::string::npos);
  EXPECT_NE(json.find("\"budget_note\": \"no verbs: gRPC runs over TCP sockets\""),
            std::string::npos);
  // rdmarpc / gRPC.
  EXPECT_NE(json.find("\"latency_32_B_p50\": 0.25,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"latency_32_B_p99\": 0.25,"), std::string::npos);
  EXPECT_NE(json.find("\"latency_32_B_p999\": 0.5,"), std::string::npos);
  EXPECT_NE(json.find("\"rate_rpc_per_s\": 4\n"), std::string::npos) << json;
  EXPECT_NE(json.find("\"ratio_of\": \"rdmarpc/grpc\""), std::string::npos);
}

TEST(RpcBenchReport, JsonHasStreamAndMixedWithUnits) {
  std::vector<SystemResults> all = TwoSystems();
  std::string json = Json(all, Figures(all), "2026-12-01T10:00:00Z", "{}");
  EXPECT_NE(json.find("\"stream\": [\n"
                      "        {\"size_bytes\": 32, \"runs\": 3, \"messages_per_run\": 100000, "
                      "\"run_seconds\": [0.5, 0.25, 1], \"median_seconds\": 0.5, "
                      "\"messages_per_s\": 200000, \"mb_per_s\": 6.4},\n"
                      "        {\"size_bytes\": 4096, \"runs\": 2, \"messages_per_run\": 100000, "
                      "\"run_seconds\": [0.8, 0.4], \"median_seconds\": 0.4, "
                      "\"messages_per_s\": 250000, \"mb_per_s\": 1024}],\n"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"mixed\": {\"small_size_bytes\": 32, \"large_size_bytes\": 67108864, "
                      "\"pool_size\": 1,\n"
                      "        \"alone\": {\"size_bytes\": 32, \"calls\": 1000, \"p50_us\": 2, "
                      "\"p99_us\": 4, \"p999_us\": 8, \"max_us\": 10, \"mean_us\": 2.5, "
                      "\"client_cpu_us_per_call\": null, \"server_cpu_us_per_call\": null},\n"
                      "        \"loaded\": {\"size_bytes\": 32, \"calls\": 500, \"p50_us\": 20, "
                      "\"p99_us\": 100, \"p999_us\": 400, \"max_us\": 500, \"mean_us\": 30, "
                      "\"client_cpu_us_per_call\": null, \"server_cpu_us_per_call\": null},\n"
                      "        \"p50_loaded_over_alone\": 10, \"p99_loaded_over_alone\": 25, "
                      "\"p999_loaded_over_alone\": 50,\n"
                      "        \"large_calls\": 10, \"large_seconds\": 2.5, "
                      "\"large_calls_per_s\": 4, \"large_gb_per_s\": 0.536871},\n"
                      "      \"streaming_note\": \"\"\n"),
            std::string::npos)
      << json;
  // gRPC: nothing measured, and why.
  EXPECT_NE(json.find("\"stream\": [],\n      \"mixed\": null,\n"
                      "      \"streaming_note\": \"n/a (rdmarpc only)\"\n"),
            std::string::npos)
      << json;
  // No ratio of a figure only one system has.
  EXPECT_EQ(json.find("\"stream_32_B_messages_per_s\":"), std::string::npos) << json;
}

TEST(RpcBenchReport, TableShowsStreamAndMixedRowsWithNaForGrpc) {
  std::vector<SystemResults> all = TwoSystems();
  std::string table = FormatTable(all, Figures(all));
  for (const char* row : {
           "stream 32 B messages           msg/s       200000.00            n/a                -\n",
           "stream 32 B payload            MB/s             6.40            n/a                -\n",
           "stream 4 KiB messages          msg/s       250000.00            n/a                -\n",
           "stream 4 KiB payload           MB/s          1024.00            n/a                -\n",
           "mixed 32 B p50 alone           us               2.00            n/a                -\n",
           "mixed 32 B p50 +64 MiB         us              20.00            n/a                -\n",
           "mixed 32 B p50 ratio           x               10.00            n/a                -\n",
           "mixed 32 B p99 +64 MiB         us             100.00            n/a                -\n",
           "mixed 32 B p99 ratio           x               25.00            n/a                -\n",
           "mixed 32 B p99.9 alone         us               8.00            n/a                -\n",
           "mixed 32 B p99.9 +64 MiB       us             400.00            n/a                -\n",
           "mixed 32 B p99.9 ratio         x               50.00            n/a                -\n",
           "mixed 64 MiB calls             GB/s             0.54            n/a                -\n",
           "grpc stream, mixed: n/a (rdmarpc only)\n"}) {
    EXPECT_NE(table.find(row), std::string::npos) << row << "in:\n" << table;
  }
  // A figure a system did not run shows "-", not "n/a".
  all[1].latency.clear();
  EXPECT_NE(FormatTable(all, Figures(all))
                .find("latency 32 B p50               us              10.00              -"),
            std::string::npos);
}

TEST(RpcBenchReport, TableHasRatioColumnOnlyWithTwoSystems) {
  std::vector<SystemResults> all = TwoSystems();
  std::string table = FormatTable(all, Figures(all));
  EXPECT_NE(table.find("rdmarpc/grpc"), std::string::npos);
  EXPECT_NE(table.find("latency 32 B p50               us              10.00          40.00"
                       "            0.250\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("grpc budget: no verbs"), std::string::npos);
  all.pop_back();
  std::string one = FormatTable(all, Figures(all));
  EXPECT_EQ(one.find("rdmarpc/grpc"), std::string::npos);
}

TEST(RpcBenchReport, PlotDataMarksMissingValuesNaN) {
  std::vector<SystemResults> all = TwoSystems();
  all.pop_back();  // rdmarpc only
  PlotData plot = MakePlotData(all);
  EXPECT_EQ(plot.latency,
            "# size_bytes rdmarpc_p50_us rdmarpc_p99_us grpc_p50_us grpc_p99_us\n"
            "32 10 20 NaN NaN\n");
  EXPECT_EQ(plot.rate, "# label rdmarpc_rpc_per_s grpc_rpc_per_s\n\"32 B x32\" 100000 NaN\n");
  EXPECT_EQ(plot.bandwidth, "# label rdmarpc_gb_per_s grpc_gb_per_s\n");
}

TEST(RpcBenchReport, SizeLabels) {
  EXPECT_EQ(SizeLabel(32), "32 B");
  EXPECT_EQ(SizeLabel(4096), "4 KiB");
  EXPECT_EQ(SizeLabel(16 << 20), "16 MiB");
  EXPECT_EQ(SizeLabel(1000), "1000 B");
}

TEST(RpcBenchCpu, ProcStatTimesAreFields14And15AfterTheCommandName) {
  // A command name with spaces and parentheses; utime 250 and stime 75
  // ticks at 100 ticks/s.
  absl::StatusOr<CpuTime> t =
      ParseProcStat("4242 (rpc (bench) x) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 9", 100);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->user_us, 2500000);
  EXPECT_EQ(t->sys_us, 750000);
  EXPECT_EQ(t->total_us(), 3250000);
  EXPECT_EQ(ParseProcStat("4242 rpc_bench S 1", 100).status().message(),
            "no ')' after the command name in \"4242 rpc_bench S 1\"");
  EXPECT_EQ(ParseProcStat("4242 (rpc) S 1 2 3", 100).status().message(),
            "/proc stat line has 4 fields after the command name, utime and stime need 13");
  EXPECT_EQ(ParseProcStat("1 (a) S 1 2 3 4 5 6 7 8 9 10 x 75", 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  // This process's own line parses, and its time grows while it works
  // (by at least one 10 ms tick over 50 ms of spinning).
  absl::StatusOr<CpuTime> self = ProcessCpuTime(getpid());
  ASSERT_TRUE(self.ok()) << self.status();
  const CpuTime own_before = SelfCpuTime();
  volatile uint64_t spin = 0;
  while (SelfCpuTime().total_us() - own_before.total_us() < 50000) ++spin;
  absl::StatusOr<CpuTime> later = ProcessCpuTime(getpid());
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_GT(later->total_us(), self->total_us());
  EXPECT_EQ(ProcessCpuTime(-1).status().code(), absl::StatusCode::kNotFound);
}

TEST(RpcBenchCpu, PerCallDividesEachProcessAndNeedsBoth) {
  CpuSample before{{100, 50}, CpuTime{1000, 0}};
  CpuSample after{{300, 150}, CpuTime{1600, 100}};
  CpuPerCall c = PerCall(before, after, 100);
  EXPECT_EQ(c.client_us, 3);
  EXPECT_EQ(c.server_us, 7);
  EXPECT_EQ(c.total_us(), 10);
  after.server.reset();
  c = PerCall(before, after, 100);
  EXPECT_EQ(c.client_us, 3);
  EXPECT_EQ(c.server_us, -1);
  EXPECT_EQ(c.total_us(), -1);
  EXPECT_EQ(PerCall(before, after, 0).client_us, -1);
}

TEST(RpcBenchReport, CpuPerCallShowsInTheFiguresAndJson) {
  std::vector<SystemResults> all = TwoSystems();
  all[0].rate->cpu = CpuPerCall{0.75, 0.5};
  all[0].latency[0].cpu = CpuPerCall{2, 1.5};
  all[1].rate->cpu = CpuPerCall{20, 30};  // gRPC
  std::vector<Figure> figures = Figures(all);
  auto value = [&](const std::string& key, const std::string& system) {
    for (const Figure& f : figures) {
      if (f.key == key && f.value.count(system) > 0) return f.value.at(system);
    }
    return -99.0;
  };
  EXPECT_EQ(value("rate_client_cpu_us_per_call", "rdmarpc"), 0.75);
  EXPECT_EQ(value("rate_server_cpu_us_per_call", "rdmarpc"), 0.5);
  EXPECT_EQ(value("rate_cpu_us_per_call", "rdmarpc"), 1.25);
  EXPECT_EQ(value("rate_cpu_us_per_call", "grpc"), 50);
  EXPECT_EQ(value("latency_32_B_cpu_us_per_call", "rdmarpc"), 3.5);
  EXPECT_EQ(value("latency_32_B_cpu_us_per_call", "grpc"), -99);  // unknown: not shown
  std::string json = Json(all, figures, "2026-12-03T10:00:00Z", "{}");
  EXPECT_NE(json.find("\"client_cpu_us_per_call\": 0.75, \"server_cpu_us_per_call\": 0.5}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"rate_cpu_us_per_call\": 0.025"), std::string::npos) << json;
}

}  // namespace
}  // namespace rpcbench
}  // namespace rdmarpc
