#include "runtime/transport/transport_stats.h"

#include <atomic>

namespace rdmarpc::internal {
namespace {
std::atomic<uint64_t> g_payload_bytes_copied{0};
}  // namespace

TransportStats GetTransportStats() {
  TransportStats s;
  s.payload_bytes_copied = g_payload_bytes_copied.load(std::memory_order_relaxed);
  return s;
}

void ResetTransportStats() { g_payload_bytes_copied.store(0, std::memory_order_relaxed); }

void CountPayloadCopy(size_t bytes) {
  g_payload_bytes_copied.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace rdmarpc::internal
