// rpc_drain_test.cc: a server that shuts down drains its clients (kGoAway:
// they start no new call on it, its calls in flight finish), calls it
// refuses unstarted go to another server (transparent retry), and so a
// rolling restart of a server set loses no call.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

// An echo server that can be stopped and started again on its port.
struct Restartable {
  void Start(int port = 0) {
    service = std::make_unique<EchoService>();
    server = std::make_unique<Server>();
    ASSERT_TRUE(server->AddService(service.get()).ok());
    absl::Status s = server->Start(absl::StrCat("127.0.0.1:", port));
    ASSERT_TRUE(s.ok()) << s;
    this->port = server->port();
  }
  // Shutdown with a grace, Wait, and keep the calls it served.
  void Stop() {
    server->Shutdown(absl::Seconds(5));
    server->Wait();
    served += service->calls();
    server.reset();
    service.reset();
  }
  std::unique_ptr<EchoService> service;
  std::unique_ptr<Server> server;
  int port = 0;
  int served = 0;  // by instances stopped so far
};

struct Tally {
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  absl::Mutex mu;
  std::vector<std::string> failures ABSL_GUARDED_BY(mu);
  void Note(const absl::Status& s) {
    if (s.ok()) {
      ok.fetch_add(1);
      return;
    }
    failed.fetch_add(1);
    absl::MutexLock lock(&mu);
    if (failures.size() < 10) failures.push_back(s.ToString());
  }
  std::string Failures() {
    absl::MutexLock lock(&mu);
    return absl::StrJoin(failures, "\n");
  }
};

TEST(Drain, RollingRestartOfThreeServersLosesNoCall) {
  std::vector<Restartable> servers(3);
  for (Restartable& r : servers) r.Start();
  std::vector<std::string> addresses;
  for (Restartable& r : servers) addresses.push_back(absl::StrCat("127.0.0.1:", r.port));
  auto ch = CreateChannel(absl::StrJoin(addresses, ","));
  ASSERT_TRUE(ch.ok()) << ch.status();

  Tally tally;
  std::atomic<bool> stop{false};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      int i = 0;
      while (!stop.load()) {
        EchoRequest req;
        req.set_text(absl::StrCat(t, "/", i++));
        // Mostly small, every 8th above the eager limit (rendezvous).
        if (i % 8 == 0) req.set_data(std::string(4096, 'd'));
        EchoResponse resp;
        ClientContext ctx;
        ctx.set_timeout(absl::Seconds(10));
        absl::Status s = Echo(ch->get(), &ctx, req, &resp);
        if (s.ok() && resp.text() != req.text()) s = absl::DataLossError(resp.text());
        tally.Note(s);
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(300));
  for (Restartable& r : servers) {
    const int port = r.port;
    r.Stop();
    absl::SleepFor(absl::Milliseconds(200));  // the others carry the load meanwhile
    r.Start(port);
    // Back in rotation once the channel's reconnect (backoff ~1 s) finds it.
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (r.service->calls() == 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_GT(r.service->calls(), 0) << "the restarted server on " << port << " got no call";
  }
  absl::SleepFor(absl::Milliseconds(300));
  stop.store(true);
  for (std::thread& t : callers) t.join();

  EXPECT_EQ(tally.failed.load(), 0) << tally.Failures();
  EXPECT_GT(tally.ok.load(), 1000);
  int served = 0;
  for (Restartable& r : servers) {
    EXPECT_GT(r.served, 0);
    served += r.served + r.service->calls();
  }
  // Every call answered OK was served exactly once.
  EXPECT_EQ(served, tally.ok.load());
}

TEST(Drain, CallsInFlightFinishAndNewCallsGoElsewhere) {
  CallModelService slow_service;
  Server slow;
  ASSERT_TRUE(slow.AddService(&slow_service).ok());
  ASSERT_TRUE(slow.Start("127.0.0.1:0").ok());
  CallModelService other_service;
  Server other;
  ASSERT_TRUE(other.AddService(&other_service).ok());
  ASSERT_TRUE(other.Start("127.0.0.1:0").ok());
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", slow.port(), ",127.0.0.1:", other.port()));
  ASSERT_TRUE(ch.ok()) << ch.status();
  // Warm both up.
  for (int i = 0; i < 2; ++i) {
    EchoRequest req;
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(5));
    ASSERT_TRUE(internal::BlockingUnaryCall(ch->get(), kSlowMethod, &ctx, req, &resp).ok());
  }
  ASSERT_EQ(slow_service.started_.load(), 1);
  ASSERT_EQ(other_service.started_.load(), 1);

  // A 600 ms call on `slow` (the next pick), then `slow` drains.
  absl::Status long_status;
  EchoResponse long_resp;
  std::thread long_call([&] {
    EchoRequest req;
    req.set_sleep_ms(600);
    req.set_text("long");
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    long_status = internal::BlockingUnaryCall(ch->get(), kSlowMethod, &ctx, req, &long_resp);
  });
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (slow_service.started_.load() < 2 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(slow_service.started_.load(), 2);
  std::thread shutdown([&] { slow.Shutdown(absl::Seconds(5)); });
  // GOAWAY sent and answered (a few ms; room for a loaded machine).
  absl::SleepFor(absl::Milliseconds(300));
  for (int i = 0; i < 20; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat(i));
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(5));
    absl::Status s = internal::BlockingUnaryCall(ch->get(), kSlowMethod, &ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << i << " " << s;
  }
  long_call.join();
  shutdown.join();
  EXPECT_TRUE(long_status.ok()) << long_status;
  EXPECT_EQ(long_resp.text(), "long");
  EXPECT_EQ(slow_service.started_.load(), 2);  // nothing new after the drain began
  EXPECT_EQ(other_service.started_.load(), 21);
}

