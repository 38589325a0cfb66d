// connection.cc: connection set-up (rdma_cm handshake), close and teardown.
// The message protocol is in eager.cc and rendezvous.cc.
#include "runtime/transport/connection.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "runtime/transport/log_limiter.h"

namespace rdmarpc {
namespace internal {
namespace {

int ToMs(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(d);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ms, 1 << 30)));
}

// Raises recv_depth to kMinRecvDepth (see transport.h for why fewer
// receives could deadlock the credit exchange).
ConnectionOptions WithMinRecvDepth(ConnectionOptions o) {
  o.recv_depth = std::max(o.recv_depth, kMinRecvDepth);
  return o;
}

}  // namespace

const char* ConnStateName(ConnState s) {
  switch (s) {
    case ConnState::kResolvingAddr: return "resolving-address";
    case ConnState::kResolvingRoute: return "resolving-route";
    case ConnState::kConnecting: return "connecting";
    case ConnState::kAccepting: return "accepting";
    case ConnState::kEstablished: return "established";
    case ConnState::kClosing: return "closing";
    case ConnState::kClosed: return "closed";
  }
  return "?";
}

Connection::Connection(EventLoop* loop, DeviceResources* device, const ConnectionOptions& options,
                       ConnectionHandler* handler, std::string peer_name, bool is_client)
    : LoopClient(loop),
      device_(device),
      options_(WithMinRecvDepth(options)),
      handler_(handler),
      peer_name_(std::move(peer_name)),
      is_client_(is_client),
      state_(ConnState::kResolvingAddr),
      pacer_({options.rendezvous_chunk_bytes, options.rendezvous_chunks_in_flight},
             {options.rendezvous_bulk_chunk_bytes, options.rendezvous_bulk_chunks_in_flight}) {
  send_queue_.set_stats(&loop->stats());
  send_queue_.set_lean(loop->many_connections_flag());
  receive_ring_.set_stats(&loop->stats());
  loop->stats().connections_in_state[static_cast<int>(state_)].Add();
}

ConnectionStatus Connection::Describe() const {
  ConnectionStatus c;
  c.engine = loop_->name();
  c.peer = peer_name_;
  c.is_client = is_client_;
  c.state = ConnStateName(state_);
  c.device = "-";
  if (id_ != nullptr && id_->verbs != nullptr && id_->verbs->device != nullptr) {
    c.device = absl::StrCat(id_->verbs->device->name, " port ", id_->port_num);
  }
  c.qp_num = qp_num_;
  c.qp_state = "-";
  if (qp_) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (Verbs().query_qp(qp_.get(), &attr, IBV_QP_STATE, &init) == 0) {
      static constexpr const char* kQpStates[] = {"RESET", "INIT", "RTR", "RTS",
                                                  "SQD",   "SQE",  "ERR"};
      c.qp_state = attr.qp_state <= IBV_QPS_ERR ? kQpStates[attr.qp_state] : "UNKNOWN";
    } else {
      c.qp_state = "query failed";
    }
  }
  if (credits_.has_value()) {
    c.send_credits = credits_->available();
    c.credits_owed = credits_->owed();
  }
  c.peer_recv_depth = peer_.recv_depth;
  c.local_recv_depth = srq_ != nullptr ? srq_share_.in_use : options_.recv_depth;
  c.shared_receive_queue = srq_ != nullptr;
  c.streams_in_flight = streams_.busy() + streams_.server_streams();
  c.queued_frames = out_queue_.size();
  c.rendezvous_in_flight = reads_.size() + pushes_.size() + delayed_reads_.size();
  c.exposed_buffers = exposures_.exposed_buffers();
  c.exposed_bytes = exposures_.exposed_bytes();
  c.max_exposed_bytes = options_.max_exposed_bytes;
  c.memory_windows = exposures_.windows();
  c.messages_sent = messages_sent_;
  c.messages_received = recvs_seen_;
  c.bytes_sent = bytes_sent_;
  c.bytes_received = bytes_received_;
  c.credit_stall_us = credit_stall_.total_ns(absl::ToUnixNanos(absl::Now())) / 1000;
  c.wc_errors = wc_errors_;
  if (!first_wc_error_.empty()) {
    c.last_error = first_wc_error_;
  } else if (!close_reason_.ok()) {
    c.last_error = close_reason_.ToString();
  }
  return c;
}

