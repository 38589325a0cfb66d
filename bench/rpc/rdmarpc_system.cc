// rdmarpc side of rpc_bench: RpcBench served by rdmarpc::Server, called
// through the generated stub, and the verbs counters of this process.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/rpc/echo_system.h"
#include "bench/rpc/parse.h"
#include "bench/rpc/workloads.h"
#include "gflags/gflags.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_bench.rdmarpc.pb.h"
#include "runtime/transport/transport_stats.h"
#include "softrdma/softrdma.h"

DEFINE_int64(server_delay_us, 0,
             "Server (rdmarpc): each Echo sleeps this many µs on the worker before it "
             "answers, a slow handler (calls on one worker are then served one after "
             "another); for measuring what a client's completion loop spends waiting");

namespace rdmarpc {
namespace rpcbench {

VerbsCounters VerbsCounters::operator-(const VerbsCounters& e) const {
  VerbsCounters d;
  d.send = send - e.send;
  d.send_with_imm = send_with_imm - e.send_with_imm;
  d.rdma_write = rdma_write - e.rdma_write;
  d.rdma_write_with_imm = rdma_write_with_imm - e.rdma_write_with_imm;
  d.rdma_read = rdma_read - e.rdma_read;
  d.recv = recv - e.recv;
  d.post_send_calls = post_send_calls - e.post_send_calls;
  d.post_recv_calls = post_recv_calls - e.post_recv_calls;
  d.signaled_sends = signaled_sends - e.signaled_sends;
  d.wc_polled = wc_polled - e.wc_polled;
  d.poll_cq_calls = poll_cq_calls - e.poll_cq_calls;
  d.reg_mr = reg_mr - e.reg_mr;
  d.rnr_retries = rnr_retries - e.rnr_retries;
  d.payload_bytes_copied = payload_bytes_copied - e.payload_bytes_copied;
  return d;
}

VerbsCounters VerbsCounters::operator+(const VerbsCounters& o) const {
  VerbsCounters s;
  s.send = send + o.send;
  s.send_with_imm = send_with_imm + o.send_with_imm;
  s.rdma_write = rdma_write + o.rdma_write;
  s.rdma_write_with_imm = rdma_write_with_imm + o.rdma_write_with_imm;
  s.rdma_read = rdma_read + o.rdma_read;
  s.recv = recv + o.recv;
  s.post_send_calls = post_send_calls + o.post_send_calls;
  s.post_recv_calls = post_recv_calls + o.post_recv_calls;
  s.signaled_sends = signaled_sends + o.signaled_sends;
  s.wc_polled = wc_polled + o.wc_polled;
  s.poll_cq_calls = poll_cq_calls + o.poll_cq_calls;
  s.reg_mr = reg_mr + o.reg_mr;
  s.rnr_retries = rnr_retries + o.rnr_retries;
  s.payload_bytes_copied = payload_bytes_copied + o.payload_bytes_copied;
  return s;
}

VerbsCounters FromProto(const StatsResponse& p) {
  VerbsCounters c;
  c.send = p.send();
  c.send_with_imm = p.send_with_imm();
  c.rdma_write = p.rdma_write();
  c.rdma_write_with_imm = p.rdma_write_with_imm();
  c.rdma_read = p.rdma_read();
  c.recv = p.recv();
  c.post_send_calls = p.post_send_calls();
  c.post_recv_calls = p.post_recv_calls();
  c.signaled_sends = p.signaled_sends();
  c.wc_polled = p.wc_polled();
  c.poll_cq_calls = p.poll_cq_calls();
  c.reg_mr = p.reg_mr();
  c.rnr_retries = p.rnr_retries();
  c.payload_bytes_copied = p.payload_bytes_copied();
  return c;
}

StatsResponse ToProto(const VerbsCounters& c) {
  StatsResponse p;
  p.set_send(c.send);
  p.set_send_with_imm(c.send_with_imm);
  p.set_rdma_write(c.rdma_write);
  p.set_rdma_write_with_imm(c.rdma_write_with_imm);
  p.set_rdma_read(c.rdma_read);
  p.set_recv(c.recv);
  p.set_post_send_calls(c.post_send_calls);
  p.set_post_recv_calls(c.post_recv_calls);
  p.set_signaled_sends(c.signaled_sends);
  p.set_wc_polled(c.wc_polled);
  p.set_poll_cq_calls(c.poll_cq_calls);
  p.set_reg_mr(c.reg_mr);
  p.set_rnr_retries(c.rnr_retries);
  p.set_payload_bytes_copied(c.payload_bytes_copied);
  return p;
}

VerbsCounters LocalCounters() {
  // softrdma counts only when it is the provider; on rdma-core these stay 0
  // and the budget is not measurable (rpc_bench says so).
  softrdma::Stats s = softrdma::GetStats();
  VerbsCounters c;
  c.send = s.send;
  c.send_with_imm = s.send_with_imm;
  c.rdma_write = s.rdma_write;
  c.rdma_write_with_imm = s.rdma_write_with_imm;
  c.rdma_read = s.rdma_read;
  c.recv = s.recv;
  c.post_send_calls = s.post_send_calls;
  c.post_recv_calls = s.post_recv_calls;
  c.signaled_sends = s.signaled_sends;
  c.wc_polled = s.wc_polled;
  c.poll_cq_calls = s.poll_cq_calls;
  c.reg_mr = s.reg_mr;
  c.rnr_retries = s.rnr_retries;
  c.payload_bytes_copied = internal::GetTransportStats().payload_bytes_copied;
  return c;
}

namespace {

class RpcBenchImpl final : public RpcBench::Service {
 public:
  absl::Status Echo(ServerContext* context, const EchoRequest& request,
                    EchoResponse* response) override {
    if (FLAGS_server_delay_us > 0) absl::SleepFor(absl::Microseconds(FLAGS_server_delay_us));
    response->set_payload(request.payload());
    // An attachment goes back as it came: the same registered bytes.
    if (context->request_attachment()) {
      context->set_response_attachment(context->request_attachment());
    }
    return absl::OkStatus();
  }
  absl::Status Stream(ServerContext* /*context*/, const StreamRequest& request,
                      ServerWriter<EchoResponse>* writer) override {
    if (request.size() > kMaxPayloadBytes) {
      return absl::InvalidArgumentError(absl::StrCat("Stream: size ", request.size(),
                                                     " bytes is over ", kMaxPayloadBytes));
    }
    EchoResponse message;
    *message.mutable_payload() = MakeRequest(static_cast<size_t>(request.size())).payload();
    for (uint64_t i = 0; i < request.count(); ++i) {
      if (!writer->Write(message)) {
        return absl::CancelledError(
            absl::StrCat("Stream: the client went away after ", i, " of ", request.count()));
      }
    }
    return absl::OkStatus();
  }
  absl::Status GetStats(ServerContext* /*context*/, const StatsRequest& /*request*/,
                        StatsResponse* response) override {
    *response = ToProto(LocalCounters());
    return absl::OkStatus();
  }
};

class RdmarpcServer final : public EchoServer {
 public:
  explicit RdmarpcServer(const ServerOptions& options) : server_(options) {}
  ~RdmarpcServer() override {
    server_.Shutdown();
    server_.Wait();
  }
  absl::Status Start(absl::string_view address) {
    absl::Status status = server_.AddService(&service_);
    if (!status.ok()) return status;
    return server_.Start(address);
  }
  int port() const override { return server_.port(); }

