// cm_storm_test.cc: connection set-up at scale from one process.
//
// 1,000 connections from one process to one listener in the same process,
// set up as librdmacm's cmtime does (all ids, then all address and route
// resolutions, then rdma_create_qp and rdma_connect for each), with the
// listener's side accepting on its own thread. Every connection must be
// established, and no rdma_cm call of the connecting thread may block for
// long: a thread that calls rdma_* between its own timers must see them fire
// on time, which a process-wide lock held across set-up work defeats. The
// listener is made with backlog 1, and no connect may be dropped by the
// kernel for a full listen backlog (TcpExt ListenDrops unchanged).
#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kConnections = 1000;
// The longest a single non-waiting rdma_cm call of the connecting thread may
// take (measured: a few ms under ASan on a loaded 2-core machine).
constexpr auto kMaxCall = std::chrono::milliseconds(250);

// Times one call; keeps the longest.
template <typename F>
int Timed(Clock::duration* longest, F f) {
  const auto t0 = Clock::now();
  const int rc = f();
  *longest = std::max(*longest, Clock::now() - t0);
  return rc;
}

// TcpExt ListenDrops from /proc/net/netstat: SYNs or connections a listening
// socket of this network namespace dropped for a full backlog; -1 if unknown.
long ListenDrops() {
  FILE* f = std::fopen("/proc/net/netstat", "r");
  if (f == nullptr) return -1;
  char names[8192], values[8192];
  long result = -1;
  while (std::fgets(names, sizeof(names), f) != nullptr &&
         std::fgets(values, sizeof(values), f) != nullptr) {
    if (std::strncmp(names, "TcpExt:", 7) != 0) continue;
    char* ns = nullptr;
    char* vs = nullptr;
    char* n = strtok_r(names, " \n", &ns);
    char* v = strtok_r(values, " \n", &vs);
    while (n != nullptr && v != nullptr) {
      if (std::strcmp(n, "ListenDrops") == 0) result = std::atol(v);
      n = strtok_r(nullptr, " \n", &ns);
      v = strtok_r(nullptr, " \n", &vs);
    }
  }
  std::fclose(f);
  return result;
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

TEST(CmStorm, ThousandConnectionsFromOneProcessDoNotBlockTheCaller) {
  rdma_event_channel* sch = create_event_channel();
  rdma_event_channel* cch = create_event_channel();
  SetNonBlocking(sch->fd);
  SetNonBlocking(cch->fd);
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(create_id(sch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)), 0);
  // A small backlog, as programs pass (cmtime passes 0): the IB CM queues
  // every REQ regardless, so none of the storm's connects may be dropped.
  ASSERT_EQ(softrdma::listen(listener, 1), 0);
  addr.sin_port = get_src_port(listener);

  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {1, 1, 1, 1, 0};
  const auto deadline = Clock::now() + std::chrono::seconds(50);

  // The listener's side: accepts every request, counts ESTABLISHED.
  std::vector<rdma_cm_id*> accepted;
  std::atomic<int> server_established{0};
  std::atomic<int> server_failures{0};
  std::thread server([&] {
    while (server_established.load() < kConnections && Clock::now() < deadline) {
      rdma_cm_event* e = nullptr;
      if (get_cm_event(sch, &e) != 0) {
        pollfd p{sch->fd, POLLIN, 0};
        poll(&p, 1, 10);
        continue;
      }
      if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        rdma_cm_id* id = e->id;
        accepted.push_back(id);
        ibv_qp_init_attr a = qa;
        if (create_qp(id, nullptr, &a) != 0 || softrdma::accept(id, nullptr) != 0) {
          server_failures++;
        }
      } else if (e->event == RDMA_CM_EVENT_ESTABLISHED) {
        server_established++;
      } else {
        server_failures++;
      }
      ack_cm_event(e);
    }
  });

  // A timer of the process's own: how late its 5 ms ticks come.
  std::atomic<bool> stop_ticks{false};
  Clock::duration worst_tick{};
  std::thread ticker([&] {
    auto last = Clock::now();
    while (!stop_ticks.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const auto now = Clock::now();
      worst_tick = std::max(worst_tick, now - last - std::chrono::milliseconds(5));
      last = now;
    }
  });

  const long drops_before = ListenDrops();
  // The connecting thread (this one), in cmtime's phases.
  Clock::duration longest{};
  std::vector<rdma_cm_id*> ids(kConnections, nullptr);
  const auto t0 = Clock::now();
  for (auto& id : ids) {
    ASSERT_EQ(Timed(&longest, [&] { return create_id(cch, &id, nullptr, RDMA_PS_TCP); }), 0);
  }
  auto drain = [&](rdma_cm_event_type want, int count, auto&& on_event) {
    int got = 0;
    while (got < count && Clock::now() < deadline) {
      rdma_cm_event* e = nullptr;
      if (Timed(&longest, [&] { return get_cm_event(cch, &e); }) != 0) {
        pollfd p{cch->fd, POLLIN, 0};
        poll(&p, 1, 10);
        continue;
      }
      EXPECT_EQ(e->event, want) << "status " << e->status;
      EXPECT_EQ(e->status, 0);
      rdma_cm_id* id = e->id;
      ack_cm_event(e);
      ++got;
      on_event(id);
    }
    return got;
  };
  for (rdma_cm_id* id : ids) {
    ASSERT_EQ(Timed(&longest, [&] {
                return resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 5000);
              }),
              0);
  }
  ASSERT_EQ(drain(RDMA_CM_EVENT_ADDR_RESOLVED, kConnections,
                  [&](rdma_cm_id* id) {
                    EXPECT_EQ(Timed(&longest, [&] { return resolve_route(id, 5000); }), 0);
                  }),
            kConnections);
  ASSERT_EQ(drain(RDMA_CM_EVENT_ROUTE_RESOLVED, kConnections, [](rdma_cm_id*) {}), kConnections);
  const auto t_connect = Clock::now();
  for (rdma_cm_id* id : ids) {
    ibv_qp_init_attr a = qa;
    ASSERT_EQ(Timed(&longest, [&] { return create_qp(id, nullptr, &a); }), 0);
    ASSERT_EQ(Timed(&longest, [&] { return softrdma::connect(id, nullptr); }), 0);
  }
  EXPECT_EQ(drain(RDMA_CM_EVENT_ESTABLISHED, kConnections, [](rdma_cm_id*) {}), kConnections);
  const auto t_done = Clock::now();
  server.join();
  stop_ticks = true;
  ticker.join();
  EXPECT_EQ(server_established.load(), kConnections);
  EXPECT_EQ(server_failures.load(), 0);
  EXPECT_EQ(accepted.size(), static_cast<size_t>(kConnections));
  EXPECT_LT(longest, kMaxCall) << "longest rdma_cm call " << Ms(longest) << " ms";
  // A dropped SYN costs its connect TCP's 1 s retransmission timeout.
  if (drops_before >= 0) {
    EXPECT_EQ(ListenDrops() - drops_before, 0) << "connects dropped by a full listen backlog";
  }
  std::printf("cm storm: %d connections in %.0f ms (%.0f us each from rdma_create_qp on); "
              "longest rdma_cm call %.2f ms; worst lateness of a 5 ms timer %.2f ms\n",
              kConnections, Ms(t_done - t0),
              1000 * Ms(t_done - t_connect) / kConnections, Ms(longest), Ms(worst_tick));

  for (rdma_cm_id* id : ids) {
    destroy_qp(id);
    EXPECT_EQ(destroy_id(id), 0);
  }
  for (rdma_cm_id* id : accepted) {
    destroy_qp(id);
    EXPECT_EQ(destroy_id(id), 0);
  }
  EXPECT_EQ(destroy_id(listener), 0);
  destroy_event_channel(cch);
  destroy_event_channel(sch);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
