#!/bin/sh
# Regenerates the golden files in tests/compiler/golden/ from the current
# protoc-gen-rdmarpc. Usage: tests/compiler/update_golden.sh [build-dir]
# (default: build). Review the diff (git diff tests/compiler/golden) and
# commit it with the generator change.
set -e
build_dir="${1:-build}"
exec cmake --build "$build_dir" --target rdmarpc_update_golden
