// Completion queues and completion channels (ibv_create_cq(3),
// ibv_req_notify_cq(3), ibv_get_cq_event(3)):
//  - a CQ holds at least the cqe asked for (cq->cqe may be larger), also
//    after ibv_resize_cq(3), which keeps the WCs it holds;
//  - after ibv_req_notify_cq(cq, 0) the next WC added to the CQ raises one
//    event on its channel: ibv_get_cq_event returns the CQ and its cq_context;
//    each event is acknowledged with ibv_ack_cq_events;
//  - one arm, one event: WCs added while unarmed raise none;
//  - ibv_req_notify_cq(cq, 1) (solicited only) raises an event only for a
//    receive of a message sent with IBV_SEND_SOLICITED (or an error WC).
//
// CQ overrun (more WCs than the CQ holds, unpolled) is not tested: IBA makes
// it a CQ error with an IBV_EVENT_CQ_ERR async event and leaves the CQ
// unusable (softrdma does the same: poll returns what it holds, then -EIO);
// on hardware it also takes down the QPs feeding it, so it is not a thing to
// provoke on a shared NIC. Async events are covered by
// async_event_conformance_test.cc.
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"
#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

using internal::Verbs;

class CqConformance : public ConformanceTest {
 protected:
  // True when the channel's fd becomes readable within `timeout`.
  static bool ChannelReadable(ibv_comp_channel* ch, absl::Duration timeout) {
    pollfd p{ch->fd, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1;
  }

  // One message client -> server, both WCs polled.
  void SendOne(uint64_t wr_id, int flags) {
    std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(src);
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, wr_id, *src, 0, 8, 0, 0, 0,
                       IBV_SEND_SIGNALED | flags),
              0);
    absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
    ASSERT_TRUE(wc.ok()) << wc.status();
    ASSERT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  }
};

TEST_F(CqConformance, CreatedCqHoldsAtLeastTheCqeAsked) {
  ibv_cq* cq = Verbs().create_cq(context(), 100, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  EXPECT_GE(cq->cqe, 100);
  EXPECT_EQ(cq->context, context());
  EXPECT_EQ(Verbs().destroy_cq(cq), 0);
  // Beyond the device's max_cqe: EINVAL (ibv_create_cq(3)).
  errno = 0;
  ibv_cq* too_big = Verbs().create_cq(context(), device_attr().max_cqe + 1, nullptr, nullptr, 0);
  EXPECT_EQ(too_big, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (too_big != nullptr) Verbs().destroy_cq(too_big);
}

TEST_F(CqConformance, ResizedCqKeepsItsWcsAndHoldsAtLeastTheCqeAsked) {
  // ibv_resize_cq(3): the CQ holds at least the new cqe (cq->cqe may be
  // larger); WCs already in it stay, in order, and the QPs on it carry on.
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(server_qp(), 90 + i, *dst, i * 64, 64), 0);
  SendOne(1, 0);
  SendOne(2, 0);
  absl::SleepFor(absl::Milliseconds(50));  // let the receiver's WCs land
  const int grown = server_cq()->cqe * 2 + 1;
  ASSERT_EQ(Verbs().resize_cq(server_cq(), grown), 0);
  EXPECT_GE(server_cq()->cqe, grown);
  SendOne(3, 0);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(server_cq(), 3);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*wcs)[i].wr_id, static_cast<uint64_t>(90 + i));
    EXPECT_EQ((*wcs)[i].status, IBV_WC_SUCCESS) << WcStatusName((*wcs)[i].status);
  }
  // Beyond the device's max_cqe: EINVAL.
  EXPECT_EQ(Verbs().resize_cq(server_cq(), device_attr().max_cqe + 1), EINVAL);
}

