# interop_lib.sh: helpers of the interop test scripts. Sourced, not run.
#
# Builds on tests/integration/lib.sh (scratch directory, EXIT trap that kills
# the server and runs CLEANUP_HOOKS, fail/pass/skip, stop_server,
# run_bounded, stat_sum).
source "${BASH_SOURCE[0]%/*}/../integration/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

# Every process prints its softrdma counters at exit; check_link reads the
# softrdma-stats-link lines to tell which link the connections took.
export RDMARPC_SOFT_STATS=1

# start_interop_server HOST COMMAND...: runs COMMAND (interop_server, possibly
# behind `ip netns exec NS`) with --host=HOST --port=0 and waits up to 30 s
# for its "listening on HOST:PORT" line. Sets SERVER_PID and SERVER_ADDR.
# Output goes to $SCRATCH/server.out and server.err.
start_interop_server() {
  local host="$1"
  shift
  # As lib.sh's start_server: timeout(1) bounds the server's life even when
  # ctest SIGKILLs this script, and --foreground keeps timeout's SIGCONT away
  # from LeakSanitizer's exit-time check.
  # The file is emptied here, before the fork: see lib.sh's start_server.
  : >"$SCRATCH/server.out"
  timeout --foreground --kill-after=15 "$SERVER_LIFETIME" "$@" --host="$host" --port=0 \
    >"$SCRATCH/server.out" 2>"$SCRATCH/server.err" &
  SERVER_PID=$!
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    SERVER_ADDR="$(sed -n 's/^listening on \(.*\)$/\1/p' "$SCRATCH/server.out" | head -n 1)"
    [[ -n "$SERVER_ADDR" ]] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || fail "interop_server exited before listening"
    sleep 0.05
  done
  fail "interop_server did not print 'listening on' within 30 s"
}

# run_case CASE COMMAND...: runs COMMAND (interop_client, possibly behind a
# prefix) with --server=$SERVER_ADDR --test_case=CASE, bounded to 60 s, and
# fails unless it exits 0 with the verdict "interop: PASS CASE". Output goes
# to $SCRATCH/client-CASE.out and .err.
run_case() {
  local case="$1"
  shift
  local out="$SCRATCH/client-$case.out" err="$SCRATCH/client-$case.err"
  local status=0
  local start=$SECONDS
  run_bounded 60 "$@" --server="$SERVER_ADDR" --test_case="$case" >"$out" 2>"$err" ||
    status=$?
  local verdict
  verdict="$(tail -n 1 "$out")"
  echo "$case: exit $status after $((SECONDS - start)) s: $verdict"
  ((status == 0)) || fail "$case: interop_client exited with $status, want 0"
  [[ "$verdict" == "interop: PASS $case" ]] ||
    fail "$case: last line '$verdict', want 'interop: PASS $case'"
}

# link_sum and check_link come from tests/integration/lib.sh.
