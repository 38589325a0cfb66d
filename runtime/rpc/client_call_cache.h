// client_call_cache.h: asynchronous unary calls' ClientCall objects, reused.
//
// An asynchronous call needs a ClientCall that outlives the caller's stack;
// making one per call costs a heap allocation for it, one for its method
// name and one for its serialised request. This cache keeps ended calls,
// with the room their strings grew, for the next call.
//
// Each thread takes calls from a shard of its own, with no lock (a mutex
// only the first time, to find its shard). Whichever thread ends a call
// (usually a loop thread) gives it back to the shard it came from by
// pushing it onto that shard's return list: one compare-and-swap. The
// owner takes the whole return list with one exchange when its own list
// runs dry (a pop of the whole list has no ABA problem). This is the
// "thread free list" of mimalloc (D. Leijen, B. Zorn, L. de Moura,
// "Mimalloc: Free List Sharding in Action", APLAS 2019). Shards outlive
// their threads: a thread that exits leaves its shard, with what it holds,
// to the next thread that starts, so calls still in flight always have a
// shard to return to. A shard holds as many calls as its thread had in
// flight at once; a string grown past kMaxKeptBytes is freed, not kept.
// Under AddressSanitizer a cached call is poisoned (all but the strings it
// keeps and its free-list link), so a stale touch of an ended call is
// reported as a use after free would be.
#ifndef RDMARPC_RUNTIME_RPC_CLIENT_CALL_CACHE_H_
#define RDMARPC_RUNTIME_RPC_CLIENT_CALL_CACHE_H_

#include <atomic>
#include <cstddef>

namespace rdmarpc {
namespace internal {

class ClientCall;

class ClientCallCache {
 public:
  struct Shard;
  // Room kept per string of a cached call (method, request, metadata).
  static constexpr size_t kMaxKeptBytes = 64 * 1024;

  // Any thread: a ClientCall in its just-constructed state (strings empty,
  // perhaps with room), from this thread's shard or new. Give it back with
  // Give, never delete it.
  static ClientCall* Take();
  // Any thread: ends the life of a call from Take (it is reset and kept
  // for a later Take by the thread it came from).
  static void Give(ClientCall* call);
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_CLIENT_CALL_CACHE_H_
