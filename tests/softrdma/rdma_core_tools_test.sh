#!/bin/sh
# rdma_core_tools_test.sh: unmodified rdma-core programs (rping, ucmatose,
# rdma_server/rdma_client) run on softrdma through libsoftrdma_preload.so,
# server and client in two processes over 127.0.0.1.
# Usage: rdma_core_tools_test.sh <preload.so> <rping|ucmatose|rdma_server>
set -u
PRELOAD=$1
TOOL=$2
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
case "$TOOL" in
  rping)
    SERVER="rping -s -a 127.0.0.1 -p $PORT -v -C 100"
    CLIENT="rping -c -a 127.0.0.1 -p $PORT -v -C 100"
    EXPECT="ping data: rdma-ping-99"
    ;;
  ucmatose)
    SERVER="ucmatose -b 127.0.0.1 -p $PORT -c 4 -C 100"
    CLIENT="ucmatose -s 127.0.0.1 -p $PORT -c 4 -C 100"
    EXPECT="test complete"
    ;;
  rdma_server)
    # rdma_server / rdma_client: synchronous endpoints (rdma_create_ep).
    SERVER="rdma_server -s 127.0.0.1 -p $PORT"
    CLIENT="rdma_client -s 127.0.0.1 -p $PORT"
    EXPECT="rdma_client: end 0"
    ;;
  *) echo "unknown tool $TOOL"; exit 2 ;;
esac
LD_PRELOAD="$PRELOAD" timeout 30 $SERVER >"$LOG/server" 2>&1 &
SPID=$!
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
wait $SPID
SRC=$?
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
exit 0
