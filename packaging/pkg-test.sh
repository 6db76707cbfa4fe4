#!/bin/sh
# pkg-test.sh — build the .deb (build-deb.sh), the RPM (build-rpm.sh) and
# the Arch package's pkgdir (the PKGBUILD's build() and package(), run by
# bash without makepkg), and check that the three install the same files
# with the same modes and contents, once the documented path differences
# are mapped (below, one comment each); that the RPM marks the
# configuration %config(noreplace) and carries the systemd scriptlets, and
# the PKGBUILD backs it up; and that rpmlint finds no error in the RPM and
# the spec (packaging/rpm/rpmlint.toml lists what is accepted, and why).
# Run by `make pkg-test` (part of `make test`). Installs nothing.
set -eu

cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/schedpolicyd-pkgtest.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "pkg-test: FAIL: $*" >&2; exit 1; }
step() { echo "pkg-test: $*"; }
for c in dpkg-deb rpmbuild rpm rpm2cpio cpio rpmlint bash; do
	command -v "$c" >/dev/null 2>&1 || fail "$c is not installed (make deps installs it)"
done

# 1. Build the three.
deb=$(packaging/build-deb.sh "$work/deb" | tail -n 1)
step "built $(basename "$deb")"
rpm=$(packaging/build-rpm.sh "$work/rpm" | tail -n 1)
step "built $(basename "$rpm")"
# As makepkg would: the source tarball extracted into $srcdir, build() and
# package() with errexit, each from $srcdir.
tarball=$(packaging/make-tarball.sh "$work/arch" | tail -n 1)
mkdir -p "$work/arch/src" "$work/arch/pkg"
tar -xzf "$tarball" -C "$work/arch/src"
srcdir=$work/arch/src pkgdir=$work/arch/pkg bash -e -c '
	. packaging/arch/PKGBUILD
	cd "$srcdir"; build
	cd "$srcdir"; package' >"$work/arch/makepkg.log" 2>&1 ||
	{ cat "$work/arch/makepkg.log" >&2; fail "PKGBUILD build() or package()"; }
# makepkg's tidy step zipman (gzip -9 -n) compresses the man pages that
# package() installs uncompressed; this test runs package() without makepkg.
find "$work/arch/pkg/usr/share/man" -type f ! -name '*.gz' -exec gzip -9n {} +
step "built the PKGBUILD's pkgdir"

# 2. What each installs: "MODE PATH" (modes from the package's own
# metadata) and "SHA256 PATH" (contents, unpacked) for every file and
# symlink; directories are checked below.
mkdir -p "$work/deb/root" "$work/rpm/root"
dpkg-deb -x "$deb" "$work/deb/root"
(cd "$work/rpm/root" && rpm2cpio "$rpm" | cpio -idm --quiet)
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $1, $6 }' >"$work/deb.modes"
rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm" | grep -v '^d' >"$work/rpm.modes"
(cd "$work/arch/pkg" && find . ! -type d -printf '%M /%P\n') >"$work/arch.modes"
sums() { (cd "$1" && find . ! -type d -printf '%P\n' | LC_ALL=C sort | xargs sha256sum | sed 's|  | /|'); }
sums "$work/deb/root" >"$work/deb.sums"
sums "$work/rpm/root" >"$work/rpm.sums"
sums "$work/arch/pkg" >"$work/arch.sums"

# The path differences, mapped to the RPM's (Fedora's) names. The RPM needs
# none here: on Fedora 42 and later %{_sbindir} is /usr/bin, where
# /usr/sbin is a symlink to bin as on Arch (the arch mapping below).
deb_map() {
	sed \
		`# Debian 12 ships units in /lib/systemd/system; with merged /usr it is /usr/lib/systemd/system.` \
		-e 's| /lib/systemd/system/| /usr/lib/systemd/system/|' \
		`# Debian's zsh reads packaged completions from vendor-completions (site-functions is the admin's).` \
		-e 's| /usr/share/zsh/vendor-completions/| /usr/share/zsh/site-functions/|' \
		`# Debian policy puts the copyright file in the doc directory; RPM (%license) and Arch in /usr/share/licenses/NAME.` \
		-e 's| /usr/share/doc/schedpolicyd/copyright$| /usr/share/licenses/schedpolicyd/copyright|' \
		`# Debian-only: the changelog (the RPM has its %changelog in the header, Arch none).` \
		-e '\| /usr/share/doc/schedpolicyd/changelog\.gz$|d' \
		`# Debian-only: lintian's overrides.` \
		-e '\| /usr/share/lintian/overrides/schedpolicyd$|d'
}
arch_map() {
	sed \
		`# Arch installs no file in /usr/sbin (a symlink to bin there, pacman refuses it): /usr/bin/schedpolicyd is /usr/sbin/schedpolicyd.` \
		-e 's| /usr/bin/schedpolicyd$| /usr/sbin/schedpolicyd|'
}
for k in modes sums; do
	deb_map <"$work/deb.$k" | LC_ALL=C sort >"$work/deb.$k.mapped"
	LC_ALL=C sort "$work/rpm.$k" >"$work/rpm.$k.mapped"
	arch_map <"$work/arch.$k" | LC_ALL=C sort >"$work/arch.$k.mapped"
	for p in deb arch; do
		if ! diff -u "$work/rpm.$k.mapped" "$work/$p.$k.mapped" >"$work/diff" 2>&1; then
			cat "$work/diff" >&2
			fail "the RPM (-) and the $p package (+) differ in their files' $k (after mapping the documented paths)"
		fi
	done
