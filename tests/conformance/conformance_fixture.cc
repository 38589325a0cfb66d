#include "tests/conformance/conformance_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace conformance {

using internal::Verbs;

namespace {

constexpr int kCqEntries = 256;               // per side; tests post far fewer
constexpr int kResolveTimeoutMs = 2000;       // rdma_resolve_addr / _route
constexpr size_t kPageBytes = 4096;           // Region alignment

absl::Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return internal::ErrnoToStatus("fcntl(O_NONBLOCK)", errno);
  }
  return absl::OkStatus();
}

// Waits for the next event on a non-blocking channel; the caller acks it.
absl::StatusOr<rdma_cm_event*> NextCmEvent(rdma_event_channel* channel, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (Verbs().get_cm_event(channel, &event) == 0) return event;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return internal::ErrnoToStatus("rdma_get_cm_event", errno);
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no rdma_cm event within ", absl::FormatDuration(timeout)));
    }
    pollfd p{channel->fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
  }
}

absl::StatusOr<ibv_qp_cap> QueryCaps(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (int rc = Verbs().query_qp(qp, &attr, IBV_QP_CAP, &init); rc != 0) {
    return internal::ErrnoToStatus("ibv_query_qp", rc);
  }
  return attr.cap;
}

}  // namespace

std::string ConformanceAddr() {
  const char* env = std::getenv("CONFORMANCE_ADDR");
  return env != nullptr && env[0] != '\0' ? env : "127.0.0.1";
}

std::string ProviderName() { return Verbs().provider_name; }
bool OnSoftProvider() { return ProviderName() == "soft"; }

std::string WcStatusName(int status) {
  return absl::StrCat(::ibv_wc_status_str(static_cast<ibv_wc_status>(status)), " (", status,
                      ")");
}

Connection::~Connection() {
  // QPs before their ids (rdma_destroy_qp needs the id), then the ids.
  client_qp_owner.reset();
  server_qp_owner.reset();
  server_id.reset();
  client_id.reset();
}

Region::Region(size_t size, internal::MrPtr mr, uint8_t* data)
    : size_(size), mr_(std::move(mr)), data_(data), lkey_(mr_->lkey), rkey_(mr_->rkey) {}

Region::~Region() {
  mr_.reset();
  std::free(data_);
}

int Region::Deregister() {
  ibv_mr* mr = mr_.release();
  return mr == nullptr ? EINVAL : Verbs().dereg_mr(mr);
}

void ConformanceTest::SetUp() {
  int count = 0;
  errno = 0;
  ibv_device** list = Verbs().get_device_list(&count);
  const int err = errno;
  if (list != nullptr) Verbs().free_device_list(list);
  if (list == nullptr || count == 0) {
    GTEST_SKIP() << "no RDMA device: ibv_get_device_list returned " << count
                 << " devices (provider " << ProviderName() << ", errno "
                 << (list == nullptr ? std::strerror(err) : "0") << ")";
  }
  absl::Status s = BuildFixture();
  ASSERT_TRUE(s.ok()) << s << " (provider " << ProviderName() << ", CONFORMANCE_ADDR "
                      << ConformanceAddr() << ")";
}

void ConformanceTest::TearDown() {
  pair_.reset();
  listener_.reset();
  if (client_cq_ != nullptr) {
    EXPECT_EQ(Verbs().destroy_cq(client_cq_), 0);
  }
  if (server_cq_ != nullptr) {
    EXPECT_EQ(Verbs().destroy_cq(server_cq_), 0);
  }
  client_cq_ = nullptr;
  server_cq_ = nullptr;
  client_comp_.reset();
  server_comp_.reset();
  client_pd_.reset();
  server_pd_.reset();
  client_events_.reset();
  server_events_.reset();
}

