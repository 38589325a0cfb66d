// transport_stats.cc: TransportStats, read off the engines' counters
// (engine_stats.h).
#include "runtime/transport/transport_stats.h"

#include "runtime/transport/engine_stats.h"

namespace rdmarpc::internal {

TransportStats GetTransportStats() {
  const EngineTotals t = SumEngineStats();
  TransportStats s;
  s.payload_bytes_copied = static_cast<uint64_t>(t.payload_bytes_copied);
  for (int i = 0; i < static_cast<int>(WrOpcode::kCount); ++i) {
    if (i < static_cast<int>(WrOpcode::kRecv)) s.send_wrs += static_cast<uint64_t>(t.wrs_posted[i]);
  }
  s.signalled_send_wrs = static_cast<uint64_t>(t.signalled_send_wrs);
  s.inline_send_wrs = static_cast<uint64_t>(t.inline_send_wrs);
  return s;
}

void ResetTransportStats() { ResetEngineCounters(); }

}  // namespace rdmarpc::internal
