// client_call_cache.cc: the per-thread shards of ClientCallCache.
#include "runtime/rpc/client_call_cache.h"

#include <sanitizer/asan_interface.h>

#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/rpc/channel_impl.h"

namespace rdmarpc {
namespace internal {

struct ClientCallCache::Shard {
  ClientCall* local = nullptr;                 // owner thread only
  std::atomic<ClientCall*> returned{nullptr};  // pushed by any thread
};

namespace {

// Shards no thread owns now. Never destroyed: calls in flight at exit may
// still return to a shard.
struct Unowned {
  absl::Mutex mu;
  std::vector<ClientCallCache::Shard*> shards ABSL_GUARDED_BY(mu);
};
Unowned& UnownedShards() {
  static Unowned* unowned = new Unowned;
  return *unowned;
}

// This thread's shard, adopted or made at its first Take and left to the
// next thread when it exits.
class ShardHolder {
 public:
  ClientCallCache::Shard* shard() {
    if (shard_ == nullptr) {
      Unowned& u = UnownedShards();
      absl::MutexLock lock(&u.mu);
      if (!u.shards.empty()) {
        shard_ = u.shards.back();
        u.shards.pop_back();
      } else {
        shard_ = new ClientCallCache::Shard;
      }
    }
    return shard_;
  }
  ~ShardHolder() {
    gone_ = true;
    if (shard_ == nullptr) return;
    Unowned& u = UnownedShards();
    absl::MutexLock lock(&u.mu);
    u.shards.push_back(shard_);
    shard_ = nullptr;
  }
  // True once the thread's shard was left to the next thread (this holder
  // was destroyed at thread exit): a thread_local destructed later that
  // makes a call must not use it (ClientCallCache::Take).
  bool gone() const { return gone_; }

 private:
  ClientCallCache::Shard* shard_ = nullptr;
  bool gone_ = false;
};

thread_local ShardHolder t_shard;

}  // namespace

ClientCall* ClientCallCache::Take() {
  if (t_shard.gone()) {
    // Thread exit, after this thread's shard went to the unowned ones: a
    // new call homed on a new shard, which joins them (this thread never
    // touches it again).
    auto* shard = new Shard;
    auto* call = new ClientCall;
    call->home = shard;
    Unowned& u = UnownedShards();
    absl::MutexLock lock(&u.mu);
    u.shards.push_back(shard);
    return call;
  }
  Shard* shard = t_shard.shard();
  if (shard->local == nullptr) {
    shard->local = shard->returned.exchange(nullptr, std::memory_order_acquire);
  }
  ClientCall* call = shard->local;
  if (call == nullptr) {
    call = new ClientCall;
  } else {
    ASAN_UNPOISON_MEMORY_REGION(call, sizeof(ClientCall));
    shard->local = call->next_free;
    call->next_free = nullptr;
  }
  call->home = shard;
  return call;
}

namespace {

// `s` emptied, keeping its room unless that grew past kMaxKeptBytes.
std::string Emptied(std::string s) {
  if (s.capacity() > ClientCallCache::kMaxKeptBytes) return std::string();
  s.clear();
  return s;
}

}  // namespace

void ClientCallCache::Give(ClientCall* call) {
  Shard* home = call->home;
  // Back to the state of a new call, keeping the strings' room.
  std::string method_storage = Emptied(std::move(call->method_storage));
  std::string payload = Emptied(std::move(call->payload));
  std::string meta = Emptied(std::move(call->meta));
  call->~ClientCall();
  new (call) ClientCall;
  call->method_storage = std::move(method_storage);
  call->payload = std::move(payload);
  call->meta = std::move(meta);
  // Poisoned up to its kept strings and link (the last members, which
  // LeakSanitizer must still see and the pushes below write, through
  // `link`: a member access would have UndefinedBehaviorSanitizer read the
  // poisoned vtable pointer).
  ClientCall** link = &call->next_free;
  char* begin = reinterpret_cast<char*>(call);
  char* kept = reinterpret_cast<char*>(&call->method_storage);
  ASAN_POISON_MEMORY_REGION(begin, static_cast<size_t>(kept - begin));
  ClientCall* head = home->returned.load(std::memory_order_relaxed);
  do {
    *link = head;
  } while (!home->returned.compare_exchange_weak(head, call, std::memory_order_release,
                                                 std::memory_order_relaxed));
}

}  // namespace internal
}  // namespace rdmarpc