 private:
  RpcBenchImpl service_;
  Server server_;
};

class RdmarpcClient final : public EchoClient {
 public:
  explicit RdmarpcClient(std::shared_ptr<Channel> channel)
      : channel_(std::move(channel)), stub_(RpcBench::NewStub(channel_)) {}

  absl::Status Echo(const EchoRequest& request, EchoResponse* response) override {
    ClientContext context;
    return stub_->Echo(&context, request, response);
  }

  void AsyncEcho(const EchoRequest& request, EchoResponse* response,
                 absl::AnyInvocable<void(absl::Status) &&> done) override {
    // A fresh context per call, as ClientContext asks; it lives in the
    // callback, which the runtime destroys after running it.
    auto context = std::make_unique<ClientContext>();
    ClientContext* raw = context.get();
    stub_->async()->Echo(raw, request, response,
                         [context = std::move(context), done = std::move(done)](
                             absl::Status status) mutable { std::move(done)(std::move(status)); });
  }

  void AsyncEchoAttachment(int slot, size_t size,
                           absl::AnyInvocable<void(absl::Status) &&> done) override {
    Buffer attachment;
    std::shared_ptr<const std::string> pattern;
    bool whole = false;
    {
      absl::MutexLock lock(&attachments_mu_);
      if (attachments_.size() <= static_cast<size_t>(slot)) attachments_.resize(slot + 1);
      AttachmentSlot& a = attachments_[slot];
      if (a.buffer.size() != size) {
        a.pattern = std::make_shared<const std::string>(MakeRequest(size).payload());
        a.buffer = Buffer::Allocate(size);
        std::memcpy(a.buffer.data(), a.pattern->data(), size);
        a.checked_whole = false;
      }
      attachment = a.buffer;
      pattern = a.pattern;
      whole = !a.checked_whole;
      a.checked_whole = true;
    }
    struct Call {
      ClientContext context;
      EchoRequest request;
      EchoResponse response;
    };
    auto call = std::make_unique<Call>();
    call->context.set_request_attachment(std::move(attachment));
    Call* raw = call.get();
    stub_->async()->Echo(&raw->context, raw->request, &raw->response,
                         [call = std::move(call), pattern = std::move(pattern), whole,
                          done = std::move(done)](absl::Status status) mutable {
                           // Against the pattern, not the request's Buffer: an
                           // echo that lands in the sender's own bytes must
                           // still carry them.
                           if (status.ok()) {
                             status = CheckEcho("Buffer attachment", *pattern,
                                                call->context.response_attachment().view(), whole);
                           }
                           std::move(done)(std::move(status));
                         });
  }