void Connection::SetState(ConnState next) {
  static_assert(static_cast<int>(ConnState::kClosed) == kNumCountedConnStates,
                "every state but kClosed is counted");
  if (next == state_) return;
  EngineStats& stats = loop_->stats();
  if (state_ != ConnState::kClosed) stats.connections_in_state[static_cast<int>(state_)].Add(-1);
  if (next != ConnState::kClosed) stats.connections_in_state[static_cast<int>(next)].Add();
  if (next == ConnState::kEstablished) stats.connections_established.Add();
  if (next == ConnState::kClosed) stats.connections_closed.Add();
  state_ = next;
}

Connection::~Connection() {
  for (EventLoop::TimerId t : timers_) loop_->CancelTimer(t);
  if (state_ != ConnState::kClosed) Destroy();
}

absl::StatusOr<Connection*> Connection::Connect(EventLoop* loop, DeviceResources* device,
                                                const SocketAddress& dst, std::string peer_name,
                                                const ConnectionOptions& options,
                                                ConnectionHandler* handler) {
  std::unique_ptr<Connection> c(
      new Connection(loop, device, options, handler, peer_name, /*is_client=*/true));
  absl::StatusOr<CmIdPtr> id =
      CreateCmId(loop->event_channel(), static_cast<CmEventHandler*>(c.get()));
  if (!id.ok()) return id.status();
  c->id_ = std::move(*id);
  SocketAddress addr = dst;
  if (Verbs().resolve_addr(c->id_.get(), nullptr, addr.get(),
                           ToMs(options.connect_timeout)) != 0) {
    absl::Status s = ErrnoToStatus("rdma_resolve_addr", errno);
    return absl::UnavailableError(absl::StrCat("connecting to ", peer_name, ": ", s.message()));
  }
  Connection* raw = c.get();
  loop->Adopt(std::move(c));
  raw->connect_timer_ = loop->AddTimer(absl::Now() + options.connect_timeout, [raw] {
    raw->connect_timer_ = 0;
    raw->Close(absl::UnavailableError(
        absl::StrCat("connecting to ", raw->peer_name_, " timed out after ",
                     absl::FormatDuration(raw->options_.connect_timeout), " in state ",
                     ConnStateName(raw->state_))));
  });
  raw->timers_.push_back(raw->connect_timer_);
  return raw;
}

absl::StatusOr<Connection*> Connection::Accept(EventLoop* loop, DeviceResources* device,
                                               rdma_cm_id* id, const HandshakeData& peer,
                                               const ConnectionOptions& options,
                                               ConnectionHandler* handler,
                                               std::shared_ptr<const void> peer_identity) {
  std::string peer_name = "unknown";
  if (std::optional<SocketAddress> a = SocketAddress::FromSockaddr(Verbs().get_peer_addr(id))) {
    peer_name = a->ToString();
  }
  std::unique_ptr<Connection> c(
      new Connection(loop, device, options, handler, peer_name, /*is_client=*/false));
  c->id_.reset(id);
  id->context = static_cast<CmEventHandler*>(c.get());
  c->SetState(ConnState::kAccepting);
  c->peer_ = peer;
  c->peer_identity_ = std::move(peer_identity);
  absl::Status s = c->SetupQp();
  if (s.ok() && c->srq_ == nullptr) s = c->receive_ring_.PostAll(c->qp_.get());
  if (!s.ok()) {
    const Handshake::PrivateData why =
        Handshake::Reject(kProtocolVersion, absl::IsResourceExhausted(s) ? kRejectNoResources : 0);
    Verbs().reject(id, why.data(), why.size());
    c->Destroy();  // unmaps and destroys the QP, then the id
    return s;
  }
  c->credits_.emplace(peer.recv_depth, c->options_.recv_depth);
  // With a shared receive queue the client starts with its floor.
  const int initial_credits = c->srq_ != nullptr ? c->srq_share_.in_use : c->options_.recv_depth;
  if (c->srq_ != nullptr) c->credits_->SetPeerWindow(initial_credits);
  const Handshake::PrivateData pd =
      Handshake::Offer(kProtocolVersion, initial_credits, options.recv_buffer_bytes);
  rdma_conn_param param{};
  param.private_data = pd.data();
  param.private_data_len = pd.size();
  param.responder_resources = 4;
  param.initiator_depth = 4;
  param.rnr_retry_count = 7;
  Connection* raw = c.get();
  loop->Adopt(std::move(c));
  if (Verbs().accept(id, &param) != 0) {
    raw->Close(ErrnoToStatus("rdma_accept", errno));
    return absl::UnavailableError(absl::StrCat("rdma_accept from ", peer_name, " failed"));
  }
  return raw;
}

