#!/bin/sh
# rootfs.sh KIND — print the path of a cached Debian root filesystem for
# the systemd tests, building it first when it is not cached yet.
#
#   KIND=container  debootstrap minbase + systemd as PID 1, dbus, polkitd,
#                   power-profiles-daemon and powerprofilesctl, man-db
#   KIND=vm         the container root plus a kernel and an initramfs, for
#                   the cgroup v2 QEMU VM (README.md beside this script,
#                   "The VM (cgroup v2)"),
#                   and testpower.ko (testpower/: a test AC adapter and
#                   battery) built against that kernel's own headers, the
#                   compiler and headers removed again afterwards
#
# Roots live in $SCHEDPOLICYD_TEST_CACHE (default
# /var/cache/schedpolicyd-test), outside the checkout, named by a hash of
# what goes into them (suite, package list, this script), so a second run —
# CI's fresh clone included — finds them in seconds and a changed package
# list builds a new one. A root is built in a temporary directory and
# renamed into place only when complete; concurrent runs serialise on a
# lock. The mirror is read from this machine's apt sources at run time.
#
# Exit status 2 (with the reason on stderr) means the root cannot be built
# here (no debootstrap, no network to the mirror, not root): the callers
# skip with that reason.
set -eu

kind=${1:?usage: rootfs.sh container|vm}
cache=${SCHEDPOLICYD_TEST_CACHE:-/var/cache/schedpolicyd-test}
suite=bookworm
# python3 and python3-gi are only Recommends of power-profiles-daemon, but
# powerprofilesctl is a Python script that needs them.
pkgs_container="systemd,systemd-sysv,dbus,polkitd,libpam-systemd,power-profiles-daemon,python3,python3-gi,man-db,procps,util-linux"
pkgs_vm="linux-image-amd64 initramfs-tools"

skip() { echo "rootfs: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null 2>&1 || skip "debootstrap is not installed"

mirror() {
	# The first Debian archive URI of the machine's apt sources (deb822
	# .sources files or one-line .list files), never a name written here.
	for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
		[ -f "$f" ] || continue
		sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]*\)\{0,1\}\([^[:space:]]*\).*/\2/p' "$f"
	done | grep -E '/debian/?$' | head -n 1
}

here=$(cd "$(dirname "$0")" && pwd)
self=$(sha256sum "$0" | cut -c1-12)
testpower=$(cat "$here/testpower/testpower.c" "$here/testpower/Kbuild" | sha256sum | cut -c1-12)
key_container=$(printf '%s\n' "$suite" "$pkgs_container" "$self" | sha256sum | cut -c1-16)
key_vm=$(printf '%s\n' "$key_container" "$pkgs_vm" "$testpower" | sha256sum | cut -c1-16)

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

build_container() {
	dir=$cache/container-$key_container
	[ -f "$dir/.complete" ] && { touch "$dir"; echo "$dir"; return; }
	m=$(mirror)
	[ -n "$m" ] || skip "no Debian mirror in /etc/apt/sources*"
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	echo "rootfs: debootstrap $suite from $m into $tmp (once; cached as $dir)" >&2
	if ! debootstrap --variant=minbase --include="$pkgs_container" "$suite" "$tmp" "$m" >"$tmp.log" 2>&1; then
		tail -n 20 "$tmp.log" >&2
		rm -rf "$tmp"
		skip "debootstrap $suite from $m failed (log above)"
	fi
	# power-profiles-daemon is there for powerprofilesctl and for the
	# desktop tests; a check starts it when it wants it.
	chroot "$tmp" systemctl disable power-profiles-daemon.service >/dev/null 2>&1 || true
	# No console login: the tests drive the container with nsenter.
	chroot "$tmp" systemctl mask console-getty.service getty@.service serial-getty@.service >/dev/null 2>&1 || true
	echo schedpolicyd-test >"$tmp/etc/hostname"
	rm -f "$tmp.log"
	finish container "$tmp" "$dir"
}

# finish KIND TMP DIR: move a complete root into place, and drop the roots
# of the same kind (older package lists) that no run used for a week.
finish() {
	find "$cache" -maxdepth 1 -name "$1-*" ! -path "$3" -mtime +7 -exec rm -rf {} + 2>/dev/null || true
	rm -rf "$3"
	touch "$2/.complete"
	mv "$2" "$3"
	echo "$3"
}

# build_testpower ROOT: build testpower.ko in ROOT against the exact
# headers of ROOT's kernel (linux-headers-KVER, with make and the compiler
# it depends on), install it as /lib/modules/KVER/extra/testpower.ko, and
# purge every package that the build installed. Exit status 2 when the
# packages cannot be installed (the mirror), 1 when the module does not
# build (our code).
build_testpower() {
	r=$1
	kver=$(ls "$r/lib/modules" | sort -V | tail -n 1)
	[ -n "$kver" ] || { echo "no kernel in $r/lib/modules"; return 1; }
	chroot "$r" dpkg-query -W -f '${Package}\n' | sort >"$r/tmp/pkgs.before"
	mkdir -p "$r/tmp/testpower"
	cp "$here/testpower/testpower.c" "$here/testpower/Kbuild" "$r/tmp/testpower/"
	chroot "$r" sh -ec "
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-headers-$kver make || exit 2
		make -C /lib/modules/$kver/build M=/tmp/testpower modules
		vm=\$(modinfo -F vermagic /tmp/testpower/testpower.ko)
		case \$vm in '$kver '*) ;; *) echo \"testpower.ko: vermagic '\$vm' is not for $kver\"; exit 1 ;; esac
		install -D -m 0644 /tmp/testpower/testpower.ko /lib/modules/$kver/extra/testpower.ko
		depmod $kver
		dpkg-query -W -f '\${Package}\n' | sort >/tmp/pkgs.after
		DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq \$(comm -13 /tmp/pkgs.before /tmp/pkgs.after)
		apt-get clean
		rm -rf /tmp/testpower /tmp/pkgs.before /tmp/pkgs.after
		modinfo -F vermagic /lib/modules/$kver/extra/testpower.ko
	"
}

build_vm() {
	base=$(build_container)
	dir=$cache/vm-$key_vm
	[ -f "$dir/.complete" ] && { touch "$dir"; echo "$dir"; return; }
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	echo "rootfs: kernel and initramfs into a copy of $base (once; cached as $dir)" >&2
	cp -a "$base/." "$tmp/"
	rm -f "$tmp/.complete"
	mount -t proc proc "$tmp/proc"
	rc=0
	chroot "$tmp" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs_vm && apt-get clean" >"$tmp.log" 2>&1 || rc=$?
	if [ "$rc" = 0 ]; then
		build_testpower "$tmp" >>"$tmp.log" 2>&1 || rc=$((100 + $?))
	fi
	umount "$tmp/proc"
	if [ "$rc" != 0 ]; then
		tail -n 20 "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		case $rc in
		101) echo "rootfs: testpower.ko did not build against the VM's kernel (log above)" >&2; exit 1 ;;
		102) skip "installing the VM kernel's headers failed (log above)" ;;
		*) skip "installing $pkgs_vm in the VM root failed (log above)" ;;
		esac
	fi
	echo "/dev/vda / ext4 defaults 0 1" >"$tmp/etc/fstab"
	rm -f "$tmp.log"
	finish vm "$tmp" "$dir"
}

case $kind in
container) build_container ;;
vm) build_vm ;;
*) echo "usage: rootfs.sh container|vm" >&2; exit 64 ;;
esac
