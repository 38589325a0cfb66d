// faults.h: fault-injection knobs on softrdma, for tests of the layers above.
//
// Each knob makes softrdma fail the way a NIC or a network does, so a test can
// check that the caller recovers (LevelDB's EnvWrapper idea, but as switches
// on the device itself since verbs objects are plain C structs):
//
//   softrdma::FailNextRegMr(1, ENOMEM);   // the next ibv_reg_mr returns NULL/ENOMEM
//   softrdma::DropConnection(id);         // the link dies: both ends flush and
//                                         // get RDMA_CM_EVENT_DISCONNECTED
//
// All knobs are process-wide and thread-safe.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_FAULTS_H_
#define RDMARPC_RUNTIME_SOFTRDMA_FAULTS_H_

#include <rdma/rdma_cma.h>

namespace softrdma {

// The next `count` calls of reg_mr fail with errno `err` (e.g. ENOMEM, as when
// RLIMIT_MEMLOCK is exhausted). count 0 clears the knob.
void FailNextRegMr(int count, int err);

// Breaks the TCP connection under a connected rdma_cm id, as a dead link or a
// crashed peer would: both ends' QPs go to ERROR, flush every outstanding WR
// with IBV_WC_WR_FLUSH_ERR, and both ends get RDMA_CM_EVENT_DISCONNECTED.
// Returns 0, or -1 with errno EINVAL when the id has no connection.
int DropConnection(rdma_cm_id* id);

}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_FAULTS_H_
