// Heap allocations per small unary call, counted by replacing the global
// operator new in this binary: after warm-up, a 32-byte call made through a
// generated Stub (blocking, or async with a callback) allocates nothing on
// the caller's thread, in the channel's engine, in the server's workers or
// in its handler pool. Client and server share this process, so each count
// covers both sides; allocations are also split by thread (the caller's
// versus every other thread) so a failure says which side allocated.
//
// The caller reuses its request and response messages, as a hot loop does;
// a ClientContext is made per call, as gRPC requires. With
// RDMARPC_ALLOC_TRACE=N in the environment the first N counted allocations
// print their stacks to stderr (for finding one that comes back).
#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "allocation_test.rdmarpc.pb.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_caller_allocs{0};
std::atomic<uint64_t> g_other_allocs{0};
std::atomic<int> g_trace_left{0};
thread_local bool t_is_caller = false;
thread_local bool t_in_trace = false;

std::atomic_flag g_print_lock = ATOMIC_FLAG_INIT;

// One stack at a time, so stacks from two threads do not interleave.
void PrintStack(size_t size) {
  t_in_trace = true;
  while (g_print_lock.test_and_set(std::memory_order_acquire)) {
  }
  void* frames[48];
  const int n = backtrace(frames, 48);
  char line[96];
  const int len = snprintf(line, sizeof(line), "--- counted allocation of %zu bytes (%s thread)\n",
                           size, t_is_caller ? "caller" : "other");
  if (len > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(len));
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  g_print_lock.clear(std::memory_order_release);
  t_in_trace = false;
}

void Count(size_t size) {
  if (!g_counting.load(std::memory_order_relaxed) || t_in_trace) return;
  (t_is_caller ? g_caller_allocs : g_other_allocs).fetch_add(1, std::memory_order_relaxed);
  if (g_trace_left.load(std::memory_order_relaxed) > 0 && g_trace_left.fetch_sub(1) > 0) {
    PrintStack(size);
  }
}

