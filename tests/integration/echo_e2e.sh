#!/usr/bin/env bash
# echo_e2e.sh MODE ECHO_SERVER ECHO_CLIENT [HEALTH_PROBE]
#
# Runs the echo example as two processes over softrdma on 127.0.0.1 and checks
# the client's verdict line (and, with RDMARPC_SOFT_STATS=1, the work requests
# both processes posted). MODE:
#   small     32 B x 1000 calls: all eager; >= 2000 SEND_WITH_IMM (a request
#             and a response per call) and no RDMA READ/WRITE at all
#   medium    64 KiB x 50 calls, 4 in flight: rendezvous, bytes checked; the
#             server then exits 0 on SIGINT
#   ipv6      the server on [::1]:0, 32 B and 1 MiB echoes over the same-host
#             link and over TCP (SOFTRDMA_SHM=0 in both processes)
#   large     16 MiB x 10 calls: rendezvous; RDMA READ and WRITE_WITH_IMM used,
#             and no SEND larger than the 8 KiB eager limit
#   async     the same payloads through --async (one thread, the async stub
#             API, several calls in flight)
#   stopped   a server that has exited: UNAVAILABLE, exit 1, within 6 s
#   deadline  --deadline_ms=20 --server_delay_ms=200: DEADLINE_EXCEEDED, exit 1
#   dataloss  ECHO_SERVER is corrupting_echo_server, which inverts byte 17 of
#             its 4th reply: "echo: DATA_LOSS mismatch at call 3 byte 17", exit 1
#   health    health_probe against echo_server: the server and EchoService
#             SERVING (exit 0), an unknown name NOT_FOUND (exit 3), a stopped
#             server UNAVAILABLE (exit 2)
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

MODE="$1"
ECHO_SERVER="$2"
ECHO_CLIENT="$3"
HEALTH_PROBE="${4:-}"

# ChannelOptions/ServerOptions::eager_limit_bytes default.
readonly EAGER_LIMIT=8192

# expect_ok CALLS BYTES: the client's last stdout line is the ok verdict.
expect_ok() {
  local line
  line="$(last_line "$SCRATCH/client.out")"
  [[ "$line" =~ ^echo:\ ok\ calls=$1\ payload_bytes=$2\ p50_us=[0-9]+\ p99_us=[0-9]+$ ]] ||
    fail "client's last line is '$line', want 'echo: ok calls=$1 payload_bytes=$2 p50_us=X p99_us=Y'"
}

# run_client ARGS...: runs the client against the server; sets STATUS.
run_client() {
  STATUS=0
  run_bounded 240 "$ECHO_CLIENT" --server="$SERVER_ADDR" "$@" \
    >"$SCRATCH/client.out" 2>"$SCRATCH/client.err" || STATUS=$?
}

