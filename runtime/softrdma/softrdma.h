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
//  - rdma_cm locking: each rdma_cm_id has its own lock and each event channel
//    its own event queue, with no process-wide lock and none held across
//    blocking work: calls on different ids (and the progress thread's
//    handling of other ids' connections) run in parallel; calls and control
//    frames on one id are serialised. A listener's lock is taken before its
//    child ids' (a CONNECT_REQUEST is made under it). See cm.cc / internal.h.
//    rdma_destroy_event_channel while another thread waits in
//    rdma_get_cm_event on that channel: the waiter returns no event and waits
//    on (EAGAIN on a non-blocking fd), as a thread in the kernel's
//    rdma_get_cm_event does; the channel's fd closes once it has left.
//  - post_send / post_recv are thread-safe per QP, poll_cq per CQ.
//  - Buffers: as on hardware, the buffer of a SEND / WRITE must stay unchanged
//    until its completion. On the TCP link softrdma copies it at post; on the
//    same-host link (below) only payloads up to 16 KiB (kShmInlineMax) are
//    copied at post, larger ones are read from the buffer when the peer
//    handles the request, as a NIC reads them after post.
//  - Same-host link: when both ends are processes on one host and in one
//    network namespace (boot_id and /proc/self/ns/net compared during the
//    rdma_cm handshake, plus a process_vm_readv probe of the peer), QP
//    traffic goes through shared-memory rings that ibv_poll_cq and
//    ibv_req_notify_cq drain on the calling thread, responder copies of large
//    WRITE / READ included (no syscall, no progress thread on a busy-polled
//    path; the progress thread drains for a sleeping consumer), and RDMA data
//    moves with process_vm_readv / process_vm_writev; TCP then carries only the
//    handshake, doorbells for sleeping consumers, DISCONNECT, and the death
//    signal. Semantics (key checks, RNR, ordering, error completions, flush on
//    disconnect) are those of the TCP link: the same code handles the frames.
//    Env SOFTRDMA_SHM=0 (or SetShmEnabled(false)) keeps new connections on
//    TCP; set-up or permission failures (EPERM) fall back to TCP, logged once.
//    Peers on other hosts or namespaces always use TCP. See shm_link.h.
//  - Every send is acknowledged by the peer's QP before it completes (on the
//    same-host link one ACK may answer a batch of requests, as NICs coalesce).
//  - Transport timeout: a QP whose sent WRs go unanswered, with nothing moving
//    on its link, for (retry_cnt + 1) periods of 4.096 us * 2^timeout fails
//    the head WR with IBV_WC_RETRY_EXC_ERR, flushes the rest and enters ERROR,
//    as a NIC does when the peer is gone. As a NIC's timer is restarted by
//    every ACK and response packet, any sign of a working peer restarts it:
//    answers, bytes moving on the TCP socket either way (a READ's response
//    goes in 4 MiB pieces), and on the same-host link each request the peer
//    handles and each 4 MiB it copies (process_vm_* in chunks), so a large
//    READ or WRITE that takes seconds never trips it while data moves. timeout 14 (67 ms) by default and
//    0 = infinite; modify_qp(IBV_QP_TIMEOUT / IBV_QP_RETRY_CNT) sets them, and
//    rdma_cm takes retry_cnt from the connector's conn_param.retry_count (7
//    when it passes none). A NIC answers for its host whatever the host's
//    processes do; softrdma's answers come from the peer process, so on the
//    same-host link a period in which that process is stopped (SIGSTOP, a
//    debugger: /proc state T or t) or starved (a thread runnable, no CPU
//    time since the last silent period) does not count: the WR waits and
//    completes when the peer runs again. On the TCP link the peer process is
//    not known, and such silence counts.
//  - RNR: a SEND or WRITE_WITH_IMM finding no receive is NAKed with the
//    responder QP's RNR timer, min_rnr_timer (IBA table 45: 1 = 0.01 ms ..
//    31 = 491.52 ms, 0 = 655.36 ms), once modify_qp set it (the INIT->RTR
//    transition of a QP the application moves itself, or IBV_QP_MIN_RNR_TIMER
//    later), and the requester waits that long before each retry, up to the
//    QP's rnr_retry
//    (7 = forever); Stats::rnr_retries counts each retry. With rdma_cm, a QP's
//    rnr_retry is the PEER's conn_param.rnr_retry_count ("how often the remote
//    peer should retry", rdma_cm(7)); modify_qp(IBV_QP_RNR_RETRY) overrides.
//  - destroy_qp discards its WRs without completions, as hardware does (a CQ
//    shared with other QPs never sees wr_ids of a destroyed QP); the peer is
//    told and flushes, with RDMA_CM_EVENT_DISCONNECTED.
//  - Completion events: one per ibv_req_notify_cq, for the next CQE added.
//    IBV_SEND_SOLICITED travels with a SEND / WRITE_WITH_IMM, so a CQ armed
//    solicited-only fires for a solicited receive or an error CQE only.
//  - CQ overrun puts the CQ in error: poll_cq returns what it holds, then
//    -EIO; IBV_EVENT_CQ_ERR is posted on the context's async_fd.
//  - get_src_port / get_dst_port return network byte order, as librdmacm's.
//  - Only RDMA_PS_TCP. Synchronous ids (NULL channel, rdma_create_ep) work;
//    as librdmacm's, each call's event stays in id->event (peer private data
//    included) until the next call or rdma_destroy_id acks it, and
//    rdma_get_request leaves the request in the new id's event.
//  - rdma_create_qp uses the CQs the id names (id->send_cq / recv_cq) for a
//    queue the attributes leave without one, else makes one with its own
//    completion channel and records it in the id; rdma_destroy_qp destroys
//    the CQs and channels the id names (librdmacm's ucma_destroy_cqs). CQs
//    passed only in the attributes stay the caller's.
//  - rsockets: librdmacm's own rsocket.c (rstream, rcopy, ...) runs on
//    softrdma under the preload library. It reads librdmacm-private fields
//    right after the rdma_cm_id (cma_id_private's cma_dev->max_qpsize and
//    sync); softrdma's ids carry them laid out as in rdma-core v44 (cm.cc).
//  - An id's own QP (rdma_create_qp): on the active side it moves to RTS and
//    the RTU goes out inside the rdma_get_cm_event call that returns
//    ESTABLISHED, as librdmacm's ucma_process_conn_resp does, so nothing
//    the passive side sends completes there before the application has
//    taken that event; the passive side holds its sends until the RTU. As
//    in librdmacm, that call returns CONNECT_RESPONSE instead when the QP
//    was destroyed meanwhile, and CONNECT_ERROR (-EINVAL: the QP is in ERR;
//    -ECONNRESET: the connection is gone) when it cannot join, after which
//    the id's DISCONNECTED and REJECTED are not delivered.
//  - The passive side waits for the RTU after rdma_accept for as long as the
//    IB CM resends its REP (16 tries of 4.3 s: 68,720 ms;
//    SetRtuTimeoutMillis), then reports RDMA_CM_EVENT_UNREACHABLE with status
//    -ETIMEDOUT, flushes the connection's QP and closes the connection: an
//    active side that never takes its ESTABLISHED or CONNECT_RESPONSE (or a
//    peer that stops after CONNECT_REQ) does not hold the accepted id forever.
//  - QPs the application creates itself (ibv_create_qp on a PD of id->verbs,
//    its number in rdma_conn_param.qp_num; id->qp stays NULL, as librdmacm
//    leaves it), as MPI, UCX and NCCL connect: rdma_init_qp_attr gives the
//    INIT / RTR / RTS attributes the IB CM would (RTR and RTS only once the
//    peer is known: CONNECT_REQUEST on the passive side, CONNECT_RESPONSE on
//    the active side; EINVAL before, and for any other state); the active side
//    gets RDMA_CM_EVENT_CONNECT_RESPONSE instead of ESTABLISHED and sends RTU
//    with rdma_establish, after which no ESTABLISHED event comes; the passive
//    side gets ESTABLISHED at RTU and holds its sends until then. rdma_connect
//    / rdma_accept naming a QP another id uses, or a QP of another context:
//    EINVAL; naming no live QP: the connection carries none (the peer's
//    requests go unanswered). Disconnect flushes such a QP as it does rdma_cm's.
//  - modify_qp checks RC transitions as the IB spec's state table does
//    (ib_modify_qp_is_ok): RESET->INIT, INIT->RTR and RTR->RTS missing a
//    required attribute, or with one the transition does not take, -> EINVAL;
//    port_num other than 1, pkey_index other than 0, an AV on another port or
//    GID index, an unknown access flag, path_mtu outside 256..4096 -> EINVAL.
//  - Every rdma_cm call checks the rdma_cm_id / rdma_event_channel it is
//    handed against those the process created and has not destroyed: a dead
//    or wild one fails with EINVAL (destroy_event_channel ignores it), logged,
//    and is never dereferenced. perftest 4.5+0.17 retries a rejected -R
//    connect on ids it freed and destroys its channel twice
//    (perftest_reject_test.sh).
//  - Atomics (FETCH_ADD, CMP_AND_SWP) act on host-order u64s, as rxe; the
//    original value lands in the local SGE in host order.
//  - RC QPs only: create_qp (and rdma_create_qp) with IBV_QPT_UC, IBV_QPT_UD
//    or any other type fails with errno EOPNOTSUPP.
//  - A QP's max_inline_data is at least max_send_sge x 16 bytes (the SGE
//    list's room in a WQE, as rxe grants it), capped at 256; create_qp reports
//    it back in the caps.
//  - Post-time limits are exactly the QP's (SRQ's) caps as created and
//    reported by query_qp / query_srq: more WRs outstanding than max_send_wr /
//    max_recv_wr -> ENOMEM; num_sge above max_send_sge / max_recv_sge / the
//    SRQ's max_sge, inline data above max_inline_data, IBV_SEND_INLINE on a
//    READ, atomic, BIND_MW or LOCAL_INV, or an unknown opcode -> EINVAL. The
//    refused WR is *bad_wr; the WRs before it are posted, none from it on.
//  - Lkeys are checked when the device executes a WR: at post when it goes
//    out at once, and again whenever it goes out later (behind an RNR wait,
//    on a link still being decided, on retransmission): a SEND / WRITE whose
//    MR was deregistered since post then completes with IBV_WC_LOC_PROT_ERR
//    in its turn, and the QP enters ERROR.
//  - READ / atomic depth: a QP has at most max_rd_atomic READs and atomics out
//    (sent, unanswered): modify_qp's IBV_QP_MAX_QP_RD_ATOMIC, or with rdma_cm
//    the negotiated depth (the passive side's rdma_accept initiator_depth; on
//    the active side the passive side's responder_resources), as query_qp
//    reports. The next one waits in the SQ, and every WR posted behind it,
//    until an answer frees a slot; 0 lets one out, as mlx5 (its QP context
//    keeps the log2 of the limit). Stats::max_rd_atomic_out and
//    rd_atomic_waits count it.
//  - Local operations (BIND_MW, LOCAL_INV, the ibv_bind_mw verb) take effect
//    in send-queue order: when every WR before them has gone out, not at post
//    (behind a SEND waiting out an RNR NAK, a READ waiting for a slot, or a
//    link being decided, the old binding still holds). The bind verb checks
//    the bind at post (EINVAL, nothing posted) and moves mw->rkey at once, as
//    mlx5; a bind whose window was deallocated or whose MR was deregistered
//    before its turn completes with IBV_WC_MW_BIND_ERR.
//  - Keys: lkeys and rkeys are independent 32-bit draws from getrandom(2),
//    never issued twice in a process; a stale or guessed rkey fails with
//    IBV_WC_REM_ACCESS_ERR at the requester.
//  - Memory windows (ibv_alloc_mw / ibv_bind_mw / ibv_dealloc_mw, the verbs.h
//    inlines, reach softrdma through the context's ops):
//      type 1: ibv_bind_mw posts a BIND_MW on the QP (completes IBV_WC_BIND_MW
//        in SQ order) and sets mw->rkey to ibv_inc_rkey(old rkey); usable by
//        any QP of its PD; an invalid bind (MR without IBV_ACCESS_MW_BIND,
//        range outside the MR, remote write/atomic on an MR without local
//        write, another PD) returns EINVAL and posts nothing.
//      type 2: IBV_WR_BIND_MW (wr.bind_mw.rkey: the window's upper 24 bits,
//        the low 8 of the caller's choosing, e.g. ibv_inc_rkey) from the free
//        state only; usable only through the QP that bound it; freed by
//        IBV_WR_LOCAL_INV (IBV_WC_LOCAL_INV) or by the peer's
//        IBV_WR_SEND_WITH_INV (receiver's WC: IBV_WC_WITH_INV,
//        invalidated_rkey). An invalid bind completes with IBV_WC_MW_BIND_ERR,
//        an invalid LOCAL_INV with IBV_WC_LOC_QP_OP_ERR (as rxe), and the QP
//        goes to ERROR. A SEND_WITH_INV naming no window bound to the
//        receiving QP: the receive completes IBV_WC_REM_INV_REQ_ERR, the
//        sender's WR IBV_WC_REM_INV_REQ_ERR, both QPs go to ERROR.
//      Access through an unbound, invalidated, deallocated or other-QP window,
//      outside its range or without its access flag: IBV_WC_REM_ACCESS_ERR at
//      the requester, as for MR rkeys. A binding ends when its MR is
//      deregistered. dealloc_pd with a live window: EBUSY. query_device
//      reports max_mw and IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B.
//  - Async events (get_async_event / ack_async_event on the context's
//    async_fd); each event returned must be acked, and destroy_qp /
//    destroy_srq / destroy_cq block until it is (as rdma-core); events not yet
//    returned for an object are dropped when it is destroyed.
//      IBV_EVENT_COMM_EST: the first request an accepted (passive) QP
//        receives. (The IB spec ties it to a QP in RTR; librdmacm moves QPs to
//        RTS at rdma_accept, so softrdma raises it at the passive side's first
//        packet, once per connection.)
//      IBV_EVENT_QP_ACCESS_ERR / IBV_EVENT_QP_REQ_ERR: at the responder, for a
//        WRITE / READ / atomic refused for its rkey, range or access
//        (ACCESS_ERR) or as an invalid request (REQ_ERR: no responder
//        resources, misaligned atomic) — errors no responder CQE reports
//        (IB spec 11.6.3.1). Errors reported by a receive CQE raise none.
//      IBV_EVENT_QP_FATAL: the transport under an established QP broke (the
//        TCP connection ended without a DISCONNECT: the peer process died, or
//        DropConnection); then the QP flushes.
//      IBV_EVENT_QP_LAST_WQE_REACHED: a QP on an SRQ entered ERROR.
//      IBV_EVENT_SRQ_LIMIT_REACHED: modify_srq(IBV_SRQ_LIMIT) armed a limit and
//        the SRQ's posted receives fell below it; fires once, then the limit
//        reads 0 (disarmed) in query_srq.
//      IBV_EVENT_CQ_ERR: CQ overrun (above).
//  - iWARP-like mode (SetIwarpMode, or SOFTRDMA_IWARP=1 in the environment,
//    read when a context is opened): the device reports transport_type
//    IBV_TRANSPORT_IWARP and node_type IBV_NODE_RNIC, query_device reports
//    atomic_cap IBV_ATOMIC_NONE, and post_send refuses IBV_WR_SEND_WITH_IMM,
//    IBV_WR_RDMA_WRITE_WITH_IMM and atomics with EINVAL and *bad_wr set, as
//    RNICs do. rdma_cm ids share one context, opened on first use, so set the
//    mode before the first rdma_cm call.
//  - Wire: little-endian frames on the connection's TCP socket (see wire.h),
//    or the same frames in shared-memory rings on the same-host link.
// Fault injection for tests: see faults.h.
//
// Where softrdma is still more lenient than hardware (besides the same-host
// link's list in shm_link.h):
//  - The requester copies a SEND / WRITE's payload at post (TCP link, or up
//    to 16 KiB on the same-host link) and sends that copy, retransmissions
//    included: a buffer changed after post goes unnoticed. (Its lkeys are
//    checked when the WR goes out, at post or later; see above.)
//  - IBV_SEND_FENCE is accepted and ignored: a fenced WR does not wait for
//    the READs / atomics before it to complete (with the payload copied at
//    post, above, waiting would not give it their data anyway).
//  - The responder refuses READs / atomics only when its max_dest_rd_atomic
//    is 0; a requester of another make that sends more than that many at once
//    is served (as rxe serves it, recycling its responder resources).
//    softrdma's own requester never does (above).
//  - A responder QP made by rdma_create_qp, whose min_rnr_timer nobody set,
//    asks for a 1 ms RNR back-off, not the 655.36 ms of the min_rnr_timer 0
//    that the IB CM programs into such QPs (rdma_init_qp_attr reports 0, and
//    a QP the application moves with it waits 655.36 ms, as on a NIC).
//  - modify_qp checks the attributes of RESET->INIT, INIT->RTR and RTR->RTS
//    only: without a state change (or RTS->RTS) it also takes IBV_QP_TIMEOUT,
//    IBV_QP_RETRY_CNT and IBV_QP_RNR_RETRY, which the IB state table refuses
//    there (EINVAL on a NIC); the QP's qp_access_flags are kept and reported
//    but not enforced by the responder (MR and window access is).
//  - iWARP-like mode refuses only immediate data and atomics: a SEND finding
//    no receive is still RNR-retried (an RNIC has no RNR: the connection is
//    terminated), an RDMA READ's local sink needs only LOCAL_WRITE (RNICs need
//    REMOTE_WRITE on it), and the passive side may send first (MPA lets only
//    the active side).
//
// Unmodified programs on softrdma (libsoftrdma_preload.so, see preload.cc),
// each a ctest of server and client over 127.0.0.1 (tests/softrdma/):
//  - rdmacm-utils' rstream -T v (blocking and non-blocking) and rcopy
//    (rsockets_test.sh, SoftrdmaPreload.rsockets.*): data verified.
//  - perftest's -R retry after a rejected connect (perftest_reject_test.sh).
//  - rdma-core's rping -v -C 100, rping -V -S 16384 -C 50 (data validated),
//    ucmatose -c 4 -C 100, ucmatose -c 16 -C 50 -S 65536, rdma_server/
//    rdma_client, rdma_xserver/rdma_xclient -c r, cmtime -c 100; udaddy and
//    mckey (UD / multicast) fail, the udaddy server with EOPNOTSUPP
//    (rdma_core_tools_test.sh, SoftrdmaPreload.{rping,rping-validate,
//    ucmatose,ucmatose-large,rdma_server,rdma_xserver,cmtime,udaddy,mckey},
//    each also .tcp).
//  - perftest 4.5 (Debian 12's 4.5+0.17): ib_send_lat, ib_write_lat,
//    ib_read_lat, ib_write_bw, ib_read_bw, ib_send_bw, each as
//    `<tool> -R -a -n 5 -p PORT` (server) and `... 127.0.0.1` (client): rdma_cm
//    QPs, sizes 2 B .. 8 MiB; ib_send_bw and ib_send_lat also --use-srq;
//    ib_atomic_lat / ib_atomic_bw (8 B); ib_write_bw -s 4194304 -n 100
//    (perftest_test.sh, SoftrdmaPreload.ib_*, each also .tcp). The test checks
//    exit codes, one result row per size, and the device's counters (exactly
//    23 x 5 READs / WRITEs / data SENDs, 5 atomics, 100 WRITEs; for the SEND
//    tests an 8 MiB SEND; no RNR retry, no remote access error). Their --data_validation does not exist in 4.5+0.17, for
//    any of the five; ib_write_lat's ping-pong spins on the written buffer,
//    so a lost WRITE shows as a timeout. perftest takes its ibv_wr_* path
//    only on devices it recognises (mlx5, EFA, hns), so on softrdma it posts
//    with ibv_post_send; qp_ex_test.cc covers the ibv_wr_* API instead.
//    Not run: UD/UC/XRC/DC modes, multicast (-g), --odp; those need what
//    softrdma does not have, and fail cleanly.
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
// ibv_query_device_ex (zero ODP/TSO/RSS/... caps), ibv_create_qp_ex,
// ibv_create_cq_ex, ibv_alloc_td, ibv_dealloc_td and ibv_alloc_parent_domain
// reach softrdma; other extended inlines find no op and fail with EOPNOTSUPP.

