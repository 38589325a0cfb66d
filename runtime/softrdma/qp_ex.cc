// qp_ex.cc: extended QPs (ibv_create_qp_ex) and the ibv_wr_* post-send API.
//
// A QP made with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS exposes a struct ibv_qp_ex
// whose qp_base is the QP itself (rdma-core's verbs_qp layout), so
// ibv_qp_to_qp_ex() is a cast. Its wr_* ops build work requests in a
// per-QP WrBuilder between wr_start and wr_complete; wr_complete hands them,
// linked, to the same PostSend that ibv_post_send reaches, so both APIs share
// one send path, one set of checks and one set of completions.
//
// As rdma-core's mlx5 provider does (its builders record an error that
// wr_complete returns, after rolling the send queue back), a misuse inside
// the sequence — an op the QP was not created for, an SGE or inline data
// with no WR to attach it to, inline data on a READ or atomic — is
// remembered and reported by wr_complete, which then posts nothing.
#include <errno.h>

#include <cstring>
#include <vector>

#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

struct WrBuilder {
  // One work request being built; its SGEs and inline bytes are owned here,
  // so the caller's buffers may be reused as soon as wr_set_* returns.
  struct Pending {
    ibv_send_wr wr;
    std::vector<ibv_sge> sges;
    std::vector<uint8_t> inline_data;
  };
  uint64_t send_ops_flags = 0;  // IBV_QP_EX_WITH_* the QP was created with
  bool started = false;         // between wr_start and wr_complete / wr_abort
  int error = 0;                // first misuse since wr_start, an errno value
  size_t count = 0;             // WRs built: pending[0, count)
  // Entries are reused across sequences, so their vectors keep their
  // capacity and a steady stream of posts allocates nothing.
  std::vector<Pending> pending;
};

void DeleteWrBuilder(WrBuilder* b) { delete b; }

