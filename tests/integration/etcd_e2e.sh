#!/usr/bin/env bash
# etcd_e2e.sh ECHO_SERVER ECHO_CLIENT
#
# Discovery through a real etcd (started here on 127.0.0.1) with the echo
# example as separate processes: three echo_servers --register under the
# prefix "echo" (lease TTL 3 s); echo_client --server=etcd://.../echo reaches
# them; after kill -9 of one, a new client's calls all succeed at once (the
# dead address is skipped, calls it was picked for go elsewhere), and the
# dead server's key leaves etcd when its lease expires (3-6 s later); the
# others, stopped with SIGTERM, take their keys with them.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

ECHO_SERVER="$1"
ECHO_CLIENT="$2"
# scripts/test.sh installs them and sets RDMARPC_REQUIRE_TEST_TOOLS: missing is a failure there.
missing_tool() {
  [[ -n "${RDMARPC_REQUIRE_TEST_TOOLS:-}" ]] && fail "$1"
  skip "$1"
}
command -v etcd >/dev/null || missing_tool "etcd is not installed (scripts/install-deps.sh installs etcd-server)"
command -v etcdctl >/dev/null || missing_tool "etcdctl is not installed (etcd-client)"

ETCD_PID=""
stop_etcd() {
  [[ -n "$ETCD_PID" ]] || return 0
  kill_tree "$ETCD_PID"
  ETCD_PID=""
}
CLEANUP_HOOKS+=('stop_etcd')
ETCD=""
for attempt in 1 2 3 4 5; do
  client_port=$((20000 + RANDOM % 30000))
  peer_port=$((client_port + 1))
  timeout --kill-after=5 300 etcd --name=it --data-dir="$SCRATCH/etcd.$attempt" \
    --listen-client-urls="http://127.0.0.1:$client_port" \
    --advertise-client-urls="http://127.0.0.1:$client_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="it=http://127.0.0.1:$peer_port" \
    --logger=zap --log-level=error --log-outputs=stderr \
    >"$SCRATCH/etcd.out" 2>"$SCRATCH/etcd.err" &
  ETCD_PID=$!
  deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)) && kill -0 "$ETCD_PID" 2>/dev/null; do
    if ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$client_port" --dial-timeout=1s \
      endpoint health >/dev/null 2>&1; then
      ETCD="127.0.0.1:$client_port"
      break 2
    fi
    sleep 0.1
  done
  stop_etcd
done
[[ -n "$ETCD" ]] || fail "etcd did not start"

keys() {
  ETCDCTL_API=3 etcdctl --endpoints="$ETCD" get --prefix echo/ --keys-only | sed '/^$/d' | sort
}

# Three registered servers, each under timeout(1) as start_server does.
PIDS=()
ADDRS=()
stop_servers() {
  local p
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill_tree "$p"; done
}
CLEANUP_HOOKS+=('stop_servers')
for i in 0 1 2; do
  : >"$SCRATCH/server$i.out"
  timeout --foreground --kill-after=15 "$SERVER_LIFETIME" "$ECHO_SERVER" --listen=127.0.0.1:0 \
    --register="etcd://$ETCD/echo" --register_ttl_s=3 \
    >"$SCRATCH/server$i.out" 2>"$SCRATCH/server$i.err" &
  PIDS+=("$!")
  deadline=$((SECONDS + 30))
  addr=""
  while [[ -z "$addr" ]] && ((SECONDS < deadline)); do
    addr="$(sed -n 's/^listening on \(.*\)$/\1/p' "$SCRATCH/server$i.out" | head -n 1)"
    [[ -n "$addr" ]] || sleep 0.05
  done
  [[ -n "$addr" ]] || fail "server $i did not start"
  ADDRS+=("$addr")
done
want="$(printf 'echo/%s\n' "${ADDRS[@]}" | sort)"
[[ "$(keys)" == "$want" ]] || fail "etcd lists '$(keys)', want '$want'"

run_client() {
  run_bounded 120 "$ECHO_CLIENT" --server="etcd://$ETCD/echo" --payload_bytes=64 --count="$1" \
    >"$SCRATCH/client.out" 2>"$SCRATCH/client.err"
}
run_client 300 || fail "client against three registered servers"
[[ "$(last_line "$SCRATCH/client.out")" =~ ^echo:\ ok\ calls=300\  ]] ||
  fail "client said '$(last_line "$SCRATCH/client.out")'"

# kill -9 of server 0: its key stays until the lease expires, yet calls work.
pkill -KILL -P "${PIDS[0]}"
wait "${PIDS[0]}" 2>/dev/null
killed_at=$SECONDS
run_client 300 || fail "client after kill -9 of ${ADDRS[0]}"
[[ "$(last_line "$SCRATCH/client.out")" =~ ^echo:\ ok\ calls=300\  ]] ||
  fail "client after kill -9 said '$(last_line "$SCRATCH/client.out")'"
want="$(printf 'echo/%s\n' "${ADDRS[1]}" "${ADDRS[2]}" | sort)"
while [[ "$(keys)" != "$want" ]] && ((SECONDS - killed_at < 15)); do sleep 0.2; done
[[ "$(keys)" == "$want" ]] || fail "the killed server's key is still there after 15 s: $(keys)"
gone_after=$((SECONDS - killed_at))
((gone_after <= 7)) || fail "the killed server's key left after ${gone_after} s, want <= TTL 3 s + 4"

# SIGTERM: each survivor deregisters before it exits.
for i in 1 2; do
  kill -TERM "${PIDS[$i]}"
  wait "${PIDS[$i]}" || fail "server $i exited with $?"
done
[[ -z "$(keys)" ]] || fail "keys left after SIGTERM: $(keys)"
pass "etcd: 3 registered, kill -9 survived, its key gone after ${gone_after} s, SIGTERM deregisters"
