// faults_internal.h: the hooks through which softrdma's verbs consult the
// knobs of faults.h. Each hook is cheap when its knob is off (one relaxed
// atomic load after the first call, which reads the environment).
#ifndef RDMARPC_RUNTIME_SOFTRDMA_FAULTS_INTERNAL_H_
#define RDMARPC_RUNTIME_SOFTRDMA_FAULTS_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#include <infiniband/verbs.h>

#include "softrdma/faults.h"

namespace softrdma {
namespace internal {

// Consumes one injected failure of `op`: true, with *err set, when the call
// must fail now.
bool TakeInjectedFailure(FaultOp op, int* err);

// A send WR completed successfully with `byte_len` bytes: true when its link
// must die now (DropAfterWrs / DropAfterBytes fired).
bool CountCompletedSend(uint32_t byte_len);

// A send WR is about to be posted: true when its QP's peer must vanish now
// (VanishAfterWrs fired).
bool CountPostedSendForVanish();

// True while a knob that acts on the link's frames is set (DropAfterWrs,
// DropAfterBytes, VanishAfterWrs, RecvBeforeSend): new connections then stay
// on TCP, where those knobs count and hold frames (softrdma.h, same-host link).
bool LinkFaultsArmed();

// DelayCompletions: nanoseconds a new CQE stays invisible (0: off).
int64_t CompletionDelayNanos();

// RecvBeforeSend: true when responders hold ACKs back, with the longest hold.
bool AckHoldEnabled(uint32_t* max_hold_micros);

// The memlock cap: pins the pages of [addr, addr + length) for a new MR.
// False (nothing pinned) when they would pass the cap. *pinned gets the bytes
// to give back with UnpinPages when the MR goes.
bool PinPages(const void* addr, size_t length, uint64_t* pinned);
void UnpinPages(uint64_t pinned);

// Records a CQE the device made (only errors are kept).
inline void RecordCqe(const ibv_wc& wc);
void RecordErrorCqe(const ibv_wc& wc);
inline void RecordCqe(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) RecordErrorCqe(wc);
}
// RecvBeforeSend: a held ACK went out behind a request.
void CountAckBehindRequest();

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_FAULTS_INTERNAL_H_
