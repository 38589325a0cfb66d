// fork_test.cc: the two ends of a connection in different processes.
//
// The parent listens; the child is this same test binary, re-executed (so it
// starts with a clean softrdma, not a forked copy of the parent's threads)
// with a filter that runs only ForkChild.Client, which connects, SENDs with
// imm, RDMA WRITEs into memory the server advertised in its accept private
// data, waits for the server's reply, and disconnects. The child runs with
// RDMARPC_SOFT_STATS=1 and the parent checks its stats line too.
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr char kPortEnv[] = "SOFTRDMA_FORK_TEST_PORT";
constexpr uint32_t kImm = 0x01020304;

struct Advert {
  uint64_t addr;
  uint32_t rkey;
};

// Runs only inside the child process.
TEST(ForkChild, Client) {
  const char* port = std::getenv(kPortEnv);
  if (port == nullptr) GTEST_SKIP() << "runs only as ForkTest's child";
  rdma_event_channel* ch = create_event_channel();
  SetNonBlocking(ch->fd);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  ASSERT_EQ(resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
  ASSERT_EQ(resolve_route(id, 2000), 0);
  ASSERT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
  ibv_pd* pd = alloc_pd(id->verbs);
  ibv_cq* cq = create_cq(id->verbs, 64, nullptr, nullptr, 0);
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap = {8, 8, 1, 1, 64};
  ASSERT_EQ(create_qp(id, pd, &qa), 0);
  Buffer buf(pd, 4096, kAll);
  ASSERT_EQ(PostRecv(id->qp, 7, buf, 2048, 2048), 0);
  rdma_conn_param cp{};
  cp.rnr_retry_count = 7;
  ASSERT_EQ(softrdma::connect(id, &cp), 0);
  rdma_cm_event* e = NextEvent(ch);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->event, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_EQ(e->param.conn.private_data_len, sizeof(Advert));
  Advert adv;
  std::memcpy(&adv, e->param.conn.private_data, sizeof(adv));
  ack_cm_event(e);

  std::memcpy(buf.data.data(), "ping from child", 15);
  ASSERT_EQ(PostSend(id->qp, IBV_WR_SEND_WITH_IMM, 1, buf, 0, 15, htonl(kImm)), 0);
  std::memcpy(buf.data.data() + 100, "written by child", 16);
  ASSERT_EQ(PostSend(id->qp, IBV_WR_RDMA_WRITE, 2, buf, 100, 16, 0, adv.addr, adv.rkey), 0);
  int sends = 0;
  bool got_reply = false;
  while (sends < 2 || !got_reply) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(cq, &wc, 10000));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
    if (wc.opcode == IBV_WC_RECV) {
      EXPECT_EQ(wc.wr_id, 7u);
      EXPECT_EQ(wc.byte_len, 5u);
      EXPECT_EQ(std::memcmp(buf.data.data() + 2048, "pong!", 5), 0);
      got_reply = true;
    } else {
      ++sends;
    }
  }
  ASSERT_EQ(disconnect(id), 0);
  EXPECT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_DISCONNECTED), 0);
  destroy_qp(id);
  destroy_id(id);
  destroy_cq(cq);
  // The MR goes before its PD: ibv_dealloc_pd fails with EBUSY otherwise.
  ASSERT_EQ(dereg_mr(buf.mr), 0);
  buf.mr = nullptr;
  EXPECT_EQ(dealloc_pd(pd), 0);
  destroy_event_channel(ch);
}

