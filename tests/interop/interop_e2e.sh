#!/usr/bin/env bash
# interop_e2e.sh LINK CASE INTEROP_SERVER INTEROP_CLIENT
#
# One of gRPC's interop test cases over rdmarpc on 127.0.0.1: starts
# interop_server on a free port, runs interop_client --test_case=CASE against
# it, and passes when the client exits 0 with "interop: PASS CASE" and the
# server then stops cleanly (exit 0 on SIGTERM). LINK is softrdma's link
# between the two processes:
#   shm  the same-host link (shared-memory rings; SOFTRDMA_SHM=1)
#   tcp  TCP (SOFTRDMA_SHM=0)
# Both processes' counters must show every connection on that link.
source "${BASH_SOURCE[0]%/*}/interop_lib.sh" || { echo "FAIL: cannot load interop_lib.sh"; exit 1; }

LINK="$1"
CASE="$2"
INTEROP_SERVER="$3"
INTEROP_CLIENT="$4"

case "$LINK" in
  shm) export SOFTRDMA_SHM=1 ;;
  tcp) export SOFTRDMA_SHM=0 ;;
  *) echo "usage: $0 shm|tcp CASE INTEROP_SERVER INTEROP_CLIENT" >&2; exit 2 ;;
esac

start_interop_server 127.0.0.1 "$INTEROP_SERVER"
run_case "$CASE" "$INTEROP_CLIENT"
stop_server
check_link "$LINK" "$SCRATCH/server.err" "$SCRATCH/client-$CASE.err"
pass "$CASE on the $LINK link"
