// cm_ack_test.cc: rdma_destroy_id and unacknowledged events. librdmacm's
// rdma_destroy_id blocks until every event it returned for the id has been
// acked with rdma_ack_cm_event. softrdma waits likewise, for another thread
// to ack, but when nobody does it fails loudly after a while (fatal in debug
// builds) rather than hang, so code that would hang on a cluster fails in CI.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

// An id with one ADDR_RESOLVED event returned by get_cm_event, not acked.
rdma_cm_id* IdWithDeliveredEvent(rdma_event_channel* ch, rdma_cm_event** event) {
  rdma_cm_id* id = nullptr;
  if (create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) return nullptr;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(9);
  if (resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) != 0) return nullptr;
  *event = NextEvent(ch);
  if (*event == nullptr || (*event)->event != RDMA_CM_EVENT_ADDR_RESOLVED) return nullptr;
  return id;
}

TEST(CmEventAck, DestroyAfterAckIsFine) {
  rdma_event_channel* ch = create_event_channel();
  ASSERT_NE(ch, nullptr);
  SetNonBlocking(ch->fd);
  rdma_cm_event* e = nullptr;
  rdma_cm_id* id = IdWithDeliveredEvent(ch, &e);
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(ack_cm_event(e), 0);
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
}

TEST(CmEventAck, DestroyWaitsForAnotherThreadToAck) {
  rdma_event_channel* ch = create_event_channel();
  ASSERT_NE(ch, nullptr);
  SetNonBlocking(ch->fd);
  rdma_cm_event* e = nullptr;
  rdma_cm_id* id = IdWithDeliveredEvent(ch, &e);
  ASSERT_NE(id, nullptr);
  std::atomic<bool> acking{false};
  std::thread acker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    acking = true;
    ack_cm_event(e);
  });
  EXPECT_EQ(destroy_id(id), 0);
  EXPECT_TRUE(acking.load());  // destroy_id returned only after the ack
  acker.join();
  destroy_event_channel(ch);
}

#ifndef NDEBUG
TEST(CmEventAckDeathTest, DestroyWithUnackedEventDiesInDebugBuilds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the progress thread runs
  EXPECT_DEATH(
      {
        rdma_event_channel* ch = create_event_channel();
        SetNonBlocking(ch->fd);
        rdma_cm_event* e = nullptr;
        rdma_cm_id* id = IdWithDeliveredEvent(ch, &e);
        if (id != nullptr) destroy_id(id);  // e is not acked
      },
      "rdma_destroy_id on an id with 1 event\\(s\\) not acked");
}
#endif

}  // namespace
}  // namespace testing
}  // namespace softrdma