TEST(ForkTest, EndsInTwoProcesses) {
  ConnectedPair unused_warmup;  // makes sure the parent's progress thread is running
  ASSERT_TRUE(unused_warmup.ok());
  rdma_event_channel* ch = create_event_channel();
  SetNonBlocking(ch->fd);
  rdma_cm_id* listener = ListenOnLoopback(ch, 4);
  ASSERT_NE(listener, nullptr);
  const std::string port = std::to_string(ntohs(get_src_port(listener)));

  int err_pipe[2];
  ASSERT_EQ(pipe(err_pipe), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    setenv(kPortEnv, port.c_str(), 1);
    setenv("RDMARPC_SOFT_STATS", "1", 1);
    execl("/proc/self/exe", "softrdma_test", "--gtest_filter=ForkChild.Client", nullptr);
    _exit(127);
  }
  close(err_pipe[1]);

  rdma_cm_event* e = NextEvent(ch, 20000);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->event, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* server = e->id;
  ack_cm_event(e);
  ibv_pd* pd = alloc_pd(server->verbs);
  ibv_cq* cq = create_cq(server->verbs, 64, nullptr, nullptr, 0);
  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap = {8, 8, 1, 1, 64};
  ASSERT_EQ(create_qp(server, pd, &qa), 0);
  {
    Buffer recv_buf(pd, 1024, kAll);
    Buffer target(pd, 1024, kAll);
    ASSERT_EQ(PostRecv(server->qp, 3, recv_buf, 0, 1024), 0);
    Advert adv{target.addr(), target.mr->rkey};
    rdma_conn_param ap{};
    ap.private_data = &adv;
    ap.private_data_len = sizeof(adv);
    ap.rnr_retry_count = 7;
    ASSERT_EQ(softrdma::accept(server, &ap), 0);
    EXPECT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_ESTABLISHED, 10000), 0);
    ibv_wc wc;
    ASSERT_TRUE(PollOne(cq, &wc, 10000));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 3u);
    EXPECT_EQ(wc.byte_len, 15u);
    EXPECT_EQ(wc.imm_data, htonl(kImm));
    EXPECT_EQ(std::memcmp(recv_buf.data.data(), "ping from child", 15), 0);
    // The WRITE was posted after the SEND; RC order makes it visible by the
    // time its ACK went out, which is before the reply below can be received.
    std::memcpy(recv_buf.data.data() + 512, "pong!", 5);
    ASSERT_EQ(PostSend(server->qp, IBV_WR_SEND, 4, recv_buf, 512, 5), 0);
    ASSERT_TRUE(PollOne(cq, &wc, 10000));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 4u);
    EXPECT_EQ(ExpectEvent(ch, RDMA_CM_EVENT_DISCONNECTED, 10000), 0);
    EXPECT_EQ(std::memcmp(target.data.data(), "written by child", 16), 0);
  }
  std::string child_err;
  char chunk[4096];
  ssize_t n;
  while ((n = read(err_pipe[0], chunk, sizeof(chunk))) > 0) child_err.append(chunk, n);
  close(err_pipe[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << child_err;
  // bytes_sent: 15 (SEND) + 16 (WRITE).
  EXPECT_NE(child_err.find("softrdma-stats: send=0 send_with_imm=1 rdma_write=1 "
                           "rdma_write_with_imm=0 rdma_read=0 recv=1 bytes_sent=31"),
            std::string::npos)
      << child_err;
  destroy_qp(server);
  destroy_id(server);
  destroy_id(listener);
  destroy_cq(cq);
  dealloc_pd(pd);
  destroy_event_channel(ch);
}

TEST(ForkTest, ChildWithoutExecStartsItsOwnProgressThread) {
  ConnectedPair parent_pair;  // the parent's progress thread is running
  ASSERT_TRUE(parent_pair.ok());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only async-signal-safe calls are guaranteed here, but softrdma's
    // atfork handler makes a fresh start in the child work in practice.
    int rc = 0;
    {
      ConnectedPair child_pair;
      if (!child_pair.ok()) rc = 1;
      Buffer sb(child_pair.server_pd, 64, IBV_ACCESS_LOCAL_WRITE);
      Buffer cb(child_pair.client_pd, 64, IBV_ACCESS_LOCAL_WRITE);
      if (rc == 0 && PostRecv(child_pair.server->qp, 1, sb, 0, 64) != 0) rc = 2;
      if (rc == 0 && PostSend(child_pair.client->qp, IBV_WR_SEND, 2, cb, 0, 8) != 0) rc = 3;
      ibv_wc wc;
      if (rc == 0 && (!PollOne(child_pair.server_cq, &wc, 5000) || wc.status != IBV_WC_SUCCESS)) {
        rc = 4;
      }
    }
    _exit(rc);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's connection still works.
  Buffer sb(parent_pair.server_pd, 64, IBV_ACCESS_LOCAL_WRITE);
  Buffer cb(parent_pair.client_pd, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(PostRecv(parent_pair.server->qp, 1, sb, 0, 64), 0);
  ASSERT_EQ(PostSend(parent_pair.client->qp, IBV_WR_SEND, 2, cb, 0, 8), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(parent_pair.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