void* Allocate(size_t size) {
  Count(size);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* AllocateAligned(size_t size, std::align_val_t align) {
  Count(size);
  void* p = nullptr;
  const size_t a = std::max(static_cast<size_t>(align), sizeof(void*));
  if (posix_memalign(&p, a, size == 0 ? 1 : size) != 0) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(size_t size) { return Allocate(size); }
void* operator new[](size_t size) { return Allocate(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  Count(size);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  Count(size);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new(size_t size, std::align_val_t a) { return AllocateAligned(size, a); }
void* operator new[](size_t size, std::align_val_t a) { return AllocateAligned(size, a); }
void* operator new(size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return AllocateAligned(size, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return AllocateAligned(size, a);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace rdmarpc {
namespace {

using alloc_test::EchoService;
using alloc_test::Payload;

// What Echo saw at its start, for the test that a reused call starts clean.
struct Seen {
  size_t client_metadata = 0;
  bool cancelled = false;
  bool response_empty = false;
  absl::Time deadline;
};

class EchoImpl final : public EchoService::Service {
 public:
  // A request "trailer" also sets trailing metadata.
  absl::Status Echo(ServerContext* context, const Payload& request, Payload* response) override {
    if (record_.load(std::memory_order_relaxed)) {
      absl::MutexLock lock(&mu_);
      seen_ = Seen{context->client_metadata().size(), context->IsCancelled(),
                   response->data().empty(), context->deadline()};
    }
    if (request.data() == "trailer") context->AddTrailingMetadata("x-echo", "trailer");
    response->set_data(request.data());
    return absl::OkStatus();
  }
  absl::Status EchoInline(ServerContext*, const Payload& request, Payload* response) override {
    response->set_data(request.data());
    return absl::OkStatus();
  }

  void Record() { record_.store(true); }
  Seen seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  std::atomic<bool> record_{false};
  absl::Mutex mu_;
  Seen seen_ ABSL_GUARDED_BY(mu_);
};

// Allocations counted while one phase ran.
struct Allocations {
  uint64_t caller = 0;
  uint64_t other = 0;
};

// Counts what `phase` allocates, on the calling thread and on all others.
template <typename Phase>
Allocations CountAllocations(Phase phase) {
  if (const char* trace = std::getenv("RDMARPC_ALLOC_TRACE")) {
    g_trace_left.store(std::atoi(trace));
  }
  g_caller_allocs.store(0);
  g_other_allocs.store(0);
  t_is_caller = true;
  g_counting.store(true);
  phase();
  g_counting.store(false);
  t_is_caller = false;
  g_trace_left.store(0);
  return Allocations{g_caller_allocs.load(), g_other_allocs.load()};
}

class AllocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Loads the unwinder now, not inside a counted allocation.
    void* frames[4];
    backtrace(frames, 4);
    ASSERT_TRUE(server_->AddService(&service_).ok());
    absl::Status s = server_->Start("127.0.0.1:0");
    ASSERT_TRUE(s.ok()) << s;
    auto channel = CreateChannel(absl::StrCat("127.0.0.1:", server_->port()));
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
    stub_ = EchoService::NewStub(channel_);
    request_.set_data(std::string(32, 'a'));
  }

  // `calls` blocking calls of `method` (Echo or EchoInline), one after
  // another; returns how many failed or answered wrong.
  int BlockingCalls(bool run_inline, int calls) {
    int failures = 0;
    for (int i = 0; i < calls; ++i) {
      ClientContext context;
      absl::Status s = run_inline ? stub_->EchoInline(&context, request_, &response_)
                                  : stub_->Echo(&context, request_, &response_);
      if (!s.ok() || response_.data() != request_.data()) ++failures;
    }
    return failures;
  }

  // A handler pool of fixed size: a pool that grows under load starts a
  // thread (which allocates) whenever a burst finds every thread busy;
  // that is the pool warming up, not the calls' steady state.
  static ServerOptions FixedHandlerPool() {
    ServerOptions options;
    options.handler_threads = 4;
    options.max_handler_threads = 4;
    return options;
  }

  EchoImpl service_;
  std::unique_ptr<Server> server_ = std::make_unique<Server>(FixedHandlerPool());
  std::shared_ptr<Channel> channel_;
  std::unique_ptr<EchoService::Stub> stub_;
  Payload request_;
  Payload response_;
};

constexpr int kWarmUp = 500;
constexpr int kCalls = 2000;

// The counting operator new is the one in effect, on every thread.
TEST_F(AllocationTest, TheCounterSeesAllocationsOnEveryThread) {
  const Allocations here = CountAllocations([] { ::operator delete(::operator new(16)); });
  EXPECT_EQ(here.caller, 1u);
  EXPECT_EQ(here.other, 0u);
  const Allocations there = CountAllocations([] {
    std::thread t([] { ::operator delete(::operator new(16)); });
    t.join();
  });
  // The thread's own start allocates too (its state): at least one.
  EXPECT_GE(there.other, 1u);
}

// A call on the handler pool reuses an ended call's objects: nothing of the
// earlier call (metadata, deadline, its response, trailing metadata) shows
// in the next.
TEST_F(AllocationTest, AReusedCallStartsClean) {
  ASSERT_EQ(BlockingCalls(false, kWarmUp), 0);
  {
    ClientContext context;
    context.AddMetadata("x-first", "1");
    context.AddMetadata("x-second", "2");
    context.set_deadline(absl::Now() + absl::Seconds(30));
    Payload request;
    request.set_data("trailer");
    ASSERT_TRUE(stub_->Echo(&context, request, &response_).ok());
    ASSERT_EQ(context.GetServerTrailingMetadata().count("x-echo"), 1u);
  }
  service_.Record();
  ClientContext context;
  ASSERT_TRUE(stub_->Echo(&context, request_, &response_).ok());
  const Seen seen = service_.seen();
  EXPECT_EQ(seen.client_metadata, 0u);
  EXPECT_FALSE(seen.cancelled);
  EXPECT_TRUE(seen.response_empty);
  EXPECT_EQ(seen.deadline, absl::InfiniteFuture());
  EXPECT_EQ(context.GetServerTrailingMetadata().count("x-echo"), 0u);
  EXPECT_EQ(response_.data(), request_.data());
}

TEST_F(AllocationTest, BlockingCallOnTheHandlerPoolAllocatesNothing) {
  ASSERT_EQ(BlockingCalls(false, kWarmUp), 0);
  int failures = -1;
  const Allocations a = CountAllocations([&] { failures = BlockingCalls(false, kCalls); });
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(a.caller, 0u) << "on the calling thread, over " << kCalls << " calls";
  EXPECT_EQ(a.other, 0u) << "on the engine, worker and handler threads, over " << kCalls
                         << " calls";
}

TEST_F(AllocationTest, BlockingCallRunInlineAllocatesNothing) {
  ASSERT_EQ(BlockingCalls(true, kWarmUp), 0);
  int failures = -1;
  const Allocations a = CountAllocations([&] { failures = BlockingCalls(true, kCalls); });
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(a.caller, 0u) << "on the calling thread, over " << kCalls << " calls";
  EXPECT_EQ(a.other, 0u) << "on the engine and worker threads, over " << kCalls << " calls";
}

// Keeps `in_flight` async calls going: each callback (on the channel's
// engine thread) starts the next call of its slot until `calls` have ended.
class AsyncLoop {
 public:
  AsyncLoop(EchoService::Stub* stub, const Payload& request, int in_flight)
      : stub_(stub), request_(request), slots_(static_cast<size_t>(in_flight)) {}

  // Makes `calls` calls; returns how many failed or answered wrong. Each
  // slot's next call is taken under the lock by the callback that ended
  // its last one, so a slot never has two calls.
  int Run(int calls) {
    size_t first = 0;
    {
      absl::MutexLock lock(&mu_);
      first = std::min(slots_.size(), static_cast<size_t>(calls));
      to_start_ = calls - static_cast<int>(first);
      ended_ = 0;
      failures_ = 0;
      target_ = calls;
    }
    for (size_t i = 0; i < first; ++i) Start(&slots_[i]);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](AsyncLoop* loop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loop->mu_) {
          return loop->ended_ == loop->target_;
        },
        this));
    return failures_;
  }

 private:
  struct Slot {
    std::optional<ClientContext> context;
    Payload response;
  };

  void Start(Slot* slot) {
    slot->context.emplace();
    stub_->async()->Echo(&*slot->context, request_, &slot->response,
                         [this, slot](absl::Status s) { Ended(slot, s); });
  }

  void Ended(Slot* slot, const absl::Status& s) {
    bool next = false;
    {
      absl::MutexLock lock(&mu_);
      if (!s.ok() || slot->response.data() != request_.data()) ++failures_;
      ++ended_;
      if (to_start_ > 0) {
        --to_start_;
        next = true;
      }
    }
    if (next) Start(slot);
  }

  EchoService::Stub* stub_;
  const Payload& request_;
  std::vector<Slot> slots_;
  absl::Mutex mu_;
  int to_start_ ABSL_GUARDED_BY(mu_) = 0;
  int ended_ ABSL_GUARDED_BY(mu_) = 0;
  int target_ ABSL_GUARDED_BY(mu_) = 0;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(AllocationTest, AsyncCallOneInFlightAllocatesNothing) {
  AsyncLoop loop(stub_.get(), request_, 1);
  ASSERT_EQ(loop.Run(kWarmUp), 0);
  int failures = -1;
  const Allocations a = CountAllocations([&] { failures = loop.Run(kCalls); });
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(a.caller, 0u) << "on the calling thread, over " << kCalls << " calls";
  EXPECT_EQ(a.other, 0u) << "on the engine, worker and handler threads, over " << kCalls
                         << " calls";
}

TEST_F(AllocationTest, AsyncCallsThirtyTwoInFlightAllocateNothing) {
  // One connection, whose share of the calls is then exactly 32 from the
  // first burst on: with two, each connection's share wanders, and its
  // tables (stream slots, frames, spare calls) reach their high-water mark
  // only slowly (each new mark allocates once, as any pool warming up).
  ChannelOptions one_connection;
  one_connection.pool_size = 1;
  auto channel = CreateChannel(absl::StrCat("127.0.0.1:", server_->port()), one_connection);
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::unique_ptr<EchoService::Stub> stub = EchoService::NewStub(*channel);
  AsyncLoop loop(stub.get(), request_, 32);
  ASSERT_EQ(loop.Run(20 * kWarmUp), 0);
  // On a loaded host (CI runs tests two at a time) a late thread can still
  // push a table or pool past the mark the warm-up reached (a send-buffer
  // chunk, a frame, a spare call): that allocates once, then never again.
  // So a round that allocated at all (a handful, nowhere near one per
  // call) is followed by another, and the last of at most three must
  // allocate nothing.
  Allocations a;
  for (int round = 0; round < 3; ++round) {
    int failures = -1;
    a = CountAllocations([&] { failures = loop.Run(4 * kCalls); });
    ASSERT_EQ(failures, 0);
    if (a.caller == 0 && a.other == 0) break;
    EXPECT_LE(a.caller + a.other, 16u) << "round " << round << ": more than a new high-water mark";
  }
  EXPECT_EQ(a.caller, 0u) << "on the calling thread, over " << 4 * kCalls << " calls";
  EXPECT_EQ(a.other, 0u) << "on the engine, worker and handler threads, over " << 4 * kCalls
                         << " calls";
}

}  // namespace
}  // namespace rdmarpc
