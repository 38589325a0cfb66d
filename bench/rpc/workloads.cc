// workloads.cc: latency, closed-loop throughput, verbs budget, server
// streaming and small calls next to large ones (workloads.h).
#include "bench/rpc/workloads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rdmarpc {
namespace rpcbench {

EchoRequest MakeRequest(size_t size) {
  EchoRequest request;
  std::string payload(size, '\0');
  // Not constant, so a reply from a shifted or stale buffer cannot match.
  for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>((i * 131 + 7) >> 3);
  request.set_payload(std::move(payload));
  return request;
}

absl::Status CheckEcho(absl::string_view what, absl::string_view sent, absl::string_view got,
                       bool whole) {
  if (got.size() != sent.size()) {
    return absl::DataLossError(
        absl::StrCat(what, ": sent ", sent.size(), " bytes, echo has ", got.size()));
  }
  auto differs_at = [&](size_t begin, size_t end) -> size_t {
    auto at = std::mismatch(sent.begin() + begin, sent.begin() + end, got.begin() + begin).first;
    return at == sent.begin() + end ? sent.size() : static_cast<size_t>(at - sent.begin());
  };
  size_t bad = sent.size();
  if (whole || sent.size() <= 3 * kEchoWindowBytes) {
    bad = differs_at(0, sent.size());
  } else {
    const size_t mid = sent.size() / 2 - kEchoWindowBytes / 2;
    for (size_t begin : {size_t{0}, mid, sent.size() - kEchoWindowBytes}) {
      bad = differs_at(begin, begin + kEchoWindowBytes);
      if (bad != sent.size()) break;
    }
  }
  if (bad == sent.size()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(what, ": echo of ", sent.size(),
                                          " bytes differs at offset ", bad, " (sent ",
                                          static_cast<int>(static_cast<uint8_t>(sent[bad])),
                                          ", got ", static_cast<int>(static_cast<uint8_t>(got[bad])),
                                          ")"));
}

// Nearest-rank percentile of sorted samples, p in (0, 1].
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<LatencyResult> MeasureLatency(EchoClient& client, size_t size,
                                             const LatencyOptions& options) {
  EchoRequest request = MakeRequest(size);
  EchoResponse response;
  for (int64_t i = 0; i < options.warmup_calls; ++i) {
    absl::Status status = client.Echo(request, &response);
    if (!status.ok()) return status;
  }
  std::vector<double> samples_us;
  samples_us.reserve(static_cast<size_t>(std::min<int64_t>(options.max_calls, 1 << 20)));
  const CpuSample cpu_before = TakeCpuSample();
  const Clock::time_point begin = Clock::now();
  while (static_cast<int64_t>(samples_us.size()) < options.max_calls &&
         (samples_us.empty() || SecondsSince(begin) < options.max_seconds)) {
    response.Clear();
    const Clock::time_point start = Clock::now();
    absl::Status status = client.Echo(request, &response);
    const Clock::time_point end = Clock::now();
    if (!status.ok()) return status;
    if (response.payload() != request.payload()) {
      return absl::DataLossError(absl::StrCat("echo of ", size, " bytes came back as ",
                                              response.payload().size(), " different bytes"));
    }
    samples_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  const CpuSample cpu_after = TakeCpuSample();
  LatencyResult r;
  r.size_bytes = size;
  r.calls = samples_us.size();
  r.cpu = PerCall(cpu_before, cpu_after, r.calls);
  double sum = 0;
  for (double s : samples_us) sum += s;
  std::sort(samples_us.begin(), samples_us.end());
  r.p50_us = Percentile(samples_us, 0.50);
  r.p99_us = Percentile(samples_us, 0.99);
  r.p999_us = Percentile(samples_us, 0.999);
  r.max_us = samples_us.back();
  r.mean_us = sum / static_cast<double>(samples_us.size());
  return r;
}

namespace {

// Keeps `in_flight` calls of `size` bytes going on one client with the async
// API: each completion starts the next call from the completion thread (a
// closed loop), until Stop() or `max_calls` calls were started.
class ClosedLoop {
 public:
  ClosedLoop(EchoClient* client, size_t size, int in_flight, uint64_t max_calls,
             bool buffer_payload = false)
      : client_(client),
        max_calls_(max_calls),
        size_(size),
        buffer_payload_(buffer_payload),
        slots_(static_cast<size_t>(in_flight)) {
    for (Slot& slot : slots_) slot.request = MakeRequest(buffer_payload ? 0 : size);
  }
  // Waits for the last Done() to leave mu_ (as absl::Notification's
  // destructor does): Wait() can return while it is still unlocking.
  ~ClosedLoop() { absl::MutexLock lock(&mu_); }

  void Start() {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!Issue(i)) break;
    }
  }
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }

