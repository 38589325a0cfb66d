// soak: calls for a given time against several server processes while they
// are killed and restarted, connections drop, and calls are cancelled or
// run out of deadline at random points; every payload is checked byte for
// byte. It ends with the accounting, and fails (exit 1) unless:
//   calls issued == terminal statuses seen (each call's end seen exactly
//   once: 0 duplicates, 0 missing), 0 wrong payloads, and this process's
//   QPs, MRs, memory windows, CQs, PDs, cm ids and fds back to their
//   baseline once the channel is gone.
//
//   soak --duration_s=1800 [--servers=3] [--client_threads=4] [--in_flight=16]
//        [--kill_every_ms=4000] [--drop_every_ms=1500] [--max_payload_bytes=1048576]
//        [--cancel_percent=5] [--seed=1]
//
// The servers are this binary again (--role=server), restarted on the same
// port after a SIGKILL. Output: one "soak: ..." progress line every 10 s, then
// "soak: issued=... ok=... <code>=... duplicates=0 wrong_payloads=0 ..." and
// "soak: PASS" or "soak: FAIL <why>".
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/faults.h"
#include "runtime/softrdma/softrdma.h"
#include "soak.pb.h"
#include "soak.rdmarpc.pb.h"

DEFINE_string(role, "client", "client (the soak) or server (started by the client)");
DEFINE_string(listen, "127.0.0.1:0", "server role: address to listen on");
DEFINE_int32(duration_s, 60, "How long to issue calls, in seconds");
DEFINE_int32(servers, 3, "Server processes");
DEFINE_int32(client_threads, 4, "Threads issuing calls");
DEFINE_int32(in_flight, 16, "Calls in flight per client thread");
DEFINE_int32(kill_every_ms, 4000, "SIGKILL a random server this often (0: never)");
DEFINE_int32(restart_after_ms, 300, "A killed server comes back after this long");
DEFINE_int32(drop_every_ms, 1500, "Drop a client connection's link this often (0: never)");
DEFINE_uint64(max_payload_bytes, 1 << 20, "Largest payload; sizes are log-uniform from 0");
DEFINE_int32(cancel_percent, 5, "Percent of calls cancelled at a random point");
DEFINE_int32(deadline_percent, 10, "Percent of calls with a deadline short enough to expire");
DEFINE_uint64(seed, 1, "Random seed");

namespace {

using rdmarpc::soak::Payload;

char PatternByte(uint64_t call_id, size_t i) {
  return static_cast<char>((call_id * 0x9E3779B97F4A7C15ull + i * 2654435761u) >> 29);
}

std::string PatternBytes(uint64_t call_id, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = PatternByte(call_id, i);
  return s;
}

class SoakService final : public rdmarpc::soak::Soak::Service {
 public:
  absl::Status Echo(rdmarpc::ServerContext*, const Payload& request, Payload* response) override {
    if (request.server_delay_us() > 0) {
      absl::SleepFor(absl::Microseconds(request.server_delay_us()));
    }
    *response = request;
    return absl::OkStatus();
  }
};

int RunServer() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  SoakService service;
  rdmarpc::ServerOptions options;
  options.max_message_bytes = FLAGS_max_payload_bytes + 4096;
  rdmarpc::Server server(options);
  if (!server.AddService(&service).ok()) return 1;
  if (absl::Status s = server.Start(FLAGS_listen); !s.ok()) {
    fprintf(stderr, "soak server: %s\n", s.ToString().c_str());
    return 1;
  }
  printf("listening on 127.0.0.1:%d\n", server.port());
  fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  server.Shutdown(absl::Seconds(1));
  server.Wait();
  return 0;
}

