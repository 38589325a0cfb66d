// cm.cc: rdma_cm over TCP.
//
// One TCP connection per RC connection. The active side connects, sends
// CONNECT_REQ (its conn_param and private data); the passive side's listener
// turns that into RDMA_CM_EVENT_CONNECT_REQUEST with a new id; rdma_accept
// answers ACCEPT (the QP goes to RTS at once, as librdmacm does, and holds
// its sends until RTU); the active side queues ESTABLISHED, and the
// rdma_get_cm_event that takes it moves the id's QP to RTS and sends RTU
// (FinishConnectResponse), on which the passive side posts ESTABLISHED.
// rdma_reject answers REJECT. After that the
// socket carries the QPs' frames and finally DISCONNECT.
//
// Locking: no process-wide lock. Each id has its own mutex (SoftCmId::mu),
// taken by every rdma_cm call on it and by the progress thread for each of
// its control frames and timers, so ids set up in parallel on different
// threads, and the progress thread serving other ids, never wait for one
// another. A listener's mutex comes before its child ids' (CONNECT_REQ makes
// a child under the listener's lock; destroying a listener destroys the
// children whose CONNECT_REQUEST it never delivered). An id's mutex comes
// before its QP's, its event channel's and the registries'. The id registry
// (live ids by address and by serial, and each id's count of unacked events)
// is held only to look an id up, publish or erase it, or count an event; it
// keeps the owning reference of every live id, so the "is this a live id"
// check of every call never dereferences a dead or wild pointer. Everything
// else (Conn, Listener, QP, timers) refers to an id through a weak_ptr, and
// after locking it checks that it is not destroyed and still attached, so no
// handler touches a freed id or one that moved on. See internal.h for the
// whole order.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "glog/logging.h"
#include "softrdma/progress_thread.h"
#include "softrdma/faults.h"
#include "softrdma/internal.h"
#include "softrdma/shm_link.h"
#include "softrdma/softrdma.h"
#include "softrdma/wire.h"

namespace softrdma {
namespace internal {

// IB CM reject reasons (IBTA table 112) reported in event->status.
inline constexpr int kRejInvalidServiceId = 8;
inline constexpr int kRejConsumerDefined = 28;
// rdma_cm private data limits (IB CM REQ / REP / REJ minus the rdma_cm header).
inline constexpr int kMaxConnectPrivateData = 56;
inline constexpr int kMaxAcceptPrivateData = 196;
inline constexpr int kMaxRejectPrivateData = 148;

enum class CmState {
  kIdle,
  kBound,
  kListen,
  kAddrResolved,
  kRouteResolved,
  kConnecting,      // active: TCP connect / CONNECT_REQ sent, awaiting ACCEPT
  // active, ACCEPT received: with the application's own QP, CONNECT_RESPONSE
  // queued, awaiting rdma_establish; with rdma_cm's QP, ESTABLISHED queued,
  // awaiting rdma_get_cm_event (FinishConnectResponse)
  kConnectResponse,
  kConnectReqRcvd,  // passive: CONNECT_REQUEST delivered, awaiting accept/reject
  kAccepting,       // passive: ACCEPT sent, awaiting RTU
  kEstablished,
  kDisconnected,
  kRejected,
  kError,
};

// The same-host link during the handshake (shm_link.h). The active side
// offers a segment in CONNECT_REQ; the passive side, when the peer is on this
// host and in this network namespace and answers its process_vm_readv probe,
// maps it and says so in ACCEPT, then holds its QP's sends; the active side
// probes back and tells the outcome in RTU's one payload byte. Any failure
// leaves both ends on TCP.
enum class ShmState {
  kNone,        // TCP
  kOffered,     // active: offer sent in CONNECT_REQ
  kPendingRtu,  // passive: accepted the offer; waiting for the RTU verdict
  kActive,      // the link carries the QP's frames
};

// How long rdma_destroy_id waits for the id's returned events to be acked.
inline constexpr absl::Duration kDestroyIdAckWait = absl::Seconds(5);

// How long the passive side waits for the RTU after rdma_accept, in ms
// (SetRtuTimeoutMillis). The IB CM resends an unanswered REP every
// 4.096 us * 2^CMA_CM_RESPONSE_TIMEOUT (20: 4.3 s), CMA_MAX_CM_RETRIES (15)
// times, then reports IB_CM_REP_ERROR, which rdma_cm turns into
// RDMA_CM_EVENT_UNREACHABLE -ETIMEDOUT (Linux drivers/infiniband/core/cma.c):
// 16 * 4,294.967 ms.
inline constexpr uint32_t kDefaultRtuTimeoutMillis = 68720;
std::atomic<uint32_t> g_rtu_timeout_ms{kDefaultRtuTimeoutMillis};

struct SoftCmEvent {
  rdma_cm_event ev;  // first member
  uint8_t private_data[256];
  uint64_t id_serial = 0;  // SoftCmId::serial of ev.id, which may die first
  // The active side's ESTABLISHED for an id with rdma_cm's own QP: the QP
  // joins the link and the RTU goes out when rdma_get_cm_event returns it
  // (FinishConnectResponse).
  bool establish_on_get = false;
};

absl::Mutex& RegistryMutex();  // below: the live ids and their unacked events

// Events are queued per channel under the channel's own mutex; the poster
// holds the id's mutex (which orders them per id, and against
// rdma_migrate_id), rdma_get_cm_event only the channel's. Owned by the channel
// registry until rdma_destroy_event_channel, and by each rdma_get_cm_event in
// progress on it: a thread still waiting on a destroyed channel (rping's cm
// thread, while its main thread destroys the id and the channel) touches
// live memory and an open fd, as the kernel keeps a file open for a system
// call in progress, and it stays blocked as it would in the kernel.
struct SoftEventChannel {
  rdma_event_channel ch{-1};  // first member; ch.fd is a semaphore eventfd
  absl::Mutex mu;
  std::deque<SoftCmEvent*> events ABSL_GUARDED_BY(mu);
  bool destroyed ABSL_GUARDED_BY(mu) = false;
  ~SoftEventChannel() {
    if (ch.fd >= 0) ::close(ch.fd);
  }
};

// The fields that follow the rdma_cm_id in librdmacm's private struct
// cma_id_private, and its struct cma_device, as rdma-core v44 lays them out
// (librdmacm/cma.c). librdmacm's rsockets (rsocket.c, inside librdmacm.so)
// run unmodified on softrdma's ids under the preload library, and read these
// through librdmacm's internal helpers: ucma_max_qpsize (cma_dev->max_qpsize)
// and ucma_complete (sync, then rdma_get_cm_event into id->event).
struct LibrdmacmDevice {
  ibv_device* dev;
  void* entry_next;  // struct list_node
  void* entry_prev;
  ibv_context* verbs;
  ibv_pd* pd;
  void* xrcd;
  void* port;
  uint64_t guid;
  int port_cnt;
  int refcnt;
  int max_qpsize;
  uint8_t max_initiator_depth;
  uint8_t max_responder_resources;
  int ibv_idx;
  uint8_t is_device_dead;
};
struct LibrdmacmIdFields {
  LibrdmacmDevice* cma_dev;
  void* connect;
  size_t connect_len;
  int events_completed;
  int connect_error;
  int sync;
};

LibrdmacmDevice* FakeCmaDevice() {
  static LibrdmacmDevice* d = [] {
    auto* dev = new LibrdmacmDevice();
    dev->max_qpsize = static_cast<int>(kMaxQpWr);
    dev->max_initiator_depth = kMaxRdAtom;
    dev->max_responder_resources = kMaxRdAtom;
    dev->port_cnt = 1;
    return dev;
  }();
  return d;
}

// What the passive side's RTU timer holds (ArmRtuTimer).
struct RtuWait {
  std::weak_ptr<SoftCmId> id;
};

// Owned by the id registry from PublishId until rdma_destroy_id; everything
// else holds weak_ptrs (`self`), or a shared_ptr for the length of a call, so
// the memory outlives every handler that may still look at it.
struct SoftCmId {
  rdma_cm_id id;  // first member
  LibrdmacmIdFields librdmacm{FakeCmaDevice(), nullptr, 0, 0, 0, 0};  // see above
  // Set before the id is published; constant afterwards.
  uint64_t serial = 0;
  std::weak_ptr<SoftCmId> self;
  // Synchronous id (created without an event channel, as rdma_create_ep
  // does): operations wait for their outcome on a private channel.
  bool sync = false;
  bool passive = false;  // made by a listener for a CONNECT_REQ

