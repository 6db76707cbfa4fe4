#!/bin/sh
# deb-test.sh [--host-install] — build the .deb, check its contents and
# lint it. Run by `make deb-test` (part of `make test`).
#
# Installing, using and purging the package happens in a booted systemd
# container (packaging/systemd-test, `make systemd-test`), never on this
# machine. Only where that container cannot run does systemd-test fall
# back to --host-install: dpkg -i here, use the binaries, dpkg --purge and
# check nothing is left. That path needs root and refuses (skipping, with
# the reason) when the package is already installed (set
# SCHEDPOLICYD_DEB_TEST_REPLACE=1 to allow it) or when /etc/schedpolicyd or
# /var/lib/schedpolicyd exist already: the purge would delete a user's
# saved choices and a crashed run's saved cpusets it did not create. Where
# systemd is PID 1 the postinst starts the service, as it would for a
# user; the purge stops it again.
set -eu

cd "$(dirname "$0")/.."
out=$(mktemp -d "${TMPDIR:-/tmp}/schedpolicyd-debtest.XXXXXX")
installed=0
cleanup() {
	if [ "$installed" = 1 ]; then
		dpkg --purge schedpolicyd >/dev/null 2>&1 || true
	fi
	rm -rf "$out"
}
trap cleanup EXIT
fail() { echo "deb-test: FAIL: $*" >&2; exit 1; }
step() { echo "deb-test: $*"; }

deb=$(packaging/build-deb.sh "$out" | tail -n 1)
step "built $(basename "$deb")"

# 1. The package holds what the issue lists.
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/sbin/schedpolicyd ./usr/bin/schedpolicyctl \
	./lib/systemd/system/schedpolicyd.service \
	./lib/systemd/system/user@.service.d/50-schedpolicyd-delegate-cpuset.conf \
	./usr/share/dbus-1/system.d/org.schedpolicyd.SchedPolicy1.conf \
	./usr/share/dbus-1/system-services/org.schedpolicyd.SchedPolicy1.service \
	./usr/share/polkit-1/actions/org.schedpolicyd.policy \
	./usr/share/polkit-1/actions/org.schedpolicyd.power-profiles.policy \
	./etc/schedpolicyd/schedpolicyd.conf \
	./usr/share/man/man8/schedpolicyd.8.gz ./usr/share/man/man1/schedpolicyctl.1.gz \
	./usr/share/man/man5/schedpolicyd.conf.5.gz \
	./usr/share/bash-completion/completions/schedpolicyctl \
	./usr/share/zsh/vendor-completions/_schedpolicyctl \
	./usr/share/doc/schedpolicyd/copyright ./usr/share/doc/schedpolicyd/changelog.gz; do
	echo "$contents" | grep -qx "$f" || fail "$f missing from the package"
done
dpkg-deb -f "$deb" Package Version Architecture >/dev/null
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = /etc/schedpolicyd/schedpolicyd.conf ] ||
	fail "conffiles does not list /etc/schedpolicyd/schedpolicyd.conf"
step "contents ok"

# 2. lintian: no errors and no warnings beyond the overrides shipped in
# /usr/share/lintian/overrides/schedpolicyd (explained in packaging/README.md).
if command -v lintian >/dev/null 2>&1; then
	rc=0
	# Without DEBEMAIL the package names its builder as user@host (as
	# dch does): on a build host such an address reaches nobody and
	# lintian says so. That is true of a local build and is not this
	# package's fault; a package to publish is built with DEBFULLNAME and
	# DEBEMAIL set (packaging/README.md), and then these tags count.
	sup=""
	[ -n "${DEBEMAIL:-}" ] || sup="--suppress-tags bogus-mail-host,bogus-mail-host-in-debian-changelog,root-in-contact,mail-address-loops-or-bounces"
	lint=$(lintian --fail-on error,warning --tag-display-limit 0 $sup "$deb" 2>&1) || rc=$?
	lint=$(echo "$lint" | grep -v 'running with root privileges is not recommended' || true)
	[ "$rc" = 0 ] || fail "lintian (exit $rc):
$lint"
	[ -z "$lint" ] || echo "$lint"
	step "lintian ok"
else
	fail "lintian is not installed (make deps installs it)"