// One server process, restartable on its port.
class ServerProcess {
 public:
  explicit ServerProcess(std::string self) : self_(std::move(self)) {}
  // Starts it (on its old port when it had one); false when it did not say
  // "listening on" within 30 s.
  bool Start() {
    int out[2];
    if (pipe(out) != 0) return false;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string listen = absl::StrCat("--listen=127.0.0.1:", port_);
    const std::string payload = absl::StrCat("--max_payload_bytes=", FLAGS_max_payload_bytes);
    std::vector<std::string> args = {self_, "--role=server", listen, payload};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, self_.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc != 0) {
      close(out[0]);
      return false;
    }
    std::string line;
    char c;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline && read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
    close(out[0]);
    const size_t colon = line.rfind(':');
    if (line.rfind("listening on ", 0) != 0 || colon == std::string::npos) return false;
    port_ = std::stoi(line.substr(colon + 1));
    return true;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  int port() const { return port_; }

 private:
  const std::string self_;
  pid_t pid_ = 0;
  int port_ = 0;
};

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;
}

long RssKiB() {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f != nullptr) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

struct Footprint {
  softrdma::Stats stats;
  int fds = 0;
  std::string ToString() const {
    return absl::StrCat("qps=", stats.live_qps, " mrs=", stats.live_mrs, " mws=", stats.live_mws,
                        " cqs=", stats.live_cqs, " pds=", stats.live_pds,
                        " cm_ids=", stats.live_cm_ids, " fds=", fds);
  }
  bool SameAs(const Footprint& o) const {
    return stats.live_qps == o.stats.live_qps && stats.live_mrs == o.stats.live_mrs &&
           stats.live_mws == o.stats.live_mws && stats.live_cqs == o.stats.live_cqs && stats.live_pds == o.stats.live_pds &&
           stats.live_cm_ids == o.stats.live_cm_ids && fds == o.fds;
  }
  static Footprint Now() { return Footprint{softrdma::GetStats(), CountOpenFds()}; }
};

