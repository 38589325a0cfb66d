// cm_test.cc: rdma_cm over softrdma: connect/accept, private data, reject,
// no listener, disconnect, and that nothing leaks.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// The fd count once it has not changed for 100 ms (at most 2 s).
int SettledFdCount() {
  int last = CountOpenFds();
  int stable_ms = 0;
  for (int waited = 0; waited < 2000 && stable_ms < 100; waited += 10) {
    usleep(10000);
    int now = CountOpenFds();
    stable_ms = now == last ? stable_ms + 10 : 0;
    last = now;
  }
  return last;
}

TEST(RdmaCm, ConnectAcceptDeliversPrivateDataBothWays) {
  PairOptions opt;
  opt.client_private_data = "hello from client";
  opt.server_private_data = std::string(196, 's');  // the accept maximum
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.private_data_at_server, "hello from client");
  EXPECT_EQ(p.private_data_at_client, std::string(196, 's'));
  EXPECT_EQ(p.client->qp->state, IBV_QPS_RTS);
  EXPECT_EQ(p.server->qp->state, IBV_QPS_RTS);
  // Ports are reported in network byte order, as librdmacm does.
  EXPECT_EQ(get_dst_port(p.client), get_src_port(p.listener));
  EXPECT_EQ(get_src_port(p.server), get_src_port(p.listener));
  EXPECT_NE(ntohs(get_src_port(p.listener)), 0);
}

// librdmacm moves the active side's QP (rdma_cm's own) to RTR and RTS and
// sends the RTU inside the rdma_get_cm_event call that returns ESTABLISHED.
// So until the client takes that event, the server is not ESTABLISHED and
// nothing it sends completes at the client.
TEST(RdmaCm, ActiveQpJoinsWhenItsEstablishedIsTaken) {
  PairOptions opt;
  std::unique_ptr<Buffer> client_buf;
  std::unique_ptr<Buffer> server_buf;
  int server_events_early = -1;
  int client_completions_early = -1;
  opt.before_client_established = [&](ConnectedPair* p) {
    client_buf = std::make_unique<Buffer>(p->client_pd, 64, kAll);
    server_buf = std::make_unique<Buffer>(p->server_pd, 64, kAll);
    ASSERT_EQ(PostRecv(p->client->qp, 1, *client_buf, 0, 64), 0);
    std::memcpy(server_buf->data.data(), "early", 5);
    ASSERT_EQ(PostSend(p->server->qp, IBV_WR_SEND, 2, *server_buf, 0, 5), 0);
    rdma_cm_event* e = NextEvent(p->server_ch, 300);
    server_events_early = e != nullptr ? 1 : 0;
    if (e != nullptr) {
      ADD_FAILURE() << "server event " << e->event << " before the client's";
      ack_cm_event(e);
    }
    client_completions_early = static_cast<int>(Drain(p->client_cq, 200).size());
  };
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(server_events_early, 0);
  EXPECT_EQ(client_completions_early, 0);
  // Once the client took ESTABLISHED, the SEND arrives.
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(client_buf->data.data()), 5), "early");
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 2u);
  // The MRs go before the pair's PDs.
  client_buf.reset();
  server_buf.reset();
}

// The next event on `ch` (within 5 s) is `type` with `status`; acks it.
void ExpectEventWithStatus(rdma_event_channel* ch, rdma_cm_event_type type, int status) {
  rdma_cm_event* e = NextEvent(ch);
  ASSERT_NE(e, nullptr) << "no event, wanted " << type;
  EXPECT_EQ(e->event, type);
  EXPECT_EQ(e->status, status);
  ack_cm_event(e);
}

