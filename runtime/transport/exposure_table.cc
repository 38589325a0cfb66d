// exposure_table.cc: see exposure_table.h.
#include "runtime/transport/exposure_table.h"

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace rdmarpc {
namespace internal {

void ExposureTable::Init(ibv_pd* pd, LargeBufferPool* pool, bool windows,
                         size_t max_exposed_bytes) {
  pd_ = pd;
  pool_ = pool;
  windows_ = windows;
  max_exposed_bytes_ = max_exposed_bytes;
}

absl::Status ExposureTable::CheckRoom(size_t bytes) const {
  if (max_exposed_bytes_ == 0 ||
      (bytes <= max_exposed_bytes_ && exposed_bytes_ <= max_exposed_bytes_ - bytes)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "exposing ", bytes, " more bytes would pass the connection's cap of ", max_exposed_bytes_,
      " exposed bytes (", exposed_bytes_, " bytes exposed in ", exposed_.size(),
      exposed_.size() == 1 ? " buffer" : " buffers", "; max_exposed_bytes_per_connection)"));
}

absl::StatusOr<uint32_t> ExposureTable::Expose(SendQueue* sq, LargeBuffer* buffer, uint64_t addr,
                                               uint32_t length, int access) {
  DCHECK(!exposed_.contains(buffer)) << "buffer exposed twice";
  DCHECK_GE(addr, buffer->addr());
  DCHECK_LE(addr + length, buffer->addr() + buffer->capacity);
  if (length > kMaxWindowBytes) {
    return absl::OutOfRangeError(absl::StrCat("a window of ", length,
                                              " bytes exceeds the largest bound, ",
                                              kMaxWindowBytes, " bytes"));
  }
  if (absl::Status s = CheckRoom(length); !s.ok()) return s;
  Exposure e;
  e.bytes = length;
  uint32_t rkey = buffer->rkey();
  if (windows_) {
    if (free_windows_.empty()) {
      ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
      if (mw == nullptr) {
        const absl::Status s = ErrnoToStatus("ibv_alloc_mw(IBV_MW_TYPE_2)", errno);
        return absl::Status(s.code(), absl::StrCat(s.message(), " (", exposed_.size(),
                                                   " windows bound on this connection)"));
      }
      free_windows_.push_back(Window{mw, mw->rkey});
    }
    Window w = free_windows_.back();
    free_windows_.pop_back();
    w.rkey = ibv_inc_rkey(w.rkey);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = w.mw;
    wr.bind_mw.rkey = w.rkey;
    wr.bind_mw.bind_info.mr = const_cast<ibv_mr*>(buffer->active_mr());
    wr.bind_mw.bind_info.addr = addr;
    wr.bind_mw.bind_info.length = length;
    wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(access);
    // Unsignalled: the message after it on this RC QP is processed only
    // after it, and its error (a bug of ours) fails the QP.
    sq->PostWr(&wr, SqEntry{}, /*force_signal=*/false);
    e.window = w;
    rkey = w.rkey;
  }
  exposed_.emplace(buffer, e);
  exposed_bytes_ += length;
  return rkey;
}

void ExposureTable::Revoke(SendQueue* sq, LargeBuffer* buffer, bool qp_usable) {
  auto it = exposed_.find(buffer);
  if (it == exposed_.end()) return;
  const Exposure e = it->second;
  exposed_.erase(it);
  exposed_bytes_ -= e.bytes;
  if (e.window.mw == nullptr) return;
  pool_->MarkRevokePending(buffer);
  PendingInvalidation p{buffer, e.window};
  if (!qp_usable) {
    // Its BIND_MW may still wait in the send queue's batch or in the QP:
    // the window is deallocated (and the buffer let go) in Release, once
    // the QP is destroyed.
    pending_.push_back(p);
    return;
  }
  if (sq->has_room() && pending_.empty()) {
    PostInvalidation(sq, p);
  } else {
    pending_.push_back(p);
  }
}

void ExposureTable::PostPendingInvalidations(SendQueue* sq) {
  size_t i = 0;
  for (; i < pending_.size() && sq->has_room(); ++i) PostInvalidation(sq, pending_[i]);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(i));
}

void ExposureTable::PostInvalidation(SendQueue* sq, const PendingInvalidation& p) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.invalidate_rkey = p.window.rkey;
  SqEntry entry;
  entry.window = p.window.mw;
  entry.window_rkey = p.window.rkey;
  entry.window_buffer = p.buffer;
  // Signalled, so the buffer goes back to the pool as soon as it took
  // effect rather than at the next signalled WR.
  sq->PostWr(&wr, entry, /*force_signal=*/true);
  invalidating_[p.window.mw] = p.buffer;
}

void ExposureTable::OnRetired(const SqEntry& entry, bool executed) {
  if (entry.window == nullptr) return;
  invalidating_.erase(entry.window);
  const Window w{entry.window, entry.window_rkey};
  if (executed) {
    free_windows_.push_back(w);
  } else {
    Discard(w);  // state unknown: deallocating invalidates it
  }
  pool_->RevokeDone(entry.window_buffer);
}

void ExposureTable::Discard(Window w) {
  if (int rc = ibv_dealloc_mw(w.mw); rc != 0) {
    LOG(ERROR) << "ibv_dealloc_mw: " << ErrnoToStatus("ibv_dealloc_mw", rc);
  }
}

void ExposureTable::Release() {
  for (auto& [mw, buffer] : invalidating_) {
    Discard(Window{mw, 0});
    pool_->RevokeDone(buffer);
  }
  invalidating_.clear();
  for (const PendingInvalidation& p : pending_) {
    Discard(p.window);
    pool_->RevokeDone(p.buffer);
  }
  pending_.clear();
  for (auto& [buffer, e] : exposed_) {
    if (e.window.mw != nullptr) Discard(e.window);
  }
  exposed_.clear();
  exposed_bytes_ = 0;
  for (const Window& w : free_windows_) Discard(w);
  free_windows_.clear();
}

}  // namespace internal
}  // namespace rdmarpc
