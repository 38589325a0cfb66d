// softrdma.h: a software RDMA device in user space.
//
// softrdma implements the part of the libibverbs and librdmacm API that
// reliable-connected (RC) applications use, over TCP between processes and
// hosts. Every function here has exactly the signature and the error
// convention (NULL or -1 with errno set, or a positive errno value where
// rdma-core returns one) of the rdma-core function of the same name without
// the `softrdma::` namespace, so a caller can bind either through one table of
// function pointers. Objects are rdma-core's own structs (struct ibv_context,
// struct ibv_qp, struct rdma_cm_id, ...), and the data-path inlines of
// <infiniband/verbs.h> (ibv_post_send, ibv_post_recv, ibv_poll_cq,
// ibv_req_notify_cq) dispatch through the context's ops to softrdma.
//
// softrdma knows nothing of rdmarpc.
//
// Usage (the same calls as rdma-core, through the namespace or a table):
//
//   rdma_event_channel* ch = softrdma::create_event_channel();
//   rdma_cm_id* id;
//   softrdma::create_id(ch, &id, nullptr, RDMA_PS_TCP);
//   softrdma::resolve_addr(id, nullptr, dst, 2000);   // -> ADDR_RESOLVED
//   ...
//   ibv_post_send(id->qp, &wr, &bad);                 // verbs.h inline, works
//
// Behaviour worth knowing (where rdma-core leaves a choice, or we differ):
//  - One device "softrdma0", one port (1), link layer Ethernet. rdma_cm ids
//    share one context (id->verbs), opened on first use and never closed.
//  - Threads: one progress thread per process, started by the first
//    listen/connect; nothing runs in a process that only links softrdma.
//  - post_send / post_recv are thread-safe per QP, poll_cq per CQ. The payload
//    of a SEND / WRITE is copied at post time, so its buffer may be reused at
//    once (hardware requires waiting for the completion; waiting is harmless).
//  - Every send is acknowledged by the peer's QP before it completes.
//  - RNR: a SEND or WRITE_WITH_IMM finding no receive is retried every 1 ms
//    (fixed; min_rnr_timer is accepted and ignored) up to the QP's rnr_retry
//    (7 = forever); Stats::rnr_retries counts each retry. With rdma_cm, a QP's
//    rnr_retry is the PEER's conn_param.rnr_retry_count ("how often the remote
//    peer should retry", rdma_cm(7)); modify_qp(IBV_QP_RNR_RETRY) overrides.
//  - destroy_qp discards its WRs without completions, as hardware does (a CQ
//    shared with other QPs never sees wr_ids of a destroyed QP); the peer is
//    told and flushes, with RDMA_CM_EVENT_DISCONNECTED.
//  - CQ overrun puts the CQ in error: poll_cq returns what it holds, then
//    -EIO; IBV_EVENT_CQ_ERR is posted on the context's async_fd.
//  - get_src_port / get_dst_port return network byte order, as librdmacm's.
//  - Only RDMA_PS_TCP. Synchronous ids (NULL channel, rdma_create_ep) work.
//  - Atomics (FETCH_ADD, CMP_AND_SWP) act on host-order u64s, as rxe; the
//    original value lands in the local SGE in host order.
//  - Not supported (yet): memory windows, UD/UC QPs.
//  - Wire: little-endian frames on the connection's TCP socket (see wire.h).
// Fault injection for tests: see faults.h.
//
// Unmodified programs on softrdma (libsoftrdma_preload.so, see preload.cc),
// each a ctest of server and client over 127.0.0.1 (tests/softrdma/):
//  - rdma-core's rping -v -C 5, ucmatose -c 2 -C 10, rdma_server/rdma_client
//    (rdma_core_tools_test.sh, SoftrdmaPreload.{rping,ucmatose,rdma_server}).
//  - perftest 4.5 (Debian 12's 4.5+0.17): ib_send_lat, ib_write_lat,
//    ib_read_lat, ib_write_bw, ib_read_bw, each as `<tool> -R -a -n 5 -p PORT`
//    (server) and `... 127.0.0.1` (client): rdma_cm QPs, sizes 2 B .. 8 MiB
//    (perftest_test.sh, SoftrdmaPreload.ib_*). The test checks exit codes,
//    one result row per size, and the device's counters (exactly 23 x 5
//    READs / WRITEs; for ib_send_lat an 8 MiB SEND; no RNR retry, no remote
//    access error). Their --data_validation does not exist in 4.5+0.17, for
//    any of the five; ib_write_lat's ping-pong spins on the written buffer,
//    so a lost WRITE shows as a timeout. perftest takes its ibv_wr_* path
//    only on devices it recognises (mlx5, EFA, hns), so on softrdma it posts
//    with ibv_post_send; qp_ex_test.cc covers the ibv_wr_* API instead.
//    Not run: UD/UC/XRC/DC modes, multicast (-g), --odp, atomics tests;
//    those need what softrdma does not have, and fail cleanly.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_SOFTRDMA_H_
#define RDMARPC_RUNTIME_SOFTRDMA_SOFTRDMA_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>

