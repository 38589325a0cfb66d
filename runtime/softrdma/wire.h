// wire.h: the frames softrdma sends over one RC connection's TCP socket.
//
// A frame is a fixed 32-byte header, little-endian, followed by `length`
// payload bytes. The same socket first carries the rdma_cm handshake
// (CONNECT_REQ, ACCEPT or REJECT, RTU) and then the QP traffic: requests
// (SEND, WRITE, READ_REQ) each carry one PSN; the responder answers every
// request in PSN order with an ACK, a READ_RESP, or a NAK with a syndrome.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_WIRE_H_
#define RDMARPC_RUNTIME_SOFTRDMA_WIRE_H_

#include <endian.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace softrdma {
namespace internal {

enum class FrameType : uint8_t {
  kConnectReq = 1,  // payload: ConnParams
  kAccept = 2,      // payload: ConnParams
  kReject = 3,      // payload: private data
  kRtu = 4,         // "ready to use": the active side is established
  kDisconnect = 5,
  kSend = 6,     // flags kHasImm, kSolicited, or kHasInv (rkey); payload: message
  kWrite = 7,    // flags kHasImm, kSolicited; addr, rkey; payload: data
  kReadReq = 8,  // addr, rkey, read_len
  kReadResp = 9, // payload: data (TCP: from offset addr; kMore: not the last piece)
  kAck = 10,     // psn: the request accepted (acks all before it too)
  kNak = 11,     // psn, syndrome; RNR: read_len = 0x100 | the responder's min_rnr_timer, or 0
  kAtomic = 12,      // flags kFetchAdd or kCmpSwap; addr, rkey; payload: 2 x u64 LE
  kAtomicResp = 13,  // payload: the original u64, LE
  // Same-host link only (shm_link.h): header-only, on the TCP socket. The
  // peer's ring has records and its consumer was asleep: drain it.
  kDoorbell = 14,
  // TCP link only, header-only: the responder is still copying a large
  // request's data (a NIC's response packets or ACKs would be arriving all
  // along); the requester's transport timer counts it as a sign of life and
  // otherwise ignores it.
  kProgress = 15,
};

// kSolicited: the Solicited Event bit of the request (IBV_SEND_SOLICITED).
// kHasInv: a SEND_WITH_INV; `rkey` is the rkey to invalidate at the responder.
// kRemoteData (same-host link only): the data is not in this frame. SEND /
// WRITE: the payload is the requester's SGE list (shm_link.h) and read_len the
// data length; READ_REQ: the payload is the requester's destination SGE list;
// READ_RESP: the responder already placed the data, read_len is its length.
enum FrameFlags : uint8_t {
  kHasImm = 1,
  kFetchAdd = 2,
  kCmpSwap = 4,
  kSolicited = 8,
  kHasInv = 16,
  kRemoteData = 32,
  // READ_RESP on the TCP link: a piece of the data, at offset `addr` of the
  // READ; more pieces follow (the last has no kMore). A NIC answers a READ
  // with one packet per MTU; pieces keep a large READ's bytes moving while
  // the responder copies, and its transport timer sees them.
  kMore = 64,
};

enum class Syndrome : uint8_t {
  kNone = 0,
  kRnr = 1,        // receiver not ready: no receive posted; retry later
  kRemAccess = 2,  // bad rkey / bounds / access flags
  kInvReq = 3,     // e.g. message longer than the posted receive
  kRemOp = 4,      // responder failed locally (e.g. bad lkey in its receive)
  // Same-host link: the responder could not copy from / into the requester's
  // memory (process_vm_* failed: the buffer was unmapped after post).
  kReqLocal = 5,
};

inline constexpr size_t kHeaderSize = 32;
// Upper bound on one frame's payload; larger is a protocol error.
inline constexpr uint64_t kMaxFramePayload = (1ull << 31) + 4096;

struct FrameHeader {
  FrameType type = FrameType::kAck;
  uint8_t flags = 0;
  Syndrome syndrome = Syndrome::kNone;
  uint32_t psn = 0;
  uint32_t imm = 0;  // imm_data as the user gave it (already big-endian)
  uint32_t rkey = 0;
  uint64_t addr = 0;
  uint32_t length = 0;    // payload bytes that follow
  uint32_t read_len = 0;  // READ_REQ: bytes to read
};

struct Frame {
  FrameHeader h;
  std::unique_ptr<uint8_t[]> payload;  // h.length bytes (TCP link)
  // Same-host link: the payload in ring memory, instead of `payload`.
  const uint8_t* view = nullptr;
  // kRemoteData frames from the same-host link: the peer's SGE list. For
  // SEND / WRITE / READ_RESP, h.length is then the data length.
  const uint8_t* sgl = nullptr;
  uint32_t sgl_bytes = 0;
  const uint8_t* data() const { return view != nullptr ? view : payload.get(); }
};

inline void EncodeHeader(const FrameHeader& h, uint8_t* out) {
  out[0] = static_cast<uint8_t>(h.type);
  out[1] = h.flags;
  out[2] = static_cast<uint8_t>(h.syndrome);
  out[3] = 0;
  uint32_t v32 = htole32(h.psn);
  std::memcpy(out + 4, &v32, 4);
  std::memcpy(out + 8, &h.imm, 4);  // opaque bytes: carried verbatim
  v32 = htole32(h.rkey);
  std::memcpy(out + 12, &v32, 4);
  uint64_t v64 = htole64(h.addr);
  std::memcpy(out + 16, &v64, 8);
  v32 = htole32(h.length);
  std::memcpy(out + 24, &v32, 4);
  v32 = htole32(h.read_len);
  std::memcpy(out + 28, &v32, 4);
}

inline FrameHeader DecodeHeader(const uint8_t* in) {
  FrameHeader h;
  h.type = static_cast<FrameType>(in[0]);
  h.flags = in[1];
  h.syndrome = static_cast<Syndrome>(in[2]);
  uint32_t v32;
  std::memcpy(&v32, in + 4, 4);
  h.psn = le32toh(v32);
  std::memcpy(&h.imm, in + 8, 4);
  std::memcpy(&v32, in + 12, 4);
  h.rkey = le32toh(v32);
  uint64_t v64;
  std::memcpy(&v64, in + 16, 8);
  h.addr = le64toh(v64);
  std::memcpy(&v32, in + 24, 4);
  h.length = le32toh(v32);
  std::memcpy(&v32, in + 28, 4);
  h.read_len = le32toh(v32);
  return h;
}

// Builds a frame buffer: header followed by `payload_len` bytes of room, which
// the caller fills at data() + kHeaderSize.
inline std::shared_ptr<std::vector<uint8_t>> NewFrame(FrameHeader h,
                                                      uint32_t payload_len) {
  h.length = payload_len;
  auto buf = std::make_shared<std::vector<uint8_t>>();
  // resize() zero-fills; callers overwrite the payload anyway, and the cost is
  // small next to the socket copy.
  buf->resize(kHeaderSize + payload_len);
  EncodeHeader(h, buf->data());
  return buf;
}

inline void PutU64(uint8_t* out, uint64_t v) {
  v = htole64(v);
  std::memcpy(out, &v, 8);
}
inline uint64_t GetU64(const uint8_t* in) {
  uint64_t v;
  std::memcpy(&v, in, 8);
  return le64toh(v);
}

// The same-host offer (CONNECT_REQ) and answer (ACCEPT), appended after the
// private data; peers that do not know it ignore trailing bytes.
struct ShmHello {
  bool present = false;
  uint8_t accept = 0;  // ACCEPT: 1 = the passive side mapped the segment
  char boot_id[36] = {};
  uint64_t netns_ino = 0;
  uint64_t netns_dev = 0;
  uint32_t pid = 0;
  uint64_t probe_addr = 0;
  uint64_t probe_value = 0;
  uint8_t name_len = 0;
  char name[64] = {};
};
// "SHM4": rings that carry kRecHint / kRecHintAck records (shm_record.h),
// whose producers read the marked table's poller_active word (shm_hint.h),
// and whose consumers say when their CQs poll them (ShmLink::MarkAttached).
// A peer with another magic (an older softrdma) is treated as offering no
// same-host link, so the two fall back to TCP instead of misreading records
// or missing doorbells.
inline constexpr uint8_t kShmHelloMagic[4] = {'S', 'H', 'M', '4'};
inline constexpr size_t kShmHelloFixed = 4 + 1 + 36 + 8 + 8 + 4 + 8 + 8 + 1;

// rdma_cm parameters exchanged in CONNECT_REQ and ACCEPT.
struct ConnParams {
  uint32_t qp_num = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 0;
  uint8_t rnr_retry_count = 7;
  uint8_t private_data_len = 0;
  uint8_t private_data[256] = {};
  ShmHello shm;
};
inline constexpr size_t kConnParamsFixed = 9;

inline std::vector<uint8_t> EncodeConnParams(const ConnParams& p) {
  std::vector<uint8_t> out(kConnParamsFixed + p.private_data_len);
  uint32_t q = htole32(p.qp_num);
  std::memcpy(out.data(), &q, 4);
  out[4] = p.responder_resources;
  out[5] = p.initiator_depth;
  out[6] = p.retry_count;
  out[7] = p.rnr_retry_count;
  out[8] = p.private_data_len;
  if (p.private_data_len > 0) {
    std::memcpy(out.data() + kConnParamsFixed, p.private_data, p.private_data_len);
  }
  if (p.shm.present) {
    const ShmHello& s = p.shm;
    const size_t name_len = std::min<size_t>(s.name_len, sizeof(s.name));
    std::vector<uint8_t> x(kShmHelloFixed + name_len);
    uint8_t* o = x.data();
    std::memcpy(o, kShmHelloMagic, 4);
    o[4] = s.accept;
    std::memcpy(o + 5, s.boot_id, 36);
    PutU64(o + 41, s.netns_ino);
    PutU64(o + 49, s.netns_dev);
    uint32_t pid = htole32(s.pid);
    std::memcpy(o + 57, &pid, 4);
    PutU64(o + 61, s.probe_addr);
    PutU64(o + 69, s.probe_value);
    o[77] = static_cast<uint8_t>(name_len);
    std::memcpy(o + kShmHelloFixed, s.name, name_len);
    out.insert(out.end(), x.begin(), x.end());
  }
  return out;
}

inline bool DecodeConnParams(const uint8_t* in, size_t len, ConnParams* p) {
  if (len < kConnParamsFixed) return false;
  uint32_t q;
  std::memcpy(&q, in, 4);
  p->qp_num = le32toh(q);
  p->responder_resources = in[4];
  p->initiator_depth = in[5];
  p->retry_count = in[6];
  p->rnr_retry_count = in[7];
  p->private_data_len = in[8];
  if (len < kConnParamsFixed + p->private_data_len) return false;
  std::memcpy(p->private_data, in + kConnParamsFixed, p->private_data_len);
  p->shm = ShmHello();
  const uint8_t* x = in + kConnParamsFixed + p->private_data_len;
  const size_t left = len - kConnParamsFixed - p->private_data_len;
  if (left >= kShmHelloFixed && std::memcmp(x, kShmHelloMagic, 4) == 0) {
    ShmHello& s = p->shm;
    s.accept = x[4];
    std::memcpy(s.boot_id, x + 5, 36);
    s.netns_ino = GetU64(x + 41);
    s.netns_dev = GetU64(x + 49);
    uint32_t pid;
    std::memcpy(&pid, x + 57, 4);
    s.pid = le32toh(pid);
    s.probe_addr = GetU64(x + 61);
    s.probe_value = GetU64(x + 69);
    s.name_len = x[77];
    if (s.name_len <= sizeof(s.name) && left >= kShmHelloFixed + s.name_len) {
      std::memcpy(s.name, x + kShmHelloFixed, s.name_len);
      s.present = true;
    }
  }
  return true;
}

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_WIRE_H_