  // Guards the fields below and the rdma_cm_id fields softrdma writes once
  // the id is published (channel, qp, pd, verbs, route.addr).
  absl::Mutex mu;
  // rdma_destroy_id ran: every call and handler that finds the id locked this
  // way leaves it alone (calls fail with EINVAL).
  bool destroyed ABSL_GUARDED_BY(mu) = false;
  // rdma_create_ep on a passive id: get_request gives each new id a QP.
  bool has_ep_qp_attr ABSL_GUARDED_BY(mu) = false;
  ibv_qp_init_attr ep_qp_attr ABSL_GUARDED_BY(mu) = {};
  ibv_pd* ep_pd ABSL_GUARDED_BY(mu) = nullptr;
  CmState state ABSL_GUARDED_BY(mu) = CmState::kIdle;
  // The socket from rdma_bind_addr, until listen or connect takes it.
  int bound_fd ABSL_GUARDED_BY(mu) = -1;
  std::shared_ptr<Conn> conn ABSL_GUARDED_BY(mu);
  // Passive side between rdma_accept and RTU: what the RTU timer
  // (ArmRtuTimer) holds on to, weakly; reset when the wait ends.
  std::shared_ptr<RtuWait> rtu_wait ABSL_GUARDED_BY(mu);
  std::shared_ptr<Listener> listener ABSL_GUARDED_BY(mu);
  // Listener: accepted sockets whose CONNECT_REQ has not arrived yet.
  std::vector<std::shared_ptr<Conn>> pending ABSL_GUARDED_BY(mu);
  int timeout_ms ABSL_GUARDED_BY(mu) = 2000;
  bool tcp_connecting ABSL_GUARDED_BY(mu) = false;
  bool disconnect_event_posted ABSL_GUARDED_BY(mu) = false;
  // Active side with rdma_cm's QP: ESTABLISHED is queued and its QP not yet
  // on the link (FinishConnectResponse).
  bool establish_pending ABSL_GUARDED_BY(mu) = false;
  // That ESTABLISHED was handed out as CONNECT_ERROR: the id's later
  // DISCONNECTED and REJECTED are dropped, as librdmacm drops them after a
  // failed ucma_process_conn_resp. Read by get_cm_event under the registry's
  // mutex.
  std::atomic<bool> connect_error{false};
  // Passive side: the client vanished before accept / reject.
  bool peer_gone ABSL_GUARDED_BY(mu) = false;
  // Events of this id that get_cm_event returned and ack_cm_event has not
  // taken back. librdmacm's rdma_destroy_id blocks until this is 0.
  int unacked_events ABSL_GUARDED_BY(RegistryMutex()) = 0;
  ConnParams local ABSL_GUARDED_BY(mu);
  ConnParams remote ABSL_GUARDED_BY(mu);
  ShmState shm_state ABSL_GUARDED_BY(mu) = ShmState::kNone;
  std::shared_ptr<ShmLink> shm ABSL_GUARDED_BY(mu);
  // A QP the application created itself (id.qp stays NULL, as librdmacm
  // leaves it) and named in rdma_conn_param.qp_num; it moves the QP through
  // INIT / RTR / RTS itself, with rdma_init_qp_attr.
  std::shared_ptr<SoftQp> user_qp ABSL_GUARDED_BY(mu);
};

static_assert(offsetof(SoftCmId, librdmacm) == sizeof(rdma_cm_id),
              "librdmacm's fields must follow the rdma_cm_id, as in cma_id_private");

// The registry of live ids and every id's count of unacked events: held only
// for a lookup, an insert or erase, or an event count; innermost of the cm
// locks (after SoftCmId::mu and SoftEventChannel::mu).
absl::Mutex& RegistryMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

namespace {

SoftCmId* CmIdOf(rdma_cm_id* id) { return reinterpret_cast<SoftCmId*>(id); }

// Event channels this process created and has not destroyed, checked as ids
// are (LiveId): perftest 4.5 destroys its channel twice after a rejected
// connect. Its own mutex: channels are not rdma_cm connection state.
ABSL_CONST_INIT absl::Mutex g_channels_mu(absl::kConstInit);
absl::flat_hash_map<const rdma_event_channel*, std::shared_ptr<SoftEventChannel>>& LiveChannels()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_channels_mu) {
  static auto* m =
      new absl::flat_hash_map<const rdma_event_channel*, std::shared_ptr<SoftEventChannel>>();
  return *m;
}

// The live channel at `ch`, or nullptr (logged, errno EINVAL).
std::shared_ptr<SoftEventChannel> LiveChannel(const rdma_event_channel* ch) {
  {
    absl::MutexLock l(&g_channels_mu);
    auto it = ch != nullptr ? LiveChannels().find(ch) : LiveChannels().end();
    if (it != LiveChannels().end()) return it->second;
  }
  LOG(ERROR) << "softrdma: " << static_cast<const void*>(ch)
             << " is not a live rdma_event_channel (destroyed, or never created); EINVAL";
  errno = EINVAL;
  return nullptr;
}

bool IsLiveChannel(const rdma_event_channel* ch) { return LiveChannel(ch) != nullptr; }
SoftEventChannel* ChannelOf(rdma_event_channel* c) {
  return reinterpret_cast<SoftEventChannel*>(c);
}

// Live ids by serial, so an event (which may outlive its id) finds its id's
// count of unacked events.
absl::flat_hash_map<uint64_t, SoftCmId*>& LiveIds() ABSL_EXCLUSIVE_LOCKS_REQUIRED(RegistryMutex()) {
  static auto* m = new absl::flat_hash_map<uint64_t, SoftCmId*>();
  return *m;
}
uint64_t g_next_serial ABSL_GUARDED_BY(RegistryMutex()) = 1;

// The same ids by address, owning them. Every rdma_cm call looks the id it is
// handed up here before touching it: a caller passing a destroyed id (or one
// read from freed memory, as perftest 4.5's rdma_cm retry does) gets EINVAL
// instead of softrdma dereferencing a wild pointer.
absl::flat_hash_map<const rdma_cm_id*, std::shared_ptr<SoftCmId>>& LiveIdAddrs()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(RegistryMutex()) {
  static auto* m = new absl::flat_hash_map<const rdma_cm_id*, std::shared_ptr<SoftCmId>>();
  return *m;
}

// A new, unpublished id (zeroed rdma_cm_id).
std::shared_ptr<SoftCmId> NewId() {
  auto s = std::make_shared<SoftCmId>();
  std::memset(&s->id, 0, sizeof(s->id));
  s->self = s;
  return s;
}

void PublishId(const std::shared_ptr<SoftCmId>& s) {
  absl::MutexLock l(&RegistryMutex());
  s->serial = g_next_serial++;
  LiveIds()[s->serial] = s.get();
  LiveIdAddrs()[&s->id] = s;
  Stat().live_cm_ids++;
}

// Erases a destroyed id from the registry. The caller holds its own
// reference, so the id is not freed here (under its lock).
void UnpublishId(SoftCmId* s) {
  std::shared_ptr<SoftCmId> owner;
  {
    absl::MutexLock l(&RegistryMutex());
    LiveIds().erase(s->serial);
    auto it = LiveIdAddrs().find(&s->id);
    if (it == LiveIdAddrs().end()) return;
    owner = std::move(it->second);
    LiveIdAddrs().erase(it);
  }
  Stat().live_cm_ids--;
}

int DeadIdError(const rdma_cm_id* id) {
  LOG(ERROR) << "softrdma: rdma_cm call on " << static_cast<const void*>(id)
             << ", which is not a live rdma_cm_id (destroyed, or never created); EINVAL";
  errno = EINVAL;
  return -1;
}

// The live id at `id`, or nullptr (logged, errno EINVAL) when `id` is not a
// live id of this process. The caller then locks it and checks `destroyed`:
// another thread may destroy it in between.
std::shared_ptr<SoftCmId> LiveId(const rdma_cm_id* id) {
  {
    absl::MutexLock l(&RegistryMutex());
    auto it = id != nullptr ? LiveIdAddrs().find(id) : LiveIdAddrs().end();
    if (it != LiveIdAddrs().end()) return it->second;
  }
  DeadIdError(id);
  return nullptr;
}

// The live id numbered `serial`, or nullptr.
std::shared_ptr<SoftCmId> IdBySerial(uint64_t serial) {
  absl::MutexLock l(&RegistryMutex());
  auto it = LiveIds().find(serial);
  if (it == LiveIds().end()) return nullptr;
  return it->second->self.lock();
}

// Queues an event for `id` on `ch`, with `listen_id` (a CONNECT_REQUEST,
// which goes on the listener's channel; the caller then holds the listener's
// mutex too).
void PostEventOn(SoftEventChannel* ch, SoftCmId* id, rdma_cm_event_type type, int status,
                 const ConnParams* params, SoftCmId* listen_id, bool establish_on_get = false)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(id->mu) {
  auto* e = new SoftCmEvent();
  e->establish_on_get = establish_on_get;
  std::memset(&e->ev, 0, sizeof(e->ev));
  e->ev.id = &id->id;
  e->id_serial = id->serial;
  e->ev.listen_id = listen_id != nullptr ? &listen_id->id : nullptr;
  e->ev.event = type;
  e->ev.status = status;
  if (params != nullptr) {
    rdma_conn_param& c = e->ev.param.conn;
    std::memcpy(e->private_data, params->private_data, params->private_data_len);
    c.private_data = params->private_data_len > 0 ? e->private_data : nullptr;
    c.private_data_len = params->private_data_len;
    c.responder_resources = params->responder_resources;
    c.initiator_depth = params->initiator_depth;
    c.retry_count = params->retry_count;
    c.rnr_retry_count = params->rnr_retry_count;
    c.qp_num = params->qp_num;
  }
  {
    absl::MutexLock l(&ch->mu);
    ch->events.push_back(e);
  }
  SignalEventFd(ch->ch.fd);
}

// Queues an event for `id` on its own channel.
void PostEvent(SoftCmId* id, rdma_cm_event_type type, int status,
               const ConnParams* params = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(id->mu) {
  PostEventOn(ChannelOf(id->id.channel), id, type, status, params, nullptr);
}

void FillParams(const rdma_conn_param* p, uint32_t qp_num, ConnParams* out) {
  *out = ConnParams();
  out->qp_num = qp_num;
  if (p == nullptr) return;
  if (qp_num == 0) out->qp_num = p->qp_num;
  out->responder_resources = p->responder_resources;
  out->initiator_depth = p->initiator_depth;
  out->retry_count = p->retry_count;
  out->rnr_retry_count = p->rnr_retry_count;
  out->private_data_len = p->private_data_len;
  if (p->private_data_len > 0 && p->private_data != nullptr) {
    std::memcpy(out->private_data, p->private_data, p->private_data_len);
  }
}

// What librdmacm uses where the user gave no rdma_conn_param (rnr_retry 7,
// the device's maximum of RDMA READ / atomic resources), and the device
// maximum for RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (0xFF, "as many as
// the device has").
// librdmacm refuses more READ / atomic resources than the device has, except
// 0xFF (RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH): EINVAL.
bool ValidRdAtomic(const rdma_conn_param& p) {
  auto ok = [](uint8_t v) { return v == 0xFF || v <= kMaxRdAtom; };
  return ok(p.responder_resources) && ok(p.initiator_depth);
}

// `req`: on the passive side, the CONNECT_REQ's parameters. There, as
// librdmacm's rdma_accept does, "as many as possible" (no conn_param, or
// RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH) means what the request offered:
// our responder resources up to its initiator depth, our initiator depth up
// to its responder resources (and the device's maximum).
void CompleteLocalParams(const rdma_conn_param* p, ConnParams* local,
                         const ConnParams* req = nullptr) {
  if (p == nullptr) {
    local->rnr_retry_count = 7;
    local->retry_count = 7;
    local->responder_resources = 0xFF;
    local->initiator_depth = 0xFF;
  }
  const uint8_t max_resp = req != nullptr ? std::min<uint8_t>(req->initiator_depth, kMaxRdAtom)
                                          : kMaxRdAtom;
  const uint8_t max_init = req != nullptr ? std::min<uint8_t>(req->responder_resources, kMaxRdAtom)
                                          : kMaxRdAtom;
  if (local->responder_resources == 0xFF) local->responder_resources = max_resp;
  if (local->initiator_depth == 0xFF) local->initiator_depth = max_init;
}

void SendControl(Conn* conn, FrameType type, const std::vector<uint8_t>& payload) {
  FrameHeader h;
  h.type = type;
  conn->SendFrame(h, payload.data(), static_cast<uint32_t>(payload.size()));
}

// Connects the id's QP (if any) to its connection; the QP goes to RTS. The
// peer's rnr_retry_count governs our sends (rdma_cm(7): "the maximum number of
// times that a send operation from the remote peer should be retried").
bool AttachQp(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  if (s->user_qp != nullptr && s->conn != nullptr) {
    // The application's own QP: only the link. The passive side holds its
    // sends until RTU, when the active side's QP is known to be in RTR (a NIC
    // would drop them earlier, and retransmit).
    const bool passive =
        s->state == CmState::kConnectReqRcvd || s->state == CmState::kAccepting;
    const bool hold = passive || s->shm_state == ShmState::kPendingRtu;
    const bool use_shm = s->shm_state == ShmState::kPendingRtu || s->shm_state == ShmState::kActive;
    // The connection knows the QP first, as below: binding to the same-host
    // link may offer the peer a hint slot, which it answers at once.
    s->conn->set_qp(s->user_qp);
    QpBindLink(s->user_qp.get(), s->conn, use_shm ? s->shm : nullptr, hold, passive);
    return true;
  }
  if (s->id.qp == nullptr || s->conn == nullptr) return false;
  SoftQp* q = internal::ToSoft(s->id.qp);
  const bool passive =
      s->state == CmState::kConnectReqRcvd || s->state == CmState::kAccepting;
  // The transport retry count is the connector's (rdma_accept ignores its
  // conn_param.retry_count, rdma_accept(3)).
  const uint8_t retry_cnt = s->passive ? s->remote.retry_count : s->local.retry_count;
  // The passive side holds its sends until RTU, as for the application's
  // own QP above: the active side's QP joins the link only when its
  // application takes ESTABLISHED (FinishConnectResponse).
  const bool hold = passive;  // kPendingRtu is passive only
  const bool use_shm = s->shm_state == ShmState::kPendingRtu || s->shm_state == ShmState::kActive;
  // READ / atomic resources as the IB CM negotiated them (rdma_init_qp_attr
  // below): the passive side's own accept values; on the active side the
  // REP's, its responder resources being our initiator depth.
  const uint8_t resp_res = s->passive ? s->local.responder_resources : s->remote.initiator_depth;
  const uint8_t init_depth = s->passive ? s->local.initiator_depth : s->remote.responder_resources;
  // The connection knows the QP first: QpAttach may offer the peer a hint
  // slot, and the peer's answer (a ring record and a doorbell frame) can
  // reach the progress thread before this thread is back here.
  s->conn->set_qp(q->self.lock());
  if (QpAttach(q, s->conn, use_shm ? s->shm : nullptr, hold, s->remote.qp_num,
               s->remote.rnr_retry_count, resp_res, init_depth, retry_cnt, passive)) {
    return true;
  }
  s->conn->set_qp(nullptr);
  return false;
}

void DetachConn(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu);

// rdma_get_cm_event took the active side's ESTABLISHED of an id with
// rdma_cm's own QP (SoftCmEvent::establish_on_get) and decides, as
// librdmacm's rdma_get_cm_event and ucma_process_conn_resp do then, what the
// event is:
//  - ESTABLISHED: the QP joined the link and the RTU went out;
//  - CONNECT_RESPONSE: the id has no QP any more (rdma_destroy_qp since);
//  - CONNECT_ERROR, status `*status`: the QP could not join (it is in ERR;
//    -EINVAL) or the connection is gone (the link broke or the peer
//    disconnected since; -ECONNRESET). The QP is flushed to ERR, no RTU is
//    sent, the TCP connection closes (the passive side sees CONNECT_ERROR),
//    and the id's later DISCONNECTED and REJECTED are dropped.
rdma_cm_event_type FinishConnectResponse(SoftCmId* s, int* status) {
  absl::MutexLock l(&s->mu);
  s->establish_pending = false;
  *status = 0;
  if (s->id.qp == nullptr) return RDMA_CM_EVENT_CONNECT_RESPONSE;
  if (s->state == CmState::kConnectResponse && !s->destroyed && s->conn != nullptr) {
    if (AttachQp(s)) {
      SendControl(s->conn.get(), FrameType::kRtu,
                  {static_cast<uint8_t>(s->shm_state == ShmState::kActive ? 1 : 0)});
      s->state = CmState::kEstablished;
      return RDMA_CM_EVENT_ESTABLISHED;
    }
    *status = -EINVAL;
  } else {
    *status = -ECONNRESET;
  }
  QpFlushToError(internal::ToSoft(s->id.qp));
  if (s->state == CmState::kConnectResponse) {
    s->state = CmState::kError;
    DetachConn(s);
  }
  s->connect_error.store(true);
  return RDMA_CM_EVENT_CONNECT_ERROR;
}

void DropShm(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  s->shm_state = ShmState::kNone;
  s->shm.reset();  // unlinks the name if nobody did; the QP may keep a mapping
}

void DetachConn(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  s->rtu_wait.reset();
  DropShm(s);
  if (s->conn == nullptr) return;
  s->conn->set_cm_id({});
  s->conn->set_qp(nullptr);
  s->conn->Close();
  s->conn.reset();
}

// The connection ended (either side disconnected, or the peer vanished):
// flush the QP and post DISCONNECTED once.
void EndConnection(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  s->state = CmState::kDisconnected;
  if (s->conn != nullptr) s->conn->set_qp(nullptr);
  if (s->id.qp != nullptr) QpFlushToError(internal::ToSoft(s->id.qp));
  if (s->user_qp != nullptr) QpFlushToError(s->user_qp.get());
  if (!s->disconnect_event_posted) {
    s->disconnect_event_posted = true;
    PostEvent(s, RDMA_CM_EVENT_DISCONNECTED, 0);
  }
}

// rdma_accept: if the RTU does not come in time (the active side's
// application never takes its CONNECT_RESPONSE / ESTABLISHED, or a peer that
// is not rdma_cm at all stops after CONNECT_REQ), the accept fails as the IB
// CM's does once its REP retries are spent: the id gets UNREACHABLE
// -ETIMEDOUT, its QP is flushed and the connection closes, so the id's
// resources do not stay taken by a peer that never finishes.
// The timer owns nothing of the id: it holds the small RtuWait weakly, and
// the id holds the RtuWait until the wait ends (RTU, a closed connection,
// destroy), so neither the id nor its memory outlives those for the timeout.
void RtuTimerFired(const std::shared_ptr<void>& owner) {
  const auto wait = std::static_pointer_cast<RtuWait>(owner);
  std::shared_ptr<SoftCmId> live = wait->id.lock();
  if (live == nullptr) return;
  absl::MutexLock l(&live->mu);
  if (live->destroyed || live->state != CmState::kAccepting || live->rtu_wait != wait) return;
  live->state = CmState::kError;
  if (live->id.qp != nullptr) QpFlushToError(internal::ToSoft(live->id.qp));
  if (live->user_qp != nullptr) QpFlushToError(live->user_qp.get());
  DetachConn(live.get());
  PostEvent(live.get(), RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
}

void ArmRtuTimer(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  s->rtu_wait = std::make_shared<RtuWait>(RtuWait{s->self});
  const uint32_t ms = g_rtu_timeout_ms.load(std::memory_order_relaxed);
  ProgressThread::Get().RunAfter(absl::Milliseconds(ms), std::weak_ptr<void>(s->rtu_wait),
                                 &RtuTimerFired);
}

void FailConnect(SoftCmId* s, int err) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  DetachConn(s);
  s->tcp_connecting = false;
  if (err == ECONNREFUSED) {
    // Nobody listens on that port: IB CM answers "invalid service ID".
    s->state = CmState::kRejected;
    PostEvent(s, RDMA_CM_EVENT_REJECTED, kRejInvalidServiceId);
  } else {
    s->state = CmState::kError;
    PostEvent(s, RDMA_CM_EVENT_UNREACHABLE, -err);
  }
}

void RemoveEventsFor(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu);

// Unlinks the id from its QP, if the QP still names it.
void UnlinkQp(SoftQp* q, SoftCmId* s) {
  internal::DomainLock l(&q->mu);
  if (q->cm_id.lock().get() == s) q->cm_id.reset();
}

// rdma_destroy_id's work, and that of a listener's undelivered children: the
// id is marked destroyed, let go of everything, and erased from the registry.
// The caller holds a reference to it (it is freed when the last one goes).
void DestroyIdLocked(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  s->destroyed = true;
  if (s->listener != nullptr) {
    s->listener->Close();
    s->listener.reset();
  }
  for (auto& c : s->pending) {
    c->set_listen_id({});
    c->Close();
  }
  s->pending.clear();
  if (s->bound_fd >= 0) ::close(s->bound_fd);
  s->bound_fd = -1;
  DetachConn(s);
  DropShm(s);
  if (s->id.qp != nullptr) UnlinkQp(internal::ToSoft(s->id.qp), s);
  if (s->user_qp != nullptr) {
    UnlinkQp(s->user_qp.get(), s);
    s->user_qp.reset();
  }
  RemoveEventsFor(s);
  UnpublishId(s);
  if (s->sync) softrdma::destroy_event_channel(s->id.channel);
}

// Drops undelivered events of a dying id; a CONNECT_REQUEST a dying listener
// never delivered takes its new id along (the child's mutex after the
// listener's: the lock order).
void RemoveEventsFor(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  SoftEventChannel* ch = ChannelOf(s->id.channel);
  std::vector<uint64_t> orphans;
  {
    absl::MutexLock l(&ch->mu);
    auto keep = std::remove_if(ch->events.begin(), ch->events.end(), [&](SoftCmEvent* e) {
      const bool mine = e->ev.id == &s->id || e->ev.listen_id == &s->id;
      if (!mine) return false;
      if (e->ev.listen_id == &s->id && e->ev.id != &s->id) orphans.push_back(e->id_serial);
      delete e;
      return true;
    });
    ch->events.erase(keep, ch->events.end());
  }
  for (uint64_t serial : orphans) {
    std::shared_ptr<SoftCmId> o = IdBySerial(serial);
    if (o == nullptr) continue;
    absl::MutexLock l(&o->mu);
    if (!o->destroyed) DestroyIdLocked(o.get());
  }
}

bool GoodFamily(const sockaddr* a) {
  return a != nullptr && (a->sa_family == AF_INET || a->sa_family == AF_INET6);
}

socklen_t AddrLen(const sockaddr* a) {
  return a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

uint16_t PortOf(const sockaddr* a) {
  if (a->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(a)->sin_port;
  if (a->sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6*>(a)->sin6_port;
  return 0;
}

int Fail(int err) {
  errno = err;
  return -1;
}

}  // namespace

namespace {

// Whether `s`, locked after following a Conn's weak reference, is alive and
// still owns that connection (DetachConn hands it back, e.g. after REJECT).
bool StillOwns(SoftCmId* s, Conn* conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  return !s->destroyed && s->conn.get() == conn;
}

}  // namespace

void CmOnIncoming(const std::weak_ptr<SoftCmId>& listen_id, std::shared_ptr<Conn> conn) {
  std::shared_ptr<SoftCmId> l = listen_id.lock();
  if (l != nullptr) {
    absl::MutexLock lock(&l->mu);
    if (!l->destroyed && l->state == CmState::kListen) {
      conn->set_listen_id(l);
      l->pending.push_back(std::move(conn));
      return;
    }
  }
  conn->Close();  // the listener was destroyed meanwhile
}

void CmOnConnectDone(Conn* conn, int error) {
  std::shared_ptr<SoftCmId> s = conn->cm_id();
  if (s == nullptr) return;
  absl::MutexLock l(&s->mu);
  if (!StillOwns(s.get(), conn) || !s->tcp_connecting) return;
  if (error != 0) return FailConnect(s.get(), error);
  s->tcp_connecting = false;
  socklen_t len = sizeof(s->id.route.addr.src_storage);
  ::getsockname(conn->fd(), &s->id.route.addr.src_addr, &len);
  SendControl(conn, FrameType::kConnectReq, EncodeConnParams(s->local));
}

namespace {

void OnClosedLocked(SoftCmId* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  switch (s->state) {
    case CmState::kConnectResponse:
      if (s->establish_pending) {
        // The id's QP never joined the link (its ESTABLISHED is not taken
        // yet): no transport failure to report; that event becomes
        // CONNECT_ERROR (FinishConnectResponse).
        s->state = CmState::kError;
        DetachConn(s);
        break;
      }
      [[fallthrough]];
    case CmState::kEstablished:
      // The TCP connection broke without a DISCONNECT: a transport failure,
      // which the QP reports as IBV_EVENT_QP_FATAL before it flushes.
      if (s->id.qp != nullptr) QpTransportFailed(internal::ToSoft(s->id.qp));
      if (s->user_qp != nullptr) QpTransportFailed(s->user_qp.get());
      EndConnection(s);
      break;
    case CmState::kConnecting:
      // The passive side went away before answering: its id was destroyed
      // without rdma_accept / rdma_reject.
      s->state = CmState::kRejected;
      DetachConn(s);
      PostEvent(s, RDMA_CM_EVENT_REJECTED, kRejConsumerDefined);
      break;
    case CmState::kAccepting:
      s->state = CmState::kError;
      if (s->id.qp != nullptr) QpFlushToError(internal::ToSoft(s->id.qp));
      PostEvent(s, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
      break;
    case CmState::kConnectReqRcvd:
      s->peer_gone = true;  // reported when the user accepts
      break;
    default:
      break;
  }
}

}  // namespace

void CmOnClosed(Conn* conn) {
  if (std::shared_ptr<SoftCmId> l = conn->listen_id()) {
    absl::MutexLock lock(&l->mu);
    auto& p = l->pending;
    p.erase(std::remove_if(p.begin(), p.end(),
                           [conn](const std::shared_ptr<Conn>& c) { return c.get() == conn; }),
            p.end());
    conn->set_listen_id({});
  }
  if (std::shared_ptr<SoftCmId> s = conn->cm_id()) {
    absl::MutexLock l(&s->mu);
    if (StillOwns(s.get(), conn)) OnClosedLocked(s.get());
  }
  conn->set_qp(nullptr);
}

namespace {

// The passive side's half of the same-host link decision for a CONNECT_REQ:
// the permission probe and the segment's mapping (system calls, made before
// any cm lock is taken). `link` stays null when the offer is declined.
struct ShmOfferAnswer {
  bool offered = false;  // the peer offered and is on this host
  std::shared_ptr<ShmLink> link;
};

ShmOfferAnswer AnswerShmOffer(const ConnParams& p) {
  ShmOfferAnswer a;
  if (!p.shm.present || !ShmEnabled() || !SameHost(p.shm)) return a;
  a.offered = true;
  if (ProbePeer(p.shm)) {
    a.link = ShmLink::Open(std::string(p.shm.name, p.shm.name_len), static_cast<pid_t>(p.shm.pid));
  }
  return a;
}

// A listener's connection sent CONNECT_REQ: a new passive id, and
// RDMA_CM_EVENT_CONNECT_REQUEST on the listener's channel. The new id is
// filled in under the listener's mutex and its own, and published before
// either is released, so neither a call nor a frame sees it half made.
void OnConnectReq(Conn* conn, const ConnParams& p, ShmOfferAnswer shm) {
  std::shared_ptr<SoftCmId> l = conn->listen_id();
  if (l == nullptr) return;
  absl::MutexLock ll(&l->mu);
  if (l->destroyed) return;
  std::shared_ptr<Conn> keep;
  auto& pend = l->pending;
  for (auto it = pend.begin(); it != pend.end(); ++it) {
    if (it->get() == conn) {
      keep = *it;
      pend.erase(it);
      break;
    }
  }
  if (keep == nullptr) return;
  std::shared_ptr<SoftCmId> s = NewId();
  s->passive = true;
  s->sync = l->sync;
  absl::MutexLock sl(&s->mu);
  s->id.verbs = l->id.verbs != nullptr ? l->id.verbs : CmContext();
  s->id.channel = l->id.channel;
  if (l->sync) {
    // The CONNECT_REQUEST goes to the listener's channel (get_request
    // takes it); the new id's own events go to its own private channel.
    s->librdmacm.sync = 1;
    s->id.channel = softrdma::create_event_channel();
  }
  s->id.context = l->id.context;  // inherited from the listener, as librdmacm
  s->id.ps = l->id.ps;
  s->id.port_num = 1;
  s->id.qp_type = IBV_QPT_RC;
  socklen_t len = sizeof(s->id.route.addr.src_storage);
  ::getsockname(conn->fd(), &s->id.route.addr.src_addr, &len);
  len = sizeof(s->id.route.addr.dst_storage);
  ::getpeername(conn->fd(), &s->id.route.addr.dst_addr, &len);
  s->conn = std::move(keep);
  s->remote = p;
  if (shm.link != nullptr) {
    s->shm = std::move(shm.link);
    s->shm_state = ShmState::kPendingRtu;
  } else if (shm.offered) {
    Stat().shm_fallbacks++;
  }
  s->state = CmState::kConnectReqRcvd;
  PublishId(s);
  conn->set_cm_id(s);
  conn->set_listen_id({});
  PostEventOn(ChannelOf(l->id.channel), s.get(), RDMA_CM_EVENT_CONNECT_REQUEST, 0, &p, l.get());
}

// Control frames other than CONNECT_REQ, for the id that owns `conn`.
void OnControlFrameLocked(SoftCmId* s, Conn* conn, Frame& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  switch (f.h.type) {
    case FrameType::kAccept: {
      if (s->state != CmState::kConnecting) return;
      if (!DecodeConnParams(f.payload.get(), f.h.length, &s->remote)) {
        LOG(WARNING) << "softrdma: malformed ACCEPT; closing";
        s->state = CmState::kError;
        DetachConn(s);
        PostEvent(s, RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO);
        return;
      }
      if (s->shm_state == ShmState::kOffered) {
        s->shm->Unlink();  // the peer mapped it, or never will
        const ShmHello& peer = s->remote.shm;
        if (peer.present && peer.accept == 1 && ProbePeer(peer)) {
          s->shm->set_peer_pid(static_cast<pid_t>(peer.pid));
          s->shm_state = ShmState::kActive;
        } else {
          if (peer.present && peer.accept == 1) Stat().shm_fallbacks++;
          DropShm(s);
        }
      }
      s->state = CmState::kConnectResponse;
      s->establish_pending = s->id.qp != nullptr;
      if (s->id.qp == nullptr) {
        // No QP of rdma_cm's (librdmacm's rule): the application gets
        // CONNECT_RESPONSE, moves its own QP to RTR and RTS, and calls
        // rdma_establish, which sends RTU.
        AttachQp(s);
        PostEvent(s, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &s->remote);
        return;
      }
      // rdma_cm's own QP: librdmacm moves it to RTR and RTS and sends the
      // RTU inside the rdma_get_cm_event call that returns ESTABLISHED
      // (ucma_process_conn_resp), so nothing the passive side sends can
      // complete on this QP before the application has seen ESTABLISHED.
      // The same here: FinishConnectResponse, when the event is taken.
      PostEventOn(ChannelOf(s->id.channel), s, RDMA_CM_EVENT_ESTABLISHED, 0, &s->remote, nullptr,
                  /*establish_on_get=*/true);
      return;
    }
    case FrameType::kReject: {
      if (s->state != CmState::kConnecting) return;
      ConnParams p;
      p.private_data_len = static_cast<uint8_t>(std::min<uint32_t>(f.h.length, 255));
      if (p.private_data_len > 0) std::memcpy(p.private_data, f.payload.get(), p.private_data_len);
      s->state = CmState::kRejected;
      DetachConn(s);
      PostEvent(s, RDMA_CM_EVENT_REJECTED, kRejConsumerDefined, &p);
      return;
    }
    case FrameType::kRtu: {
      if (s->state != CmState::kAccepting) return;
      s->rtu_wait.reset();  // the RTU timer finds nothing to fail
      if (s->shm_state == ShmState::kPendingRtu) {
        const bool use = f.h.length >= 1 && f.data()[0] == 1;
        if (use) {
          s->shm_state = ShmState::kActive;
        } else {
          DropShm(s);
        }
      }
      // Either QP held its sends since rdma_accept (AttachQp).
      if (s->id.qp != nullptr) {
        QpSetLink(internal::ToSoft(s->id.qp),
                  s->shm_state == ShmState::kActive ? s->shm : nullptr);
      }
      if (s->user_qp != nullptr) {
        QpSetLink(s->user_qp.get(), s->shm_state == ShmState::kActive ? s->shm : nullptr);
      }
      s->state = CmState::kEstablished;
      PostEvent(s, RDMA_CM_EVENT_ESTABLISHED, 0);
      return;
    }
    case FrameType::kDisconnect: {
      if (s->state == CmState::kEstablished || s->state == CmState::kAccepting ||
          s->state == CmState::kConnectResponse || s->state == CmState::kDisconnected) {
        EndConnection(s);
      } else if (std::shared_ptr<SoftQp> q = conn->qp()) {
        QpFlushToError(q.get());
        conn->set_qp(nullptr);
      }
      return;
    }
    default:
      return;
  }
}

// A control frame: handled under the mutex of the id that owns `conn`. With
// no such id (destroyed, or detached) only a DISCONNECT still matters, to
// the QP the connection carries.
void OnControlFrame(Conn* conn, Frame& f) {
  if (std::shared_ptr<SoftCmId> s = conn->cm_id()) {
    absl::MutexLock l(&s->mu);
    if (StillOwns(s.get(), conn)) {
      OnControlFrameLocked(s.get(), conn, f);
      return;
    }
  }
  if (f.h.type != FrameType::kDisconnect) return;
  if (std::shared_ptr<SoftQp> q = conn->qp()) {
    QpFlushToError(q.get());
    conn->set_qp(nullptr);
  }
}

}  // namespace

void CmDispatchFrame(Conn* conn, Frame& f) {
  switch (f.h.type) {
    case FrameType::kConnectReq: {
      ConnParams p;
      if (!DecodeConnParams(f.payload.get(), f.h.length, &p)) {
        LOG(WARNING) << "softrdma: malformed CONNECT_REQ; closing";
        conn->Close();
        return;
      }
      ShmOfferAnswer shm = AnswerShmOffer(p);  // system calls: before any lock
      OnConnectReq(conn, p, std::move(shm));
      return;
    }
    case FrameType::kAccept:
    case FrameType::kReject:
    case FrameType::kRtu:
    case FrameType::kDisconnect:
      OnControlFrame(conn, f);
      return;
    default:
      // Data frames: the QP's own mutex orders them; no cm state is touched.
      if (std::shared_ptr<SoftQp> q = conn->qp()) QpOnFrame(q.get(), f);
      return;
  }
}

void CmOnQpDestroyed(SoftQp* q) {
  std::shared_ptr<SoftCmId> s;
  {
    internal::DomainLock l(&q->mu);
    s = q->cm_id.lock();
  }
  if (s == nullptr) return;
  absl::MutexLock l(&s->mu);
  // Re-checked under the id's lock: the id may have been destroyed, or have
  // let go of this QP, since.
  if (s->destroyed || (s->id.qp != &q->qp && s->user_qp.get() != q)) return;
  if (s->conn != nullptr && s->conn->qp().get() == q) s->conn->set_qp(nullptr);
  if ((s->state == CmState::kEstablished || s->state == CmState::kAccepting ||
       s->state == CmState::kConnectResponse) &&
      s->conn != nullptr) {
    // The peer must not wait forever on a QP that is gone.
    SendControl(s->conn.get(), FrameType::kDisconnect, {});
    s->state = CmState::kDisconnected;
  }
  if (s->user_qp.get() == q) s->user_qp.reset();
  if (s->id.qp == &q->qp) s->id.qp = nullptr;
  UnlinkQp(q, s.get());
}

// rdma_connect / rdma_accept on an id without a QP of rdma_cm's: takes the
// application's QP named by conn_param.qp_num (none named, or no QP of that
// number: the connection carries none, and the peer's requests go
// unanswered, as on a NIC). EINVAL when that QP is in use by another id or
// belongs to another device context. The check and the claim are one step
// under the QP's mutex, so two ids cannot both take it.
bool TakeUserQp(SoftCmId* s, uint32_t qp_num) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
  if (s->id.qp != nullptr || qp_num == 0) return true;
  std::shared_ptr<SoftQp> q = FindQp(qp_num);
  if (q == nullptr) return true;
  if (q->qp.context != s->id.verbs) return false;
  {
    internal::DomainLock l(&q->mu);
    if (!q->cm_id.expired()) return false;
    q->cm_id = s->self;
  }
  s->user_qp = std::move(q);
  return true;
}

void LockCmRegistriesForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  g_channels_mu.Lock();
  RegistryMutex().Lock();
}

void UnlockCmRegistriesForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  RegistryMutex().Unlock();
  g_channels_mu.Unlock();
}

}  // namespace internal

using internal::CmState;
using internal::SoftCmEvent;
using internal::SoftCmId;
using internal::SoftEventChannel;

rdma_event_channel* create_event_channel() {
  auto ch = std::make_shared<SoftEventChannel>();
  ch->ch.fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (ch->ch.fd < 0) return nullptr;  // errno from eventfd
  absl::MutexLock l(&internal::g_channels_mu);
  internal::LiveChannels()[&ch->ch] = ch;
  return &ch->ch;
}

void destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  std::shared_ptr<SoftEventChannel> ch;
  {
    absl::MutexLock l(&internal::g_channels_mu);
    auto it = internal::LiveChannels().find(channel);
    if (it == internal::LiveChannels().end()) {
      LOG(ERROR) << "softrdma: rdma_destroy_event_channel on " << static_cast<void*>(channel)
                 << ", which is not a live channel (destroyed twice?); ignored";
      return;
    }
    ch = std::move(it->second);
    internal::LiveChannels().erase(it);
  }
  absl::MutexLock l(&ch->mu);
  for (SoftCmEvent* e : ch->events) delete e;
  ch->events.clear();
  ch->destroyed = true;
  // The channel (and its fd) goes with the last reference: this one, or that
  // of an rdma_get_cm_event still in progress on it.
}

int create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
              rdma_port_space ps) {
  if (id == nullptr) return internal::Fail(EINVAL);
  if (ps != RDMA_PS_TCP) return internal::Fail(EOPNOTSUPP);
  const bool sync = channel == nullptr;
  if (!sync && !internal::IsLiveChannel(channel)) return -1;
  if (sync) {
    channel = create_event_channel();
    if (channel == nullptr) return -1;
  }
  std::shared_ptr<SoftCmId> s = internal::NewId();
  s->sync = sync;
  {
    absl::MutexLock l(&s->mu);  // not published yet: for the annotations
    s->librdmacm.sync = sync ? 1 : 0;
    s->id.channel = channel;
    s->id.context = context;
    s->id.ps = ps;
    s->id.qp_type = IBV_QPT_RC;
  }
  internal::PublishId(s);
  *id = &s->id;
  return 0;
}

int destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> s = internal::LiveId(id);
  if (s == nullptr) return -1;
  // A synchronous id's last event (librdmacm keeps it in id->event).
  if (id->event != nullptr) {
    ack_cm_event(id->event);
    id->event = nullptr;
  }
  // librdmacm's rdma_destroy_id waits until every event it returned for the
  // id has been acked, which another thread (e.g. rping's cm thread) may
  // still be about to do. Wait the same way (holding only the registry,
  // which Await releases while it waits and the acks take), but not forever:
  // when nobody acks, rdma-core would hang here for good, so fail loudly
  // (fatal in debug builds, where the tests run) instead of letting such
  // code pass.
  {
    absl::MutexLock reg(&internal::RegistryMutex());
    const bool acked = internal::RegistryMutex().AwaitWithTimeout(
        absl::Condition(
            +[](SoftCmId* id) ABSL_NO_THREAD_SAFETY_ANALYSIS { return id->unacked_events == 0; },
            s.get()),
        internal::kDestroyIdAckWait);
    if (!acked) {
      LOG(DFATAL) << "softrdma: rdma_destroy_id on an id with " << s->unacked_events
                  << " event(s) not acked with rdma_ack_cm_event after "
                  << internal::kDestroyIdAckWait << "; rdma-core would block here forever";
    }
  }
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);  // by another thread meanwhile
  internal::DestroyIdLocked(s.get());
  return 0;
}

int bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr || !internal::GoodFamily(addr)) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->state != CmState::kIdle) return internal::Fail(EINVAL);
  int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, addr, internal::AddrLen(addr)) != 0) {
    int e = errno;
    ::close(fd);
    return internal::Fail(e);
  }
  socklen_t len = sizeof(id->route.addr.src_storage);
  ::getsockname(fd, &id->route.addr.src_addr, &len);
  s->bound_fd = fd;
  s->state = CmState::kBound;
  id->verbs = internal::CmContext();
  id->port_num = 1;
  return 0;
}

int listen(rdma_cm_id* id, int backlog) {
  if (id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->state != CmState::kBound) return internal::Fail(EINVAL);
  // The IB CM queues every REQ whatever the backlog (it only matters to
  // iWARP), so the socket's backlog is the kernel's maximum: a smaller one
  // drops the SYNs of a connection storm, and each dropped connect waits for
  // TCP's 1 s SYN retransmission.
  (void)backlog;
  if (::listen(s->bound_fd, SOMAXCONN) != 0) return -1;
  s->listener = internal::MakeListener(s->bound_fd, s->self);
  s->bound_fd = -1;  // the listener owns it now
  s->listener->Start();
  s->state = CmState::kListen;
  return 0;
}

static int ResolveAddrStart(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                            int timeout_ms) {
  if (id == nullptr || dst_addr == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  // Ask the kernel for a route, before taking the id's lock: a connected UDP
  // socket needs one and tells us the source address it would use. No
  // packet is sent.
  const bool good = internal::GoodFamily(dst_addr);
  int err = 0;
  sockaddr_storage route_src{};
  if (good) {
    int probe = ::socket(dst_addr->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (probe < 0) {
      err = errno;
    } else {
      if (::connect(probe, dst_addr, internal::AddrLen(dst_addr)) != 0) err = errno;
      socklen_t len = sizeof(route_src);
      if (err == 0) ::getsockname(probe, reinterpret_cast<sockaddr*>(&route_src), &len);
      ::close(probe);
    }
  }
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->state != CmState::kIdle && s->state != CmState::kBound) return internal::Fail(EINVAL);
  if (timeout_ms > 0) s->timeout_ms = timeout_ms;
  id->verbs = internal::CmContext();
  id->port_num = 1;
  if (!good) {
    internal::PostEvent(s, RDMA_CM_EVENT_ADDR_ERROR, -EAFNOSUPPORT);
    return 0;
  }
  std::memcpy(&id->route.addr.dst_storage, dst_addr, internal::AddrLen(dst_addr));
  if (err == 0 && s->state != CmState::kBound) {
    std::memcpy(&id->route.addr.src_storage, &route_src, sizeof(route_src));
    id->route.addr.src_sin.sin_port = 0;  // chosen at connect
    if (id->route.addr.src_addr.sa_family == AF_INET6) id->route.addr.src_sin6.sin6_port = 0;
  }
  if (err == 0 && src_addr != nullptr && internal::GoodFamily(src_addr) &&
      s->state != CmState::kBound) {
    std::memcpy(&id->route.addr.src_storage, src_addr, internal::AddrLen(src_addr));
  }
  if (err != 0) {
    internal::PostEvent(s, RDMA_CM_EVENT_ADDR_ERROR, -err);
    return 0;
  }
  s->state = CmState::kAddrResolved;
  internal::PostEvent(s, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  return 0;
}

static int ResolveRouteStart(rdma_cm_id* id, int timeout_ms) {
  if (id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->state != CmState::kAddrResolved) return internal::Fail(EINVAL);
  if (timeout_ms > 0) s->timeout_ms = timeout_ms;
  s->state = CmState::kRouteResolved;
  internal::PostEvent(s, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

namespace {

// librdmacm's ucma_destroy_cqs: destroys the CQs and completion channels the
// id names (one of each when send and receive share them) and clears them.
void DestroyIdCqs(rdma_cm_id* id) {
  if (id->recv_cq != nullptr) {
    destroy_cq(id->recv_cq);
    if (id->send_cq != nullptr && id->send_cq != id->recv_cq) destroy_cq(id->send_cq);
  } else if (id->send_cq != nullptr) {
    destroy_cq(id->send_cq);
  }
  id->recv_cq = nullptr;
  id->send_cq = nullptr;
  if (id->recv_cq_channel != nullptr) {
    destroy_comp_channel(id->recv_cq_channel);
    if (id->send_cq_channel != nullptr && id->send_cq_channel != id->recv_cq_channel) {
      destroy_comp_channel(id->send_cq_channel);
    }
  } else if (id->send_cq_channel != nullptr) {
    destroy_comp_channel(id->send_cq_channel);
  }
  id->recv_cq_channel = nullptr;
  id->send_cq_channel = nullptr;
}

// rdma_create_qp and rdma_create_qp_ex: `ex`, when given, is the extended
// form of `qp_init_attr` (which then points into it), made by create_qp_ex.
int CreateCmQp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr,
               ibv_qp_init_attr_ex* ex) {
  if (id == nullptr || qp_init_attr == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  {
    absl::MutexLock l(&s->mu);
    if (id->verbs == nullptr || id->qp != nullptr) return internal::Fail(EINVAL);
  }
  // The QP and its CQs are made without the id's lock (the caller serialises
  // its own calls on one id, as with librdmacm).
  if (pd == nullptr) {
    internal::SoftContext* c = internal::ToSoft(id->verbs);
    absl::MutexLock l(&c->mu);
    if (c->default_pd == nullptr) c->default_pd = alloc_pd(id->verbs);
    pd = c->default_pd;
  } else if (pd->context != id->verbs) {
    return internal::Fail(EINVAL);
  }
  ibv_qp_init_attr attr = *qp_init_attr;
  // As librdmacm (rdma_create_qp_ex): CQs the id already names (rsockets sets
  // id->recv_cq itself) are used; a queue with neither gets its own CQ and
  // completion channel, recorded in the id; rdma_destroy_qp destroys what the
  // id names. CQs passed only in the attributes stay the caller's.
  if ((id->recv_cq != nullptr && attr.recv_cq != nullptr && id->recv_cq != attr.recv_cq) ||
      (id->send_cq != nullptr && attr.send_cq != nullptr && id->send_cq != attr.send_cq)) {
    return internal::Fail(EINVAL);
  }
  if (attr.recv_cq == nullptr && id->recv_cq == nullptr && attr.cap.max_recv_wr > 0) {
    id->recv_cq_channel = create_comp_channel(id->verbs);
    if (id->recv_cq_channel == nullptr) return -1;
    id->recv_cq = create_cq(id->verbs, attr.cap.max_recv_wr, id, id->recv_cq_channel, 0);
    if (id->recv_cq == nullptr) {
      const int e = errno;
      DestroyIdCqs(id);
      return internal::Fail(e);
    }
  }
  if (attr.send_cq == nullptr && id->send_cq == nullptr && attr.cap.max_send_wr > 0) {
    id->send_cq_channel = create_comp_channel(id->verbs);
    id->send_cq = id->send_cq_channel != nullptr
                      ? create_cq(id->verbs, attr.cap.max_send_wr, id, id->send_cq_channel, 0)
                      : nullptr;
    if (id->send_cq == nullptr) {
      const int e = errno;
      DestroyIdCqs(id);
      return internal::Fail(e);
    }
  }
  if (attr.send_cq == nullptr) attr.send_cq = id->send_cq;
  if (attr.recv_cq == nullptr) attr.recv_cq = id->recv_cq;
  ibv_qp* qp;
  if (ex != nullptr) {
    ibv_qp_init_attr_ex x = *ex;
    std::memcpy(&x, &attr, sizeof(attr));  // the leading ibv_qp_init_attr part
    x.comp_mask |= IBV_QP_INIT_ATTR_PD;
    x.pd = pd;
    qp = softrdma::create_qp_ex(id->verbs, &x);
    attr.cap = x.cap;
  } else {
    qp = softrdma::create_qp(pd, &attr);
  }
  if (qp == nullptr) {
    const int e = errno;
    DestroyIdCqs(id);
    return internal::Fail(e);
  }
  qp_init_attr->cap = attr.cap;
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  init.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  absl::MutexLock l(&s->mu);
  if (s->destroyed || id->qp != nullptr) {
    // Destroyed, or given a QP, by another thread meanwhile: EINVAL, as for
    // an id found with a QP above.
    const bool destroyed = s->destroyed;
    softrdma::destroy_qp(qp);
    return destroyed ? internal::DeadIdError(id) : internal::Fail(EINVAL);
  }
  id->qp = qp;
  id->pd = pd;
  {
    internal::SoftQp* q = internal::ToSoft(qp);
    internal::DomainLock ql(&q->mu);
    q->cm_id = s->self;
  }
  if (s->state == CmState::kEstablished || s->state == CmState::kAccepting) {
    internal::AttachQp(s);
  }
  return 0;
}

}  // namespace

int create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  return CreateCmQp(id, pd, qp_init_attr, nullptr);
}

int create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* qp_init_attr_ex) {
  if (qp_init_attr_ex == nullptr) return internal::Fail(EINVAL);
  ibv_pd* pd = (qp_init_attr_ex->comp_mask & IBV_QP_INIT_ATTR_PD) ? qp_init_attr_ex->pd : nullptr;
  // ibv_qp_init_attr is the leading part of ibv_qp_init_attr_ex.
  return CreateCmQp(id, pd, reinterpret_cast<ibv_qp_init_attr*>(qp_init_attr_ex),
                    qp_init_attr_ex);
}

void destroy_qp(rdma_cm_id* id) {
  if (id == nullptr) return;
  std::shared_ptr<SoftCmId> s = internal::LiveId(id);
  if (s == nullptr) return;
  ibv_qp* qp;
  {
    absl::MutexLock l(&s->mu);
    qp = id->qp;
  }
  if (qp == nullptr) return;
  // Without the id's lock: destroy_qp detaches the QP from the id under it
  // (clearing id->qp) and tells the peer.
  softrdma::destroy_qp(qp);
  {
    absl::MutexLock l(&s->mu);
    if (id->qp == qp) id->qp = nullptr;
  }
  DestroyIdCqs(id);  // as librdmacm: the CQs the id names go with the QP
}

static int ConnectStart(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return internal::Fail(EINVAL);
  if (conn_param != nullptr &&
      (conn_param->private_data_len > internal::kMaxConnectPrivateData ||
       (conn_param->private_data_len > 0 && conn_param->private_data == nullptr) ||
       !internal::ValidRdAtomic(*conn_param))) {
    return internal::Fail(EINVAL);
  }
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  // The system calls of the set-up (a shared-memory segment, a socket) come
  // before the id's lock, which the progress thread needs for its frames.
  std::shared_ptr<internal::ShmLink> link =
      internal::ShmEnabled() ? internal::ShmLink::Create() : nullptr;
  sockaddr_storage dst_storage;
  {
    absl::MutexLock l(&s->mu);
    dst_storage = id->route.addr.dst_storage;
  }
  const sockaddr* dst = reinterpret_cast<const sockaddr*>(&dst_storage);
  int fresh_fd = ::socket(dst->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  absl::MutexLock l(&s->mu);
  auto fail = [fresh_fd](int err) {
    if (fresh_fd >= 0) ::close(fresh_fd);
    return internal::Fail(err);
  };
  if (s->destroyed) {
    if (fresh_fd >= 0) ::close(fresh_fd);
    return internal::DeadIdError(id);
  }
  if (s->state != CmState::kRouteResolved) return fail(EINVAL);
  internal::FillParams(conn_param, id->qp != nullptr ? id->qp->qp_num : 0, &s->local);
  if (!internal::TakeUserQp(s, s->local.qp_num)) return fail(EINVAL);
  internal::CompleteLocalParams(conn_param, &s->local);
  if (link != nullptr) {
    s->shm = std::move(link);
    internal::FillHello(s->shm->name(), &s->local.shm);
    s->shm_state = internal::ShmState::kOffered;
  }
  int fd = s->bound_fd;  // rdma_bind_addr's socket, if any, is the one to use
  s->bound_fd = -1;
  if (fd >= 0) {
    if (fresh_fd >= 0) ::close(fresh_fd);
  } else {
    fd = fresh_fd;
    if (fd < 0) return -1;
  }
  int rc = ::connect(fd, dst, internal::AddrLen(dst));
  if (rc != 0 && errno != EINPROGRESS) {
    int e = errno;
    ::close(fd);
    internal::FailConnect(s, e);
    return 0;  // the outcome is the event, as with librdmacm
  }
  // The progress thread reports the connect's outcome under the id's lock,
  // so after this call has set the state.
  s->conn = internal::Conn::Create(fd, /*connecting=*/true, s->self);
  s->tcp_connecting = true;
  s->state = CmState::kConnecting;
  std::weak_ptr<SoftCmId> weak = s->self;
  internal::ProgressThread::Get().RunAfter(absl::Milliseconds(s->timeout_ms), [weak] {
    std::shared_ptr<SoftCmId> live = weak.lock();
    if (live == nullptr) return;
    absl::MutexLock l(&live->mu);
    if (live->destroyed || !live->tcp_connecting) return;
    internal::FailConnect(live.get(), ETIMEDOUT);  // the host did not answer
  });
  return 0;
}

static int AcceptStart(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return internal::Fail(EINVAL);
  if (conn_param != nullptr &&
      (conn_param->private_data_len > internal::kMaxAcceptPrivateData ||
       (conn_param->private_data_len > 0 && conn_param->private_data == nullptr) ||
       !internal::ValidRdAtomic(*conn_param))) {
    return internal::Fail(EINVAL);
  }
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->state != CmState::kConnectReqRcvd || s->conn == nullptr) return internal::Fail(EINVAL);
  if (s->peer_gone) {
    // The active side went away after its CONNECT_REQ: the accept cannot
    // complete, which rdma_cm reports as a connection error.
    s->state = CmState::kError;
    internal::PostEvent(s, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
    return 0;
  }
  internal::FillParams(conn_param, id->qp != nullptr ? id->qp->qp_num : 0, &s->local);
  if (!internal::TakeUserQp(s, s->local.qp_num)) return internal::Fail(EINVAL);
  internal::CompleteLocalParams(conn_param, &s->local, &s->remote);
  if (s->shm_state == internal::ShmState::kPendingRtu) {
    internal::FillHello("", &s->local.shm);
    s->local.shm.accept = 1;
  }
  internal::AttachQp(s);
  internal::SendControl(s->conn.get(), internal::FrameType::kAccept,
                        internal::EncodeConnParams(s->local));
  s->state = CmState::kAccepting;
  internal::ArmRtuTimer(s);
  return 0;
}

namespace {

// For a synchronous id: waits for the next event on its private channel and
// turns it into the -1/errno result librdmacm's synchronous calls give.
// As librdmacm's ucma_complete, the event stays in id->event (rsockets reads
// the peer's private data there) until the next call or rdma_destroy_id acks it.
int WaitSync(rdma_cm_id* id, rdma_cm_event_type want) {
  if (id->event != nullptr) {
    ack_cm_event(id->event);
    id->event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (get_cm_event(id->channel, &e) != 0) return -1;  // EAGAIN: non-blocking channel
  id->event = e;
  const rdma_cm_event_type got = e->event;
  const int status = e->status;
  // An id whose application made its QP itself gets CONNECT_RESPONSE.
  if ((got == want || (want == RDMA_CM_EVENT_ESTABLISHED && got == RDMA_CM_EVENT_CONNECT_RESPONSE)) &&
      status == 0) {
    return 0;
  }
  switch (got) {
    case RDMA_CM_EVENT_REJECTED:
      errno = ECONNREFUSED;
      break;
    case RDMA_CM_EVENT_UNREACHABLE:
      errno = status < 0 ? -status : ETIMEDOUT;
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
      errno = status < 0 ? -status : EADDRNOTAVAIL;
      break;
    default:
      errno = EPROTO;
  }
  return -1;
}

bool IsSync(rdma_cm_id* id) { return internal::CmIdOf(id)->sync; }

}  // namespace

int resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  int rc = ResolveAddrStart(id, src_addr, dst_addr, timeout_ms);
  if (rc != 0 || !IsSync(id)) return rc;
  return WaitSync(id, RDMA_CM_EVENT_ADDR_RESOLVED);
}

int resolve_route(rdma_cm_id* id, int timeout_ms) {
  int rc = ResolveRouteStart(id, timeout_ms);
  if (rc != 0 || !IsSync(id)) return rc;
  return WaitSync(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

int connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  int rc = ConnectStart(id, conn_param);
  if (rc != 0 || !IsSync(id)) return rc;
  return WaitSync(id, RDMA_CM_EVENT_ESTABLISHED);
}

void SetRtuTimeoutMillis(uint32_t ms) {
  internal::g_rtu_timeout_ms.store(ms == 0 ? internal::kDefaultRtuTimeoutMillis : ms,
                                   std::memory_order_relaxed);
}

int accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  int rc = AcceptStart(id, conn_param);
  if (rc != 0 || !IsSync(id)) return rc;
  return WaitSync(id, RDMA_CM_EVENT_ESTABLISHED);
}

int get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> ls = internal::LiveId(listen);
  if (ls == nullptr) return -1;
  if (!ls->sync) return internal::Fail(EINVAL);
  // As librdmacm: the listener's last event is acked now; the request's event
  // stays in the new id's `event` (or the listener's, on failure).
  if (listen->event != nullptr) {
    ack_cm_event(listen->event);
    listen->event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (get_cm_event(listen->channel, &e) != 0) return -1;
  if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    listen->event = e;
    return internal::Fail(e->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : EINVAL);
  }
  rdma_cm_id* child = e->id;
  bool make_qp;
  ibv_qp_init_attr attr;
  ibv_pd* pd;
  {
    absl::MutexLock l(&ls->mu);
    make_qp = ls->has_ep_qp_attr;
    attr = ls->ep_qp_attr;
    pd = ls->ep_pd;
  }
  if (make_qp && create_qp(child, pd, &attr) != 0) {
    int e2 = errno;
    ack_cm_event(e);
    destroy_id(child);
    return internal::Fail(e2);
  }
  child->event = e;
  *id = child;
  return 0;
}

int create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return internal::Fail(EINVAL);
  rdma_cm_id* cm = nullptr;
  if (create_id(nullptr, &cm, nullptr, RDMA_PS_TCP) != 0) return -1;
  // As librdmacm: the QP type comes from the address info.
  if (qp_init_attr != nullptr) {
    qp_init_attr->qp_type = res->ai_qp_type != 0 ? static_cast<ibv_qp_type>(res->ai_qp_type)
                                                  : IBV_QPT_RC;
  }
  int rc;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = bind_addr(cm, res->ai_src_addr);
    if (rc == 0 && qp_init_attr != nullptr) {
      // librdmacm keeps the attributes for the QPs of accepted ids.
      SoftCmId* s = internal::CmIdOf(cm);  // alive: this thread made it
      absl::MutexLock l(&s->mu);
      s->has_ep_qp_attr = true;
      s->ep_qp_attr = *qp_init_attr;
      s->ep_pd = pd;
    }
  } else {
    rc = resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = resolve_route(cm, 2000);
    if (rc == 0 && qp_init_attr != nullptr) rc = create_qp(cm, pd, qp_init_attr);
  }
  if (rc != 0) {
    int e = errno;
    destroy_id(cm);
    return internal::Fail(e);
  }
  *id = cm;
  return 0;
}

void destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp != nullptr) destroy_qp(id);
  destroy_id(id);
}

int reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  if (id == nullptr || private_data_len > internal::kMaxRejectPrivateData ||
      (private_data_len > 0 && private_data == nullptr)) {
    return internal::Fail(EINVAL);
  }
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->state != CmState::kConnectReqRcvd || s->conn == nullptr) return internal::Fail(EINVAL);
  std::vector<uint8_t> pd(static_cast<const uint8_t*>(private_data),
                          static_cast<const uint8_t*>(private_data) + private_data_len);
  internal::SendControl(s->conn.get(), internal::FrameType::kReject, pd);
  s->state = CmState::kRejected;
  internal::DropShm(s);
  return 0;
}

int init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) {
    return internal::Fail(EINVAL);
  }
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (id->verbs == nullptr) return internal::Fail(EINVAL);  // no device yet
  const CmState st = s->state;
  // The peer's parameters are known on the passive side from CONNECT_REQUEST
  // on, on the active side from CONNECT_RESPONSE (the IB CM's REQ_RCVD /
  // REP_RCVD); before that only INIT can be asked for (ib_cm_init_qp_attr).
  const bool peer_known =
      s->passive ? (st == CmState::kConnectReqRcvd || st == CmState::kAccepting ||
                    st == CmState::kEstablished)
                 : (st == CmState::kConnectResponse || st == CmState::kEstablished);
  const bool cm_connection = peer_known || st == CmState::kConnecting;
  // READ / atomic resources as the IB CM negotiated them: before rdma_accept
  // the REQ's offer; after it what the passive side accepted; on the active
  // side what the REP granted (its responder resources are our initiator
  // depth and the other way round).
  uint8_t resp_res;
  uint8_t init_depth;
  if (s->passive && st == CmState::kConnectReqRcvd) {
    resp_res = s->remote.initiator_depth;
    init_depth = s->remote.responder_resources;
  } else if (s->passive) {
    resp_res = s->local.responder_resources;
    init_depth = s->local.initiator_depth;
  } else if (peer_known) {
    resp_res = s->remote.initiator_depth;
    init_depth = s->remote.responder_resources;
  } else {
    resp_res = s->local.responder_resources;
    init_depth = s->local.initiator_depth;
  }
  resp_res = std::min<uint8_t>(resp_res, internal::kMaxRdAtom);
  init_depth = std::min<uint8_t>(init_depth, internal::kMaxRdAtom);
  const ibv_qp_state want = qp_attr->qp_state;
  std::memset(qp_attr, 0, sizeof(*qp_attr));
  qp_attr->qp_state = want;
  switch (want) {
    case IBV_QPS_INIT:
      *qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      qp_attr->pkey_index = 0;
      qp_attr->port_num = 1;
      // No REMOTE_* rights before the CM has a connection (cma_ib_init_qp_attr).
      qp_attr->qp_access_flags =
          cm_connection ? IBV_ACCESS_REMOTE_WRITE |
                              (resp_res > 0 ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0)
                        : 0;
      return 0;
    case IBV_QPS_RTR: {
      if (!peer_known) return internal::Fail(EINVAL);
      *qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      qp_attr->path_mtu = IBV_MTU_4096;
      qp_attr->dest_qp_num = s->remote.qp_num;
      qp_attr->rq_psn = 0;  // softrdma's QPs start their PSNs at 0
      qp_attr->max_dest_rd_atomic = resp_res;
      qp_attr->min_rnr_timer = 0;  // as the IB CM sets it
      ibv_ah_attr& ah = qp_attr->ah_attr;
      ah.port_num = 1;
      ah.is_global = 1;
      ah.grh.hop_limit = 64;
      const sockaddr* dst = &id->route.addr.dst_addr;
      if (dst->sa_family == AF_INET6) {
        std::memcpy(ah.grh.dgid.raw, &id->route.addr.dst_sin6.sin6_addr, 16);
      } else {
        ah.grh.dgid.raw[10] = 0xff;  // RoCE v2: the IPv4-mapped address
        ah.grh.dgid.raw[11] = 0xff;
        std::memcpy(&ah.grh.dgid.raw[12], &id->route.addr.dst_sin.sin_addr, 4);
      }
      return 0;
    }
    case IBV_QPS_RTS:
      if (!peer_known) return internal::Fail(EINVAL);
      *qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      qp_attr->sq_psn = 0;
      qp_attr->timeout = 14;  // 67 ms, softrdma's default
      // The transport retry count is the connector's; the RNR retry count is
      // what the peer asked for ("how often the remote peer should retry").
      qp_attr->retry_cnt =
          std::min<uint8_t>(s->passive ? s->remote.retry_count : s->local.retry_count, 7);
      qp_attr->rnr_retry = std::min<uint8_t>(s->remote.rnr_retry_count, 7);
      qp_attr->max_rd_atomic = init_depth;
      return 0;
    default:
      return internal::Fail(EINVAL);
  }
}