// What librdmacm's rdma_get_cm_event makes of the active side's
// CONNECT_RESPONSE when the id's QP cannot join: CONNECT_ERROR, no RTU (the
// passive side's connection fails), and no later DISCONNECTED.
TEST(RdmaCm, QpInErrorWhenEstablishedIsTakenIsConnectError) {
  PairOptions opt;
  opt.take_established = false;
  opt.before_client_established = [](ConnectedPair* p) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify_qp(p->client->qp, &a, IBV_QP_STATE), 0);
  };
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  ExpectEventWithStatus(p.client_ch, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL);
  ExpectEventWithStatus(p.server_ch, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
  EXPECT_EQ(NextEvent(p.client_ch, 200), nullptr);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_ERR);
}

TEST(RdmaCm, PeerGoneBeforeEstablishedIsTakenIsConnectErrorAndNothingMore) {
  PairOptions opt;
  opt.take_established = false;
  std::unique_ptr<Buffer> client_buf;
  opt.before_client_established = [&](ConnectedPair* p) {
    client_buf = std::make_unique<Buffer>(p->client_pd, 64, kAll);
    ASSERT_EQ(PostRecv(p->client->qp, 7, *client_buf, 0, 64), 0);
    // The passive side gives up before the RTU.
    ASSERT_EQ(disconnect(p->server), 0);
    usleep(100000);  // the DISCONNECT reaches the client's progress thread
  };
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  ExpectEventWithStatus(p.client_ch, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
  // Its DISCONNECTED is dropped, and the QP never joined: no QP_FATAL, the
  // receive flushed.
  EXPECT_EQ(NextEvent(p.client_ch, 200), nullptr);
  ibv_async_event ae;
  if (WaitAsyncEvent(p.client->verbs, IBV_EVENT_QP_FATAL, &ae, 100)) {
    ADD_FAILURE() << "IBV_EVENT_QP_FATAL on a QP that never joined";
    ack_async_event(&ae);
  }
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  client_buf.reset();
}

// An active side that never takes its ESTABLISHED sends no RTU: the accept
// fails as the IB CM's does when its REP retries run out.
TEST(RdmaCm, AcceptWithoutRtuIsUnreachableAfterTheRtuTimeout) {
  SetRtuTimeoutMillis(400);
  PairOptions opt;
  opt.take_established = false;
  std::unique_ptr<Buffer> server_buf;
  opt.before_client_established = [&](ConnectedPair* p) {
    server_buf = std::make_unique<Buffer>(p->server_pd, 64, kAll);
    ASSERT_EQ(PostRecv(p->server->qp, 9, *server_buf, 0, 64), 0);
  };
  ConnectedPair p(opt);
  SetRtuTimeoutMillis(0);  // later accepts wait the default again
  ASSERT_TRUE(p.ok());
  const absl::Time accepted = absl::Now();
  rdma_cm_event* e = NextEvent(p.server_ch, 5000);
  const absl::Duration waited = absl::Now() - accepted;
  ASSERT_NE(e, nullptr) << "no event within 5 s of the accept";
  EXPECT_EQ(e->event, RDMA_CM_EVENT_UNREACHABLE);
  EXPECT_EQ(e->status, -ETIMEDOUT);
  ack_cm_event(e);
  // Not before the timeout (the pair took a little of it to build).
  EXPECT_GE(waited, absl::Milliseconds(200));
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  ibv_qp_attr at{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(query_qp(p.server->qp, &at, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(at.qp_state, IBV_QPS_ERR);
  EXPECT_EQ(NextEvent(p.server_ch, 200), nullptr);
  // The connection is closed: the client's late take cannot establish.
  usleep(100000);
  ExpectEventWithStatus(p.client_ch, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
  EXPECT_EQ(NextEvent(p.client_ch, 200), nullptr);
  server_buf.reset();
}

// The RTU ends the wait: an established connection outlives the timeout.
TEST(RdmaCm, RtuInTimeStopsTheRtuTimer) {
  SetRtuTimeoutMillis(200);
  ConnectedPair p;
  SetRtuTimeoutMillis(0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(NextEvent(p.server_ch, 500), nullptr);
  Buffer cbuf(p.client_pd, 64, kAll);
  Buffer sbuf(p.server_pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, sbuf, 0, 64), 0);
  std::memcpy(cbuf.data.data(), "after", 5);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, cbuf, 0, 5), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 5u);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(sbuf.data.data()), 5), "after");
}

TEST(RdmaCm, PrivateDataOverLimitsIsEinval) {
  rdma_event_channel* ch = create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(9);
  ASSERT_EQ(resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 1000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ASSERT_EQ(resolve_route(id, 1000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  char big[200] = {};
  rdma_conn_param cp{};
  cp.private_data = big;
  cp.private_data_len = 57;
  EXPECT_EQ(softrdma::connect(id, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(reject(id, big, 149), -1);
  EXPECT_EQ(errno, EINVAL);
  cp.private_data_len = 197;
  EXPECT_EQ(softrdma::accept(id, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
}

TEST(RdmaCm, RejectCarriesPrivateData) {
  rdma_event_channel* sch = create_event_channel();
  rdma_event_channel* cch = create_event_channel();
  SetNonBlocking(sch->fd);
  SetNonBlocking(cch->fd);
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  ASSERT_EQ(create_id(sch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)), 0);
  ASSERT_EQ(softrdma::listen(listener, 4), 0);
  addr.sin_port = get_src_port(listener);
  ASSERT_EQ(create_id(cch, &client, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&addr), 1000), 0);
  ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ASSERT_EQ(resolve_route(client, 1000), 0);
  ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  rdma_conn_param cp{};
  cp.private_data = "v1";
  cp.private_data_len = 2;
  ASSERT_EQ(softrdma::connect(client, &cp), 0);
  rdma_cm_event* e = NextEvent(sch);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->event, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* child = e->id;
  ASSERT_EQ(e->param.conn.private_data_len, 2);
  EXPECT_EQ(std::memcmp(e->param.conn.private_data, "v1", 2), 0);
  ack_cm_event(e);
  ASSERT_EQ(reject(child, "go away", 7), 0);
  e = NextEvent(cch);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->event, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(e->status, 28);  // IB CM: consumer-defined reject
  ASSERT_EQ(e->param.conn.private_data_len, 7);
  EXPECT_EQ(std::memcmp(e->param.conn.private_data, "go away", 7), 0);
  ack_cm_event(e);
  EXPECT_EQ(destroy_id(child), 0);
  EXPECT_EQ(destroy_id(client), 0);
  EXPECT_EQ(destroy_id(listener), 0);
  destroy_event_channel(sch);
  destroy_event_channel(cch);
}

TEST(RdmaCm, NoListenerIsRejectedAndLeaksNoFd) {
  // Find a port nobody listens on: bind, read the port, close.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(s);

  // Warm up the process-wide parts (progress thread, device context) so
  // their fds are not counted as a leak.
  { ConnectedPair warm; ASSERT_TRUE(warm.ok()); }

  // Sockets close when their last owner lets go, which may be the progress
  // thread a moment later: let the warm-up's fds settle first.
  const int fds_before = SettledFdCount();
  const Stats stats_before = GetStats();
  rdma_event_channel* ch = create_event_channel();
  SetNonBlocking(ch->fd);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 1000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ASSERT_EQ(resolve_route(id, 1000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  ASSERT_EQ(softrdma::connect(id, nullptr), 0);
  EXPECT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_REJECTED), 8);  // invalid service ID
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
  EXPECT_EQ(SettledFdCount(), fds_before);
  EXPECT_EQ(GetStats().live_cm_ids, stats_before.live_cm_ids);
}

TEST(RdmaCm, HostThatDoesNotAnswerIsUnreachable) {
  // A plain TCP listener whose accept queue is full: Linux drops further
  // SYNs, so a connect to it gets no answer at all, like a dead host.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fillers.push_back(c);
  }
  usleep(50000);
  rdma_event_channel* ch = create_event_channel();
  SetNonBlocking(ch->fd);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 300), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ASSERT_EQ(resolve_route(id, 300), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  ASSERT_EQ(softrdma::connect(id, nullptr), 0);
  EXPECT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_UNREACHABLE), -ETIMEDOUT);
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
  for (int c : fillers) ::close(c);
  ::close(lfd);
}

TEST(RdmaCm, BadAddressGivesAddrError) {
  rdma_event_channel* ch = create_event_channel();
  SetNonBlocking(ch->fd);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr bad{};
  bad.sa_family = AF_UNIX;
  ASSERT_EQ(resolve_addr(id, nullptr, &bad, 1000), 0);
  EXPECT_LT(ExpectEvent(ch, RDMA_CM_EVENT_ADDR_ERROR), 0);
  EXPECT_EQ(destroy_id(id), 0);
  destroy_event_channel(ch);
}

TEST(RdmaCm, EmptyNonBlockingChannelIsEagain) {
  rdma_event_channel* ch = create_event_channel();
  SetNonBlocking(ch->fd);
  rdma_cm_event* e = nullptr;
  EXPECT_EQ(get_cm_event(ch, &e), -1);
  EXPECT_EQ(errno, EAGAIN);
  destroy_event_channel(ch);
}

TEST(RdmaCm, DisconnectFlushesPostedReceivesAndTellsBothSides) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer buf(p.server_pd, 4096, kAll);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(PostRecv(p.server->qp, 100 + i, buf, i * 1024, 1024), 0);
  }
  ASSERT_EQ(disconnect(p.client), 0);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(ExpectEvent(p.server_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  std::vector<ibv_wc> wcs = Drain(p.server_cq, 100);
  ASSERT_EQ(wcs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 100u + i);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  EXPECT_EQ(p.server->qp->state, IBV_QPS_ERR);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_ERR);
  // A receive posted to an errored QP is accepted and flushed.
  ASSERT_EQ(PostRecv(p.server->qp, 7, buf, 0, 64), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST(RdmaCm, DestroyingPeerIdDisconnects) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer buf(p.server_pd, 1024, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, buf, 0, 1024), 0);
  destroy_qp(p.client);
  destroy_id(p.client);
  p.client = nullptr;
  EXPECT_EQ(ExpectEvent(p.server_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST(RdmaCm, MigrateIdMovesLaterEventsToTheNewChannel) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  rdma_event_channel* other = create_event_channel();
  SetNonBlocking(other->fd);
  ASSERT_EQ(migrate_id(p.server, other), 0);
  EXPECT_EQ(p.server->channel, other);
  ASSERT_EQ(disconnect(p.client), 0);
  EXPECT_EQ(ExpectEvent(p.client_ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  EXPECT_EQ(ExpectEvent(other, RDMA_CM_EVENT_DISCONNECTED), 0);
  rdma_cm_event* e = nullptr;
  EXPECT_EQ(get_cm_event(p.server_ch, &e), -1);  // nothing on the old channel
  EXPECT_EQ(errno, EAGAIN);
  destroy_qp(p.server);
  destroy_id(p.server);
  p.server = nullptr;
  destroy_event_channel(other);
}

// Synchronous endpoints (rdma_create_ep with RAI_PASSIVE, rdma_get_request,
// rdma_accept, rdma_connect) over the loopback address `loopback` (port 0):
// the client's inline SEND arrives, each side sees the other's address in its
// family, and a second connect once nobody listens fails ECONNREFUSED.
void SynchronousEndpointsTalkOver(sockaddr_storage loopback) {
  ibv_qp_init_attr qa{};
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 16;
  qa.sq_sig_all = 1;
  const int family = loopback.ss_family;
  const socklen_t len = family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  sockaddr_storage addr = loopback;
  rdma_addrinfo passive{};
  passive.ai_flags = RAI_PASSIVE;
  passive.ai_src_addr = reinterpret_cast<sockaddr*>(&addr);
  passive.ai_src_len = len;
  rdma_cm_id* listen_id = nullptr;
  ibv_qp_init_attr server_qa = qa;
  ASSERT_EQ(create_ep(&listen_id, &passive, nullptr, &server_qa), 0);
  ASSERT_EQ(softrdma::listen(listen_id, 1), 0);
  ASSERT_EQ(get_local_addr(listen_id)->sa_family, family);
  if (family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = get_src_port(listen_id);
  } else {
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = get_src_port(listen_id);
  }

  std::atomic<int> server_rc{-1};
  std::atomic<int> server_peer_family{-1};
  std::thread server([&] {
    rdma_cm_id* id = nullptr;
    if (get_request(listen_id, &id) != 0 || id->qp == nullptr) return;
    server_peer_family = get_peer_addr(id)->sa_family;
    char buf[16] = {};
    ibv_mr* mr = reg_mr(id->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), sizeof(buf), mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(id->qp, &wr, &bad) != 0) return;
    if (softrdma::accept(id, nullptr) != 0) return;  // blocks until ESTABLISHED
    ibv_wc wc;
    if (PollOne(id->recv_cq, &wc) && wc.status == IBV_WC_SUCCESS && wc.byte_len == 5 &&
        std::memcmp(buf, "hello", 5) == 0) {
      server_rc = 0;
    }
    disconnect(id);
    dereg_mr(mr);
    destroy_ep(id);
  });

  rdma_addrinfo active{};
  active.ai_dst_addr = reinterpret_cast<sockaddr*>(&addr);
  active.ai_dst_len = len;
  rdma_cm_id* id = nullptr;
  ibv_qp_init_attr client_qa = qa;
  ASSERT_EQ(create_ep(&id, &active, nullptr, &client_qa), 0);
  ASSERT_NE(id->qp, nullptr);
  ASSERT_EQ(softrdma::connect(id, nullptr), 0);  // blocks until ESTABLISHED
  EXPECT_EQ(id->qp->state, IBV_QPS_RTS);
  EXPECT_EQ(get_peer_addr(id)->sa_family, family);
  EXPECT_EQ(get_dst_port(id), get_src_port(listen_id));
  char msg[] = "hello";
  ibv_sge sge{reinterpret_cast<uint64_t>(msg), 5, 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_INLINE;  // no MR needed
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(id->qp, &wr, &bad), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(id->send_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  server.join();
  EXPECT_EQ(server_rc.load(), 0);
  EXPECT_EQ(server_peer_family.load(), family);
  destroy_ep(id);
  destroy_ep(listen_id);

  // A synchronous connect to nobody fails with ECONNREFUSED.
  rdma_cm_id* lonely = nullptr;
  ASSERT_EQ(create_ep(&lonely, &active, nullptr, nullptr), 0);
  EXPECT_EQ(softrdma::connect(lonely, nullptr), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  destroy_ep(lonely);
}

TEST(RdmaCm, SynchronousEndpointsConnectAndTalk) {
  sockaddr_storage ss{};
  auto* addr = reinterpret_cast<sockaddr_in*>(&ss);
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  SynchronousEndpointsTalkOver(ss);
}

TEST(RdmaCm, SynchronousEndpointsConnectAndTalkOverIpv6) {
  sockaddr_storage ss{};
  auto* addr = reinterpret_cast<sockaddr_in6*>(&ss);
  addr->sin6_family = AF_INET6;
  addr->sin6_addr = in6addr_loopback;
  SynchronousEndpointsTalkOver(ss);
}

// A listener on 127.0.0.1 and a client id resolved to it (address and
// route), each on its own non-blocking channel. ConnectAndAccept connects the
// client with `cp` and accepts with a QP made by rdma_create_qp without a PD
// (`qa`) and no conn_param. Close (or the destructor) destroys what is left.
struct ResolvedPair {
  void SetUp() {
    sch = create_event_channel();
    cch = create_event_channel();
    SetNonBlocking(sch->fd);
    SetNonBlocking(cch->fd);
    listener = ListenOnLoopback(sch, 4);
    ASSERT_NE(listener, nullptr);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = get_src_port(listener);
    ASSERT_EQ(create_id(cch, &client, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&addr), 1000), 0);
    ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
    ASSERT_EQ(resolve_route(client, 1000), 0);
    ASSERT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  }
  void ConnectAndAccept(ibv_qp_init_attr* qa, rdma_conn_param* cp) {
    ASSERT_EQ(softrdma::connect(client, cp), 0);
    rdma_cm_event* e = NextEvent(sch);
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->event, RDMA_CM_EVENT_CONNECT_REQUEST);
    child = e->id;
    ack_cm_event(e);
    ASSERT_EQ(create_qp(child, nullptr, qa), 0);
    ASSERT_EQ(softrdma::accept(child, nullptr), 0);
    EXPECT_EQ(ExpectEvent(cch, RDMA_CM_EVENT_ESTABLISHED), 0);
    EXPECT_EQ(ExpectEvent(sch, RDMA_CM_EVENT_ESTABLISHED), 0);
  }
  void Close() {
    for (rdma_cm_id** id : {&client, &child, &listener}) {
      if (*id == nullptr) continue;
      if ((*id)->qp != nullptr) destroy_qp(*id);
      destroy_id(*id);
      *id = nullptr;
    }
    for (rdma_event_channel** ch : {&sch, &cch}) {
      if (*ch != nullptr) destroy_event_channel(*ch);
      *ch = nullptr;
    }
  }
  ~ResolvedPair() { Close(); }

  rdma_event_channel* sch = nullptr;
  rdma_event_channel* cch = nullptr;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  rdma_cm_id* child = nullptr;
};

ibv_qp_init_attr SmallRcQp() {
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  return qa;
}

TEST(RdmaCm, CreateQpWithoutPdOrCqsMakesThem) {
  const Stats before = GetStats();
  ResolvedPair p;
  ASSERT_NO_FATAL_FAILURE(p.SetUp());
  ibv_qp_init_attr qa = SmallRcQp();
  ASSERT_EQ(create_qp(p.client, nullptr, &qa), 0);
  ASSERT_NE(p.client->qp, nullptr);
  ASSERT_NE(p.client->send_cq, nullptr);
  ASSERT_NE(p.client->recv_cq, nullptr);
  ASSERT_NE(p.client->pd, nullptr);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_INIT);
  ASSERT_NO_FATAL_FAILURE(p.ConnectAndAccept(&qa, nullptr));
  EXPECT_EQ(p.client->qp->state, IBV_QPS_RTS);
  destroy_qp(p.client);
  destroy_qp(p.child);
  EXPECT_EQ(p.client->qp, nullptr);
  p.Close();
  const Stats after = GetStats();
  EXPECT_EQ(after.live_cm_ids, before.live_cm_ids);
  EXPECT_EQ(after.live_qps, before.live_qps);
  EXPECT_EQ(after.live_cqs, before.live_cqs);
}

// rdma_accept(id, NULL) (or RDMA_MAX_INIT_DEPTH) takes
// librdmacm's REQ-derived depths, min(offer, device max): a client that
// offered initiator_depth / responder_resources 1 gets 1 both ways.
TEST(RdmaCm, AcceptWithoutParamsKeepsTheRequestersDepths) {
  ResolvedPair p;
  ASSERT_NO_FATAL_FAILURE(p.SetUp());
  ibv_qp_init_attr qa = SmallRcQp();
  ASSERT_EQ(create_qp(p.client, nullptr, &qa), 0);
  rdma_conn_param cp{};
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  ASSERT_NO_FATAL_FAILURE(p.ConnectAndAccept(&qa, &cp));
  ibv_qp_attr at{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(query_qp(p.client->qp, &at, 0, &init), 0);
  EXPECT_EQ(at.max_rd_atomic, 1) << "client";
  EXPECT_EQ(at.max_dest_rd_atomic, 1) << "client";
  ASSERT_EQ(query_qp(p.child->qp, &at, 0, &init), 0);
  EXPECT_EQ(at.max_rd_atomic, 1) << "server";
  EXPECT_EQ(at.max_dest_rd_atomic, 1) << "server";
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
