// qp.cc: RC queue pairs: posting, the requester and the responder.
//
// Requests: SEND (+imm), RDMA WRITE (+imm), RDMA READ and the two atomics.
// Each request WR gets one PSN. The responder handles requests strictly in PSN
// order and answers each with ACK, READ_RESP or NAK; the requester completes
// WRs in order as those answers arrive, so a send completes only after the
// peer accepted it.
//
// Receiver not ready (RNR): a SEND or WRITE_WITH_IMM that finds no posted
// receive is NAKed with syndrome RNR and the responder drops every later
// request until that PSN comes again. The requester waits the RNR timer the
// NAK names (the responder's min_rnr_timer, or kRnrDelayMicros) and
// retransmits from the NAKed PSN (it keeps each WR's encoded frame until the WR
// completes), up to rnr_retry times (7 = forever), then completes the WR with
// IBV_WC_RNR_RETRY_EXC_ERR. This is the IB go-back-N recovery, minus packets.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "glog/logging.h"
#include "softrdma/progress_thread.h"
#include "softrdma/faults_internal.h"
#include "softrdma/internal.h"
#include "softrdma/shm_link.h"
#include "softrdma/softrdma.h"
#include "softrdma/wire.h"

namespace softrdma {
namespace internal {

namespace {

// Owning references of live QPs; the Conn and timers hold extra ones.
struct QpRegistry {
  absl::Mutex mu;
  absl::flat_hash_map<uint32_t, std::shared_ptr<SoftQp>> qps ABSL_GUARDED_BY(mu);
  uint32_t next_qpn ABSL_GUARDED_BY(mu) = 0x11;  // QPNs 0 and 1 are special in IB
};
QpRegistry& Registry() {
  static QpRegistry* r = new QpRegistry();
  return *r;
}

ibv_wc_opcode WcOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;  // SEND, SEND_WITH_IMM, SEND_WITH_INV
  }
}

void CompleteSendLocked(SoftQp* q, const SendWqe& w, ibv_wc_status status)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  // The WR has left the SQ, but its slot stays taken until the user polls a
  // CQE that covers it (SlotRelease in internal.h).
  q->sq_unpolled++;
  // DropAfterWrs / DropAfterBytes: this link dies right after this WR.
  if (status == IBV_WC_SUCCESS && CountCompletedSend(w.byte_len) && q->conn != nullptr) {
    q->conn->Drop();
  }
  if (status == IBV_WC_SUCCESS && !w.signaled) {
    q->unsignaled_done++;
    return;
  }
  SlotRelease slots;
  slots.qp = q->self;
  slots.count = q->unsignaled_done + 1;
  slots.generation = q->slot_generation.load();
  q->unsignaled_done = 0;
  ibv_wc wc{};
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = WcOpcode(w.opcode);
  wc.byte_len = w.byte_len;
  wc.qp_num = q->qp.qp_num;
  wc.src_qp = q->dest_qpn;
  CqPush(q->qp.send_cq, wc, std::move(slots));
}

void RaiseQpEventLocked(SoftQp* q, ibv_event_type type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  ibv_async_event ev{};
  ev.element.qp = &q->qp;
  ev.event_type = type;
  PostAsyncEvent(q->qp.context, ev);
}

// `invalidated_rkey` != 0: a SEND_WITH_INV that invalidated it (IBV_WC_WITH_INV).
void CompleteRecvLocked(SoftQp* q, const RecvWqe& r, ibv_wc_status status,
                        ibv_wc_opcode opcode, uint32_t byte_len, bool has_imm,
                        uint32_t imm, bool solicited = false, uint32_t invalidated_rkey = 0)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  ibv_wc wc{};
  wc.wr_id = r.wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = q->qp.qp_num;
  wc.src_qp = q->dest_qpn;
  if (has_imm) {
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = imm;  // already big-endian, carried verbatim
  } else if (invalidated_rkey != 0) {
    wc.wc_flags = IBV_WC_WITH_INV;
    wc.invalidated_rkey = invalidated_rkey;  // host order, as rdma-core's field
  }
  SlotRelease slots;
  if (q->qp.srq == nullptr) {  // an SRQ receive's slot is the SRQ's, not ours
    q->rq_unpolled++;
    slots.qp = q->self;
    slots.count = 1;
    slots.generation = q->slot_generation.load();
    slots.recv = true;
  }
  CqPush(q->qp.recv_cq, wc, std::move(slots), solicited);
}

// Takes the WR at the head of the SQ off it, keeping the sent-prefix count
// and the READ / atomic count true.
SendWqe PopSqFrontLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  SendWqe w = std::move(q->sq.front());
  q->sq.pop_front();
  if (w.sent) {
    q->sq_sent--;
    if (w.rd_atomic) q->rd_atomic_out--;
  }
  return w;
}

// The SQ was emptied (flush, RESET, destroy).
void ClearSqLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  q->sq.clear();
  q->sq_sent = 0;
  q->rd_atomic_out = 0;
}

void RingDoorbellLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu);

// The QP enters ERROR: every outstanding WR completes with WR_FLUSH_ERR.
// A QP on an SRQ then raises IBV_EVENT_QP_LAST_WQE_REACHED: it will take no
// more receives from the SRQ (IB spec 11.6.3.1; the consumer may now destroy
// it without losing SRQ receives).
// The QP lets go of its same-host link (ERROR, RESET, destroy_qp): it marks
// the ring attached first, so the peer's transport timer counts our silence
// from now on (PeerNotAttachedLocked).
void LeaveShmLinkLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->shm != nullptr) q->shm->MarkAttached();
  q->shm.reset();
}

// IB: the local ACK timeout is 4.096 us * 2^timeout.
int64_t AckTimeoutPeriodNanosLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  return int64_t{4096} << q->timeout;
}

void MoveToErrorLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  // Records this QP published in an unended doorbell batch (ShmPostBatch)
  // reach the peer as on the wire: tell it now, while the link and the
  // socket for its doorbell are still ours.
  if (q->shm != nullptr && q->shm->EndBatch()) RingDoorbellLocked(q);
  const bool entering = q->state != IBV_QPS_ERR;
  q->state = IBV_QPS_ERR;
  q->qp.state = IBV_QPS_ERR;
  for (const SendWqe& w : q->sq) CompleteSendLocked(q, w, IBV_WC_WR_FLUSH_ERR);
  ClearSqLocked(q);
  for (const RecvWqe& r : q->rq) {
    CompleteRecvLocked(q, r, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, false, 0);
  }
  q->rq.clear();
  q->rnr_wait = false;
  q->sq_blocked = false;
  q->conn.reset();
  q->awaiting_first_request = false;
  if (entering && q->qp.srq != nullptr) RaiseQpEventLocked(q, IBV_EVENT_QP_LAST_WQE_REACHED);
  LeaveShmLinkLocked(q);
  q->link_hold = false;
}

// Checks SGEs against the local key table: known lkey, same PD, inside the
// MR, and LOCAL_WRITE when the device writes into them. Sums their lengths.
// The caller holds a ScopedMrAccess until it has copied.
bool CheckLocal(ibv_pd* pd, const ibv_sge* sg, size_t n, bool write, uint64_t* total) {
  pd = ProtectionDomain(pd);  // a QP on a parent domain uses its PD's MRs
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += sg[i].length;
    if (sg[i].length == 0) continue;
    MrView v;
    if (!LookupKeyHeld(sg[i].lkey, /*remote=*/false, &v) || v.pd != pd) return false;
    if (sg[i].addr < v.addr || sg[i].addr + sg[i].length > v.addr + v.length) return false;
    if (write && !(v.access & IBV_ACCESS_LOCAL_WRITE)) return false;
  }
  *total = sum;
  return true;
}

// Checks a remote access at the responder `q`: a known rkey (of an MR or a
// bound window) of q's PD, a type-2 window bound to q itself, the range inside
// it and the access flags. The caller holds a ScopedMrAccess until it has copied.
bool CheckRemote(SoftQp* q, uint32_t rkey, uint64_t addr, uint64_t len, int need) {
  if (len == 0) return true;  // a zero-length access checks no key (IB spec)
  MrView v;
  if (!LookupKeyHeld(rkey, /*remote=*/true, &v) || v.pd != ProtectionDomain(q->qp.pd)) {
    return false;
  }
  if (v.qp_num != 0 && v.qp_num != q->qp.qp_num) return false;
  if (addr < v.addr || addr + len > v.addr + v.length || addr + len < addr) return false;
  return (v.access & need) == need;
}

// Scatters `len` bytes that belong at byte `offset` of the SGE list.
void ScatterAt(const SgeList& sges, size_t offset, const uint8_t* data, size_t len) {
  for (const ibv_sge& s : sges) {
    if (len == 0) break;
    if (s.length == 0) continue;
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const size_t take = std::min<size_t>(len, s.length - offset);
    std::memcpy(reinterpret_cast<void*>(s.addr + offset), data, take);
    data += take;
    len -= take;
    offset = 0;
  }
}

// The largest piece of a READ response on the TCP link (see kMore).
inline constexpr uint32_t kReadRespPiece = 4 << 20;

void UpdateMax(std::atomic<uint64_t>& m, uint64_t v) {
  uint64_t cur = m.load();
  while (v > cur && !m.compare_exchange_weak(cur, v)) {
  }
}

// Whether the send queue may move on: local operations need only this;
// WRs that send need the transport too (q->conn).
bool SqMayAdvanceLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  return q->state == IBV_QPS_RTS && !q->rnr_wait && !q->sq_blocked && !q->link_hold;
}

// ---- the link: the only place that knows TCP from shared memory -------------

void RingDoorbellLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->conn == nullptr) return;
  Stat().shm_doorbells++;
  FrameHeader h;
  h.type = FrameType::kDoorbell;
  q->conn->SendFrame(h);
}

void FlushBacklogLater(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu);

void FlushBacklogNow(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->shm == nullptr) return;
  bool empty = true;
  if (q->shm->FlushBacklog(&empty)) RingDoorbellLocked(q);
  if (!empty) FlushBacklogLater(q);
}

