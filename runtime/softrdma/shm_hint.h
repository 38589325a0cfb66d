// shm_hint.h: which same-host rings of a CQ have records, without looking at
// every ring (shm_link.h).
//
// A CQ polls the incoming rings of its same-host QPs itself. Checking each
// ring's tail on every poll costs a cache line per connection: with
// thousands of connections on one CQ that scan, not the messages, is what a
// poll spends its time on. So each CQ keeps a table of "ring has records"
// bits in shared memory, one slot per QP, and a peer that publishes a record
// into the ring of slot S also sets bit S; a poll takes the set bits and
// drains only those rings, as a NIC writes CQEs for the QPs that had traffic.
//
//   table    = level-0 words (bit w: level-1 word w has a bit set)
//              + level-1 words (bit s: slot s has records)
//   producer = publish the ring's tail; seq_cst fence; set slot's bit, then
//              its level-0 bit (each an RMW only when it is not set yet)
//   consumer = exchange a level-0 word with 0, then each level-1 word it
//              names with 0, then drain those slots' rings
//
// The consumer clears a bit before it reads the ring's tail and the producer
// sets it after publishing the tail, both seq_cst (shm_link.h's Dekker
// argument), so a record is either seen by the drain that cleared the bit or
// leaves the bit set for the next poll.
//
// The table also holds the CQ's "poller active" word, which stands in for
// the per-ring need_doorbell flag (shm_link.h) of every ring that marks its
// slot: going to sleep or waking is then one store, not one per connection.
//
//   producer = ... set the bits (above); seq_cst load of poller_active;
//              0 and the ring's consumer had caught up: ring the doorbell
//   sleeper  = store poller_active = 0; seq_cst fence; take and drain the
//              marked slots (above)
//
// Either the producer's load sees the 0, or the sleeper's fence comes after
// the producer's bits in the seq_cst order and its take sees them: no record
// is left with neither a doorbell nor a drain.
//
// A CQ with at most kScanAllRingsUpTo rings polls differently: each poll
// looks at every ring's tail and takes no bits, so the bits stay set and a
// producer's mark is a load. Going to sleep is as above (take the marked
// slots after the fence), plus a look at every ring: the take covers a ring
// added after the poll loaded its snapshot, whose peer marked rather than
// rang.
//
// The table is a sealed memfd (no name in /dev/shm, so nothing is left
// behind when a process dies). A QP tells its peer the table's fd and inode
// and its slot in a kRecHint record on the ring it produces into; the peer
// takes the fd with pidfd_getfd(2) (allowed where process_vm_readv is, which
// the same-host link already needs), checks that it is a memfd sealed at the
// table's size with that inode, maps it, and from then on marks the slot
// after each record, answering kRecHintAck in the ring the marked slot
// names. Until the consumer has read that ack it keeps checking the ring on
// every poll, as it does for QPs without a slot (a QP whose send and
// receive CQs differ, or a CQ whose slots are all taken), and sets and
// clears the ring's own need_doorbell flag beside poller_active: the
// producer reads poller_active instead of that flag from the moment it maps
// the table, so the two agree while the ring switches over.
//
// A peer can write any word of a table it maps. That is no new exposure:
// the same-host link already needs it to be allowed process_vm_writev into
// this process, which is worse. A peer that clears other peers' bits
// delays their records until the CQ looks at their rings in turn (every
// kCheckRingsEvery polls, kRingsChecked rings, and at each sleep); one
// that sets poller_active while the poller sleeps withholds every marked
// ring's doorbells until the poller next wakes for another reason.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_SHM_HINT_H_
#define RDMARPC_RUNTIME_SOFTRDMA_SHM_HINT_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace softrdma {
namespace internal {

// True unless env SOFTRDMA_SHM_HINTS=0: then no CQ makes a table, and polls
// check every ring (for comparing the two).
bool ShmHintsEnabled();

// Slots per CQ's table: QPs beyond this many on one CQ are checked on every
// poll instead.
inline constexpr uint32_t kHintSlots = 65536;
// Every kCheckRingsEvery polls, and each time it goes to sleep, a CQ with a
// table looks at kRingsChecked of its rings whether marked or not, taking
// them in turn: with n rings, each is looked at every n * kCheckRingsEvery
// / kRingsChecked polls. Our own choice: an eighth of a ring per poll. Two
// on every poll (each a cold ShmLink and ring control block) were the
// largest item of a conn_scale profile at 2,000 connections.
inline constexpr uint64_t kCheckRingsEvery = 64;
inline constexpr uint32_t kRingsChecked = 8;
// A CQ with at most this many same-host rings looks at every one of them on
// every poll and leaves its table's bits alone. With few rings that is the
// cheaper way: a ring whose tail did not move costs a load from this core's
// cache, while taking a bit moves the level-0 and level-1 lines from the
// producer's core and back once per record (softrdma_pingpong's 32 B round
// trip, one QP: p50 1.14 us with the table, 0.86 us scanning). Bits left
// set also make the producers' marks loads of a line nobody writes. Our own
// choice of the count; beyond it the table's cost per record stays the same
// while a scan's grows with the rings.
inline constexpr size_t kScanAllRingsUpTo = 16;

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the table's words are shared between processes");

static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "the table's words are shared between processes");