// The accounting: every call's end is recorded once by its id.
class Ledger {
 public:
  void Issued(uint64_t id) {
    absl::MutexLock l(&mu_);
    open_.emplace(id, true);
    ++issued_;
  }
  void Ended(uint64_t id, const absl::Status& s, bool payload_ok) {
    absl::MutexLock l(&mu_);
    if (open_.erase(id) == 0) {
      ++duplicates_;
      return;
    }
    ++by_code_[absl::StatusCodeToString(s.code())];
    if (!payload_ok) ++wrong_payloads_;
  }
  std::string Summary() {
    absl::MutexLock l(&mu_);
    std::string s = absl::StrCat("issued=", issued_);
    uint64_t ended = 0;
    for (const auto& [code, n] : by_code_) {
      absl::StrAppend(&s, " ", code, "=", n);
      ended += n;
    }
    absl::StrAppend(&s, " ended=", ended, " open=", open_.size(), " duplicates=", duplicates_,
                    " wrong_payloads=", wrong_payloads_);
    return s;
  }
  bool Balanced() {
    absl::MutexLock l(&mu_);
    return open_.empty() && duplicates_ == 0 && wrong_payloads_ == 0;
  }
  uint64_t issued() {
    absl::MutexLock l(&mu_);
    return issued_;
  }
  uint64_t ok() {
    absl::MutexLock l(&mu_);
    auto it = by_code_.find("OK");
    return it == by_code_.end() ? 0 : it->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, bool> open_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> by_code_ ABSL_GUARDED_BY(mu_);
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t wrong_payloads_ ABSL_GUARDED_BY(mu_) = 0;
};

// One async call and what it needs until its callback ran.
struct Call {
  uint64_t id = 0;
  size_t size = 0;
  rdmarpc::ClientContext context;
  Payload request;
  Payload response;
};

void ClientThread(rdmarpc::soak::Soak::Stub* stub, Ledger* ledger, std::atomic<uint64_t>* next_id,
                  absl::Time until, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Shared with the callbacks, which may outlive a drain that timed out.
  auto in_flight = std::make_shared<std::atomic<int>>(0);
  std::uniform_int_distribution<int> percent(0, 99);
  std::uniform_real_distribution<double> log_size(0,
                                                  std::log2(double(FLAGS_max_payload_bytes) + 1));
  while (absl::Now() < until) {
    if (in_flight->load() >= FLAGS_in_flight) {
      absl::SleepFor(absl::Microseconds(100));
      continue;
    }
    auto call = std::make_shared<Call>();
    call->id = next_id->fetch_add(1);
    call->size = static_cast<size_t>(std::exp2(log_size(rng))) - 1;
    call->request.set_call_id(call->id);
    call->request.set_data(PatternBytes(call->id, call->size));
    const bool short_deadline = percent(rng) < FLAGS_deadline_percent;
    if (short_deadline) call->request.set_server_delay_us(static_cast<uint32_t>(rng() % 3000));
    call->context.set_deadline(
        absl::Now() + (short_deadline ? absl::Microseconds(rng() % 2000) : absl::Seconds(10)));
    const bool cancel = percent(rng) < FLAGS_cancel_percent;
    ledger->Issued(call->id);
    in_flight->fetch_add(1);
    stub->async()->Echo(&call->context, call->request, &call->response,
                        [ledger, call, in_flight](absl::Status s) {
                          bool payload_ok = true;
                          if (s.ok()) {
                            payload_ok = call->response.call_id() == call->id &&
                                         call->response.data() == call->request.data();
                          }
                          ledger->Ended(call->id, s, payload_ok);
                          in_flight->fetch_sub(1);
                        });
    if (cancel) {
      absl::SleepFor(absl::Microseconds(rng() % 500));
      call->context.TryCancel();
    }
  }
  // Every call ends by its deadline (10 s at most) or the channel's end.
  const absl::Time drain_until = absl::Now() + absl::Seconds(30);
  while (in_flight->load() > 0 && absl::Now() < drain_until) absl::SleepFor(absl::Milliseconds(5));
}

// What /proc/self/fd links to, for a footprint that did not come back.
std::string OpenFds() {
  std::vector<std::string> out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return "";
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[512];
    const std::string path = absl::StrCat("/proc/self/fd/", e->d_name);
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    out.push_back(absl::StrCat(e->d_name, "->", n > 0 ? std::string(target, n) : "?"));
  }
  closedir(d);
  return absl::StrJoin(out, " ");
}

