#!/usr/bin/env bash
# Installs the Debian 12 packages rdmarpc needs, if any is missing.
# Runs as root, or through sudo when not root. Only Debian's archive is used.
#   install-deps.sh          what building and testing rdmarpc needs
#   install-deps.sh --bench  that, plus the benchmark-only packages bench/run.sh
#                            uses: the gRPC peer (libgrpc++-dev,
#                            protobuf-compiler-grpc) and gnuplot-nox for plots
set -euo pipefail

bench=0
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    *) echo "install-deps: unknown argument '$arg' (expected --bench)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake pkg-config git
  libibverbs-dev librdmacm-dev rdma-core ibverbs-utils rdmacm-utils perftest
  libprotobuf-dev libprotoc-dev protobuf-compiler
  libabsl-dev libgflags-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libssl-dev openssl
  libcpp-httplib-dev prometheus libc-ares-dev dnsmasq-base etcd-server etcd-client
  clang libfuzzer-14-dev
  iproute2 procps
)
if ((bench)); then
  packages+=(libgrpc++-dev protobuf-compiler-grpc gnuplot-nox)
fi

missing=()
for p in "${packages[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