  // Waits until no call is in flight (after Stop or max_calls); returns the
  // first failure.
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
    return first_error_;
  }

 private:
  struct Slot {
    EchoRequest request;
    EchoResponse response;
    bool checked_whole = false;  // an echo of this slot was compared byte for byte
  };

  // Starts a call on slot i unless stopped or out of calls; false when not.
  bool Issue(size_t i) {
    if (stop_.load(std::memory_order_relaxed) ||
        started_.fetch_add(1, std::memory_order_relaxed) >= max_calls_) {
      return false;
    }
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    if (buffer_payload_) {
      client_->AsyncEchoAttachment(static_cast<int>(i), size_,
                                   [this, i](absl::Status status) { Done(i, std::move(status)); });
      return true;
    }
    slots_[i].response.Clear();
    client_->AsyncEcho(slots_[i].request, &slots_[i].response,
                       [this, i](absl::Status status) { Done(i, std::move(status)); });
    return true;
  }

  void Done(size_t i, absl::Status status) {
    if (status.ok() && !buffer_payload_) {
      status = CheckEcho("closed loop", slots_[i].request.payload(), slots_[i].response.payload(),
                         /*whole=*/!slots_[i].checked_whole);
      slots_[i].checked_whole = true;
    }
    if (status.ok()) {
      completed_.fetch_add(1, std::memory_order_relaxed);
    } else {
      stop_.store(true, std::memory_order_relaxed);
      absl::MutexLock lock(&mu_);
      if (first_error_.ok()) first_error_ = status;
    }
    Issue(i);
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  EchoClient* const client_;
  const uint64_t max_calls_;
  const size_t size_;
  const bool buffer_payload_;
  std::vector<Slot> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> completed_{0};
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<ThroughputResult> MeasureThroughput(const std::vector<EchoClient*>& clients,
                                                   size_t size, int in_flight, double seconds,
                                                   double warmup_seconds, bool buffer_payload) {
  std::vector<std::unique_ptr<ClosedLoop>> loops;
  for (EchoClient* client : clients) {
    loops.push_back(std::make_unique<ClosedLoop>(
        client, size, in_flight, std::numeric_limits<uint64_t>::max(), buffer_payload));
  }
  auto total = [&loops] {
    uint64_t n = 0;
    for (auto& loop : loops) n += loop->completed();
    return n;
  };
  // The completion threads carry the loops; this thread only starts them.
  for (auto& loop : loops) loop->Start();
  absl::SleepFor(absl::Seconds(warmup_seconds));
  // The warm-up also lasts until every client finished a call (connection
  // set-up, rendezvous pools growing), up to 10 s more; a failed loop has
  // stopped and its error shows at Wait below.
  const Clock::time_point warm_limit = Clock::now() + std::chrono::seconds(10);
  for (auto& loop : loops) {
    while (loop->completed() == 0 && !loop->stopped() && Clock::now() < warm_limit) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  const CpuSample cpu_before = TakeCpuSample();
  const uint64_t before = total();
  const Clock::time_point begin = Clock::now();
  absl::SleepFor(absl::Seconds(seconds));
  const uint64_t after = total();
  const double elapsed = SecondsSince(begin);
  const CpuSample cpu_after = TakeCpuSample();
  absl::Status status;
  for (auto& loop : loops) loop->Stop();
  for (auto& loop : loops) {
    absl::Status s = loop->Wait();
    if (status.ok()) status = s;
  }
  if (!status.ok()) return status;
  ThroughputResult r;
  r.size_bytes = size;
  r.threads = static_cast<int>(clients.size());
  r.in_flight_per_thread = in_flight;
  r.calls = after - before;
  r.seconds = elapsed;
  r.rpc_per_s = static_cast<double>(r.calls) / elapsed;
  r.gb_per_s = r.rpc_per_s * 2.0 * static_cast<double>(size) / 1e9;
  r.cpu = PerCall(cpu_before, cpu_after, r.calls);
  r.buffer_payload = buffer_payload;
  return r;
}

absl::StatusOr<BudgetResult> MeasureBudget(EchoClient& client, const BudgetRun& run,
                                           uint64_t calls) {
  // Warm up first, so connection set-up and pool growth are not counted.
  {
    EchoRequest request = MakeRequest(run.size_bytes);
    EchoResponse response;
    for (int i = 0; i < 10; ++i) {
      absl::Status status = client.Echo(request, &response);
      if (!status.ok()) return status;
    }
  }
  absl::StatusOr<VerbsCounters> server_before = client.ServerCounters();
  if (!server_before.ok()) return server_before.status();
  const VerbsCounters client_before = LocalCounters();
  if (run.in_flight == 1) {
    EchoRequest request = MakeRequest(run.size_bytes);
    EchoResponse response;
    for (uint64_t i = 0; i < calls; ++i) {
      absl::Status status = client.Echo(request, &response);
      if (!status.ok()) return status;
    }
  } else {
    ClosedLoop loop(&client, run.size_bytes, run.in_flight, calls);
    loop.Start();
    absl::Status status = loop.Wait();
    if (!status.ok()) return status;
  }
  const VerbsCounters client_after = LocalCounters();
  absl::StatusOr<VerbsCounters> server_after = client.ServerCounters();
  if (!server_after.ok()) return server_after.status();
  BudgetResult r;
  r.size_bytes = run.size_bytes;
  r.in_flight = run.in_flight;
  r.calls = calls;
  r.client = client_after - client_before;
  r.server = *server_after - *server_before;
  return r;
}

StreamResult SummariseStreamRuns(size_t size, uint64_t messages,
                                 const std::vector<double>& run_seconds) {
  StreamResult r;
  r.size_bytes = size;
  r.messages_per_run = messages;
  r.run_seconds = run_seconds;
  std::vector<double> sorted = run_seconds;
  std::sort(sorted.begin(), sorted.end());
  r.median_seconds = Percentile(sorted, 0.5);
  if (r.median_seconds > 0) {
    r.messages_per_s = static_cast<double>(messages) / r.median_seconds;
    r.mb_per_s = r.messages_per_s * static_cast<double>(size) / 1e6;
  }
  return r;
}

absl::StatusOr<StreamResult> MeasureStream(EchoClient& client, size_t size, uint64_t messages,
                                           int runs) {
  const std::string expected = MakeRequest(size).payload();
  // One stream of `count` messages; its seconds from opening to status.
  auto read = [&](uint64_t count) -> absl::StatusOr<double> {
    StreamRequest request;
    request.set_count(count);
    request.set_size(size);
    uint64_t received = 0;
    const Clock::time_point start = Clock::now();
    absl::Status status = client.ReadStream(request, [&](const EchoResponse& m) -> absl::Status {
      if (m.payload().size() != size || (received == 0 && m.payload() != expected)) {
        return absl::DataLossError(absl::StrCat("stream message ", received, " has ",
                                                m.payload().size(), " bytes, not the ", size,
                                                " asked for (or different bytes)"));
      }
      ++received;
      return absl::OkStatus();
    });
    const double seconds = SecondsSince(start);
    if (!status.ok()) return status;
    if (received != count) {
      return absl::DataLossError(
          absl::StrCat("stream of ", count, " messages ended OK after ", received));
    }
    return seconds;
  };
  absl::StatusOr<double> warm = read(100);
  if (!warm.ok()) return warm.status();
  std::vector<double> run_seconds;
  for (int i = 0; i < runs; ++i) {
    absl::StatusOr<double> seconds = read(messages);
    if (!seconds.ok()) return seconds.status();
    run_seconds.push_back(*seconds);
  }
  return SummariseStreamRuns(size, messages, run_seconds);
}

namespace {

// Blocking calls of one size back to back on a thread of its own, from
// construction until Stop (or the first failure).
class LargeCallLoad {
 public:
  LargeCallLoad(EchoClient* client, size_t size)
      : client_(client), request_(MakeRequest(size)), thread_([this] { Run(); }) {}
  ~LargeCallLoad() { Stop().IgnoreError(); }

  // Calls completed so far and when the last of them did.
  struct Progress {
    uint64_t calls = 0;
    Clock::time_point last_end;
  };
  // Waits until more than `calls` calls completed or the thread ended, up
  // to `timeout`; returns the progress then.
  Progress WaitForMoreThan(uint64_t calls, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto more = [this, calls]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return completed_ > calls || ended_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&more), timeout);
    return Progress{completed_, last_end_};
  }
  // Ends the loop after the call in flight, joins the thread, and returns
  // the first failure. Idempotent.
  absl::Status Stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  void Run() {
    EchoResponse response;
    bool checked_whole = false;
    while (!stop_.load(std::memory_order_relaxed)) {
      response.Clear();
      absl::Status status = client_->Echo(request_, &response);
      const Clock::time_point end = Clock::now();
      if (status.ok()) {
        status = CheckEcho("background loop", request_.payload(), response.payload(),
                           /*whole=*/!checked_whole);
        checked_whole = true;
      }
      absl::MutexLock lock(&mu_);
      if (!status.ok()) {
        error_ = status;
        break;
      }
      ++completed_;
      last_end_ = end;
    }
    absl::MutexLock lock(&mu_);
    ended_ = true;
  }

  EchoClient* const client_;
  const EchoRequest request_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point last_end_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace

absl::StatusOr<MixedResult> MeasureMixed(EchoClient& client, const MixedOptions& options) {
  MixedResult r;
  r.small_size_bytes = options.small_size;
  r.large_size_bytes = options.large_size;
  {
    // Registers the large buffers on both sides before anything is timed.
    EchoRequest request = MakeRequest(options.large_size);
    EchoResponse response;
    absl::Status status = client.Echo(request, &response);
    if (!status.ok()) return status;
  }
  absl::StatusOr<LatencyResult> alone = MeasureLatency(client, options.small_size, options.small);
  if (!alone.ok()) return alone.status();
  r.alone = *alone;

  LargeCallLoad load(&client, options.large_size);
  // The window of the large calls' throughput runs from one large call's
  // end to another's, so it holds whole calls only: from the first one's
  // end until the last one to end while the small calls ran (or the first
  // to end after them, when none did).
  constexpr absl::Duration kCallTimeout = absl::Seconds(30);
  auto no_progress = [&options, kCallTimeout] {
    return absl::DeadlineExceededError(absl::StrCat("no ", options.large_size,
                                                    "-byte call completed within ",
                                                    absl::FormatDuration(kCallTimeout)));
  };
  const LargeCallLoad::Progress first = load.WaitForMoreThan(0, kCallTimeout);
  if (first.calls == 0) {
    absl::Status status = load.Stop();
    return status.ok() ? no_progress() : status;
  }
  absl::StatusOr<LatencyResult> loaded = MeasureLatency(client, options.small_size, options.small);
  LargeCallLoad::Progress last = load.WaitForMoreThan(0, absl::ZeroDuration());
  if (last.calls <= first.calls) last = load.WaitForMoreThan(first.calls, kCallTimeout);
  absl::Status load_status = load.Stop();
  if (!loaded.ok()) return loaded.status();
  if (!load_status.ok()) return load_status;
  if (last.calls <= first.calls) return no_progress();
  r.loaded = *loaded;
  r.large_calls = last.calls - first.calls;
  r.large_seconds = std::chrono::duration<double>(last.last_end - first.last_end).count();
  if (r.large_seconds > 0) {
    r.large_calls_per_s = static_cast<double>(r.large_calls) / r.large_seconds;
    r.large_gb_per_s =
        r.large_calls_per_s * 2.0 * static_cast<double>(options.large_size) / 1e9;
  }
  return r;
}

}  // namespace rpcbench
}  // namespace rdmarpc