  absl::StatusOr<VerbsCounters> ServerCounters() override {
    ClientContext context;
    StatsResponse response;
    absl::Status status = stub_->GetStats(&context, StatsRequest(), &response);
    if (!status.ok()) return status;
    return FromProto(response);
  }

  absl::Status ReadStream(
      const StreamRequest& request,
      absl::FunctionRef<absl::Status(const EchoResponse&)> on_message) override {
    ClientContext context;
    std::unique_ptr<ClientReaderInterface<EchoResponse>> reader = stub_->Stream(&context, request);
    EchoResponse message;
    while (reader->Read(&message)) {
      absl::Status status = on_message(message);
      if (!status.ok()) return status;  // destroying the reader cancels the call
    }
    return reader->Finish();
  }

 private:
  std::shared_ptr<Channel> channel_;
  std::unique_ptr<RpcBench::Stub> stub_;
  struct AttachmentSlot {
    Buffer buffer;
    std::shared_ptr<const std::string> pattern;  // what `buffer` holds (MakeRequest's bytes)
    bool checked_whole = false;  // an echo of it was compared byte for byte
  };
  // AsyncEchoAttachment's Buffers, one per slot, registered by their first
  // call and reused.
  absl::Mutex attachments_mu_;
  std::vector<AttachmentSlot> attachments_ ABSL_GUARDED_BY(attachments_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<EchoServer>> StartRdmarpcServer(absl::string_view host, int port,
                                                               int workers,
                                                               bool shared_receive_queue) {
  ServerOptions options;
  options.num_workers = workers;
  options.receive_queue = shared_receive_queue ? ServerOptions::ReceiveQueue::kShared
                                               : ServerOptions::ReceiveQueue::kPerConnection;
  options.max_message_bytes = kLargeMessageBytes;
  // The most registered at once: a 64 MiB echo's request and response
  // buffers (`mixed`), or 4 bandwidth calls of 16 MiB in flight, each with
  // both; the pool drops cached buffers of other sizes to stay under it.
  static_assert(2 * kLargeMessageBytes <= 256u << 20, "a large echo fits the pool");
  options.large_buffer_pool_bytes = 256u << 20;
  auto server = std::make_unique<RdmarpcServer>(options);
  absl::Status status = server->Start(absl::StrCat(host, ":", port));
  if (!status.ok()) return status;
  return std::unique_ptr<EchoServer>(std::move(server));
}

absl::StatusOr<std::unique_ptr<EchoClient>> NewRdmarpcClient(const ClientConfig& config) {
  ChannelOptions options;
  options.connect_timeout = absl::Milliseconds(config.connect_timeout_ms);
  options.engine_threads = config.engine_threads;
  if (config.pool_size > 0) options.pool_size = config.pool_size;
  if (config.max_message_bytes > 0) options.max_message_bytes = config.max_message_bytes;
  if (config.shared_receive_queue) options.receive_queue = ChannelOptions::ReceiveQueue::kShared;
  absl::StatusOr<std::shared_ptr<Channel>> channel = CreateChannel(config.address, options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<EchoClient>(std::make_unique<RdmarpcClient>(*std::move(channel)));
}

}  // namespace rpcbench
}  // namespace rdmarpc