absl::Status Connection::SetupQp() {
  rdma_cm_id* id = id_.get();
  absl::StatusOr<ibv_pd*> pd = device_->GetPd(id->verbs);
  if (!pd.ok()) return pd.status();
  pool_ = device_->large_pool();
  exposures_.Init(*pd, pool_, device_->memory_windows(), options_.max_exposed_bytes);
  absl::StatusOr<ibv_cq*> cq = loop_->EnsureCq(*pd);
  if (!cq.ok()) return cq.status();
  if (options_.shared_receive_queue) {
    SharedReceiveQueue::Options so;
    so.buffer_bytes = options_.recv_buffer_bytes;
    so.extra_buffers = options_.srq_extra_buffers;
    so.min_credits = options_.srq_min_credits;
    so.max_credits = std::max(options_.recv_depth, options_.srq_min_credits);
    absl::StatusOr<SharedReceiveQueue*> srq = loop_->EnsureSrq(loop_->LoopPd(*pd), so);
    if (absl::IsUnimplemented(srq.status())) {
      // A device without shared receive queues: this connection receives
      // into a ring of its own instead. The peer only sees how many
      // credits it gets.
      LOG_FIRST_N(WARNING, 1) << "rdmarpc: " << srq.status().message()
                              << "; connections use receive rings of their own ("
                              << options_.recv_depth << " buffers each)";
    } else if (!srq.ok()) {
      return srq.status();
    } else {
      srq_share_.owner = this;
      srq_share_.on_granted = &Connection::OnSrqGranted;
      if (absl::StatusOr<int> initial = (*srq)->Attach(&srq_share_); !initial.ok()) {
        return initial.status();
      }
      srq_ = *srq;  // attached: Destroy detaches
    }
  }
  // The SRQ reserved CQ entries for its own receives.
  const int cqe = kSendQueueDepth + (srq_ != nullptr ? 0 : options_.recv_depth);
  if (absl::Status s = loop_->ReserveCqEntries(cqe); !s.ok()) return s;
  cq_entries_ = cqe;
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.send_cq = *cq;
  attr.recv_cq = *cq;
  attr.srq = srq_ != nullptr ? srq_->srq() : nullptr;
  attr.sq_sig_all = 0;
  attr.cap.max_send_wr = kSendQueueDepth;
  attr.cap.max_recv_wr = srq_ != nullptr ? 0 : static_cast<uint32_t>(options_.recv_depth);
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = 128;
  ibv_pd* qp_pd = loop_->LoopPd(*pd);  // the loop's thread domain, if any
  absl::StatusOr<QpOwner> qp = CreateQp(id, qp_pd, &attr);
  if (!qp.ok()) {
    // Some devices cap inline data lower; retry without.
    attr.cap.max_inline_data = 0;
    qp = CreateQp(id, qp_pd, &attr);
    if (!qp.ok()) return qp.status();
  }
  qp_ = std::move(*qp);
  qp_num_ = qp_.get()->qp_num;
  max_inline_ = attr.cap.max_inline_data;
  loop_->MapQp(qp_num_, this);
  send_queue_.set_qp(qp_.get());
  if (srq_ == nullptr) {
    if (absl::Status s =
            receive_ring_.Create(*pd, options_.recv_depth, options_.recv_buffer_bytes);
        !s.ok()) {
      return s;
    }
  }
  return send_queue_.CreateSendSlab(*pd, options_.eager_limit_bytes);
}

