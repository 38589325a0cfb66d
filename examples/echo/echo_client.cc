// echo_client: calls rdmarpc.examples.EchoService.Echo K times and checks
// every reply byte for byte.
//
//   echo_client --server=127.0.0.1:7000 --payload_bytes=32 --count=1000
//               [--concurrency=4] [--async] [--attachment] [--deadline_ms=20]
//               [--server_delay_ms=200]
//
// --attachment sends the payload as an rdmarpc::Buffer attachment beside an
// empty message (rdmarpc/buffer.h) instead of in the message's bytes field:
// above the eager limit each side's NIC reads the other's buffer directly,
// with no serialisation or copy by rdmarpc.
//
// --concurrency calls are in flight at once: one thread per call making
// blocking calls, or with --async one thread driving the async stub API.
//
// The last line of output is the verdict, meant for scripts:
//   echo: ok calls=K payload_bytes=N p50_us=X p99_us=Y     (exit 0)
//   echo: <STATUS_CODE> <message>                          (exit 1)
//   echo: DATA_LOSS mismatch at call I byte J              (exit 1)
// Latencies are per call, from issuing it to having the response, in µs.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "echo.pb.h"
#include "echo.rdmarpc.pb.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(server, "127.0.0.1:7000",
              "Echo server target: HOST:PORT, a comma-separated list, [IPV6]:PORT, "
              "ipv4:/ipv6: lists, dns:[//DNS_SERVER/]NAME:PORT or etcd://HOST:PORT/PREFIX");
DEFINE_uint64(payload_bytes, 32, "Payload size of each call, in bytes");
DEFINE_uint64(count, 1000, "Number of calls");
DEFINE_int32(concurrency, 1, "Calls in flight at once");
DEFINE_bool(async, false,
            "Keep the calls in flight with the async stub API from one thread, "
            "instead of one thread per call making blocking calls");
DEFINE_bool(attachment, false,
            "Send the payload as an rdmarpc::Buffer attachment instead of in the message");
DEFINE_int64(deadline_ms, 0, "Deadline of each call in milliseconds; 0 = none");
DEFINE_uint32(server_delay_ms, 0, "Ask the server to sleep this long per call, in ms");
DEFINE_string(service_config, "",
              "gRPC service config JSON for the channel: per-method retryPolicy or "
              "hedgingPolicy, retryThrottling, loadBalancingConfig (see the README, "
              "\"Retries and hedging\")");
DEFINE_int64(connect_timeout_ms, 3000,
             "Time allowed to set up a connection, in ms; a stopped server "
             "must be reported well within the deadline scripts allow");

namespace {

using rdmarpc::examples::EchoRequest;
using rdmarpc::examples::EchoResponse;
using rdmarpc::examples::EchoService;

// SplitMix64 (Steele, Lea, Flood 2014): a cheap generator whose output for
// consecutive inputs looks random, so every call gets its own pattern and a
// reply from the wrong call, a shifted buffer or a stale region shows up as
// a mismatch, which a constant or counting pattern could hide.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The payload of call `call`: `size` bytes, a function of (call, offset).
std::string MakePayload(uint64_t call, size_t size) {
  std::string payload(size, '\0');
  const uint64_t seed = SplitMix64(call + 1);
  for (size_t word = 0; word * 8 < size; ++word) {
    uint64_t bits = SplitMix64(seed ^ word);
    for (size_t k = 0; k < 8 && word * 8 + k < size; ++k) {
      payload[word * 8 + k] = static_cast<char>(bits >> (8 * k));
    }
  }
  return payload;
}

// Offset of the first byte where `got` differs from `want` (or where the
// shorter one ends); nullopt when they are equal.
std::optional<size_t> FirstMismatch(const std::string& want, const std::string& got) {
  if (want == got) return std::nullopt;
  size_t n = std::min(want.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    if (want[i] != got[i]) return i;
  }
  return n;
}

// Nearest-rank percentile of sorted samples, `p` in (0, 1].
int64_t Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

// Shared by the callers (threads, or the --async driver): hands out call
// numbers, collects latencies, and keeps the first failure, after which no
// new call starts.
class Run {
 public:
  explicit Run(uint64_t count) : count_(count), latencies_us_(count, 0) {}

  // Next call number, or nullopt when all are issued or a call has failed.
  std::optional<uint64_t> NextCall() {
    if (failed_.load(std::memory_order_acquire)) return std::nullopt;
    uint64_t call = next_.fetch_add(1, std::memory_order_relaxed);
    if (call >= count_) return std::nullopt;
    return call;
  }

  // Each call number is handed to exactly one thread, so slots never race.
  void RecordLatency(uint64_t call, int64_t micros) { latencies_us_[call] = micros; }

  void Fail(std::string line) {
    absl::MutexLock lock(&mu_);
    if (!failure_.has_value()) failure_ = std::move(line);
    failed_.store(true, std::memory_order_release);
  }

