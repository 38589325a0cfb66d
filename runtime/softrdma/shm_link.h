// shm_link.h: the same-host link of an RC connection: shared-memory rings and
// direct copies between the two address spaces.
//
// When both ends of a connection are processes on one host and in one network
// namespace (same boot_id, same /proc/self/ns/net inode), the QP frames of
// wire.h travel through a shared-memory segment instead of the TCP socket:
//
//   segment  = ring[0] (active side -> passive side) + ring[1] (the reverse)
//   ring     = control block (tail, head, need_doorbell) + kRingBytes of records
//   record   = u32 size (incl. these 8 bytes, 8-aligned), u32 kind, frame bytes
//
// A record that would cross the ring's end is preceded by a pad record to
// the end and written at offset 0; a producer whose consumer has caught up
// does the same early (kRingRewindAt), so a lightly used ring keeps to its
// first pages.
//
// Each ring has one producer (the sending QP, under its SoftQp::mu) and one
// consumer (the receiving QP, under its SoftQp::mu). The consumer is whoever
// holds that mutex: ibv_poll_cq / ibv_req_notify_cq on a CQ of the QP (like a
// NIC's provider reading CQEs from memory: no other thread is involved), or
// the progress thread when the producer rang the doorbell.
//
// Doorbell protocol (the "consumer asleep" flag): `need_doorbell` is 1 unless a
// poller is busy-polling the QP's CQ (for a ring whose producer marks the CQ's
// table, the table's poller_active word stands in for it; below). A producer
// publishes `tail`, issues a seq_cst fence, then reads `need_doorbell` and
// `head`; when the flag is set and the consumer had caught up with the tail
// before this record but not with this one, it writes a header-only kDoorbell
// frame on the TCP socket, which wakes the peer's progress thread to drain.
// One ibv_post_send's records are a batch (BeginBatch): each tail is
// published as its record is written, and the fence and the look at the flag
// come once after the last, with "this record" read as "the batch". A consumer that sets
// the flag (req_notify, or the progress thread's watchdog when the poller went
// quiet for kWatchdogMicros) issues a seq_cst fence and drains again; every
// drain loops "store head; fence; reload tail" until empty. Either side
// therefore sees the other's store (Dekker), so no record waits unseen.
//
// Which rings a poller looks at (shm_hint.h): a QP offers its peer a slot
// of its CQ's table in a kRecHint record; the peer then marks that slot
// after each record it publishes (after the fence above) and answers
// kRecHintAck, from which on the consumer's polls look at the ring only when
// its bit is set, and the producer reads the CQ's poller_active word in
// the table instead of this ring's need_doorbell: going to sleep and waking
// touch one word per CQ, not one per ring.
//
// Large data never enters the ring (kShmInlineMax): SEND / WRITE frames carry
// the requester's SGE list and the responder copies with process_vm_readv;
// READ_REQ carries the requester's destination SGEs and the responder copies
// with process_vm_writev, answering READ_RESP with no payload. As on hardware,
// such a SEND / WRITE reads the requester's buffer after post, so the buffer
// must stay unchanged until its completion.
//
// The TCP socket stays up for the rdma_cm handshake, DISCONNECT, doorbells and
// as the death signal: a peer killed with SIGKILL closes it. On DISCONNECT or
// the socket's loss the survivor drains the ring before it flushes, since
// what the peer put there was sent before it went away.
//
// Where this link is more lenient than hardware:
//  - A requester that deregisters (or unmaps) an MR while a large SEND /
//    WRITE / READ on it is outstanding: a NIC fails the WR (LOC_PROT_ERR);
//    here the responder copies from / into the memory if it is still mapped,
//    and fails the WR with LOC_PROT_ERR (NAK kReqLocal) only if it is not.
//  - A large READ's destination is written before the requester re-checks its
//    lkeys at completion (the TCP link checks, then copies).
//  - A segment whose creator dies between rdma_connect and ACCEPT stays in
//    /dev/shm (its name is unlinked as soon as the peer mapped it).
//  - A poller that stops polling without ibv_req_notify_cq delays the QP's
//    responder work by up to 2 * kWatchdogMicros (a NIC does not depend on
//    polling at all).
#ifndef RDMARPC_RUNTIME_SOFTRDMA_SHM_LINK_H_
#define RDMARPC_RUNTIME_SOFTRDMA_SHM_LINK_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "glog/logging.h"
#include "softrdma/shm_hint.h"
#include "softrdma/shm_record.h"
#include "softrdma/wire.h"

