// verbs_features_util.h: a connected pair of RC QPs made only through the
// runtime's verbs table (runtime/verbs/verbs.h), so the conformance tests of
// memory windows, async events, SRQ limits and QP types run unchanged on
// softrdma and on a real NIC through rdma-core.
//
// Provider: $RDMARPC_PROVIDER (soft | rdma-core | auto), as the runtime.
// Address: $CONFORMANCE_ADDR (default 127.0.0.1); on a NIC give the
// IPv4 address of an RDMA-capable interface. A test that needs a device the
// provider does not have calls GTEST_SKIP with the reason (see Skip()).
#ifndef RDMARPC_TESTS_CONFORMANCE_VERBS_FEATURES_UTIL_H_
#define RDMARPC_TESTS_CONFORMANCE_VERBS_FEATURES_UTIL_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace conformance {

const internal::VerbsApi& Api();
bool IsSoft();

// Empty when the provider has a device; else why not (for GTEST_SKIP).
std::string NoDeviceReason();

// Waits up to `timeout_ms` for an async event of `type` on `ctx`, acking and
// skipping others. The caller acks the returned event. False on timeout.
bool WaitAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_async_event* out,
                    int timeout_ms = 5000);
// Events queued now (acked), without waiting.
std::vector<ibv_async_event> TakeQueuedEvents(ibv_context* ctx);

bool PollOne(ibv_cq* cq, ibv_wc* wc, int timeout_ms = 5000);
std::vector<ibv_wc> Drain(ibv_cq* cq, int timeout_ms);

struct PairConfig {
  uint32_t max_wr = 16;
  uint32_t server_srq_wr = 0;  // > 0: the server QP takes receives from an SRQ
  uint8_t server_responder_resources = 4;
};

// A listener, a client id and the accepted server id, each end with its own
// PD and CQ, connected with rdma_cm over the conformance address.
class Pair {
 public:
  explicit Pair(const PairConfig& config = PairConfig());
  ~Pair();
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  rdma_event_channel* server_ch = nullptr;
  rdma_event_channel* client_ch = nullptr;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* server = nullptr;
  rdma_cm_id* client = nullptr;
  ibv_pd* server_pd = nullptr;
  ibv_pd* client_pd = nullptr;
  ibv_cq* server_cq = nullptr;
  ibv_cq* client_cq = nullptr;
  ibv_srq* server_srq = nullptr;

 private:
  bool Fail(const std::string& what);
  bool ok_ = false;
  std::string error_;
};

// A registered buffer.
struct Buffer {
  Buffer(ibv_pd* pd, size_t size, int access);
  ~Buffer();
  uint64_t addr() const { return reinterpret_cast<uint64_t>(data.data()); }
  std::vector<uint8_t> data;
  ibv_mr* mr = nullptr;
};

int PostRecv(ibv_qp* qp, uint64_t wr_id, const Buffer& buf, size_t off, uint32_t len);
// One signalled WR with one SGE.
int PostSend(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, const Buffer& buf, size_t off,
             uint32_t len, uint64_t remote_addr = 0, uint32_t rkey = 0);
ibv_qp_state StateOf(ibv_qp* qp);

// Skips the test, printing why, when the provider has no device.
#define RDMARPC_REQUIRE_DEVICE()                                    \
  do {                                                              \
    const std::string why = ::rdmarpc::conformance::NoDeviceReason(); \
    if (!why.empty()) GTEST_SKIP() << why;                          \
  } while (0)

// A connected pair or a skip / failure with the reason.
#define RDMARPC_REQUIRE_PAIR(p)                   \
  do {                                            \
    ASSERT_TRUE((p).ok()) << (p).error();         \
  } while (0)

}  // namespace conformance
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_CONFORMANCE_VERBS_FEATURES_UTIL_H_