// --- protection domains and memory regions -------------------------------------
ibv_pd* alloc_pd(ibv_context* context);
// EBUSY while an MR, QP, SRQ, memory window or parent domain made on it (or,
// for a parent domain, a CQ made on it) lives, as ibv_dealloc_pd.
int dealloc_pd(ibv_pd* pd);
// Registers [addr, addr + length) of this process. nullptr with errno:
// EINVAL for a null pd, a null addr with length > 0, an unknown access flag,
// or remote write / atomic without IBV_ACCESS_LOCAL_WRITE; EFAULT when a page
// of the range is unmapped, not readable, or not writable while the access
// lets the device write (local / remote write, atomic, MW bind) -- as
// ib_umem_get's get_user_pages fails it (checked against /proc/self/maps);
// ENOMEM when the pages it pins would take the process's MRs past
// RLIMIT_MEMLOCK's soft limit, unless the process has CAP_IPC_LOCK (as
// ib_umem_get), or past the memlock cap of faults.h; an injected errno
// (FailNext).
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access);
int dereg_mr(ibv_mr* mr);

// --- thread domains and parent domains (ibv_alloc_td(3), ibv_alloc_parent_domain(3))
// A thread domain is the user's promise that one thread at a time uses the
// QPs, SRQs and CQs made in it (each made on a parent domain naming it, a CQ
// through create_cq_ex's parent_domain). softrdma then drops their locks as
// mlx5 does: the thread in post_send, post_recv, post_srq_recv, bind_mw, the
// ibv_wr_* complete or poll_cq / req_notify_cq on them takes no lock; any
// other thread that touches them (the control verbs, the progress thread,
// the poller of a CQ outside the domain) waits for that thread and costs it
// a membarrier(2) (Stats::domain_visits). Their transport timers run in the
// owner's polls of the domain's CQs, or on the progress thread 10 ms later
// (Stats::owner_timers, grace_timers), or at once on the progress thread when
// the owner armed one of the QP's CQs to sleep. Two threads in such verbs of one
// domain at once abort the process with a message (when caught). A QP joins
// the domain only if its CQs and SRQ are in it or in none; a CQ made
// IBV_CREATE_CQ_ATTR_SINGLE_THREADED without a parent domain is a domain of
// its own. Without MEMBARRIER_CMD_PRIVATE_EXPEDITED the domain is one mutex.
// On the TCP link every incoming frame reaches the QP through the progress
// thread, a visitor: a membarrier per frame (the same-host link drains its
// rings in the owner's polls and needs none but for doorbells to a sleeping
// owner).
// alloc_td: nullptr with EINVAL for a null context or attr or a non-zero
// comp_mask. dealloc_td: EBUSY while a parent domain names it.
ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* init_attr);
int dealloc_td(ibv_td* td);
// A parent domain is a PD (ibv_pd*) taken wherever one is (create_qp,
// create_qp_ex, create_srq, reg_mr, alloc_mw, rdma_create_qp) that stands for
// attr->pd in every access check and adds attr->td (or none). nullptr with
// EINVAL for a null context, attr or attr->pd, a pd or td of another context,
// a pd that is itself a parent domain, or an unknown comp_mask bit; the
// ALLOCATORS are accepted and never called (no buffer of softrdma is read by
// a device). dealloc_pd frees it, EBUSY while an object is made on it; it
// keeps attr->pd and attr->td busy (EBUSY) until then.
ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr);