  std::optional<std::string> failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  std::vector<int64_t>& latencies_us() { return latencies_us_; }

 private:
  const uint64_t count_;
  std::atomic<uint64_t> next_{0};
  std::atomic<bool> failed_{false};
  std::vector<int64_t> latencies_us_;
  absl::Mutex mu_;
  std::optional<std::string> failure_ ABSL_GUARDED_BY(mu_);
};

// The payload of call `call`, in the message or (--attachment) as the
// context's request attachment: `*buffer`, the caller's, refilled for each
// of its calls (a Buffer is registered with the channel's device on its
// first call, so reusing one saves a registration per call).
void SetPayload(uint64_t call, EchoRequest* request, rdmarpc::ClientContext* context,
                rdmarpc::Buffer* buffer) {
  std::string payload = MakePayload(call, FLAGS_payload_bytes);
  if (FLAGS_attachment) {
    request->clear_payload();
    if (buffer->size() != payload.size()) *buffer = rdmarpc::Buffer::Allocate(payload.size());
    std::copy(payload.begin(), payload.end(), buffer->data());
    context->set_request_attachment(*buffer);
  } else {
    request->set_payload(std::move(payload));
  }
}

// The verdict line for a finished call, or nullopt when it succeeded and the
// reply matches the request byte for byte (message and attachment).
std::optional<std::string> CheckReply(uint64_t call, const absl::Status& status,
                                      const EchoRequest& request, const EchoResponse& response,
                                      const rdmarpc::ClientContext& context) {
  if (!status.ok()) {
    return absl::StrCat("echo: ", absl::StatusCodeToString(status.code()), " ", status.message(),
                        " (call ", call, ")");
  }
  const std::string sent_attachment(context.request_attachment().view());
  const std::string got_attachment(context.response_attachment().view());
  for (const auto& [what, sent, got] :
       {std::make_tuple("payload", &request.payload(), &response.payload()),
        std::make_tuple("attachment", &sent_attachment, &got_attachment)}) {
    if (std::optional<size_t> byte = FirstMismatch(*sent, *got)) {
      LOG(ERROR) << "call " << call << ": sent a " << what << " of " << sent->size()
                 << " bytes, got " << got->size() << ", first difference at byte " << *byte;
      return absl::StrCat("echo: DATA_LOSS mismatch at call ", call, " byte ", *byte,
                          FLAGS_attachment ? " of the attachment" : "");
    }
  }
  return std::nullopt;
}

// --concurrency threads, each making blocking calls one after another.
void CallerThread(EchoService::Stub* stub, Run* run) {
  EchoRequest request;
  EchoResponse response;
  rdmarpc::Buffer attachment;
  request.set_server_delay_ms(FLAGS_server_delay_ms);
  while (std::optional<uint64_t> call = run->NextCall()) {
    response.Clear();
    rdmarpc::ClientContext context;
    SetPayload(*call, &request, &context, &attachment);
    if (FLAGS_deadline_ms > 0) context.set_timeout(absl::Milliseconds(FLAGS_deadline_ms));
    absl::Time start = absl::Now();
    absl::Status status = stub->Echo(&context, request, &response);
    run->RecordLatency(*call, absl::ToInt64Microseconds(absl::Now() - start));
    if (std::optional<std::string> failure =
            CheckReply(*call, status, request, response, context)) {
      run->Fail(*std::move(failure));
      return;
    }
  }
}

void RunWithThreads(EchoService::Stub* stub, Run* run, int concurrency) {
  std::vector<std::thread> callers;
  callers.reserve(concurrency);
  for (int i = 0; i < concurrency; ++i) callers.emplace_back(CallerThread, stub, run);
  for (std::thread& t : callers) t.join();
}

// --async: one thread keeps `concurrency` calls in flight with the async
// stub. Completion callbacks run on the channel's engine thread, so they only
// note the finish time and queue the slot; checking bytes and issuing the
// next call happen here, keeping the engine thread free to poll.
void RunAsync(EchoService::Stub* stub, Run* run, int concurrency) {
  struct Slot {
    uint64_t call = 0;
    EchoRequest request;
    EchoResponse response;
    std::unique_ptr<rdmarpc::ClientContext> context;
    rdmarpc::Buffer attachment;  // --attachment: this slot's, reused
    absl::Time start;
    absl::Time end;         // written by the callback, read after the queue hand-off
    absl::Status status;    // likewise
  };
  std::vector<Slot> slots(concurrency);
  // Slots whose call finished, handed from the engine thread to this one.
  struct Finished {
    absl::Mutex mu;
    std::vector<int> slots ABSL_GUARDED_BY(mu);
  } finished;

  auto issue = [&](int i, uint64_t call) {
    Slot& slot = slots[i];
    slot.call = call;
    slot.request.set_server_delay_ms(FLAGS_server_delay_ms);
    slot.response.Clear();
    // A fresh context per call, as the ClientContext contract asks.
    slot.context = std::make_unique<rdmarpc::ClientContext>();
    SetPayload(call, &slot.request, slot.context.get(), &slot.attachment);
    if (FLAGS_deadline_ms > 0) slot.context->set_timeout(absl::Milliseconds(FLAGS_deadline_ms));
    slot.start = absl::Now();
    stub->async()->Echo(slot.context.get(), slot.request, &slot.response,
                        [&slots, &finished, i](absl::Status status) {
                          slots[i].end = absl::Now();
                          slots[i].status = std::move(status);
                          absl::MutexLock lock(&finished.mu);
                          finished.slots.push_back(i);
                        });
  };

  int in_flight = 0;
  for (int i = 0; i < concurrency; ++i) {
    std::optional<uint64_t> call = run->NextCall();
    if (!call) break;
    ++in_flight;
    issue(i, *call);
  }
  std::vector<int> ready;
  while (in_flight > 0) {
    {
      absl::MutexLock lock(&finished.mu,
                           absl::Condition(
                               +[](std::vector<int>* v) { return !v->empty(); }, &finished.slots));
      ready.swap(finished.slots);
    }
    for (int i : ready) {
      --in_flight;
      Slot& slot = slots[i];
      run->RecordLatency(slot.call, absl::ToInt64Microseconds(slot.end - slot.start));
      if (std::optional<std::string> failure =
              CheckReply(slot.call, slot.status, slot.request, slot.response, *slot.context)) {
        run->Fail(*std::move(failure));  // stops NextCall; the rest drain below
      }
      if (std::optional<uint64_t> call = run->NextCall()) {
        ++in_flight;
        issue(i, *call);
      }
    }
    ready.clear();
  }
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "echo_client --server=TARGET --payload_bytes=N --count=K [--concurrency=C] "
      "[--async] [--attachment] [--deadline_ms=D] [--server_delay_ms=S]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  if (FLAGS_count == 0 || FLAGS_concurrency < 1 || FLAGS_deadline_ms < 0 ||
      FLAGS_connect_timeout_ms <= 0) {
    printf("echo: INVALID_ARGUMENT need --count >= 1 (got %lu), --concurrency >= 1 (got %d), "
           "--deadline_ms >= 0 (got %ld), --connect_timeout_ms > 0 (got %ld)\n",
           static_cast<unsigned long>(FLAGS_count), FLAGS_concurrency,
           static_cast<long>(FLAGS_deadline_ms), static_cast<long>(FLAGS_connect_timeout_ms));
    return 2;
  }