fi

if [ "${1:-}" != --host-install ]; then
	step "install/purge: in the systemd container (make systemd-test), not on this machine"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	step "SKIP host install/purge: needs root (dpkg -i)"
	exit 0
fi
if dpkg-query -W -f '${Status}' schedpolicyd 2>/dev/null | grep -q 'install ok'; then
	if [ "${SCHEDPOLICYD_DEB_TEST_REPLACE:-0}" != 1 ]; then
		step "SKIP host install/purge: a schedpolicyd package is already installed; set SCHEDPOLICYD_DEB_TEST_REPLACE=1 to replace and purge it"
		exit 0
	fi
else
	for d in /etc/schedpolicyd /var/lib/schedpolicyd; do
		if [ -e "$d" ]; then
			step "SKIP host install/purge: $d exists already (saved choices or cpusets of an earlier run); the purge would remove what this test did not create"
			exit 0
		fi
	done
fi

# 3. Install, and use what was installed.
installed=1
dpkg -i "$deb" >"$out/dpkg-i.log" 2>&1 || { cat "$out/dpkg-i.log" >&2; fail "dpkg -i"; }
step "installed"
files=$(dpkg -L schedpolicyd)
/usr/sbin/schedpolicyd version | grep -q "^schedpolicyd $(dpkg-deb -f "$deb" Version)\$" || fail "schedpolicyd version"
/usr/sbin/schedpolicyd probe >"$out/probe" 2>&1 || { cat "$out/probe" >&2; fail "schedpolicyd probe"; }
grep -q '^power source:' "$out/probe" || fail "probe output: $(cat "$out/probe")"
/usr/sbin/schedpolicyd probe --json | grep -q '"policy"' || fail "probe --json"
/usr/bin/schedpolicyctl --help | grep -q '^Usage: schedpolicyctl' || fail "schedpolicyctl --help"
/usr/bin/schedpolicyctl status --help >/dev/null || fail "schedpolicyctl status --help"
man -w schedpolicyctl >/dev/null 2>&1 && man -w 5 schedpolicyd.conf >/dev/null 2>&1 && man -w 8 schedpolicyd >/dev/null 2>&1 ||
	fail "man pages not found by man -w"
if command -v systemd-analyze >/dev/null 2>&1; then
	# The installed unit, its binary and its man pages, as a user has them.
	v=$(systemd-analyze verify /lib/systemd/system/schedpolicyd.service 2>&1) || fail "systemd-analyze verify: $v"
	[ -z "$v" ] || fail "systemd-analyze verify warned: $v"
	step "systemd-analyze verify ok"
fi
if [ -L /etc/systemd/system/multi-user.target.wants/schedpolicyd.service ]; then
	step "enabled (multi-user.target.wants)"
fi
step "installed binaries work"

# 4. Purge: no file of the package, no state, no enablement left.
dpkg --purge schedpolicyd >"$out/purge.log" 2>&1 || { cat "$out/purge.log" >&2; fail "dpkg --purge"; }
installed=0
if dpkg-query -W -f '${Status}' schedpolicyd 2>/dev/null | grep -q 'installed'; then
	fail "dpkg still knows schedpolicyd: $(dpkg-query -W -f '${Status}' schedpolicyd)"
fi
left=""
for f in $files; do
	# Shared directories (/usr/share/man/man1, /lib -> usr/lib, ...) stay;
	# ours must go.
	case $f in
	*schedpolicyd* | *schedpolicyctl*) ;;
	*) [ -d "$f" ] && continue ;;
	esac
	[ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done
for f in /etc/schedpolicyd /var/lib/schedpolicyd \
	/etc/systemd/system/multi-user.target.wants/schedpolicyd.service \
	/etc/systemd/system/dbus-org.schedpolicyd.SchedPolicy1.service \
	/etc/systemd/system/schedpolicyd.service \
	/var/lib/systemd/deb-systemd-helper-enabled/schedpolicyd.service.dsh-also \
	/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/schedpolicyd.service \
	/var/lib/systemd/deb-systemd-helper-masked/schedpolicyd.service; do
	[ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done
[ -z "$left" ] || fail "left after purge:$left"
step "purged cleanly"