done
[ "$(wc -l <"$work/rpm.modes.mapped")" -ge 13 ] || fail "the RPM lists only $(wc -l <"$work/rpm.modes.mapped") files"
grep -qx -- '-rwxr-xr-x /usr/sbin/schedpolicyd' "$work/rpm.modes.mapped" &&
	grep -qx -- '-rwxr-xr-x /usr/bin/schedpolicyctl' "$work/rpm.modes.mapped" &&
	grep -qx -- '-rw-r--r-- /etc/schedpolicyd/schedpolicyd.conf' "$work/rpm.modes.mapped" ||
	fail "binaries must be 0755 and the configuration 0644: $(cat "$work/rpm.modes.mapped")"
step "the .deb, the RPM and the pkgdir install the same $(wc -l <"$work/rpm.modes.mapped") files, modes and contents"

# 3. The RPM's directories, configuration, version and scriptlets.
rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm" | grep '^d' >"$work/rpm.dirs"
for d in /etc/schedpolicyd /var/lib/schedpolicyd /usr/share/licenses/schedpolicyd; do
	grep -qx "drwxr-xr-x $d" "$work/rpm.dirs" || fail "the RPM does not own $d (0755): $(cat "$work/rpm.dirs")"
done
[ "$(rpm -qp --configfiles "$rpm")" = /etc/schedpolicyd/schedpolicyd.conf ] ||
	fail "rpm --configfiles: $(rpm -qp --configfiles "$rpm")"
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm" | grep -qx 'cn /etc/schedpolicyd/schedpolicyd.conf' ||
	fail "/etc/schedpolicyd/schedpolicyd.conf is not %config(noreplace)"
version=$(dpkg-deb -f "$deb" Version)
[ "$(rpm -qp --qf '%{VERSION}' "$rpm")" = "$version" ] || fail "RPM version $(rpm -qp --qf '%{VERSION}' "$rpm") is not the .deb's $version"
rpm -qp --changelog "$rpm" | head -n 1 | grep -q -- "- $version-" || fail "the spec's %changelog does not start with $version"
rpm -qp --scripts "$rpm" >"$work/scripts"
# Fedora's %systemd_* macros (systemd-update-helper) or the spec's fallbacks.
scriptlet() { awk -v h="$1" '/^[a-z]+ scriptlet/ { on = ($1 == h) } on' "$work/scripts"; }
check_scriptlet() {
	s=$(scriptlet "$1")
	echo "$s" | grep -q 'schedpolicyd\.service' && echo "$s" | grep -Eq "$2" ||
		fail "the $1 scriptlet lacks $2 for schedpolicyd.service:
$(cat "$work/scripts")"
}
check_scriptlet postinstall 'preset|install-system-units'
check_scriptlet preuninstall 'disable|remove-system-units'
check_scriptlet postuninstall 'try-restart|mark-restart-system-units'
step "RPM: directories, %config(noreplace), version $version, systemd scriptlets ok"

# 4. The PKGBUILD: the same version, the configuration in backup=.
arch=$(bash -c '. packaging/arch/PKGBUILD; echo "$pkgver"; printf "%s\n" "${backup[@]}"; echo "$install"')
[ "$(echo "$arch" | sed -n 1p)" = "$version" ] || fail "PKGBUILD pkgver $(echo "$arch" | sed -n 1p) is not $version"
[ "$(echo "$arch" | sed -n '2,$p')" = "etc/schedpolicyd/schedpolicyd.conf
schedpolicyd.install" ] || fail "PKGBUILD backup= and install=: $arch"
bash -n packaging/arch/schedpolicyd.install || fail "bash -n schedpolicyd.install"
step "PKGBUILD: version $version, backup=, install= ok"

# 5. rpmlint: no error in the RPM or the spec; warnings are printed.
rc=0
lint=$(rpmlint -c packaging/rpm/rpmlint.toml "$rpm" packaging/rpm/schedpolicyd.spec 2>&1) || rc=$?
summary=$(echo "$lint" | grep 'packages and .* specfiles checked' || true)
[ "$rc" = 0 ] || fail "rpmlint (exit $rc):
$lint"
echo "$lint" | grep ': [WE]: ' || true
step "rpmlint ok: ${summary# }"
