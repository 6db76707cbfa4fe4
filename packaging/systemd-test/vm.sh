#!/bin/sh
# vm.sh [--deb FILE] GUEST-SCRIPT [FILES...] — run GUEST-SCRIPT as root in
# a real cgroup v2 Debian 12 machine (systemd 252 as PID 1, kernel 6.1)
# booted under QEMU's software emulation, and report its check lines.
#
# The machine is the cached root of `rootfs.sh vm` (never written: the disk
# image is made from an overlay of it) plus /mnt/host holding the .deb
# (FILE, or one built by packaging/build-deb.sh), lib.sh, GUEST-SCRIPT and
# FILES. The guest script runs from /mnt/host once multi-user.target is
# reached, in a oneshot unit, with
#   SYSTEMD_TEST_DEB  the .deb's path in the guest
#   SYSTEMD_TEST_LIB  lib.sh's path in the guest (. "$SYSTEMD_TEST_LIB")
# and prints `systemd-test: PASS|FAIL|SKIP ...` lines ending with a DONE
# line (lib.sh). Afterwards the guest powers off. Its whole output comes
# back on a second, raw disk (the serial console is only the fallback, and
# the boot log for a failure).
#
# Exit status: 0 when the guest printed DONE and no FAIL; 1 otherwise (a
# FAIL, no DONE, the VM's hard timeout). 0 with a SKIP line when QEMU or the
# VM root cannot be had here, saying why.
#
# Environment:
#   SYSTEMD_TEST_VM_TIMEOUT  hard limit in seconds for the VM (default 3000,
#                            which only a stuck run reaches, also on a busy
#                            2-CPU machine: the checks take 15-19 min on a
#                            quiet one, and up to about 2.5 times that when
#                            other work shares the CPUs with the emulation);
#                            QEMU is killed when it is reached
#   SYSTEMD_TEST_VM_LOG      copy the serial console log to this file
#   SYSTEMD_TEST_VM_MEM      guest memory in MiB (default 1024)
#   SCHEDPOLICYD_TEST_MATCH  passed to the guest script: run only the
#                            testcases whose name matches (lib.sh)
# All temporary files (disk images, the overlay, a built .deb) live in one
# temporary directory that is removed on exit.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
timeout=${SYSTEMD_TEST_VM_TIMEOUT:-3000}
mem=${SYSTEMD_TEST_VM_MEM:-1024}

usage() { echo "usage: vm.sh [--deb FILE] GUEST-SCRIPT [FILES...]" >&2; exit 64; }
deb=""
while [ $# -gt 0 ]; do
	case $1 in
	--deb) [ $# -ge 2 ] || usage; deb=$2; shift 2 ;;
	--deb=*) deb=${1#--deb=}; shift ;;
	--) shift; break ;;
	-*) usage ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || usage
script=$1
shift
for f in "$script" "$@" ${deb:+"$deb"}; do
	[ -f "$f" ] || { echo "vm.sh: $f: not a file" >&2; exit 64; }
done
name=$(basename "$script")

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
t_start=$(now)

