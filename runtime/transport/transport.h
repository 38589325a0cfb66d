// transport.h: the whole data-path contract of rdmarpc's RDMA transport.
//
// Wire protocol (one RC QP per connection, made with rdma_cm):
//  * Handshake: rdma_cm private data carries HandshakeData (handshake.h): protocol
//    version, receive-buffer size, receive-ring depth (= initial credits) and
//    feature bits. A server that speaks another version rejects with its own
//    version in the reject private data; the client fails FAILED_PRECONDITION
//    naming both versions.
//  * Eager: a message whose encoded size (WireHeader + aux + payload) is at most
//    min(local eager limit, peer receive-buffer size) goes as ONE
//    IBV_WR_SEND_WITH_IMM (IBV_SEND_INLINE when it fits max_inline_data). The
//    32-bit imm_data (Imm in header.h) carries kind, call slot and slot
//    generation, so a response reaches its call without parsing and a stale
//    response (call retired by its deadline) is dropped.
//  * Rendezvous request: the payload stays in a registered LargeBuffer of the
//    client; the eager header carries {addr, len, rkey}; the server pulls it
//    with IBV_WR_RDMA_READ. A client that sends a rendezvous request also
//    advertises a reply buffer with capacity = encoded request size (the rule:
//    "a large request usually has a large response, e.g. echo"); the server
//    pushes a response that fits it with RDMA WRITEs ending in one
//    IBV_WR_RDMA_WRITE_WITH_IMM that carries the header (at offset 0); the
//    client takes the message's length from that header, not from byte_len.
//    Otherwise a large response is exposed by the
//    server and its descriptor sent eagerly; the client pulls it with RDMA
//    READ and then sends kRelease so the server may reuse that buffer.
//  * Rendezvous transfers move in pieces (kRendezvousChunkBytes, at most
//    kRendezvousChunksInFlight per connection), so small frames of other
//    calls are posted between the pieces of a large one. A pull of a
//    request cancelled meanwhile stops posting pieces.
//  * Streams (streams.cc): a request with kFlagStream opens a stream on its
//    client slot (slot + generation name it both ways). kStreamMessage
//    frames carry messages either way (eager, or exposed and pulled by RDMA
//    READ, then kRelease), kFlagEndStream is the client's half-close,
//    kHeaders the server's initial metadata, kResponse the server's
//    trailers (status, message; details in its payload). Flow control per
//    stream: a receiver buffers at most kStreamWindow messages and grants
//    more with kWindow as its reader consumes them (runtime/rpc counts), so
//    a stalled reader stops only its own writer and holds no receive
//    buffer. A frame of a stream that arrives while an earlier one is being
//    pulled is copied aside and delivered after it (in order per stream;
//    other streams are not held up). A unary call is a request without
//    kFlagStream and one kResponse: exactly the frames it had before.
//  * Metadata: opaque bytes (runtime/rpc/metadata.h) after aux in a
//    request, response or kHeaders (WireHeader::meta_len); too large for
//    the eager prefix, it leads the payload instead (kFlagMetaInPayload)
//    and travels with it, eagerly or by rendezvous.
//  * Cancellation: a client call that ends before its answer (TryCancel,
//    deadline) sends kCancel. Its exposed buffers (request and reply) stay
//    out of use ("quarantined") until the server's answer for that slot and
//    generation arrives: the server answers every request exactly once,
//    CANCELLED when it was told, and skips a READ it had not posted (or
//    drops what it pulled). Only then is its exposure revoked
//    (exposure_table.h: its memory window invalidated, or without windows
//    its MR re-registered), so a late READ or WRITE of the server never
//    meets a revoked rkey on a live connection (which would close it for
//    every call).
//  * Exposure: every buffer exposed for a stream is reachable only through
//    a type-2 memory window bound to this connection's QP over the bytes
//    advertised, with the access the peer needs, and invalidated when the
//    stream ends (exposure_table.h); without windows, through its MR's
//    rkey, re-registered when the exposure ends (a registration per large
//    message: the fallback).
//  * Credits: a sender posts a SEND / WRITE_WITH_IMM only while it holds a
//    credit for a receive the peer has posted (CreditWindow). Credits return in
//    every WireHeader; a kCredit message carries them when traffic is
//    one-sided. One credit is reserved for kCredit so returning credits can
//    never deadlock. RNR is therefore never provoked.
//  * Receive queues: a connection receives into a ring of its own
//    (ReceiveRing: recv_depth buffers, the peer's initial credits), or — a
//    server's default, a client's choice — from its loop's shared receive
//    queue (SharedReceiveQueue: one SRQ per loop), which grants each
//    connection a floor of credits (its initial ones) and a fair share of
//    the rest, never more than are posted. The wire is the same: a peer
//    only sees how many credits it gets.
//  * Sends are signalled one WR in kSignalInterval (15 unsignalled, then one
//    signalled; always for READ and WRITE_WITH_IMM whose buffers must be
//    recycled), and earlier when send buffers run low (send_queue.h; in a
//    loop of more than EventLoop::kLeanConnections connections, once half a
//    connection's registered buffers are out, so it keeps its first 4); a
//    send buffer is recycled when a later signalled completion covers it.
//    Consumed receives are re-posted in one ibv_post_recv chain
//    once RepostBatchFor(recv_depth) of them are pending (16 at the default
//    depth), or when the completion loop goes idle; only then do they become
//    credits owed to the peer (why this cannot deadlock: kRecvRepostBatch).
//
// Per small call in steady state (checked exactly by tests/rpc/
// rpc_hotpath_test from softrdma's counters and TransportStats): one
// ibv_post_send per message (owed credits ride in its header; WRs made
// ready in one loop step share one doorbell), IBV_SEND_INLINE when the
// message fits max_inline_data, 1/16 signalled send WR (up to 1/2 in a
// lean loop, above), 1/16 ibv_post_recv
// per message received, no ibv_reg_mr, no payload copy by the runtime: a
// synchronous request is serialised straight into the registered send
// buffer when posted, a small response likewise (TrySendResponseInPlace),
// and both are parsed straight from the receive buffer. What remains is
// counted in EngineStats::payload_bytes_copied: an asynchronous request (serialised before
// AsyncUnaryCall returns, copied when posted) and a response that had to
// queue behind others or wait for a credit.
//
// No heap allocation per small unary call in steady state, on either side
// (checked with a counting operator new by tests/rpc/rpc_allocation_test):
// the transport's tables (stream slots, end-of-step lists) keep their room;
// a hand-off to a loop may use a task node its caller keeps
// (TaskQueue::Task, EventLoop::Post), and a request may be a buffer its
// call keeps (OutgoingRequest::write with write_copies), so the layer above
// can reuse its call objects. softrdma's same-host path allocates nothing
// either (ring-buffer work queues, pooled frames, timers re-armed without
// a closure). Growing to a new high-water mark (more calls in flight than
// ever before) allocates once.
//
// Threads and ownership:
//  * Every Connection belongs to exactly one EventLoop (event_loop): only
//    the thread holding that loop's *poller* touches its QP, buffers,
//    credits and slot table. That is the loop's own thread, or a thread
//    waiting for its synchronous call (leader/follower, event_loop.h):
//    it try-locks the poller, starts its call inline, polls the CQ and
//    dispatches every completion (callbacks of other calls run on it too)
//    until its own call is done, then hands back. Other threads reach the
//    loop by EventLoop::Post(task). Never more than one thread polls a CQ.
//  * Completion loops busy-poll while calls are in flight (up to
//    kMaxInFlightSpin without a completion) and for --rdmarpc_spin_us after
//    the last completion (the in-flight bound is the loop thread's learnt
//    budget, never below that idle window), and only while the process has
//    a spinning slot free (spin_governor.h), then arm
//    the CQ, poll once more (the arm/re-poll race) and sleep on the
//    completion channel. An empty poll is followed
//    by a CPU pause hint, and by a sched_yield only every
//    --rdmarpc_spin_yield_every-th time while another thread wants the core,
//    up to 16 times less often while yields find it idle (spin_pause.h).
//    A caller never sleeps on
//    the channel itself: past the bound it hands the poller to the loop
//    thread and sleeps on a futex until its call is finished.
//  * Buffers: the receive ring (ReceiveRing) and the send buffers
//    (SendQueue, registered in chunks as the connection needs more) are
//    owned by the Connection; a shared receive queue's buffers by its loop. A received payload view
//    is valid only during the upcall that delivers it (the buffer may be re-posted at the end of
//    that loop step). LargeBuffers come from a LargeBufferPool shared by a Channel's or Server's
//    loops (mutex inside, control plane only).
//  * Nothing is freed while the device may still touch it: a closing
//    connection waits for the flush of its posted work requests (bounded by
//    kFlushWait), then destroys the QP, then the cm id, then the buffers.
//    Connection::CloseWhenSent (a server shutting down) first lets what is
//    queued be delivered: a signalled zero-length RDMA WRITE behind it
//    completes only once every WR before it did.
#ifndef RDMARPC_RUNTIME_TRANSPORT_TRANSPORT_H_
#define RDMARPC_RUNTIME_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

