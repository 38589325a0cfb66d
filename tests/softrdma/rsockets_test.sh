#!/bin/sh
# rsockets_test.sh: librdmacm's rsockets (the socket API over RC QPs,
# rsocket.c inside librdmacm.so) in unmodified Debian programs on softrdma,
# both sides under libsoftrdma_preload.so, over 127.0.0.1.
#
#   rstream-blocking     rstream -T v -T b -S 4096 -C 2000 (blocking calls)
#   rstream-nonblocking  rstream -T v -T n -S 1000000 -C 50 (non-blocking calls)
#   rcopy                rcopy of a 4 MiB + 7 B random file
#
# rstream's -T v checks every byte it receives and fails the run otherwise;
# the test also wants both exit codes 0 and the client's result row
# ("custom <size> <count> 1 ..."). rcopy's copy must equal the source (cmp).
# Not run: rstream -T a (rpoll), whose do_poll fails a run on POLLHUP even
# with POLLIN set: when the server's final data and its disconnect message
# both arrived before the client polls, which a slow (ASan) client hits.
#
# Usage: rsockets_test.sh <preload.so> <rstream-blocking|rstream-nonblocking|rcopy>
set -u
PRELOAD=$1
MODE=$2
for t in rstream rcopy; do command -v $t >/dev/null 2>&1 || { echo "$t not installed (rdmacm-utils); skipping"; exit 77; }; done
command -v ss >/dev/null 2>&1 || { echo "ss (iproute2) not installed; skipping"; exit 77; }
if ldd "$PRELOAD" | grep -q libasan; then
  PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so):$PRELOAD"
  export ASAN_OPTIONS=detect_leaks=0  # the tools' own leaks are not ours
fi
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
PORT=$(( 10000 + ($$ * 29) % 22000 ))
while ss -Htln "sport = :$PORT" | grep -q .; do PORT=$(( PORT + 1 )); done

wait_listen() {
  i=0
  while ! ss -Htln "sport = :$PORT" | grep -q . && [ $i -lt 100 ]; do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1; i=$((i + 1))
  done
}

fail=0
case "$MODE" in
  rstream-blocking|rstream-nonblocking)
    if [ "$MODE" = rstream-blocking ]; then
      OPTS="-T v -T b -S 4096 -C 2000"; ROW="custom +4k +2k +1 "
    else
      OPTS="-T v -T n -S 1000000 -C 50"; ROW="custom +976k +50 +1 "
    fi
    LD_PRELOAD="$PRELOAD" timeout 50 rstream -p "$PORT" -b 127.0.0.1 $OPTS >"$LOG/server" 2>&1 &
    SPID=$!
    wait_listen $SPID
    LD_PRELOAD="$PRELOAD" timeout 45 rstream -p "$PORT" -s 127.0.0.1 $OPTS >"$LOG/client" 2>&1
    CRC=$?
    wait $SPID
    SRC=$?
    echo "== client (rc $CRC)"; cat "$LOG/client"
    echo "== server (rc $SRC)"; cat "$LOG/server"
    [ $CRC -eq 0 ] && [ $SRC -eq 0 ] || { echo "FAIL: exit codes client $CRC server $SRC"; fail=1; }
    grep -q -E "^$ROW" "$LOG/client" || { echo "FAIL: no result row /$ROW/ from the client"; fail=1; }
    if grep -q -i "verif" "$LOG/client" "$LOG/server"; then
      echo "FAIL: data verification failed"; fail=1
    fi ;;
  rcopy)
    head -c 4194311 /dev/urandom >"$LOG/src"
    LD_PRELOAD="$PRELOAD" timeout 50 rcopy -p "$PORT" >"$LOG/server" 2>&1 &
    SPID=$!
    wait_listen $SPID
    LD_PRELOAD="$PRELOAD" timeout 45 rcopy "$LOG/src" "127.0.0.1:$LOG/dst" -p "$PORT" >"$LOG/client" 2>&1
    CRC=$?
    # The server serves one copy after another: wait for it to finish this one.
    i=0
    while ! grep -q "closing...done" "$LOG/server" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
    echo "== client (rc $CRC)"; cat "$LOG/client"
    echo "== server"; cat "$LOG/server"
    [ $CRC -eq 0 ] || { echo "FAIL: client rc $CRC"; fail=1; }
    grep -q "4194311 bytes" "$LOG/client" || { echo "FAIL: client did not report 4194311 bytes"; fail=1; }
    cmp "$LOG/src" "$LOG/dst" || { echo "FAIL: the copy differs from the source"; fail=1; } ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
for side in client server; do
  if grep -q -E "runtime error|AddressSanitizer|Segmentation" "$LOG/$side"; then
    echo "FAIL: sanitizer report or crash in the $side"; fail=1
  fi
done
[ $fail -eq 0 ] || exit 1
echo "PASS: $MODE"
exit 0
