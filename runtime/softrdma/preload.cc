// preload.cc: softrdma under the standard libibverbs / librdmacm names.
//
// Built as libsoftrdma_preload.so. With
//   LD_PRELOAD=$PWD/build/runtime/softrdma/libsoftrdma_preload.so rping -s -a 127.0.0.1 -v -C 10
// an unmodified rdma-core program runs on softrdma: the dynamic linker binds
// its ibv_* / rdma_* calls here before libibverbs / librdmacm, and the verbs.h
// inlines (ibv_post_send, ibv_poll_cq, ...) reach softrdma through the ops
// of our ibv_context. That is the check that softrdma behaves like the real
// thing. Only the entry points RC programs use are provided.
#include <netdb.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "softrdma/softrdma.h"

// verbs.h turns some names into macros for its own inlines; we define the
// functions the macros (and old binaries) end up calling.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define SOFTRDMA_EXPORT extern "C" __attribute__((visibility("default")))

SOFTRDMA_EXPORT ibv_device** ibv_get_device_list(int* n) { return softrdma::get_device_list(n); }
SOFTRDMA_EXPORT void ibv_free_device_list(ibv_device** l) { softrdma::free_device_list(l); }
SOFTRDMA_EXPORT const char* ibv_get_device_name(ibv_device* d) {
  return softrdma::get_device_name(d);
}
SOFTRDMA_EXPORT ibv_context* ibv_open_device(ibv_device* d) { return softrdma::open_device(d); }
SOFTRDMA_EXPORT int ibv_close_device(ibv_context* c) { return softrdma::close_device(c); }
SOFTRDMA_EXPORT int ibv_query_device(ibv_context* c, ibv_device_attr* a) {
  return softrdma::query_device(c, a);
}
// The exported symbol takes the old, shorter struct; verbs.h's inline passes a
// full ibv_port_attr, but old binaries may not: fill only the common prefix.
SOFTRDMA_EXPORT int ibv_query_port(ibv_context* c, uint8_t p, _compat_ibv_port_attr* a) {
  ibv_port_attr full;
  int rc = softrdma::query_port(c, p, &full);
  if (rc == 0) std::memcpy(static_cast<void*>(a), &full, offsetof(ibv_port_attr, flags));
  return rc;
}
SOFTRDMA_EXPORT int ibv_query_gid(ibv_context* c, uint8_t p, int i, ibv_gid* g) {
  return softrdma::query_gid(c, p, i, g);
}
SOFTRDMA_EXPORT int _ibv_query_gid_ex(ibv_context* c, uint32_t port, uint32_t index,
                                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  return softrdma::query_gid_ex(c, port, index, entry, flags, entry_size);
}
SOFTRDMA_EXPORT int ibv_query_pkey(ibv_context* c, uint8_t port, int index, __be16* pkey) {
  return softrdma::query_pkey(c, port, index, pkey);
}
SOFTRDMA_EXPORT int ibv_get_async_event(ibv_context* c, ibv_async_event* e) {
  return softrdma::get_async_event(c, e);
}
SOFTRDMA_EXPORT void ibv_ack_async_event(ibv_async_event* e) { softrdma::ack_async_event(e); }
SOFTRDMA_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* c) { return softrdma::alloc_pd(c); }
SOFTRDMA_EXPORT int ibv_dealloc_pd(ibv_pd* pd) { return softrdma::dealloc_pd(pd); }
SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t len, int access) {
  return softrdma::reg_mr(pd, addr, len, access);
}
SOFTRDMA_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova,
                                         unsigned int access) {
  // softrdma addresses MRs by virtual address; iova must equal addr.
  if (iova != reinterpret_cast<uint64_t>(addr)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return softrdma::reg_mr(pd, addr, len, static_cast<int>(access));
}
SOFTRDMA_EXPORT int ibv_dereg_mr(ibv_mr* mr) { return softrdma::dereg_mr(mr); }
SOFTRDMA_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* c) {
  return softrdma::create_comp_channel(c);
}
SOFTRDMA_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  return softrdma::destroy_comp_channel(ch);
}
SOFTRDMA_EXPORT ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void* ctx, ibv_comp_channel* ch,
                                      int vec) {
  return softrdma::create_cq(c, cqe, ctx, ch, vec);
}
SOFTRDMA_EXPORT int ibv_destroy_cq(ibv_cq* cq) { return softrdma::destroy_cq(cq); }
SOFTRDMA_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) { return softrdma::resize_cq(cq, cqe); }
SOFTRDMA_EXPORT int ibv_get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** ctx) {
  return softrdma::get_cq_event(ch, cq, ctx);
}
SOFTRDMA_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int n) {
  softrdma::ack_cq_events(cq, n);
}
SOFTRDMA_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* a) {
  return softrdma::create_qp(pd, a);
}
SOFTRDMA_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  return softrdma::modify_qp(qp, a, mask);
}
SOFTRDMA_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* a, int mask, ibv_qp_init_attr* i) {
  return softrdma::query_qp(qp, a, mask, i);
}
SOFTRDMA_EXPORT int ibv_destroy_qp(ibv_qp* qp) { return softrdma::destroy_qp(qp); }
SOFTRDMA_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) { return softrdma::qp_to_qp_ex(qp); }

