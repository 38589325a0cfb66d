// ClientCallCache (runtime/rpc/client_call_cache.h): an asynchronous call's
// ClientCall goes back to the shard of the thread that took it, reset, with
// its strings' room, from whichever thread ends it.
#include "runtime/rpc/client_call_cache.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/rpc/channel_impl.h"

namespace rdmarpc {
namespace internal {
namespace {

TEST(ClientCallCache, ACallGivenBackComesBackResetWithItsRoom) {
  ClientCall* call = ClientCallCache::Take();
  call->method_storage.assign(100, 'm');
  call->payload.assign(4096, 'p');
  call->deadline = absl::Now();
  call->transparent_retries = 2;
  const char* payload_bytes = call->payload.data();
  ClientCallCache::Give(call);
  ClientCall* again = ClientCallCache::Take();
  ASSERT_EQ(again, call);  // this thread's shard: the same object
  EXPECT_TRUE(again->method_storage.empty());
  EXPECT_TRUE(again->payload.empty());
  EXPECT_GE(again->payload.capacity(), 4096u);
  EXPECT_EQ(again->payload.data(), payload_bytes);  // the room it had
  EXPECT_EQ(again->deadline, absl::InfiniteFuture());
  EXPECT_EQ(again->transparent_retries, 0);
  EXPECT_EQ(again->done, nullptr);
  ClientCallCache::Give(again);
}

TEST(ClientCallCache, CallsEndedOnOtherThreadsReturnToTheirOwner) {
  constexpr int kCalls = 64;
  std::vector<ClientCall*> calls;
  for (int i = 0; i < kCalls; ++i) calls.push_back(ClientCallCache::Take());
  // Two "loop threads" end them, concurrently.
  std::thread a([&] {
    for (int i = 0; i < kCalls; i += 2) ClientCallCache::Give(calls[i]);
  });
  std::thread b([&] {
    for (int i = 1; i < kCalls; i += 2) ClientCallCache::Give(calls[i]);
  });
  a.join();
  b.join();
  // This thread takes all of them again, and no other object.
  std::vector<ClientCall*> again;
  for (int i = 0; i < kCalls; ++i) again.push_back(ClientCallCache::Take());
  std::vector<ClientCall*> sorted_calls = calls, sorted_again = again;
  std::sort(sorted_calls.begin(), sorted_calls.end());
  std::sort(sorted_again.begin(), sorted_again.end());
  EXPECT_EQ(sorted_again, sorted_calls);
  for (ClientCall* c : again) ClientCallCache::Give(c);
}

TEST(ClientCallCache, AThreadThatExitsLeavesItsShardToTheNext) {
  ClientCall* left = nullptr;
  std::thread first([&] { left = ClientCallCache::Take(); });
  first.join();
  ClientCallCache::Give(left);  // its thread is gone: back to its shard all the same
  ClientCall* taken = nullptr;
  std::thread second([&] {
    taken = ClientCallCache::Take();
    ClientCallCache::Give(taken);
  });
  second.join();
  EXPECT_EQ(taken, left);  // the next thread adopted the shard, call and all
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