TEST(Drain, CallsADrainingServerDidNotStartAreSentToAnother) {
  ServerOptions one_thread;
  one_thread.num_workers = 1;
  one_thread.handler_threads = 1;
  one_thread.max_handler_threads = 1;
  CallModelService busy_service;
  Server busy(one_thread);
  ASSERT_TRUE(busy.AddService(&busy_service).ok());
  ASSERT_TRUE(busy.Start("127.0.0.1:0").ok());
  CallModelService spare_service;
  Server spare;
  ASSERT_TRUE(spare.AddService(&spare_service).ok());
  ASSERT_TRUE(spare.Start("127.0.0.1:0").ok());
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", busy.port(), ",127.0.0.1:", spare.port()));
  ASSERT_TRUE(ch.ok()) << ch.status();
  constexpr int kCalls = 10;
  // On the heap, and left there if a call is never answered: its callback
  // may still run after the test ends.
  struct State {
    std::vector<absl::Status> results = std::vector<absl::Status>(kCalls);
    std::vector<EchoResponse> resps = std::vector<EchoResponse>(kCalls);
    std::vector<ClientContext> ctxs = std::vector<ClientContext>(kCalls);
    std::vector<EchoRequest> reqs = std::vector<EchoRequest>(kCalls);
    std::atomic<int> answered{0};
  };
  auto* state = new State;
  auto& results = state->results;
  auto& resps = state->resps;
  auto& ctxs = state->ctxs;
  auto& reqs = state->reqs;
  auto& answered = state->answered;
  // Calls 0, 2, 4, ... go to `busy` (round robin from it); each sleeps
  // 300 ms, and its one handler thread runs one at a time.
  for (int i = 0; i < kCalls; ++i) {
    reqs[i].set_sleep_ms(300);
    reqs[i].set_text(absl::StrCat("c", i));
    ctxs[i].set_timeout(absl::Seconds(30));
    internal::AsyncUnaryCall(ch->get(), kSlowMethod, &ctxs[i], reqs[i], &resps[i],
                             [state, i](absl::Status s) {
                               state->results[i] = std::move(s);
                               state->answered.fetch_add(1);
                             });
  }
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (busy_service.started_.load() < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(busy_service.started_.load(), 1);
  // The running call finishes within the grace; the 4 queued behind it
  // are refused unstarted and go to `spare`.
  busy.Shutdown(absl::Seconds(5));
  const absl::Time all = absl::Now() + absl::Seconds(20);
  while (answered.load() < kCalls && absl::Now() < all) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(answered.load(), kCalls);
  std::unique_ptr<State> owned(state);
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_TRUE(results[i].ok()) << i << " " << results[i];
    EXPECT_EQ(resps[i].text(), absl::StrCat("c", i));
    // Call 0 ran on `busy`; every other ended on `spare`.
    EXPECT_EQ(ctxs[i].peer(), absl::StrCat("127.0.0.1:", i == 0 ? busy.port() : spare.port())) << i;
  }
  EXPECT_EQ(busy_service.started_.load(), 1);
  EXPECT_EQ(spare_service.started_.load(), kCalls - 1);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