namespace softrdma {

// --- devices -----------------------------------------------------------------
ibv_device** get_device_list(int* num_devices);
void free_device_list(ibv_device** list);
const char* get_device_name(ibv_device* device);
ibv_context* open_device(ibv_device* device);
int close_device(ibv_context* context);
int query_device(ibv_context* context, ibv_device_attr* device_attr);
int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr);
int query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid);
int get_async_event(ibv_context* context, ibv_async_event* event);
void ack_async_event(ibv_async_event* event);
// As rdma-core's _ibv_query_gid_ex (what the ibv_query_gid_ex inline calls):
// 0, or EINVAL for flags != 0, entry_size < sizeof(ibv_gid_entry), a port
// other than 1 or an index outside the one-entry GID table. The entry is a
// RoCE v2 GID (::ffff:127.0.0.1) on the loopback interface.
int query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                 ibv_gid_entry* entry, uint32_t flags, size_t entry_size);
// 0xffff (network order) at index 0; -1/EINVAL for another port or index.
int query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey);
// The context is an extended one (verbs_context): the verbs.h inlines
// ibv_query_device_ex (zero ODP/TSO/RSS/... caps) and ibv_create_qp_ex reach
// softrdma; other extended inlines find no op and fail with EOPNOTSUPP.

// --- protection domains and memory regions -------------------------------------
ibv_pd* alloc_pd(ibv_context* context);
int dealloc_pd(ibv_pd* pd);
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access);
int dereg_mr(ibv_mr* mr);

// --- completion queues -----------------------------------------------------------
ibv_comp_channel* create_comp_channel(ibv_context* context);
int destroy_comp_channel(ibv_comp_channel* channel);
ibv_cq* create_cq(ibv_context* context, int cqe, void* cq_context,
                  ibv_comp_channel* channel, int comp_vector);
int destroy_cq(ibv_cq* cq);
int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
void ack_cq_events(ibv_cq* cq, unsigned int nevents);

// --- shared receive queues (added after the first contract) ---------------------
// ibv_post_srq_recv (a verbs.h inline) works through the context's ops.
ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr);
int modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr);
int destroy_srq(ibv_srq* srq);

// --- queue pairs (RC only) --------------------------------------------------------
ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr);
int destroy_qp(ibv_qp* qp);
// Extended QPs (what the ibv_create_qp_ex inline reaches through the context).
// comp_mask must hold IBV_QP_INIT_ATTR_PD (a PD of `context`); it may hold
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS with any of IBV_QP_EX_WITH_{SEND,
// SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP,
// ATOMIC_FETCH_AND_ADD}, and IBV_QP_INIT_ATTR_CREATE_FLAGS with no flag set.
// Fails with errno EINVAL (no PD, PD of another context, unknown comp_mask
// bits, or as create_qp) or EOPNOTSUPP (XRC, TSO, RSS, create flags, other
// send ops). With SEND_OPS_FLAGS, qp_to_qp_ex gives the ibv_qp_ex whose
// ibv_wr_* ops (ibv_wr_post(3)) post through the same path as post_send:
//  - The caller serialises wr_start .. wr_complete/wr_abort per QP (as the
//    man page requires); data set by wr_set_inline_data / _list is copied at
//    the call, SGE buffers are read when wr_complete posts.
//  - wr_complete returns 0, or without posting anything: EINVAL (no
//    wr_start; an SGE/inline set with no WR; inline data on a READ or
//    atomic; more SGEs than max_send_sge; inline longer than
//    max_inline_data), EOPNOTSUPP (an op outside the QP's send_ops_flags,
//    or one softrdma lacks: bind_mw, local_inv, send_inv, TSO, UD/XRC
//    addressing, atomic write), ENOMEM (the WRs do not fit the send queue);
//    or, for a QP not in RTS, post_send's own error.
//  - IBV_SEND_INLINE in wr_flags is ignored: inline is what wr_set_inline_data
//    chooses.
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* qp_init_attr_ex);
// As rdma-core's ibv_qp_to_qp_ex: NULL unless the QP was made with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS. The ibv_qp_ex is the QP itself (its
// qp_base): valid until destroy_qp, any thread.
ibv_qp_ex* qp_to_qp_ex(ibv_qp* qp);

