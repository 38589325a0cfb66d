// raw_peer.h: a peer written against the raw verbs and rdma_cm API on
// softrdma, for tests that play a hostile (or merely odd) client of an
// rdmarpc server (Connect) or server of an rdmarpc channel (Listen,
// Accept): it speaks the handshake, then sends whatever bytes, imm_data and
// RDMA operations a test asks for, and reports the work completions and
// connection events it gets back.
//
// One thread (the test's) drives a RawPeer; every wait is bounded.
#ifndef RDMARPC_TESTS_RPC_RAW_PEER_H_
#define RDMARPC_TESTS_RPC_RAW_PEER_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/header.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace test {

class RawPeer {
 public:
  static constexpr int kRecvDepth = 16;
  static constexpr size_t kRecvBytes = 8192;
  static constexpr size_t kSendBytes = 256 * 1024;  // what one Send, Rdma or WriteWithImm moves at most

  RawPeer() = default;
  ~RawPeer() { Close(); }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  // Connects to 127.0.0.1:`port` with a well-formed handshake; true once
  // established.
  bool Connect(int port) {
    if (!StartConnect(port)) return false;
    if (NextEvent(absl::Seconds(5)) != RDMA_CM_EVENT_ESTABLISHED) return false;
    absl::StatusOr<internal::HandshakeData> h =
        internal::DecodeHandshake(last_private_data_.data(), last_private_data_.size());
    if (!h.ok()) return false;
    server_ = *h;
    return true;
  }

  // Connect's first half: true once rdma_connect is posted with a
  // well-formed handshake. Until the test takes the ESTABLISHED that
  // follows (it never does through this peer), no RTU goes out, as with
  // librdmacm, so the server's accept stays unfinished.
  bool StartConnect(int port) {
    if (!CreateId(&id_)) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (softrdma::resolve_addr(id_, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) != 0 ||
        NextEvent(absl::Seconds(5)) != RDMA_CM_EVENT_ADDR_RESOLVED) {
      return false;
    }
    if (softrdma::resolve_route(id_, 2000) != 0 ||
        NextEvent(absl::Seconds(5)) != RDMA_CM_EVENT_ROUTE_RESOLVED) {
      return false;
    }
    if (!SetUpQp()) return false;
    const internal::Handshake::PrivateData offer =
        internal::Handshake::Offer(internal::kProtocolVersion, kRecvDepth, kRecvBytes);
    rdma_conn_param param = ConnParam(offer);
    return softrdma::connect(id_, &param) == 0;
  }

  // Server role: listens on 127.0.0.1 at a port the system picks
  // (`*port`); true once listening.
  bool Listen(int* port) {
    if (!CreateId(&listen_id_)) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (softrdma::bind_addr(listen_id_, reinterpret_cast<sockaddr*>(&addr)) != 0 ||
        softrdma::listen(listen_id_, 4) != 0) {
      return false;
    }
    const sockaddr_in* bound =
        reinterpret_cast<const sockaddr_in*>(softrdma::get_local_addr(listen_id_));
    *port = ntohs(bound->sin_port);
    return true;
  }

  // Server role: accepts the next connect request within `timeout` with a
  // well-formed answer (our ring: kRecvDepth x kRecvBytes) offering
  // `features` (an older rdmarpc offers fewer); true once established.
  // server() then holds the client's offer.
  bool Accept(absl::Duration timeout, uint32_t features = internal::kOfferedFeatures) {
    if (NextEvent(timeout) != RDMA_CM_EVENT_CONNECT_REQUEST) return false;
    id_ = last_event_id_;
    absl::StatusOr<internal::HandshakeData> h = internal::DecodeHandshake(
        last_private_data_.data(), last_private_data_.size(), /*connect_request=*/true);
    if (!h.ok()) return false;
    server_ = *h;
    if (!SetUpQp()) return false;
    internal::HandshakeData offer;
    offer.version = internal::kProtocolVersion;
    offer.recv_depth = kRecvDepth;
    offer.recv_buffer_bytes = kRecvBytes;
    offer.features = features;
    char answer[internal::kHandshakeBytes];
    internal::EncodeHandshake(offer, answer);
    rdma_conn_param param = ConnParam(answer, sizeof(answer));
    if (softrdma::accept(id_, &param) != 0) return false;
    return NextEvent(absl::Seconds(5)) == RDMA_CM_EVENT_ESTABLISHED;
  }

