// relisten_delay_shim.cc: an LD_PRELOAD shim for perftest_reject_test.sh.
//
// Wraps rdma_listen so that the process's second call (perftest's listener
// for the test QPs, after the one it exchanged parameters on) starts
// SHIM_LISTEN_DELAY_MS (default 1500) later: the client's rdma_connect then
// reaches a port nobody listens on and is rejected, which is the race a
// loaded machine hits by chance. Placed before libsoftrdma_preload.so in
// LD_PRELOAD, it forwards to softrdma's rdma_listen (RTLD_NEXT).
#include <dlfcn.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

extern "C" __attribute__((visibility("default"))) int rdma_listen(rdma_cm_id* id, int backlog) {
  static std::atomic<int> calls{0};
  using ListenFn = int (*)(rdma_cm_id*, int);
  static ListenFn real = reinterpret_cast<ListenFn>(dlsym(RTLD_NEXT, "rdma_listen"));
  if (++calls == 2) {
    const char* ms = std::getenv("SHIM_LISTEN_DELAY_MS");
    usleep(static_cast<useconds_t>((ms != nullptr ? std::atoi(ms) : 1500)) * 1000);
  }
  return real(id, backlog);
}