int establish(rdma_cm_id* id) {
  if (id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  // librdmacm: only for an id without a QP of its own, after CONNECT_RESPONSE.
  if (id->qp != nullptr || s->state != CmState::kConnectResponse || s->conn == nullptr) {
    return internal::Fail(EINVAL);
  }
  internal::SendControl(
      s->conn.get(), internal::FrameType::kRtu,
      {static_cast<uint8_t>(s->shm_state == internal::ShmState::kActive ? 1 : 0)});
  s->state = CmState::kEstablished;
  return 0;
}

int disconnect(rdma_cm_id* id) {
  if (id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  switch (s->state) {
    case CmState::kEstablished:
    case CmState::kAccepting:
    case CmState::kConnectResponse:
      if (s->conn != nullptr) {
        if (s->id.qp != nullptr) internal::QpSendOwedAck(internal::ToSoft(s->id.qp));
        if (s->user_qp != nullptr) internal::QpSendOwedAck(s->user_qp.get());
        internal::SendControl(s->conn.get(), internal::FrameType::kDisconnect, {});
      }
      internal::EndConnection(s);
      return 0;
    case CmState::kDisconnected:
      internal::EndConnection(s);  // posts DISCONNECTED if not done yet
      return 0;
    default:
      return internal::Fail(EINVAL);
  }
}

int get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftEventChannel> ch = internal::LiveChannel(channel);
  if (ch == nullptr) return -1;
  for (;;) {
    if (internal::WaitEventFd(ch->ch.fd) != 0) return -1;
    SoftCmEvent* e = nullptr;
    std::shared_ptr<SoftCmId> establish;
    {
      absl::MutexLock l(&ch->mu);
      // Its id was destroyed or migrated; or the channel was destroyed while
      // this call waited, after which nothing is posted on it again: wait on
      // (for good, on a blocking fd), as a thread in the kernel's
      // rdma_get_cm_event stays blocked when another closes the channel.
      if (ch->destroyed || ch->events.empty()) continue;
      e = ch->events.front();
      ch->events.pop_front();
      // Counted before the channel's lock goes, so rdma_destroy_id (which
      // drops the id's queued events under it) either finds the event still
      // queued or counted.
      absl::MutexLock reg(&internal::RegistryMutex());
      auto it = internal::LiveIds().find(e->id_serial);
      if (it != internal::LiveIds().end()) {
        if (it->second->connect_error.load() && (e->ev.event == RDMA_CM_EVENT_DISCONNECTED ||
                                                 e->ev.event == RDMA_CM_EVENT_REJECTED)) {
          delete e;  // after CONNECT_ERROR, as librdmacm (connect_error)
          continue;
        }
        it->second->unacked_events++;
        if (e->establish_on_get) establish = it->second->self.lock();
      }
    }
    // The id's lock is taken before a channel's (PostEventOn), so only now.
    if (establish != nullptr) {
      e->ev.event = internal::FinishConnectResponse(establish.get(), &e->ev.status);
    }
    *event = &e->ev;
    return 0;
  }
}

int ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return internal::Fail(EINVAL);
  auto* e = reinterpret_cast<SoftCmEvent*>(event);
  {
    absl::MutexLock reg(&internal::RegistryMutex());
    auto it = internal::LiveIds().find(e->id_serial);
    if (it != internal::LiveIds().end() && it->second->unacked_events > 0) {
      it->second->unacked_events--;
    }
  }
  delete e;
  return 0;
}

int migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr || channel == nullptr) return internal::Fail(EINVAL);
  if (!internal::IsLiveChannel(channel)) return -1;
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  // Under the id's lock no event of it is posted meanwhile (posters hold it),
  // so none is left behind on the old channel.
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  SoftEventChannel* from = internal::ChannelOf(id->channel);
  SoftEventChannel* to = internal::ChannelOf(channel);
  if (from == to) return 0;
  // The id's events, and a listener's undelivered CONNECT_REQUESTs, move
  // (as the kernel's ucma_migrate_id moves the events of the id's context).
  std::vector<SoftCmEvent*> moved;
  {
    absl::MutexLock fl(&from->mu);
    auto keep = std::remove_if(from->events.begin(), from->events.end(), [&](SoftCmEvent* e) {
      if (e->ev.id != id && e->ev.listen_id != id) return false;
      moved.push_back(e);
      return true;
    });
    from->events.erase(keep, from->events.end());
  }
  {
    absl::MutexLock tl(&to->mu);
    for (SoftCmEvent* e : moved) to->events.push_back(e);
  }
  for (size_t i = 0; i < moved.size(); ++i) internal::SignalEventFd(channel->fd);
  id->channel = channel;
  return 0;
}

int DropConnection(rdma_cm_id* id) {
  if (id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->conn == nullptr) return internal::Fail(EINVAL);
  // Both directions end at once; the progress thread then sees EOF on this
  // end and the peer's sees EOF on the other, and each handles a dead peer.
  ::shutdown(s->conn->fd(), SHUT_RDWR);
  return 0;
}

int VanishPeer(rdma_cm_id* id) {
  if (id == nullptr) return internal::Fail(EINVAL);
  std::shared_ptr<SoftCmId> held = internal::LiveId(id);
  if (held == nullptr) return -1;
  SoftCmId* s = held.get();
  absl::MutexLock l(&s->mu);
  if (s->destroyed) return internal::DeadIdError(id);
  if (s->conn == nullptr) return internal::Fail(EINVAL);
  s->conn->Vanish();
  return 0;
}

sockaddr* get_local_addr(rdma_cm_id* id) { return &id->route.addr.src_addr; }
sockaddr* get_peer_addr(rdma_cm_id* id) { return &id->route.addr.dst_addr; }
// Network byte order, as rdma_get_src_port / rdma_get_dst_port return it.
uint16_t get_src_port(rdma_cm_id* id) { return internal::PortOf(&id->route.addr.src_addr); }
uint16_t get_dst_port(rdma_cm_id* id) { return internal::PortOf(&id->route.addr.dst_addr); }

}  // namespace softrdma