struct ShmHintWords {
  static constexpr uint32_t kLevel1 = kHintSlots / 64;
  static constexpr uint32_t kLevel0 = kLevel1 / 64;
  // 1 while a poller busy-polls the CQ (no doorbells needed), 0 (as the
  // memfd starts) while it sleeps. Written by the consumer only.
  alignas(64) std::atomic<uint32_t> poller_active;
  alignas(64) std::atomic<uint64_t> level0[kLevel0];
  std::atomic<uint64_t> level1[kLevel1];
};

// Sets `slot`'s bit and then its level-0 bit, each an RMW only when it is
// not set yet (shm_hint.h's ordering). Slots past the table are ignored.
inline void Mark(ShmHintWords* words, uint32_t slot) {
  if (slot >= kHintSlots) return;
  const uint32_t w = slot / 64;
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if ((words->level1[w].load(std::memory_order_seq_cst) & bit) == 0) {
    words->level1[w].fetch_or(bit, std::memory_order_seq_cst);
  }
  const uint64_t wbit = uint64_t{1} << (w % 64);
  if ((words->level0[w / 64].load(std::memory_order_seq_cst) & wbit) == 0) {
    words->level0[w / 64].fetch_or(wbit, std::memory_order_seq_cst);
  }
}

// The consumer's table, owned by one CQ. Slot allocation is the CQ's (under
// its links_mu); TakeMarked is the CQ's pollers' (any thread, concurrently:
// each set bit is taken by one of them).
class ShmHintTable {
 public:
  // nullptr (warning logged once) when memfd_create / ftruncate / sealing /
  // mmap fail; the CQ then checks every ring on every poll.
  static std::unique_ptr<ShmHintTable> Create();
  ~ShmHintTable();
  ShmHintTable(const ShmHintTable&) = delete;
  ShmHintTable& operator=(const ShmHintTable&) = delete;

  int fd() const { return fd_; }
  uint64_t inode() const { return inode_; }

  // The CQ's poller wakes: producers of marked rings stop ringing doorbells.
  // True on the 0 -> 1 transition (the caller then arms its watchdog).
  bool SetPollerActive() {
    if (words_->poller_active.load(std::memory_order_relaxed) != 0) return false;
    words_->poller_active.store(1, std::memory_order_relaxed);
    return true;
  }
  // The CQ's poller goes to sleep: producers of marked rings ring doorbells
  // again. The caller must then issue a seq_cst fence and take the marked
  // slots (the recheck); one fence may serve this and the rings' own flags.
  void SetPollerAsleep() { words_->poller_active.store(0, std::memory_order_relaxed); }

  // A free slot, or -1 when all kHintSlots are taken.
  int AllocSlot();
  void FreeSlot(int slot);

  // Clears every set bit and calls fn(slot) for each, after a seq_cst fence
  // (so fn's loads of the rings' tails are ordered after the clears on any
  // memory model). Returns the count.
  template <typename Fn>
  int TakeMarked(Fn&& fn) {
    int n = 0;
    for (uint32_t i = 0; i < ShmHintWords::kLevel0; ++i) {
      if (words_->level0[i].load(std::memory_order_relaxed) == 0) continue;
      uint64_t l0 = words_->level0[i].exchange(0, std::memory_order_seq_cst);
      while (l0 != 0) {
        const uint32_t w = i * 64 + static_cast<uint32_t>(__builtin_ctzll(l0));
        l0 &= l0 - 1;
        uint64_t l1 = words_->level1[w].exchange(0, std::memory_order_seq_cst);
        if (l1 == 0) continue;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        while (l1 != 0) {
          fn(static_cast<int>(w * 64 + static_cast<uint32_t>(__builtin_ctzll(l1))));
          l1 &= l1 - 1;
          ++n;
        }
      }
    }
    return n;
  }

 private:
  ShmHintTable(int fd, uint64_t inode, ShmHintWords* words);

  int fd_;
  uint64_t inode_;
  ShmHintWords* words_;
  std::vector<int> free_slots_;  // LIFO, so low slots are reused first
  int next_slot_ = 0;            // slots [next_slot_, kHintSlots) never used
};

// A producer's mapping of a peer CQ's table, shared by every QP of this
// process whose peer QP is on that CQ.
class ShmHintMap {
 public:
  // Maps the table of process `pid`'s fd `fd` if it is a sealed memfd of the
  // table's size with inode `inode` (else nullptr). One mapping per table in
  // this process (cached while any QP holds it). System calls on first use.
  static std::shared_ptr<ShmHintMap> Open(pid_t pid, int fd, uint64_t inode);
  ~ShmHintMap();
  ShmHintMap(const ShmHintMap&) = delete;
  ShmHintMap& operator=(const ShmHintMap&) = delete;

  // After a record is published (and the producer's seq_cst fence): slot has
  // records. Slots past the table are ignored.
  void Mark(uint32_t slot) { internal::Mark(words_, slot); }
  // After Mark: whether the CQ's poller busy-polls (seq_cst, shm_hint.h's
  // ordering). False: the producer rings the doorbell if the consumer had
  // caught up.
  bool PollerActive() const { return words_->poller_active.load(std::memory_order_seq_cst) != 0; }

 private:
  explicit ShmHintMap(ShmHintWords* words) : words_(words) {}
  ShmHintWords* words_;
};

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_SHM_HINT_H_