// --- completion queues -----------------------------------------------------------
ibv_comp_channel* create_comp_channel(ibv_context* context);
int destroy_comp_channel(ibv_comp_channel* channel);
ibv_cq* create_cq(ibv_context* context, int cqe, void* cq_context,
                  ibv_comp_channel* channel, int comp_vector);
int destroy_cq(ibv_cq* cq);
// ibv_resize_cq: the CQ holds `cqe` entries from now on (cq->cqe), with the
// CQEs not yet polled kept in order. 0, or EINVAL for a null cq, cqe < 1,
// cqe > max_cqe or fewer than the CQEs it holds now (as mlx4 / mlx5); an
// injected errno (FaultOp::kResizeCq). Safe while QPs use the CQ and
// another thread polls it.
int resize_cq(ibv_cq* cq, int cqe);
int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
void ack_cq_events(ibv_cq* cq, unsigned int nevents);
// ibv_create_cq_ex: the CQ of create_cq plus the extended poll functions
// (ibv_start_poll / ibv_next_poll / ibv_end_poll and the ibv_wc_read_* of the
// asked wc_flags; ENOENT when no CQE is ready, EIO once overrun); ibv_poll_cq
// on ibv_cq_ex_to_cq() works as well, destroy_cq frees it. nullptr with
// EINVAL for a null context or attr, an unknown comp_mask bit, comp_vector
// past num_comp_vectors, cqe outside [1, max_cqe] or a parent_domain that is
// not a parent domain of this context, or a flag bit rdma-core does not
// define (as mlx5); EOPNOTSUPP for wc_flags beyond IBV_WC_STANDARD_FLAGS (the
// device has no timestamps, VLANs, flow tags or tag matching). With
// IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN a completion that finds the CQ full is
// dropped (its WR's queue slot freed; one warning per CQ) and the CQ stays
// usable with no IBV_EVENT_CQ_ERR, where without it the CQ enters the error
// state (poll -EIO). mlx5 overwrites unpolled CQEs instead; either way
// completions are lost and the user sized the CQ. A parent domain given
// stays busy until destroy_cq. A CQ outside
// any thread domain is locked from start_poll to end_poll, as on mlx5.
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* cq_attr);

