// srq.cc: shared receive queues.
#include <errno.h>

#include "softrdma/faults_internal.h"
#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  SoftSrq* s = ToSoft(srq);
  Stat().post_recv_calls++;
  internal::OwnerScope owner(s->mu.domain());  // the user's data-path verb
  internal::DomainLock l(&s->mu);
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > s->attr.max_sge) {
      err = EINVAL;
    } else if (s->rq.size() >= s->attr.max_wr) {
      err = ENOMEM;
    }
    if (err != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return err;
    }
    RecvWqe r;
    r.wr_id = wr->wr_id;
    r.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    s->rq.push_back(std::move(r));
    Stat().recv++;
  }
  return 0;
}

bool SrqTake(ibv_srq* srq, RecvWqe* out) {
  SoftSrq* s = ToSoft(srq);
  bool limit_reached = false;
  {
    internal::DomainLock l(&s->mu);
    if (s->rq.empty()) return false;
    *out = std::move(s->rq.front());
    s->rq.pop_front();
    if (s->attr.srq_limit > 0 && s->rq.size() < s->attr.srq_limit) {
      s->attr.srq_limit = 0;  // one event per arm, as the IB spec says
      limit_reached = true;
    }
  }
  if (limit_reached) {
    ibv_async_event ev{};
    ev.element.srq = srq;
    ev.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
    PostAsyncEvent(srq->context, ev);
  }
  return true;
}

}  // namespace internal

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (int err = 0; internal::TakeInjectedFailure(FaultOp::kCreateSrq, &err)) {
    errno = err;
    return nullptr;
  }
  if (pd == nullptr || attr == nullptr || attr->attr.max_wr == 0 ||
      attr->attr.max_wr > internal::kMaxSrqWr || attr->attr.max_sge > internal::kMaxSge ||
      attr->attr.srq_limit > attr->attr.max_wr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* s = new internal::SoftSrq();
  s->mu.set_domain(internal::ThreadDomainOf(pd));
  s->srq.context = pd->context;
  s->srq.srq_context = attr->srq_context;
  s->srq.pd = pd;
  internal::ToSoft(pd)->refs++;
  pthread_mutex_init(&s->srq.mutex, nullptr);
  pthread_cond_init(&s->srq.cond, nullptr);
  {
    internal::DomainLock l(&s->mu);
    s->attr = attr->attr;  // reported back unchanged: exactly what is enforced
  }
  return &s->srq;
}

int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  internal::SoftSrq* s = internal::ToSoft(srq);
  internal::DomainLock l(&s->mu);
  if (attr_mask & IBV_SRQ_MAX_WR) return EINVAL;  // resizing is not supported
  if (attr_mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > s->attr.max_wr) return EINVAL;
    s->attr.srq_limit = attr->srq_limit;
  }
  return 0;
}

int query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  internal::SoftSrq* s = internal::ToSoft(srq);
  internal::DomainLock l(&s->mu);
  *attr = s->attr;
  return 0;
}

int destroy_srq(ibv_srq* srq) {
  if (srq == nullptr) return EINVAL;
  internal::SoftSrq* s = internal::ToSoft(srq);
  if (s->qp_refs.load() > 0) return EBUSY;
  // No QP takes from it any more, so no limit event can come: wait until the
  // user acked those it got.
  internal::DrainAsyncEvents(srq);
  internal::ToSoft(srq->pd)->refs--;
  pthread_cond_destroy(&srq->cond);
  pthread_mutex_destroy(&srq->mutex);
  delete s;
  return 0;
}

}  // namespace softrdma
