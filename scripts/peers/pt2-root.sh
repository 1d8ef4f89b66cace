#!/usr/bin/env bash
# Builds the Debian 13 (trixie) root the PyTorch 2 peer of bench-peers runs in: python3-torch 2.6
# with what torch.compile's Inductor needs to build its C++ kernels on CPU (g++, the Python
# headers and setuptools it builds with, libtorch's headers) and torchvision for the CNN
# modules. Only the root: no source copy, no build, no tests (scripts/check-libtorch2.sh does
# those in its own root).
#
# Not part of `make test`: `make peers-pt2-root`. The first run takes 4 to 20 min on the 2-core
# development machine, mostly downloads (~1 GB, 1.8 GB on disk); later runs only check the packages.
#
# Usage: sudo scripts/peers/pt2-root.sh
# Environment:
#   PT2_ROOT       the root folder (default build/_pt2-root; "_" so that the go command skips it)
#   DEBIAN_MIRROR  the Debian mirror (default: the one this machine's apt uses)
# Needs root (debootstrap, mount, chroot) and a Debian or Ubuntu host with debootstrap.
# shellcheck disable=SC2016 # dpkg-query formats are single-quoted on purpose
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/lib/debian-root.sh
. "$repo/scripts/lib/debian-root.sh"
root="${PT2_ROOT:-$repo/build/_pt2-root}"
suite=trixie
tag=pt2-root
# OpenBLAS: without it Debian's torch calls the reference BLAS for float matmul (10x slower
# linear layers); Debian 12's torch 1.13, which the other peers run, uses OpenBLAS.
pkgs=(python3-torch python3-torchvision python3-numpy python3-dev python3-setuptools g++ libtorch-dev
	libopenblas0-pthread)

t0=$(date +%s)
cleanup() {
	local rc=$?
	root_unmount_all
	echo "$tag: finished with exit code $rc after $(($(date +%s) - t0))s"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

root_checks
echo "$tag: $(date -u) root=$root mirror=$mirror"
root_debootstrap
root_mount
root_packages
echo "$tag: python3-torch $(in_root dpkg-query -W -f='${Version}' python3-torch), $(in_root g++ --version | head -1)"
# The stamp bench_peers.py looks for: a root whose package step finished.
in_root python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
touch "$root/.ts-pt2-ready"
echo "$tag: ready: $root"