// --- shared receive queues (added after the first contract) ---------------------
// ibv_post_srq_recv (a verbs.h inline) works through the context's ops.
ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr);
int modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr);
int destroy_srq(ibv_srq* srq);

// --- memory windows ----------------------------------------------------------------
// The same as the verbs.h inlines ibv_alloc_mw / ibv_dealloc_mw / ibv_bind_mw,
// which reach these through the context's ops (see the notes above).
// alloc_mw: NULL/EINVAL for a type other than IBV_MW_TYPE_1/2. bind_mw: 0, or
// EINVAL (not type 1, invalid bind), EPERM (MR of another PD).
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);

// --- device mode --------------------------------------------------------------------
// Makes contexts opened from now on iWARP-like (see above); overrides
// SOFTRDMA_IWARP. Thread-safe; takes effect at the next open_device.
void SetIwarpMode(bool on);

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
// How long an accepted connection waits for the active side's RTU before it
// fails with RDMA_CM_EVENT_UNREACHABLE -ETIMEDOUT (see above), in
// milliseconds; 0 restores the default, 68,720 ms. Thread-safe; applies to
// rdma_accept calls made from now on.
void SetRtuTimeoutMillis(uint32_t ms);
// rdma_init_qp_attr: the attributes and mask that move an application's own
// QP to qp_attr->qp_state for this connection, as the IB CM computes them
// (INIT at any time once the id has a device; RTR and RTS once the peer's
// parameters are known: the passive side from CONNECT_REQUEST, the active
// side from CONNECT_RESPONSE). -1/EINVAL otherwise, or for another state.
int init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask);
// rdma_establish: the active side, after CONNECT_RESPONSE, once its own QP is
// in RTS: sends RTU. -1/EINVAL for an id with a QP of rdma_cm's or in another
// state. No ESTABLISHED event follows on this side (as librdmacm).
int establish(rdma_cm_id* id);
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

