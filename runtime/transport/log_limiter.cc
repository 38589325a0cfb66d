// log_limiter.cc: see log_limiter.h.
#include "runtime/transport/log_limiter.h"

#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace internal {

bool LogLimiter::Allow(absl::string_view key, absl::Time now, uint64_t* held_back) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_keys_) {
      absl::erase_if(entries_, [&](const auto& e) { return now - e.second.last >= period_; });
      if (entries_.size() >= max_keys_) {
        *held_back = 0;
        return false;  // a flood of distinct peers: nothing said for the new one
      }
    }
    it = entries_.emplace(std::string(key), Entry()).first;
  }
  Entry& e = it->second;
  if (now - e.last < period_) {
    e.held_back++;
    return false;
  }
  *held_back = e.held_back;
  e.held_back = 0;
  e.last = now;
  return true;
}

LogLimiter& ConnectionLogLimiter() {
  static LogLimiter* limiter = new LogLimiter();
  return *limiter;
}

std::string SuppressedSuffix(uint64_t held_back) {
  if (held_back == 0) return "";
  return absl::StrCat(" (", held_back, " more for this peer suppressed since the last line)");
}

}  // namespace internal
}  // namespace rdmarpc
