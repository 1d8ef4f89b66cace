#!/usr/bin/env bash
# Installs what torchspeed needs to build, test and run on a fresh machine. Idempotent: a second
# run installs nothing. Debian 12: everything from Debian's packages (libtorch-dev 1.13).
# Ubuntu 22.04: build tools from apt; libtorch from an official 2.x CPU build that LIBTORCH_HOME
# points to (see docker/README.md). Python is only used to make test fixtures.
set -euo pipefail

need_go="1.26"
# The running system's file, not one shellcheck can follow from this repository.
# shellcheck source=/dev/null
. /etc/os-release
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

pkgs=(cmake make g++ pkg-config ca-certificates python3-numpy python3-pil)
# make test-example (examples/serve/test.sh) reads the CLI's and the service's JSON with them.
pkgs+=(jq curl)
# make lint checks C++ (clang-tidy), Python (flake8) and shell scripts (shellcheck) with them.
pkgs+=(clang-tidy python3-flake8 shellcheck)
# make check-isa runs the CLI on an emulated CPU without AVX-512 (QEMU user mode).
pkgs+=(qemu-user)
# The hostile-input tests read a command's own peak RSS with GNU time (see cliRSS).
pkgs+=(time)
# make proto regenerates the committed Go code of pkg/export/tritonpb and pkg/serve/inferencepb.
pkgs+=(protobuf-compiler)
# Allocators that `torchspeed launch --allocator` preloads (Debian 13 renamed tcmalloc's package).
pkgs+=(libjemalloc2)
if [ "${ID}:${VERSION_ID:-}" = "debian:13" ]; then pkgs+=(libgoogle-perftools4t64); else pkgs+=(libgoogle-perftools4); fi
case "${ID}:${VERSION_ID:-}" in
  debian:12*|debian:13*)
    pkgs+=(libtorch-dev python3-torch python3-torchvision python3-sklearn python3-scipy)
    # The fused quantized conv + add (csrc/kernels/fastqconv.cpp) builds against the oneDNN 2 and ideep
    # headers that Debian 12's libtorch 1.13 was built with; CMake skips it where they are absent.
    if [ "${ID}:${VERSION_ID:-}" = "debian:12" ]; then pkgs+=(libdnnl-dev libideep-dev libcpuinfo-dev); fi
    ;;
  ubuntu:22.04)
    if [ -z "${LIBTORCH_HOME:-}" ]; then
      echo "setup: on Ubuntu 22.04 set LIBTORCH_HOME to an unpacked official libtorch 2.x CPU build" >&2
      exit 2
    fi
    pkgs+=(python3-sklearn python3-scipy)
    ;;
  *)
    echo "setup: ${PRETTY_NAME:-this system} is not a supported platform (Debian 12, Ubuntu 22.04); trying Debian package names" >&2
    pkgs+=(libtorch-dev python3-torch python3-torchvision python3-sklearn python3-scipy)
    ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Go: the module proxy also serves toolchains, so any Go >= 1.21 can fetch the one go.mod names.
export PATH="/usr/local/go/bin:$PATH"
if ! command -v go >/dev/null 2>&1; then
  echo "setup: installing a bootstrap Go from Debian packages" >&2
  $SUDO apt-get update -q
  if apt-cache show golang-1.23-go >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends golang-1.23-go
    $SUDO ln -sf /usr/lib/go-1.23/bin/go /usr/local/bin/go
  else
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends golang-go
  fi
fi
have=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need_go" "$have" | sort -V | head -1)" != "$need_go" ]; then
  echo "setup: Go $have is older than $need_go; the go command fetches go$need_go through the module proxy (GOTOOLCHAIN=auto)" >&2
fi
echo "setup: ok ($(go version 2>/dev/null || echo 'go missing'), cmake $(cmake --version | head -1 | awk '{print $3}'))" >&2
