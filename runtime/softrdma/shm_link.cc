// shm_link.cc: shared-memory rings and process_vm copies (see shm_link.h).
#include "softrdma/shm_link.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <random>

#include "glog/logging.h"
#include "softrdma/faults_internal.h"
#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

namespace {

// -1: not decided yet (read SOFTRDMA_SHM on first use).
std::atomic<int> g_shm_enabled{-1};

// The cookie a peer reads with process_vm_readv to prove it may access us.
volatile uint64_t g_probe_cookie = 0;


size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

}  // namespace

bool ShmEnabled() {
  if (LinkFaultsArmed()) return false;  // those knobs act on TCP frames
  int v = g_shm_enabled.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("SOFTRDMA_SHM");
    v = (e != nullptr && std::strcmp(e, "0") == 0) ? 0 : 1;
    int expected = -1;
    g_shm_enabled.compare_exchange_strong(expected, v);
    v = g_shm_enabled.load();
  }
  return v == 1;
}

const HostIdentity& LocalIdentity() {
  static const HostIdentity* id = [] {
    auto* h = new HostIdentity();
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, h->boot_id);
    struct stat st {};
    if (::stat("/proc/self/ns/net", &st) == 0) {
      h->netns_ino = st.st_ino;
      h->netns_dev = st.st_dev;
    }
    std::random_device rd;
    g_probe_cookie = (uint64_t{rd()} << 32) ^ rd() ^ 0x5eed5eed5eed5eedull;
    h->probe_addr = reinterpret_cast<uintptr_t>(&g_probe_cookie);
    h->probe_value = g_probe_cookie;
    return h;
  }();
  // getpid() changes in a forked child; the rest stays true.
  const_cast<HostIdentity*>(id)->pid = static_cast<uint32_t>(::getpid());
  return *id;
}

void FillHello(const std::string& segment, ShmHello* out) {
  const HostIdentity& me = LocalIdentity();
  *out = ShmHello();
  out->present = true;
  std::memcpy(out->boot_id, me.boot_id.data(), std::min<size_t>(36, me.boot_id.size()));
  out->netns_ino = me.netns_ino;
  out->netns_dev = me.netns_dev;
  out->pid = me.pid;
  out->probe_addr = me.probe_addr;
  out->probe_value = me.probe_value;
  out->name_len = static_cast<uint8_t>(std::min<size_t>(segment.size(), sizeof(out->name)));
  std::memcpy(out->name, segment.data(), out->name_len);
}

bool SameHost(const ShmHello& peer) {
  const HostIdentity& me = LocalIdentity();
  return peer.present && me.boot_id.size() == 36 &&
         std::memcmp(peer.boot_id, me.boot_id.data(), 36) == 0 && me.netns_ino != 0 &&
         peer.netns_ino == me.netns_ino && peer.netns_dev == me.netns_dev;
}

namespace {
std::atomic<int> g_probe_skip{0};
std::atomic<int> g_probe_fail{0};

bool ProbeFailsForTesting() {
  if (g_probe_fail.load() == 0) return false;
  int skip = g_probe_skip.load();
  while (skip > 0) {
    if (g_probe_skip.compare_exchange_weak(skip, skip - 1)) return false;
  }
  int fail = g_probe_fail.load();
  while (fail > 0) {
    if (g_probe_fail.compare_exchange_weak(fail, fail - 1)) return true;
  }
  return false;
}
}  // namespace

void FailShmProbesForTesting(int skip, int fail) {
  g_probe_skip.store(skip);
  g_probe_fail.store(fail);
}

bool ProbePeer(const ShmHello& peer) {
  if (ProbeFailsForTesting()) {
    LOG(WARNING) << "softrdma: same-host probe of pid " << peer.pid
                 << " failed on purpose (FailShmProbesForTesting); using TCP";
    return false;
  }
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(peer.probe_addr), sizeof(got)};
  ssize_t n = ::process_vm_readv(static_cast<pid_t>(peer.pid), &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(sizeof(got)) && got == peer.probe_value) return true;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    if (n < 0) {
      PLOG(WARNING) << "softrdma: process_vm_readv of same-host peer pid " << peer.pid
                    << " failed; using TCP for such connections";
    } else {
      LOG(WARNING) << "softrdma: same-host peer pid " << peer.pid
                   << " is not the process that offered shared memory (another pid "
                      "namespace?); using TCP";
    }
  }
  return false;
}

