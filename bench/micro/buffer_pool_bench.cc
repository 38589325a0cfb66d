// Registered-buffer pools (runtime/transport/buffer_pool.h) on a softrdma PD.
// The fast path (Get/Put of memory registered once) is what every message
// pays; Rekey, which re-registers, is the slow path of a call that ended while
// its buffer was exposed, measured for contrast.
#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "benchmark/benchmark.h"
#include "bench/micro/soft_pd.h"
#include "runtime/transport/buffer_pool.h"

namespace rdmarpc {
namespace internal {
namespace {

// A connection's send slab: 64 buffers of 8 KiB, the default recv_depth and
// eager limit (rdmarpc/server.h).
void BM_BufferSlabGetPut(benchmark::State& state) {
  bench::SoftPd pd;
  if (pd.pd() == nullptr) {
    state.SkipWithError("softrdma: no PD");
    return;
  }
  absl::StatusOr<std::unique_ptr<BufferSlab>> slab =
      BufferSlab::Create(pd.pd(), 64, 8 * 1024, kLocalAccess);
  if (!slab.ok()) {
    state.SkipWithError(slab.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    int index = (*slab)->Get();
    benchmark::DoNotOptimize((*slab)->data(index));
    (*slab)->Put(index);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BufferSlabGetPut);

// A rendezvous buffer of state.range(0) bytes, taken from the pool's free
// list and given back: no registration after the first Get.
void BM_LargeBufferPoolGetPut(benchmark::State& state) {
  bench::SoftPd pd;
  if (pd.pd() == nullptr) {
    state.SkipWithError("softrdma: no PD");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  LargeBufferPool pool(pd.pd(), /*limit_bytes=*/0, /*keep_bytes=*/64 << 20);
  for (auto _ : state) {
    absl::StatusOr<LargeBuffer*> buffer = pool.Get(bytes);
    if (!buffer.ok()) {
      state.SkipWithError(buffer.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize((*buffer)->data);
    pool.Put(*buffer);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LargeBufferPoolGetPut)->Arg(64 << 10)->Arg(1 << 20);

// Get, then RekeyAndPut: one deregistration and registration per iteration.
void BM_LargeBufferPoolRekeyAndPut(benchmark::State& state) {
  bench::SoftPd pd;
  if (pd.pd() == nullptr) {
    state.SkipWithError("softrdma: no PD");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  LargeBufferPool pool(pd.pd(), /*limit_bytes=*/0, /*keep_bytes=*/64 << 20);
  for (auto _ : state) {
    absl::StatusOr<LargeBuffer*> buffer = pool.Get(bytes);
    if (!buffer.ok()) {
      state.SkipWithError(buffer.status().ToString().c_str());
      break;
    }
    pool.RekeyAndPut(*buffer);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LargeBufferPoolRekeyAndPut)->Arg(64 << 10)->Arg(1 << 20);

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
