// mw.cc: memory windows, type 1 and type 2 (IB spec 10.6.7; rdma-core's
// ibv_alloc_mw(3), ibv_bind_mw(3)).
//
// A window exposes part of an MR (registered with IBV_ACCESS_MW_BIND) to the
// peer under its own rkey, with its own remote access flags:
//  - type 1: bound with the ibv_bind_mw verb (which posts a BIND_MW work
//    request on the QP, completing with IBV_WC_BIND_MW); usable through any
//    QP of its PD; a new bind (or unbind: length 0) moves the rkey on with
//    ibv_inc_rkey.
//  - type 2: bound with an IBV_WR_BIND_MW work request, which names the new
//    rkey (same upper 24 bits, the low 8 from the user); usable only through
//    the QP that bound it; bound only from the free state, freed again by
//    IBV_WR_LOCAL_INV or by a peer's IBV_WR_SEND_WITH_INV.
// Bindings live in the key table (device.cc) beside the MR keys, so the
// responder's rkey check covers windows with no extra lock.
#include <errno.h>

#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) {
  if (pd == nullptr || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* m = new SoftMw();
  m->mw.context = pd->context;
  m->mw.pd = pd;
  m->mw.type = type;
  m->mw.rkey = NewMwRkey();
  m->mw.handle = m->mw.rkey >> 8;
  MwRegister(m);
  ToSoft(pd)->refs++;  // dealloc_pd fails with EBUSY while the window lives
  Stat().live_mws++;
  return &m->mw;
}

int DeallocMw(ibv_mw* mw) {
  if (mw == nullptr) return EINVAL;
  SoftMw* m = ToSoft(mw);
  MwForget(m);  // its rkey stops working at once
  ToSoft(mw->pd)->refs--;
  Stat().live_mws--;
  delete m;
  return 0;
}

}  // namespace internal

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) { return internal::AllocMw(pd, type); }

int dealloc_mw(ibv_mw* mw) { return internal::DeallocMw(mw); }

int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  if (qp == nullptr || mw == nullptr || mw_bind == nullptr) return EINVAL;
  // The same checks as the verbs.h inline, for callers of this function.
  const ibv_mw_bind_info& b = mw_bind->bind_info;
  if (mw->type != IBV_MW_TYPE_1) return EINVAL;
  if (b.mr == nullptr && (b.addr != 0 || b.length != 0)) return EINVAL;
  if (b.mr != nullptr &&
      internal::ProtectionDomain(b.mr->pd) != internal::ProtectionDomain(mw->pd)) {
    return EPERM;
  }
  return internal::BindMwVerb(qp, mw, mw_bind);
}

}  // namespace softrdma
