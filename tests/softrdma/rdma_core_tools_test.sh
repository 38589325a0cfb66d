#!/bin/sh
# rdma_core_tools_test.sh: unmodified rdma-core programs (rping, ucmatose,
# rdma_server/rdma_client, cmtime, udaddy, mckey) run on softrdma through
# libsoftrdma_preload.so, server and client in two processes over 127.0.0.1.
#   rping           rping -v -C 100
#   rping-validate  rping -V -S 16384 -C 50 (checks every ping's data)
#   ucmatose        ucmatose -c 4 -C 100
#   ucmatose-large  ucmatose -c 16 -C 50 -S 65536
#   rdma_server     rdma_server / rdma_client (synchronous endpoints)
#   rdma_xserver    rdma_xserver / rdma_xclient -c r (RC; XRC is not there)
#   cmtime          cmtime -c 100: every step's row, the client's exit 0
#   udaddy, mckey   UD / multicast programs: they must fail, udaddy's server
#                   with EOPNOTSUPP ("Operation not supported"): softrdma has
#                   RC QPs only (softrdma.h)
# Usage: rdma_core_tools_test.sh <preload.so> <mode>
set -u
PRELOAD=$1
MODE=$2
TOOL=${MODE%%-*}
command -v "$TOOL" >/dev/null 2>&1 || { echo "$TOOL not installed; skipping"; exit 77; }
# A sanitizer-built preload library needs the sanitizer runtimes loaded first.
if ldd "$PRELOAD" | grep -q libasan; then
  PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so):$PRELOAD"
  export ASAN_OPTIONS=detect_leaks=0  # the tools' own leaks are not ours
fi
# Below the kernel's ephemeral range (32768-60999 by default), so no
# outgoing connection of a parallel test holds it; a port some other process
# listens on makes the server fail with EADDRINUSE, and the run is retried on
# another port.
# A port nothing listens on now is picked.
pick_port() {
  PORT=$(( 10000 + ($$ * 7 + ${1:-0} * 997) % 22000 ))
  while ss -Htln "sport = :$PORT" | grep -q .; do PORT=$(( PORT + 1 )); done
}
pick_port 0
LOG=$(mktemp -d)
run_once() {
case "$MODE" in
  rping)
    SERVER="rping -s -a 127.0.0.1 -p $PORT -v -C 100"
    CLIENT="rping -c -a 127.0.0.1 -p $PORT -v -C 100"
    EXPECT="ping data: rdma-ping-99"
    ;;
  rping-validate)
    # -V: each side compares the ping it got with the one sent and fails the
    # run on a mismatch ("data mismatch").
    # (The server prints its DISCONNECT event before it ends; the client may
    # exit before its cm thread prints its own.)
    SERVER="rping -s -a 127.0.0.1 -p $PORT -V -S 16384 -C 50"
    CLIENT="rping -c -a 127.0.0.1 -p $PORT -V -S 16384 -C 50"
    EXPECT="server DISCONNECT EVENT"
    ;;
  ucmatose)
    SERVER="ucmatose -b 127.0.0.1 -p $PORT -c 4 -C 100"
    CLIENT="ucmatose -s 127.0.0.1 -p $PORT -c 4 -C 100"
    EXPECT="test complete"
    ;;
  ucmatose-large)
    SERVER="ucmatose -b 127.0.0.1 -p $PORT -c 16 -C 50 -S 65536"
    CLIENT="ucmatose -s 127.0.0.1 -p $PORT -c 16 -C 50 -S 65536"
    EXPECT="data transfers complete"
    ;;
  rdma_xserver)
    # RC mode: rdma_create_ep endpoints; the client SENDs 16 bytes inline on a
    # QP that asked for no inline data (a QP gets at least its SGE list's
    # room, as on rxe and mlx5).
    SERVER="rdma_xserver -p $PORT -c r"
    CLIENT="rdma_xclient -s 127.0.0.1 -p $PORT -c r"
    EXPECT="rdma_xserver: end 0"
    ;;
  cmtime)
    SERVER="cmtime -b 127.0.0.1 -p $PORT -c 100"
    CLIENT="cmtime -s 127.0.0.1 -p $PORT -c 100"
    EXPECT="connect      :"
    ;;
  udaddy|mckey)
    # Not client/server runs: each must fail, the way softrdma documents.
    if [ "$MODE" = udaddy ]; then
      LD_PRELOAD="$PRELOAD" timeout 20 udaddy -b 127.0.0.1 >"$LOG/server" 2>&1; SRC=$?
      LD_PRELOAD="$PRELOAD" timeout 20 udaddy -s 127.0.0.1 >"$LOG/client" 2>&1; CRC=$?
    else
      LD_PRELOAD="$PRELOAD" timeout 20 mckey -m 127.0.0.1 >"$LOG/server" 2>&1; SRC=$?
      LD_PRELOAD="$PRELOAD" timeout 20 mckey -m 127.0.0.1 -s >"$LOG/client" 2>&1; CRC=$?
    fi
    echo "== first (rc $SRC)"; cat "$LOG/server"
    echo "== second (rc $CRC)"; cat "$LOG/client"
    trap 'rm -rf "$LOG"' EXIT
    fail=0
    for rc in $SRC $CRC; do
      # 124: hung into its timeout; >= 128: a signal (a crash).
      if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || { [ "$rc" -ge 128 ] && [ "$rc" -ne 255 ]; }; then
        echo "FAIL: rc $rc, want a clean failure"; fail=1
      fi
    done
    if [ "$MODE" = udaddy ] && ! grep -q "listen request failed: Operation not supported" "$LOG/server"; then
      echo "FAIL: udaddy's server did not fail with EOPNOTSUPP"; fail=1
    fi
    if grep -q -E "runtime error|AddressSanitizer" "$LOG/server" "$LOG/client"; then
      echo "FAIL: sanitizer report"; fail=1
    fi
    exit $fail
    ;;
  rdma_server)
    # rdma_server / rdma_client: synchronous endpoints (rdma_create_ep).
    SERVER="rdma_server -s 127.0.0.1 -p $PORT"
    CLIENT="rdma_client -s 127.0.0.1 -p $PORT"
    EXPECT="rdma_client: end 0"
    ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
