// warning_sink.h: collects rdmarpc's WARNING-and-worse log lines (those
// starting "rdmarpc: ") while it lives, for tests that check what the
// runtime logs.
#ifndef RDMARPC_TESTS_RPC_WARNING_SINK_H_
#define RDMARPC_TESTS_RPC_WARNING_SINK_H_

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"

namespace rdmarpc {
namespace test {

class WarningSink : public google::LogSink {
 public:
  WarningSink() { google::AddLogSink(this); }
  ~WarningSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t message_len) override {
    if (severity < google::GLOG_WARNING) return;
    std::string line(message, message_len);
    if (!absl::StartsWith(line, "rdmarpc: ")) return;
    absl::MutexLock l(&mu_);
    lines_.push_back(std::move(line));
  }
  // The lines containing `what`, in the order logged.
  std::vector<std::string> LinesWith(absl::string_view what) {
    absl::MutexLock l(&mu_);
    std::vector<std::string> out;
    for (const std::string& s : lines_) {
      if (absl::StrContains(s, what)) out.push_back(s);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_WARNING_SINK_H_
