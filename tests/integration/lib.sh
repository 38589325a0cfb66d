# lib.sh: helpers for the multi-process integration tests. Sourced, not run.
#
# Every test gets a private scratch directory and an EXIT trap that stops
# whatever server it started, so a failing or interrupted test never leaves a
# process behind. All waits are bounded.

set -u

# Where ctest's SKIP_RETURN_CODE expects a skipped test to exit.
readonly SKIP=77

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/rdmarpc-it.XXXXXX")"
SERVER_PID=""
SERVER_ADDR=""
# Longest a server may live, in seconds (longer than any test's TIMEOUT).
SERVER_LIFETIME="${SERVER_LIFETIME:-600}"
CLEANUP_HOOKS=()

# The software device is the only one on CI machines; say so explicitly so a
# host with a real NIC still runs the counters these tests check.
export RDMARPC_PROVIDER="${RDMARPC_PROVIDER:-soft}"

# kill_tree PID: SIGKILL to PID's children, then to PID, and reap it. Every
# process a test starts runs under timeout(1), and SIGKILL reaches only the
# process it is sent to: the program timeout(1) runs would be left behind,
# orphaned.
kill_tree() {
  pkill -KILL -P "$1" 2>/dev/null
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

kill_server_tree() { kill_tree "$SERVER_PID"; }

_cleanup() {
  local status=$?
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill_server_tree
  fi
  local hook
  for hook in "${CLEANUP_HOOKS[@]+"${CLEANUP_HOOKS[@]}"}"; do
    eval "$hook" || true
  done
  rm -rf "$SCRATCH"
  exit "$status"
}
trap _cleanup EXIT
trap 'exit 130' INT TERM

# Prints the files named, framed, so a failure shows what each process said.
show() {
  local f
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    echo "----- $(basename "$f") (last 40 lines) -----"
    tail -n 40 "$f"
  done
}

fail() {
  echo "FAIL: $*"
  show "$SCRATCH"/*.out "$SCRATCH"/*.err
  exit 1
}

pass() {
  echo "PASS: $*"
  exit 0
}

skip() {
  echo "SKIP: $*"
  exit "$SKIP"
}

# start_server NAME COMMAND... (the server binary, possibly behind a prefix
# such as `ip netns exec NS`)
# Runs COMMAND with --listen=127.0.0.1:0 appended (unless it has --listen) and waits
# up to 30 s for its "listening on HOST:PORT" line. Sets SERVER_PID and
# SERVER_ADDR (HOST:PORT). Output goes to $SCRATCH/NAME.out and NAME.err.
start_server() {
  local name="$1"
  shift
  local listen="--listen=127.0.0.1:0"
  local arg
  for arg in "$@"; do
    [[ "$arg" == --listen=* ]] && listen=""
  done
  # timeout(1) forwards our SIGTERM/SIGINT to the server and exits with its
  # status; it also ends a server orphaned when ctest SIGKILLs this script
  # at its TIMEOUT, so no test can leave a server running for long.
  # --foreground: forward our signal to the server only. Without it timeout
  # also signals the whole process group and then sends SIGCONT, and a
  # SIGCONT that lands while LeakSanitizer's exit-time check is stopping the
  # threads (ptrace, SIGSTOP) discards the stop: the check then waits forever
  # (seen as a server that never exits after SIGTERM, about 1 in 280 stops
  # under load).
  # Empty the file here, not in the background job's redirection: that one
  # runs after fork, and a poll before it would read the last server's
  # address.
  : >"$SCRATCH/$name.out"
  timeout --foreground --kill-after=15 "$SERVER_LIFETIME" "$@" ${listen:+"$listen"} \
    >"$SCRATCH/$name.out" 2>"$SCRATCH/$name.err" &
  SERVER_PID=$!
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    SERVER_ADDR="$(sed -n 's/^listening on \(.*\)$/\1/p' "$SCRATCH/$name.out" | head -n 1)"
    [[ -n "$SERVER_ADDR" ]] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || fail "$name exited before listening"
    sleep 0.05
  done
  fail "$name did not print 'listening on' within 30 s"
}

# stop_server [SIGNAL]: SIGNAL (default TERM), then up to 20 s for a clean
# exit (its exit status must be 0: the server shuts down, waits, and returns
# from main).
stop_server() {
  local signal="${1:-TERM}"
  [[ -n "$SERVER_PID" ]] || return 0
  kill -"$signal" "$SERVER_PID" 2>/dev/null
  local deadline=$((SECONDS + 20))
  while kill -0 "$SERVER_PID" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.05
  done
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill_server_tree
    SERVER_PID=""
    fail "server did not exit within 20 s of SIG$signal"
  fi
  local status=0
  wait "$SERVER_PID" || status=$?
  SERVER_PID=""
  ((status == 0)) || fail "server exited with status $status after SIG$signal"
}

# run_bounded SECONDS COMMAND...: runs COMMAND, killing it after SECONDS.
# Returns COMMAND's exit status (124 on timeout, as timeout(1) does).
run_bounded() {
  local limit="$1"
  shift
  timeout --kill-after=5 "$limit" "$@"
}

# stat_sum FIELD FILE...: sum of FIELD=N over every "softrdma-stats:" line in
# the files. Prints nothing (and returns 1) when no line has the field.
stat_sum() {
  local field="$1"
  shift
  cat "$@" 2>/dev/null | grep '^softrdma-stats:' |
    grep -o "\(^\| \)$field=[0-9]*" | sed 's/.*=//' |
    awk 'BEGIN { n = 0; s = 0 } { s += $1; n++ } END { if (n == 0) exit 1; print s }'
}

# stat_max FIELD FILE...: largest FIELD=N over the "softrdma-stats:" lines.
stat_max() {
  local field="$1"
  shift
  cat "$@" 2>/dev/null | grep '^softrdma-stats:' |
    grep -o "\(^\| \)$field=[0-9]*" | sed 's/.*=//' |
    awk 'BEGIN { n = 0; m = 0 } { if ($1 > m) m = $1; n++ } END { if (n == 0) exit 1; print m }'
}

# last_line FILE: the last line of FILE.
last_line() { tail -n 1 "$1"; }

# use_link shm|tcp: makes every process started afterwards connect over
# softrdma's same-host link (shared-memory rings, SOFTRDMA_SHM=1) or over TCP
# (SOFTRDMA_SHM=0), and print its counters at exit for check_link.
use_link() {
  case "$1" in
    shm) export SOFTRDMA_SHM=1 ;;
    tcp) export SOFTRDMA_SHM=0 ;;
    *) fail "unknown link '$1', want shm or tcp" ;;
  esac
  export RDMARPC_SOFT_STATS=1
}

# link_sum FIELD FILE...: sum of FIELD=N over the softrdma-stats-link lines.
link_sum() {
  local field="$1"
  shift
  cat "$@" 2>/dev/null | grep '^softrdma-stats-link:' |
    grep -o "\(^\| \)$field=[0-9]*" | sed 's/.*=//' |
    awk 'BEGIN { n = 0; s = 0 } { s += $1; n++ } END { if (n == 0) exit 1; print s }'
}

# check_link shm|tcp FILE...: the QPs the processes connected (their
# softrdma-stats-link lines, printed at exit) all took the named link, and at
# least one did.
check_link() {
  local link="$1"
  shift
  local on_shm on_tcp
  on_shm="$(link_sum qps_on_shm "$@")" || fail "no softrdma-stats-link line in $*"
  on_tcp="$(link_sum qps_on_tcp "$@")" || fail "no qps_on_tcp counter in $*"
  echo "link: qps_on_shm=$on_shm qps_on_tcp=$on_tcp"
  case "$link" in
    shm) ((on_tcp == 0)) || fail "want every QP on the shared-memory link, $on_tcp on TCP"
         ((on_shm > 0)) || fail "no QP on the shared-memory link" ;;
    tcp) ((on_shm == 0)) || fail "want every QP on TCP, $on_shm on the shared-memory link"
         ((on_tcp > 0)) || fail "no QP on TCP" ;;
    *) fail "unknown link '$link'" ;;
  esac
}