IovecList DecodeSgl(const uint8_t* p, size_t bytes) {
  IovecList out;
  out.reserve(bytes / kSglEntryBytes);
  for (size_t off = 0; off + kSglEntryBytes <= bytes; off += kSglEntryBytes) {
    uint32_t len;
    std::memcpy(&len, p + off + 8, 4);
    out.push_back(iovec{reinterpret_cast<void*>(GetU64(p + off)), le32toh(len)});
  }
  return out;
}

// ---- segment ----------------------------------------------------------------

std::shared_ptr<ShmLink> ShmLink::Create() {
  static std::atomic<uint64_t> serial{0};
  std::random_device rd;
  const std::string name = "/softrdma-" + std::to_string(::getpid()) + "-" +
                           std::to_string(serial.fetch_add(1)) + "-" + std::to_string(rd());
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  void* base = MAP_FAILED;
  if (fd >= 0) {
    if (::ftruncate(fd, kSegmentBytes) == 0) {
      base = ::mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    ::close(fd);
  }
  if (base == MAP_FAILED) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      PLOG(WARNING) << "softrdma: cannot create shared memory " << name
                    << "; same-host connections use TCP";
    }
    if (fd >= 0) ::shm_unlink(name.c_str());
    return nullptr;
  }
  // A fresh segment reads as zeros: tail = head = 0. Consumers start asleep.
  auto link = std::shared_ptr<ShmLink>(new ShmLink(name, base, /*active=*/true));
  for (int i = 0; i < 2; ++i) {
    RingCtl* c = new (link->ctl(i)) RingCtl;
    c->tail.store(0);
    c->head.store(0);
    c->need_doorbell.store(1);
    c->work.store(0);
    c->attached.store(0);
  }
  return link;
}

std::shared_ptr<ShmLink> ShmLink::Open(const std::string& name, pid_t peer_pid) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  void* base = MAP_FAILED;
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == kSegmentBytes) {
      base = ::mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    ::close(fd);
  }
  if (base == MAP_FAILED) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      PLOG(WARNING) << "softrdma: cannot map the peer's shared memory " << name
                    << "; using TCP";
    }
    return nullptr;
  }
  auto link = std::shared_ptr<ShmLink>(new ShmLink(name, base, /*active=*/false));
  link->peer_pid_ = peer_pid;
  link->Unlink();  // both ends have it mapped now (the creator keeps it until here)
  return link;
}

ShmLink::ShmLink(std::string name, void* base, bool active)
    : name_(std::move(name)), base_(base), out_(active ? 0 : 1), in_(active ? 1 : 0) {}

ShmLink::~ShmLink() {
  Unlink();
  ::munmap(base_, kSegmentBytes);
}

void ShmLink::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());  // ENOENT once the other side unlinked: fine
}

ShmLink::RingCtl* ShmLink::ctl(int i) const {
  return reinterpret_cast<RingCtl*>(static_cast<uint8_t*>(base_) + i * kRingStride);
}
uint8_t* ShmLink::data(int i) const {
  return static_cast<uint8_t*>(base_) + i * kRingStride + sizeof(RingCtl);
}

// ---- producer -------------------------------------------------------------------