// --- same-host link ------------------------------------------------------------
// Whether connections made from now on may use the shared-memory link
// (default: env SOFTRDMA_SHM, 1 unless "0"). Both ends must allow it. For
// tests and tools; thread-safe; existing connections keep their link.
void SetShmEnabled(bool enabled);
// True when `qp` is connected over the shared-memory link (false on TCP, for
// a QP not connected yet, and once it left the link in ERROR or RESET).
bool QpUsesShm(ibv_qp* qp);

// --- counters -------------------------------------------------------------------
// Work requests this process posted, counted by the device itself. Printed at
// exit as one `softrdma-stats: ...` line on stderr when RDMARPC_SOFT_STATS=1.
struct Stats {
  uint64_t send = 0;
  uint64_t send_with_imm = 0;
  uint64_t rdma_write = 0;
  uint64_t rdma_write_with_imm = 0;
  uint64_t rdma_read = 0;
  uint64_t atomic = 0;            // FETCH_AND_ADD and CMP_AND_SWP posted
  uint64_t recv = 0;
  uint64_t bytes_sent = 0;        // payload bytes of SEND/WRITE posted, and READ bytes requested
  uint64_t rnr_retries = 0;       // times a SEND from this process found no receive posted
  uint64_t post_send_calls = 0;   // ibv_post_send calls (doorbells)
  uint64_t post_recv_calls = 0;   // ibv_post_recv calls
  uint64_t reg_mr = 0;            // successful ibv_reg_mr calls
  uint64_t max_send_bytes = 0;    // largest SEND / SEND_WITH_IMM payload posted, in bytes
  uint64_t rem_access_errors = 0; // completions with IBV_WC_REM_ACCESS_ERR polled by this process
  uint64_t signaled_sends = 0;    // send-queue WRs posted signalled (IBV_SEND_SIGNALED or sq_sig_all)
  uint64_t wc_polled = 0;         // work completions returned by ibv_poll_cq
  uint64_t poll_cq_calls = 0;     // ibv_poll_cq calls, empty ones included
  uint64_t qps_on_shm = 0;        // QPs of this process connected over the same-host link
  uint64_t qps_on_tcp = 0;        // QPs of this process connected over TCP
  uint64_t shm_fallbacks = 0;     // same-host peers that ended on TCP (set-up / EPERM)
  uint64_t shm_doorbells = 0;     // doorbells rung on TCP to wake a sleeping peer
  uint64_t shm_marked_qps = 0;    // same-host QPs whose peer marks their CQ's table (shm_hint.h)
  uint64_t shm_marked_drains = 0;  // marks polls took from their CQ's table (per ring and poll)
  uint64_t shm_ring_rewinds = 0;   // times a producer went back to its ring's start (shm_link.h)
  // Times a producer told its peer about records it published (a seq_cst
  // fence, and a doorbell if the peer sleeps): once per ibv_post_send list,
  // and once per record pushed outside one (ACKs, answers, backlog).
  uint64_t shm_publishes = 0;
  uint64_t rd_atomic_waits = 0;   // times a READ / atomic waited in the SQ for its QP's max_rd_atomic
  uint64_t max_rd_atomic_out = 0; // most READs / atomics one QP had outstanding at once
  // Thread domains (ibv_alloc_td): times another thread than the owner went
  // into one (each costs a membarrier), and transport timers of its QPs run
  // by the owner's poll or, after kOwnerTimerGrace without one, by the
  // progress thread.
  uint64_t domain_visits = 0;
  uint64_t owner_timers = 0;
  uint64_t grace_timers = 0;
  // Gauges: objects alive now (to check that nothing leaks).
  int64_t live_cm_ids = 0;
  int64_t live_qps = 0;
  int64_t live_cqs = 0;
  int64_t live_mrs = 0;
  int64_t live_pds = 0;
  int64_t live_mws = 0;  // memory windows (ibv_alloc_mw minus ibv_dealloc_mw)
};
Stats GetStats();
void ResetStats();

}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_SOFTRDMA_H_