namespace softrdma {
namespace internal {

// Local or remote memory of one transfer, as process_vm_{readv,writev}
// take it. Four iovecs live inline (an SGE list of up to four, or a
// peer's), so a same-host transfer of a small SGE list allocates nothing.
using IovecList = absl::InlinedVector<iovec, 4>;

// Bytes of records per ring direction. 512 KiB holds ~2000 small frames in
// flight; a full ring spills into the producer's backlog (never blocks).
inline constexpr size_t kRingBytes = 512 << 10;
// A producer this many bytes into its ring whose consumer has caught up
// goes back to offset 0 (a pad record to the end), looking at the
// consumer's head once per kRewindCheckEvery bytes: a ring whose consumer
// keeps up touches about its first kRingRewindAt + kRewindCheckEvery bytes
// plus a record (up to kShmInlineMax), not all kRingBytes. Our own choice:
// two pages, and one head read per page of records.
inline constexpr size_t kRingRewindAt = 8192;
inline constexpr uint64_t kRewindCheckEvery = 4096;
// SEND / WRITE payloads up to this many bytes are copied into the ring at
// post; larger ones (and READs larger than this) go by process_vm_*.
inline constexpr uint32_t kShmInlineMax = 16384;
// A poller that has not polled for this long is considered asleep: the
// progress thread sets need_doorbell and drains in its place.
inline constexpr int kWatchdogMicros = 1000;
// Bytes one process_vm_{readv,writev} call moves at most, so a large copy
// shows progress (NoteWork) every millisecond or so instead of once at the
// end.
inline constexpr size_t kVmCopyChunk = 4 << 20;

// True when new connections may use the shared-memory link: env SOFTRDMA_SHM
// (0 or 1, default 1) unless SetShmEnabled overrode it.
bool ShmEnabled();

// This process's identity for the same-host check and the permission probe.
struct HostIdentity {
  std::string boot_id;  // /proc/sys/kernel/random/boot_id, 36 chars
  uint64_t netns_ino = 0;
  uint64_t netns_dev = 0;
  uint32_t pid = 0;
  uint64_t probe_addr = 0;   // address of a random cookie in this process
  uint64_t probe_value = 0;  // the cookie
};
const HostIdentity& LocalIdentity();

// True when `peer` is on this host and in this network namespace.
bool SameHost(const ShmHello& peer);
// Fills a hello with our identity (and `segment` as the segment name).
void FillHello(const std::string& segment, ShmHello* out);
// Reads the peer's probe cookie with process_vm_readv. False (with a warning
// logged once per process) on EPERM / ESRCH / a wrong value.
bool ProbePeer(const ShmHello& peer);
// For tests of the fallback: of the next probes, let `skip` pass as usual and
// then fail `fail` (as EPERM would). Thread-safe.
void FailShmProbesForTesting(int skip, int fail);

class ShmLink {
 public:
  // Active side: creates and maps a new segment; its name goes in CONNECT_REQ.
  // nullptr (warning logged once) when shm_open / ftruncate / mmap fail.
  static std::shared_ptr<ShmLink> Create();
  // Passive side: maps the segment the peer created and unlinks its name.
  static std::shared_ptr<ShmLink> Open(const std::string& name, pid_t peer_pid);
  ~ShmLink();
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  const std::string& name() const { return name_; }
  // Removes the segment's name (idempotent); mappings stay valid.
  void Unlink();
  void set_peer_pid(pid_t pid) { peer_pid_ = pid; }
  pid_t peer_pid() const { return peer_pid_; }

  // ---- producer (caller holds the sending QP's mutex) ----
  // Queues a whole encoded frame. Returns true when the caller must ring the
  // peer's doorbell. Frames that do not fit go to the backlog, in order;
  // *backlogged tells the caller to arrange a FlushBacklog later.
  bool Send(const std::shared_ptr<const std::vector<uint8_t>>& frame, bool* backlogged);
  // Header-only frame (ACK, NAK) without an allocation.
  bool SendHeader(const FrameHeader& h, bool* backlogged);
  // Moves backlog into the ring. Returns true when a doorbell is due;
  // *empty: nothing is left.
  bool FlushBacklog(bool* empty);
  // Tells the peer which slot of which of our CQ's tables to mark after each
  // record it produces for us (shm_hint.h): a kRecHint record, now or with
  // the next record that fits. Returns true when the caller must ring the
  // peer's doorbell (the peer sleeps: a later record would not wake it, as
  // the peer would not have caught up with this one).
  bool OfferHint(const HintOffer& offer);
  // Doorbell batching, as a NIC's provider rings one doorbell per
  // ibv_post_send list: between BeginBatch and EndBatch each record is
  // published (its tail stored) as it is pushed, but the peer is told once,
  // at EndBatch: one seq_cst fence, one mark of its slot and one look at
  // whether it sleeps for all of them. The fence was 80 % of TryPush's
  // cycles, and TryPush 11 % of a server's, in the 32 B rate profile. The
  // caller holds the QP's mutex from BeginBatch to EndBatch and must call
  // EndBatch: records of an unended batch wake no sleeping consumer.
  void BeginBatch() {
    DCHECK(!batching_) << "softrdma: a doorbell batch inside another";
    batching_ = true;
  }
  // Returns true when the caller must ring the peer's doorbell.
  bool EndBatch();
  // True once after a Drain pushed a record (a hint ack) that needs the
  // peer's doorbell; the caller then rings it.
  bool TakeOwedDoorbell() {
    const bool owed = doorbell_owed_;
    doorbell_owed_ = false;
    return owed;
  }