skip() {
	echo "systemd-test: SKIP vm: $*"
	exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root (reading the VM root, mounting an overlay)"
qemu=$(command -v qemu-system-x86_64 || true)
[ -n "$qemu" ] || skip "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)"
command -v mkfs.ext4 >/dev/null 2>&1 || skip "mkfs.ext4 is not installed (e2fsprogs)"
rc=0
root=$("$here/rootfs.sh" vm) || rc=$?
if [ "$rc" = 2 ]; then
	skip "no VM root: rootfs.sh vm cannot build it here (its reason above)"
elif [ "$rc" != 0 ]; then
	echo "systemd-test: FAIL vm: rootfs.sh vm failed (exit $rc)"
	exit 1
fi
kernel=$(ls "$root"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
[ -n "$kernel" ] || skip "no kernel in $root/boot"
kver=${kernel##*/vmlinuz-}
initrd=$root/boot/initrd.img-$kver
[ -f "$initrd" ] || skip "no initramfs for $kver in $root/boot"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/schedpolicyd-vm.XXXXXX")
qpid="" merged=""
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill -KILL "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	if [ -n "$merged" ] && mountpoint -q "$merged"; then
		umount "$merged" || umount -l "$merged" || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- The disk image -----------------------------------------------------------
t_img=$(now)
if [ -z "$deb" ]; then
	deb=$("$top/packaging/build-deb.sh" "$tmp/deb" | tail -n 1)
fi
t_deb=$(now)
# The cached root is the lower layer of an overlay; everything vm.sh adds
# goes to the upper one, so the cache is never written. Without overlayfs, a
# copy.
upper=$tmp/upper
mkdir -p "$upper" "$tmp/work" "$tmp/merged"
if mount -t overlay overlay -o "lowerdir=$root,upperdir=$upper,workdir=$tmp/work" "$tmp/merged" 2>/dev/null; then
	merged=$tmp/merged
	image=$merged
else
	rmdir "$tmp/merged"
	cp -a "$root/." "$upper/"
	image=$upper
fi

host=$image/mnt/host
mkdir -p "$host"
cp "$deb" "$host/"
cp "$here/lib.sh" "$host/lib.sh"
cp "$script" "$host/$name"
for f in "$@"; do cp "$f" "$host/"; done
debname=$(basename "$deb")
# The filter, single-quoted for the runner below.
match=$(printf '%s' "${SCHEDPOLICYD_TEST_MATCH:-}" | sed "s/'/'\\\\''/g")

# The runner: the guest script's output goes to the console (the serial
# log) and to a file that is copied, whole, to the raw results disk
# /dev/vdb before the machine powers off.
cat >"$host/.runner.sh" <<EOF
#!/bin/sh
# Written by packaging/systemd-test/vm.sh.
out=/var/tmp/systemd-test.out
cd /mnt/host
{
	read up _ </proc/uptime
	echo "systemd-test: BEGIN $name (guest uptime \${up}s)"
	SYSTEMD_TEST_DEB=/mnt/host/$debname SYSTEMD_TEST_LIB=/mnt/host/lib.sh SCHEDPOLICYD_TEST_MATCH='$match' sh ./$name </dev/null
	echo "systemd-test: EXIT \$?"
} 2>&1 | tee "\$out"
dd if="\$out" of=/dev/vdb bs=64k conv=fsync 2>/dev/null || echo "systemd-test: results disk not written"
sync
systemctl --no-block poweroff
EOF
chmod 0755 "$host/.runner.sh"

sd=$image/etc/systemd/system
cat >"$sd/systemd-test.target" <<'EOF'
# Written by packaging/systemd-test/vm.sh: the boot target of the test VM
# (systemd.unit=systemd-test.target), multi-user.target plus the runner.
[Unit]
Description=systemd test run
Requires=multi-user.target systemd-test.service
After=multi-user.target
AllowIsolate=yes
EOF
cat >"$sd/systemd-test.service" <<EOF
# Written by packaging/systemd-test/vm.sh: runs /mnt/host/$name once the
# machine is up, then powers it off.
[Unit]
Description=systemd test guest script $name
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/mnt/host/.runner.sh
StandardOutput=journal+console
StandardError=inherit
TimeoutStartSec=infinity
EOF
# serial-getty's vhangup() on the console kills a script writing there.
ln -sf /dev/null "$sd/serial-getty@ttyS0.service"

disk=$tmp/disk.img
mkfs.ext4 -q -F -L systemd-test -d "$image" "$disk" 3G >/dev/null
if [ -n "$merged" ]; then
	umount "$merged"
	merged=""
fi
rm -rf "$upper" "$tmp/work"
results=$tmp/results.img
truncate -s 16M "$results"
t_boot=$(now)

# --- The machine --------------------------------------------------------------
serial=$tmp/serial.log
: >"$serial"
"$qemu" -accel tcg,thread=multi -cpu max -m "$mem" -smp 2 \
	-nodefaults -display none -no-reboot \
	-serial "file:$serial" \
	-kernel "$kernel" -initrd "$initrd" \
	-drive "file=$disk,format=raw,if=virtio" \
	-drive "file=$results,format=raw,if=virtio" \
	-append "root=/dev/vda rw console=ttyS0 panic=1 systemd.unified_cgroup_hierarchy=1 systemd.unit=systemd-test.target" \
	</dev/null >"$tmp/qemu.out" 2>&1 &
qpid=$!
t_script="" timed_out=0
deadline=$(awk -v a="$t_boot" -v t="$timeout" 'BEGIN { printf "%d", a + t }')
while kill -0 "$qpid" 2>/dev/null; do
	if [ -z "$t_script" ] && grep -q 'systemd-test: BEGIN' "$serial" 2>/dev/null; then
		t_script=$(now)
	fi
	if [ "$(date +%s)" -ge "$deadline" ]; then
		timed_out=1
		kill -KILL "$qpid" 2>/dev/null || true
		break
	fi
	sleep 0.5
done
qrc=0
wait "$qpid" || qrc=$?
qpid=""
t_end=$(now)
if [ -n "${SYSTEMD_TEST_VM_LOG:-}" ]; then cp "$serial" "$SYSTEMD_TEST_VM_LOG"; fi

# --- The results --------------------------------------------------------------
out=$tmp/out
tr -d '\000' <"$results" >"$out"
from="results disk"
if ! grep -q '^systemd-test: ' "$out"; then
	# The guest never got to copy its output: what reached the console.
	grep -a 'systemd-test: \|^-----' "$serial" | sed 's/^.*\(systemd-test: \)/\1/' >"$out" || true
	from="serial console"
fi
cat "$out"

failed=0
if [ "$timed_out" = 1 ]; then
	echo "systemd-test: FAIL vm: no poweroff within ${timeout}s (SYSTEMD_TEST_VM_TIMEOUT); QEMU killed"
	failed=1
elif [ "$qrc" != 0 ]; then
	echo "systemd-test: FAIL vm: qemu exited with status $qrc: $(tail -n 3 "$tmp/qemu.out" | tr '\n' ' ')"
	failed=1
fi
if [ -z "$t_script" ]; then
	echo "systemd-test: FAIL vm: the guest script never started"
	failed=1
fi
grep -q '^systemd-test: FAIL ' "$out" && failed=1
if ! grep -q '^systemd-test: DONE ' "$out"; then
	echo "systemd-test: FAIL vm: no DONE line from $name (output from the $from)"
	failed=1
fi
boot="-"
[ -n "$t_script" ] && boot=$(secs "$t_boot" "$t_script")s
echo "systemd-test: timing: image $(secs "$t_img" "$t_boot")s (deb $(secs "$t_img" "$t_deb")s), boot to script $boot, VM $(secs "$t_boot" "$t_end")s, whole run $(secs "$t_start" "$t_end")s"
if [ "$failed" = 1 ]; then
	echo "vm.sh: last lines of the serial console:" >&2
	tail -n 40 "$serial" >&2
	exit 1
fi
exit 0
