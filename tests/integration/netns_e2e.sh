#!/usr/bin/env bash
# netns_e2e.sh ECHO_SERVER ECHO_CLIENT
#
# The echo example across a real (virtual) link: the server in one network
# namespace, the client in another, joined by a veth pair with 10.200.N.1/30
# and 10.200.N.2/30. Both namespaces, the pair and the addresses are created
# by this script and exist only inside its namespaces, so no traffic can
# reach any other host or the machine's own interfaces; a trap deletes them.
# After the server stops, the client must report UNAVAILABLE within 6 s.
# Skips (exit 77) where namespaces cannot be made.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

ECHO_SERVER="$1"
ECHO_CLIENT="$2"

[[ "$(id -u)" == 0 ]] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"

NS_SERVER="rdmarpc-test-$$-a"
NS_CLIENT="rdmarpc-test-$$-b"
# The third octet varies with the pid only to make logs easier to tell apart;
# the namespaces are private, so parallel runs cannot clash anyway.
SUBNET="10.200.$(($$ % 256))"
SERVER_IP="$SUBNET.1"
CLIENT_IP="$SUBNET.2"

# A run that ctest SIGKILLed at its TIMEOUT could not run its trap; delete
# the namespaces of such runs (named after a pid that no longer exists).
for stale in $(ip netns list 2>/dev/null | grep -o '^rdmarpc-test-[0-9]*-[ab]'); do
  pid="${stale#rdmarpc-test-}"
  pid="${pid%-*}"
  kill -0 "$pid" 2>/dev/null || ip netns del "$stale" 2>/dev/null || true
done

if ! ip netns add "$NS_SERVER" 2>"$SCRATCH/ip.err"; then
  skip "cannot create a network namespace: $(cat "$SCRATCH/ip.err")"
fi
CLEANUP_HOOKS+=("ip netns del '$NS_SERVER' 2>/dev/null")
ip netns add "$NS_CLIENT" || fail "ip netns add $NS_CLIENT"
CLEANUP_HOOKS+=("ip netns del '$NS_CLIENT' 2>/dev/null")

in_server() { ip netns exec "$NS_SERVER" "$@"; }
in_client() { ip netns exec "$NS_CLIENT" "$@"; }

# Some containers let a namespace be made but not entered (no mount rights
# for ip's private /sys); that is an environment limit, not a failure.
in_server true 2>"$SCRATCH/ip.err" || skip "cannot enter a network namespace: $(cat "$SCRATCH/ip.err")"

# Create the pair inside the server's namespace with its peer placed straight
# into the client's, so neither end ever appears in the caller's namespace.
in_server ip link add veth-srv type veth peer name veth-cli netns "$NS_CLIENT" ||
  skip "cannot create a veth pair between namespaces"
in_server ip addr add "$SERVER_IP/30" dev veth-srv || fail "address $SERVER_IP"
in_client ip addr add "$CLIENT_IP/30" dev veth-cli || fail "address $CLIENT_IP"
for up in "in_server ip link set lo up" "in_server ip link set veth-srv up" \
          "in_client ip link set lo up" "in_client ip link set veth-cli up"; do
  $up || fail "$up"
done

# The link must carry traffic before we blame rdmarpc for anything.
if command -v ping >/dev/null; then
  deadline=$((SECONDS + 10))
  until in_client ping -c 1 -W 1 "$SERVER_IP" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$CLIENT_IP cannot reach $SERVER_IP over the veth pair"
    sleep 0.2
  done
fi

# `ip netns exec` execs the server in place, so SERVER_PID is the server's.
start_server server ip netns exec "$NS_SERVER" "$ECHO_SERVER" --listen="$SERVER_IP:0"
[[ "$SERVER_ADDR" == "$SERVER_IP:"* ]] || fail "server listening on '$SERVER_ADDR', want $SERVER_IP:PORT"

for run in "32 200 1" "65536 20 2" "4194304 4 1"; do
  read -r bytes count concurrency <<<"$run"
  STATUS=0
  run_bounded 120 ip netns exec "$NS_CLIENT" "$ECHO_CLIENT" --server="$SERVER_ADDR" \
    --payload_bytes="$bytes" --count="$count" --concurrency="$concurrency" \
    >"$SCRATCH/client.out" 2>"$SCRATCH/client.err" || STATUS=$?
  line="$(last_line "$SCRATCH/client.out")"
  echo "client in $NS_CLIENT, $count x $bytes B: exit $STATUS: $line"
  [[ "$STATUS" == 0 ]] || fail "client exited with $STATUS, want 0"
  [[ "$line" =~ ^echo:\ ok\ calls=$count\ payload_bytes=$bytes\ p50_us=[0-9]+\ p99_us=[0-9]+$ ]] ||
    fail "last line '$line'"
done

stop_server

# The same address with the server gone: UNAVAILABLE within 6 s across the link.
start=$(date +%s%N)
STATUS=0
run_bounded 30 ip netns exec "$NS_CLIENT" "$ECHO_CLIENT" --server="$SERVER_ADDR" \
  --payload_bytes=32 --count=1 >"$SCRATCH/client.out" 2>"$SCRATCH/client.err" || STATUS=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
line="$(last_line "$SCRATCH/client.out")"
echo "client in $NS_CLIENT, server stopped: exit $STATUS after $elapsed_ms ms: $line"
[[ "$STATUS" == 1 ]] || fail "client exited with $STATUS, want 1"
[[ "$line" == "echo: UNAVAILABLE "* ]] || fail "last line '$line', want 'echo: UNAVAILABLE ...'"
((elapsed_ms < 6000)) || fail "client took $elapsed_ms ms to give up, want < 6000"

pass "echo across two network namespaces ($CLIENT_IP -> $SERVER_ADDR)"
