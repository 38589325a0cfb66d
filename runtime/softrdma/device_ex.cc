// device_ex.cc: the extended device queries — ibv_query_device_ex,
// ibv_query_gid_ex, ibv_query_pkey — that programs built against rdma-core
// 30+ (perftest 4.5, for one) make before anything else.
#include <errno.h>
#include <net/if.h>

#include <algorithm>
#include <cstring>

#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

// verbs_context::query_device_ex. Everything beyond orig_attr is zero: no
// ODP, no timestamps, no TSO/RSS/packet pacing/tag matching/CQ moderation or
// device memory — the answer "not supported" that perftest and others test
// for (e.g. odp_caps.general_caps before --odp).
int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input,
                  ibv_device_attr_ex* attr, size_t attr_size) {
  if (context == nullptr || attr == nullptr) return EINVAL;
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  // The caller's struct may be older (shorter) than ours, never shorter than
  // the part every version has.
  if (attr_size < offsetof(ibv_device_attr_ex, comp_mask) + sizeof(attr->comp_mask)) {
    return EINVAL;
  }
  ibv_device_attr_ex full;
  std::memset(&full, 0, sizeof(full));
  if (int rc = query_device(context, &full.orig_attr); rc != 0) return rc;
  full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
  full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
  std::memset(attr, 0, attr_size);
  std::memcpy(attr, &full, std::min(attr_size, sizeof(full)));
  return 0;
}

void InitVerbsContext(SoftContext* c) {
  // As rdma-core's verbs_init_and_alloc_context makes it: verbs_get_ctx_op()
  // finds the ops set here; every other extended inline (ibv_open_xrcd,
  // ibv_alloc_dm, ...) sees a NULL op and fails with EOPNOTSUPP instead of
  // misbehaving, and ibv_query_port falls back to the exported function.
  c->ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->vctx.sz = sizeof(c->vctx);
  c->vctx.query_device_ex = QueryDeviceEx;
  c->vctx.create_qp_ex = softrdma::create_qp_ex;
  c->vctx.create_cq_ex = softrdma::create_cq_ex;
  c->vctx.alloc_td = softrdma::alloc_td;
  c->vctx.dealloc_td = softrdma::dealloc_td;
  c->vctx.alloc_parent_domain = softrdma::alloc_parent_domain;
}

}  // namespace internal

int query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                 ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (context == nullptr || entry == nullptr || flags != 0 || entry_size < sizeof(*entry)) {
    return EINVAL;
  }
  ibv_port_attr pa;
  if (int rc = query_port(context, static_cast<uint8_t>(port_num), &pa);
      rc != 0 || port_num != 1) {
    return EINVAL;
  }
  if (gid_index >= static_cast<uint32_t>(pa.gid_tbl_len)) return EINVAL;
  ibv_gid_entry e;
  std::memset(&e, 0, sizeof(e));
  if (query_gid(context, 1, static_cast<int>(gid_index), &e.gid) != 0) return errno;
  e.gid_index = gid_index;
  e.port_num = port_num;
  // The GID is an IPv4-mapped address on the loopback device, as a RoCE v2
  // GID of an rxe device bound to lo would be.
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = ::if_nametoindex("lo");
  std::memset(entry, 0, entry_size);
  std::memcpy(entry, &e, sizeof(e));
  return 0;
}

int query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  ibv_port_attr pa;
  if (context == nullptr || pkey == nullptr || query_port(context, port_num, &pa) != 0 ||
      index < 0 || index >= static_cast<int>(pa.pkey_tbl_len)) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);  // the default (full-member) partition, the only one
  return 0;
}

}  // namespace softrdma