TEST_F(CqConformance, ArmedCqRaisesOneChannelEvent) {
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostRecv(server_qp(), 60 + i, *dst, i * 64, 64), 0);
  ASSERT_EQ(ibv_req_notify_cq(server_cq(), 0), 0);
  EXPECT_FALSE(ChannelReadable(server_comp(), absl::Milliseconds(20)));

  SendOne(1, 0);
  ASSERT_TRUE(ChannelReadable(server_comp(), absl::Seconds(5)));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(Verbs().get_cq_event(server_comp(), &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, server_cq());
  EXPECT_EQ(ev_ctx, server_cq_context());
  Verbs().ack_cq_events(ev_cq, 1);
  absl::StatusOr<ibv_wc> wc = PollOne(server_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 60u);

  // Not re-armed: the next WC raises no event.
  SendOne(2, 0);
  absl::StatusOr<ibv_wc> second = PollOne(server_cq());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->wr_id, 61u);
  EXPECT_FALSE(ChannelReadable(server_comp(), absl::Milliseconds(100)));
}

TEST_F(CqConformance, ArmingWithWcsAlreadyQueuedWaitsForTheNextOne) {
  // ibv_req_notify_cq(3): the event is for the NEXT completion; WCs already
  // in the CQ do not raise one (hence "arm, then poll once more").
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostRecv(server_qp(), 70 + i, *dst, i * 64, 64), 0);
  SendOne(1, 0);
  // The sender's WC means the message was acknowledged; a NIC may still be
  // writing the receiver's WC, so give it time to land before arming.
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(ibv_req_notify_cq(server_cq(), 0), 0);
  EXPECT_FALSE(ChannelReadable(server_comp(), absl::Milliseconds(100)));
  SendOne(2, 0);
  ASSERT_TRUE(ChannelReadable(server_comp(), absl::Seconds(5)));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(Verbs().get_cq_event(server_comp(), &ev_cq, &ev_ctx), 0);
  Verbs().ack_cq_events(ev_cq, 1);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(server_cq(), 2);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  EXPECT_EQ((*wcs)[0].wr_id, 70u);
  EXPECT_EQ((*wcs)[1].wr_id, 71u);
}

TEST_F(CqConformance, SolicitedOnlyArmIgnoresUnsolicitedReceives) {
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(PostRecv(server_qp(), 80 + i, *dst, i * 64, 64), 0);
  ASSERT_EQ(ibv_req_notify_cq(server_cq(), 1), 0);
  SendOne(1, 0);
  absl::StatusOr<ibv_wc> plain = PollOne(server_cq());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(ChannelReadable(server_comp(), absl::Milliseconds(100)));
  SendOne(2, IBV_SEND_SOLICITED);
  ASSERT_TRUE(ChannelReadable(server_comp(), absl::Seconds(5)));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(Verbs().get_cq_event(server_comp(), &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, server_cq());
  Verbs().ack_cq_events(ev_cq, 1);
  absl::StatusOr<ibv_wc> solicited = PollOne(server_cq());
  ASSERT_TRUE(solicited.ok()) << solicited.status();
  EXPECT_EQ(solicited->wr_id, 81u);
}

TEST_F(CqConformance, SolicitedOnlyArmFiresOnAnErrorCompletion) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 90, *dst, 0, 8), 0);
  ASSERT_EQ(ibv_req_notify_cq(server_cq(), 1), 0);
  // Unsolicited, but 64 bytes into an 8-byte receive: the error WC raises
  // the event even though the arm asked for solicited ones only.
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 91, *src, 0, 64), 0);
  ASSERT_TRUE(ChannelReadable(server_comp(), absl::Seconds(5)));
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(Verbs().get_cq_event(server_comp(), &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, server_cq());
  Verbs().ack_cq_events(ev_cq, 1);
  absl::StatusOr<ibv_wc> wc = PollOne(server_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 90u);
  EXPECT_EQ(wc->status, IBV_WC_LOC_LEN_ERR) << WcStatusName(wc->status);
}

TEST_F(CqConformance, DestroyingACqInUseIsEbusy) {
  // ibv_destroy_cq(3): EBUSY while a QP still uses it.
  EXPECT_EQ(Verbs().destroy_cq(client_cq()), EBUSY);
  EXPECT_EQ(Verbs().destroy_comp_channel(client_comp()), EBUSY);  // the CQ uses it
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
