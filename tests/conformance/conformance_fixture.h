// conformance_fixture.h: the shared fixture of the verbs conformance suite.
//
// Every test of tests/conformance/ goes through the runtime's verbs binding
// (runtime/verbs/verbs.h: Verbs() for the control plane, the verbs.h inlines
// ibv_post_send / ibv_post_recv / ibv_poll_cq for the data path), so the same
// test files run on softrdma and on rdma-core. The provider is the binding's:
// --rdmarpc_provider=soft|rdma-core|auto or $RDMARPC_PROVIDER.
//
// ConformanceTest::SetUp skips the test (GTEST_SKIP, with the reason) when the
// provider has no device, then builds one connected RC QP pair through
// rdma_cm on $CONFORMANCE_ADDR (default 127.0.0.1, ephemeral port):
//
//   client QP (client_qp(), client_pd(), client_cq())
//        <-- rdma_cm RC connection -->
//   server QP (server_qp(), server_pd(), server_cq())
//
// Each side has its own PD and one CQ shared by its send and receive queues,
// with a completion channel. Both ends live in this process, on the device
// that $CONFORMANCE_ADDR belongs to.
//
// Usage:
//
//   class SendConformance : public rdmarpc::conformance::ConformanceTest {};
//   TEST_F(SendConformance, DeliversBytes) {
//     std::unique_ptr<Region> src = NewRegion(client_pd(), 64, IBV_ACCESS_LOCAL_WRITE);
//     std::unique_ptr<Region> dst = NewRegion(server_pd(), 64, IBV_ACCESS_LOCAL_WRITE);
//     ASSERT_EQ(PostRecv(server_qp(), 1, *dst, 0, 64), 0);
//     ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *src, 0, 64), 0);
//     absl::StatusOr<ibv_wc> wc = PollOne(server_cq());
//     ASSERT_TRUE(wc.ok()) << wc.status();
//     EXPECT_EQ(wc->byte_len, 64u);
//   }
//
// A test that needs other QP caps or rdma_cm parameters overrides
// DefaultOptions(), or calls Connect() for more pairs (they share the
// fixture's PDs and CQs unless the options say otherwise).
//
// Threads: everything runs on the test's thread; the fixture starts none.
#ifndef RDMARPC_TESTS_CONFORMANCE_CONFORMANCE_FIXTURE_H_
#define RDMARPC_TESTS_CONFORMANCE_CONFORMANCE_FIXTURE_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace conformance {

// The IPv4 address the suite listens and connects on: $CONFORMANCE_ADDR, or
// 127.0.0.1 when unset. On a RoCE/IB host set it to an address of the RDMA
// netdev (IPoIB or the RoCE interface), since rdma_cm picks the device by it.
std::string ConformanceAddr();

// The provider name the binding chose ("soft" or "rdma-core").
std::string ProviderName();
bool OnSoftProvider();

// Caps of a QP and the rdma_cm parameters of one connection.
struct QpOptions {
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  uint32_t max_send_sge = 4;
  uint32_t max_recv_sge = 4;
  uint32_t max_inline_data = 64;  // bytes
  bool sq_sig_all = false;        // false: only IBV_SEND_SIGNALED WRs complete
  // rnr_retry of the CLIENT QP (0..7, 7 = forever). rdma_cm carries it as the
  // server's rdma_accept conn_param.rnr_retry_count: "the number of times a
  // send from the remote peer should be retried" (rdma_accept(3)).
  uint8_t client_rnr_retry = 7;
  uint8_t server_rnr_retry = 7;  // likewise, via rdma_connect's conn_param
  // RDMA READ / atomic requests each side accepts as responder
  // (conn_param.responder_resources); 0 makes READs and atomics fail.
  uint8_t responder_resources = 4;
  // Non-null: the server QP takes its receives from this SRQ (made on
  // server_pd()); it must outlive the connection.
  ibv_srq* server_srq = nullptr;
};

// One connected RC QP pair. Destroying it destroys both QPs, then both cm ids
// (each side's peer sees RDMA_CM_EVENT_DISCONNECTED if still connected).
struct Connection {
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  ibv_qp* client_qp() const { return client_id == nullptr ? nullptr : client_id->qp; }
  ibv_qp* server_qp() const { return server_id == nullptr ? nullptr : server_id->qp; }

  internal::CmIdPtr client_id;   // events on the fixture's client_events()
  internal::CmIdPtr server_id;   // events on the fixture's server_events()
  internal::QpOwner client_qp_owner;
  internal::QpOwner server_qp_owner;
  ibv_qp_cap client_cap{};  // caps as the provider granted them (ibv_query_qp)
  ibv_qp_cap server_cap{};
};

// A registered, page-aligned, zero-filled buffer. Owns its memory and MR; the
// MR is deregistered (or not, after Deregister()) before the memory is freed.
class Region {
 public:
  Region(size_t size, internal::MrPtr mr, uint8_t* data);
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  uint64_t addr(size_t offset = 0) const { return reinterpret_cast<uint64_t>(data_) + offset; }
  ibv_mr* mr() const { return mr_.get(); }
  uint32_t lkey() const { return lkey_; }  // still valid to read after Deregister()
  uint32_t rkey() const { return rkey_; }
  // ibv_dereg_mr now; returns its result (0 or an errno value). The buffer
  // stays allocated, so a stale key refers to memory that still exists.
  int Deregister();

 private:
  size_t size_;
  internal::MrPtr mr_;
  uint8_t* data_;
  uint32_t lkey_;
  uint32_t rkey_;
};