int RunClient(const std::string& self) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < FLAGS_servers; ++i) {
    servers.push_back(std::make_unique<ServerProcess>(self));
    if (!servers.back()->Start()) {
      printf("soak: FAIL server %d did not start\n", i);
      return 1;
    }
    addresses.push_back(absl::StrCat("127.0.0.1:", servers.back()->port()));
  }
  // The baseline: after one call on a channel that is gone again, so what
  // the process keeps for good (softrdma's progress thread, the device
  // list) is in it.
  {
    auto warm = rdmarpc::CreateChannel(addresses[0]);
    if (!warm.ok()) return 1;
    rdmarpc::ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(10));
    Payload req, resp;
    if (absl::Status s = rdmarpc::soak::Soak::NewStub(*warm)->Echo(&ctx, req, &resp); !s.ok()) {
      printf("soak: FAIL warm-up call: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  absl::SleepFor(absl::Milliseconds(500));
  const Footprint baseline = Footprint::Now();
  const std::string baseline_fds = OpenFds();
  const long rss_before = RssKiB();
  Ledger ledger;
  long rss_peak = 0;
  {
    rdmarpc::ChannelOptions options;
    options.max_message_bytes = FLAGS_max_payload_bytes + 4096;
    options.connect_timeout = absl::Seconds(2);
    auto channel = rdmarpc::CreateChannel(absl::StrJoin(addresses, ","), options);
    if (!channel.ok()) {
      printf("soak: FAIL %s\n", channel.status().ToString().c_str());
      return 1;
    }
    auto stub = rdmarpc::soak::Soak::NewStub(*channel);
    const absl::Time start = absl::Now();
    const absl::Time until = start + absl::Seconds(FLAGS_duration_s);
    std::atomic<uint64_t> next_id{1};
    std::vector<std::thread> threads;
    for (int t = 0; t < FLAGS_client_threads; ++t) {
      threads.emplace_back(ClientThread, stub.get(), &ledger, &next_id, until,
                           FLAGS_seed * 1000 + t);
    }
    // Chaos: kills, restarts, link drops; a progress line every 10 s.
    std::mt19937_64 rng(FLAGS_seed);
    absl::Time next_kill = start + absl::Milliseconds(FLAGS_kill_every_ms);
    absl::Time next_drop = start + absl::Milliseconds(FLAGS_drop_every_ms);
    absl::Time next_report = start + absl::Seconds(10);
    int kills = 0, drops = 0, restart_failures = 0;
    while (absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(20));
      const absl::Time now = absl::Now();
      if (FLAGS_kill_every_ms > 0 && now >= next_kill) {
        ServerProcess* victim = servers[rng() % servers.size()].get();
        victim->Kill();
        ++kills;
        absl::SleepFor(absl::Milliseconds(FLAGS_restart_after_ms));
        bool started = false;
        for (int attempt = 0; attempt < 20 && !started; ++attempt) {
          started = victim->Start();
          if (!started) absl::SleepFor(absl::Milliseconds(100));
        }
        if (!started) ++restart_failures;
        next_kill = absl::Now() + absl::Milliseconds(FLAGS_kill_every_ms);
      }
      if (FLAGS_drop_every_ms > 0 && now >= next_drop) {
        softrdma::DropAfterWrs(1 + rng() % 64);
        ++drops;
        next_drop = now + absl::Milliseconds(FLAGS_drop_every_ms);
      }
      if (now >= next_report) {
        rss_peak = std::max(rss_peak, RssKiB());
        printf("soak: %.0f s issued=%llu ok=%llu kills=%d drops=%d rss_kib=%ld\n",
               absl::ToDoubleSeconds(now - start), static_cast<unsigned long long>(ledger.issued()),
               static_cast<unsigned long long>(ledger.ok()), kills, drops, RssKiB());
        fflush(stdout);
        next_report += absl::Seconds(10);
      }
    }
    for (std::thread& t : threads) t.join();
    softrdma::DropAfterWrs(0);
    printf("soak: chaos kills=%d drops=%d restart_failures=%d\n", kills, drops, restart_failures);
  }
  for (auto& s : servers) s->Stop();
  // The channel is gone; what it held goes back (closing QPs settle on the
  // device's progress thread).
  Footprint after = Footprint::Now();
  for (int i = 0; i < 200 && !after.SameAs(baseline); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    after = Footprint::Now();
  }
  printf("soak: %s\n", ledger.Summary().c_str());
  printf("soak: baseline %s; after %s; rss_kib before=%ld peak=%ld after=%ld\n",
         baseline.ToString().c_str(), after.ToString().c_str(), rss_before, rss_peak, RssKiB());
  std::string why;
  if (!ledger.Balanced()) why = "the ledger does not balance";
  if (!after.SameAs(baseline)) {
    absl::StrAppend(&why, why.empty() ? "" : "; ", "leaked objects");
    printf("soak: fds before: %s\nsoak: fds after:  %s\n", baseline_fds.c_str(), OpenFds().c_str());
  }
  if (ledger.ok() == 0) absl::StrAppend(&why, why.empty() ? "" : "; ", "no call succeeded");
  if (!why.empty()) {
    printf("soak: FAIL %s\n", why.c_str());
    return 1;
  }
  printf("soak: PASS\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("soak --duration_s=S [--servers=N] [--client_threads=N] ...");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 2;  // the chaos makes connection warnings by design
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_role == "server") return RunServer();
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 2;
  self[n] = '\0';
  signal(SIGPIPE, SIG_IGN);
  return RunClient(self);
}
