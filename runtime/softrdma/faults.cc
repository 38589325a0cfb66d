// faults.cc: the state of the fault knobs (faults.h), their environment
// variables, and the hooks the verbs consult (faults_internal.h).
#include <errno.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "softrdma/faults.h"
#include "softrdma/faults_internal.h"
#include "softrdma/internal.h"

namespace softrdma {
namespace internal {
namespace {

constexpr int kNumOps = static_cast<int>(FaultOp::kCreateSrq) + 1;
constexpr uint64_t kPageBytes = 4096;

struct FailKnob {
  std::atomic<int> after{0};  // calls still let through first
  std::atomic<int> count{0};
  std::atomic<int> err{0};
};

struct Knobs {
  FailKnob fail[kNumOps];
  // Drop / vanish: thresholds (0 = off) and what has been counted so far.
  std::atomic<uint64_t> drop_after_wrs{0};
  std::atomic<uint64_t> drop_after_bytes{0};
  std::atomic<uint64_t> completed_wrs{0};
  std::atomic<uint64_t> completed_bytes{0};
  std::atomic<uint64_t> vanish_after_wrs{0};
  std::atomic<uint64_t> posted_wrs{0};
  std::atomic<int64_t> delay_ns{0};
  std::atomic<bool> ack_hold{false};
  std::atomic<uint32_t> ack_hold_us{100000};
  // Memlock cap; UINT64_MAX = none.
  std::atomic<uint64_t> memlock_cap{UINT64_MAX};
  std::atomic<uint64_t> pinned{0};
  std::atomic<uint64_t> acks_behind_requests{0};
  absl::Mutex cqe_mu;
  std::deque<ErrorCqe> error_cqes ABSL_GUARDED_BY(cqe_mu);
  // The soft RLIMIT_MEMLOCK before SetMemlockLimit lowered it.
  std::mutex rlimit_mu;
  bool rlimit_saved = false;
  rlimit saved_rlimit{};
};

Knobs& K() {
  static Knobs* k = new Knobs();
  return *k;
}

[[noreturn]] void BadEnv(const char* name, const char* value, const char* format) {
  std::fprintf(stderr, "softrdma: %s=\"%s\" is malformed; expected %s\n", name, value, format);
  std::abort();
}

// Decimal digits only (strtoull alone would take leading white space and a
// sign, making " -1" 2^64 - 1), with an optional K / M / G suffix when `sizes`.
bool ParseU64(const char* s, bool sizes, uint64_t* out) {
  if (s == nullptr || *s < '0' || *s > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  uint64_t mult = 1;
  if (sizes && *end != '\0' && end[1] == '\0') {
    switch (*end) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      default: return false;
    }
    ++end;
  }
  if (*end != '\0') return false;
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

bool ParseErrno(const char* s, int* out) {
  static const struct {
    const char* name;
    int value;
  } kNames[] = {{"ENOMEM", ENOMEM}, {"EINVAL", EINVAL}, {"EPERM", EPERM},
                {"ENOSPC", ENOSPC}, {"EAGAIN", EAGAIN}, {"EBUSY", EBUSY},
                {"ENODEV", ENODEV}, {"EIO", EIO},       {"EFAULT", EFAULT},
                {"EACCES", EACCES}, {"EOPNOTSUPP", EOPNOTSUPP}};
  for (const auto& n : kNames) {
    if (std::strcmp(s, n.name) == 0) {
      *out = n.value;
      return true;
    }
  }
  uint64_t v = 0;
  if (!ParseU64(s, false, &v) || v == 0 || v > 4095) return false;
  *out = static_cast<int>(v);
  return true;
}

void SetFail(FaultOp op, int count, int err, int after) {
  FailKnob& f = K().fail[static_cast<int>(op)];
  f.count = 0;  // disarmed while the others change
  f.err = err;
  f.after = after < 0 ? 0 : after;
  f.count = count < 0 ? 0 : count;
}

void SetMemlock(uint64_t bytes) {
  Knobs& k = K();
  {
    std::lock_guard<std::mutex> l(k.rlimit_mu);
    rlimit cur{};
    if (::getrlimit(RLIMIT_MEMLOCK, &cur) == 0) {
      if (!k.rlimit_saved) {
        k.saved_rlimit = cur;
        k.rlimit_saved = true;
      }
      rlimit lowered = cur;
      lowered.rlim_cur = cur.rlim_max == RLIM_INFINITY || bytes < cur.rlim_max
                             ? static_cast<rlim_t>(bytes)
                             : cur.rlim_max;
      ::setrlimit(RLIMIT_MEMLOCK, &lowered);
    }
  }
  k.memlock_cap = bytes;
}

void ClearMemlock() {
  Knobs& k = K();
  k.memlock_cap = UINT64_MAX;
  std::lock_guard<std::mutex> l(k.rlimit_mu);
  if (k.rlimit_saved) {
    ::setrlimit(RLIMIT_MEMLOCK, &k.saved_rlimit);
    k.rlimit_saved = false;
  }
}

void LoadFromEnv() {
  static const struct {
    const char* name;
    FaultOp op;
  } kFails[] = {{"SOFTRDMA_FAULT_FAIL_ALLOC_PD", FaultOp::kAllocPd},
                {"SOFTRDMA_FAULT_FAIL_REG_MR", FaultOp::kRegMr},
                {"SOFTRDMA_FAULT_FAIL_CREATE_CQ", FaultOp::kCreateCq},
                {"SOFTRDMA_FAULT_FAIL_REQ_NOTIFY_CQ", FaultOp::kReqNotifyCq},
                {"SOFTRDMA_FAULT_FAIL_CREATE_QP", FaultOp::kCreateQp},
                {"SOFTRDMA_FAULT_FAIL_ARM_NEW_CQ", FaultOp::kArmNewCq},
                {"SOFTRDMA_FAULT_FAIL_RESIZE_CQ", FaultOp::kResizeCq},
                {"SOFTRDMA_FAULT_FAIL_CREATE_SRQ", FaultOp::kCreateSrq}};
  for (const auto& f : kFails) {
    const char* v = std::getenv(f.name);
    if (v == nullptr) continue;
    // count:errno[:after]
    const std::string text(v);
    const size_t c1 = text.find(':');
    const size_t c2 = c1 == std::string::npos ? c1 : text.find(':', c1 + 1);
    uint64_t count = 0;
    uint64_t after = 0;
    int err = 0;
    const std::string err_text =
        c1 == std::string::npos ? "" : text.substr(c1 + 1, c2 == std::string::npos ? c2 : c2 - c1 - 1);
    if (c1 == std::string::npos || !ParseU64(text.substr(0, c1).c_str(), false, &count) ||
        count > INT32_MAX || !ParseErrno(err_text.c_str(), &err) ||
        (c2 != std::string::npos &&
         (!ParseU64(text.substr(c2 + 1).c_str(), false, &after) || after > INT32_MAX))) {
      BadEnv(f.name, v, "count:errno[:after], e.g. 1:ENOMEM, 1:12 or 2:ENOMEM:1");
    }
    SetFail(f.op, static_cast<int>(count), err, static_cast<int>(after));
  }
  auto number = [](const char* name, bool sizes, std::atomic<uint64_t>* knob) {
    const char* v = std::getenv(name);
    if (v == nullptr) return;
    uint64_t n = 0;
    if (!ParseU64(v, sizes, &n)) {
      BadEnv(name, v, sizes ? "a decimal count, optionally with K, M or G" : "a decimal count");
    }
    knob->store(n);
  };
  Knobs& k = K();
  number("SOFTRDMA_FAULT_DROP_AFTER_WRS", false, &k.drop_after_wrs);
  number("SOFTRDMA_FAULT_DROP_AFTER_BYTES", true, &k.drop_after_bytes);
  number("SOFTRDMA_FAULT_VANISH_AFTER_WRS", false, &k.vanish_after_wrs);
  if (const char* v = std::getenv("SOFTRDMA_FAULT_DELAY_COMPLETION_US")) {
    uint64_t us = 0;
    if (!ParseU64(v, false, &us) || us > UINT32_MAX) {
      BadEnv("SOFTRDMA_FAULT_DELAY_COMPLETION_US", v, "microseconds, decimal");
    }
    k.delay_ns = static_cast<int64_t>(us) * 1000;
  }
  if (const char* v = std::getenv("SOFTRDMA_FAULT_RECV_BEFORE_SEND")) {
    if (std::strcmp(v, "1") != 0 && std::strcmp(v, "0") != 0) {
      BadEnv("SOFTRDMA_FAULT_RECV_BEFORE_SEND", v, "1 or 0");
    }
    k.ack_hold = v[0] == '1';
  }
  if (const char* v = std::getenv("SOFTRDMA_FAULT_MEMLOCK_BYTES")) {
    uint64_t n = 0;
    if (!ParseU64(v, true, &n)) {
      BadEnv("SOFTRDMA_FAULT_MEMLOCK_BYTES", v, "bytes, decimal, optionally with K, M or G");
    }
    SetMemlock(n);
  }
}

// Reads the environment once, before any knob is consulted or set.
void EnsureLoaded() {
  static std::once_flag once;
  std::call_once(once, LoadFromEnv);
}

// Counts `add` into `counter`; true when this crossed `*threshold` (which is
// then disarmed, so the knob fires once).
bool CrossedOnce(std::atomic<uint64_t>& threshold, std::atomic<uint64_t>& counter, uint64_t add) {
  uint64_t limit = threshold.load(std::memory_order_relaxed);
  if (limit == 0) return false;
  const uint64_t now = counter.fetch_add(add) + add;
  if (now < limit) return false;
  // Only one caller disarms it.
  return threshold.compare_exchange_strong(limit, 0);
}

}  // namespace

bool TakeInjectedFailure(FaultOp op, int* err) {
  EnsureLoaded();
  FailKnob& f = K().fail[static_cast<int>(op)];
  if (f.count.load(std::memory_order_relaxed) == 0) return false;
  for (int pass = f.after.load(); pass > 0;) {
    if (f.after.compare_exchange_weak(pass, pass - 1)) return false;  // let this one through
  }
  for (int left = f.count.load(std::memory_order_relaxed); left > 0;) {
    if (f.count.compare_exchange_weak(left, left - 1)) {
      *err = f.err.load();
      return true;
    }
  }
  return false;
}

bool CountCompletedSend(uint32_t byte_len) {
  EnsureLoaded();
  Knobs& k = K();
  const bool by_wrs = CrossedOnce(k.drop_after_wrs, k.completed_wrs, 1);
  const bool by_bytes = CrossedOnce(k.drop_after_bytes, k.completed_bytes, byte_len);
  return by_wrs || by_bytes;
}

bool CountPostedSendForVanish() {
  EnsureLoaded();
  Knobs& k = K();
  uint64_t limit = k.vanish_after_wrs.load(std::memory_order_relaxed);
  if (limit == 0) return false;
  // Fires on the (n+1)-th post.
  if (k.posted_wrs.fetch_add(1) + 1 <= limit) return false;
  return k.vanish_after_wrs.compare_exchange_strong(limit, 0);
}

bool LinkFaultsArmed() {
  EnsureLoaded();
  return K().drop_after_wrs.load(std::memory_order_relaxed) != 0 ||
         K().drop_after_bytes.load(std::memory_order_relaxed) != 0 ||
         K().vanish_after_wrs.load(std::memory_order_relaxed) != 0 ||
         K().ack_hold.load(std::memory_order_relaxed);
}

int64_t CompletionDelayNanos() {
  EnsureLoaded();
  return K().delay_ns.load(std::memory_order_relaxed);
}

bool AckHoldEnabled(uint32_t* max_hold_micros) {
  EnsureLoaded();
  if (!K().ack_hold.load(std::memory_order_relaxed)) return false;
  *max_hold_micros = K().ack_hold_us.load();
  return true;
}

namespace {

// Whether this thread's effective capabilities hold CAP_IPC_LOCK, with which
// the kernel lets ib_umem_get pin past RLIMIT_MEMLOCK.
bool HasIpcLock() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &h, d) != 0) return false;
  return (d[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}

// The bytes the kernel would let this process pin: RLIMIT_MEMLOCK's soft
// limit, unless it is infinite or the process has CAP_IPC_LOCK.
uint64_t RealMemlockLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  if (HasIpcLock()) return UINT64_MAX;
  return static_cast<uint64_t>(r.rlim_cur);
}

}  // namespace

bool PinPages(const void* addr, size_t length, uint64_t* pinned) {
  EnsureLoaded();
  *pinned = 0;
  if (length == 0) return true;
  const uint64_t start = reinterpret_cast<uintptr_t>(addr) / kPageBytes * kPageBytes;
  const uint64_t end =
      (reinterpret_cast<uintptr_t>(addr) + length + kPageBytes - 1) / kPageBytes * kPageBytes;
  const uint64_t bytes = end - start;
  Knobs& k = K();
  // The knob (SetMemlockLimit) and, as ib_umem_get checks it, the real limit.
  const uint64_t cap = std::min(k.memlock_cap.load(), RealMemlockLimit());
  uint64_t cur = k.pinned.load();
  do {
    if (cap != UINT64_MAX && (bytes > cap || cur > cap - bytes)) return false;
  } while (!k.pinned.compare_exchange_weak(cur, cur + bytes));
  *pinned = bytes;
  return true;
}

void UnpinPages(uint64_t pinned) { K().pinned.fetch_sub(pinned); }

void RecordErrorCqe(const ibv_wc& wc) {
  constexpr size_t kKeep = 65536;
  ErrorCqe e;
  e.qp_num = wc.qp_num;
  e.wr_id = wc.wr_id;
  e.status = wc.status;
  e.recv = (wc.opcode & IBV_WC_RECV) != 0;
  Knobs& k = K();
  absl::MutexLock l(&k.cqe_mu);
  if (k.error_cqes.size() == kKeep) k.error_cqes.pop_front();
  k.error_cqes.push_back(e);
}

void CountAckBehindRequest() { K().acks_behind_requests++; }

}  // namespace internal

