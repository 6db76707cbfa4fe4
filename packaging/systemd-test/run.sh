#!/bin/sh
# run.sh — `make systemd-test`: the package under a real systemd.
#
#   1. container.sh: Debian 12, systemd 252 as PID 1 in systemd-nspawn
#      (cgroup v1): install, start, READY, reload, watchdog, kill, D-Bus
#      activation, polkit, powerprofilesctl, the sandbox, purge.
#   2. vm.sh with vm-guest.sh: the same Debian in a QEMU VM with cgroup v2
#      (what laptops run): install, start, switch, stop with real v2
#      cpuset writes; a test battery (testpower.ko) and its uevents.
# Both run surface.sh: what an administrator does to the units the daemon
# places (set-property, daemon-reload and -reexec, restarts, failures,
# units removed and made again, 300 transient services, logout and login),
# each with a kill -9 of the daemon in its middle.
#
# SCHEDPOLICYD_SYSTEMD_TEST="container vm" (the default) picks the parts.
# SCHEDPOLICYD_TEST_MATCH=REGEX (an extended regular expression) runs only
# the testcases whose function name (testcase_NAME) matches, besides the
# install and the purge; a part with none is not started, and a filter no
# part matches is an error (lib.sh's run_testcases; README.md).
# Where the container cannot run (no root, no systemd-nspawn, no cgroup v1
# cpuset, no root filesystem) it says why and the host package check
# (deb-test.sh --host-install) runs instead; it refuses to purge state it
# did not create. Exit status 0 only when every part that ran passed.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
parts=${SCHEDPOLICYD_SYSTEMD_TEST:-container vm}
work=$(mktemp -d "${TMPDIR:-/tmp}/schedpolicyd-systemd-test-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
start=$(date +%s)

# The parts the filter leaves something to run in, asked of the guest
# scripts themselves (SYSTEMD_TEST_LIST: they print their testcases and
# run nothing).
if [ -n "${SCHEDPOLICYD_TEST_MATCH:-}" ]; then
	matched=""
	for part in $parts; do
		case $part in container) guest=container-guest.sh ;; vm) guest=vm-guest.sh ;; *) guest="" ;; esac
		[ -n "$guest" ] || { matched="$matched $part"; continue; }
		cases=$(SYSTEMD_TEST_LIB="$here/lib.sh" SYSTEMD_TEST_LIST=1 sh "$here/$guest" 2>/dev/null | tr '\n' ' ')
		if [ -n "$cases" ]; then
			echo "systemd-test: [$part] SCHEDPOLICYD_TEST_MATCH=$SCHEDPOLICYD_TEST_MATCH: $cases"
			matched="$matched $part"
		else
			echo "systemd-test: [$part] SCHEDPOLICYD_TEST_MATCH=$SCHEDPOLICYD_TEST_MATCH matches no testcase there: not started"
		fi
	done
	[ -n "$matched" ] || { echo "systemd-test: FAIL SCHEDPOLICYD_TEST_MATCH=$SCHEDPOLICYD_TEST_MATCH matches no testcase in $parts" >&2; exit 64; }
	parts=$matched
fi

deb=$("$top/packaging/build-deb.sh" "$work" | tail -n 1) || { echo "systemd-test: FAIL building the .deb"; exit 1; }
echo "systemd-test: testing $(basename "$deb")"
sh "$here/lib-test.sh" || { echo "systemd-test: FAIL lib.sh's runner and assertions (lib-test.sh)"; exit 1; }
# The Go tests that need a real systemd manager (they skip elsewhere) run
# inside both guests: static test binaries, copied in beside the .deb.
export PATH="$PATH:/usr/local/go/bin"
(cd "$top" && CGO_ENABLED=0 go test -c -o "$work/systemd.test" ./systemd/) ||
	{ echo "systemd-test: FAIL building the systemd package's test binary"; exit 1; }

# run_part LOG CMD... runs a part, its output also kept in LOG (for the
# summary of failed checks at the end); its exit status is the part's.
run_part() {
	log=$1
	shift
	{
		"$@" 2>&1
		echo $? >"$log.rc"
	} | tee "$log"
	return "$(cat "$log.rc")"
}

for part in $parts; do
	t=$(date +%s)
	case $part in
	container)
		rc=0
		run_part "$work/container.out" "$here/container.sh" --deb "$deb" --file "$work/systemd.test" || rc=$?
		if [ "$rc" = 2 ]; then
			echo "systemd-test: the container cannot run here (above); checking the package on this machine instead"
			"$top/packaging/deb-test.sh" --host-install || status=1
		elif [ "$rc" != 0 ]; then
			status=1
		fi
		;;
	vm)
		run_part "$work/vm.out" "$here/vm.sh" --deb "$deb" "$here/vm-guest.sh" "$here/placement.sh" "$here/surface.sh" "$here/laptop.sh" "$here/battery.sh" "$here/laptop-default.sh" "$work/systemd.test" || status=1
		;;
	*)
		echo "systemd-test: unknown part '$part' in SCHEDPOLICYD_SYSTEMD_TEST" >&2
		exit 64
		;;
	esac
	echo "systemd-test: $part took $(($(date +%s) - t)) s"
done
echo "systemd-test: all parts took $(($(date +%s) - start)) s"
# The failed checks last, so that the tail of a long log names them.
for part in $parts; do
	[ -f "$work/$part.out" ] || continue
	grep -a '^systemd-test: FAIL' "$work/$part.out" | head -n 20 | sed "s/^systemd-test: /systemd-test: [$part] /"
done
[ "$status" = 0 ] && echo "systemd-test: ok" || echo "systemd-test: FAILED"
exit "$status"
