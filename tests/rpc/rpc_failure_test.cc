// rpc_failure_test.cc: Channel and Server under injected device faults
// (softrdma/faults.h), each with its exact expected outcome:
//  - a failure at each connection set-up step (PD, CQ, CQ arm, QP, MR), on
//    the client and on the server: one clear error or a usable connection,
//    never a half-made one, and every resource freed;
//  - a 64 KiB memlock cap against a 64 MiB large-buffer pool at Start;
//  - the server rejecting for lack of registered memory (kRejectNoResources);
//  - receive completions delivered before the send completions they answer,
//    with the send queue as deep as the credit window and the window full.
#include <dirent.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/faults.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/transport.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

using softrdma::FaultOp;

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;  // ".", ".." and the DIR's own fd
}

// What must come back to its value once every Channel and Server is gone.
struct Footprint {
  static Footprint Now() {
    const softrdma::Stats s = softrdma::GetStats();
    return Footprint{s.live_cm_ids, s.live_qps, s.live_cqs, s.live_mrs, s.live_pds,
                     CountOpenFds()};
  }
  bool operator==(const Footprint& o) const {
    return cm_ids == o.cm_ids && qps == o.qps && cqs == o.cqs && mrs == o.mrs && pds == o.pds &&
           fds == o.fds;
  }
  std::string ToString() const {
    return absl::StrCat("cm_ids ", cm_ids, " qps ", qps, " cqs ", cqs, " mrs ", mrs, " pds ", pds,
                        " fds ", fds);
  }
  int64_t cm_ids, qps, cqs, mrs, pds;
  int fds;
};

// Waits (bounded) for teardown, which may finish on loop threads.
Footprint WaitForFootprint(const Footprint& want) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  Footprint now = Footprint::Now();
  while (!(now == want) && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
    now = Footprint::Now();
  }
  return now;
}

absl::Status CallEcho(Channel* ch, const std::string& text) {
  EchoRequest req;
  req.set_text(text);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = Echo(ch, &ctx, req, &resp);
  if (s.ok() && resp.text() != text) return absl::DataLossError("wrong echo: " + resp.text());
  return s;
}

// Makes one server and channel and a call, so the lazily started pieces of
// the process (softrdma's progress thread and context, glog) exist before a
// test takes its footprint.
void WarmUp() {
  EchoFixture f;
  ASSERT_TRUE(CallEcho(f.channel.get(), "warm").ok());
}

// The footprint once the teardown of earlier tests has settled (sockets of
// closed connections close on softrdma's progress thread, a little later).
Footprint SettledFootprint() {
  Footprint last = Footprint::Now();
  absl::Time stable_since = absl::Now();
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (absl::Now() - stable_since < absl::Milliseconds(200) && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
    const Footprint now = Footprint::Now();
    if (!(now == last)) {
      last = now;
      stable_since = absl::Now();
    }
  }
  return last;
}

class Failure : public ::testing::Test {
 protected:
  void SetUp() override { WarmUp(); }
  void TearDown() override { softrdma::ResetFaults(); }
};

struct SetupFault {
  const char* name;
  FaultOp op;
  int count;
  int err;
  int after;  // calls of `op` that go through first (the client's, for a server fault)
  absl::StatusCode code;
  const char* message;  // the call's status message contains this
};

void PrintTo(const SetupFault& f, std::ostream* os) { *os << f.name; }

class SetupStep : public Failure, public ::testing::WithParamInterface<SetupFault> {};

