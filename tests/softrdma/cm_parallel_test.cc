// cm_parallel_test.cc: rdma_cm calls on different ids run in parallel.
//
// softrdma's rdma_cm has one lock per id and no process-wide lock (cm.cc), so
// an rdma_cm call stuck inside one id's lock must not hold up another thread's
// connection set-up, nor the progress thread's handling of other ids' frames.
// The stall here is a real one, reached through the public API: the id's
// event channel fd is a blocking eventfd whose counter is at its maximum, so
// the write that announces the id's next event blocks (eventfd(2)) inside the
// call, until somebody reads the fd.
//
// And ids destroyed at every point of their handshake, while the progress
// thread handles that handshake's frames for them, are all freed, and no
// handler touches a freed id (the suite runs under AddressSanitizer); an
// event channel destroyed while another thread waits in rdma_get_cm_event on
// it (rping's cm thread at exit) stays valid for that thread.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

using Clock = std::chrono::steady_clock;

// Whether thread `tid` of this process is blocked in system call `nr` on
// `fd` (/proc/<pid>/task/<tid>/syscall: the number, then the arguments).
bool BlockedIn(long nr, pid_t tid, int fd) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long got = -1;
  std::string arg0;
  if (!(f >> got >> arg0)) return false;
  return got == nr && std::stoul(arg0, nullptr, 16) == static_cast<unsigned long>(fd);
}
bool BlockedInWrite(pid_t tid, int fd) { return BlockedIn(SYS_write, tid, fd); }
bool BlockedInRead(pid_t tid, int fd) { return BlockedIn(SYS_read, tid, fd); }

// An eventfd's counter, read without consuming it (/proc/self/fdinfo: the
// "eventfd-count:" line, in hex); -1 if unknown.
long long EventFdCount(int fd) {
  std::ifstream f("/proc/self/fdinfo/" + std::to_string(fd));
  std::string key;
  while (f >> key) {
    if (key == "eventfd-count:") {
      std::string v;
      f >> v;
      return std::stoll(v, nullptr, 16);
    }
  }
  return -1;
}

// Waits up to 20 s for `pred`.
template <typename Pred>
bool Eventually(Pred pred) {
  for (auto until = Clock::now() + std::chrono::seconds(20); Clock::now() < until;) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

sockaddr_in Loopback(uint16_t port_be) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = port_be;
  return a;
}

