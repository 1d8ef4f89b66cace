#!/usr/bin/env bash
# Builds the shim against libtorch 2.x and runs the whole test suite there: a Debian 13 (trixie)
# root made with debootstrap (trixie's libtorch-dev is 2.6), the Go toolchain of this machine
# copied in, a snapshot of the source tree copied in, and `make test` run inside it (chroot).
# The official libtorch 2.x CPU build the Docker image uses is the same 2.x API; this check is
# the one that runs on a machine whose only outside reach is Debian's and Go's registries.
#
# Not part of `make test`. Measured on the 2-core development machine: the first run takes
# ~21 min before the build starts (debootstrap 3.5 min, ~1.5 GB of packages 17 min); later runs
# reuse the root (build/_trixie-root) and take ~30 s of set-up plus `make test` (~15 min).
# The root's name starts with "_" so that `go list/vet/test ./...` in the tree skips it (the
# go command ignores such folders; it would otherwise walk the root's mounted /proc and fail).
# Nothing of the host is bind-mounted read-write into the root (its /dev is its own, the
# module cache is copied), so an `rm -rf build` during a run cannot reach the host's files.
#
# Usage: sudo scripts/check-libtorch2.sh [make targets...]   (default: test)
# Environment:
#   TRIXIE_ROOT    the root folder (default build/_trixie-root)
#   DEBIAN_MIRROR  the Debian mirror (default: the one this machine's apt uses)
#   CHECK_LOG      the log file (default build/check-libtorch2.log)
#   FIXTURES_SKIP_LARGE, FIXTURES_THREADS, GOFLAGS  passed through to make inside the root
# Needs root (debootstrap, mount, chroot) and a Debian or Ubuntu host with debootstrap.
# shellcheck disable=SC2016 # dpkg-query formats and bash -c bodies are single-quoted on purpose
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/debian-root.sh
. "$repo/scripts/lib/debian-root.sh"
tag=check-libtorch2
root="${TRIXIE_ROOT:-$repo/build/_trixie-root}"
log="${CHECK_LOG:-$repo/build/check-libtorch2.log}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(test)
suite=trixie
# Inside the root: the source snapshot and the module cache.
src_in=/src/torchspeed
modcache_in=/root/go/pkg/mod
# What the root needs: the build tools and libtorch 2.x, the Python side for the fixtures, the
# allocators `torchspeed launch` preloads, git for `make lint` (git ls-files) and the version,
# jq and curl for `make test-example`.
pkgs=(libtorch-dev cmake g++ make pkg-config git ca-certificates jq curl
	python3-torch python3-torchvision python3-sklearn python3-scipy python3-numpy python3-pil
	libjemalloc2 libgoogle-perftools4t64)

mkdir -p "$(dirname "$log")"
exec > >(tee -a "$log") 2>&1
t0=$(date +%s)
phase_start=$t0
phase() { # phase NAME: logs the time the previous phase took and starts a new one
	local now; now=$(date +%s)
	echo "check-libtorch2: [$(date -u +%H:%M:%S)] +$((now - phase_start))s (total $((now - t0))s) -> $1"
	phase_start=$now
}
die() { echo "check-libtorch2: $*" >&2; exit 1; }

root_checks
goroot="$(PATH=/usr/local/go/bin:$PATH go env GOROOT 2>/dev/null)" || die "no Go on this machine: run scripts/setup.sh first"
gomodcache="$(PATH=/usr/local/go/bin:$PATH go env GOMODCACHE)"
goproxy="$(PATH=/usr/local/go/bin:$PATH go env GOPROXY)"

cleanup() {
	local rc=$?
	root_unmount_all
	echo "check-libtorch2: finished with exit code $rc after $(($(date +%s) - t0))s"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
echo "check-libtorch2: $(date -u) root=$root mirror=$mirror targets=${targets[*]}"

# 1. The root (scripts/lib/debian-root.sh).
phase "debootstrap $suite"
root_debootstrap

# 2. Kernel filesystems, and the host's name resolution for apt and the module proxy.
# debootstrap made the device nodes in the root's /dev; pts and shm are fresh instances.
phase "mount"
root_mount

# 3. Packages.
phase "apt packages"
root_packages
# The host's own certificate authorities (a TLS-inspecting proxy's, say): without them the go
# command in the root cannot reach the module proxy for what the copied cache lacks (staticcheck).
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
	mkdir -p "$root/usr/local/share/ca-certificates"
	cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
	in_root update-ca-certificates >/dev/null
fi
echo "check-libtorch2: libtorch-dev $(in_root dpkg-query -W -f='${Version}' libtorch-dev), python3-torch $(in_root dpkg-query -W -f='${Version}' python3-torch), $(in_root g++ --version | head -1), $(in_root cmake --version | head -1)"

# 4. Go: trixie's Go is older than go.mod's; this machine's toolchain runs there as it is.
phase "go toolchain"
have=$(head -1 "$goroot/VERSION" 2>/dev/null)
if [ "$(head -1 "$root/usr/local/go/VERSION" 2>/dev/null)" != "$have" ]; then
	echo "check-libtorch2: copying $goroot ($have) into the root"
	rm -rf --one-file-system "$root/usr/local/go"
	mkdir -p "$root/usr/local"
	cp -a "$goroot" "$root/usr/local/go"
fi
in_root /usr/local/go/bin/go version
# The host's module cache, copied (new files only): spares downloading every module again.
# Anything still missing comes from the proxy.
if [ -d "$gomodcache" ]; then
	mkdir -p "$root$modcache_in"
	cp -a -n "$gomodcache/." "$root$modcache_in/"
fi

# 5. A snapshot of the source tree: the tracked files and the untracked ones git does not
# ignore, plus .git (make lint and the version string read it). It is a copy, not a bind
# mount: the root's build/ (shim built against 2.6, fixtures made by torch 2.6) must not
# replace the host's, and other work in the tree goes on while the check runs.
phase "source snapshot"
dst="$root$src_in"
mkdir -p "$dst"
find "$dst" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf --one-file-system {} +
(cd "$repo" && git ls-files -z -c -o --exclude-standard |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar --null -T - -cf - .git) | tar -xf - -C "$dst"
echo "check-libtorch2: source at $(cd "$repo" && git rev-parse --short HEAD)$(cd "$repo" && git diff --quiet HEAD -- 2>/dev/null || echo ' plus uncommitted changes')"

# 6. Build and test inside, as `make test` does on Debian 12 (setup.sh finds everything
# installed). The root keeps its own Go build cache.
phase "make ${targets[*]} (libtorch 2.x)"
# Debian's libtorch 2.6 links Open MPI, whose UCX installs SIGSEGV/SIGFPE handlers; a crash in
# C++ then prints UCX's useless backtrace instead of Go's report with the goroutine that made
# the cgo call. UCX_HANDLE_ERRORS=none leaves crashes to Go.
passenv=(GOMODCACHE="$modcache_in" GOPROXY="$goproxy" GOFLAGS="${GOFLAGS:--buildvcs=false}" UCX_HANDLE_ERRORS=none)
for v in FIXTURES_SKIP_LARGE FIXTURES_THREADS FIXTURES_FORCE; do
	if [ -n "${!v:-}" ]; then passenv+=("$v=${!v}"); fi
done
in_root "${passenv[@]}" /bin/bash -c 'cd "$0" && make "$@"' "$src_in" "${targets[@]}"
phase "done"
echo "check-libtorch2: PASS: shim built against libtorch $(in_root dpkg-query -W -f='${Version}' libtorch-dev), make ${targets[*]} green"