// With pool_size 1 and one loop thread, the first call makes exactly one
// client connection: its CQ (in the loop's thread domain) and PD (per loop /
// channel, made once), its QP
// (rdma_create_qp, retried once without inline data) and two MRs (receive
// ring, send slab); then the server's worker does the same for its side.
TEST_P(SetupStep, FailsOneCallWithTheStepAndErrnoThenConnectsAndFreesAll) {
  const SetupFault& fault = GetParam();
  const Footprint before = SettledFootprint();
  {
    ChannelOptions co;
    co.pool_size = 1;
    co.engine_threads = 1;
    ServerOptions so;
    so.num_workers = 1;
    EchoFixture f(so, co);
    softrdma::FailNext(fault.op, fault.count, fault.err, fault.after);
    absl::Status s = CallEcho(f.channel.get(), "first");
    EXPECT_EQ(s.code(), fault.code) << s;
    EXPECT_NE(s.message().find(fault.message), absl::string_view::npos) << s;
    softrdma::FailNext(fault.op, 0, 0);
    // The failed connection is gone, not half-made: the pool makes a new one
    // and it works (a CQ left unarmed would leave this call hanging).
    EXPECT_TRUE(CallEcho(f.channel.get(), "second").ok());
    EXPECT_TRUE(CallEcho(f.channel.get(), "third").ok());
    EXPECT_EQ(f.service.calls(), 2);
  }
  const Footprint after = WaitForFootprint(before);
  EXPECT_EQ(after, before) << "before: " << before.ToString() << "; after: " << after.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Client, SetupStep,
    ::testing::Values(
        SetupFault{"Pd", FaultOp::kAllocPd, 1, ENOMEM, 0, absl::StatusCode::kResourceExhausted,
                   "ibv_alloc_pd: Cannot allocate memory"},
        SetupFault{"Cq", FaultOp::kCreateCq, 1, ENOMEM, 0, absl::StatusCode::kResourceExhausted,
                   "ibv_create_cq_ex: Cannot allocate memory"},  // in the loop's thread domain
        SetupFault{"Arm", FaultOp::kReqNotifyCq, 1, EIO, 0, absl::StatusCode::kUnavailable,
                   "ibv_req_notify_cq: Input/output error"},
        SetupFault{"Qp", FaultOp::kCreateQp, 2, ENOSPC, 0, absl::StatusCode::kResourceExhausted,
                   "rdma_create_qp: No space left on device"},
        SetupFault{"Mr", FaultOp::kRegMr, 1, ENOMEM, 0, absl::StatusCode::kResourceExhausted,
                   "ibv_reg_mr: Cannot allocate memory (RLIMIT_MEMLOCK"}),
    [](const ::testing::TestParamInfo<SetupFault>& i) { return std::string(i.param.name); });

// A server that cannot set up its side rejects the connection; the client
// learns why as far as the reject reason tells: no resources (the server's
// errno was ENOMEM / ENOSPC), or a plain reject.
INSTANTIATE_TEST_SUITE_P(
    Server, SetupStep,
    ::testing::Values(
        SetupFault{"Cq", FaultOp::kCreateCq, 1, ENOMEM, 1, absl::StatusCode::kResourceExhausted,
                   "has no room for another connection"},
        // Event loops re-arm their CQ whenever they go idle, so only the set-up
        // arms are counted: the client's first, then the server's.
        SetupFault{"Arm", FaultOp::kArmNewCq, 1, EIO, 1, absl::StatusCode::kUnavailable,
                   "rejected by the server"},
        SetupFault{"Qp", FaultOp::kCreateQp, 2, ENOSPC, 1, absl::StatusCode::kResourceExhausted,
                   "has no room for another connection"},
        SetupFault{"Mr", FaultOp::kRegMr, 1, ENOMEM, 2, absl::StatusCode::kResourceExhausted,
                   "has no room for another connection"}),
    [](const ::testing::TestParamInfo<SetupFault>& i) { return std::string(i.param.name); });

// The server's PD is made at Start (it probes registration there).
TEST_F(Failure, ServerPdFailureFailsStartNamingTheCallAndFreesAll) {
  const Footprint before = SettledFootprint();
  {
    EchoService service;
    Server server;
    ASSERT_TRUE(server.AddService(&service).ok());
    softrdma::FailNext(FaultOp::kAllocPd, 1, ENOMEM);
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("ibv_alloc_pd: Cannot allocate memory"), absl::string_view::npos)
        << s;
  }
  const Footprint after = WaitForFootprint(before);
  EXPECT_EQ(after, before) << "before: " << before.ToString() << "; after: " << after.ToString();
}

