#!/bin/sh
# Build schedpolicyd_VERSION_ARCH.deb with dpkg-deb (no debhelper needed).
#
#   packaging/build-deb.sh [OUTDIR]     (default OUTDIR: bin/)
#
# VERSION is the top entry of packaging/debian/changelog, ARCH is
# `dpkg --print-architecture` (or $GOARCH's Debian name when cross-building).
# Prints the path of the .deb on its last line.
set -eu

cd "$(dirname "$0")/.."
top=$(pwd)
out=${1:-bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH="$PATH:/usr/local/go/bin"
GO=${GO:-go}

version=$(sed -n '1s/^schedpolicyd (\([^)]*\)).*/\1/p' packaging/debian/changelog)
[ -n "$version" ] || { echo "build-deb: no version in packaging/debian/changelog" >&2; exit 1; }
arch=$(dpkg --print-architecture)
# The Maintainer field and the changelog's trailer name whoever builds the
# package, as dch does: DEBFULLNAME and DEBEMAIL, else the builder's user
# at this host. The project has no mailing list, and an address that
# reaches nobody is worse than none.
maintainer="${DEBFULLNAME:-schedpolicyd local build} <${DEBEMAIL:-$(id -un)@$(hostname -f 2>/dev/null || hostname)}>"
case $maintainer in *'|'* | *'
'*) echo "build-deb: DEBFULLNAME or DEBEMAIL holds '|' or a newline" >&2; exit 1 ;; esac

stage=$(mktemp -d "${TMPDIR:-/tmp}/schedpolicyd-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
umask 022

# Binaries: static (CGO_ENABLED=0), reproducible (-trimpath, no build ID,
# no VCS stamp), stripped (-s -w) as Debian policy wants.
ldflags="-s -w -buildid= -X main.version=$version"
for b in schedpolicyd:usr/sbin schedpolicyctl:usr/bin; do
	name=${b%%:*}
	dir=${b#*:}
	mkdir -p "$root/$dir"
	CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$root/$dir/$name" "./cmd/$name"
done

install -D -m 0644 systemd/schedpolicyd.service "$root/lib/systemd/system/schedpolicyd.service"
install -D -m 0644 systemd/50-schedpolicyd-delegate-cpuset.conf "$root/lib/systemd/system/user@.service.d/50-schedpolicyd-delegate-cpuset.conf"
install -D -m 0644 packaging/dbus/org.schedpolicyd.SchedPolicy1.conf "$root/usr/share/dbus-1/system.d/org.schedpolicyd.SchedPolicy1.conf"
install -D -m 0644 packaging/dbus/org.schedpolicyd.SchedPolicy1.service "$root/usr/share/dbus-1/system-services/org.schedpolicyd.SchedPolicy1.service"
install -D -m 0644 packaging/polkit/org.schedpolicyd.policy "$root/usr/share/polkit-1/actions/org.schedpolicyd.policy"
install -D -m 0644 packaging/polkit/org.schedpolicyd.power-profiles.policy "$root/usr/share/polkit-1/actions/org.schedpolicyd.power-profiles.policy"
install -D -m 0644 packaging/schedpolicyd.conf "$root/etc/schedpolicyd/schedpolicyd.conf"
install -D -m 0644 packaging/completions/schedpolicyctl.bash "$root/usr/share/bash-completion/completions/schedpolicyctl"
install -D -m 0644 packaging/completions/_schedpolicyctl "$root/usr/share/zsh/vendor-completions/_schedpolicyctl"
install -D -m 0644 packaging/debian/lintian-overrides "$root/usr/share/lintian/overrides/schedpolicyd"

# Man pages and the changelog, compressed reproducibly (gzip -9n).
for m in packaging/man/*.[0-9]; do
	sec=${m##*.}
	install -D -m 0644 "$m" "$root/usr/share/man/man$sec/$(basename "$m")"
	gzip -9n "$root/usr/share/man/man$sec/$(basename "$m")"
done
doc=$root/usr/share/doc/schedpolicyd
install -D -m 0644 packaging/debian/copyright "$doc/copyright"
# A native package (no Debian revision) ships changelog.gz.
sed "s|@MAINTAINER@|$maintainer|" packaging/debian/changelog >"$doc/changelog"
chmod 0644 "$doc/changelog"
gzip -9n "$doc/changelog"

# Control area.
mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" -e "s|@MAINTAINER@|$maintainer|" \
	packaging/debian/control.in > "$root/DEBIAN/control"
install -m 0644 packaging/debian/conffiles "$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do
	install -m 0755 "packaging/debian/$s" "$root/DEBIAN/$s"
done
(cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print | sed 's|^\./||' | LC_ALL=C sort | xargs md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

# Reproducible timestamps: the changelog date.
epoch=$(date -d "$(sed -n 's/^ -- .*  //p' packaging/debian/changelog | head -1)" +%s)
find "$root" -exec touch -h -d "@$epoch" {} +

deb=$out/schedpolicyd_${version}_${arch}.deb
SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
