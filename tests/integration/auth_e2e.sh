#!/usr/bin/env bash
# auth_e2e.sh SECURE_ECHO_SERVER SECURE_ECHO_CLIENT
#
# The shared-secret example (examples/auth) as two processes over softrdma on
# 127.0.0.1, with a keyring of two clients:
#   alice's key, both levels on       "10 of 10 calls OK, authenticated as alice", exit 0
#   bob's key                         "... authenticated as bob", exit 0
#   alice's id with a wrong secret    UNAUTHENTICATED at the connection, exit 1
#   an id not in the keyring          UNAUTHENTICATED at the connection, exit 1
#   no connection token               UNAUTHENTICATED at the connection, exit 1
#   a good connection, unsigned calls UNAUTHENTICATED "no RDMARPC-HMAC-SHA256
#                                     authorization metadata", exit 1
#   alice's connection, bob's call key PERMISSION_DENIED, exit 1
# and the server logs why it refused (the wrong MAC), and exits 0 on SIGTERM.
# No secret appears in either process's output.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

SERVER="$1"
CLIENT="$2"

# Fixed secrets: this test must not depend on a random source.
ALICE=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
BOB=f0e1d2c3b4a5968778695a4b3c2d1e0ff0e1d2c3b4a5968778695a4b3c2d1e0f
WRONG=ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff
printf '# KEY_ID NAME SECRET_HEX\n7 alice %s\n8 bob %s\n' "$ALICE" "$BOB" >"$SCRATCH/keys.txt"
echo "$ALICE" >"$SCRATCH/alice.key"
echo "$BOB" >"$SCRATCH/bob.key"
echo "$WRONG" >"$SCRATCH/wrong.key"

start_server server "$SERVER" --keyring="$SCRATCH/keys.txt"

# client NAME WANT_STATUS WANT_LINE ARGS...: runs the client; its stdout's
# last line must be WANT_LINE and its exit status WANT_STATUS.
client() {
  local name="$1" want_status="$2" want_line="$3"
  shift 3
  local status=0
  run_bounded 60 "$CLIENT" --target="$SERVER_ADDR" "$@" \
    >"$SCRATCH/$name.out" 2>"$SCRATCH/$name.err" || status=$?
  local line
  line="$(last_line "$SCRATCH/$name.out")"
  [[ "$line" == $want_line ]] || fail "$name: last line '$line', want '$want_line'"
  ((status == want_status)) || fail "$name: exit status $status, want $want_status"
}

readonly REFUSED="call 1 of 10 failed: UNAUTHENTICATED: server $SERVER_ADDR refused this client's connection token*"
client alice 0 "10 of 10 calls OK, authenticated as alice" --key_id=7 --secret_file="$SCRATCH/alice.key"
client bob 0 "3 of 3 calls OK, authenticated as bob" --key_id=8 --secret_file="$SCRATCH/bob.key" --calls=3
client wrong_secret 1 "$REFUSED" --key_id=7 --secret_file="$SCRATCH/wrong.key"
client unknown_id 1 "$REFUSED" --key_id=9 --secret_file="$SCRATCH/alice.key"
client no_token 1 "$REFUSED" --key_id=7 --secret_file="$SCRATCH/alice.key" --connection_auth=false
client unsigned 1 "call 1 of 10 failed: UNAUTHENTICATED: no RDMARPC-HMAC-SHA256 authorization metadata" \
  --key_id=7 --secret_file="$SCRATCH/alice.key" --call_auth=false
client lent_key 1 "call 1 of 10 failed: PERMISSION_DENIED: call signed with key 8 on a connection of key 7" \
  --key_id=7 --secret_file="$SCRATCH/alice.key" --call_key_id=8 --call_secret_file="$SCRATCH/bob.key"

grep -q "connection token for key 7 has a wrong MAC" "$SCRATCH/server.err" ||
  fail "the server did not log the wrong MAC: $(tail -n 5 "$SCRATCH/server.err")"
stop_server TERM
for secret in "$ALICE" "$BOB"; do
  if grep -l "$secret" "$SCRATCH"/*.out "$SCRATCH"/*.err; then
    fail "a secret appears in the output above"
  fi
done
pass "shared-secret authentication: 2 clients in, 4 refused with UNAUTHENTICATED, 1 PERMISSION_DENIED"