  // One RDMA WRITE_WITH_IMM of `bytes` to the peer's `remote_addr` with
  // `rkey` (imm_data `imm`, host order); its completion status.
  ibv_wc_status WriteWithImm(absl::string_view bytes, uint64_t remote_addr, uint32_t rkey,
                             uint32_t imm) {
    char* buf = SendBuffer();
    std::memcpy(buf, bytes.data(), bytes.size());
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), static_cast<uint32_t>(bytes.size()), mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = ++next_wr_;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(imm);
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return PostAndWait(&wr);
  }
  // The bytes the last Rdma(IBV_WR_RDMA_READ, ...) read (`length` of them).
  absl::string_view ReadResult(uint32_t length) const {
    return absl::string_view(memory_.data() + kRecvDepth * kRecvBytes, length);
  }
  // Fills the send buffer (what Rdma WRITEs) with `bytes`.
  void SetWriteSource(absl::string_view bytes) {
    std::memcpy(SendBuffer(), bytes.data(), bytes.size());
  }

 private:
  // A non-blocking event channel and, on it, the cm id `*id`.
  bool CreateId(rdma_cm_id** id) {
    channel_ = softrdma::create_event_channel();
    if (channel_ == nullptr) return false;
    fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
    return softrdma::create_id(channel_, id, nullptr, RDMA_PS_TCP) == 0;
  }

  // rdma_connect's / rdma_accept's parameters with our handshake.
  static rdma_conn_param ConnParam(const internal::Handshake::PrivateData& data) {
    return ConnParam(data.data(), data.size());
  }
  static rdma_conn_param ConnParam(const char* data, uint8_t size) {
    rdma_conn_param param{};
    param.private_data = data;
    param.private_data_len = size;
    param.responder_resources = 4;
    param.initiator_depth = 4;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    return param;
  }

  bool SetUpQp() {
    pd_ = softrdma::alloc_pd(id_->verbs);
    cq_ = softrdma::create_cq(id_->verbs, 256, nullptr, nullptr, 0);
    if (pd_ == nullptr || cq_ == nullptr) return false;
    memory_.assign(kRecvDepth * kRecvBytes + kSendBytes, '\0');
    mr_ =
        softrdma::reg_mr(pd_, memory_.data(), memory_.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    if (mr_ == nullptr) return false;
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.send_cq = cq_;
    attr.recv_cq = cq_;
    attr.cap.max_send_wr = 64;
    attr.cap.max_recv_wr = kRecvDepth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    if (softrdma::create_qp(id_, pd_, &attr) != 0) return false;
    for (int i = 0; i < kRecvDepth; ++i) PostRecv(i);
    return true;
  }

 public:
  // The address the server sees ("127.0.0.1:PORT").
  std::string LocalAddress() const {
    const sockaddr_in* a = reinterpret_cast<const sockaddr_in*>(softrdma::get_local_addr(id_));
    return "127.0.0.1:" + std::to_string(ntohs(a->sin_port));
  }
  // The peer's handshake: the server's accept, or (server role) the
  // client's connect request.
  const internal::HandshakeData& server() const { return server_; }

  // Posts `bytes` as one SEND (with imm_data `imm`, host order, unless
  // `with_imm` is false) and waits for its completion; returns its status.
  ibv_wc_status Send(absl::string_view bytes, uint32_t imm, bool with_imm = true) {
    char* buf = SendBuffer();
    std::memcpy(buf, bytes.data(), bytes.size());
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), static_cast<uint32_t>(bytes.size()), mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = ++next_wr_;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.imm_data = htonl(imm);
    wr.send_flags = IBV_SEND_SIGNALED;
    return PostAndWait(&wr);
  }

  // One RDMA READ, WRITE, compare-and-swap or fetch-and-add of `length`
  // bytes (8 for atomics) at the server's `remote_addr` with `rkey`; its
  // completion status.
  ibv_wc_status Rdma(ibv_wr_opcode op, uint64_t remote_addr, uint32_t rkey, uint32_t length) {
    char* buf = SendBuffer();
    const bool atomic = op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), atomic ? 8u : length, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = ++next_wr_;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (atomic) {
      wr.wr.atomic.remote_addr = remote_addr;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = 1;
      wr.wr.atomic.swap = 2;
    } else {
      wr.wr.rdma.remote_addr = remote_addr;
      wr.wr.rdma.rkey = rkey;
    }
    return PostAndWait(&wr);
  }

  // A whole message for the server: header, aux, metadata, descriptors,
  // payload, encoded as the transport does.
  static std::string Message(const internal::WireHeader& h, absl::string_view aux,
                             absl::string_view payload,
                             const internal::RemoteBuffer& remote = internal::RemoteBuffer()) {
    std::string out(internal::EncodedPrefixBytes(h), '\0');
    internal::EncodePrefix(h, aux, remote, internal::RemoteBuffer(), out.data());
    if (!(h.flags & internal::kFlagPayloadRemote)) out.append(payload.data(), payload.size());
    return out;
  }
  static uint32_t Imm(internal::MsgKind kind, uint16_t slot, uint16_t generation) {
    return internal::EncodeImm(internal::Imm{kind, generation, slot});
  }

  // Waits for the next message from the server; false when none came in
  // `timeout` or the receive was flushed (the connection is gone).
  bool Receive(std::string* bytes, uint32_t* imm, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (!received_.empty()) {
        *bytes = std::move(received_.front().first);
        *imm = received_.front().second;
        received_.pop_front();
        return true;
      }
      if (flushed_) return false;
      PollOnce();
    }
    return false;
  }

  // One message from the server, decoded. `message`'s views point into
  // `bytes`, so an Answer is neither copied nor moved.
  struct Answer {
    Answer() = default;
    Answer(const Answer&) = delete;
    Answer& operator=(const Answer&) = delete;
    std::string bytes;
    uint32_t imm = 0;
    internal::ParsedMessage message;
  };
  // Receive, then DecodeMessage into `*out`; false when nothing came in
  // `timeout` or it does not decode. kCredit messages (credits returned
  // explicitly: a server granting from its shared receive queue sends them
  // sooner than one with rings) are skipped: this peer does
  // not count credits.
  bool ReceiveMessage(Answer* out, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      if (!Receive(&out->bytes, &out->imm, deadline - absl::Now())) return false;
      absl::StatusOr<internal::ParsedMessage> m = internal::DecodeMessage(out->bytes);
      if (!m.ok()) return false;
      if (m->header.kind == internal::MsgKind::kCredit) continue;
      out->message = *m;
      return true;
    }
  }

  // True once the server closed the connection (rdma_cm DISCONNECTED, or
  // our receives flushed) within `timeout`.
  bool WaitClosedByServer(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (disconnected_ || flushed_) return true;
      PollOnce();
      rdma_cm_event_type type;
      if (TryEvent(&type) && type == RDMA_CM_EVENT_DISCONNECTED) disconnected_ = true;
    }
    return disconnected_ || flushed_;
  }

  void Close() {
    if (id_ != nullptr) {
      softrdma::disconnect(id_);
      if (id_->qp != nullptr) softrdma::destroy_qp(id_);
    }
    if (mr_ != nullptr) softrdma::dereg_mr(mr_);
    if (cq_ != nullptr) softrdma::destroy_cq(cq_);
    if (pd_ != nullptr) softrdma::dealloc_pd(pd_);
    if (id_ != nullptr) softrdma::destroy_id(id_);
    if (listen_id_ != nullptr) softrdma::destroy_id(listen_id_);
    if (channel_ != nullptr) softrdma::destroy_event_channel(channel_);
    listen_id_ = nullptr;
    mr_ = nullptr;
    cq_ = nullptr;
    pd_ = nullptr;
    id_ = nullptr;
    channel_ = nullptr;
  }

 private:
  char* SendBuffer() { return memory_.data() + kRecvDepth * kRecvBytes; }

  void PostRecv(int i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(memory_.data() + i * kRecvBytes),
                static_cast<uint32_t>(kRecvBytes), mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvTag | static_cast<uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ibv_post_recv(id_->qp, &wr, &bad);
  }

  ibv_wc_status PostAndWait(ibv_send_wr* wr) {
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(id_->qp, wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      for (auto it = send_done_.begin(); it != send_done_.end(); ++it) {
        if (it->first == wr->wr_id) {
          ibv_wc_status s = it->second;
          send_done_.erase(it);
          return s;
        }
      }
      PollOnce();
    }
    return IBV_WC_RESP_TIMEOUT_ERR;
  }

  void PollOnce() {
    ibv_wc wc[16];
    int n = ibv_poll_cq(cq_, 16, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_id & kRecvTag) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          flushed_ = true;
          continue;
        }
        const int idx = static_cast<int>(wc[i].wr_id & ~kRecvTag);
        received_.emplace_back(std::string(memory_.data() + idx * kRecvBytes, wc[i].byte_len),
                               ntohl(wc[i].imm_data));
        PostRecv(idx);
      } else {
        send_done_.emplace_back(wc[i].wr_id, wc[i].status);
      }
    }
    if (n == 0) absl::SleepFor(absl::Microseconds(200));
  }

  bool TryEvent(rdma_cm_event_type* type) {
    rdma_cm_event* ev = nullptr;
    if (softrdma::get_cm_event(channel_, &ev) != 0) return false;
    *type = ev->event;
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) last_event_id_ = ev->id;
    last_private_data_.clear();
    if (ev->param.conn.private_data != nullptr) {
      last_private_data_.assign(static_cast<const char*>(ev->param.conn.private_data),
                                ev->param.conn.private_data_len);
    }
    softrdma::ack_cm_event(ev);
    return true;
  }

  rdma_cm_event_type NextEvent(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
    while (absl::Now() < deadline) {
      if (TryEvent(&type)) return type;
      pollfd p{channel_->fd, POLLIN, 0};
      poll(&p, 1, 10);
    }
    return RDMA_CM_EVENT_CONNECT_ERROR;
  }

  static constexpr uint64_t kRecvTag = uint64_t{1} << 63;
  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  rdma_cm_id* last_event_id_ = nullptr;  // of the last CONNECT_REQUEST
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::string memory_;
  std::string last_private_data_;
  internal::HandshakeData server_;
  uint64_t next_wr_ = 0;
  std::vector<std::pair<uint64_t, ibv_wc_status>> send_done_;
  std::deque<std::pair<std::string, uint32_t>> received_;
  bool flushed_ = false;
  bool disconnected_ = false;
};

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_RAW_PEER_H_
