// parse.cc: rpc_bench's list-valued flags (parse.h).
#include "bench/rpc/parse.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace rdmarpc {
namespace rpcbench {

absl::StatusOr<std::vector<std::string>> ParseList(const std::string& flag, const std::string& text,
                                                   const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": unknown '", item,
                                                     "', expected one of ",
                                                     absl::StrJoin(allowed, ",")));
    }
    out.emplace_back(item);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::StatusOr<size_t> ParseSize(const std::string& flag, absl::string_view text,
                                 size_t max_bytes) {
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(text, &bytes) || bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", text,
                                                   "' is not a size in bytes from 0 to ",
                                                   max_bytes));
  }
  return static_cast<size_t>(bytes);
}

absl::StatusOr<std::vector<size_t>> ParseSizes(const std::string& flag, const std::string& text) {
  std::vector<size_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<size_t> size = ParseSize(flag, item);
    if (!size.ok()) return size.status();
    out.push_back(*size);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::StatusOr<std::vector<BudgetRun>> ParseBudgetRuns(const std::string& text) {
  std::vector<BudgetRun> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, 'x');
    BudgetRun run;
    absl::StatusOr<size_t> size =
        parts.size() == 2 ? ParseSize("budget_runs", parts[0])
                          : absl::InvalidArgumentError("--budget_runs: want SIZExIN_FLIGHT");
    if (!size.ok()) return size.status();
    run.size_bytes = *size;
    if (!absl::SimpleAtoi(parts[1], &run.in_flight) || run.in_flight < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budget_runs: '", item, "' needs SIZExIN_FLIGHT with IN_FLIGHT >= 1"));
    }
    out.push_back(run);
  }
  if (out.empty()) return absl::InvalidArgumentError("--budget_runs is empty");
  return out;
}

}  // namespace rpcbench
}  // namespace rdmarpc