void Connection::OnCmEvent(const CmEvent& ev) {
  switch (ev.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (state_ != ConnState::kResolvingAddr) return;
      SetState(ConnState::kResolvingRoute);
      if (Verbs().resolve_route(id_.get(), ToMs(options_.connect_timeout)) != 0) {
        Close(absl::UnavailableError(absl::StrCat(
            "connecting to ", peer_name_, ": ",
            ErrnoToStatus("rdma_resolve_route", errno).message())));
      }
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      if (state_ != ConnState::kResolvingRoute) return;
      absl::Status s = SetupQp();
      if (s.ok() && srq_ == nullptr) s = receive_ring_.PostAll(qp_.get());
      if (!s.ok()) {
        Close(absl::Status(s.code(), absl::StrCat("connecting to ", peer_name_, ": ",
                                                  s.message())));
        return;
      }
      std::string token;
      if (options_.connect_token) {
        absl::StatusOr<std::string> t = options_.connect_token(peer_name_);
        if (t.ok() && t->size() > kMaxConnectTokenBytes) {
          t = absl::InternalError(absl::StrCat("connection token of ", t->size(),
                                               " bytes; at most ", kMaxConnectTokenBytes,
                                               " fit in rdma_cm's private data"));
        }
        if (!t.ok()) {
          token_failed_ = true;  // the calls get the credentials' own code
          Close(absl::Status(t.status().code(), absl::StrCat("connecting to ", peer_name_, ": ",
                                                             t.status().message())));
          return;
        }
        token = *std::move(t);
      }
      // With a shared receive queue the server starts with our floor.
      const Handshake::PrivateData pd = Handshake::Offer(
          kProtocolVersion, srq_ != nullptr ? srq_share_.in_use : options_.recv_depth,
          options_.recv_buffer_bytes, token);
      rdma_conn_param param{};
      param.private_data = pd.data();
      param.private_data_len = pd.size();
      param.responder_resources = 4;
      param.initiator_depth = 4;
      param.retry_count = 7;
      param.rnr_retry_count = 7;
      SetState(ConnState::kConnecting);
      if (Verbs().connect(id_.get(), &param) != 0) {
        Close(absl::UnavailableError(absl::StrCat(
            "connecting to ", peer_name_, ": ", ErrnoToStatus("rdma_connect", errno).message())));
      }
      return;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      OnEstablished(ev.private_data);
      return;
    case RDMA_CM_EVENT_REJECTED:
      Close(Handshake::Rejected(ev.private_data, ev.status, peer_name_));
      return;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_, ": ",
                                                rdma_event_str(ev.type), " (status ", ev.status,
                                                ") in state ", ConnStateName(state_))));
      return;
    case RDMA_CM_EVENT_DISCONNECTED:
      // What the peer sent before it disconnected may sit in the CQ still
      // (this step polled it before reading cm events): take it first, so a
      // reply that arrived is delivered rather than failed with the call.
      loop_->PollCompletionsNow();
      if (!usable()) return;
      peer_disconnected_ = true;
      Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_,
                                                " lost: peer disconnected")));
      return;
    default:
      return;
  }
}

void Connection::OnEstablished(const std::string& private_data) {
  if (state_ == ConnState::kAccepting) {
    SetState(ConnState::kEstablished);
    Flush();
    return;
  }
  if (state_ != ConnState::kConnecting) return;
  absl::StatusOr<HandshakeData> h = Handshake::CheckAccept(private_data, peer_name_);
  if (!h.ok()) {
    Close(h.status());
    return;
  }
  peer_ = *h;
  credits_.emplace(peer_.recv_depth, options_.recv_depth);
  if (srq_ != nullptr) credits_->SetPeerWindow(srq_share_.in_use);
  SetState(ConnState::kEstablished);
  if (connect_timer_ != 0) {
    loop_->CancelTimer(connect_timer_);
    connect_timer_ = 0;
  }
  VLOG(1) << "connected to " << peer_name_ << " (peer recv " << peer_.recv_depth << " x "
          << peer_.recv_buffer_bytes << " bytes)";
  StartKeepalive();
  if (handler_ != nullptr) handler_->OnEstablished(this);
  Flush();
}

