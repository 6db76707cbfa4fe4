#!/bin/sh
# Build the binary RPM from packaging/rpm/schedpolicyd.spec with rpmbuild
# (Debian's rpm package is enough).
#
#   packaging/build-rpm.sh [OUTDIR]     (default OUTDIR: bin/)
#
# The source tarball is the working tree (packaging/make-tarball.sh), so
# uncommitted changes are packaged, as build-deb.sh packages them. rpmbuild
# runs in a temporary _topdir and builds the binaries in the spec's %build
# offline: `go mod download` fills Go's module cache first (a no-op once
# `make deps` did), then rpmbuild runs with GOPROXY=off and that cache.
# --nodeps: the spec's BuildRequires (golang, systemd-rpm-macros) name
# Fedora packages that rpm's own database on Debian never holds; Go is the
# one on PATH (or /usr/local/go/bin), as for build-deb.sh.
# Prints the path of the .rpm on its last line.
set -eu

cd "$(dirname "$0")/.."
out=${1:-bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH="$PATH:/usr/local/go/bin"
GO=${GO:-go}
command -v rpmbuild >/dev/null 2>&1 || { echo "build-rpm: rpmbuild is not installed (Debian package rpm; make deps installs it)" >&2; exit 1; }

top=$(mktemp -d "${TMPDIR:-/tmp}/schedpolicyd-rpm.XXXXXX")
trap 'rm -rf "$top"' EXIT
mkdir -p "$top/SOURCES" "$top/BUILD" "$top/RPMS" "$top/SRPMS" "$top/SPECS"
packaging/make-tarball.sh "$top/SOURCES" >/dev/null
cp packaging/rpm/schedpolicyd.spec "$top/SPECS/"

"$GO" mod download
# The spec's %build calls `go`: put this one first on PATH.
gobin=$(dirname "$(command -v "$GO")")
epoch=$(date -d "$(sed -n 's/^ -- .*>  //p' packaging/debian/changelog | head -1)" +%s)
if ! PATH="$gobin:$PATH" GOPROXY=off GOFLAGS=-mod=readonly SOURCE_DATE_EPOCH=$epoch \
	rpmbuild -bb --nodeps \
	--define "_topdir $top" \
	--define "use_source_date_epoch_as_buildtime 1" \
	--define "clamp_mtime_to_source_date_epoch 1" \
	"$top/SPECS/schedpolicyd.spec" >"$top/rpmbuild.log" 2>&1; then
	cat "$top/rpmbuild.log" >&2
	echo "build-rpm: rpmbuild failed" >&2
	exit 1
fi

rpm=$(find "$top/RPMS" -name 'schedpolicyd-*.rpm' | head -n 1)
[ -n "$rpm" ] || { cat "$top/rpmbuild.log" >&2; echo "build-rpm: rpmbuild made no .rpm" >&2; exit 1; }
cp "$rpm" "$out/"
echo "$out/$(basename "$rpm")"