absl::Status ConformanceTest::BuildFixture() {
  absl::StatusOr<internal::EventChannelPtr> ch = internal::CreateEventChannel();
  if (!ch.ok()) return ch.status();
  client_events_ = std::move(*ch);
  ch = internal::CreateEventChannel();
  if (!ch.ok()) return ch.status();
  server_events_ = std::move(*ch);
  if (absl::Status s = SetNonBlocking(client_events_->fd); !s.ok()) return s;
  if (absl::Status s = SetNonBlocking(server_events_->fd); !s.ok()) return s;

  absl::StatusOr<internal::CmIdPtr> listener = internal::CreateCmId(server_events_.get(), this);
  if (!listener.ok()) return listener.status();
  listener_ = std::move(*listener);
  listen_addr_.sin_family = AF_INET;
  listen_addr_.sin_port = 0;  // ephemeral; read back below
  const std::string addr = ConformanceAddr();
  if (inet_pton(AF_INET, addr.c_str(), &listen_addr_.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CONFORMANCE_ADDR \"", addr, "\" is not an IPv4 address"));
  }
  if (Verbs().bind_addr(listener_.get(), reinterpret_cast<sockaddr*>(&listen_addr_)) != 0) {
    return internal::ErrnoToStatus(absl::StrCat("rdma_bind_addr(", addr, ":0)"), errno);
  }
  if (Verbs().listen(listener_.get(), 8) != 0) {
    return internal::ErrnoToStatus("rdma_listen", errno);
  }
  listen_addr_.sin_port = Verbs().get_src_port(listener_.get());  // network order
  if (listen_addr_.sin_port == 0) {
    return absl::InternalError("rdma_get_src_port returned 0 after rdma_listen");
  }

  absl::StatusOr<std::unique_ptr<Connection>> pair = Connect(DefaultOptions());
  if (!pair.ok()) return pair.status();
  pair_ = std::move(*pair);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Connection>> ConformanceTest::Connect(const QpOptions& options) {
  auto conn = std::make_unique<Connection>();
  absl::StatusOr<internal::CmIdPtr> client = internal::CreateCmId(client_events_.get(), nullptr);
  if (!client.ok()) return client.status();
  conn->client_id = std::move(*client);
  rdma_cm_id* cid = conn->client_id.get();
  if (Verbs().resolve_addr(cid, nullptr, reinterpret_cast<sockaddr*>(&listen_addr_),
                           kResolveTimeoutMs) != 0) {
    return internal::ErrnoToStatus("rdma_resolve_addr", errno);
  }
  if (absl::Status s = ExpectCmEvent(client_events_.get(), RDMA_CM_EVENT_ADDR_RESOLVED);
      !s.ok()) {
    return s;
  }
  if (Verbs().resolve_route(cid, kResolveTimeoutMs) != 0) {
    return internal::ErrnoToStatus("rdma_resolve_route", errno);
  }
  if (absl::Status s = ExpectCmEvent(client_events_.get(), RDMA_CM_EVENT_ROUTE_RESOLVED);
      !s.ok()) {
    return s;
  }

  if (context_ == nullptr) {
    // The first resolved id names the device: everything else is made on it.
    context_ = cid->verbs;
    if (context_ == nullptr) return absl::InternalError("resolved cm id has no verbs context");
    if (int rc = Verbs().query_device(context_, &device_attr_); rc != 0) {
      return internal::ErrnoToStatus("ibv_query_device", rc);
    }
    absl::StatusOr<internal::PdPtr> pd = internal::AllocPd(context_);
    if (!pd.ok()) return pd.status();
    client_pd_ = std::move(*pd);
    pd = internal::AllocPd(context_);
    if (!pd.ok()) return pd.status();
    server_pd_ = std::move(*pd);
    absl::StatusOr<internal::CompChannelPtr> comp = internal::CreateCompChannel(context_);
    if (!comp.ok()) return comp.status();
    client_comp_ = std::move(*comp);
    comp = internal::CreateCompChannel(context_);
    if (!comp.ok()) return comp.status();
    server_comp_ = std::move(*comp);
    client_cq_ = Verbs().create_cq(context_, kCqEntries, &client_cq_, client_comp_.get(), 0);
    if (client_cq_ == nullptr) return internal::ErrnoToStatus("ibv_create_cq", errno);
    server_cq_ = Verbs().create_cq(context_, kCqEntries, &server_cq_, server_comp_.get(), 0);
    if (server_cq_ == nullptr) return internal::ErrnoToStatus("ibv_create_cq", errno);
  } else if (cid->verbs != context_) {
    return absl::FailedPreconditionError("client cm id resolved to another device");
  }

  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = options.sq_sig_all ? 1 : 0;
  qa.cap.max_send_wr = options.max_send_wr;
  qa.cap.max_recv_wr = options.max_recv_wr;
  qa.cap.max_send_sge = options.max_send_sge;
  qa.cap.max_recv_sge = options.max_recv_sge;
  qa.cap.max_inline_data = options.max_inline_data;
  qa.send_cq = client_cq_;
  qa.recv_cq = client_cq_;
  absl::StatusOr<internal::QpOwner> qp = internal::CreateQp(cid, client_pd_.get(), &qa);
  if (!qp.ok()) return qp.status();
  conn->client_qp_owner = std::move(*qp);
  absl::StatusOr<ibv_qp_cap> cap = QueryCaps(cid->qp);
  if (!cap.ok()) return cap.status();
  conn->client_cap = *cap;

  rdma_conn_param cp{};
  cp.responder_resources = options.responder_resources;
  cp.initiator_depth = options.responder_resources;
  cp.retry_count = 7;
  cp.rnr_retry_count = options.server_rnr_retry;  // the peer's (server QP's) rnr_retry
  if (Verbs().connect(cid, &cp) != 0) return internal::ErrnoToStatus("rdma_connect", errno);

  absl::StatusOr<rdma_cm_event*> req = NextCmEvent(server_events_.get(), absl::Seconds(5));
  if (!req.ok()) return req.status();
  if ((*req)->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    const std::string got = rdma_event_str((*req)->event);
    Verbs().ack_cm_event(*req);
    return absl::FailedPreconditionError(
        absl::StrCat("server got ", got, ", wanted RDMA_CM_EVENT_CONNECT_REQUEST"));
  }
  conn->server_id.reset((*req)->id);  // a new id, ours to destroy
  Verbs().ack_cm_event(*req);
  rdma_cm_id* sid = conn->server_id.get();
  if (sid->verbs != context_) {
    return absl::FailedPreconditionError("server cm id is on another device than the client's");
  }

  qa.send_cq = server_cq_;
  qa.recv_cq = server_cq_;
  qa.srq = options.server_srq;
  qa.cap.max_send_wr = options.max_send_wr;
  qa.cap.max_recv_wr = options.server_srq != nullptr ? 0 : options.max_recv_wr;
  qa.cap.max_send_sge = options.max_send_sge;
  qa.cap.max_recv_sge = options.server_srq != nullptr ? 0 : options.max_recv_sge;
  qa.cap.max_inline_data = options.max_inline_data;
  qp = internal::CreateQp(sid, server_pd_.get(), &qa);
  if (!qp.ok()) return qp.status();
  conn->server_qp_owner = std::move(*qp);
  cap = QueryCaps(sid->qp);
  if (!cap.ok()) return cap.status();
  conn->server_cap = *cap;

  rdma_conn_param ap{};
  ap.responder_resources = options.responder_resources;
  ap.initiator_depth = options.responder_resources;
  ap.retry_count = 7;
  ap.rnr_retry_count = options.client_rnr_retry;  // the peer's (client QP's) rnr_retry
  if (Verbs().accept(sid, &ap) != 0) return internal::ErrnoToStatus("rdma_accept", errno);
  if (absl::Status s = ExpectCmEvent(client_events_.get(), RDMA_CM_EVENT_ESTABLISHED); !s.ok()) {
    return s;
  }
  if (absl::Status s = ExpectCmEvent(server_events_.get(), RDMA_CM_EVENT_ESTABLISHED); !s.ok()) {
    return s;
  }
  return conn;
}

