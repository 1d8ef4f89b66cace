# shellcheck shell=bash
# A Debian root made with debootstrap, shared by scripts/check-libtorch2.sh (libtorch 2.x build
# and tests) and scripts/peers/pt2-root.sh (the PyTorch 2 peer of bench-peers). Sourced, not run.
# The caller sets: root (the folder), suite, pkgs (array), tag (log prefix), and calls
# root_checks, root_debootstrap, root_mount, root_packages in that order.
# Nothing of the host is bind-mounted read-write into the root (its /dev is its own).
# shellcheck disable=SC2016,SC2154 # dpkg-query formats are single-quoted on purpose; the caller sets root, suite, pkgs, tag

root_die() { echo "$tag: $*" >&2; exit 1; }

# root_checks: root privileges, debootstrap, a sane root path; sets mirror.
root_checks() {
	[ "$(id -u)" = 0 ] || root_die "needs root (debootstrap, mount and chroot): run it with sudo"
	command -v debootstrap >/dev/null || root_die "debootstrap is missing: apt-get install -y debootstrap"
	case "$root" in /|"") root_die "the root folder must not be '$root'";; esac
	# The mirror this machine's apt already reaches (one-line or deb822 sources), else Debian's.
	mirror="${DEBIAN_MIRROR:-}"
	if [ -z "$mirror" ]; then
		mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
			grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
		mirror="${mirror:-http://deb.debian.org/debian}"
	fi
}

# Everything mounted below the root, newest first, so that root_unmount_all can unmount in order.
mounted=()
root_unmount_all() {
	local i
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
		umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" ||
			echo "$tag: could not unmount ${mounted[$i]}: unmount it by hand" >&2
	done
	mounted=()
}
mount_at() { # mount_at TARGET MOUNT-ARGS...: mounts and remembers it for root_unmount_all
	local target="$1"; shift
	mkdir -p "$target"
	mount "$@" "$target"
	mounted+=("$target")
}
under_root_mounts() { awk -v r="$root/" 'index($2, r) == 1 {print $2}' /proc/mounts; }

# root_debootstrap: a stamp marks a finished debootstrap; a root without one is a broken earlier run.
root_debootstrap() {
	if [ -n "$(under_root_mounts)" ]; then
		root_die "something is still mounted below $root (an earlier run that was killed?): $(under_root_mounts | tr '\n' ' ')- unmount it first"
	fi
	if [ ! -f "$root/.ts-debootstrap-done" ]; then
		if [ -d "$root" ]; then
			echo "$tag: removing the unfinished root $root"
			rm -rf --one-file-system "$root"
		fi
		mkdir -p "$root"
		debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" "$mirror"
		touch "$root/.ts-debootstrap-done"
	else
		echo "$tag: reusing $root"
	fi
}

# root_mount: kernel filesystems, and the host's name resolution for apt. debootstrap made the
# device nodes in the root's /dev; pts and shm are fresh instances.
root_mount() {
	mount_at "$root/proc" -t proc proc
	mount_at "$root/sys" -t sysfs -o ro sysfs
	mount_at "$root/dev/pts" -t devpts -o newinstance,ptmxmode=0666 devpts
	mount_at "$root/dev/shm" -t tmpfs -o mode=1777 tmpfs
	local d
	for d in null zero full random urandom tty; do
		[ -e "$root/dev/$d" ] || root_die "$root/dev/$d is missing: remove $root and run again"
	done
	cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

in_root() { # in_root COMMAND...: runs a command inside the root with a clean environment
	chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
		PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		DEBIAN_FRONTEND=noninteractive "$@"
}

# root_packages: installs what of pkgs is missing. Services must not start inside a chroot.
root_packages() {
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	local missing=() p
	for p in "${pkgs[@]}"; do
		in_root dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "$tag: installing ${missing[*]}"
		in_root apt-get update -q
		in_root apt-get install -y -q --no-install-recommends "${missing[@]}"
		in_root apt-get clean
	fi
}
