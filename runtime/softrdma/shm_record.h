// shm_record.h: the records of a same-host link's ring (shm_link.h), and
// how a consumer reads one from memory the peer process writes.
//
//   record = u32 size (incl. these 8 bytes, 8-aligned) | u32 kind | body
//   kind 1 (frame): body = one encoded frame (wire.h): header, then
//                   header.length bytes (payload, or a kRemoteData frame's
//                   SGE list)
//   kind 2 (pad):   fills the ring's end; the next record starts at 0 (a
//                   record that would cross the end, or a producer
//                   rewinding a ring its consumer has caught up with)
//   kind 3 (hint):  body = u32 slot | i32 fd | u64 inode | u32 pid | u32 0:
//                   "after each record you put in the ring I produce into
//                   your side of, mark `slot` of the table of fd `fd` of
//                   process `pid`" (shm_hint.h)
//   kind 4 (hint ack): no body; "from here on I mark your slot"
#ifndef RDMARPC_RUNTIME_SOFTRDMA_SHM_RECORD_H_
#define RDMARPC_RUNTIME_SOFTRDMA_SHM_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "softrdma/wire.h"

namespace softrdma {
namespace internal {

enum RecordKind : uint32_t { kRecFrame = 1, kRecPad = 2, kRecHint = 3, kRecHintAck = 4 };
inline constexpr size_t kRecHeader = 8;
inline constexpr size_t kHintBodyBytes = 24;

struct HintOffer {
  uint32_t slot = 0;
  int32_t fd = -1;
  uint64_t inode = 0;
  uint32_t pid = 0;
};

inline void EncodeHintOffer(const HintOffer& h, uint8_t* body) {
  std::memset(body, 0, kHintBodyBytes);
  std::memcpy(body, &h.slot, 4);
  std::memcpy(body + 4, &h.fd, 4);
  std::memcpy(body + 8, &h.inode, 8);
  std::memcpy(body + 16, &h.pid, 4);
}

// Remote SGE list carried in a kRemoteData frame: {u64 addr, u32 length} LE.
inline constexpr size_t kSglEntryBytes = 12;

enum class ShmRecord { kFrame, kPad, kHint, kHintAck, kCorrupt };

// One record at `rec`, with `room` bytes readable from there to the ring's
// end. kFrame: `*frame` is its frame (views into the record) and `*size`
// the record's size; kPad: a pad record of `*size` bytes; kHint: a hint
// offer, decoded into `*hint` (when not null); kHintAck; kCorrupt: nothing
// our producer writes (a size not 8-aligned, below the record header or
// past the ring's end, an unknown kind, or a frame whose payload or SGE list
// would run past the record). Reads only within [rec, rec + room).
inline ShmRecord ParseShmRecord(const uint8_t* rec, size_t room, Frame* frame, uint32_t* size,
                                HintOffer* hint = nullptr) {
  if (room < kRecHeader) return ShmRecord::kCorrupt;
  uint32_t hdr[2];
  std::memcpy(hdr, rec, sizeof(hdr));
  if (hdr[0] < kRecHeader || hdr[0] % 8 != 0 || hdr[0] > room) return ShmRecord::kCorrupt;
  *size = hdr[0];
  if (hdr[1] == kRecPad) return ShmRecord::kPad;
  if (hdr[1] == kRecHintAck) return ShmRecord::kHintAck;
  if (hdr[1] == kRecHint) {
    if (hdr[0] < kRecHeader + kHintBodyBytes) return ShmRecord::kCorrupt;
    if (hint != nullptr) {
      std::memcpy(&hint->slot, rec + kRecHeader, 4);
      std::memcpy(&hint->fd, rec + kRecHeader + 4, 4);
      std::memcpy(&hint->inode, rec + kRecHeader + 8, 8);
      std::memcpy(&hint->pid, rec + kRecHeader + 16, 4);
    }
    return ShmRecord::kHint;
  }
  if (hdr[1] != kRecFrame || hdr[0] < kRecHeader + kHeaderSize) return ShmRecord::kCorrupt;
  frame->h = DecodeHeader(rec + kRecHeader);
  if (frame->h.length > hdr[0] - kRecHeader - kHeaderSize) return ShmRecord::kCorrupt;
  frame->view = rec + kRecHeader + kHeaderSize;
  if (frame->h.flags & kRemoteData) {
    frame->sgl = frame->view;
    frame->sgl_bytes = frame->h.length;
    frame->view = nullptr;
    if (frame->h.type != FrameType::kReadReq) frame->h.length = frame->h.read_len;
  }
  return ShmRecord::kFrame;
}

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_SHM_RECORD_H_