void Connection::Close(absl::Status reason) {
  if (!usable()) return;
  const bool had_qp = static_cast<bool>(qp_);
  const bool was_connected =
      state_ == ConnState::kEstablished || state_ == ConnState::kAccepting ||
      state_ == ConnState::kConnecting;
  const ConnState state_before_close = state_;
  SetState(ConnState::kClosing);
  close_reason_ = reason;
  LogClose(state_before_close, reason);
  if (connect_timer_ != 0) {
    loop_->CancelTimer(connect_timer_);
    connect_timer_ = 0;
  }
  // Fail every call; their exposed buffers are revoked since the peer may
  // still hold their rkeys.
  for (size_t i = 0; i < streams_.size(); ++i) {
    Slot& s = streams_.slot(static_cast<uint16_t>(i));
    if (!s.busy) continue;
    ResponseSink* sink = s.sink;
    const bool not_sent = !s.sent && !s.stream && is_client_;
    OutgoingRequest request;
    if (not_sent) request = std::move(s.request);
    FinishSlot(static_cast<uint16_t>(i), /*rekey=*/true);
    // Codes that tell the caller something (another version, a full server,
    // refused credentials) reach it; any other failure of the transport is
    // UNAVAILABLE, safe to retry.
    absl::Status status = reason.code() == absl::StatusCode::kFailedPrecondition ||
                                  reason.code() == absl::StatusCode::kUnavailable ||
                                  reason.code() == absl::StatusCode::kCancelled ||
                                  reason.code() == absl::StatusCode::kResourceExhausted ||
                                  reason.code() == absl::StatusCode::kUnauthenticated ||
                                  reason.code() == absl::StatusCode::kPermissionDenied ||
                                  token_failed_
                              ? reason
                              : absl::UnavailableError(reason.message());
    if (not_sent) {
      sink->OnNotSent(std::move(status), std::move(request));
    } else {
      sink->OnFailure(std::move(status));
    }
  }
  out_queue_.clear();
  streams_.ClearServerStreams();
  ConnectionHandler* h = handler_;
  handler_ = nullptr;
  if (h != nullptr) h->OnClosed(this, reason);
  const bool was_established = state_before_close == ConnState::kEstablished;
  if (was_connected && id_ != nullptr) Verbs().disconnect(id_.get());
  // A client connection that never got established posted no send, and
  // nothing could have completed on its receives (the server sends only in
  // answer): destroying the QP discards them, so there is nothing to wait
  // for. Holding it for kFlushWait instead kept the QP, its buffers and its
  // CQ entries of every refused attempt, and a channel hammering an address
  // with no listener ran the CQ out of room (RESOURCE_EXHAUSTED).
  const bool never_established =
      is_client_ && state_before_close != ConnState::kEstablished && send_queue_.empty();
  if (!had_qp || never_established) {
    Destroy();
    return;
  }
  if (was_established) PostDrainMarker();
  // Wait for the flushes of everything posted, bounded by kFlushWait.
  timers_.push_back(loop_->AddTimer(absl::Now() + kFlushWait, [this] { Destroy(); }));
  MaybeFinishClose();
}

void Connection::LogClose(ConnState before, const absl::Status& reason) const {
  const bool setting_up = before == ConnState::kResolvingAddr ||
                          before == ConnState::kResolvingRoute ||
                          before == ConnState::kConnecting || before == ConnState::kAccepting;
  const bool lost = before == ConnState::kEstablished;
  // A client going away (in order, even before its connection was fully
  // accepted) is no news on a server.
  const bool client_left = !is_client_ && peer_disconnected_;
  // A drained server (kGoAway) closing a connection with no call left on
  // it is the end it announced.
  const bool drained = is_client_ && goaway_received_ && streams_.busy() == 0;
  if (local_close_ || client_left || drained || (!setting_up && !lost)) {
    VLOG(1) << "closing connection to " << peer_name_ << ": " << reason;
    return;
  }
  LogConnectionEvent(peer_name_, setting_up ? "connection set-up failed: " : "connection lost: ",
                     reason);
}

void Connection::Shutdown(absl::Status reason) {
  if (!usable()) return;
  local_close_ = true;
  Close(std::move(reason));
}

void Connection::CloseWhenSent(absl::Status reason, absl::Duration bound) {
  if (!usable() || close_when_sent_) return;
  local_close_ = true;
  if (state_ != ConnState::kEstablished && state_ != ConnState::kAccepting) {
    Close(std::move(reason));
    return;
  }
  close_when_sent_ = true;
  close_when_sent_reason_ = std::move(reason);
  timers_.push_back(loop_->AddTimer(absl::Now() + bound, [this] {
    if (usable()) Close(close_when_sent_reason_);
  }));
  Flush();
  MaybeFinishCloseWhenSent();
}