// --- rdma_cm ------------------------------------------------------------------------
rdma_event_channel* create_event_channel();
void destroy_event_channel(rdma_event_channel* channel);
int create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
              rdma_port_space ps);
int destroy_id(rdma_cm_id* id);
int bind_addr(rdma_cm_id* id, sockaddr* addr);
int listen(rdma_cm_id* id, int backlog);
int resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms);
int resolve_route(rdma_cm_id* id, int timeout_ms);
int create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr);  // rdma_create_qp
void destroy_qp(rdma_cm_id* id);                                             // rdma_destroy_qp
// rdma_create_qp_ex: as create_qp(id, ...), the QP made by create_qp_ex. With
// no IBV_QP_INIT_ATTR_PD (or a NULL pd) the id's default PD is used.
int create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* qp_init_attr_ex);
int connect(rdma_cm_id* id, rdma_conn_param* conn_param);
int accept(rdma_cm_id* id, rdma_conn_param* conn_param);
int reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len);
int disconnect(rdma_cm_id* id);
int get_cm_event(rdma_event_channel* channel, rdma_cm_event** event);
int ack_cm_event(rdma_cm_event* event);
int migrate_id(rdma_cm_id* id, rdma_event_channel* channel);
// Synchronous endpoints (added after the first contract), as librdmacm's
// rdma_create_ep / rdma_destroy_ep / rdma_get_request. An id made with a NULL
// event channel is synchronous: resolve_addr, resolve_route, connect and
// accept then block until their outcome and return -1/errno on failure.
int create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr);
void destroy_ep(rdma_cm_id* id);
int get_request(rdma_cm_id* listen, rdma_cm_id** id);
sockaddr* get_local_addr(rdma_cm_id* id);
sockaddr* get_peer_addr(rdma_cm_id* id);
uint16_t get_src_port(rdma_cm_id* id);
uint16_t get_dst_port(rdma_cm_id* id);

// --- counters -------------------------------------------------------------------
// Work requests this process posted, counted by the device itself. Printed at
// exit as one `softrdma-stats: ...` line on stderr when RDMARPC_SOFT_STATS=1.
struct Stats {
  uint64_t send = 0;
  uint64_t send_with_imm = 0;
  uint64_t rdma_write = 0;
  uint64_t rdma_write_with_imm = 0;
  uint64_t rdma_read = 0;
  uint64_t recv = 0;
  uint64_t bytes_sent = 0;        // payload bytes of SEND/WRITE posted, and READ bytes requested
  uint64_t rnr_retries = 0;       // times a SEND from this process found no receive posted
  uint64_t post_send_calls = 0;   // ibv_post_send calls (doorbells)
  uint64_t post_recv_calls = 0;   // ibv_post_recv calls
  uint64_t reg_mr = 0;            // successful ibv_reg_mr calls
  uint64_t max_send_bytes = 0;    // largest SEND / SEND_WITH_IMM payload posted, in bytes
  uint64_t rem_access_errors = 0; // completions with IBV_WC_REM_ACCESS_ERR polled by this process
  // Gauges: objects alive now (to check that nothing leaks).
  int64_t live_cm_ids = 0;
  int64_t live_qps = 0;
  int64_t live_cqs = 0;
  int64_t live_mrs = 0;
  int64_t live_pds = 0;
};
Stats GetStats();
void ResetStats();

}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_SOFTRDMA_H_
