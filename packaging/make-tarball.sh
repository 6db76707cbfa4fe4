#!/bin/sh
# Make the source tarball the RPM spec and the PKGBUILD build from:
#
#   packaging/make-tarball.sh [OUTDIR]     (default OUTDIR: bin/)
#
# OUTDIR/schedpolicyd-VERSION.tar.gz holds the working tree as it is (so
# uncommitted changes are packaged, as build-deb.sh packages them) under
# schedpolicyd-VERSION/, the layout of a GitHub tag archive: in a git
# checkout the tracked files and the untracked ones git does not ignore
# (bin/ is ignored), elsewhere everything but bin/ and .git. VERSION is the
# top entry of packaging/debian/changelog; owners, order and file times (the
# changelog date) are fixed, so the same tree gives the same tarball.
# Prints the path of the tarball on its last line.
set -eu

cd "$(dirname "$0")/.."
out=${1:-bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(sed -n '1s/^schedpolicyd (\([^)]*\)).*/\1/p' packaging/debian/changelog)
[ -n "$version" ] || { echo "make-tarball: no version in packaging/debian/changelog" >&2; exit 1; }
epoch=$(date -d "$(sed -n 's/^ -- .*>  //p' packaging/debian/changelog | head -1)" +%s)
name=schedpolicyd-$version

list=$(mktemp "${TMPDIR:-/tmp}/schedpolicyd-tarball.XXXXXX")
trap 'rm -f "$list"' EXIT
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# A tracked file deleted in the working tree is not packaged.
	git ls-files -z --cached --others --exclude-standard |
		xargs -0 -r sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\n" "$f"; done' sh >"$list"
else
	find . \( -path ./bin -o -path ./.git \) -prune -o ! -type d -print | sed 's|^\./||' >"$list"
fi
LC_ALL=C sort -u -o "$list" "$list"

tarball=$out/$name.tar.gz
tar --create --no-recursion --verbatim-files-from --files-from="$list" \
	--transform "s|^|$name/|" --sort=name --owner=0 --group=0 --numeric-owner \
	--mtime="@$epoch" --mode='u+rw,go+r,go-w' |
	gzip -9n >"$tarball"
echo "$tarball"