class ConformanceTest : public ::testing::Test {
 protected:
  // Skips the test (GTEST_SKIP, with the reason) when the provider has no
  // device; otherwise builds the default pair, or fails the test saying
  // which call failed. A subclass overriding SetUp calls this first and
  // returns if IsSkipped() || HasFatalFailure(). TearDown destroys the pair,
  // listener, CQs, channels and PDs, in that order.
  void SetUp() override;
  void TearDown() override;

  // Options of the pair SetUp builds; override to change them for a suite.
  virtual QpOptions DefaultOptions() const { return QpOptions(); }

  // Another connected pair through the fixture's listener, PDs and CQs,
  // owned by the caller (destroy it before the fixture's TearDown, or keep
  // it in a member reset there). Errors: the errno of the rdma_cm / verbs
  // call that failed, mapped by internal::ErrnoToStatus and naming the call
  // (e.g. INVALID_ARGUMENT "rdma_create_qp: Invalid argument" for caps
  // beyond the device's); DEADLINE_EXCEEDED when an expected cm event did
  // not come within 5 s; FAILED_PRECONDITION when another event came, or
  // an id resolved to another device than the first one.
  absl::StatusOr<std::unique_ptr<Connection>> Connect(const QpOptions& options);

  // The default pair and the objects it is made of.
  Connection& pair() { return *pair_; }
  ibv_qp* client_qp() const { return pair_->client_qp(); }
  ibv_qp* server_qp() const { return pair_->server_qp(); }
  ibv_context* context() const { return context_; }
  const ibv_device_attr& device_attr() const { return device_attr_; }
  ibv_pd* client_pd() const { return client_pd_.get(); }
  ibv_pd* server_pd() const { return server_pd_.get(); }
  ibv_cq* client_cq() const { return client_cq_; }
  ibv_cq* server_cq() const { return server_cq_; }
  ibv_comp_channel* client_comp() const { return client_comp_.get(); }
  ibv_comp_channel* server_comp() const { return server_comp_.get(); }
  rdma_event_channel* client_events() const { return client_events_.get(); }
  rdma_event_channel* server_events() const { return server_events_.get(); }
  // The cq_context each CQ was created with (returned by ibv_get_cq_event).
  void* client_cq_context() { return &client_cq_; }
  void* server_cq_context() { return &server_cq_; }

  // A registered region of `size` bytes on `pd` with `access` flags; fails
  // the test (returns nullptr) if ibv_reg_mr fails.
  std::unique_ptr<Region> NewRegion(ibv_pd* pd, size_t size, int access);

  // --- Posting (return the verbs call's result: 0 or an errno value) ------
  // One receive with one SGE {region.addr(offset), length, region.lkey()}.
  static int PostRecv(ibv_qp* qp, uint64_t wr_id, const Region& region, size_t offset,
                      uint32_t length);
  // One send-type WR with one SGE, signalled unless `send_flags` is given
  // without IBV_SEND_SIGNALED. `imm_data` is stored as given (network order
  // is the caller's business, as in ibv_post_send(3)).
  static int PostSend(ibv_qp* qp, ibv_wr_opcode opcode, uint64_t wr_id, const Region& region,
                      size_t offset, uint32_t length, uint64_t remote_addr = 0,
                      uint32_t rkey = 0, uint32_t imm_data = 0,
                      int send_flags = IBV_SEND_SIGNALED);

  // --- Completions ---------------------------------------------------------
  // The next WC of `cq`, polling until `timeout`. DEADLINE_EXCEEDED when none
  // came ("no completion on <cq> within 5s"), INTERNAL when ibv_poll_cq
  // returned a negative value (the CQ is in error).
  static absl::StatusOr<ibv_wc> PollOne(ibv_cq* cq, absl::Duration timeout = absl::Seconds(5));
  // Exactly `n` WCs, or DEADLINE_EXCEEDED naming how many came.
  static absl::StatusOr<std::vector<ibv_wc>> PollN(ibv_cq* cq, int n,
                                                    absl::Duration timeout = absl::Seconds(5));
  // Everything `cq` yields during `window` (to check that nothing more comes).
  static std::vector<ibv_wc> DrainFor(ibv_cq* cq, absl::Duration window);

  // The next rdma_cm event on `channel` must be `type`; it is acked. OK, or
  // DEADLINE_EXCEEDED / FAILED_PRECONDITION naming the event that came.
  static absl::Status ExpectCmEvent(rdma_event_channel* channel, rdma_cm_event_type type,
                                    absl::Duration timeout = absl::Seconds(5));

  // ibv_query_qp's state of `qp`, or -1 when the query fails.
  static int QpState(ibv_qp* qp);

 private:
  absl::Status BuildFixture();

  internal::EventChannelPtr client_events_;
  internal::EventChannelPtr server_events_;
  internal::CmIdPtr listener_;
  sockaddr_in listen_addr_{};
  ibv_context* context_ = nullptr;  // the cm ids' device context (not owned)
  ibv_device_attr device_attr_{};
  internal::PdPtr client_pd_;
  internal::PdPtr server_pd_;
  internal::CompChannelPtr client_comp_;
  internal::CompChannelPtr server_comp_;
  ibv_cq* client_cq_ = nullptr;  // owned; raw so &client_cq_ can be the cq_context
  ibv_cq* server_cq_ = nullptr;
  std::unique_ptr<Connection> pair_;
};

// Names for failure messages: "IBV_WC_REM_ACCESS_ERR (10)".
std::string WcStatusName(int status);

}  // namespace conformance
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_CONFORMANCE_CONFORMANCE_FIXTURE_H_
