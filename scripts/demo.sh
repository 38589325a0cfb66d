#!/usr/bin/env bash
# Installs missing packages, builds Release into build/, starts echo_server on
# 127.0.0.1 and runs echo_client against it for 32 B, 4 KiB, 64 KiB, 1 MiB and
# 16 MiB payloads, then 1 MiB and 16 MiB as rdmarpc::Buffer attachments. Exits
# 0 only if every call returned the right bytes.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DRDMARPC_BUILD_TESTS=OFF
cmake --build build -j "$(nproc)" --target echo_server echo_client

export RDMARPC_PROVIDER=${RDMARPC_PROVIDER:-auto}
# Below the kernel's ephemeral range (32768+), so no outgoing socket holds it.
port=${RDMARPC_DEMO_PORT:-$((20000 + RANDOM % 12000))}
log=$(mktemp /tmp/rdmarpc-demo-server.XXXXXX)

build/examples/echo/echo_server --listen="127.0.0.1:${port}" --workers=2 >"$log" 2>&1 &
server_pid=$!
cleanup() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

# Wait (bounded) for the server to listen.
for _ in $(seq 1 100); do
  grep -q "listening on" "$log" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log"; echo "demo: echo_server exited early" >&2; exit 1; }
  sleep 0.1
done
grep -q "listening on" "$log" || { cat "$log"; echo "demo: echo_server did not start" >&2; exit 1; }

status=0
# The last runs carry the payload as an rdmarpc::Buffer attachment (no
# serialisation or copy by rdmarpc; each side's NIC reads the other's).
#            payload   calls  in flight  attachment
for run in "32 1000 4 false" "4096 1000 4 false" "65536 200 4 false" "1048576 50 2 false" \
           "16777216 10 2 false" "1048576 50 2 true" "16777216 10 2 true"; do
  read -r bytes count conc attach <<<"$run"
  echo "--- echo ${bytes} B x ${count} (concurrency ${conc}$([[ $attach == true ]] && echo ", as an attachment"))"
  if ! build/examples/echo/echo_client --server="127.0.0.1:${port}" \
      --payload_bytes="$bytes" --count="$count" --concurrency="$conc" --attachment="$attach"; then
    status=1
  fi
done

if ((status == 0)); then
  echo "demo: all payload sizes echoed correctly"
else
  echo "demo: FAILED" >&2
fi
exit "$status"