  // --rdmarpc_admin_listen=HOST:PORT serves /metrics, /statusz and /healthz
  // while the client runs (rdmarpc/admin.h).
  absl::StatusOr<std::unique_ptr<rdmarpc::AdminServer>> admin =
      rdmarpc::AdminServer::StartFromFlags();
  if (!admin.ok()) {
    fprintf(stderr, "%s: %s\n", argv[0], admin.status().ToString().c_str());
    return 2;
  }

  rdmarpc::ChannelOptions options;
  options.connect_timeout = absl::Milliseconds(FLAGS_connect_timeout_ms);
  options.service_config_json = FLAGS_service_config;
  // Room for the largest payload plus the protobuf framing around it.
  options.max_message_bytes = std::max<size_t>(options.max_message_bytes,
                                               FLAGS_payload_bytes + 4096);
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(FLAGS_server, options);
  if (!channel.ok()) {
    printf("echo: %s %s\n", absl::StatusCodeToString(channel.status().code()).c_str(),
           std::string(channel.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<EchoService::Stub> stub = EchoService::NewStub(*channel);

  Run run(FLAGS_count);
  // Never more callers than calls.
  int threads = static_cast<int>(
      std::min<uint64_t>(static_cast<uint64_t>(FLAGS_concurrency), FLAGS_count));
  if (FLAGS_async) {
    RunAsync(stub.get(), &run, threads);
  } else {
    RunWithThreads(stub.get(), &run, threads);
  }

  if (std::optional<std::string> failure = run.failure()) {
    printf("%s\n", failure->c_str());
    fflush(stdout);
    return 1;
  }
  std::vector<int64_t>& latencies = run.latencies_us();
  std::sort(latencies.begin(), latencies.end());
  printf("echo: ok calls=%lu payload_bytes=%lu p50_us=%ld p99_us=%ld\n",
         static_cast<unsigned long>(FLAGS_count), static_cast<unsigned long>(FLAGS_payload_bytes),
         static_cast<long>(Percentile(latencies, 0.50)),
         static_cast<long>(Percentile(latencies, 0.99)));
  fflush(stdout);
  return 0;
}