  // ---- consumer (caller holds the receiving QP's mutex) ----
  bool HasIncoming() const;
  // Hands every record to `fn` (the frame views ring memory, valid during the
  // call), looping until the ring stays empty (see the protocol above).
  // Returns the number of frames.
  size_t Drain(const std::function<void(Frame&)>& fn);
  // Called by ibv_poll_cq when its poller wakes (not on every poll) for
  // rings its peer does not mark yet (shm_hint.h): a poller is active.
  // True on the 1 -> 0 transition of need_doorbell (the caller then arms
  // its CQ's watchdog).
  bool MarkPolling();
  // Sets need_doorbell (for rings its peer does not mark yet); the caller
  // must then issue a seq_cst fence and Drain (the recheck). One fence may
  // serve the flags of many links.
  void MarkSleeping();
  // True once the peer acknowledged our OfferHint (a kRecHintAck was
  // drained): every record it publishes after that sets our slot's bit, so
  // our CQ need not check this ring on every poll. Any thread.
  bool marked_by_peer() const { return marked_by_peer_.load(std::memory_order_acquire); }

  // ---- process_vm copies; false with errno on failure ----
  // Copies `len` bytes from the peer's `remote` SGEs into local SGEs.
  // Both are called by the responder and move at most kVmCopyChunk bytes per
  // system call, counting each chunk as work (NoteWork).
  bool ReadFromPeer(const IovecList& local, const IovecList& remote);
  bool WriteToPeer(const IovecList& local, const IovecList& remote);

  // ---- signs of life for the transport timer ----
  // The responder (consumer) records work done for the peer's requests:
  // frames handled, chunks copied.
  void NoteWork(uint64_t units);
  // What the peer did lately, as a counter that moves while it works: its
  // work on our requests plus the records it produced for us. A silent peer
  // leaves it unchanged.
  uint64_t PeerProgress() const;
  // The consumer's CQs poll this link's incoming ring from now on, or its
  // QP left the link (ERROR, RESET, destroy_qp): from then on the producer's transport
  // timer counts the consumer's silence. The passive side of a connection
  // attaches only when its progress thread handles the RTU, which may be
  // behind thousands of other connections' set-up; a NIC's responder
  // acknowledges from RTR on, so until then the requester's timer does not
  // count (for a while: PeerNotAttachedLocked in qp.cc). Any thread.
  void MarkAttached();
  // Whether the peer marked the ring we produce into (above). Any thread.
  bool PeerAttached() const;

 private:
  struct alignas(64) RingCtl {
    alignas(64) std::atomic<uint64_t> tail;  // bytes published (producer)
    alignas(64) std::atomic<uint64_t> head;  // bytes consumed (consumer)
    alignas(64) std::atomic<uint32_t> need_doorbell;  // consumer
    std::atomic<uint64_t> work;  // consumer: NoteWork units
    std::atomic<uint32_t> attached;  // consumer: MarkAttached (0 as mapped)
  };
  static constexpr size_t kRingStride = sizeof(RingCtl) + kRingBytes;
  static constexpr size_t kSegmentBytes = 2 * kRingStride;

  ShmLink(std::string name, void* base, bool active);
  RingCtl* ctl(int i) const;
  uint8_t* data(int i) const;
  // Appends one record of `kind` with body `bytes`; false when it does not
  // fit now. Marks the peer's slot when the peer asked for it.
  bool TryPush(const uint8_t* bytes, size_t n, bool* doorbell, uint32_t kind = kRecFrame);
  // After records from tail `from` on were published: the fence, the mark,
  // and whether the consumer sleeps and must be rung for them.
  bool TellPeer(uint64_t from);
  // Pushes a hint offer or ack still owed, if it fits and no backlog waits.
  bool PushOwedControl();
  // Consumer: a kRecHint from the peer. Maps the table and owes the ack.
  void OnPeerHint(const HintOffer& h);

  std::string name_;
  void* base_ = nullptr;
  bool unlinked_ = false;
  int out_ = 0;  // ring index we produce into
  int in_ = 1;   // ring index we consume
  pid_t peer_pid_ = 0;
  uint64_t cached_head_ = 0;  // producer: the consumer's head as last read
  uint64_t rewind_checked_ = 0;  // producer: the tail at the last rewind check
  std::deque<std::shared_ptr<const std::vector<uint8_t>>> backlog_;
  // Producer (under the QP's mutex, as all of the above): the peer CQ's
  // table and our slot in it, the offer of ours not yet pushed, and the ack
  // owed for the peer's offer.
  std::shared_ptr<ShmHintMap> peer_table_;
  uint32_t peer_slot_ = 0;
  bool offer_owed_ = false;
  HintOffer offer_;
  bool ack_owed_ = false;
  bool doorbell_owed_ = false;
  // BeginBatch..EndBatch: whether a record was pushed, and the tail before
  // the first one.
  bool batching_ = false;
  bool batch_pushed_ = false;
  uint64_t batch_start_ = 0;
  std::atomic<bool> marked_by_peer_{false};
};

// Remote SGE list carried in a kRemoteData frame (kSglEntryBytes each,
// shm_record.h).
IovecList DecodeSgl(const uint8_t* p, size_t bytes);

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_SHM_LINK_H_
