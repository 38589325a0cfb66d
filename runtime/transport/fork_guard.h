// fork_guard.h: telling objects made before a fork() from the child's own.
//
// A child of fork() has none of its parent's threads (a Channel's engines,
// a Server's workers) and shares the parent's connections: softrdma's
// sockets and rings, or a NIC's queue pairs. Driving them from the child
// would hang (no thread polls) or break the parent's connections (a
// disconnect sent on them). A Channel or Server remembers the generation it
// was made in; in a child, calls on an inherited one fail at once and its
// destruction lets go of nothing (the parent still owns it all).
#ifndef RDMARPC_RUNTIME_TRANSPORT_FORK_GUARD_H_
#define RDMARPC_RUNTIME_TRANSPORT_FORK_GUARD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

// 0 in a process that never forked since its first call here; one more in
// each child (a pthread_atfork child handler, registered on the first
// call). Any thread; a relaxed load.
uint64_t ForkGeneration();

// FAILED_PRECONDITION for `what` ("channel to 10.0.0.7:7000") made in
// process `owner_pid` and used in this forked child, saying what to do.
absl::Status InheritedAcrossFork(absl::string_view what, int owner_pid);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_FORK_GUARD_H_