// A full ring spills into the link's backlog; the progress thread retries
// until it is gone (drains retry too, as the peer's answers free room).
void FlushBacklogLater(SoftQp* q) {
  std::weak_ptr<SoftQp> weak = q->self;
  ProgressThread::Get().RunAfter(absl::Microseconds(kWatchdogMicros), [weak] {
    std::shared_ptr<SoftQp> qp = weak.lock();
    if (qp == nullptr) return;
    internal::DomainLock l(&qp->mu);
    FlushBacklogNow(qp.get());
  });
}

// Any answer acknowledges the PSNs before it: a coalesced ACK is then moot.
bool IsAnswer(FrameType t) {
  return t == FrameType::kNak || t == FrameType::kReadResp || t == FrameType::kAtomicResp;
}

// VanishPeer / DropConnection on a same-host link: the rings fall silent as
// the socket does (frames sent are lost, frames in the ring are discarded).
bool LinkSilencedLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  return q->conn != nullptr && (q->conn->vanished() || q->conn->drop_requested());
}

void LinkSendLocked(SoftQp* q, std::shared_ptr<const std::vector<uint8_t>> frame)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (IsAnswer(static_cast<FrameType>((*frame)[0]))) q->ack_pending = false;
  if (q->shm != nullptr) {
    if (LinkSilencedLocked(q)) return;
    bool backlogged = false;
    if (q->shm->Send(frame, &backlogged)) RingDoorbellLocked(q);
    if (backlogged) FlushBacklogLater(q);
    return;
  }
  if (q->conn != nullptr) q->conn->Send(std::move(frame));
}

void LinkSendHeaderLocked(SoftQp* q, const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (IsAnswer(h.type)) q->ack_pending = false;
  if (q->shm != nullptr) {
    if (LinkSilencedLocked(q)) return;
    bool backlogged = false;
    if (q->shm->SendHeader(h, &backlogged)) RingDoorbellLocked(q);
    if (backlogged) FlushBacklogLater(q);
    return;
  }
  if (q->conn != nullptr) q->conn->SendFrame(h);
}

// This thread's frame pool (FramePool::ForThisThread): a plain pointer, so
// reading it is safe in any thread_local destructor, and a reaper made
// with the pool that frees it at thread exit. thread_locals are destroyed
// in the reverse order of their construction, so one made before the pool
// (whose destructor may post) is destroyed after the reaper and finds
// t_frame_pool_gone.
thread_local FramePool* t_frame_pool = nullptr;
thread_local bool t_frame_pool_gone = false;
struct FramePoolReaper {
  bool armed = false;
  ~FramePoolReaper() {
    delete t_frame_pool;
    t_frame_pool = nullptr;
    t_frame_pool_gone = true;
  }
};
thread_local FramePoolReaper t_frame_pool_reaper;

// Appends the non-empty SGEs as a remote SGE list (shm_link.h).
std::shared_ptr<std::vector<uint8_t>> NewSglFrame(const FrameHeader& h, const ibv_sge* sg, int n) {
  int used = 0;
  for (int i = 0; i < n; ++i) used += sg[i].length > 0 ? 1 : 0;
  auto buf = FramePool::Take(h, static_cast<uint32_t>(used * kSglEntryBytes));
  uint8_t* out = buf->data() + kHeaderSize;
  for (int i = 0; i < n; ++i) {
    if (sg[i].length == 0) continue;
    PutU64(out, sg[i].addr);
    const uint32_t len = htole32(sg[i].length);
    std::memcpy(out + 8, &len, 4);
    out += kSglEntryBytes;
  }
  return buf;
}

// A frame built for the same-host link, rebuilt for TCP (QpSetLink fell back
// after WRs were posted): the data is gathered from our own memory now.
std::shared_ptr<const std::vector<uint8_t>> ToTcpFrame(
    const std::shared_ptr<const std::vector<uint8_t>>& frame) {
  FrameHeader h = DecodeHeader(frame->data());
  if (!(h.flags & kRemoteData)) return frame;
  h.flags &= static_cast<uint8_t>(~kRemoteData);
  if (h.type == FrameType::kReadReq) return NewFrame(h, 0);
  IovecList sgl = DecodeSgl(frame->data() + kHeaderSize, h.length);
  auto buf = NewFrame(h, h.read_len);
  uint8_t* out = buf->data() + kHeaderSize;
  for (const iovec& v : sgl) {
    std::memcpy(out, v.iov_base, v.iov_len);
    out += v.iov_len;
  }
  return buf;
}

void OnAckTimer(SoftQp* q);

// Signs that the peer is alive and working, as one counter: answers received,
// bytes moving on the TCP socket either way (kProgress frames included), and
// on the same-host link the peer's work on our requests and records it
// produced for us. A silenced link (VanishPeer, DropConnection) shows only the
// first, which then stops.
uint64_t LinkProgressLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  uint64_t p = q->progress + q->conn->io_progress();
  if (q->shm != nullptr && !LinkSilencedLocked(q)) p += q->shm->PeerProgress();
  return p;
}

// Whether a SEND / WRITE's lkeys still vouch for its buffers (MRs of the QP's
// PD, in range, alive): a NIC reads them when it executes or retransmits the
// WR and fails it with LOC_PROT_ERR when an MR was deregistered since post.
bool DataLkeysValidLocked(SoftQp* q, const SendWqe& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (w.data_sges.empty()) return true;
  ScopedMrAccess access;
  uint64_t total = 0;
  return CheckLocal(q->qp.pd, w.data_sges.data(), w.data_sges.size(), /*write=*/false, &total);
}

void ProcessSqHeadLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu);
ibv_wc_status RunLocalOpLocked(SoftQp* q, const SendWqe& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu);
void ArmAckTimerLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu);

// RNR retry from sq[idx]: that WR and every one after it go out again (a
// local operation carried out stays done).
void RewindSqLocked(SoftQp* q, size_t idx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  for (size_t i = idx; i < q->sq_sent; ++i) {
    SendWqe& w = q->sq[i];
    if (w.local_op) continue;
    w.sent = false;
    if (w.rd_atomic) q->rd_atomic_out--;
  }
  q->sq_sent = std::min(q->sq_sent, idx);
}

// Moves the send queue on, in order, as a NIC's requester walks its SQ: the
// WRs from sq[sq_sent] go out while the QP may transmit; a local operation
// (BIND_MW, LOCAL_INV) takes effect in its turn; a READ or atomic beyond
// max_rd_atomic outstanding stops the walk until an answer comes. A WR whose lkeys died since
// post goes no further: it fails in order with IBV_WC_LOC_PROT_ERR, and the
// WRs after it are flushed. Then completes what is done at the head.
void AdvanceSqLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  bool sent_any = false;
  while (SqMayAdvanceLocked(q) && q->sq_sent < q->sq.size()) {
    SendWqe& w = q->sq[q->sq_sent];
    if (w.local_error != IBV_WC_SUCCESS) break;  // fails at the head
    if (!w.local_op && q->conn == nullptr) break;
    if (w.local_op && w.sent) {  // carried out before an RNR rewind
      q->sq_sent++;
      continue;
    }
    if (w.local_op) {
      w.local_error = RunLocalOpLocked(q, w);
      if (w.local_error != IBV_WC_SUCCESS) {
        q->sq_blocked = true;
        break;
      }
      w.sent = true;
      q->sq_sent++;
      continue;
    }
    // A max_rd_atomic of 0 lets one out, as on mlx5 (whose QP context keeps
    // the log2 of the limit), so a READ to a peer that accepted with no
    // responder resources gets that peer's NAK (IBV_WC_REM_INV_REQ_ERR).
    if (w.rd_atomic && q->rd_atomic_out >= std::max<uint32_t>(q->max_rd_atomic, 1)) {
      Stat().rd_atomic_waits++;
      break;
    }
    if (!w.checked_now && !DataLkeysValidLocked(q, w)) {
      w.local_error = IBV_WC_LOC_PROT_ERR;
      q->sq_blocked = true;
      break;
    }
    w.checked_now = false;
    // VanishAfterWrs (faults.h) counts WRs as they first go out.
    if (!w.ever_sent && CountPostedSendForVanish()) q->conn->Vanish();
    w.ever_sent = true;
    LinkSendLocked(q, w.frame);
    w.sent = true;
    q->sq_sent++;
    sent_any = true;
    if (w.rd_atomic) {
      q->rd_atomic_out++;
      UpdateMax(Stat().max_rd_atomic_out, q->rd_atomic_out);
    }
  }
  if (sent_any) ArmAckTimerLocked(q);
  ProcessSqHeadLocked(q);
}

// Starts the transport timer if sent WRs wait for answers and it is idle.
void ArmAckTimerLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  // Only WRs that went out wait for answers (not those waiting in the SQ).
  if (q->ack_timer_armed || q->timeout == 0 || q->sq_sent == 0 || q->conn == nullptr) return;
  q->ack_timer_armed = true;
  q->timeouts = 0;
  q->seen_progress = LinkProgressLocked(q);
  const absl::Duration period = absl::Nanoseconds(AckTimeoutPeriodNanosLocked(q));
  ProgressThread::Get().RunAfter(period, std::weak_ptr<void>(q->self),
                                 [](const std::shared_ptr<void>& qp) {
                                   OnAckTimer(static_cast<SoftQp*>(qp.get()));
                                 });
}

// What a /proc/PID/stat (or /proc/PID/task/TID/stat) file says: the state
// letter (of the process's first thread, or of the thread) and the CPU time
// (utime + stime, clock ticks; of all threads, or of the thread). False when
// it cannot be read (gone).
bool ReadProcessStat(const char* path, char* state, uint64_t* cpu_ticks) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "pid (comm) S ppid ..."; comm may hold spaces and parentheses.
  const char* after_comm = std::strrchr(buf, ')');
  if (after_comm == nullptr) return false;
  unsigned long utime = 0, stime = 0;  // NOLINT(runtime/int): proc(5)'s %lu
  if (std::sscanf(after_comm + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", state,
                  &utime, &stime) != 3) {
    return false;
  }
  *cpu_ticks = static_cast<uint64_t>(utime) + stime;
  return true;
}