bool ShmLink::TryPush(const uint8_t* bytes, size_t n, bool* doorbell, uint32_t kind) {
  RingCtl* c = ctl(out_);
  uint8_t* d = data(out_);
  const size_t rec = Align8(kRecHeader + n);
  CHECK_LE(rec, kRingBytes / 2) << "softrdma: shm record too large";
  const uint64_t tail = c->tail.load(std::memory_order_relaxed);
  size_t pos = tail % kRingBytes;
  size_t pad = pos + rec > kRingBytes ? kRingBytes - pos : 0;
  if (pad == 0 && pos >= kRingRewindAt && rec <= pos &&
      tail - rewind_checked_ >= kRewindCheckEvery) {
    // Past the first kRingRewindAt bytes: if the consumer has caught up, pad
    // to the end and go on at offset 0, so a ring that never holds much
    // keeps touching the same few pages (each new page is a page fault and
    // resident memory on both sides). Looked at once per kRewindCheckEvery
    // bytes, so a busy ring does not read the consumer's head per record.
    rewind_checked_ = tail;
    cached_head_ = c->head.load(std::memory_order_acquire);
    if (cached_head_ == tail) {
      pad = kRingBytes - pos;
      Stat().shm_ring_rewinds++;
    }
  }
  // The consumer's head is read only when the ring looks full, so a busy
  // producer does not pull the consumer's cache line in on every record.
  if (tail + pad + rec - cached_head_ > kRingBytes) {
    cached_head_ = c->head.load(std::memory_order_acquire);
    if (tail + pad + rec - cached_head_ > kRingBytes) return false;
  }
  uint64_t t = tail;
  if (pad > 0) {
    const uint32_t hdr[2] = {static_cast<uint32_t>(pad), kRecPad};
    std::memcpy(d + pos, hdr, sizeof(hdr));
    t += pad;
    pos = 0;
  }
  const uint32_t hdr[2] = {static_cast<uint32_t>(rec), kind};
  std::memcpy(d + pos, hdr, sizeof(hdr));
  if (n > 0) std::memcpy(d + pos + kRecHeader, bytes, n);
  c->tail.store(t + rec, std::memory_order_release);
  if (batching_) {
    // Published; the peer is told at EndBatch, once for the whole batch.
    if (!batch_pushed_) {
      batch_pushed_ = true;
      batch_start_ = tail;
    }
    return true;
  }
  if (TellPeer(tail)) *doorbell = true;
  return true;
}

bool ShmLink::TellPeer(uint64_t from) {
  RingCtl* c = ctl(out_);
  Stat().shm_publishes++;
  // Dekker with the consumer's "set flag / store head; fence; reload tail",
  // and with its "clear the slot's bit; reload tail" (shm_hint.h).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool asleep;
  if (peer_table_ != nullptr) {
    // The peer CQ's poller_active stands in for this ring's flag.
    peer_table_->Mark(peer_slot_);
    asleep = !peer_table_->PollerActive();
  } else {
    asleep = c->need_doorbell.load(std::memory_order_relaxed) != 0;
  }
  if (!asleep) return false;
  // The consumer sleeps. Ring when it had caught up with `from` but not with
  // our last record: it may have gone to sleep without seeing [from, tail).
  // A consumer behind `from` was bound by an earlier TellPeer to reach
  // `from`, and its "store head; fence; reload tail" then sees our tail.
  const uint64_t head = c->head.load(std::memory_order_relaxed);
  return head >= from && head != c->tail.load(std::memory_order_relaxed);
}

bool ShmLink::EndBatch() {
  batching_ = false;
  if (!batch_pushed_) return false;
  batch_pushed_ = false;
  return TellPeer(batch_start_);
}

bool ShmLink::OfferHint(const HintOffer& offer) {
  offer_ = offer;
  offer_owed_ = true;
  return PushOwedControl();
}

bool ShmLink::PushOwedControl() {
  bool doorbell = false;
  if (!backlog_.empty()) return false;
  if (offer_owed_) {
    uint8_t body[kHintBodyBytes];
    EncodeHintOffer(offer_, body);
    if (TryPush(body, sizeof(body), &doorbell, kRecHint)) offer_owed_ = false;
  }
  if (ack_owed_ && TryPush(nullptr, 0, &doorbell, kRecHintAck)) ack_owed_ = false;
  return doorbell;
}

