// shm_hint.cc: the CQs' tables of rings with records (see shm_hint.h).
#include "softrdma/shm_hint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "glog/logging.h"

namespace softrdma {
namespace internal {

namespace {

constexpr size_t kTableBytes = (sizeof(ShmHintWords) + 4095) & ~size_t{4095};
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

ShmHintWords* MapTable(int fd) {
  void* p = ::mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<ShmHintWords*>(p);
}

// Open tables of peers, by (pid, fd, inode); entries expire with their maps.
struct MapCache {
  absl::Mutex mu;
  std::map<std::tuple<pid_t, int, uint64_t>, std::weak_ptr<ShmHintMap>> maps ABSL_GUARDED_BY(mu);
};
MapCache& Cache() {
  static auto* c = new MapCache();
  return *c;
}

}  // namespace

bool ShmHintsEnabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("SOFTRDMA_SHM_HINTS");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return enabled;
}

std::unique_ptr<ShmHintTable> ShmHintTable::Create() {
  const int fd = ::memfd_create("softrdma-hints", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ShmHintWords* words = nullptr;
  struct stat st {};
  if (fd >= 0 && ::ftruncate(fd, kTableBytes) == 0 && ::fcntl(fd, F_ADD_SEALS, kSeals) == 0 &&
      ::fstat(fd, &st) == 0) {
    words = MapTable(fd);  // a fresh memfd reads as zeros: no bit set
  }
  if (words == nullptr) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      PLOG(WARNING) << "softrdma: cannot make a CQ's table of same-host rings; its polls check "
                       "every ring";
    }
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<ShmHintTable>(
      new ShmHintTable(fd, static_cast<uint64_t>(st.st_ino), words));
}

ShmHintTable::ShmHintTable(int fd, uint64_t inode, ShmHintWords* words)
    : fd_(fd), inode_(inode), words_(words) {}

ShmHintTable::~ShmHintTable() {
  ::munmap(words_, kTableBytes);
  ::close(fd_);
}

int ShmHintTable::AllocSlot() {
  if (!free_slots_.empty()) {
    const int s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  if (next_slot_ >= static_cast<int>(kHintSlots)) return -1;
  return next_slot_++;
}

void ShmHintTable::FreeSlot(int slot) {
  if (slot >= 0) free_slots_.push_back(slot);
}

std::shared_ptr<ShmHintMap> ShmHintMap::Open(pid_t pid, int fd, uint64_t inode) {
  MapCache& cache = Cache();
  const auto key = std::make_tuple(pid, fd, inode);
  {
    absl::MutexLock l(&cache.mu);
    if (auto it = cache.maps.find(key); it != cache.maps.end()) {
      if (std::shared_ptr<ShmHintMap> m = it->second.lock()) return m;
    }
  }
  if (fd < 0 || pid <= 0) return nullptr;
  // The peer's own open file, as pidfd_getfd(2) duplicates it (allowed where
  // process_vm_readv is): nothing is reopened with our credentials, so a
  // peer cannot name a file only we may write.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return nullptr;
  const int mine = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  ::close(pidfd);
  if (mine < 0) return nullptr;
  // Only what Create makes: a file whose growing, shrinking and sealing are
  // sealed (shmem: other files have no seals, F_GET_SEALS fails), of the
  // table's size, with the inode the peer named.
  const int seals = ::fcntl(mine, F_GET_SEALS);
  struct stat st {};
  const bool ok = seals >= 0 && (seals & kSeals) == kSeals && ::fstat(mine, &st) == 0 &&
                  S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) == kTableBytes &&
                  static_cast<uint64_t>(st.st_ino) == inode;
  ShmHintWords* words = ok ? MapTable(mine) : nullptr;
  ::close(mine);
  if (words == nullptr) return nullptr;
  std::shared_ptr<ShmHintMap> m(new ShmHintMap(words));
  absl::MutexLock l(&cache.mu);
  if (auto it = cache.maps.find(key); it != cache.maps.end()) {
    if (std::shared_ptr<ShmHintMap> other = it->second.lock()) return other;  // raced: theirs
  }
  if (cache.maps.size() >= 64) {  // forget the tables of peers gone since
    for (auto it = cache.maps.begin(); it != cache.maps.end();) {
      it = it->second.expired() ? cache.maps.erase(it) : std::next(it);
    }
  }
  cache.maps[key] = m;
  return m;
}

ShmHintMap::~ShmHintMap() { ::munmap(words_, kTableBytes); }

}  // namespace internal
}  // namespace softrdma
