// parse.h: rpc_bench's list-valued flags. Each parser returns
// INVALID_ARGUMENT naming the flag and the offending item.
#ifndef RDMARPC_BENCH_RPC_PARSE_H_
#define RDMARPC_BENCH_RPC_PARSE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/rpc/results.h"

namespace rdmarpc {
namespace rpcbench {

// Largest payload rpc_bench sends, in bytes: rdmarpc's default
// max_message_bytes (64 MiB) less room for the protobuf framing.
inline constexpr size_t kMaxPayloadBytes = 64 * 1024 * 1024 - 4096;
// Largest payload of the `mixed` workload's large calls, in bytes: its
// channel's and the server's max_message_bytes (kLargeMessageBytes) less
// the same room.
inline constexpr size_t kMaxLargePayloadBytes = kLargeMessageBytes - 4096;

// Comma-separated items of `text`, each one of `allowed`; empty items are
// skipped, an empty list is an error.
absl::StatusOr<std::vector<std::string>> ParseList(const std::string& flag, const std::string& text,
                                                   const std::vector<std::string>& allowed);
// One size in bytes, 0..max_bytes.
absl::StatusOr<size_t> ParseSize(const std::string& flag, absl::string_view text,
                                 size_t max_bytes = kMaxPayloadBytes);
// Comma-separated sizes in bytes.
absl::StatusOr<std::vector<size_t>> ParseSizes(const std::string& flag, const std::string& text);
// "SIZExIN_FLIGHT,..." with IN_FLIGHT >= 1 (--budget_runs).
absl::StatusOr<std::vector<BudgetRun>> ParseBudgetRuns(const std::string& text);

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_PARSE_H_
