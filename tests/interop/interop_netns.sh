#!/usr/bin/env bash
# interop_netns.sh INTEROP_SERVER INTEROP_CLIENT CASE...
#
# gRPC's interop cases across a real (virtual) link: interop_server in one
# network namespace, interop_client in another, joined by a veth pair with
# 10.200.N.1/30 and 10.200.N.2/30, as tests/integration/netns_e2e.sh does.
# The namespaces, the pair and the addresses exist only inside namespaces
# this script creates, so no traffic reaches another host or this machine's
# interfaces; the EXIT trap deletes them. Every CASE runs against the one
# server and must pass; the connections must all be on TCP (processes in two
# namespaces never share softrdma's same-host link). Skips (exit 77) where
# namespaces cannot be made.
source "${BASH_SOURCE[0]%/*}/interop_lib.sh" || { echo "FAIL: cannot load interop_lib.sh"; exit 1; }

INTEROP_SERVER="$1"
INTEROP_CLIENT="$2"
shift 2
CASES=("$@")
((${#CASES[@]} > 0)) || { echo "usage: $0 INTEROP_SERVER INTEROP_CLIENT CASE..." >&2; exit 2; }

[[ "$(id -u)" == 0 ]] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"

NS_SERVER="rdmarpc-interop-$$-a"
NS_CLIENT="rdmarpc-interop-$$-b"
SUBNET="10.200.$(($$ % 256))"
SERVER_IP="$SUBNET.1"
CLIENT_IP="$SUBNET.2"

# Namespaces of runs that ctest SIGKILLed at their TIMEOUT (named after a pid
# that no longer exists) could not be deleted by their trap: delete them.
for stale in $(ip netns list 2>/dev/null | grep -o '^rdmarpc-interop-[0-9]*-[ab]'); do
  pid="${stale#rdmarpc-interop-}"
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

# A namespace that can be made but not entered (no mount rights for ip's
# private /sys) is an environment limit, not a failure.
in_server true 2>"$SCRATCH/ip.err" || skip "cannot enter a network namespace: $(cat "$SCRATCH/ip.err")"

# The pair is made inside the server's namespace with its peer placed
# straight into the client's: neither end appears in the caller's namespace.
in_server ip link add veth-srv type veth peer name veth-cli netns "$NS_CLIENT" ||
  skip "cannot create a veth pair between namespaces"
in_server ip addr add "$SERVER_IP/30" dev veth-srv || fail "address $SERVER_IP"
in_client ip addr add "$CLIENT_IP/30" dev veth-cli || fail "address $CLIENT_IP"
for up in "in_server ip link set lo up" "in_server ip link set veth-srv up" \
          "in_client ip link set lo up" "in_client ip link set veth-cli up"; do
  $up || fail "$up"
done

# The link must carry traffic before rdmarpc is blamed for anything.
if command -v ping >/dev/null; then
  deadline=$((SECONDS + 10))
  until in_client ping -c 1 -W 1 "$SERVER_IP" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$CLIENT_IP cannot reach $SERVER_IP over the veth pair"
    sleep 0.2
  done
fi

# `ip netns exec` execs the server in place, so SERVER_PID is the server's.
start_interop_server "$SERVER_IP" ip netns exec "$NS_SERVER" "$INTEROP_SERVER"
[[ "$SERVER_ADDR" == "$SERVER_IP:"* ]] || fail "server listening on '$SERVER_ADDR', want $SERVER_IP:PORT"

for case in "${CASES[@]}"; do
  run_case "$case" ip netns exec "$NS_CLIENT" "$INTEROP_CLIENT"
done
stop_server
check_link tcp "$SCRATCH"/server.err "$SCRATCH"/client-*.err

pass "${CASES[*]} across two network namespaces ($CLIENT_IP -> $SERVER_ADDR)"