std::unique_ptr<Region> ConformanceTest::NewRegion(ibv_pd* pd, size_t size, int access) {
  const size_t rounded = (size + kPageBytes - 1) / kPageBytes * kPageBytes;
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(kPageBytes, rounded));
  if (data == nullptr) {
    ADD_FAILURE() << "aligned_alloc(" << rounded << ") failed";
    return nullptr;
  }
  std::memset(data, 0, rounded);
  absl::StatusOr<internal::MrPtr> mr = internal::RegisterMemory(pd, data, size, access);
  if (!mr.ok()) {
    std::free(data);
    ADD_FAILURE() << mr.status();
    return nullptr;
  }
  return std::make_unique<Region>(size, std::move(*mr), data);
}

int ConformanceTest::PostRecv(ibv_qp* qp, uint64_t wr_id, const Region& region, size_t offset,
                              uint32_t length) {
  ibv_sge sge{region.addr(offset), length, region.lkey()};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

int ConformanceTest::PostSend(ibv_qp* qp, ibv_wr_opcode opcode, uint64_t wr_id,
                              const Region& region, size_t offset, uint32_t length,
                              uint64_t remote_addr, uint32_t rkey, uint32_t imm_data,
                              int send_flags) {
  ibv_sge sge{region.addr(offset), length, region.lkey()};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = send_flags;
  wr.imm_data = imm_data;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

absl::StatusOr<ibv_wc> ConformanceTest::PollOne(ibv_cq* cq, absl::Duration timeout) {
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(cq, 1, timeout);
  if (!wcs.ok()) return wcs.status();
  return (*wcs)[0];
}

absl::StatusOr<std::vector<ibv_wc>> ConformanceTest::PollN(ibv_cq* cq, int n,
                                                            absl::Duration timeout) {
  std::vector<ibv_wc> out;
  const absl::Time deadline = absl::Now() + timeout;
  while (static_cast<int>(out.size()) < n) {
    ibv_wc wc{};
    const int got = ibv_poll_cq(cq, 1, &wc);  // the verbs.h inline, through the CQ's ops
    if (got < 0) {
      return absl::InternalError(absl::StrCat("ibv_poll_cq returned ", got, " after ",
                                              out.size(), " of ", n, " completions"));
    }
    if (got == 1) {
      out.push_back(wc);
      continue;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(out.size(), " of ", n,
                                                      " completions within ",
                                                      absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return out;
}

std::vector<ibv_wc> ConformanceTest::DrainFor(ibv_cq* cq, absl::Duration window) {
  std::vector<ibv_wc> out;
  const absl::Time deadline = absl::Now() + window;
  while (absl::Now() < deadline) {
    ibv_wc wc{};
    if (ibv_poll_cq(cq, 1, &wc) == 1) {
      out.push_back(wc);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return out;
}

absl::Status ConformanceTest::ExpectCmEvent(rdma_event_channel* channel, rdma_cm_event_type type,
                                            absl::Duration timeout) {
  absl::StatusOr<rdma_cm_event*> e = NextCmEvent(channel, timeout);
  if (!e.ok()) {
    return absl::Status(e.status().code(), absl::StrCat(e.status().message(), " (wanted ",
                                                        rdma_event_str(type), ")"));
  }
  const rdma_cm_event_type got = (*e)->event;
  const int status = (*e)->status;
  Verbs().ack_cm_event(*e);
  if (got != type) {
    return absl::FailedPreconditionError(absl::StrCat("got rdma_cm event ", rdma_event_str(got),
                                                      " (status ", status, "), wanted ",
                                                      rdma_event_str(type)));
  }
  return absl::OkStatus();
}

int ConformanceTest::QpState(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (Verbs().query_qp(qp, &attr, IBV_QP_STATE, &init) != 0) return -1;
  return attr.qp_state;
}

}  // namespace conformance
}  // namespace rdmarpc