// Issue 3: a 64 KiB memlock limit and a server wanting a 64 MiB pool for
// large messages. Its receive ring (4 x 1 KiB) fits; the pool never could.
TEST_F(Failure, MemlockCapBelowTheLargePoolFailsStartResourceExhausted) {
  const Footprint before = SettledFootprint();
  softrdma::SetMemlockLimit(64 << 10);
  {
    EchoService service;
    ServerOptions so;
    so.recv_depth = 4;
    so.recv_buffer_bytes = 1024;
    so.large_buffer_pool_bytes = 64 << 20;
    Server server(so);
    ASSERT_TRUE(server.AddService(&service).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("large_buffer_pool_bytes 67108864 cannot be registered"),
              absl::string_view::npos)
        << s;
    EXPECT_NE(s.message().find("RLIMIT_MEMLOCK is 64 KiB"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("registering 67108864 bytes"), absl::string_view::npos) << s;
  }
  softrdma::ClearMemlockLimit();
  EXPECT_EQ(softrdma::PinnedBytes(), 0u);
  const Footprint after = WaitForFootprint(before);
  EXPECT_EQ(after, before) << "before: " << before.ToString() << "; after: " << after.ToString();
}

// The default server's receive ring alone (64 x 8 KiB) is past the cap.
TEST_F(Failure, MemlockCapBelowTheReceiveRingFailsStartNamingItsBytes) {
  softrdma::SetMemlockLimit(64 << 10);
  EchoService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  absl::Status s = server.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("cannot register receive buffers"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("RLIMIT_MEMLOCK is 64 KiB; registering 524288 bytes"),
            absl::string_view::npos)
      << s;
}

// The noted gap: a server out of registered memory rejects with
// kRejectNoResources, which the client reports as RESOURCE_EXHAUSTED. The
// client registers its receive ring and send slab first (2 reg_mr), then
// the server's receive ring fails.
TEST_F(Failure, ServerOutOfRegisteredMemoryRejectsResourceExhausted) {
  ChannelOptions co;
  co.pool_size = 1;
  EchoFixture f(ServerOptions(), co);
  softrdma::FailNext(FaultOp::kRegMr, 1, ENOMEM, /*after=*/2);
  absl::Status s = CallEcho(f.channel.get(), "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("has no room for another connection"), absl::string_view::npos) << s;
  EXPECT_EQ(f.service.calls(), 0);
  EXPECT_TRUE(CallEcho(f.channel.get(), "y").ok());
}

// Issue 3 item 2: every RECV completion of a response comes before the SEND
// completion of its request (RecvBeforeSend), the send queue (256 WRs) is as
// deep as the credit window (the server's 256 receives), and 600 calls keep
// the window full. The runtime must never post past its send queue (ENOMEM
// from ibv_post_send would fail the connection: UNAVAILABLE) nor reuse a
// send slot / wr_id before its completion (wrong or lost responses).
TEST_F(Failure, RecvBeforeSendWithAFullCreditWindowLosesNothing) {
  static_assert(internal::kSendQueueDepth == 256, "the window below matches the send queue");
  ServerOptions so;
  so.recv_depth = internal::kSendQueueDepth;
  so.num_workers = 1;
  ChannelOptions co;
  co.pool_size = 1;
  co.recv_depth = internal::kSendQueueDepth;
  EchoFixture f(so, co);
  ASSERT_TRUE(CallEcho(f.channel.get(), "connect").ok());
  softrdma::RecvBeforeSend(true);
  softrdma::ResetStats();
  softrdma::TakeErrorCqes();
  constexpr int kCalls = 600;
  for (int wave = 0; wave < 3; ++wave) {
    std::vector<EchoRequest> reqs(kCalls);
    std::vector<EchoResponse> resps(kCalls);
    std::vector<std::unique_ptr<ClientContext>> ctxs;
    std::vector<absl::Status> results(kCalls);
    absl::BlockingCounter done(kCalls);
    for (int i = 0; i < kCalls; ++i) {
      reqs[i].set_text(absl::StrCat("w", wave, "-", i));
      ctxs.push_back(std::make_unique<ClientContext>());
      ctxs.back()->set_timeout(absl::Seconds(60));
      internal::AsyncUnaryCall(f.channel.get(), kEchoMethod, ctxs.back().get(), reqs[i],
                               &resps[i], [&, i](absl::Status s) {
                                 results[i] = s;
                                 done.DecrementCount();
                               });
    }
    done.Wait();
    for (int i = 0; i < kCalls; ++i) {
      ASSERT_TRUE(results[i].ok()) << "wave " << wave << " call " << i << ": " << results[i];
      ASSERT_EQ(resps[i].text(), absl::StrCat("w", wave, "-", i));
    }
  }
  EXPECT_EQ(f.service.calls(), 1 + 3 * kCalls);
  EXPECT_GT(softrdma::AcksSentBehindRequests(), 0u) << "the reorder never happened";
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
  EXPECT_TRUE(softrdma::TakeErrorCqes().empty());
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
