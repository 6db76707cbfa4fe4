#!/bin/sh
# container.sh [--deb FILE] [--file FILE]... [--keep] — boot Debian 12 with systemd 252 as PID 1 in a
# systemd-nspawn container, install the package there and run
# container-guest.sh inside (README.md beside this script, "The
# container (cgroup v1)"). Part of `make systemd-test`.
# SCHEDPOLICYD_TEST_MATCH (an extended regular expression) runs only the
# testcases whose name matches (lib.sh's run_testcases).
#
# The root filesystem is cached (rootfs.sh) and booted with
# --volatile=overlay, so the cache never changes and nothing of a run is
# kept. The container's cgroup hierarchy is the host's v1, read-only
# inside; the run makes a cpuset child of its own on the host
# (/sys/fs/cgroup/cpuset/schedpolicyd-systemd-test-PID), binds it at
# /mnt/cpuset, and removes it afterwards.
#
# Exit status: 0 every check passed, 1 a check failed (or the container
# misbehaved), 2 the container cannot run here (the reason is printed:
# no root, no systemd-nspawn, no cgroup v1 cpuset, no root filesystem).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
deb="" keep=0 files=""
while [ $# -gt 0 ]; do
	case $1 in
	--deb) deb=$2; shift 2 ;;
	# --keep: leave the container running after the checks, for a look
	# inside (nsenter); it stops on SIGINT/SIGTERM.
	--keep) keep=1; shift ;;
	# --file F: also copy F into /mnt/host (Go test binaries the guest
	# runs when they are there).
	--file) files="$files $2"; shift 2 ;;
	*) echo "usage: container.sh [--deb FILE] [--file FILE]... [--keep]" >&2; exit 64 ;;
	esac
done

cannot() { echo "systemd-test: SKIP container: $*"; exit 2; }
now() { date +%s.%N; }
since() { echo "$1 $(now)" | awk '{ printf "%.1f", $2 - $1 }'; }

[ "$(id -u)" = 0 ] || cannot "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null 2>&1 || cannot "systemd-nspawn is not installed (apt-get install systemd-container)"
command -v nsenter >/dev/null 2>&1 || cannot "nsenter is not installed (util-linux)"
[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ] ||
	cannot "the host has no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset for the container's workloads (the VM checks cover cgroup v2)"
[ -c /dev/fuse ] || cannot "no /dev/fuse"

t0=$(now)
rc=0
root=$("$here/rootfs.sh" container) || rc=$?
[ "$rc" = 0 ] || { [ "$rc" = 2 ] && cannot "no root filesystem (see above)"; exit 1; }
t_root=$(since "$t0")

work=$(mktemp -d "${TMPDIR:-/tmp}/schedpolicyd-systemd-test.XXXXXX")
cg=/sys/fs/cgroup/cpuset/schedpolicyd-systemd-test-$$
machine=schedpolicyd-test-$$
nspawn=""
cleanup() {
	if [ -n "$nspawn" ] && kill -0 "$nspawn" 2>/dev/null; then
		kill -KILL "$nspawn" 2>/dev/null || true
		wait "$nspawn" 2>/dev/null || true
	fi
	# Children first; the container's processes are gone with its PID
	# namespace, so the directories are empty.
	if [ -d "$cg" ]; then
		find "$cg" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
		rmdir "$cg" 2>/dev/null || echo "container.sh: could not remove $cg" >&2
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [ -z "$deb" ]; then
	"$top/packaging/build-deb.sh" "$work" >/dev/null
else
	cp "$deb" "$work/"
fi
cp "$here/lib.sh" "$here/container-guest.sh" "$here/placement.sh" "$here/surface.sh" "$here/laptop.sh" $files "$work/"

mkdir "$cg"
cat /sys/fs/cgroup/cpuset/cpuset.cpus >"$cg/cpuset.cpus"
cat /sys/fs/cgroup/cpuset/cpuset.mems >"$cg/cpuset.mems"

t1=$(now)
# --console=read-only and </dev/null: from a script that is not in the
# terminal's foreground (CI), nspawn would stop itself on SIGTTOU/SIGTTIN
# if it read the terminal. read-only, not passive: nspawn reads the
# console's pseudo TTY (into nspawn.log). With passive nobody reads it, and
# systemd logging to the console once its buffer is full blocks in
# n_tty_write for good: PID 1 at debug level re-executing (surface.sh's
# daemon-reexec) does, before it is back on the journal.
systemd-nspawn -D "$root" --machine="$machine" --register=no --keep-unit \
	--volatile=overlay --console=read-only \
	--bind=/dev/fuse --bind="$cg:/mnt/cpuset" --bind-ro="$work:/mnt/host" \
	-b </dev/null >"$work/nspawn.log" 2>&1 &
nspawn=$!

# The container's PID 1 is nspawn's child running systemd.
pid1=""
i=0
while [ -z "$pid1" ] && [ "$i" -lt 100 ]; do
	for c in $(pgrep -P "$nspawn" 2>/dev/null); do
		[ "$(cat /proc/"$c"/comm 2>/dev/null)" = systemd ] && pid1=$c
	done
	[ -n "$pid1" ] || { kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; i=$((i + 1)); }
done
if [ -z "$pid1" ]; then
	cat "$work/nspawn.log"
	echo "systemd-test: FAIL container: systemd did not start in the container"
	exit 1
fi
inside() { nsenter -t "$pid1" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }
i=0
until inside systemctl is-system-running 2>/dev/null | grep -Eq '^(running|degraded)$'; do
	i=$((i + 1))
	[ "$i" -lt 300 ] || { echo "systemd-test: FAIL container: not running after 60 s: $(inside systemctl is-system-running 2>&1)"; exit 1; }
	sleep 0.2
done
t_boot=$(since "$t1")

t2=$(now)
rc=0
timeout 1200 nsenter -t "$pid1" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
	SCHEDPOLICYD_TEST_MATCH="${SCHEDPOLICYD_TEST_MATCH:-}" /bin/sh /mnt/host/container-guest.sh >"$work/guest.log" 2>&1 || rc=$?
t_checks=$(since "$t2")
cat "$work/guest.log"
[ -n "${SCHEDPOLICYD_SYSTEMD_TEST_LOG:-}" ] && cp "$work/guest.log" "$SCHEDPOLICYD_SYSTEMD_TEST_LOG"

if [ "$keep" = 1 ]; then
	echo "container.sh: kept running: nsenter -t $pid1 -a /bin/sh; stop with kill $$"
	trap 'inside systemctl poweroff; sleep 2; exit 0' INT TERM
	while kill -0 "$nspawn" 2>/dev/null; do sleep 1; done
fi
t3=$(now)
inside systemctl poweroff >/dev/null 2>&1 || true
i=0
while kill -0 "$nspawn" 2>/dev/null && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
t_off=$(since "$t3")
if kill -0 "$nspawn" 2>/dev/null; then
	echo "systemd-test: FAIL container: did not power off within 30 s"
	rc=1
fi
echo "systemd-test: container timings: root filesystem ${t_root} s, boot to running ${t_boot} s, checks ${t_checks} s, power-off ${t_off} s, total $(since "$t0") s"

grep -q '^systemd-test: DONE ' "$work/guest.log" || { echo "systemd-test: FAIL container: the guest script did not finish (exit $rc)"; exit 1; }
[ "$rc" = 0 ] || exit 1
exit 0