void ShmLink::OnPeerHint(const HintOffer& h) {
  // Only the table of the process at the other end of this link.
  if (peer_table_ != nullptr || h.pid == 0 || static_cast<pid_t>(h.pid) != peer_pid_) return;
  peer_table_ = ShmHintMap::Open(peer_pid_, h.fd, h.inode);
  if (peer_table_ == nullptr) return;  // the peer goes on checking our ring itself
  peer_slot_ = h.slot;
  ack_owed_ = true;
  if (PushOwedControl()) doorbell_owed_ = true;
}

bool ShmLink::Send(const std::shared_ptr<const std::vector<uint8_t>>& frame, bool* backlogged) {
  bool doorbell = (offer_owed_ || ack_owed_) && PushOwedControl();
  if (backlog_.empty() && TryPush(frame->data(), frame->size(), &doorbell)) return doorbell;
  *backlogged = backlog_.empty();
  backlog_.push_back(frame);
  return doorbell;
}

bool ShmLink::SendHeader(const FrameHeader& h, bool* backlogged) {
  uint8_t buf[kHeaderSize];
  FrameHeader hh = h;
  hh.length = 0;
  EncodeHeader(hh, buf);
  bool doorbell = (offer_owed_ || ack_owed_) && PushOwedControl();
  if (backlog_.empty() && TryPush(buf, sizeof(buf), &doorbell)) return doorbell;
  *backlogged = backlog_.empty();
  backlog_.push_back(std::make_shared<const std::vector<uint8_t>>(buf, buf + sizeof(buf)));
  return doorbell;
}

bool ShmLink::FlushBacklog(bool* empty) {
  bool doorbell = false;
  while (!backlog_.empty()) {
    const auto& f = backlog_.front();
    bool d = false;
    if (!TryPush(f->data(), f->size(), &d)) break;
    doorbell |= d;
    backlog_.pop_front();
  }
  if (backlog_.empty() && (offer_owed_ || ack_owed_)) doorbell |= PushOwedControl();
  *empty = backlog_.empty();
  return doorbell;
}

// ---- consumer -------------------------------------------------------------------

bool ShmLink::HasIncoming() const {
  const RingCtl* c = ctl(in_);
  return c->tail.load(std::memory_order_acquire) != c->head.load(std::memory_order_relaxed);
}

size_t ShmLink::Drain(const std::function<void(Frame&)>& fn) {
  RingCtl* c = ctl(in_);
  const uint8_t* d = data(in_);
  size_t frames = 0;
  uint64_t head = c->head.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t tail = c->tail.load(std::memory_order_acquire);
    while (head != tail) {
      const size_t pos = head % kRingBytes;
      Frame f;
      uint32_t size = 0;
      HintOffer hint;
      const ShmRecord r = ParseShmRecord(d + pos, kRingBytes - pos, &f, &size, &hint);
      if (r == ShmRecord::kCorrupt) {
        // Not something our producer writes: skip everything published so
        // far rather than loop on it. The connection's frames are lost, as
        // on a corrupted wire; the peer's requests time out as RNR / flush.
        uint32_t hdr[2];
        std::memcpy(hdr, d + pos, sizeof(hdr));
        LOG(ERROR) << "softrdma: corrupt shared-memory record (size " << hdr[0] << ", kind "
                   << hdr[1] << ") in " << name_ << "; discarding " << tail - head << " bytes";
        head = tail;
        c->head.store(head, std::memory_order_release);
        break;
      }
      if (r == ShmRecord::kFrame) {
        ++frames;
        fn(f);
      } else if (r == ShmRecord::kHint) {
        OnPeerHint(hint);
      } else if (r == ShmRecord::kHintAck) {
        if (!marked_by_peer_.exchange(true, std::memory_order_acq_rel)) Stat().shm_marked_qps++;
      }
      head += size;
      // Free the record's space at once so a producer can reuse it.
      c->head.store(head, std::memory_order_release);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (c->tail.load(std::memory_order_acquire) == head) return frames;
  }
}

bool ShmLink::MarkPolling() {
  RingCtl* c = ctl(in_);
  if (c->need_doorbell.load(std::memory_order_relaxed) == 0) return false;
  c->need_doorbell.store(0, std::memory_order_relaxed);
  return true;
}

