#include "runtime/transport/transport_stats.h"

#include <atomic>

namespace rdmarpc::internal {
namespace {
std::atomic<uint64_t> g_payload_bytes_copied{0};
std::atomic<uint64_t> g_send_wrs{0};
std::atomic<uint64_t> g_signalled_send_wrs{0};
std::atomic<uint64_t> g_inline_send_wrs{0};
}  // namespace

TransportStats GetTransportStats() {
  TransportStats s;
  s.payload_bytes_copied = g_payload_bytes_copied.load(std::memory_order_relaxed);
  s.send_wrs = g_send_wrs.load(std::memory_order_relaxed);
  s.signalled_send_wrs = g_signalled_send_wrs.load(std::memory_order_relaxed);
  s.inline_send_wrs = g_inline_send_wrs.load(std::memory_order_relaxed);
  return s;
}

void ResetTransportStats() {
  g_payload_bytes_copied.store(0, std::memory_order_relaxed);
  g_send_wrs.store(0, std::memory_order_relaxed);
  g_signalled_send_wrs.store(0, std::memory_order_relaxed);
  g_inline_send_wrs.store(0, std::memory_order_relaxed);
}

void CountSendWr(bool signalled, bool is_inline) {
  g_send_wrs.fetch_add(1, std::memory_order_relaxed);
  if (signalled) g_signalled_send_wrs.fetch_add(1, std::memory_order_relaxed);
  if (is_inline) g_inline_send_wrs.fetch_add(1, std::memory_order_relaxed);
}

void CountPayloadCopy(size_t bytes) {
  g_payload_bytes_copied.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace rdmarpc::internal