void Connection::MaybeFinishCloseWhenSent() {
  // Delivered means: nothing queued, the peer pulled (and released) every
  // buffer we exposed to it, and we pulled what it exposed to us.
  if (!close_when_sent_ || !usable() || !out_queue_.empty() || !qp_ || !exposed_.empty() ||
      !exposed_attachments_.empty() || !reads_.empty() || !pushes_.empty() ||
      !delayed_reads_.empty()) {
    return;
  }
  if (!drain_marker_posted_) {
    if (!send_queue_.has_room()) return;  // next time
    ibv_sge sge{};  // zero-length: touches no memory, consumes no receive
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 0;
    wr.opcode = IBV_WR_RDMA_WRITE;
    drain_marker_posted_ = true;
    drain_marker_seq_ = send_queue_.PostWr(&wr, SqEntry{}, /*force_signal=*/true);
    Doorbell();
    return;
  }
  if (send_queue_.retired(drain_marker_seq_)) Close(close_when_sent_reason_);
}

void Connection::PostDrainMarker() {
  // Sends that completed unsignalled leave no CQE, so the send queue would
  // only be empty when kFlushWait ran out, and every close would take that
  // long. rdma_disconnect moved the QP to ERROR; a signalled WR posted now
  // is flushed after every WR before it, and its CQE retires them all.
  // Nothing to drain, or no room: the timer ends it.
  Doorbell();
  if (qp_) send_queue_.PostDrainMarker();
}

void Connection::MaybeFinishClose() {
  if (state_ == ConnState::kClosing && receive_ring_.posted() == 0 && send_queue_.empty()) {
    Destroy();
  }
}

void Connection::ForceDestroy() {
  local_close_ = true;  // the loop is stopping: this process's decision
  if (usable()) {
    Close(absl::UnavailableError(absl::StrCat("connection to ", peer_name_,
                                              " closed: loop stopping")));
  }
  Destroy();
}

void Connection::Destroy() {
  if (state_ == ConnState::kClosed) return;
  SetState(ConnState::kClosed);
  NoteCreditStall();  // a stall ends with the connection
  for (EventLoop::TimerId t : timers_) loop_->CancelTimer(t);
  timers_.clear();
  if (keepalive_timer_ != 0) loop_->CancelTimer(keepalive_timer_);
  keepalive_timer_ = 0;
  if (qp_num_ != 0) loop_->UnmapQp(qp_num_);
  send_queue_.set_qp(nullptr);  // Doorbell posts nothing from here on
  qp_.reset();  // the device stops touching our buffers here
  if (srq_ != nullptr) {
    srq_->Detach(&srq_share_);  // no receive can consume our credits any more
    srq_ = nullptr;
  }
  id_.reset();
  loop_->ReleaseCqEntries(cq_entries_);
  cq_entries_ = 0;
  for (auto& [id, ctx] : reads_) {
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
  }
  reads_.clear();
  for (auto& [id, ctx] : pushes_) {
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
  }
  pushes_.clear();
  transfer_queue_.clear();
  pacer_.Reset();
  for (auto& [id, ctx] : delayed_reads_) {
    if (pool_ != nullptr) pool_->Put(ctx.buffer);
  }
  delayed_reads_.clear();
  // The send slab goes; rendezvous pieces still on the ring belonged to
  // the transfers freed above.
  // LOCAL_INVs still on the ring never ran: their windows are deallocated.
  send_queue_.Release([this](const SqEntry& e) {
    if (e.window != nullptr) exposures_.OnRetired(e, /*executed=*/false);
  });
  // Every window goes (deallocated, so invalidated) before the buffers
  // under them are reused.
  exposures_.Release();
  streams_.DrainQuarantine([this](LargeBuffer* b) { RevokeAndPut(b, /*rekey=*/true); });
  for (auto& [ref, buf] : exposed_) RevokeAndPut(buf, /*rekey=*/true);
  exposed_.clear();
  for (auto& [ref, buf] : exposed_attachments_) RevokeAndPut(buf, /*rekey=*/true);
  exposed_attachments_.clear();
  receive_ring_.Release();
  loop_->Retire(this);
}

// LoopClient's data-path members (event_loop.h): direct calls, so the loop
// dispatches to its connections without a virtual call per message.
void LoopClient::OnCompletion(const ibv_wc& wc) { static_cast<Connection*>(this)->OnCompletion(wc); }
void LoopClient::RunEndOfStep() { static_cast<Connection*>(this)->RunEndOfStep(); }
bool LoopClient::RequestIdleRepost() { return static_cast<Connection*>(this)->RequestIdleRepost(); }
void LoopClient::OnQpAsyncError(const ibv_qp* qp) {
  static_cast<Connection*>(this)->OnQpAsyncError(qp);
}

}  // namespace internal
}  // namespace rdmarpc