// Send queue depth per QP, in work requests.
inline constexpr int kSendQueueDepth = 256;
// Signal one send in this many (eRPC signals every 64th on IB; we use a
// smaller interval to recycle send buffers sooner with small rings).
inline constexpr int kSignalInterval = 16;
static_assert(kSendQueueDepth >= 2 * kSignalInterval,
              "an unsignalled run must leave room for the signalled WR that retires it");

// Completion queue entries a loop's CQ starts with (clamped to the device's
// max_cqe; EventLoop::EnsureCq doubles it once as it makes it, to learn
// whether the device can resize CQs). Each connection reserves recv_depth +
// kSendQueueDepth of them (kSendQueueDepth with a shared receive queue,
// whose receive buffers reserve one each), so the first CQ holds 12
// connections at the defaults: a channel's loop rarely needs more. Past that
// the loop doubles its CQ with ibv_resize_cq (which keeps the CQEs not yet
// polled), up to max_cqe (4 Mi CQEs on ConnectX-5/6: ~13,000 connections
// per loop). A CQ's entries are memory the device writes (64 bytes each on
// mlx5, pinned; 88 bytes of the process's heap on softrdma), so a loop
// with a few connections keeps its CQ small: 256 KiB on mlx5.
inline constexpr int kCqDepth = 2048;
// The CQ of a loop on a device without ibv_resize_cq (EOPNOTSUPP): made
// this big at once, since it cannot grow (about 200 connections per loop).
inline constexpr int kCqDepthWithoutResize = 65536;
// Work completions taken per ibv_poll_cq call.
inline constexpr int kPollBatch = 32;
// Busy-poll this long after the last completion before arming the CQ and
// sleeping on the completion channel (default of --rdmarpc_spin_us).
// Measured (examples/echo, Release, softrdma over TCP, 32-byte payload,
// 5000 blocking calls at concurrency 1, server `taskset -c 1 --workers=1`,
// client `taskset -c 0`, on the 2-vCPU build VM at load average ~11, median
// p50 of 3 runs): spin 0 → 89 us, 20 → 83, 100 → 86, 300 → 85, 1000 → 83.
// Past ~20 us the softrdma TCP round trip dominates and spinning longer only
// burns CPU; 50 us leaves margin for scheduler jitter on a loaded host and
// covers many round trips of a same-host (shared-memory) or NIC path, where
// the peer answers within a few microseconds.
inline constexpr absl::Duration kDefaultSpin = absl::Microseconds(50);
// While calls are in flight a completion loop polls on without sleeping, but
// not longer than this without any completion: a slow handler must not pin a
// core (a synchronous caller then hands the poller back and sleeps).
inline constexpr absl::Duration kMaxInFlightSpin = absl::Milliseconds(2);
// Consumed receives are re-posted in one chained ibv_post_recv once this many
// are pending (at most recv_depth / 4, at least 1), or when the completion
// loop goes idle. Holding back fewer than recv_depth / 4 receives keeps the
// credit exchange live: a peer blocked on credits means recv_depth - 1
// receives are consumed here or owed to it; at most a quarter are pending a
// re-post, so the owed ones reach CreditWindow's explicit-return threshold
// (half the ring) and go back in a kCredit message.
inline constexpr int kRecvRepostBatch = 16;
inline constexpr int RepostBatchFor(int recv_depth) {
  return recv_depth / 4 < 1 ? 1 : (recv_depth / 4 < kRecvRepostBatch ? recv_depth / 4
                                                                      : kRecvRepostBatch);
}
static_assert(RepostBatchFor(64) == 16 && RepostBatchFor(3) == 1 && RepostBatchFor(8) == 2);
// How long a closing connection waits for its flushed completions.
inline constexpr absl::Duration kFlushWait = absl::Milliseconds(500);
// Slots (concurrent calls) per client connection; imm_data has 16 bits.
inline constexpr int kMaxSlots = 65536;
// Fewest receives a connection posts (a smaller recv_depth is raised to
// this). One credit is held in reserve for kCredit, and owed credits go back
// explicitly once they reach CreditWindow's threshold of at least 2; a peer
// left with one credit (blocked) implies recv_depth - 1 owed here, so
// liveness needs recv_depth - 1 >= 2. With 2, a WRITE_WITH_IMM response
// (which carries no credits) or a kRelease leaves each side holding one
// credit and owing one, and both wait forever
// (Credits.TwoReceivesEachWayMixedSizesNeverDeadlock in rpc_limits_test).
inline constexpr int kMinRecvDepth = 3;
// Rendezvous payloads (RDMA READ pulls, RDMA WRITE pushes) move in pieces, a
// bounded number in flight per connection; eager frames queued meanwhile are
// posted between pieces, so a small call next to a large transfer waits for
// at most the bytes in flight (a 64 MiB payload as one WR held every frame
// behind it for the whole transfer: ~60 ms). Two pacings:
//  * while small messages flow on the connection (a request, response or
//    stream message carried eagerly, sent or received, within the last
//    kRendezvousBulkAfterPieces pieces): kRendezvousChunkBytes pieces,
//    kRendezvousChunksInFlight at once;
//  * otherwise (bulk only): kRendezvousBulkChunkBytes pieces,
//    kRendezvousBulkChunksInFlight at once, for bandwidth.
// Chosen with bench/rpc_bench (softrdma same-host, Release, client and server
// pinned to one core each, 2-vCPU VM; bench/HISTORY.md): in --modes=mixed (32 B
// calls next to 64 MiB echoes on one connection) the small calls' p50
// follows the bytes in flight (one 64 MiB piece: 1,073 us; 1 MiB x 2:
// 1,050 us; 256 KiB x 2: 146 us; 64 KiB x 4: 77 us; 64 KiB x 2 and 32 KiB x 4:
// 32 us; 16 KiB x 8: 26 us, one run each under load); in --modes=bandwidth
// (nothing small) 16 MiB x 4 echoes ran at 1.69 GB/s with 64 KiB x 2,
// 1.89 with 256 KiB x 4, 2.30 with 1 MiB x 4, 2.44 with 4 MiB x 4 (one
// piece per message before: 2.42-2.67). A 100 Gb/s link needs ~10 us of
// data in flight; raise the small pacing there if it idles between pieces
// (--rdmarpc_rendezvous_chunk_bytes, --rdmarpc_rendezvous_chunks_in_flight;
// --rdmarpc_rendezvous_bulk_* likewise).
inline constexpr size_t kRendezvousChunkBytes = 64 * 1024;
inline constexpr int kRendezvousChunksInFlight = 2;
inline constexpr size_t kRendezvousBulkChunkBytes = 4 * 1024 * 1024;
inline constexpr int kRendezvousBulkChunksInFlight = 4;
// 4 MiB of 64 KiB pieces: small calls come far more often than that when
// they come at all (one per ~35 us in --modes=mixed, ~3 pieces).
inline constexpr int kRendezvousBulkAfterPieces = 64;
static_assert(kRendezvousChunksInFlight >= 1 && kRendezvousChunksInFlight <= kSendQueueDepth / 4 &&
                  kRendezvousBulkChunksInFlight >= 1 &&
                  kRendezvousBulkChunksInFlight <= kSendQueueDepth / 4,
              "pieces must leave send-queue room for eager frames");
// The one eager-or-rendezvous rule: a message whose encoded size (header,
// aux, metadata, descriptors and inline payload, in bytes) is at most the
// eager limit negotiated with the peer (min of our eager_limit_bytes and the
// peer's receive buffers; Connection::eager_limit) goes as one SEND; above it
// its payload goes by rendezvous.
inline constexpr bool SendsEagerly(size_t encoded_bytes, size_t eager_limit) {
  return encoded_bytes <= eager_limit;
}
// Protocol version spoken on the wire.
inline constexpr uint16_t kProtocolVersion = 2;

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_TRANSPORT_H_