// Whether some thread of process `pid` is runnable (state R in
// /proc/PID/task/TID/stat).
bool AnyThreadRunnable(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/task", static_cast<int>(pid));
  DIR* dir = ::opendir(path);
  if (dir == nullptr) return false;
  bool runnable = false;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char stat_path[300];
    std::snprintf(stat_path, sizeof(stat_path), "/proc/%d/task/%s/stat", static_cast<int>(pid),
                  e->d_name);
    char state = 0;
    uint64_t ticks = 0;
    if (ReadProcessStat(stat_path, &state, &ticks) && state == 'R') {
      runnable = true;
      break;
    }
  }
  ::closedir(dir);
  return runnable;
}

// Whether the same-host peer process could not have answered during the
// period that just passed without progress: it is stopped (SIGSTOP, a
// debugger: state T or t), or one of its threads is runnable while the
// process got no CPU time since the last such period (a starved host). On a
// NIC the adapter answers whatever the host's processes do, so its transport
// timer never fires for a stopped or starved peer; softrdma's answers come
// from the peer process itself, so such a period does not count as a
// timeout. A peer that runs, or sleeps, and stays silent still counts (as
// does a link silenced by a fault, and a peer on the TCP link, whose process
// is not known). Reads /proc only after a silent period, at most
// retry_cnt + 1 times in a row per QP unless the peer is stalled.
bool PeerProcessStalledLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->shm == nullptr || LinkSilencedLocked(q)) return false;
  const pid_t pid = q->shm->peer_pid();
  if (pid <= 0 || pid == ::getpid()) return false;  // this process runs: we do
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  char state = 0;
  uint64_t ticks = 0;
  if (!ReadProcessStat(path, &state, &ticks)) return false;
  const bool no_cpu = q->peer_cpu_known && ticks == q->peer_cpu_ticks;
  q->peer_cpu_known = true;
  q->peer_cpu_ticks = ticks;
  return state == 'T' || state == 't' || (no_cpu && AnyThreadRunnable(pid));
}

// Whether a silent period ending now is one in which the same-host peer had
// not started polling the ring we produce into (ShmLink::MarkAttached): a
// passive side whose progress thread has not handled our RTU yet. A NIC's
// responder acknowledges from RTR on, so such a period does not count, for
// at most kUnattachedGrace in all. A peer whose QP left the link first
// (LeaveShmLinkLocked) has marked the ring too, and its silence counts; so does
// a link silenced by a fault. A peer that dies closes the socket, which
// flushes the QP.
constexpr absl::Duration kUnattachedGrace = absl::Seconds(5);
bool PeerNotAttachedLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->shm == nullptr || LinkSilencedLocked(q) || q->shm->PeerAttached()) return false;
  const int64_t period_ns = AckTimeoutPeriodNanosLocked(q);
  if (q->unattached_wait_ns + period_ns > absl::ToInt64Nanoseconds(kUnattachedGrace)) return false;
  q->unattached_wait_ns += period_ns;
  return true;
}

// One transport timeout period passed. Progress (LinkProgressLocked: an
// answer, bytes moving, the peer copying for us -- a NIC ACKs or answers every
// packet of a large message as it moves) restarts the count; retry_cnt + 1 periods without any fail
// the head WR with RETRY_EXC_ERR and flush the rest, as a NIC does when its
// retransmissions go unanswered (a crashed or unreachable peer).
void OnAckTimerLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  q->ack_timer_armed = false;
  if ((q->state != IBV_QPS_RTS && q->state != IBV_QPS_SQD) || q->sq_sent == 0 ||
      q->conn == nullptr || q->timeout == 0) {
    return;
  }
  const uint64_t progress = LinkProgressLocked(q);
  if (q->rnr_wait || progress != q->seen_progress) {
    q->peer_cpu_known = false;
    ArmAckTimerLocked(q);  // resets the count
    return;
  }
  if (PeerProcessStalledLocked(q) || PeerNotAttachedLocked(q)) {
    const int timeouts = q->timeouts;
    ArmAckTimerLocked(q);
    q->timeouts = timeouts;  // this period does not count
    return;
  }
  if (++q->timeouts <= q->retry_cnt) {
    const int timeouts = q->timeouts;
    ArmAckTimerLocked(q);
    q->timeouts = timeouts;  // consecutive: keep counting
    return;
  }
  SendWqe w = PopSqFrontLocked(q);
  CompleteSendLocked(q, w, IBV_WC_RETRY_EXC_ERR);
  MoveToErrorLocked(q);
}

// Runs the deferred timers of `d` (DeferredTimers), counting them in
// `count`. Under d->mu, so the list keeps its capacity (the owner's poll
// allocates nothing); the progress thread's OnAckTimer waits meanwhile.
void RunTimersOf(DeferredTimers* d, OwnerCount<uint64_t>& count) {
  absl::MutexLock l(&d->mu);
  d->due.store(false, std::memory_order_relaxed);
  for (std::weak_ptr<SoftQp>& w : d->qps) {
    if (std::shared_ptr<SoftQp> q = w.lock()) {
      count++;
      internal::DomainLock ql(&q->mu);
      OnAckTimerLocked(q.get());
    }
  }
  d->qps.clear();
}

void OnOwnerTimerGrace(const std::shared_ptr<void>& owner) {
  auto* d = static_cast<DeferredTimers*>(owner.get());
  {
    absl::MutexLock l(&d->mu);
    d->grace_armed = false;
  }
  RunTimersOf(d, Stat().grace_timers);  // the owner did not poll in time: as a visitor
}

// Whether the owner of `q`'s thread domain has armed one of its CQs: it is
// going to sleep, so a timer left to its next poll would wait for the grace.
// (ibv_qp's CQ pointers never change after create_qp.)
bool OwnerMaySleep(SoftQp* q) {
  return ToSoft(q->qp.send_cq)->armed_hint.load(std::memory_order_relaxed) ||
         ToSoft(q->qp.recv_cq)->armed_hint.load(std::memory_order_relaxed);
}

// A QP's transport timer fired (progress thread). A QP of a fast thread
// domain whose owner polls one of its CQs (owner_runs_timers) leaves the
// work to that owner (DeferredTimers), unless the owner armed a CQ to sleep:
// then the timer runs now, as a visitor, so a sleeping owner's QP times out
// after retry_cnt + 1 periods as a polling one's does.
void OnAckTimer(SoftQp* q) {
  if (SoftTd* td = q->mu.domain();
      td != nullptr && td->fast && q->owner_runs_timers && !OwnerMaySleep(q)) {
    DeferredTimers* d = td->deferred.get();
    absl::MutexLock l(&d->mu);
    d->qps.push_back(q->self);
    d->due.store(true, std::memory_order_release);
    if (!d->grace_armed) {
      d->grace_armed = true;
      ProgressThread::Get().RunAfter(kOwnerTimerGrace, std::weak_ptr<void>(td->deferred),
                                     &OnOwnerTimerGrace);
    }
    return;
  }
  internal::DomainLock l(&q->mu);
  OnAckTimerLocked(q);
}

// RecvBeforeSend: sends the held-back ACK, if any.
void FlushHeldAckLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (!q->ack_held) return;
  q->ack_held = false;
  if (q->conn == nullptr) return;
  FrameHeader h;
  h.type = FrameType::kAck;
  h.psn = q->ack_held_psn;
  LinkSendHeaderLocked(q, h);
}

// Local operations (BIND_MW, LOCAL_INV) carried out and at the head
// complete; a WR that failed (at post, when its turn came) completes once it
// reaches the head, and the QP enters ERROR.
void ProcessSqHeadLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  while (!q->sq.empty() && q->sq.front().local_op && q->sq.front().sent) {
    SendWqe w = PopSqFrontLocked(q);
    CompleteSendLocked(q, w, IBV_WC_SUCCESS);
  }
  if (q->sq.empty() || q->sq.front().local_error == IBV_WC_SUCCESS) return;
  SendWqe w = PopSqFrontLocked(q);
  CompleteSendLocked(q, w, w.local_error);
  MoveToErrorLocked(q);
}

void CountPosted(ibv_wr_opcode op, uint64_t bytes, bool signaled) {
  Counters& c = Stat();
  if (signaled) c.signaled_sends++;
  switch (op) {
    case IBV_WR_SEND:
      c.send++;
      UpdateMax(c.max_send_bytes, bytes);
      break;
    case IBV_WR_SEND_WITH_IMM:
      c.send_with_imm++;
      UpdateMax(c.max_send_bytes, bytes);
      break;
    case IBV_WR_SEND_WITH_INV:
      c.send++;
      UpdateMax(c.max_send_bytes, bytes);
      break;
    case IBV_WR_RDMA_WRITE:
      c.rdma_write++;
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      c.rdma_write_with_imm++;
      break;
    case IBV_WR_RDMA_READ:
      c.rdma_read++;
      break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      c.atomic++;
      break;
    default:
      break;
  }
  c.bytes_sent += bytes;
}

// Carries out a local operation (BIND_MW, LOCAL_INV) in its turn; the result
// is the status its completion will carry.
ibv_wc_status RunLocalOpLocked(SoftQp* q, const SendWqe& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (w.opcode == IBV_WR_BIND_MW) return MwBind(w.bind, &q->qp, MwBindStep::kApply);
  // LOCAL_INV of anything but a bound type-2 window of this PD (we have no
  // fast-register MRs) fails as rxe fails it: IBV_WC_LOC_QP_OP_ERR.
  return MwInvalidate(w.invalidate_rkey, &q->qp, /*require_qp=*/false)
             ? IBV_WC_SUCCESS
             : IBV_WC_LOC_QP_OP_ERR;
}

// A BIND_MW work request as posted (wr->bind_mw).
MwBindRequest BindRequestOf(const ibv_send_wr& wr, bool verb) {
  MwBindRequest r;
  r.mw = wr.bind_mw.mw;
  r.mw_handle = wr.bind_mw.mw != nullptr ? wr.bind_mw.mw->handle : 0;
  r.new_rkey = wr.bind_mw.rkey;
  const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
  r.mr = b.mr;
  r.mr_lkey = b.mr != nullptr ? b.mr->lkey : 0;
  r.addr = b.addr;
  r.length = b.length;
  r.access = b.mw_access_flags;
  r.verb = verb;
  return r;
}