namespace {

SoftQp* FromQpx(ibv_qp_ex* qpx) { return reinterpret_cast<SoftQp*>(qpx); }

void SetError(WrBuilder* b, int err) {
  if (b->error == 0) b->error = err;
}

// Starts a WR of `opcode`, which needs IBV_QP_EX_WITH_* bit `with`.
// Returns nullptr (and records the error) on misuse.
WrBuilder::Pending* NextWr(ibv_qp_ex* qpx, ibv_wr_opcode opcode, uint64_t with) {
  WrBuilder* b = FromQpx(qpx)->wr.get();
  if (!b->started) {
    SetError(b, EINVAL);  // wr_<op> outside wr_start .. wr_complete
    return nullptr;
  }
  if ((b->send_ops_flags & with) == 0) {
    SetError(b, EOPNOTSUPP);  // not in the QP's send_ops_flags
    return nullptr;
  }
  if (b->count == b->pending.size()) b->pending.emplace_back();
  WrBuilder::Pending* p = &b->pending[b->count++];
  std::memset(&p->wr, 0, sizeof(p->wr));
  p->wr.wr_id = qpx->wr_id;
  // Inline is chosen per WR by wr_set_inline_data, not by a flag (ibv_wr_post(3)).
  p->wr.send_flags = qpx->wr_flags & ~static_cast<unsigned int>(IBV_SEND_INLINE);
  p->wr.opcode = opcode;
  p->sges.clear();
  p->inline_data.clear();
  return p;
}

// The WR that wr_set_* attaches data to: the last one started.
WrBuilder::Pending* CurrentWr(ibv_qp_ex* qpx) {
  WrBuilder* b = FromQpx(qpx)->wr.get();
  if (!b->started || b->count == 0) {
    SetError(b, EINVAL);
    return nullptr;
  }
  return &b->pending[b->count - 1];
}

void WrSend(ibv_qp_ex* qpx) { NextWr(qpx, IBV_WR_SEND, IBV_QP_EX_WITH_SEND); }

void WrSendImm(ibv_qp_ex* qpx, __be32 imm_data) {
  WrBuilder::Pending* p = NextWr(qpx, IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM);
  if (p != nullptr) p->wr.imm_data = imm_data;
}

void WrRdmaWrite(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  WrBuilder::Pending* p = NextWr(qpx, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE);
  if (p == nullptr) return;
  p->wr.wr.rdma.rkey = rkey;
  p->wr.wr.rdma.remote_addr = remote_addr;
}

void WrRdmaWriteImm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) {
  WrBuilder::Pending* p =
      NextWr(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
  if (p == nullptr) return;
  p->wr.wr.rdma.rkey = rkey;
  p->wr.wr.rdma.remote_addr = remote_addr;
  p->wr.imm_data = imm_data;
}

void WrRdmaRead(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  WrBuilder::Pending* p = NextWr(qpx, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ);
  if (p == nullptr) return;
  p->wr.wr.rdma.rkey = rkey;
  p->wr.wr.rdma.remote_addr = remote_addr;
}

void WrAtomicCmpSwp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                    uint64_t swap) {
  WrBuilder::Pending* p =
      NextWr(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
  if (p == nullptr) return;
  p->wr.wr.atomic.rkey = rkey;
  p->wr.wr.atomic.remote_addr = remote_addr;
  p->wr.wr.atomic.compare_add = compare;
  p->wr.wr.atomic.swap = swap;
}

void WrAtomicFetchAdd(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  WrBuilder::Pending* p =
      NextWr(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
  if (p == nullptr) return;
  p->wr.wr.atomic.rkey = rkey;
  p->wr.wr.atomic.remote_addr = remote_addr;
  p->wr.wr.atomic.compare_add = add;
}

// Operations softrdma has no support for on an RC QP (memory-window binds,
// invalidation, TSO, UD/XRC addressing, atomic write): create_qp_ex refuses
// their IBV_QP_EX_WITH_* bits, and calling one anyway fails the sequence.
void WrBindMw(ibv_qp_ex* qpx, ibv_mw*, uint32_t, const ibv_mw_bind_info*) {
  SetError(FromQpx(qpx)->wr.get(), EOPNOTSUPP);
}
void WrLocalInv(ibv_qp_ex* qpx, uint32_t) { SetError(FromQpx(qpx)->wr.get(), EOPNOTSUPP); }
void WrSendInv(ibv_qp_ex* qpx, uint32_t) { SetError(FromQpx(qpx)->wr.get(), EOPNOTSUPP); }
void WrSendTso(ibv_qp_ex* qpx, void*, uint16_t, uint16_t) {
  SetError(FromQpx(qpx)->wr.get(), EOPNOTSUPP);
}
void WrSetUdAddr(ibv_qp_ex* qpx, ibv_ah*, uint32_t, uint32_t) {
  SetError(FromQpx(qpx)->wr.get(), EOPNOTSUPP);
}
void WrSetXrcSrqn(ibv_qp_ex* qpx, uint32_t) { SetError(FromQpx(qpx)->wr.get(), EOPNOTSUPP); }
void WrAtomicWrite(ibv_qp_ex* qpx, uint32_t, uint64_t, const void*) {
  SetError(FromQpx(qpx)->wr.get(), EOPNOTSUPP);
}

void WrSetSge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  WrBuilder::Pending* p = CurrentWr(qpx);
  if (p == nullptr) return;
  p->inline_data.clear();
  p->wr.send_flags &= ~static_cast<unsigned int>(IBV_SEND_INLINE);
  p->sges.assign(1, ibv_sge{addr, length, lkey});
}

void WrSetSgeList(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  WrBuilder::Pending* p = CurrentWr(qpx);
  if (p == nullptr) return;
  p->inline_data.clear();
  p->wr.send_flags &= ~static_cast<unsigned int>(IBV_SEND_INLINE);
  p->sges.assign(sg_list, sg_list + num_sge);
}

bool InlineAllowed(ibv_qp_ex* qpx, WrBuilder::Pending* p) {
  switch (p->wr.opcode) {
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      SetError(FromQpx(qpx)->wr.get(), EINVAL);  // they write locally: no inline
      return false;
    default:
      return true;
  }
}

void SetInline(WrBuilder::Pending* p) {
  p->wr.send_flags |= IBV_SEND_INLINE;
  p->sges.assign(1, ibv_sge{reinterpret_cast<uintptr_t>(p->inline_data.data()),
                            static_cast<uint32_t>(p->inline_data.size()), 0});
}

void WrSetInlineData(ibv_qp_ex* qpx, void* addr, size_t length) {
  WrBuilder::Pending* p = CurrentWr(qpx);
  if (p == nullptr || !InlineAllowed(qpx, p)) return;
  const auto* bytes = static_cast<const uint8_t*>(addr);
  p->inline_data.assign(bytes, bytes + length);
  SetInline(p);
}

void WrSetInlineDataList(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* buf_list) {
  WrBuilder::Pending* p = CurrentWr(qpx);
  if (p == nullptr || !InlineAllowed(qpx, p)) return;
  p->inline_data.clear();
  for (size_t i = 0; i < num_buf; ++i) {
    const auto* bytes = static_cast<const uint8_t*>(buf_list[i].addr);
    p->inline_data.insert(p->inline_data.end(), bytes, bytes + buf_list[i].length);
  }
  SetInline(p);
}

void WrStart(ibv_qp_ex* qpx) {
  WrBuilder* b = FromQpx(qpx)->wr.get();
  b->started = true;
  b->error = 0;
  b->count = 0;
}

void WrAbort(ibv_qp_ex* qpx) {
  WrBuilder* b = FromQpx(qpx)->wr.get();
  b->started = false;
  b->error = 0;
  b->count = 0;
}

// The checks PostSend would fail a WR with (and so post the WRs before it),
// made before anything is posted, so that an error posts none (as mlx5 rolls
// its send queue back). Checks needing the QP's state or keys stay in
// PostSend; a QP in the wrong state fails at the first WR, so posts none too.
int CheckAll(SoftQp* q, const WrBuilder& b, size_t n) {
  ibv_qp_cap cap;
  size_t outstanding;
  {
    internal::DomainLock l(&q->mu);
    cap = q->cap;
    outstanding = q->sq.size() + q->sq_unpolled.load();
  }
  if (outstanding + n > cap.max_send_wr) return ENOMEM;
  for (size_t i = 0; i < n; ++i) {
    const WrBuilder::Pending& p = b.pending[i];
    if (p.sges.size() > cap.max_send_sge) return EINVAL;
    if (!p.inline_data.empty() && p.inline_data.size() > cap.max_inline_data) return EINVAL;
  }
  return 0;
}

int WrComplete(ibv_qp_ex* qpx) {
  SoftQp* q = FromQpx(qpx);
  internal::OwnerScope owner(q->mu.domain());  // the user's data-path verb
  WrBuilder* b = q->wr.get();
  if (!b->started) return EINVAL;
  b->started = false;
  const size_t n = b->count;
  b->count = 0;
  if (b->error != 0) return b->error;
  if (n == 0) return 0;
  if (int err = CheckAll(q, *b, n); err != 0) return err;
  for (size_t i = 0; i < n; ++i) {
    WrBuilder::Pending& p = b->pending[i];
    p.wr.sg_list = p.sges.data();
    p.wr.num_sge = static_cast<int>(p.sges.size());
    p.wr.next = i + 1 < n ? &b->pending[i + 1].wr : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  return PostSend(&q->qp, &b->pending[0].wr, &bad);
}

// The IBV_QP_EX_WITH_* operations softrdma carries on an RC QP.
constexpr uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

// Every IBV_QP_INIT_ATTR_* bit this verbs.h knows.
constexpr uint32_t kKnownInitAttrMask =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

}  // namespace
}  // namespace internal

