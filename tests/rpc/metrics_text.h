// metrics_text.h: reads samples back out of Prometheus' text exposition
// format (rdmarpc/metrics.h), for tests that assert exact values.
#ifndef RDMARPC_TESTS_RPC_METRICS_TEXT_H_
#define RDMARPC_TESTS_RPC_METRICS_TEXT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace rdmarpc {
namespace test {

using Labels = std::map<std::string, std::string>;

struct MetricSample {
  std::string name;
  Labels labels;
  double value = 0;
};

// Every sample line of `text` (comments skipped). Label values are taken
// as written between the quotes; the tests' values need no unescaping.
inline std::vector<MetricSample> ParseMetrics(absl::string_view text) {
  std::vector<MetricSample> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    MetricSample s;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    if (brace != absl::string_view::npos && brace < space) {
      s.name = std::string(line.substr(0, brace));
      const size_t close = line.rfind('}');
      absl::string_view labels = line.substr(brace + 1, close - brace - 1);
      for (absl::string_view kv : absl::StrSplit(labels, "\",", absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        std::string value(absl::StripSuffix(kv.substr(eq + 2), "\""));
        s.labels[std::string(kv.substr(0, eq))] = value;
      }
    } else {
      s.name = std::string(line.substr(0, space));
    }
    if (!absl::SimpleAtod(line.substr(space + 1), &s.value)) continue;
    out.push_back(std::move(s));
  }
  return out;
}

// The value of the one sample named `name` with exactly `labels`, or
// nullopt when there is none.
inline std::optional<double> MetricValue(absl::string_view text, absl::string_view name,
                                         const Labels& labels = {}) {
  for (const MetricSample& s : ParseMetrics(text)) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

// Labels of a call metric.
inline Labels CallLabels(absl::string_view service, absl::string_view method,
                         absl::string_view type) {
  return {{"grpc_service", std::string(service)},
          {"grpc_method", std::string(method)},
          {"grpc_type", std::string(type)}};
}
inline Labels With(Labels labels, const std::string& key, const std::string& value) {
  labels[key] = value;
  return labels;
}

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_METRICS_TEXT_H_
