#!/usr/bin/env bash
# Runs scripts/peers/pt2_worker.py with the PyTorch 2 of the root scripts/peers/pt2-root.sh built,
# for bench_peers.py. In a private mount namespace of its own: /proc, a read-only /sys, fresh
# tmpfs /tmp and /dev/shm (Inductor's cache starts empty, so every process compiles for itself)
# and read-only binds of this checkout's scripts/, the fixtures and the bench work folder, at
# /mnt/scripts, /mnt/fixtures and /mnt/work. All of it goes away with the worker; nothing of the
# host is writable from inside. Every step execs, so the worker keeps this script's process id
# (the driver stops and resumes contenders by id between their turns).
#
# Usage: sudo scripts/peers/pt2-run.sh ROOT FIXTURES WORK [WORKER-ARGS...]
set -euo pipefail

if [ $# -lt 3 ]; then
	echo "error usage: pt2-run.sh ROOT FIXTURES WORK [WORKER-ARGS...]"
	exit 2
fi
root=$1 fixtures=$2 work=$3
shift 3
scripts="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The protocol's failure line: the driver shows it as the reason the contender did not run.
if [ ! -f "$root/.ts-pt2-ready" ]; then
	echo "error the PyTorch 2 root $root is not built: run make peers-pt2-root"
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "error the PyTorch 2 peer needs root (mount namespace and chroot): run bench-peers as root"
	exit 1
fi
for d in proc sys tmp dev/shm mnt/scripts mnt/fixtures mnt/work; do
	mkdir -p "$root/$d"
done
# shellcheck disable=SC2016 # the body is single-quoted on purpose: it expands inside the namespace
exec unshare --mount --propagation private /bin/bash -c '
set -euo pipefail
root=$1 scripts=$2 fixtures=$3 work=$4
shift 4
# Already there when check-libtorch2.sh runs in the same root: sysfs cannot be mounted twice.
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/sys" || mount -t sysfs -o ro sysfs "$root/sys"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mount --bind -o ro "$scripts" "$root/mnt/scripts"
mount --bind -o ro "$fixtures" "$root/mnt/fixtures"
mount --bind -o ro "$work" "$root/mnt/work"
# Debian 13 libtorch links Open MPI, whose UCX would install its own crash handlers.
exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	UCX_HANDLE_ERRORS=none TORCHINDUCTOR_FREEZING=1 TORCHINDUCTOR_COMPILE_THREADS=1 \
	python3 /mnt/scripts/peers/pt2_worker.py "$@"
' pt2-run "$root" "$scripts" "$fixtures" "$work" "$@"