void FailNext(FaultOp op, int count, int err, int after) {
  internal::EnsureLoaded();
  internal::SetFail(op, count, err, after);
}

void FailNextRegMr(int count, int err) { FailNext(FaultOp::kRegMr, count, err); }

void DropAfterWrs(uint64_t n) {
  internal::EnsureLoaded();
  internal::K().completed_wrs = 0;
  internal::K().drop_after_wrs = n;
}

void DropAfterBytes(uint64_t n) {
  internal::EnsureLoaded();
  internal::K().completed_bytes = 0;
  internal::K().drop_after_bytes = n;
}

void DelayCompletions(uint32_t micros) {
  internal::EnsureLoaded();
  internal::K().delay_ns = static_cast<int64_t>(micros) * 1000;
}

void RecvBeforeSend(bool on, uint32_t max_hold_micros) {
  internal::EnsureLoaded();
  internal::K().ack_hold_us = max_hold_micros;
  internal::K().ack_hold = on;
}

void SetMemlockLimit(uint64_t bytes) {
  internal::EnsureLoaded();
  internal::SetMemlock(bytes);
}

void ClearMemlockLimit() {
  internal::EnsureLoaded();
  internal::ClearMemlock();
}

uint64_t PinnedBytes() { return internal::K().pinned.load(); }

void VanishAfterWrs(uint64_t n) {
  internal::EnsureLoaded();
  internal::K().posted_wrs = 0;
  internal::K().vanish_after_wrs = n;
}

void ResetFaults() {
  internal::EnsureLoaded();
  for (int i = 0; i < internal::kNumOps; ++i) internal::SetFail(static_cast<FaultOp>(i), 0, 0, 0);
  DropAfterWrs(0);
  DropAfterBytes(0);
  DelayCompletions(0);
  RecvBeforeSend(false);
  VanishAfterWrs(0);
  internal::ClearMemlock();
  internal::K().acks_behind_requests = 0;
  TakeErrorCqes();
}

std::vector<ErrorCqe> TakeErrorCqes() {
  internal::Knobs& k = internal::K();
  absl::MutexLock l(&k.cqe_mu);
  std::vector<ErrorCqe> out(k.error_cqes.begin(), k.error_cqes.end());
  k.error_cqes.clear();
  return out;
}

uint64_t AcksSentBehindRequests() { return internal::K().acks_behind_requests.load(); }

}  // namespace softrdma