// The type, remote address / rkey and invalidate flag of a SEND or WRITE
// request (any SEND_*, RDMA_WRITE, RDMA_WRITE_WITH_IMM), the same on both
// links and for payloads of any size.
void SetSendOrWriteHeader(const ibv_send_wr& wr, FrameHeader* h) {
  switch (wr.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      h->type = FrameType::kSend;
      break;
    case IBV_WR_SEND_WITH_INV:
      h->type = FrameType::kSend;
      h->flags |= kHasInv;
      h->rkey = wr.invalidate_rkey;
      break;
    default:
      h->type = FrameType::kWrite;
      h->addr = wr.wr.rdma.remote_addr;
      h->rkey = wr.wr.rdma.rkey;
      break;
  }
}

// `bind_verb`: the WR comes from the ibv_bind_mw verb, whose invalid binds
// fail at once with EINVAL (nothing posted) rather than with a completion.
int PostOneSendLocked(SoftQp* q, ibv_send_wr* wr, bool bind_verb = false)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  const bool iwarp = ToSoft(q->qp.context)->iwarp;
  switch (wr->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_READ:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      break;
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      // iWARP has no immediate data and no atomics: RNICs refuse these at
      // post (EINVAL, as siw and cxgb4 do).
      if (iwarp) return EINVAL;
      break;
    default:
      return EINVAL;  // TSO, DRIVER1, ...: not supported
  }
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > q->cap.max_send_sge) {
    return EINVAL;
  }
  const bool is_atomic =
      wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  const bool local_op = wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV;
  // Like a READ, an atomic writes its result (the original value) locally.
  const bool is_read = wr->opcode == IBV_WR_RDMA_READ || is_atomic;
  const bool is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0;
  // Inline data exists only for requests that carry data out: SEND and WRITE.
  if (is_inline && (is_read || local_op)) return EINVAL;
  uint64_t total = 0;
  if (!local_op) {  // a bind or invalidate carries no data; its SGEs are ignored
    for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
  }
  if (is_atomic && (wr->num_sge != 1 || total != 8)) return EINVAL;  // one 8-byte SGE
  if (is_inline && total > q->cap.max_inline_data) return EINVAL;
  if (total > kMaxMsgSize) return EINVAL;

  SendWqe w;
  w.wr_id = wr->wr_id;
  w.opcode = wr->opcode;
  w.signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
  w.byte_len = static_cast<uint32_t>(total);
  w.local_op = local_op;
  w.rd_atomic = is_read;
  if (wr->opcode == IBV_WR_BIND_MW) w.bind = BindRequestOf(*wr, bind_verb);
  if (wr->opcode == IBV_WR_LOCAL_INV) w.invalidate_rkey = wr->invalidate_rkey;

  // Completed WRs whose CQE is not yet polled still hold their slots.
  if (q->state != IBV_QPS_RESET &&
      q->sq.size() + q->sq_unpolled.load() >= q->cap.max_send_wr) {
    return ENOMEM;
  }
  if (q->state == IBV_QPS_ERR) {
    // Hardware accepts WRs on an errored QP and flushes them.
    CountPosted(wr->opcode, total, w.signaled);
    CompleteSendLocked(q, w, IBV_WC_WR_FLUSH_ERR);
    return 0;
  }
  if (q->state != IBV_QPS_RTS) return EINVAL;
  if (local_op) {
    // The verb refuses a bind it can tell is invalid now (EINVAL, nothing
    // posted); otherwise the operation takes effect in its turn (a bind that
    // has become invalid by then completes with IBV_WC_MW_BIND_ERR).
    if (bind_verb && !q->sq_blocked &&
        MwBind(w.bind, &q->qp, MwBindStep::kCheck) != IBV_WC_SUCCESS) {
      return EINVAL;
    }
    CountPosted(wr->opcode, 0, w.signaled);
    q->sq.push_back(std::move(w));
    AdvanceSqLocked(q);
    return 0;
  }
  if (q->conn == nullptr) return EINVAL;  // RTS without rdma_cm: no transport

  w.psn = q->next_psn++;
  {
    // The payload is copied out below while no MR can be deregistered.
    ScopedMrAccess access;
    uint64_t checked = 0;
    if (!is_inline &&
        !CheckLocal(q->qp.pd, wr->sg_list, static_cast<size_t>(wr->num_sge), is_read, &checked)) {
      w.local_error = IBV_WC_LOC_PROT_ERR;
    }
    if (w.local_error == IBV_WC_SUCCESS) {
      FrameHeader h;
      h.psn = w.psn;
      const bool with_imm =
          wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
      if (with_imm) {
        h.flags |= kHasImm;
        h.imm = wr->imm_data;
      }
      // Only a SEND or WRITE_WITH_IMM consumes a receive, so only they carry
      // the Solicited Event bit to the responder's CQ.
      if ((wr->send_flags & IBV_SEND_SOLICITED) &&
          (wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_IMM ||
           wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
        h.flags |= kSolicited;
      }
      if (is_atomic) {
        h.type = FrameType::kAtomic;
        h.flags = wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? kFetchAdd : kCmpSwap;
        h.addr = wr->wr.atomic.remote_addr;
        h.rkey = wr->wr.atomic.rkey;
        auto buf = FramePool::Take(h, 16);
        PutU64(buf->data() + kHeaderSize, wr->wr.atomic.compare_add);
        PutU64(buf->data() + kHeaderSize + 8, wr->wr.atomic.swap);
        w.read_sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
        w.frame = std::move(buf);
      } else if (is_read) {
        h.type = FrameType::kReadReq;
        h.addr = wr->wr.rdma.remote_addr;
        h.rkey = wr->wr.rdma.rkey;
        h.read_len = static_cast<uint32_t>(total);
        w.read_sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
        if (q->shm != nullptr && total > kShmInlineMax) {
          // The responder writes straight into our SGEs (process_vm_writev).
          h.flags |= kRemoteData;
          w.frame = NewSglFrame(h, wr->sg_list, wr->num_sge);
        } else {
          w.frame = FramePool::Take(h, 0);
        }
      } else if (q->shm != nullptr && !is_inline && total > kShmInlineMax) {
        // Same-host link: the responder reads our SGEs when it handles the
        // request (process_vm_readv), as a NIC reads them after post.
        SetSendOrWriteHeader(*wr, &h);
        h.flags |= kRemoteData;
        h.read_len = static_cast<uint32_t>(total);
        w.frame = NewSglFrame(h, wr->sg_list, wr->num_sge);
        w.data_sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
      } else {
        if (!is_inline) w.data_sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
        SetSendOrWriteHeader(*wr, &h);
        // The payload is copied now (inline or not); the WR's buffers are free
        // for reuse earlier than on hardware, which is allowed.
        auto buf = FramePool::Take(h, static_cast<uint32_t>(total));
        uint8_t* out = buf->data() + kHeaderSize;
        for (int i = 0; i < wr->num_sge; ++i) {
          // A zero-length SGE is skipped, as mlx5 does: its address (often
          // NULL) and lkey mean nothing, and memcpy from NULL is UB even for 0.
          if (wr->sg_list[i].length == 0) continue;
          std::memcpy(out, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                      wr->sg_list[i].length);
          out += wr->sg_list[i].length;
        }
        w.frame = std::move(buf);
      }
    }
  }  // ScopedMrAccess
  CountPosted(wr->opcode, total, w.signaled);
  const bool errored = w.local_error != IBV_WC_SUCCESS;
  if (errored) {
    q->sq.push_back(std::move(w));
    q->sq_blocked = true;  // later WRs are flushed when this one completes
    ProcessSqHeadLocked(q);
    return 0;
  }
  w.checked_now = true;
  q->sq.push_back(std::move(w));
  AdvanceSqLocked(q);
  if (!q->sq.empty() && q->sq.back().sent) {
    // A held ACK rides behind our own request, as a NIC piggybacks it.
    if (q->ack_held) CountAckBehindRequest();
    FlushHeldAckLocked(q);
  } else if (!q->sq.empty()) {
    q->sq.back().checked_now = false;  // when it goes out, its lkeys are looked at again
  }
  return 0;
}

// Finds the queued WR with `psn`; -1 if none (a stale answer).
int FindPsnLocked(SoftQp* q, uint32_t psn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  for (size_t i = 0; i < q->sq.size(); ++i) {
    if (q->sq[i].local_op && q->sq[i].local_error == IBV_WC_SUCCESS) continue;  // no PSN
    if (q->sq[i].psn == psn && q->sq[i].local_error == IBV_WC_SUCCESS) {
      return static_cast<int>(i);
    }
    if (q->sq[i].local_error != IBV_WC_SUCCESS) break;
  }
  return -1;
}

// Completes the first `n` WRs successfully (implicitly acknowledged).
void CompleteFrontLocked(SoftQp* q, int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  for (int i = 0; i < n; ++i) {
    // DropAfterWrs / DropAfterBytes fired on an earlier WR of this (coalesced)
    // ACK: the link died there, so the rest of the ACK was never received.
    if (q->conn != nullptr && q->conn->drop_requested()) return;
    SendWqe w = PopSqFrontLocked(q);
    CompleteSendLocked(q, w, IBV_WC_SUCCESS);
  }
}

void RetransmitFrom(SoftQp* q, uint32_t psn) {
  internal::DomainLock l(&q->mu);
  if (!q->rnr_wait || q->state != IBV_QPS_RTS || q->conn == nullptr) return;
  q->rnr_wait = false;
  int idx = FindPsnLocked(q, psn);
  if (idx < 0) return;
  RewindSqLocked(q, static_cast<size_t>(idx));
  AdvanceSqLocked(q);
}

// A READ response piece on the TCP link must fall inside the READ at the head
// of the send queue (after the completions the response implies).
bool ReadPieceFitsLocked(SoftQp* q, const Frame& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->sq.empty()) return false;
  const SendWqe& w = q->sq.front();
  if (w.opcode != IBV_WR_RDMA_READ) return true;  // reported as BAD_RESP below
  return f.h.addr + f.h.length <= w.byte_len;
}

