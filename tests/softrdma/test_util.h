// test_util.h: helpers for softrdma tests: waiting for cm events and
// completions with a bound, and a connected pair of RC QPs over 127.0.0.1.
#ifndef RDMARPC_TESTS_SOFTRDMA_TEST_UTIL_H_
#define RDMARPC_TESTS_SOFTRDMA_TEST_UTIL_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace testing {

// Makes an fd non-blocking (as rdmarpc does with channel fds).
void SetNonBlocking(int fd);

// Waits up to `timeout_ms` for the next cm event on `ch`. Returns nullptr on
// timeout. The caller acks the event.
rdma_cm_event* NextEvent(rdma_event_channel* ch, int timeout_ms = 5000);

// Waits for the next event and checks its type; acks it and returns its
// status. Fails the test (returns -9999) on timeout or another type.
int ExpectEvent(rdma_event_channel* ch, rdma_cm_event_type type, int timeout_ms = 5000);
// A new id on `ch` (with `context`) bound to 127.0.0.1 on a port the kernel
// picks (get_src_port gives it) and listening with `backlog`; nullptr when
// a step fails (the id, if made, is destroyed).
rdma_cm_id* ListenOnLoopback(rdma_event_channel* ch, int backlog, void* context = nullptr);

// Polls `cq` until one WC arrives or `timeout_ms` passes. False on timeout.
bool PollOne(ibv_cq* cq, ibv_wc* wc, int timeout_ms = 5000);

// Polls `cq` for `timeout_ms` and returns whatever arrived.
std::vector<ibv_wc> Drain(ibv_cq* cq, int timeout_ms);

// Waits up to `timeout_ms` for an async event of `type` on `ctx`; events of
// other types (e.g. IBV_EVENT_COMM_EST of the pair's passive QP) are acked and
// skipped. The caller acks the event returned. False on timeout.
bool WaitAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_async_event* out,
                    int timeout_ms = 5000);

// Number of open fds of this process.
int CountOpenFds();

// RC QP attributes: `cq` for both queues, 4 sends and `max_recv` receives
// of one SGE each.
ibv_qp_init_attr RcAttr(ibv_cq* cq, uint32_t max_recv = 4);

// A fixture with the one softrdma device open (ctx_) from SetUp to
// TearDown.
class SoftDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  ibv_context* ctx_ = nullptr;
};

struct PairOptions {
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  uint32_t max_sge = 4;
  uint32_t max_inline = 64;
  // != 0: the client QP is an extended one (create_qp_ex(rdma_cm_id*, ...))
  // with these IBV_QP_EX_WITH_* send ops.
  uint64_t client_send_ops_flags = 0;
  uint8_t rnr_retry = 7;
  int cqe = 256;
  uint32_t server_srq_wr = 0;  // > 0: the server QP takes receives from an SRQ
  uint8_t server_responder_resources = 4;  // rdma_accept's; 0 refuses READs
  // Non-null: the server QP is made on this PD (owned by the caller), so two
  // pairs can share one server PD.
  ibv_pd* shared_server_pd = nullptr;
  // Non-null: the server QP's send and receive CQ (owned by the caller, who
  // destroys the pair first), so many pairs' server QPs share one CQ; the
  // pair's server_comp is then null.
  ibv_cq* shared_server_cq = nullptr;
  std::string client_private_data;
  std::string server_private_data;
  // Runs right after the server's rdma_accept, before either end is
  // ESTABLISHED (e.g. to post while the link is still being decided).
  std::function<void(rdma_cm_id* server, ibv_pd* server_pd)> after_accept;
  // Runs after after_accept, before the client takes its ESTABLISHED from
  // client_ch; every member of the pair is set but the private data at the
  // client.
  std::function<void(class ConnectedPair* pair)> before_client_established;
  // false: the pair stops there (ok() once accepted), and the test takes
  // both ends' remaining events itself.
  bool take_established = true;
};

// One listener, one client id and the accepted server id, each end with its
// own PD, CQ (shared by send and recv) and completion channel, connected.
class ConnectedPair {
 public:
  explicit ConnectedPair(const PairOptions& opt = PairOptions());
  ~ConnectedPair();
  bool ok() const { return ok_; }

  rdma_event_channel* server_ch = nullptr;
  rdma_event_channel* client_ch = nullptr;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* server = nullptr;
  rdma_cm_id* client = nullptr;
  ibv_pd* server_pd = nullptr;
  ibv_pd* client_pd = nullptr;
  ibv_comp_channel* server_comp = nullptr;
  ibv_comp_channel* client_comp = nullptr;
  ibv_cq* server_cq = nullptr;
  ibv_cq* client_cq = nullptr;
  ibv_srq* server_srq = nullptr;
  std::string private_data_at_server;  // from CONNECT_REQUEST
  std::string private_data_at_client;  // from ESTABLISHED

 private:
  bool ok_ = false;
  bool owns_server_pd_ = true;
  bool owns_server_cq_ = true;
};

// A registered buffer.
struct Buffer {
  Buffer(ibv_pd* pd, size_t size, int access);
  ~Buffer();
  uint64_t addr() const { return reinterpret_cast<uint64_t>(data.data()); }
  std::vector<uint8_t> data;
  ibv_mr* mr = nullptr;
};

// Posts one receive of `len` bytes at `buf` offset `off`.
int PostRecv(ibv_qp* qp, uint64_t wr_id, const Buffer& buf, size_t off, uint32_t len);

// Posts one signalled send-type WR with one SGE.
int PostSend(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, const Buffer& buf, size_t off,
             uint32_t len, uint32_t imm = 0, uint64_t remote_addr = 0, uint32_t rkey = 0,
             int extra_flags = 0);

}  // namespace testing
}  // namespace softrdma

#endif  // RDMARPC_TESTS_SOFTRDMA_TEST_UTIL_H_