void ShmLink::MarkSleeping() { ctl(in_)->need_doorbell.store(1, std::memory_order_relaxed); }

// ---- process_vm copies -------------------------------------------------------------

namespace {

// process_vm_{readv,writev} move at most IOV_MAX iovecs per call and may stop
// early; this walks both lists until every byte moved.
bool VmCopy(bool write, pid_t pid, const IovecList& local,
            const IovecList& remote, std::atomic<uint64_t>* work) {
  size_t li = 0, ri = 0, loff = 0, roff = 0;
  constexpr size_t kBatch = 64;
  while (li < local.size() && ri < remote.size()) {
    iovec l[kBatch], r[kBatch];
    size_t nl = 0, nr = 0, want_l = 0, want_r = 0;
    // At most kVmCopyChunk bytes per call (the last iovec cut short).
    for (size_t i = li; i < local.size() && nl < kBatch && want_l < kVmCopyChunk; ++i, ++nl) {
      const size_t off = i == li ? loff : 0;
      const size_t len = std::min(local[i].iov_len - off, kVmCopyChunk - want_l);
      l[nl] = iovec{static_cast<uint8_t*>(local[i].iov_base) + off, len};
      want_l += len;
    }
    for (size_t i = ri; i < remote.size() && nr < kBatch && want_r < kVmCopyChunk; ++i, ++nr) {
      const size_t off = i == ri ? roff : 0;
      const size_t len = std::min(remote[i].iov_len - off, kVmCopyChunk - want_r);
      r[nr] = iovec{static_cast<uint8_t*>(remote[i].iov_base) + off, len};
      want_r += len;
    }
    if (want_l == 0 || want_r == 0) break;
    ssize_t n = write ? ::process_vm_writev(pid, l, nl, r, nr, 0)
                      : ::process_vm_readv(pid, l, nl, r, nr, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EFAULT;
      return false;
    }
    work->fetch_add(1, std::memory_order_relaxed);
    // Advance both cursors by n bytes.
    size_t left = static_cast<size_t>(n);
    while (left > 0 && li < local.size()) {
      const size_t room = local[li].iov_len - loff;
      if (left < room) {
        loff += left;
        left = 0;
      } else {
        left -= room;
        ++li;
        loff = 0;
      }
    }
    left = static_cast<size_t>(n);
    while (left > 0 && ri < remote.size()) {
      const size_t room = remote[ri].iov_len - roff;
      if (left < room) {
        roff += left;
        left = 0;
      } else {
        left -= room;
        ++ri;
        roff = 0;
      }
    }
    while (li < local.size() && local[li].iov_len == loff) {
      ++li;
      loff = 0;
    }
    while (ri < remote.size() && remote[ri].iov_len == roff) {
      ++ri;
      roff = 0;
    }
  }
  return true;
}

}  // namespace

bool ShmLink::ReadFromPeer(const IovecList& local, const IovecList& remote) {
  return VmCopy(/*write=*/false, peer_pid_, local, remote, &ctl(in_)->work);
}

bool ShmLink::WriteToPeer(const IovecList& local, const IovecList& remote) {
  return VmCopy(/*write=*/true, peer_pid_, local, remote, &ctl(in_)->work);
}

void ShmLink::NoteWork(uint64_t units) {
  ctl(in_)->work.fetch_add(units, std::memory_order_relaxed);
}

void ShmLink::MarkAttached() { ctl(in_)->attached.store(1, std::memory_order_release); }

bool ShmLink::PeerAttached() const {
  return ctl(out_)->attached.load(std::memory_order_acquire) != 0;
}

uint64_t ShmLink::PeerProgress() const {
  return ctl(out_)->work.load(std::memory_order_relaxed) +
         ctl(in_)->tail.load(std::memory_order_relaxed);
}

}  // namespace internal

void SetShmEnabled(bool enabled) { internal::g_shm_enabled.store(enabled ? 1 : 0); }

}  // namespace softrdma