void OnResponseLocked(SoftQp* q, Frame& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->state != IBV_QPS_RTS && q->state != IBV_QPS_SQD) return;
  const int idx = FindPsnLocked(q, f.h.psn);
  // Only a WR that went out can be answered.
  if (idx < 0 || static_cast<size_t>(idx) >= q->sq_sent) return;
  q->progress++;  // the peer is alive: restarts the transport timer
  switch (f.h.type) {
    case FrameType::kAck:
      CompleteFrontLocked(q, idx + 1);
      q->rnr_count = 0;
      break;
    case FrameType::kReadResp:
    case FrameType::kAtomicResp: {
      CompleteFrontLocked(q, idx);
      if (q->conn != nullptr && q->conn->drop_requested()) return;  // link died
      if (f.h.type == FrameType::kReadResp && !(f.h.flags & kRemoteData) &&
          !ReadPieceFitsLocked(q, f)) {
        SendWqe w = PopSqFrontLocked(q);
        CompleteSendLocked(q, w, IBV_WC_BAD_RESP_ERR);
        MoveToErrorLocked(q);
        return;
      }
      if (f.h.flags & kMore) {
        // A piece of a READ's data (TCP); the last one completes the WR.
        SendWqe& w = q->sq.front();
        bool local_ok;
        uint64_t room = 0;
        {
          ScopedMrAccess access;
          local_ok = CheckLocal(q->qp.pd, w.read_sges.data(), w.read_sges.size(),
                                /*write=*/true, &room);
          if (local_ok) ScatterAt(w.read_sges, f.h.addr, f.data(), f.h.length);
        }
        if (!local_ok) {
          SendWqe failed = PopSqFrontLocked(q);
          CompleteSendLocked(q, failed, IBV_WC_LOC_PROT_ERR);
          MoveToErrorLocked(q);
        }
        return;
      }
      SendWqe w = PopSqFrontLocked(q);
      q->rnr_count = 0;
      uint64_t room = 0;
      const bool atomic_resp = f.h.type == FrameType::kAtomicResp;
      const bool atomic_wqe =
          w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
      // (A TCP READ's last piece carries the data from offset addr on.)
      const uint64_t resp_end =
          atomic_resp || (f.h.flags & kRemoteData) ? f.h.length : f.h.addr + f.h.length;
      if (atomic_resp != atomic_wqe || (!atomic_wqe && w.opcode != IBV_WR_RDMA_READ) ||
          resp_end != w.byte_len) {
        CompleteSendLocked(q, w, IBV_WC_BAD_RESP_ERR);
        MoveToErrorLocked(q);
        return;
      }
      bool local_ok;
      {
        ScopedMrAccess access;  // the destination stays registered while we copy
        local_ok = CheckLocal(q->qp.pd, w.read_sges.data(), w.read_sges.size(),
                              /*write=*/true, &room);
        if (local_ok && atomic_resp) {
          // The original value lands in local memory in host order, as rxe.
          const uint64_t original = GetU64(f.data());
          std::memcpy(reinterpret_cast<void*>(w.read_sges[0].addr), &original, 8);
        } else if (local_ok && !(f.h.flags & kRemoteData)) {
          // (kRemoteData: the responder placed the data already.)
          ScatterAt(w.read_sges, f.h.addr, f.data(), f.h.length);
        }
      }
      if (!local_ok) {
        CompleteSendLocked(q, w, IBV_WC_LOC_PROT_ERR);
        MoveToErrorLocked(q);
        return;
      }
      CompleteSendLocked(q, w, IBV_WC_SUCCESS);
      break;
    }
    case FrameType::kNak: {
      CompleteFrontLocked(q, idx);
      if (f.h.syndrome == Syndrome::kRnr) {
        if (q->rnr_retry != 7 && q->rnr_count >= q->rnr_retry) {
          SendWqe w = PopSqFrontLocked(q);
          CompleteSendLocked(q, w, IBV_WC_RNR_RETRY_EXC_ERR);
          MoveToErrorLocked(q);
          return;
        }
        q->rnr_count++;
        Stat().rnr_retries++;
        q->rnr_wait = true;
        std::weak_ptr<SoftQp> weak = q->self;
        const uint32_t psn = f.h.psn;
        const int64_t delay_us =
            (f.h.read_len & 0x100u) ? RnrTimerMicros(static_cast<uint8_t>(f.h.read_len & 31))
                                    : kRnrDelayMicros;
        ProgressThread::Get().RunAfter(absl::Microseconds(delay_us), [weak, psn] {
          if (std::shared_ptr<SoftQp> qp = weak.lock()) RetransmitFrom(qp.get(), psn);
        });
        return;
      }
      ibv_wc_status status = IBV_WC_REM_OP_ERR;
      if (f.h.syndrome == Syndrome::kRemAccess) status = IBV_WC_REM_ACCESS_ERR;
      if (f.h.syndrome == Syndrome::kInvReq) status = IBV_WC_REM_INV_REQ_ERR;
      if (f.h.syndrome == Syndrome::kReqLocal) status = IBV_WC_LOC_PROT_ERR;
      SendWqe w = PopSqFrontLocked(q);
      CompleteSendLocked(q, w, status);
      MoveToErrorLocked(q);
      return;
    }
    default:
      break;
  }
  AdvanceSqLocked(q);  // a READ / atomic slot may have come free
}

// The next receive for an incoming message, from the QP's RQ or its SRQ.
bool HasRecvLocked(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->qp.srq == nullptr) return !q->rq.empty();
  SoftSrq* srq = ToSoft(q->qp.srq);
  internal::DomainLock l(&srq->mu);
  return !srq->rq.empty();
}

bool TakeRecvLocked(SoftQp* q, RecvWqe* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->qp.srq != nullptr) return SrqTake(q->qp.srq, out);
  if (q->rq.empty()) return false;
  *out = std::move(q->rq.front());
  q->rq.pop_front();
  return true;
}

void NakLocked(SoftQp* q, uint32_t psn, Syndrome s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  FlushHeldAckLocked(q);
  FrameHeader h;
  h.type = FrameType::kNak;
  h.psn = psn;
  h.syndrome = s;
  // An RNR NAK carries the responder's RNR timer (IBA 9.7.5.2.8).
  if (s == Syndrome::kRnr && q->min_rnr_timer_set) h.read_len = 0x100u | q->min_rnr_timer;
  LinkSendHeaderLocked(q, h);
}

void AckLocked(SoftQp* q, uint32_t psn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  uint32_t hold_us = 0;
  if (AckHoldEnabled(&hold_us)) {
    // RecvBeforeSend: coalesce; the newest PSN acknowledges all before it.
    q->ack_held = true;
    q->ack_held_psn = psn;
    if (!q->ack_hold_timer) {
      q->ack_hold_timer = true;
      std::weak_ptr<SoftQp> weak = q->self;
      ProgressThread::Get().RunAfter(absl::Microseconds(hold_us), [weak] {
        std::shared_ptr<SoftQp> qp = weak.lock();
        if (qp == nullptr) return;
        internal::DomainLock l(&qp->mu);
        qp->ack_hold_timer = false;
        FlushHeldAckLocked(qp.get());
      });
    }
    return;
  }
  FlushHeldAckLocked(q);
  FrameHeader h;
  if (q->ack_coalesce) {
    q->ack_pending = true;
    q->ack_pending_psn = psn;
    return;
  }
  h.type = FrameType::kAck;
  h.psn = psn;
  LinkSendHeaderLocked(q, h);
}

// Puts a receive taken for a request that then failed back at the front.
void UntakeRecvLocked(SoftQp* q, RecvWqe r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->qp.srq == nullptr) {
    q->rq.push_front(std::move(r));
    return;
  }
  SoftSrq* srq = ToSoft(q->qp.srq);
  internal::DomainLock l(&srq->mu);
  srq->rq.push_front(std::move(r));
}

// Local iovecs for the first `len` bytes of `sges` (zero-length SGEs skipped).
IovecList SgeIovecs(const SgeList& sges, size_t len) {
  IovecList out;
  for (const ibv_sge& s : sges) {
    if (len == 0) break;
    if (s.length == 0) continue;
    const size_t take = std::min<size_t>(len, s.length);
    out.push_back(iovec{reinterpret_cast<void*>(s.addr), take});
    len -= take;
  }
  return out;
}

// Copies a SEND / WRITE's data into local memory: from the frame, or on the
// same-host link from the requester's SGEs. False when the requester's memory
// could not be read (the caller NAKs kReqLocal).
bool CopyInLocked(SoftQp* q, const Frame& f, IovecList local)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (f.h.length == 0) return true;
  if (f.sgl == nullptr) {
    const uint8_t* data = f.data();
    for (const iovec& v : local) {
      std::memcpy(v.iov_base, data, v.iov_len);
      data += v.iov_len;
    }
    return true;
  }
  return q->shm != nullptr && q->shm->ReadFromPeer(local, DecodeSgl(f.sgl, f.sgl_bytes));
}

// A fatal responder error: NAK the request, then the responder QP goes to
// ERROR too (as rxe does). The error is reported by the receive's CQE.
void ResponderFailLocked(SoftQp* q, uint32_t psn, Syndrome s)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  NakLocked(q, psn, s);
  MoveToErrorLocked(q);
}

// The same for a request that consumed no receive (WRITE, READ, atomic), so no
// CQE at the responder says what happened: the IB spec's affiliated async
// error (11.6.3.1) tells it. A bad rkey / range / access is a "local access
// violation work queue error" (IBV_EVENT_QP_ACCESS_ERR); an invalid request
// (no responder resources, misaligned atomic) an "invalid request local work
// queue error" (IBV_EVENT_QP_REQ_ERR).
void ResponderFailNoCqeLocked(SoftQp* q, uint32_t psn, Syndrome s)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  NakLocked(q, psn, s);
  RaiseQpEventLocked(q, s == Syndrome::kRemAccess ? IBV_EVENT_QP_ACCESS_ERR
                                                  : IBV_EVENT_QP_REQ_ERR);
  MoveToErrorLocked(q);
}

