// report.cc: table, JSON and gnuplot data of rpc_bench (report.h).
#include "bench/rpc/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmarpc {
namespace rpcbench {

namespace {

std::string Num(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

// A CPU figure for JSON: null when unknown (-1).
std::string CpuNum(double v) { return v < 0 ? "null" : Num(v); }

double PerCall(uint64_t count, uint64_t calls) {
  return calls == 0 ? 0 : static_cast<double>(count) / static_cast<double>(calls);
}

}  // namespace

std::string SizeLabel(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= 1024 && bytes % 1024 == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}


std::vector<Figure> Figures(const std::vector<SystemResults>& all) {
  std::vector<Figure> figures;
  auto find = [&figures](const std::string& key) -> Figure* {
    for (Figure& f : figures) {
      if (f.key == key) return &f;
    }
    return nullptr;
  };
  auto add = [&](const std::string& key, const std::string& label, const std::string& unit,
                 const std::string& system, double v, const char* absent = "-") {
    Figure* f = find(key);
    if (f == nullptr) {
      figures.push_back(Figure{key, label, unit, {}, absent});
      f = &figures.back();
    }
    f->value[system] = v;
  };
  for (const SystemResults& s : all) {
    for (const LatencyResult& l : s.latency) {
      std::string size = absl::StrCat("latency_", l.size_bytes, "_B_");
      std::string label = absl::StrCat("latency ", SizeLabel(l.size_bytes), " ");
      add(size + "p50", label + "p50", "us", s.system, l.p50_us);
      add(size + "p99", label + "p99", "us", s.system, l.p99_us);
      add(size + "p999", label + "p99.9", "us", s.system, l.p999_us);
      add(size + "max", label + "max", "us", s.system, l.max_us);
      // CPU of both processes per call: shown only when the server's is known.
      if (l.cpu.total_us() >= 0) {
        add(size + "cpu_us_per_call", label + "CPU/call", "us", s.system, l.cpu.total_us());
      }
    }
    if (s.rate) {
      add("rate_rpc_per_s",
          absl::StrCat("rate ", SizeLabel(s.rate->size_bytes), " x", s.rate->in_flight_per_thread,
                       " x", s.rate->threads, "thr"),
          "RPC/s", s.system, s.rate->rpc_per_s);
      const CpuPerCall& cpu = s.rate->cpu;
      if (cpu.client_us >= 0) {
        add("rate_client_cpu_us_per_call", "rate CPU/call client", "us", s.system, cpu.client_us);
      }
      if (cpu.server_us >= 0) {
        add("rate_server_cpu_us_per_call", "rate CPU/call server", "us", s.system, cpu.server_us);
        add("rate_cpu_us_per_call", "rate CPU/call both", "us", s.system, cpu.total_us());
      }
    }
    for (const ThroughputResult& b : s.bandwidth) {
      add(absl::StrCat("bandwidth_", b.buffer_payload ? "buffer_" : "", b.size_bytes,
                       "_B_gb_per_s"),
          absl::StrCat("bandwidth ", SizeLabel(b.size_bytes), " x", b.in_flight_per_thread,
                       b.buffer_payload ? " Buffer" : ""),
          "GB/s", s.system, b.gb_per_s, b.buffer_payload ? "n/a" : "-");
    }
    for (const StreamResult& st : s.stream) {
      const std::string key = absl::StrCat("stream_", st.size_bytes, "_B_");
      const std::string label = absl::StrCat("stream ", SizeLabel(st.size_bytes), " ");
      add(key + "messages_per_s", label + "messages", "msg/s", s.system, st.messages_per_s, "n/a");
      add(key + "mb_per_s", label + "payload", "MB/s", s.system, st.mb_per_s, "n/a");
    }
    if (s.mixed) {
      const MixedResult& m = *s.mixed;
      const std::string key = absl::StrCat("mixed_", m.small_size_bytes, "_B_");
      const std::string label = absl::StrCat("mixed ", SizeLabel(m.small_size_bytes), " ");
      const std::string with = absl::StrCat(" +", SizeLabel(m.large_size_bytes));
      const std::pair<const char*, double LatencyResult::*> percentiles[] = {
          {"p50", &LatencyResult::p50_us},
          {"p99", &LatencyResult::p99_us},
          {"p999", &LatencyResult::p999_us}};
      for (const auto& [name, field] : percentiles) {
        const std::string shown = std::string(name) == "p999" ? "p99.9" : name;
        add(key + name + "_alone", label + shown + " alone", "us", s.system, m.alone.*field,
            "n/a");
        add(key + name + "_loaded", label + shown + with, "us", s.system, m.loaded.*field, "n/a");
        add(key + name + "_loaded_over_alone", label + shown + " ratio", "x", s.system,
            m.alone.*field > 0 ? m.loaded.*field / m.alone.*field : 0, "n/a");
      }
      add(absl::StrCat("mixed_", m.large_size_bytes, "_B_gb_per_s"),
          absl::StrCat("mixed ", SizeLabel(m.large_size_bytes), " calls"), "GB/s", s.system,
          m.large_gb_per_s, "n/a");
    }
  }
  return figures;
}

std::string FormatTable(const std::vector<SystemResults>& all, const std::vector<Figure>& figures) {
  std::string t;
  const bool both = all.size() == 2;
  absl::StrAppendFormat(&t, "\n%-30s %-6s", "figure", "unit");
  for (const SystemResults& s : all) absl::StrAppendFormat(&t, " %14s", s.system);
  if (both) absl::StrAppendFormat(&t, " %16s", absl::StrCat(all[0].system, "/", all[1].system));
  absl::StrAppend(&t, "\n");
  for (const Figure& f : figures) {
    absl::StrAppendFormat(&t, "%-30s %-6s", f.label, f.unit);
    for (const SystemResults& s : all) {
      auto it = f.value.find(s.system);
      if (it == f.value.end()) {
        absl::StrAppendFormat(&t, " %14s", f.absent);
      } else {
        absl::StrAppendFormat(&t, " %14.2f", it->second);
      }
    }
    if (both) {
      auto a = f.value.find(all[0].system), b = f.value.find(all[1].system);
      if (a != f.value.end() && b != f.value.end() && b->second > 0) {
        absl::StrAppendFormat(&t, " %16.3f", a->second / b->second);
      } else {
        absl::StrAppendFormat(&t, " %16s", "-");
      }
    }
    absl::StrAppend(&t, "\n");
  }
  for (const SystemResults& s : all) {
    if (s.budget.empty()) continue;
    absl::StrAppendFormat(
        &t, "\n%s verbs budget per call (client + server processes; 2 messages per call)\n",
        s.system);
    absl::StrAppendFormat(&t, "%-16s %9s %9s %9s %9s %9s %9s %9s %7s %11s\n", "run", "post_send",
                          "send_WRs", "signalled", "recv_WRs", "post_recv", "polled_WC", "poll_cq",
                          "reg_mr", "copied_B");
    for (const BudgetResult& b : s.budget) {
      const VerbsCounters total = b.client + b.server;
      absl::StrAppendFormat(
          &t, "%-16s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.1f %7d %11.1f\n",
          absl::StrCat(SizeLabel(b.size_bytes), " x", b.in_flight),
          PerCall(total.post_send_calls, b.calls), PerCall(total.send_wrs(), b.calls),
          PerCall(total.signaled_sends, b.calls), PerCall(total.recv, b.calls),
          PerCall(total.post_recv_calls, b.calls), PerCall(total.wc_polled, b.calls),
          PerCall(total.poll_cq_calls, b.calls), total.reg_mr,
          PerCall(total.payload_bytes_copied, b.calls));
    }
  }
  for (const SystemResults& s : all) {
    if (!s.budget_note.empty()) absl::StrAppendFormat(&t, "%s budget: %s\n", s.system, s.budget_note);
    if (!s.streaming_note.empty()) {
      absl::StrAppendFormat(&t, "%s stream, mixed: %s\n", s.system, s.streaming_note);
    }
  }
  return t;
}

namespace {

void AppendCounters(std::string* out, const VerbsCounters& c) {
  absl::StrAppend(out, "{\"send\": ", c.send, ", \"send_with_imm\": ", c.send_with_imm,
                  ", \"rdma_write\": ", c.rdma_write,
                  ", \"rdma_write_with_imm\": ", c.rdma_write_with_imm,
                  ", \"rdma_read\": ", c.rdma_read, ", \"recv\": ", c.recv,
                  ", \"post_send_calls\": ", c.post_send_calls,
                  ", \"post_recv_calls\": ", c.post_recv_calls,
                  ", \"signaled_sends\": ", c.signaled_sends, ", \"wc_polled\": ", c.wc_polled,
                  ", \"poll_cq_calls\": ", c.poll_cq_calls, ", \"reg_mr\": ", c.reg_mr,
                  ", \"rnr_retries\": ", c.rnr_retries,
                  ", \"payload_bytes_copied\": ", c.payload_bytes_copied, "}");
}

}  // namespace

std::string Json(const std::vector<SystemResults>& all, const std::vector<Figure>& figures,
                 absl::string_view time_utc, absl::string_view config_json) {
  std::string out = "{\n  \"tool\": \"rpc_bench\",\n";
  absl::StrAppend(&out, "  \"time_utc\": \"", time_utc, "\",\n");
  absl::StrAppend(&out, "  \"config\": ", config_json, ",\n");
  absl::StrAppend(&out, "  \"systems\": {");
  for (size_t i = 0; i < all.size(); ++i) {
    const SystemResults& s = all[i];
    absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "    \"", s.system, "\": {\n");
    auto latency = [&out](const LatencyResult& l) {
      absl::StrAppend(&out, "{\"size_bytes\": ", l.size_bytes, ", \"calls\": ", l.calls,
                      ", \"p50_us\": ", Num(l.p50_us), ", \"p99_us\": ", Num(l.p99_us),
                      ", \"p999_us\": ", Num(l.p999_us), ", \"max_us\": ", Num(l.max_us),
                      ", \"mean_us\": ", Num(l.mean_us),
                      ", \"client_cpu_us_per_call\": ", CpuNum(l.cpu.client_us),
                      ", \"server_cpu_us_per_call\": ", CpuNum(l.cpu.server_us), "}");
    };
    absl::StrAppend(&out, "      \"latency\": [");
    for (size_t j = 0; j < s.latency.size(); ++j) {
      absl::StrAppend(&out, j == 0 ? "\n        " : ",\n        ");
      latency(s.latency[j]);
    }
    absl::StrAppend(&out, "],\n");
    auto throughput = [&out](const ThroughputResult& t) {
      absl::StrAppend(&out, "{\"size_bytes\": ", t.size_bytes, ", \"threads\": ", t.threads,
                      ", \"in_flight_per_thread\": ", t.in_flight_per_thread,
                      ", \"calls\": ", t.calls, ", \"seconds\": ", Num(t.seconds),
                      ", \"rpc_per_s\": ", Num(t.rpc_per_s), ", \"gb_per_s\": ", Num(t.gb_per_s),
                      ", \"client_cpu_us_per_call\": ", CpuNum(t.cpu.client_us),
                      ", \"server_cpu_us_per_call\": ", CpuNum(t.cpu.server_us),
                      t.buffer_payload ? ", \"buffer_payload\": true" : "", "}");
    };
    absl::StrAppend(&out, "      \"rate\": ");
    if (s.rate) {
      throughput(*s.rate);
    } else {
      absl::StrAppend(&out, "null");
    }
    absl::StrAppend(&out, ",\n      \"bandwidth\": [");
    for (size_t j = 0; j < s.bandwidth.size(); ++j) {
      absl::StrAppend(&out, j == 0 ? "\n        " : ",\n        ");
      throughput(s.bandwidth[j]);
    }
    absl::StrAppend(&out, "],\n      \"budget\": [");
    for (size_t j = 0; j < s.budget.size(); ++j) {
      const BudgetResult& b = s.budget[j];
      VerbsCounters t = b.client + b.server;
      const uint64_t messages = 2 * b.calls;
      absl::StrAppend(
          &out, j == 0 ? "\n" : ",\n", "        {\"size_bytes\": ", b.size_bytes,
          ", \"in_flight\": ", b.in_flight, ", \"calls\": ", b.calls,
          ",\n         \"post_send_calls_per_call\": ", Num(PerCall(t.post_send_calls, b.calls)),
          ", \"post_send_calls_per_message\": ", Num(PerCall(t.post_send_calls, messages)),
          ", \"send_wrs_per_call\": ", Num(PerCall(t.send_wrs(), b.calls)),
          ", \"signaled_sends_per_call\": ", Num(PerCall(t.signaled_sends, b.calls)),
          ", \"send_wrs_per_signaled_send\": ",
          t.signaled_sends == 0 ? "null" : Num(PerCall(t.send_wrs(), t.signaled_sends)),
          ",\n         \"recv_wrs_per_call\": ", Num(PerCall(t.recv, b.calls)),
          ", \"post_recv_calls_per_call\": ", Num(PerCall(t.post_recv_calls, b.calls)),
          ", \"recv_wrs_per_post_recv_call\": ",
          t.post_recv_calls == 0 ? "null" : Num(PerCall(t.recv, t.post_recv_calls)),
          ", \"completions_polled_per_call\": ", Num(PerCall(t.wc_polled, b.calls)),
          ", \"poll_cq_calls_per_call\": ", Num(PerCall(t.poll_cq_calls, b.calls)),
          ",\n         \"reg_mr_total\": ", t.reg_mr, ", \"rnr_retries_total\": ", t.rnr_retries,
          ", \"payload_bytes_copied_per_call\": ", Num(PerCall(t.payload_bytes_copied, b.calls)),
          ",\n         \"client\": ");
      AppendCounters(&out, b.client);
      absl::StrAppend(&out, ",\n         \"server\": ");
      AppendCounters(&out, b.server);
      absl::StrAppend(&out, "}");
    }
    absl::StrAppend(&out, "],\n      \"budget_note\": \"", s.budget_note, "\",\n      \"stream\": [");
    for (size_t j = 0; j < s.stream.size(); ++j) {
      const StreamResult& st = s.stream[j];
      absl::StrAppend(&out, j == 0 ? "\n        " : ",\n        ", "{\"size_bytes\": ",
                      st.size_bytes, ", \"runs\": ", st.run_seconds.size(),
                      ", \"messages_per_run\": ", st.messages_per_run, ", \"run_seconds\": [");
      for (size_t k = 0; k < st.run_seconds.size(); ++k) {
        absl::StrAppend(&out, k == 0 ? "" : ", ", Num(st.run_seconds[k]));
      }
      absl::StrAppend(&out, "], \"median_seconds\": ", Num(st.median_seconds),
                      ", \"messages_per_s\": ", Num(st.messages_per_s),
                      ", \"mb_per_s\": ", Num(st.mb_per_s), "}");
    }
    absl::StrAppend(&out, "],\n      \"mixed\": ");
    if (s.mixed) {
      const MixedResult& m = *s.mixed;
      auto ratio = [](double loaded, double alone) { return alone > 0 ? loaded / alone : 0; };
      absl::StrAppend(&out, "{\"small_size_bytes\": ", m.small_size_bytes,
                      ", \"large_size_bytes\": ", m.large_size_bytes,
                      ", \"pool_size\": ", m.pool_size, ",\n        \"alone\": ");
      latency(m.alone);
      absl::StrAppend(&out, ",\n        \"loaded\": ");
      latency(m.loaded);
      absl::StrAppend(&out, ",\n        \"p50_loaded_over_alone\": ",
                      Num(ratio(m.loaded.p50_us, m.alone.p50_us)),
                      ", \"p99_loaded_over_alone\": ", Num(ratio(m.loaded.p99_us, m.alone.p99_us)),
                      ", \"p999_loaded_over_alone\": ",
                      Num(ratio(m.loaded.p999_us, m.alone.p999_us)),
                      ",\n        \"large_calls\": ", m.large_calls,
                      ", \"large_seconds\": ", Num(m.large_seconds),
                      ", \"large_calls_per_s\": ", Num(m.large_calls_per_s),
                      ", \"large_gb_per_s\": ", Num(m.large_gb_per_s), "}");
    } else {
      absl::StrAppend(&out, "null");
    }
    absl::StrAppend(&out, ",\n      \"streaming_note\": \"", s.streaming_note, "\"\n    }");
  }
  absl::StrAppend(&out, "\n  },\n  \"ratios\": {");
  // rdmarpc/gRPC of every figure both measured: < 1 is better for
  // latencies, > 1 for rates.
  bool first = true;
  if (all.size() == 2) {
    for (const Figure& f : figures) {
      auto a = f.value.find(all[0].system), b = f.value.find(all[1].system);
      if (a == f.value.end() || b == f.value.end() || b->second <= 0) continue;
      absl::StrAppend(&out, first ? "\n    \"" : ",\n    \"", f.key, "\": ",
                      Num(a->second / b->second));
      first = false;
    }
    absl::StrAppend(&out, first ? "" : "\n  ");
  }
  absl::StrAppend(&out, "},\n  \"ratio_of\": \"",
                  all.size() == 2 ? absl::StrCat(all[0].system, "/", all[1].system) : "",
                  "\"\n}\n");
  return out;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  size_t n = fwrite(text.data(), 1, text.size(), f);
  int closed = fclose(f);
  if (n != text.size() || closed != 0) {
    return absl::DataLossError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

PlotData MakePlotData(const std::vector<SystemResults>& all) {
  auto value = [](const std::optional<double>& v) { return v ? Num(*v) : std::string("NaN"); };
  const SystemResults* r = nullptr;
  const SystemResults* g = nullptr;
  for (const SystemResults& s : all) (s.system == "rdmarpc" ? r : g) = &s;
  std::string latency = "# size_bytes rdmarpc_p50_us rdmarpc_p99_us grpc_p50_us grpc_p99_us\n";
  std::vector<size_t> sizes;
  for (const SystemResults& s : all) {
    for (const LatencyResult& l : s.latency) {
      if (std::find(sizes.begin(), sizes.end(), l.size_bytes) == sizes.end()) {
        sizes.push_back(l.size_bytes);
      }
    }
  }
  std::sort(sizes.begin(), sizes.end());
  auto lat = [](const SystemResults* s, size_t size, bool p99) -> std::optional<double> {
    if (s == nullptr) return std::nullopt;
    for (const LatencyResult& l : s->latency) {
      if (l.size_bytes == size) return p99 ? l.p99_us : l.p50_us;
    }
    return std::nullopt;
  };
  for (size_t size : sizes) {
    absl::StrAppend(&latency, size, " ", value(lat(r, size, false)), " ",
                    value(lat(r, size, true)), " ", value(lat(g, size, false)), " ",
                    value(lat(g, size, true)), "\n");
  }
  std::string rate = "# label rdmarpc_rpc_per_s grpc_rpc_per_s\n";
  auto rate_of = [](const SystemResults* s) -> std::optional<double> {
    if (s == nullptr || !s->rate) return std::nullopt;
    return s->rate->rpc_per_s;
  };
  const SystemResults* any = r != nullptr ? r : g;
  if (any != nullptr && any->rate) {
    absl::StrAppend(&rate, "\"", SizeLabel(any->rate->size_bytes), " x",
                    any->rate->in_flight_per_thread, "\" ", value(rate_of(r)), " ",
                    value(rate_of(g)), "\n");
  }
  std::string bandwidth = "# label rdmarpc_gb_per_s grpc_gb_per_s\n";
  auto bw = [](const SystemResults* s, size_t size, bool buffer) -> std::optional<double> {
    if (s == nullptr) return std::nullopt;
    for (const ThroughputResult& b : s->bandwidth) {
      if (b.size_bytes == size && b.buffer_payload == buffer) return b.gb_per_s;
    }
    return std::nullopt;
  };
  if (any != nullptr) {
    for (const ThroughputResult& b : any->bandwidth) {
      absl::StrAppend(&bandwidth, "\"", SizeLabel(b.size_bytes), " x", b.in_flight_per_thread,
                      b.buffer_payload ? " Buffer" : "", "\" ",
                      value(bw(r, b.size_bytes, b.buffer_payload)), " ",
                      value(bw(g, b.size_bytes, b.buffer_payload)), "\n");
    }
  }
  return PlotData{latency, rate, bandwidth};
}

}  // namespace rpcbench
}  // namespace rdmarpc
