// engine_stats.cc: the registry of engines' counters (see engine_stats.h).
#include "runtime/transport/engine_stats.h"

#include <algorithm>

#include "absl/synchronization/mutex.h"

namespace rdmarpc {
namespace internal {
namespace {

struct Registry {
  absl::Mutex mu;
  std::vector<const EngineStats*> live ABSL_GUARDED_BY(mu);
  EngineTotals ended ABSL_GUARDED_BY(mu);     // counters of engines that ended
  EngineTotals baseline ABSL_GUARDED_BY(mu);  // counters at the last reset
};

Registry& GetRegistry() {
  static Registry* const registry = new Registry;  // never destroyed: engines may outlive main
  return *registry;
}

// Adds the counters (not the gauges) of `s` to `t`.
void AddCounters(const EngineStats& s, EngineTotals* t) {
  for (int i = 0; i < static_cast<int>(WrOpcode::kCount); ++i)
    t->wrs_posted[i] += s.wrs_posted[i].Get();
  t->signalled_send_wrs += s.signalled_send_wrs.Get();
  t->inline_send_wrs += s.inline_send_wrs.Get();
  t->send_doorbells += s.send_doorbells.Get();
  t->recv_doorbells += s.recv_doorbells.Get();
  t->send_completions += s.send_completions.Get();
  t->recv_completions += s.recv_completions.Get();
  for (int i = 0; i < kNumWcStatus; ++i) t->wc_errors[i] += s.wc_errors[i].Get();
  t->wc_flushed += s.wc_flushed.Get();
  t->credit_stalls += s.credit_stalls.Get();
  t->credit_stall_ns += s.credit_stall_ns.Get();
  for (int i = 0; i < static_cast<int>(RendezvousDirection::kCount); ++i) {
    t->rendezvous_transfers[i] += s.rendezvous_transfers[i].Get();
    t->rendezvous_bytes[i] += s.rendezvous_bytes[i].Get();
  }
  t->keepalive_probes += s.keepalive_probes.Get();
  t->payload_bytes_copied += s.payload_bytes_copied.Get();
  t->connections_established += s.connections_established.Get();
  t->connections_closed += s.connections_closed.Get();
  t->loop_sleeps += s.loop_sleeps.Get();
  t->spins_refused += s.spins_refused.Get();
  t->cq_resizes += s.cq_resizes.Get();
}

void AddGauges(const EngineStats& s, EngineTotals* t) {
  t->send_buffers_in_use += s.send_buffers_taken.Get() - s.send_buffers_returned.Get();
  t->send_buffers_capacity += s.send_buffers_capacity.Get();
  for (int i = 0; i < kNumCountedConnStates; ++i) {
    t->connections_in_state[i] += s.connections_in_state[i].Get();
  }
}

// `t` minus the counters of `base` (gauges untouched).
void SubtractCounters(const EngineTotals& base, EngineTotals* t) {
  for (int i = 0; i < static_cast<int>(WrOpcode::kCount); ++i)
    t->wrs_posted[i] -= base.wrs_posted[i];
  t->signalled_send_wrs -= base.signalled_send_wrs;
  t->inline_send_wrs -= base.inline_send_wrs;
  t->send_doorbells -= base.send_doorbells;
  t->recv_doorbells -= base.recv_doorbells;
  t->send_completions -= base.send_completions;
  t->recv_completions -= base.recv_completions;
  for (int i = 0; i < kNumWcStatus; ++i) t->wc_errors[i] -= base.wc_errors[i];
  t->wc_flushed -= base.wc_flushed;
  t->credit_stalls -= base.credit_stalls;
  t->credit_stall_ns -= base.credit_stall_ns;
  for (int i = 0; i < static_cast<int>(RendezvousDirection::kCount); ++i) {
    t->rendezvous_transfers[i] -= base.rendezvous_transfers[i];
    t->rendezvous_bytes[i] -= base.rendezvous_bytes[i];
  }
  t->keepalive_probes -= base.keepalive_probes;
  t->payload_bytes_copied -= base.payload_bytes_copied;
  t->connections_established -= base.connections_established;
  t->connections_closed -= base.connections_closed;
  t->loop_sleeps -= base.loop_sleeps;
  t->spins_refused -= base.spins_refused;
  t->cq_resizes -= base.cq_resizes;
}

EngineTotals SumLocked(Registry& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  EngineTotals t = r.ended;
  for (const EngineStats* s : r.live) {
    AddCounters(*s, &t);
    AddGauges(*s, &t);
  }
  t.engines = static_cast<int>(r.live.size());
  return t;
}

}  // namespace

const char* WrOpcodeName(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
      return "send";
    case WrOpcode::kSendWithImm:
      return "send_with_imm";
    case WrOpcode::kRdmaWrite:
      return "rdma_write";
    case WrOpcode::kRdmaWriteWithImm:
      return "rdma_write_with_imm";
    case WrOpcode::kRdmaRead:
      return "rdma_read";
    case WrOpcode::kRecv:
      return "recv";
    case WrOpcode::kBindMw:
      return "bind_mw";
    case WrOpcode::kLocalInv:
      return "local_inv";
    case WrOpcode::kCount:
      break;
  }
  return "unknown";
}

const char* WcStatusName(int status) {
  static constexpr const char* kNames[kNumWcStatus] = {"SUCCESS",
                                                       "LOC_LEN_ERR",
                                                       "LOC_QP_OP_ERR",
                                                       "LOC_EEC_OP_ERR",
                                                       "LOC_PROT_ERR",
                                                       "WR_FLUSH_ERR",
                                                       "MW_BIND_ERR",
                                                       "BAD_RESP_ERR",
                                                       "LOC_ACCESS_ERR",
                                                       "REM_INV_REQ_ERR",
                                                       "REM_ACCESS_ERR",
                                                       "REM_OP_ERR",
                                                       "RETRY_EXC_ERR",
                                                       "RNR_RETRY_EXC_ERR",
                                                       "LOC_RDD_VIOL_ERR",
                                                       "REM_INV_RD_REQ_ERR",
                                                       "REM_ABORT_ERR",
                                                       "INV_EECN_ERR",
                                                       "INV_EEC_STATE_ERR",
                                                       "FATAL_ERR",
                                                       "RESP_TIMEOUT_ERR",
                                                       "GENERAL_ERR",
                                                       "TM_ERR",
                                                       "TM_RNDV_INCOMPLETE"};
  return kNames[std::clamp(status, 0, kNumWcStatus - 1)];
}

void RegisterEngineStats(const EngineStats* stats) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.live.push_back(stats);
}

void UnregisterEngineStats(const EngineStats* stats) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = std::find(r.live.begin(), r.live.end(), stats);
  if (it == r.live.end()) return;
  AddCounters(*stats, &r.ended);
  r.live.erase(it);
}

EngineTotals SumEngineStats() {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  EngineTotals t = SumLocked(r);
  SubtractCounters(r.baseline, &t);
  return t;
}

void ResetEngineCounters() {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.baseline = SumLocked(r);
}

}  // namespace internal
}  // namespace rdmarpc