LD_PRELOAD="$PRELOAD" timeout 30 $SERVER >"$LOG/server" 2>&1 &
SPID=$!
# cmtime's server serves until it is stopped.
SERVES_FOREVER=0
[ "$MODE" = cmtime ] && SERVES_FOREVER=1
# The client fails at once if nobody listens yet, so wait for the server's
# rdma_cm listener (softrdma listens on the same TCP port) rather than a fixed
# time: a loaded machine (a parallel ctest, sanitizers) can take over a second
# to start the server, and the run then failed although nothing was wrong.
i=0
while ! ss -Htln "sport = :$PORT" | grep -q . && [ $i -lt 200 ]; do
  kill -0 $SPID 2>/dev/null || break
  sleep 0.1; i=$((i + 1))
done
LD_PRELOAD="$PRELOAD" timeout 20 $CLIENT >"$LOG/client" 2>&1
CRC=$?
if [ $SERVES_FOREVER -eq 1 ]; then
  kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; SRC=0
else
  wait $SPID
  SRC=$?
fi
}
for attempt in 1 2 3; do
  run_once
  grep -q "Address already in use" "$LOG/server" || break
  echo "port $PORT is taken; retrying on another"
  pick_port "$attempt"
done
echo "== client (rc $CRC)"; cat "$LOG/client"
echo "== server (rc $SRC)"; cat "$LOG/server"
cat "$LOG/client" "$LOG/server" > "$LOG/out"
trap 'rm -rf "$LOG"' EXIT
[ $CRC -eq 0 ] && [ $SRC -eq 0 ] || exit 1
grep -q "$EXPECT" "$LOG/out" || { echo "missing: $EXPECT"; exit 1; }
if grep -q -E "runtime error|AddressSanitizer|data mismatch|rdma_post_send|failed" "$LOG/out"; then
  echo "FAIL: an error report in the output"; exit 1
fi
case "$MODE" in
  ucmatose-large)
    # Both sides complete every one of the 16 connections.
    [ "$(grep -c "test complete" "$LOG/out")" -eq 2 ] || { echo "FAIL: want 'test complete' from both sides"; exit 1; } ;;
  rdma_xserver)
    grep -q "rdma_xclient: end 0" "$LOG/client" || { echo "FAIL: rdma_xclient did not end 0"; exit 1; } ;;
  cmtime)
    for step in "create id" "resolve addr" "resolve route" "create qp" "connect" "disconnect" "destroy"; do
      grep -q "^$step *:" "$LOG/client" || { echo "FAIL: no '$step' row"; exit 1; }
    done ;;
esac
exit 0