using internal::SoftQp;

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (context == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t mask = attr->comp_mask;
  if ((mask & ~internal::kKnownInitAttrMask) != 0) {
    errno = EINVAL;  // a bit from a newer verbs.h than softrdma was built with
    return nullptr;
  }
  // XRC, TSO and RSS (raw packet) QPs are not supported; CREATE_FLAGS only
  // with no flag set.
  if ((mask & (IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
               IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH)) != 0 ||
      ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags != 0)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // An RC QP needs a PD of this context.
  if (!(mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr || attr->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  const bool with_ops = (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  if (with_ops && (attr->send_ops_flags & ~internal::kSupportedSendOps) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // ibv_qp_init_attr is the leading part of ibv_qp_init_attr_ex (verbs.h
  // keeps them in step, and ibv_create_qp_ex casts one to the other).
  ibv_qp_init_attr base;
  std::memcpy(&base, attr, sizeof(base));
  ibv_qp* qp = create_qp(attr->pd, &base);
  if (qp == nullptr) return nullptr;
  attr->cap = base.cap;
  if (with_ops) {
    SoftQp* q = internal::ToSoft(qp);
    auto* b = new internal::WrBuilder();
    b->send_ops_flags = attr->send_ops_flags;
    q->wr.reset(b);
    ibv_qp_ex& x = q->qpx;
    x.comp_mask = 0;
    x.wr_id = 0;
    x.wr_flags = 0;
    x.wr_atomic_cmp_swp = internal::WrAtomicCmpSwp;
    x.wr_atomic_fetch_add = internal::WrAtomicFetchAdd;
    x.wr_bind_mw = internal::WrBindMw;
    x.wr_local_inv = internal::WrLocalInv;
    x.wr_rdma_read = internal::WrRdmaRead;
    x.wr_rdma_write = internal::WrRdmaWrite;
    x.wr_rdma_write_imm = internal::WrRdmaWriteImm;
    x.wr_send = internal::WrSend;
    x.wr_send_imm = internal::WrSendImm;
    x.wr_send_inv = internal::WrSendInv;
    x.wr_send_tso = internal::WrSendTso;
    x.wr_set_ud_addr = internal::WrSetUdAddr;
    x.wr_set_xrc_srqn = internal::WrSetXrcSrqn;
    x.wr_set_inline_data = internal::WrSetInlineData;
    x.wr_set_inline_data_list = internal::WrSetInlineDataList;
    x.wr_set_sge = internal::WrSetSge;
    x.wr_set_sge_list = internal::WrSetSgeList;
    x.wr_start = internal::WrStart;
    x.wr_complete = internal::WrComplete;
    x.wr_abort = internal::WrAbort;
    x.wr_atomic_write = internal::WrAtomicWrite;
  }
  return qp;
}

ibv_qp_ex* qp_to_qp_ex(ibv_qp* qp) {
  if (qp == nullptr) return nullptr;
  SoftQp* q = internal::ToSoft(qp);
  return q->wr != nullptr ? &q->qpx : nullptr;
}

}  // namespace softrdma
