// server_hooks.cc: see server_hooks.h.
#include "runtime/rpc/server_hooks.h"

#include <atomic>

namespace rdmarpc {
namespace internal {
namespace {
std::atomic<ServerHooks*> installed{nullptr};
}  // namespace

void InstallServerHooks(ServerHooks* hooks) { installed.store(hooks, std::memory_order_release); }
ServerHooks* InstalledServerHooks() { return installed.load(std::memory_order_acquire); }

}  // namespace internal
}  // namespace rdmarpc