TEST(CmParallel, AnIdStalledInsideItsLockDoesNotStallOtherIds) {
  // Id A, on a channel whose eventfd cannot take one more event.
  rdma_event_channel* ach = create_event_channel();
  ASSERT_NE(ach, nullptr);
  rdma_cm_id* a = nullptr;
  ASSERT_EQ(create_id(ach, &a, nullptr, RDMA_PS_TCP), 0);
  const uint64_t full = 0xfffffffffffffffeull;  // the counter's maximum (eventfd(2))
  ASSERT_EQ(write(ach->fd, &full, sizeof(full)), static_cast<ssize_t>(sizeof(full)));

  // A's rdma_resolve_addr queues ADDR_RESOLVED and then blocks announcing
  // it, inside A's lock.
  std::atomic<pid_t> stalled_tid{0};
  std::atomic<int> stalled_rc{-100};
  std::thread stalled([&] {
    stalled_tid = static_cast<pid_t>(syscall(SYS_gettid));
    sockaddr_in dst = Loopback(htons(9));
    stalled_rc = resolve_addr(a, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000);
  });
  bool blocked = false;
  for (auto until = Clock::now() + std::chrono::seconds(20); !blocked && Clock::now() < until;) {
    blocked = stalled_tid.load() != 0 && BlockedInWrite(stalled_tid.load(), ach->fd);
    if (!blocked) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(blocked) << "rdma_resolve_addr never reached the eventfd write";
  EXPECT_EQ(stalled_rc.load(), -100);  // still inside the call

  // Meanwhile another thread sets up a whole connection on other ids and
  // channels: create_id, bind, listen, resolve, create_qp, connect, accept,
  // get_cm_event / ack_cm_event, and the progress thread's CONNECT_REQ,
  // ACCEPT and RTU. A process-wide lock held by the stalled call would stop
  // it at its first rdma_cm call, for as long as the stall lasts.
  std::atomic<bool> other_done{false};
  std::atomic<bool> other_ok{false};
  std::thread other([&] {
    {
      ConnectedPair pair;
      other_ok = pair.ok();
    }
    other_done = true;
  });
  for (auto until = Clock::now() + std::chrono::seconds(30);
       !other_done.load() && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool done_while_stalled = other_done.load();
  EXPECT_TRUE(done_while_stalled) << "set-up on other ids waited for the stalled id";
  EXPECT_TRUE(BlockedInWrite(stalled_tid.load(), ach->fd));  // A stayed stalled throughout
  EXPECT_EQ(stalled_rc.load(), -100);

  // One read lets the write through; the call returns and its event is there.
  uint64_t v = 0;
  ASSERT_EQ(read(ach->fd, &v, sizeof(v)), static_cast<ssize_t>(sizeof(v)));
  stalled.join();
  other.join();
  EXPECT_TRUE(other_ok.load());
  EXPECT_EQ(stalled_rc.load(), 0);
  rdma_cm_event* e = nullptr;
  ASSERT_EQ(get_cm_event(ach, &e), 0);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(e->status, 0);
  EXPECT_EQ(e->id, a);
  ack_cm_event(e);
  EXPECT_EQ(destroy_id(a), 0);
  destroy_event_channel(ach);
}

// How long the client waits before destroying its id, after rdma_connect.
enum class DestroyAt { kAtOnce, kAfterYield, kAfter200us, kAfterEstablished };

TEST(CmParallel, IdsDestroyedWhileTheirHandshakeIsInFlightAreAllFreed) {
  constexpr int kIds = 200;
  const Stats before = GetStats();
  rdma_event_channel* sch = create_event_channel();
  rdma_event_channel* cch = create_event_channel();
  SetNonBlocking(sch->fd);
  SetNonBlocking(cch->fd);
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(create_id(sch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr = Loopback(0);
  ASSERT_EQ(bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)), 0);
  ASSERT_EQ(softrdma::listen(listener, 8), 0);
  addr.sin_port = get_src_port(listener);

  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {1, 1, 1, 1, 0};

  // The server accepts every request and destroys each accepted id when its
  // connection ends (CONNECT_ERROR: the client went before RTU;
  // DISCONNECTED: after).
  std::atomic<bool> stop{false};
  std::atomic<int> requests{0}, ended{0}, unexpected{0};
  std::thread server([&] {
    while (!stop.load()) {
      rdma_cm_event* e = nullptr;
      if (get_cm_event(sch, &e) != 0) {
        pollfd p{sch->fd, POLLIN, 0};
        poll(&p, 1, 10);
        continue;
      }
      rdma_cm_id* id = e->id;
      const rdma_cm_event_type type = e->event;
      ack_cm_event(e);
      switch (type) {
        case RDMA_CM_EVENT_CONNECT_REQUEST: {
          requests++;
          ibv_qp_init_attr at = qa;
          if (create_qp(id, nullptr, &at) != 0 || softrdma::accept(id, nullptr) != 0) {
            unexpected++;
          }
          break;
        }
        case RDMA_CM_EVENT_ESTABLISHED:
          break;
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_DISCONNECTED:
          ended++;
          destroy_qp(id);
          if (destroy_id(id) != 0) unexpected++;
          break;
        default:
          unexpected++;
      }
    }
  });

  for (int i = 0; i < kIds; ++i) {
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(create_id(cch, &id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000), 0);
    ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
    ASSERT_EQ(resolve_route(id, 2000), 0);
    ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
    ibv_qp_init_attr at = qa;
    ASSERT_EQ(create_qp(id, nullptr, &at), 0);
    ASSERT_EQ(softrdma::connect(id, nullptr), 0);
    switch (static_cast<DestroyAt>(i % 4)) {
      case DestroyAt::kAtOnce:
        break;
      case DestroyAt::kAfterYield:
        sched_yield();
        break;
      case DestroyAt::kAfter200us:
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        break;
      case DestroyAt::kAfterEstablished:
        ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ESTABLISHED), 0);
        break;
    }
    destroy_qp(id);
    ASSERT_EQ(destroy_id(id), 0);  // drops its events not yet returned
  }

  // Every accepted id ends and is destroyed; only the listener is left.
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (GetStats().live_cm_ids != before.live_cm_ids + 1 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  server.join();
  EXPECT_EQ(GetStats().live_cm_ids, before.live_cm_ids + 1);
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(ended.load(), requests.load());
  // At least the connections that reached ESTABLISHED on the client made a
  // request; the others may have gone before theirs arrived.
  EXPECT_GE(requests.load(), kIds / 4);
  EXPECT_LE(requests.load(), kIds);
  EXPECT_EQ(destroy_id(listener), 0);
  destroy_event_channel(cch);
  destroy_event_channel(sch);
  const Stats after = GetStats();
  EXPECT_EQ(after.live_cm_ids, before.live_cm_ids);
  EXPECT_EQ(after.live_qps, before.live_qps);
}

TEST(CmParallel, ChannelDestroyedUnderAWaitingThreadStaysValidForIt) {
  rdma_event_channel* ch = create_event_channel();
  ASSERT_NE(ch, nullptr);
  const int fd = ch->fd;
  std::atomic<pid_t> tid{0};
  std::atomic<int> rc{-100};
  std::atomic<int> err{0};
  rdma_cm_event* got = nullptr;
  std::thread waiter([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    rc = get_cm_event(ch, &got);
    err = errno;
  });
  ASSERT_TRUE(Eventually([&] { return tid.load() != 0 && BlockedInRead(tid.load(), fd); }));
  destroy_event_channel(ch);
  // The fd stays open while the call is in progress (as a file stays open
  // for a system call using it). A wake-up finds the channel destroyed: no
  // event, and the call waits on.
  const uint64_t one = 1;
  ASSERT_EQ(write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  // The waiter took the wake-up (the count is back to 0) and blocks again.
  ASSERT_TRUE(Eventually([&] { return EventFdCount(fd) == 0 && BlockedInRead(tid.load(), fd); }));
  EXPECT_EQ(rc.load(), -100);
  // Made non-blocking and woken, it returns EAGAIN; then the fd is closed.
  ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  ASSERT_EQ(write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  waiter.join();
  EXPECT_EQ(rc.load(), -1);
  EXPECT_EQ(err.load(), EAGAIN);
  EXPECT_EQ(got, nullptr);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