void OnRequestLocked(SoftQp* q, Frame& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if ((q->state != IBV_QPS_RTR && q->state != IBV_QPS_RTS && q->state != IBV_QPS_SQD) ||
      q->conn == nullptr) {
    return;
  }
  // After an RNR NAK every later request is dropped until the NAKed PSN is
  // retransmitted; TCP never loses or reorders, so nothing else differs.
  if (f.h.psn != q->epsn) return;
  if (q->awaiting_first_request) {
    q->awaiting_first_request = false;
    RaiseQpEventLocked(q, IBV_EVENT_COMM_EST);
  }
  const bool has_imm = f.h.flags & kHasImm;
  switch (f.h.type) {
    case FrameType::kSend: {
      RecvWqe r;
      if (!TakeRecvLocked(q, &r)) return NakLocked(q, f.h.psn, Syndrome::kRnr);
      uint64_t room = 0;
      bool local_ok;
      bool copied = true;
      {
        ScopedMrAccess access;  // the receive buffer stays registered while we copy
        local_ok = CheckLocal(q->qp.pd, r.sges.data(), r.sges.size(), /*write=*/true, &room);
        if (local_ok && room >= f.h.length) {
          copied = CopyInLocked(q, f, SgeIovecs(r.sges, f.h.length));
        }
      }
      if (!copied) {
        UntakeRecvLocked(q, std::move(r));
        return NakLocked(q, f.h.psn, Syndrome::kReqLocal);
      }
      if (!local_ok) {
        CompleteRecvLocked(q, r, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, false, 0);
        return ResponderFailLocked(q, f.h.psn, Syndrome::kRemOp);
      }
      if (room < f.h.length) {
        CompleteRecvLocked(q, r, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, false, 0);
        return ResponderFailLocked(q, f.h.psn, Syndrome::kInvReq);
      }
      uint32_t invalidated = 0;
      if (f.h.flags & kHasInv) {
        // SEND_WITH_INV: the named type-2 window, bound to this QP, is freed.
        // Anything else is an invalid request; the receive completes with
        // IBV_WC_REM_INV_REQ_ERR, as rxe's responder reports it.
        if (!MwInvalidate(f.h.rkey, &q->qp, /*require_qp=*/true)) {
          CompleteRecvLocked(q, r, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0, false, 0);
          return ResponderFailLocked(q, f.h.psn, Syndrome::kInvReq);
        }
        invalidated = f.h.rkey;
      }
      CompleteRecvLocked(q, r, IBV_WC_SUCCESS, IBV_WC_RECV, f.h.length, has_imm, f.h.imm,
                         (f.h.flags & kSolicited) != 0, invalidated);
      q->epsn++;
      return AckLocked(q, f.h.psn);
    }
    case FrameType::kWrite: {
      bool remote_ok;
      bool copied = true;
      {
        ScopedMrAccess access;
        remote_ok = CheckRemote(q, f.h.rkey, f.h.addr, f.h.length,
                                IBV_ACCESS_REMOTE_WRITE);
      }
      if (!remote_ok) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kRemAccess);
      // Check for a receive before writing, so the retransmit after RNR
      // finds memory unchanged (not that rewriting would differ).
      if (has_imm && !HasRecvLocked(q)) return NakLocked(q, f.h.psn, Syndrome::kRnr);
      {
        // Checked again with the copy, under one hold of the key table: the MR
        // may have been deregistered since (HasRecvLocked takes the SRQ lock,
        // which may not nest inside the key table's).
        ScopedMrAccess access;
        remote_ok = CheckRemote(q, f.h.rkey, f.h.addr, f.h.length,
                                IBV_ACCESS_REMOTE_WRITE);
        if (remote_ok && f.h.length > 0) {
          copied = CopyInLocked(q, f, {iovec{reinterpret_cast<void*>(f.h.addr), f.h.length}});
        }
      }
      if (!remote_ok) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kRemAccess);
      if (!copied) return NakLocked(q, f.h.psn, Syndrome::kReqLocal);
      if (has_imm) {
        RecvWqe r;
        TakeRecvLocked(q, &r);  // cannot fail: checked above, and only we take
        // The receive's SGEs are not touched by WRITE_WITH_IMM.
        CompleteRecvLocked(q, r, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, f.h.length,
                           true, f.h.imm, (f.h.flags & kSolicited) != 0);
      }
      q->epsn++;
      return AckLocked(q, f.h.psn);
    }
    case FrameType::kReadReq: {
      if (q->max_dest_rd_atomic == 0) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kInvReq);
      FrameHeader h;
      h.type = FrameType::kReadResp;
      h.psn = f.h.psn;
      if (f.sgl != nullptr && q->shm != nullptr) {
        // Same-host link: write straight into the requester's SGEs.
        bool remote_ok;
        bool copied = true;
        {
          ScopedMrAccess access;  // the source stays registered while we copy
          remote_ok =
              CheckRemote(q, f.h.rkey, f.h.addr, f.h.read_len, IBV_ACCESS_REMOTE_READ);
          if (remote_ok && f.h.read_len > 0) {
            copied = q->shm->WriteToPeer({iovec{reinterpret_cast<void*>(f.h.addr), f.h.read_len}},
                                         DecodeSgl(f.sgl, f.sgl_bytes));
          }
        }
        if (!remote_ok) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kRemAccess);
        if (!copied) return NakLocked(q, f.h.psn, Syndrome::kReqLocal);
        h.flags = kRemoteData;
        h.read_len = f.h.read_len;
        q->epsn++;
        return LinkSendHeaderLocked(q, h);
      }
      // TCP: the data goes in pieces of kReadRespPiece, each copied under its
      // own check of the rkey (the source stays registered while we copy it;
      // an MR deregistered midway fails the rest with REM_ACCESS_ERR).
      uint32_t off = 0;
      do {
        const uint32_t n = std::min(kReadRespPiece, f.h.read_len - off);
        FrameHeader ph = h;
        ph.addr = off;
        if (off + n < f.h.read_len) ph.flags |= kMore;
        auto buf = NewFrame(ph, n);
        {
          ScopedMrAccess access;
          if (!CheckRemote(q, f.h.rkey, f.h.addr + off, n, IBV_ACCESS_REMOTE_READ) ||
              (off == 0 &&
               !CheckRemote(q, f.h.rkey, f.h.addr, f.h.read_len, IBV_ACCESS_REMOTE_READ))) {
            buf.reset();
          } else if (n > 0) {
            std::memcpy(buf->data() + kHeaderSize, reinterpret_cast<const void*>(f.h.addr + off),
                        n);
          }
        }
        if (buf == nullptr) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kRemAccess);
        if (!(ph.flags & kMore)) q->epsn++;
        LinkSendLocked(q, std::move(buf));
        off += n;
      } while (off < f.h.read_len);
      return;
    }
    case FrameType::kAtomic: {
      if (q->max_dest_rd_atomic == 0) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kInvReq);
      if (f.h.length != 16) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kInvReq);
      if (f.h.addr % 8 != 0) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kInvReq);
      const uint64_t compare_add = GetU64(f.data());
      const uint64_t swap = GetU64(f.data() + 8);
      auto* target = reinterpret_cast<uint64_t*>(f.h.addr);
      uint64_t original = 0;
      bool remote_ok;
      {
        ScopedMrAccess access;  // the target stays registered while we update it
        remote_ok = CheckRemote(q, f.h.rkey, f.h.addr, 8, IBV_ACCESS_REMOTE_ATOMIC);
        if (remote_ok && (f.h.flags & kFetchAdd)) {
          original = __atomic_fetch_add(target, compare_add, __ATOMIC_SEQ_CST);
        } else if (remote_ok) {
          original = compare_add;
          __atomic_compare_exchange_n(target, &original, swap, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST);  // `original` gets the old value
        }
      }
      if (!remote_ok) return ResponderFailNoCqeLocked(q, f.h.psn, Syndrome::kRemAccess);
      FrameHeader h;
      h.type = FrameType::kAtomicResp;
      h.psn = f.h.psn;
      auto buf = FramePool::Take(h, 8);
      PutU64(buf->data() + kHeaderSize, original);
      q->epsn++;
      LinkSendLocked(q, std::move(buf));
      return;
    }
    default:
      return;
  }
}

// One ibv_post_send's WR list is one doorbell batch on the same-host link
// (ShmLink::BeginBatch): the records its WRs push, and an ACK riding behind
// them, cost one fence and at most one doorbell. Made and destroyed under
// the QP's mutex.
class ShmPostBatch {
 public:
  explicit ShmPostBatch(SoftQp* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu)
      : q_(q), link_(q->shm.get()) {
    if (link_ != nullptr) link_->BeginBatch();
  }
  // Runs before the caller's MutexLock on q->mu is released (declared
  // after it), which the analysis cannot see.
  ~ShmPostBatch() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // A QP that left its link meanwhile (MoveToErrorLocked, which ended the
    // batch) no longer produces into it, and may have dropped the last
    // reference.
    if (link_ != nullptr && q_->shm.get() == link_ && link_->EndBatch()) {
      RingDoorbellLocked(q_);
    }
  }
  ShmPostBatch(const ShmPostBatch&) = delete;
  ShmPostBatch& operator=(const ShmPostBatch&) = delete;

 private:
  SoftQp* const q_;
  ShmLink* const link_;
};

}  // namespace

FramePool* FramePool::ForThisThread() {
  if (t_frame_pool == nullptr && !t_frame_pool_gone) {
    t_frame_pool = new FramePool;
    t_frame_pool_reaper.armed = true;  // constructed now: frees the pool at thread exit
  }
  return t_frame_pool;
}

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  SoftQp* q = ToSoft(qp);
  Stat().post_send_calls++;
  internal::OwnerScope owner(q->mu.domain());  // the user's data-path verb
  internal::DomainLock l(&q->mu);
  ShmPostBatch batch(q);
  for (; wr != nullptr; wr = wr->next) {
    int err = PostOneSendLocked(q, wr);
    if (err != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return err;
    }
  }
  return 0;
}

