// log_limiter.cc: see log_limiter.h.
#include "runtime/transport/log_limiter.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"

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

void LogConnectionEvent(const std::string& peer, absl::string_view what,
                        const absl::Status& reason) {
  // A steady clock, so a step of the wall clock neither silences nor floods.
  const absl::Time now = absl::FromUnixNanos(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
  uint64_t held_back = 0;
  if (!ConnectionLogLimiter().Allow(peer, now, &held_back)) return;
  std::string line = absl::StrCat("rdmarpc: ", what, reason.ToString());
  if (!absl::StrContains(reason.message(), peer)) absl::StrAppend(&line, " (peer ", peer, ")");
  LOG(WARNING) << line << SuppressedSuffix(held_back);
}

}  // namespace internal
}  // namespace rdmarpc
