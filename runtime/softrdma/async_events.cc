// async_events.cc: the context's async event queue (ibv_get_async_event,
// ibv_ack_async_event) and the destroy-time wait for unacknowledged events.
//
// As in rdma-core, every event returned by get_async_event must be acked, and
// destroying its QP / SRQ / CQ blocks until it is: the event holds a pointer to
// the object (`element`), so the object may not be freed under the user.
#include <errno.h>
#include <pthread.h>

#include <algorithm>

#include "softrdma/internal.h"
#include "softrdma/softrdma.h"

namespace softrdma {
namespace internal {
namespace {

enum class ElementKind { kQp, kCq, kSrq, kNone };

ElementKind KindOf(ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_CQ_ERR:
      return ElementKind::kCq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return ElementKind::kQp;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return ElementKind::kSrq;
    default:
      return ElementKind::kNone;  // port and device events
  }
}

AsyncEventCount* CounterOf(const ibv_async_event& e) {
  switch (KindOf(e.event_type)) {
    case ElementKind::kQp:
      return &ToSoft(e.element.qp)->events;
    case ElementKind::kCq:
      return &ToSoft(e.element.cq)->events;
    case ElementKind::kSrq:
      return &ToSoft(e.element.srq)->events;
    default:
      return nullptr;
  }
}

void Forget(ibv_context* context, ElementKind kind, const void* element) {
  SoftContext* c = ToSoft(context);
  absl::MutexLock l(&c->mu);
  auto& q = c->async_events;
  // The eventfd keeps their counts; get_async_event skips such empty wakeups.
  q.erase(std::remove_if(q.begin(), q.end(),
                         [&](const ibv_async_event& e) {
                           return KindOf(e.event_type) == kind &&
                                  static_cast<const void*>(e.element.qp) == element;
                         }),
          q.end());
}

void WaitAcked(pthread_mutex_t* mu, pthread_cond_t* cond, const uint32_t* completed,
               const AsyncEventCount& count) {
  pthread_mutex_lock(mu);
  while (*completed != count.reported.load()) pthread_cond_wait(cond, mu);
  pthread_mutex_unlock(mu);
}

}  // namespace

void PostAsyncEvent(ibv_context* context, const ibv_async_event& event) {
  SoftContext* c = ToSoft(context);
  {
    absl::MutexLock l(&c->mu);
    c->async_events.push_back(event);
  }
  SignalEventFd(context->async_fd);
}

void DrainAsyncEvents(ibv_qp* qp) {
  Forget(qp->context, ElementKind::kQp, qp);
  WaitAcked(&qp->mutex, &qp->cond, &qp->events_completed, ToSoft(qp)->events);
}

void DrainAsyncEvents(ibv_srq* srq) {
  Forget(srq->context, ElementKind::kSrq, srq);
  WaitAcked(&srq->mutex, &srq->cond, &srq->events_completed, ToSoft(srq)->events);
}

void DrainAsyncEvents(ibv_cq* cq) {
  Forget(cq->context, ElementKind::kCq, cq);
  WaitAcked(&cq->mutex, &cq->cond, &cq->async_events_completed, ToSoft(cq)->events);
}

}  // namespace internal

int get_async_event(ibv_context* context, ibv_async_event* event) {
  if (context == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  internal::SoftContext* c = internal::ToSoft(context);
  for (;;) {
    if (internal::WaitEventFd(context->async_fd) != 0) return -1;
    absl::MutexLock l(&c->mu);
    if (c->async_events.empty()) continue;
    *event = c->async_events.front();
    c->async_events.pop_front();
    // Counted under the context's lock, so a destroy that has just dropped
    // the object's queued events either sees this one counted or never sees
    // it at all.
    if (internal::AsyncEventCount* n = internal::CounterOf(*event)) n->reported++;
    return 0;
  }
}

void ack_async_event(ibv_async_event* event) {
  if (event == nullptr) return;
  pthread_mutex_t* mu = nullptr;
  pthread_cond_t* cond = nullptr;
  uint32_t* completed = nullptr;
  switch (internal::KindOf(event->event_type)) {
    case internal::ElementKind::kQp:
      mu = &event->element.qp->mutex;
      cond = &event->element.qp->cond;
      completed = &event->element.qp->events_completed;
      break;
    case internal::ElementKind::kCq:
      mu = &event->element.cq->mutex;
      cond = &event->element.cq->cond;
      completed = &event->element.cq->async_events_completed;
      break;
    case internal::ElementKind::kSrq:
      mu = &event->element.srq->mutex;
      cond = &event->element.srq->cond;
      completed = &event->element.srq->events_completed;
      break;
    default:
      return;
  }
  pthread_mutex_lock(mu);
  ++*completed;
  pthread_cond_signal(cond);
  pthread_mutex_unlock(mu);
}

}  // namespace softrdma
