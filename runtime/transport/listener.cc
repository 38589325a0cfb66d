// listener.cc: Listener and the memlock probe (see listener.h).
#include "runtime/transport/listener.h"

#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/log_limiter.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {

absl::Status ProbeRegistration(ibv_pd* pd, int recv_depth, size_t recv_buffer_bytes,
                               size_t pool_bytes) {
  absl::StatusOr<std::unique_ptr<BufferSlab>> probe =
      BufferSlab::Create(pd, recv_depth, recv_buffer_bytes, kLocalAccess);
  if (!probe.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot register receive buffers: ", probe.status().message()));
  }
  // The large-buffer pool is registered on demand, so a memlock limit below
  // it would fail the first large call instead of the start. Probe it once,
  // but only when RLIMIT_MEMLOCK is below what the pool and one receive
  // ring need. The probe maps the pool's size without touching it and
  // registers it once, as brpc registers its whole RDMA block pool at start.
  const size_t ring_bytes = static_cast<size_t>(recv_depth) * recv_buffer_bytes;
  if (pool_bytes == 0) return absl::OkStatus();
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY ||
      lim.rlim_cur >= pool_bytes + ring_bytes) {
    return absl::OkStatus();
  }
  void* mem = mmap(nullptr, pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "large_buffer_pool_bytes ", pool_bytes, ": cannot map ", pool_bytes, " bytes: ",
        ErrnoToStatus("mmap", errno).message()));
  }
  absl::Status registered;
  {
    absl::StatusOr<MrPtr> mr = RegisterMemory(pd, mem, pool_bytes, kRemoteAccess);
    registered = mr.status();
  }  // deregistered here, before the unmap
  munmap(mem, pool_bytes);
  if (!registered.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "large_buffer_pool_bytes ", pool_bytes, " cannot be registered: ", registered.message()));
  }
  return absl::OkStatus();
}

Listener::Listener(DeviceResources* device, Options options, std::vector<Target> targets,
                   AcceptedFn on_accepted)
    : device_(device),
      options_(std::move(options)),
      targets_(std::move(targets)),
      on_accepted_(std::move(on_accepted)) {}

Listener::~Listener() { Close(); }

uint16_t Listener::ProtocolVersion() const {
  return options_.protocol_version ? options_.protocol_version() : kProtocolVersion;
}

absl::Status Listener::Listen(const SocketAddress& addr, absl::string_view name) {
  if (targets_.empty()) return absl::InvalidArgumentError("a listener needs a worker loop");
  acceptor_ = std::make_unique<EventLoop>("rdmarpc-acceptor");
  if (absl::Status s = acceptor_->Start(); !s.ok()) {
    acceptor_->Stop();
    acceptor_.reset();
    return absl::UnavailableError(absl::StrCat("starting acceptor: ", s.message()));
  }
  // The listen id lives on the acceptor's event channel; binding happens
  // here (before the acceptor reads events for it, since none exist yet).
  absl::StatusOr<CmIdPtr> id =
      CreateCmId(acceptor_->event_channel(), static_cast<CmEventHandler*>(this));
  absl::Status s = id.status();
  if (s.ok()) {
    listen_id_ = std::move(*id);
    SocketAddress sa = addr;
    if (Verbs().bind_addr(listen_id_.get(), sa.get()) != 0) {
      s = ErrnoToStatus("rdma_bind_addr", errno);
      if (s.code() != absl::StatusCode::kInvalidArgument) {
        s = absl::UnavailableError(absl::StrCat("cannot bind ", name, ": ", s.message()));
      }
    } else if (ibv_context* verbs = listen_id_->verbs; verbs != nullptr) {
      // Binding picked the device already (a specific address): register
      // one connection's receive ring now (see Options).
      absl::StatusOr<ibv_pd*> pd = device_->GetPd(verbs);
      s = pd.ok() ? ProbeRegistration(*pd, options_.recv_depth, options_.recv_buffer_bytes,
                                      options_.large_buffer_pool_bytes)
                  : pd.status();
    }
    if (s.ok() && Verbs().listen(listen_id_.get(), options_.backlog) != 0) {
      s = absl::UnavailableError(absl::StrCat(
          "cannot listen on ", name, ": ", ErrnoToStatus("rdma_listen", errno).message()));
    }
  }
  if (!s.ok()) {
    acceptor_->Stop([this] { listen_id_.reset(); });
    acceptor_.reset();
    return s;
  }
  port_ = ntohs(Verbs().get_src_port(listen_id_.get()));
  accepting_.store(true);
  return absl::OkStatus();
}

void Listener::Close() {
  StopAccepting();
  if (acceptor_ == nullptr) return;
  acceptor_->Stop([this] { listen_id_.reset(); });
  acceptor_.reset();
}

void Listener::Reject(rdma_cm_id* id, uint32_t reason) const {
  const Handshake::PrivateData pd = Handshake::Reject(ProtocolVersion(), reason);
  Verbs().reject(id, pd.data(), pd.size());
  Verbs().destroy_id(id);
}

void Listener::OnCmEvent(const CmEvent& ev) {
  if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    OnConnectRequest(ev);
    return;
  }
  VLOG(1) << "listener: ignoring " << rdma_event_str(ev.type);
}

void Listener::OnConnectRequest(const CmEvent& ev) {
  rdma_cm_id* id = ev.id;
  if (!accepting_.load()) {
    Reject(id, kRejectShuttingDown);
    return;
  }
  uint32_t reject_reason = 0;
  absl::StatusOr<HandshakeData> h =
      Handshake::CheckRequest(ev.private_data, ProtocolVersion(), &reject_reason);
  if (!h.ok()) {
    LOG(WARNING) << "rejecting connection: " << h.status();
    Reject(id, reject_reason);
    return;
  }
  std::shared_ptr<const void> identity;
  if (options_.check_token) {
    std::string peer = "unknown";
    std::string host = peer;
    if (std::optional<SocketAddress> a = SocketAddress::FromSockaddr(Verbs().get_peer_addr(id))) {
      peer = a->ToString();
      host = a->IpString();
    }
    if (absl::Status s = options_.check_token(h->token, peer, &identity); !s.ok()) {
      // One line a second per client host (its port changes per attempt).
      LogConnectionEvent(host,
                         absl::StrCat("rejecting a connection from ", peer,
                                      ": its connection token was refused: "),
                         s);
      Reject(id, absl::IsPermissionDenied(s) ? kRejectPermissionDenied : kRejectUnauthenticated);
      return;
    }
  }
  const size_t t = next_target_.fetch_add(1) % targets_.size();
  const Target target = targets_[t];
  // Until the target's loop adopts it, events of this id go nowhere.
  id->context = nullptr;
  if (Verbs().migrate_id(id, target.loop->event_channel()) != 0) {
    LOG(ERROR) << ErrnoToStatus("rdma_migrate_id", errno);
    Reject(id, 0);
    return;
  }
  ConnectionOptions copts = options_.connection_options ? options_.connection_options()
                                                        : ConnectionOptions();
  const HandshakeData peer = *h;
  target.loop->Post([this, t, target, id, peer, copts, identity = std::move(identity)] {
    absl::StatusOr<Connection*> c =
        Connection::Accept(target.loop, device_, id, peer, copts, target.handler, identity);
    if (!c.ok()) {
      LOG(WARNING) << "accepting a connection failed: " << c.status();
      return;
    }
    if (on_accepted_) on_accepted_(t, *c);
  });
}

}  // namespace internal
}  // namespace rdmarpc