case "$MODE" in
  small)
    export RDMARPC_SOFT_STATS=1
    start_server server "$ECHO_SERVER"
    run_client --payload_bytes=32 --count=1000
    [[ "$STATUS" == 0 ]] || fail "client exited with $STATUS, want 0"
    expect_ok 1000 32
    stop_server
    files=("$SCRATCH/client.err" "$SCRATCH/server.err")
    [[ "$(grep -c '^softrdma-stats:' "${files[@]}" | awk -F: '{ s += $2 } END { print s }')" == 2 ]] ||
      fail "want one softrdma-stats line from the client and one from the server"
    imm="$(stat_sum send_with_imm "${files[@]}")" || fail "no send_with_imm counter"
    reads="$(stat_sum rdma_read "${files[@]}")" || fail "no rdma_read counter"
    writes="$(stat_sum rdma_write "${files[@]}")" || fail "no rdma_write counter"
    writes_imm="$(stat_sum rdma_write_with_imm "${files[@]}")" || fail "no rdma_write_with_imm counter"
    echo "send_with_imm=$imm rdma_read=$reads rdma_write=$writes rdma_write_with_imm=$writes_imm"
    ((imm >= 2000)) || fail "send_with_imm=$imm summed over client and server, want >= 2000"
    [[ "$reads $writes $writes_imm" == "0 0 0" ]] ||
      fail "32 B calls used RDMA: rdma_read=$reads rdma_write=$writes rdma_write_with_imm=$writes_imm, want all 0"
    pass "1000 x 32 B echo, eager only"
    ;;
  medium)
    start_server server "$ECHO_SERVER"
    run_client --payload_bytes=65536 --count=50 --concurrency=4
    [[ "$STATUS" == 0 ]] || fail "client exited with $STATUS, want 0"
    expect_ok 50 65536
    stop_server INT  # Ctrl-C must shut down as cleanly as SIGTERM
    pass "50 x 64 KiB echo, server stopped by SIGINT"
    ;;
  ipv6)
    for shm in 1 0; do
      export SOFTRDMA_SHM=$shm
      start_server server "$ECHO_SERVER" --listen='[::1]:0'
      [[ "$SERVER_ADDR" =~ ^\[::1\]:[0-9]+$ ]] || fail "server listening on '$SERVER_ADDR', want [::1]:PORT"
      run_client --payload_bytes=32 --count=200
      [[ "$STATUS" == 0 ]] || fail "SOFTRDMA_SHM=$shm: 32 B client exited with $STATUS, want 0"
      expect_ok 200 32
      run_client --payload_bytes=1048576 --count=5
      [[ "$STATUS" == 0 ]] || fail "SOFTRDMA_SHM=$shm: 1 MiB client exited with $STATUS, want 0"
      expect_ok 5 1048576
      stop_server
    done
    pass "echo over [::1] on both links"
    ;;
  large)
    export RDMARPC_SOFT_STATS=1
    start_server server "$ECHO_SERVER"
    run_client --payload_bytes=16777216 --count=10
    [[ "$STATUS" == 0 ]] || fail "client exited with $STATUS, want 0"
    expect_ok 10 16777216
    stop_server
    files=("$SCRATCH/client.err" "$SCRATCH/server.err")
    reads="$(stat_sum rdma_read "${files[@]}")" || fail "no rdma_read counter"
    writes_imm="$(stat_sum rdma_write_with_imm "${files[@]}")" || fail "no rdma_write_with_imm counter"
    echo "rdma_read=$reads rdma_write_with_imm=$writes_imm"
    ((reads > 0)) || fail "rdma_read=0: a 16 MiB request must be pulled by RDMA READ"
    ((writes_imm > 0)) || fail "rdma_write_with_imm=0: a 16 MiB response must be pushed by RDMA WRITE_WITH_IMM"
    if biggest="$(stat_max max_send_bytes "${files[@]}")"; then
      echo "max_send_bytes=$biggest"
      ((biggest <= EAGER_LIMIT)) || fail "a SEND of $biggest bytes exceeds the eager limit $EAGER_LIMIT"
    fi
    pass "10 x 16 MiB echo by rendezvous"
    ;;
  async)
    start_server server "$ECHO_SERVER"
    for run in "32 1000 8" "65536 50 4" "16777216 4 2"; do
      read -r bytes count concurrency <<<"$run"
      run_client --async --payload_bytes="$bytes" --count="$count" --concurrency="$concurrency"
      [[ "$STATUS" == 0 ]] || fail "--async $count x $bytes B: client exited with $STATUS, want 0"
      expect_ok "$count" "$bytes"
      echo "--async $count x $bytes B, $concurrency in flight: $(last_line "$SCRATCH/client.out")"
    done
    stop_server
    pass "async echo"
    ;;
  stopped)
    start_server server "$ECHO_SERVER"
    stop_server
    start=$(date +%s%N)
    run_client --payload_bytes=32 --count=1
    elapsed_ms=$((($(date +%s%N) - start) / 1000000))
    line="$(last_line "$SCRATCH/client.out")"
    echo "client: status $STATUS after $elapsed_ms ms: $line"
    [[ "$STATUS" == 1 ]] || fail "client exited with $STATUS, want 1"
    [[ "$line" == "echo: UNAVAILABLE "* ]] || fail "last line '$line', want 'echo: UNAVAILABLE ...'"
    ((elapsed_ms < 6000)) || fail "client took $elapsed_ms ms to give up, want < 6000"
    pass "stopped server reported UNAVAILABLE in $elapsed_ms ms"
    ;;
  deadline)
    start_server server "$ECHO_SERVER"
    run_client --payload_bytes=32 --count=1 --deadline_ms=20 --server_delay_ms=200
    line="$(last_line "$SCRATCH/client.out")"
    echo "client: status $STATUS: $line"
    [[ "$STATUS" == 1 ]] || fail "client exited with $STATUS, want 1"
    [[ "$line" == "echo: DEADLINE_EXCEEDED "* ]] || fail "last line '$line', want 'echo: DEADLINE_EXCEEDED ...'"
    stop_server
    pass "deadline reported"
    ;;
  dataloss)
    start_server server "$ECHO_SERVER" --corrupt_call=3 --corrupt_byte=17
    run_client --payload_bytes=100 --count=10
    line="$(last_line "$SCRATCH/client.out")"
    echo "client: status $STATUS: $line"
    [[ "$STATUS" == 1 ]] || fail "client exited with $STATUS, want 1"
    [[ "$line" == "echo: DATA_LOSS mismatch at call 3 byte 17" ]] ||
      fail "last line '$line', want 'echo: DATA_LOSS mismatch at call 3 byte 17'"
    stop_server
    pass "a damaged reply is reported with its call and byte"
    ;;
  health)
    [[ -n "$HEALTH_PROBE" ]] || fail "health mode needs the health_probe binary"
    # probe WANT_EXIT WANT_LINE [ARGS...]: health_probe's exit status and the
    # start of its (last) stderr line.
    probe() {
      local want_exit="$1" want_line="$2"
      shift 2
      STATUS=0
      run_bounded 30 "$HEALTH_PROBE" -addr="$SERVER_ADDR" "$@" \
        >"$SCRATCH/probe.out" 2>"$SCRATCH/probe.err" || STATUS=$?
      local line
      line="$(last_line "$SCRATCH/probe.err")"
      echo "health_probe $*: exit $STATUS: $line"
      [[ "$STATUS" == "$want_exit" ]] || fail "health_probe $*: exit $STATUS, want $want_exit"
      [[ "$line" == "$want_line"* ]] || fail "health_probe $*: '$line', want '$want_line'"
    }
    start_server server "$ECHO_SERVER"
    probe 0 "status: SERVING"
    probe 0 "status: SERVING" -service=rdmarpc.examples.EchoService
    probe 3 "error: health rpc failed: NOT_FOUND: unknown service 'no.such.Service'" -service=no.such.Service
    stop_server
    probe 2 "error: failed to connect service at \"$SERVER_ADDR\": UNAVAILABLE: " -service=rdmarpc.examples.EchoService
    pass "health checks of echo_server"
    ;;
  *)
    echo "usage: $0 small|medium|large|async|stopped|deadline|dataloss|health ECHO_SERVER ECHO_CLIENT [HEALTH_PROBE]" >&2
    exit 2
    ;;
esac