int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  SoftQp* q = ToSoft(qp);
  Stat().post_recv_calls++;
  internal::OwnerScope owner(q->mu.domain());  // the user's data-path verb
  internal::DomainLock l(&q->mu);
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    if (q->state == IBV_QPS_RESET || q->qp.srq != nullptr) {  // SRQ QPs take no receives
      err = EINVAL;
    } else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > q->cap.max_recv_sge) {
      err = EINVAL;
    } else if (q->rq.size() + q->rq_unpolled.load() >= q->cap.max_recv_wr) {
      // Includes received messages whose CQE is not polled yet, as on a NIC.
      err = ENOMEM;
    }
    if (err != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return err;
    }
    RecvWqe r;
    r.wr_id = wr->wr_id;
    r.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    Stat().recv++;
    if (q->state == IBV_QPS_ERR) {
      CompleteRecvLocked(q, r, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, false, 0);
    } else {
      q->rq.push_back(std::move(r));
    }
  }
  return 0;
}

namespace {

void DispatchLocked(SoftQp* q, Frame& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu);

// Consumes the incoming ring of `link`. Frames are handled exactly as those
// from the socket (DispatchLocked); only how they arrived differs.
void DrainShmLocked(SoftQp* q, ShmLink* link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
  if (q->shm.get() != link || LinkSilencedLocked(q)) {
    // The QP left the link (error, reset, destroy), or the link is silenced
    // (VanishPeer, DropConnection): discard what is left.
    link->Drain([](Frame&) {});
    return;
  }
  std::shared_ptr<ShmLink> hold = q->shm;  // a frame may end the QP's use of it
  FlushBacklogNow(q);
  q->ack_coalesce = true;
  q->ack_pending = false;
  link->Drain([q, link](Frame& f) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (q->shm.get() != link) return;
    link->NoteWork(1);
    DispatchLocked(q, f);
  });
  if (link->TakeOwedDoorbell() && q->shm.get() == link) RingDoorbellLocked(q);
  q->ack_coalesce = false;
  if (q->ack_pending) {
    q->ack_pending = false;
    AckLocked(q, q->ack_pending_psn);
  }
}

// Registers the QP with its CQs' pollers. Without the QP's mutex. A QP
// whose send and receive CQs are one gets a slot in that CQ's table, which
// its peer is asked to mark (shm_hint.h); with two CQs both poll its ring.
void RegisterWithCqs(SoftQp* q, const std::shared_ptr<ShmLink>& link) {
  const bool one_cq = q->qp.recv_cq == q->qp.send_cq;
  HintOffer offer;
  const bool offered = CqAddShmQp(q->qp.send_cq, q, link, one_cq && ShmHintsEnabled(), &offer);
  if (!one_cq) CqAddShmQp(q->qp.recv_cq, q, link, false, nullptr);
  link->MarkAttached();
  if (offered) {
    internal::DomainLock l(&q->mu);
    if (q->shm == link && link->OfferHint(offer)) RingDoorbellLocked(q);
  }
}

}  // namespace

bool QpAttach(SoftQp* q, std::shared_ptr<Conn> conn, std::shared_ptr<ShmLink> shm, bool hold,
              uint32_t dest_qpn, uint8_t rnr_retry, uint8_t responder_resources,
              uint8_t initiator_depth, uint8_t retry_cnt, bool passive) {
  {
    internal::DomainLock l(&q->mu);
    if (q->state == IBV_QPS_ERR) return false;
    q->awaiting_first_request = passive;
    q->max_dest_rd_atomic = std::min<uint8_t>(responder_resources, kMaxRdAtom);
    q->max_rd_atomic = std::min<uint8_t>(initiator_depth, kMaxRdAtom);
    q->conn = std::move(conn);
    q->shm = shm;
    q->link_hold = hold;
    q->dest_qpn = dest_qpn;
    q->rnr_retry = rnr_retry > 7 ? 7 : rnr_retry;
    q->retry_cnt = retry_cnt > 7 ? 7 : retry_cnt;
    q->state = IBV_QPS_RTS;
    q->qp.state = IBV_QPS_RTS;
  }
  if (shm != nullptr && !hold) RegisterWithCqs(q, shm);
  if (!hold) (shm != nullptr ? Stat().qps_on_shm : Stat().qps_on_tcp)++;
  return true;
}

bool QpBindLink(SoftQp* q, std::shared_ptr<Conn> conn, std::shared_ptr<ShmLink> shm, bool hold,
                bool passive) {
  {
    internal::DomainLock l(&q->mu);
    if (q->state == IBV_QPS_ERR || q->conn != nullptr) return false;
    q->awaiting_first_request = passive;
    q->conn = std::move(conn);
    q->shm = shm;
    q->link_hold = hold;
  }
  if (shm != nullptr && !hold) RegisterWithCqs(q, shm);
  if (!hold) {
    (shm != nullptr ? Stat().qps_on_shm : Stat().qps_on_tcp)++;
    internal::DomainLock l(&q->mu);
    AdvanceSqLocked(q);  // what was posted before the link (local operations)
  }
  return true;
}

void RunDeferredTimers(SoftTd* td) {
  RunTimersOf(td->deferred.get(), Stat().owner_timers);
}

std::shared_ptr<SoftQp> FindQp(uint32_t qp_num) {
  QpRegistry& r = Registry();
  absl::MutexLock l(&r.mu);
  auto it = r.qps.find(qp_num);
  return it == r.qps.end() ? nullptr : it->second;
}

void QpSetLink(SoftQp* q, std::shared_ptr<ShmLink> shm) {
  {
    internal::DomainLock l(&q->mu);
    if (!q->link_hold) return;
    q->link_hold = false;
    if (shm == nullptr && q->shm != nullptr) {
      // Fell back to TCP: frames built for the ring are rebuilt.
      for (SendWqe& w : q->sq) {
        if (w.frame != nullptr) w.frame = ToTcpFrame(w.frame);
      }
    }
    q->shm = shm;
    // Everything posted while held goes out now, in order.
    AdvanceSqLocked(q);
  }
  if (shm != nullptr) RegisterWithCqs(q, shm);
  (shm != nullptr ? Stat().qps_on_shm : Stat().qps_on_tcp)++;
}

void QpDrainShm(SoftQp* q, ShmLink* link) {
  internal::DomainLock l(&q->mu);
  DrainShmLocked(q, link);
}

void QpSendOwedAck(SoftQp* q) {
  internal::DomainLock l(&q->mu);
  FlushHeldAckLocked(q);
}

void QpFlushToError(SoftQp* q) {
  internal::DomainLock l(&q->mu);
  // What the peer put in the ring before it disconnected or died arrived
  // before the news of it, as on a wire.
  if (q->shm != nullptr) DrainShmLocked(q, q->shm.get());
  MoveToErrorLocked(q);
}

void QpTransportFailed(SoftQp* q) {
  internal::DomainLock l(&q->mu);
  if (q->state == IBV_QPS_ERR || q->state == IBV_QPS_RESET) return;
  RaiseQpEventLocked(q, IBV_EVENT_QP_FATAL);
  MoveToErrorLocked(q);
}

int BindMwVerb(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  if (qp == nullptr || mw == nullptr || mw_bind == nullptr) return EINVAL;
  // As mlx5 and rxe do: the verb posts a BIND_MW WR whose new rkey is the
  // current one with its low byte incremented (ibv_inc_rkey).
  ibv_send_wr wr{};
  wr.wr_id = mw_bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = mw_bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = mw_bind->bind_info;
  SoftQp* q = ToSoft(qp);
  Stat().post_send_calls++;
  internal::OwnerScope owner(q->mu.domain());  // the user's data-path verb
  internal::DomainLock l(&q->mu);
  const int err = PostOneSendLocked(q, &wr, /*bind_verb=*/true);
  // The handle shows the new rkey once the bind is posted (mlx5, rxe); the
  // window answers to it once the bind's turn in the SQ came.
  if (err == 0) MwSetHandleRkey(ToSoft(mw), wr.bind_mw.rkey);
  return err;
}

void QpOnFrame(SoftQp* q, Frame& f) {
  internal::DomainLock l(&q->mu);
  if (f.h.type == FrameType::kDoorbell) {
    if (q->shm != nullptr) DrainShmLocked(q, q->shm.get());
    return;
  }
  DispatchLocked(q, f);
}

namespace {

void DispatchLocked(SoftQp* q, Frame& f) {
  switch (f.h.type) {
    case FrameType::kSend:
    case FrameType::kWrite:
    case FrameType::kReadReq:
    case FrameType::kAtomic:
      OnRequestLocked(q, f);
      break;
    case FrameType::kAck:
    case FrameType::kNak:
    case FrameType::kReadResp:
    case FrameType::kAtomicResp:
      OnResponseLocked(q, f);
      break;
    default:
      break;
  }
}

}  // namespace

}  // namespace internal

