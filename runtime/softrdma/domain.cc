// domain.cc: thread domains, parent domains and extended CQs -- the verbs a
// program uses to tell the provider that one thread at a time drives a set of
// QPs and CQs (ibv_alloc_td(3), ibv_alloc_parent_domain(3),
// ibv_create_cq_ex(3)), as mlx5 offers them. Their checks follow rdma-core's
// man pages and mlx5's verbs.c: a parent domain stands for its protection
// domain wherever a PD is taken, and keeps it and its thread domain busy
// (EBUSY) while it lives.
#include <errno.h>

#include <cstring>

#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {

using internal::SoftCq;
using internal::SoftPd;
using internal::SoftTd;

ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* init_attr) {
  if (context == nullptr || init_attr == nullptr || init_attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* t = new SoftTd();
  t->td.context = context;
  return &t->td;
}

int dealloc_td(ibv_td* td) {
  if (td == nullptr) return EINVAL;
  if (internal::ToSoft(td)->refs.load() > 0) return EBUSY;
  delete internal::ToSoft(td);
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnownMask =
      IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (context == nullptr || attr == nullptr || attr->pd == nullptr ||
      attr->pd->context != context || (attr->comp_mask & ~kKnownMask) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  SoftPd* protection = internal::ToSoft(attr->pd);
  // A parent domain is made on a protection domain, not on another parent.
  if (protection->protection != nullptr ||
      (attr->td != nullptr && attr->td->context != context)) {
    errno = EINVAL;
    return nullptr;
  }
  // IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: accepted and not called.
  // softrdma's queues live in its own heap, which no device reads by DMA;
  // where mlx5 would place a QP's or CQ's buffer with the user's allocator
  // there is nothing to place. pd_context is only ever passed to those.
  auto* p = new SoftPd();
  p->pd.context = context;
  p->pd.handle = attr->pd->handle;  // what the kernel would see: the real PD
  p->protection = protection;
  p->td = attr->td != nullptr ? internal::ToSoft(attr->td) : nullptr;
  protection->refs++;
  if (p->td != nullptr) p->td->refs++;
  internal::Stat().live_pds++;
  return &p->pd;
}

namespace internal {
namespace {

SoftCq* FromEx(ibv_cq_ex* cq) { return reinterpret_cast<SoftCq*>(cq); }

// One CQE into ex_wc and the public status / wr_id. ENOENT: none ready.
int PollOneEx(ibv_cq_ex* cq) {
  SoftCq* c = FromEx(cq);
  const int n = PollCq(&c->cq, 1, &c->ex_wc);
  if (n < 0) return EIO;  // CQ overrun: the CQ is in error, as poll_cq says
  if (n == 0) return ENOENT;
  cq->status = c->ex_wc.status;
  cq->wr_id = c->ex_wc.wr_id;
  return 0;
}

int StartPollEx(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr == nullptr || attr->comp_mask != 0) return EINVAL;
  return PollOneEx(cq);
}
int NextPollEx(ibv_cq_ex* cq) { return PollOneEx(cq); }
void EndPollEx(ibv_cq_ex* /*cq*/) {}
ibv_wc_opcode ReadOpcodeEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.opcode; }
uint32_t ReadVendorErrEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.vendor_err; }
uint32_t ReadByteLenEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.byte_len; }
__be32 ReadImmDataEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.imm_data; }
uint32_t ReadQpNumEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.qp_num; }
uint32_t ReadSrcQpEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.src_qp; }
unsigned int ReadWcFlagsEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.wc_flags; }
uint32_t ReadSlidEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.slid; }
uint8_t ReadSlEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.sl; }
uint8_t ReadDlidPathBitsEx(ibv_cq_ex* cq) { return FromEx(cq)->ex_wc.dlid_path_bits; }

}  // namespace
}  // namespace internal

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  constexpr uint32_t kKnownMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  if (context == nullptr || attr == nullptr || (attr->comp_mask & ~kKnownMask) != 0 ||
      attr->comp_vector >= static_cast<uint32_t>(context->num_comp_vectors)) {
    errno = EINVAL;
    return nullptr;
  }
  // Timestamps, VLANs, flow tags and tag matching: the device reports none of
  // them (query_device_ex), so a CQ cannot deliver them.
  const uint32_t flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0;
  if ((attr->wc_flags & ~static_cast<uint64_t>(IBV_WC_STANDARD_FLAGS)) != 0 ||
      (flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  SoftTd* td = nullptr;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
    // Only a parent domain may be given (mlx5: EINVAL for a plain PD).
    ibv_pd* pd = attr->parent_domain;
    if (pd == nullptr || pd->context != context || internal::ToSoft(pd)->protection == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    td = internal::ToSoft(pd)->td;
  }
  if (attr->cqe < 1 || attr->cqe > static_cast<uint32_t>(internal::kMaxCqe)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq* cq = create_cq(context, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                         static_cast<int>(attr->comp_vector));
  if (cq == nullptr) return nullptr;
  SoftCq* c = internal::ToSoft(cq);
  c->td = td;
  c->single_threaded = (flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0;
  ibv_cq_ex& x = c->cqx;
  x.comp_mask = 0;
  x.start_poll = internal::StartPollEx;
  x.next_poll = internal::NextPollEx;
  x.end_poll = internal::EndPollEx;
  x.read_opcode = internal::ReadOpcodeEx;
  x.read_vendor_err = internal::ReadVendorErrEx;
  x.read_wc_flags = internal::ReadWcFlagsEx;
  // As mlx5: a field's reader is set only when the CQ was asked for it.
  const uint64_t w = attr->wc_flags;
  if (w & IBV_WC_EX_WITH_BYTE_LEN) x.read_byte_len = internal::ReadByteLenEx;
  if (w & IBV_WC_EX_WITH_IMM) x.read_imm_data = internal::ReadImmDataEx;
  if (w & IBV_WC_EX_WITH_QP_NUM) x.read_qp_num = internal::ReadQpNumEx;
  if (w & IBV_WC_EX_WITH_SRC_QP) x.read_src_qp = internal::ReadSrcQpEx;
  if (w & IBV_WC_EX_WITH_SLID) x.read_slid = internal::ReadSlidEx;
  if (w & IBV_WC_EX_WITH_SL) x.read_sl = internal::ReadSlEx;
  if (w & IBV_WC_EX_WITH_DLID_PATH_BITS) x.read_dlid_path_bits = internal::ReadDlidPathBitsEx;
  return &x;
}

}  // namespace softrdma