// Address handles and multicast serve UD QPs, which softrdma does not have.
// Programs that link them (perftest does, for its UD/multicast modes) get a
// clean "not supported" instead of libibverbs acting on softrdma's objects.
SOFTRDMA_EXPORT ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
SOFTRDMA_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, uint8_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
SOFTRDMA_EXPORT int ibv_destroy_ah(ibv_ah*) { return EINVAL; }  // no AH was ever made
SOFTRDMA_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
SOFTRDMA_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
SOFTRDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* a) {
  return softrdma::create_srq(pd, a);
}
SOFTRDMA_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* a, int mask) {
  return softrdma::modify_srq(srq, a, mask);
}
SOFTRDMA_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* a) {
  return softrdma::query_srq(srq, a);
}
SOFTRDMA_EXPORT int ibv_destroy_srq(ibv_srq* srq) { return softrdma::destroy_srq(srq); }

SOFTRDMA_EXPORT rdma_event_channel* rdma_create_event_channel() {
  return softrdma::create_event_channel();
}
SOFTRDMA_EXPORT void rdma_destroy_event_channel(rdma_event_channel* ch) {
  softrdma::destroy_event_channel(ch);
}
SOFTRDMA_EXPORT int rdma_create_id(rdma_event_channel* ch, rdma_cm_id** id, void* ctx,
                                   rdma_port_space ps) {
  return softrdma::create_id(ch, id, ctx, ps);
}
SOFTRDMA_EXPORT int rdma_destroy_id(rdma_cm_id* id) { return softrdma::destroy_id(id); }
SOFTRDMA_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* a) {
  return softrdma::bind_addr(id, a);
}
SOFTRDMA_EXPORT int rdma_listen(rdma_cm_id* id, int backlog) {
  return softrdma::listen(id, backlog);
}
SOFTRDMA_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src, sockaddr* dst, int ms) {
  return softrdma::resolve_addr(id, src, dst, ms);
}
SOFTRDMA_EXPORT int rdma_resolve_route(rdma_cm_id* id, int ms) {
  return softrdma::resolve_route(id, ms);
}
SOFTRDMA_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* a) {
  return softrdma::create_qp(id, pd, a);
}
SOFTRDMA_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* a) {
  return softrdma::create_qp_ex(id, a);
}
SOFTRDMA_EXPORT void rdma_destroy_qp(rdma_cm_id* id) { softrdma::destroy_qp(id); }
SOFTRDMA_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* p) {
  return softrdma::connect(id, p);
}
SOFTRDMA_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* p) {
  return softrdma::accept(id, p);
}
SOFTRDMA_EXPORT int rdma_reject(rdma_cm_id* id, const void* pd, uint8_t len) {
  return softrdma::reject(id, pd, len);
}
SOFTRDMA_EXPORT int rdma_disconnect(rdma_cm_id* id) { return softrdma::disconnect(id); }
SOFTRDMA_EXPORT int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                                   ibv_qp_init_attr* a) {
  return softrdma::create_ep(id, res, pd, a);
}
SOFTRDMA_EXPORT void rdma_destroy_ep(rdma_cm_id* id) { softrdma::destroy_ep(id); }
SOFTRDMA_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  return softrdma::get_request(listen, id);
}
SOFTRDMA_EXPORT int rdma_get_cm_event(rdma_event_channel* ch, rdma_cm_event** e) {
  return softrdma::get_cm_event(ch, e);
}
SOFTRDMA_EXPORT int rdma_ack_cm_event(rdma_cm_event* e) { return softrdma::ack_cm_event(e); }
SOFTRDMA_EXPORT int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* ch) {
  return softrdma::migrate_id(id, ch);
}
SOFTRDMA_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) { return softrdma::get_src_port(id); }
SOFTRDMA_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) { return softrdma::get_dst_port(id); }

// Options (timeouts, TOS, reuseaddr) have no effect on a TCP-backed device.
SOFTRDMA_EXPORT int rdma_set_option(rdma_cm_id*, int, int, void*, size_t) { return 0; }

SOFTRDMA_EXPORT int rdma_establish(rdma_cm_id* id) { return softrdma::establish(id); }
SOFTRDMA_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* a, int* mask) {
  return softrdma::init_qp_attr(id, a, mask);
}

SOFTRDMA_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    default: return "UNKNOWN EVENT";
  }
}

// Name resolution through getaddrinfo(3): the first IPv4/IPv6 result, as
// source (RAI_PASSIVE) or destination address, for RDMA_PS_TCP / RC.
SOFTRDMA_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                                     const rdma_addrinfo* hints, rdma_addrinfo** res) {
  addrinfo h{};
  h.ai_socktype = SOCK_STREAM;
  h.ai_family = AF_UNSPEC;
  bool passive = false;
  if (hints != nullptr) {
    passive = hints->ai_flags & RAI_PASSIVE;
    if (hints->ai_flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
    if (hints->ai_family == AF_INET || hints->ai_family == AF_INET6) h.ai_family = hints->ai_family;
  }
  if (passive) h.ai_flags |= AI_PASSIVE;
  addrinfo* ai = nullptr;
  int rc = ::getaddrinfo(node, service, &h, &ai);
  if (rc != 0 || ai == nullptr) {
    errno = rc == EAI_SYSTEM ? errno : ENOENT;
    return -1;
  }
  auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  auto* addr = static_cast<sockaddr*>(std::malloc(ai->ai_addrlen));
  std::memcpy(addr, ai->ai_addr, ai->ai_addrlen);
  r->ai_family = ai->ai_family;
  r->ai_qp_type = IBV_QPT_RC;
  r->ai_port_space = RDMA_PS_TCP;
  if (passive) {
    r->ai_flags = RAI_PASSIVE;
    r->ai_src_addr = addr;
    r->ai_src_len = ai->ai_addrlen;
  } else {
    r->ai_dst_addr = addr;
    r->ai_dst_len = ai->ai_addrlen;
  }
  ::freeaddrinfo(ai);
  *res = r;
  return 0;
}

SOFTRDMA_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res);
    res = next;
  }
}