using internal::SoftQp;

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->qp_type != IBV_QPT_RC) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (int err = 0; internal::TakeInjectedFailure(FaultOp::kCreateQp, &err)) {
    errno = err;
    return nullptr;
  }
  ibv_qp_cap& cap = attr->cap;
  if (attr->send_cq == nullptr || attr->recv_cq == nullptr ||
      cap.max_send_wr > internal::kMaxQpWr || cap.max_recv_wr > internal::kMaxQpWr ||
      cap.max_send_sge > internal::kMaxSge || cap.max_recv_sge > internal::kMaxSge ||
      cap.max_inline_data > internal::kMaxInlineData) {
    errno = EINVAL;
    return nullptr;
  }
  // A send WQE with room for max_send_sge SGEs has as much room for inline
  // data, which rxe grants as max_inline_data (rxe_qp.c; mlx5 likewise rounds
  // it up to its WQE size): a QP may get more than it asked for
  // (ibv_create_qp(3)), and the caps reported back are what is enforced.
  cap.max_inline_data = std::max<uint32_t>(
      cap.max_inline_data,
      std::min<uint32_t>(internal::kMaxInlineData,
                         cap.max_send_sge * static_cast<uint32_t>(sizeof(ibv_sge))));
  auto q = std::make_shared<SoftQp>();
  q->self = q;
  // The thread domain of its parent domain, if its CQs and SRQ are in that
  // one or in none: locks of two domains then never nest in both orders
  // (internal.h's order has SoftQp::mu before the others). A QP whose CQ is
  // in another domain keeps a mutex of its own, as if made without one.
  internal::SoftTd* td = internal::ThreadDomainOf(pd);
  auto same_or_none = [td](internal::SoftTd* other) { return other == nullptr || other == td; };
  if (td != nullptr && same_or_none(internal::ToSoft(attr->send_cq)->mu.domain()) &&
      same_or_none(internal::ToSoft(attr->recv_cq)->mu.domain()) &&
      (attr->srq == nullptr || same_or_none(internal::ToSoft(attr->srq)->mu.domain()))) {
    q->mu.set_domain(td);
    // Its transport timers wait for the owner only if the owner polls one
    // of its CQs; otherwise the progress thread runs them at once.
    q->owner_runs_timers = internal::ToSoft(attr->send_cq)->mu.domain() == td ||
                           internal::ToSoft(attr->recv_cq)->mu.domain() == td;
  }
  q->qp.context = pd->context;
  q->qp.qp_context = attr->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = attr->send_cq;
  q->qp.recv_cq = attr->recv_cq;
  q->qp.srq = attr->srq;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&q->qp.mutex, nullptr);
  pthread_cond_init(&q->qp.cond, nullptr);
  {
    internal::DomainLock l(&q->mu);
    q->cap = cap;  // reported back: exactly what is enforced
    q->sq_sig_all = attr->sq_sig_all != 0;
  }
  internal::QpRegistry& r = internal::Registry();
  {
    absl::MutexLock l(&r.mu);
    do {
      q->qp.qp_num = r.next_qpn;
      r.next_qpn = (r.next_qpn + 1) & 0xffffff;
      if (r.next_qpn < 0x11) r.next_qpn = 0x11;
    } while (r.qps.contains(q->qp.qp_num));
    q->qp.handle = q->qp.qp_num;
    r.qps[q->qp.qp_num] = q;
  }
  internal::ToSoft(pd)->refs++;
  internal::ToSoft(attr->send_cq)->qp_refs++;
  internal::ToSoft(attr->recv_cq)->qp_refs++;
  if (attr->srq != nullptr) internal::ToSoft(attr->srq)->qp_refs++;
  internal::Stat().live_qps++;
  return &q->qp;
}

int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  SoftQp* q = internal::ToSoft(qp);
  internal::DomainLock l(&q->mu);
  if ((attr_mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7) return EINVAL;
  if ((attr_mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7) return EINVAL;
  if ((attr_mask & IBV_QP_TIMEOUT) && attr->timeout > 31) return EINVAL;  // 5 bits
  ibv_qp_state next = q->state;
  if (attr_mask & IBV_QP_STATE) {
    next = attr->qp_state;
    const ibv_qp_state cur = q->state;
    bool ok = false;
    switch (next) {
      case IBV_QPS_RESET:
      case IBV_QPS_ERR:
        ok = true;
        break;
      case IBV_QPS_INIT:
        ok = cur == IBV_QPS_RESET || cur == IBV_QPS_INIT;
        break;
      case IBV_QPS_RTR:
        ok = cur == IBV_QPS_INIT || cur == IBV_QPS_RTR;
        break;
      case IBV_QPS_RTS:
        ok = cur == IBV_QPS_RTR || cur == IBV_QPS_RTS || cur == IBV_QPS_SQD;
        break;
      case IBV_QPS_SQD:
        ok = cur == IBV_QPS_RTS || cur == IBV_QPS_SQD;
        break;
      default:
        ok = false;
    }
    if (!ok) return EINVAL;
  }
  if (attr_mask & IBV_QP_STATE) {
    // The attributes each RC transition requires and allows (IBA vol. 1
    // table 91; the kernel's ib_modify_qp_is_ok): a missing required one, or
    // one the transition does not take, is EINVAL, as on any rdma-core device.
    int required = 0;
    int optional = 0;
    bool checked = true;
    const ibv_qp_state cur = q->state;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
      required = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    } else if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) {
      optional = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    } else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
      required = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
    } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
      required = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                 IBV_QP_MAX_QP_RD_ATOMIC;
      optional = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                 IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
    } else {
      checked = false;  // RESET / ERR from anywhere, RTS <-> SQD, X -> X
    }
    if (checked && ((attr_mask & required) != required ||
                    (attr_mask & ~(required | optional | IBV_QP_STATE)) != 0)) {
      return EINVAL;
    }
  }
  if ((attr_mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  if ((attr_mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;  // one P_Key
  if ((attr_mask & IBV_QP_PATH_MTU) &&
      (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096)) {
    return EINVAL;
  }
  if ((attr_mask & IBV_QP_AV) &&
      ((attr->ah_attr.port_num != 0 && attr->ah_attr.port_num != 1) ||
       (attr->ah_attr.is_global && attr->ah_attr.grh.sgid_index != 0))) {
    return EINVAL;  // one port, one GID
  }
  if ((attr_mask & IBV_QP_ACCESS_FLAGS) &&
      (attr->qp_access_flags & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)) != 0) {
    return EINVAL;
  }
  if ((attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > internal::kMaxRdAtom) {
    return EINVAL;
  }
  if ((attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > internal::kMaxRdAtom) {
    return EINVAL;
  }
  if (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) q->max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) q->max_rd_atomic = attr->max_rd_atomic;
  if (attr_mask & IBV_QP_ACCESS_FLAGS) q->qp_access_flags = attr->qp_access_flags;
  if (attr_mask & IBV_QP_RNR_RETRY) q->rnr_retry = attr->rnr_retry;
  if (attr_mask & IBV_QP_RETRY_CNT) q->retry_cnt = attr->retry_cnt;
  if (attr_mask & IBV_QP_TIMEOUT) q->timeout = attr->timeout;
  if (attr_mask & IBV_QP_MIN_RNR_TIMER) {
    q->min_rnr_timer = attr->min_rnr_timer & 31;
    q->min_rnr_timer_set = true;
  }
  if (attr_mask & IBV_QP_DEST_QPN) q->dest_qpn = attr->dest_qp_num;
  if (attr_mask & IBV_QP_SQ_PSN) q->next_psn = attr->sq_psn;
  if (attr_mask & IBV_QP_RQ_PSN) q->epsn = attr->rq_psn;
  if (attr_mask & IBV_QP_STATE) {
    if (next == IBV_QPS_ERR) {
      internal::MoveToErrorLocked(q);
    } else if (next == IBV_QPS_RESET) {
      // RESET discards the queues without completions.
      internal::ClearSqLocked(q);
      q->rq.clear();
      q->rnr_wait = false;
      q->sq_blocked = false;
      q->conn.reset();
      internal::LeaveShmLinkLocked(q);
      q->link_hold = false;
      q->unattached_wait_ns = 0;
      q->unsignaled_done = 0;
      q->slot_generation++;  // unpolled CQEs of before free nothing now
      q->sq_unpolled = 0;
      q->rq_unpolled = 0;
      q->state = IBV_QPS_RESET;
    } else {
      q->state = next;
      // Back in RTS (from SQD): what waited in the SQ moves on.
      if (next == IBV_QPS_RTS) internal::AdvanceSqLocked(q);
    }
    qp->state = q->state;
  }
  return 0;
}

int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int /*attr_mask*/, ibv_qp_init_attr* init_attr) {
  if (qp == nullptr || attr == nullptr || init_attr == nullptr) return EINVAL;
  SoftQp* q = internal::ToSoft(qp);
  internal::DomainLock l(&q->mu);
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = q->state;
  attr->cur_qp_state = q->state;
  attr->path_mtu = IBV_MTU_4096;
  attr->qp_access_flags = q->qp_access_flags;
  attr->cap = q->cap;
  attr->dest_qp_num = q->dest_qpn;
  attr->sq_psn = q->next_psn;
  attr->rq_psn = q->epsn;
  attr->rnr_retry = q->rnr_retry;
  attr->min_rnr_timer = q->min_rnr_timer;
  attr->max_rd_atomic = q->max_rd_atomic;
  attr->max_dest_rd_atomic = q->max_dest_rd_atomic;
  attr->port_num = 1;
  attr->timeout = q->timeout;
  attr->retry_cnt = q->retry_cnt;
  std::memset(init_attr, 0, sizeof(*init_attr));
  init_attr->qp_context = qp->qp_context;
  init_attr->send_cq = qp->send_cq;
  init_attr->recv_cq = qp->recv_cq;
  init_attr->cap = q->cap;
  init_attr->srq = qp->srq;
  init_attr->qp_type = IBV_QPT_RC;
  init_attr->sq_sig_all = q->sq_sig_all ? 1 : 0;
  return 0;
}

bool QpUsesShm(ibv_qp* qp) {
  if (qp == nullptr) return false;
  SoftQp* q = internal::ToSoft(qp);
  internal::DomainLock l(&q->mu);
  return q->shm != nullptr && !q->link_hold;
}

int destroy_qp(ibv_qp* qp) {
  if (qp == nullptr) return EINVAL;
  SoftQp* q = internal::ToSoft(qp);
  // Detach from rdma_cm and the connection; the peer is told (DISCONNECT).
  internal::CmOnQpDestroyed(q);
  {
    // Like hardware, destroying a QP discards its WRs without completions:
    // a CQ shared with other QPs must not receive CQEs naming freed wr_ids.
    internal::DomainLock l(&q->mu);
    internal::ClearSqLocked(q);
    q->rq.clear();
    q->state = IBV_QPS_ERR;
    q->conn.reset();
    internal::LeaveShmLinkLocked(q);
  }
  internal::CqRemoveShmQp(qp->send_cq, q);
  if (qp->recv_cq != qp->send_cq) internal::CqRemoveShmQp(qp->recv_cq, q);
  // Nothing raises events for it now; wait until the user acked those it got.
  internal::DrainAsyncEvents(qp);
  internal::ToSoft(qp->pd)->refs--;
  internal::ToSoft(qp->send_cq)->qp_refs--;
  internal::ToSoft(qp->recv_cq)->qp_refs--;
  if (qp->srq != nullptr) internal::ToSoft(qp->srq)->qp_refs--;
  std::shared_ptr<SoftQp> drop;
  {
    internal::QpRegistry& r = internal::Registry();
    absl::MutexLock l(&r.mu);
    auto it = r.qps.find(qp->qp_num);
    if (it != r.qps.end()) {
      drop = std::move(it->second);
      r.qps.erase(it);
    }
  }
  internal::Stat().live_qps--;
  return 0;  // `drop` frees the QP unless a timer still holds it
}

}  // namespace softrdma
