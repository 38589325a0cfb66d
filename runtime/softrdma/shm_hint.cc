// shm_hint.cc: the CQs' tables of rings with records (see shm_hint.h).
#include "softrdma/shm_hint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
  absl::MutexLock l(&cache.mu);
  if (auto it = cache.maps.find(key); it != cache.maps.end()) {
    if (std::shared_ptr<ShmHintMap> m = it->second.lock()) return m;
    cache.maps.erase(it);
  }
  if (fd < 0 || pid <= 0) return nullptr;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) return nullptr;
  struct stat st {};
  // Only what Create makes: a regular file of the table's size whose growing
  // and shrinking are sealed (a memfd: other files cannot be sealed), with
  // the inode the peer named, so a peer cannot make us write elsewhere.
  const bool ok = ::fstat(mine, &st) == 0 && S_ISREG(st.st_mode) &&
                  static_cast<size_t>(st.st_size) == kTableBytes &&
                  static_cast<uint64_t>(st.st_ino) == inode &&
                  (::fcntl(mine, F_GET_SEALS) & kSeals) == kSeals;
  ShmHintWords* words = ok ? MapTable(mine) : nullptr;
  ::close(mine);
  if (words == nullptr) return nullptr;
  std::shared_ptr<ShmHintMap> m(new ShmHintMap(words));
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
