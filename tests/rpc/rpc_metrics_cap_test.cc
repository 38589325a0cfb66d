// rpc_metrics_cap_test.cc: the registry's cap on distinct methods. Its own
// binary: filling the registry changes what every later test in the process
// would see.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/metrics.h"
#include "runtime/rpc/metrics.h"
#include "tests/rpc/metrics_text.h"

namespace rdmarpc {
namespace test {
namespace {

TEST(CallMetricsCap, MethodsPastTheCapCountUnderOverflow) {
  // Fill the client side's registry with made-up names, then count one more.
  for (int i = 0; i < 4096; ++i) {
    internal::GetMethodMetrics(internal::MetricsSide::kClient, absl::StrCat("/cap.S/M", i),
                               experimental::RpcType::UNARY);
  }
  internal::MethodMetrics* late = internal::GetMethodMetrics(
      internal::MetricsSide::kClient, "/cap.S/OneTooMany", experimental::RpcType::UNARY);
  EXPECT_EQ(late->service(), "rdmarpc.metrics.Overflow");
  EXPECT_EQ(late->method(), "other");
  late->Started();
  const std::string text = RenderMetricsText();
  EXPECT_FALSE(absl::StrContains(text, "OneTooMany"));
  EXPECT_GE(MetricValue(text, "grpc_client_started_total",
                        CallLabels("rdmarpc.metrics.Overflow", "other", "unary"))
                .value_or(0),
            1);
  // A name counted before the cap keeps its own series.
  EXPECT_EQ(internal::GetMethodMetrics(internal::MetricsSide::kClient, "/cap.S/M7",
                                       experimental::RpcType::UNARY)
                ->method(),
            "M7");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
