#!/bin/sh
# Build erofs-utils from Debian trixie's source package into build/erofs-utils/ (fstrace's own prefix).
# Why: bookworm's erofs-utils 1.5 compresses only with lz4/lz4hc and writes no fragments, dedupe or
# all-fragments, so most of the erofs images seed 000 compares cannot be built with it.  Trixie's binary
# package needs glibc 2.38 and does not install on bookworm; its source builds against bookworm's
# liblz4, liblzma, libzstd, libdeflate and zlib.  The system's /usr and apt sources are left alone: the
# trixie deb-src line lives in a private apt configuration under build/erofs-utils-src/apt/, used only here.
# Cached: a no-op when build/erofs-utils/ holds this version built with these flags.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
VERSION=1.8.6
DEBVERSION=1.8.6-1
prefix="$here/build/erofs-utils"
work="$here/build/erofs-utils-src"
# Debian's own configure flags (debian/rules) without FUSE and SELinux, which mkfs/dump do not need
FLAGS="--enable-lzma --enable-multithreading --with-uuid --with-zlib --with-libdeflate --with-libzstd --with-xxhash --without-selinux --disable-fuse"
stamp="$prefix/fstrace-build"
want="erofs-utils $DEBVERSION (Debian trixie source) configure $FLAGS"

if [ -x "$prefix/bin/mkfs.erofs" ] && [ -x "$prefix/bin/dump.erofs" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "fstrace: erofs-utils $VERSION is not built in $prefix (run scripts/setup.sh as root)" >&2
	exit 1
fi
# two setups at once (a run and the tests): one builds, the other waits and then finds it built
if [ -z "${FSTRACE_EROFS_BUILD_LOCKED:-}" ]; then
	mkdir -p "$here/build"
	FSTRACE_EROFS_BUILD_LOCKED=1 exec flock "$here/build/erofs-utils.lock" "$0" "$@"
fi
echo "fstrace: building erofs-utils $VERSION from Debian trixie's source package (once; about a minute)" >&2
t0=$(date +%s)
rm -rf "$work" "$prefix"
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/parts"
# deb-src only, signed by the trixie key that bookworm's debian-archive-keyring already carries
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
	>"$work/apt/sources.list"
cat >"$work/apt/apt.conf" <<EOF
Dir::Etc::SourceList "$work/apt/sources.list";
Dir::Etc::SourceParts "$work/apt/parts";
Dir::State::Lists "$work/apt/lists";
Dir::Cache "$work/apt/cache";
EOF
export APT_CONFIG="$work/apt/apt.conf"
apt-get update -qq >/dev/null
(cd "$work" && apt-get source -qq --download-only "erofs-utils=$DEBVERSION" >/dev/null 2>&1) || {
	echo "fstrace: could not download erofs-utils $DEBVERSION source from Debian trixie" >&2
	exit 1
}
unset APT_CONFIG
# dpkg-source checks the .dsc signature and the tarballs' checksums before unpacking
(cd "$work" && dpkg-source -q -x "erofs-utils_$DEBVERSION.dsc" src >/dev/null 2>&1) || {
	echo "fstrace: erofs-utils $DEBVERSION source did not verify or unpack (dpkg-source -x)" >&2
	exit 1
}
cd "$work/src"
# shellcheck disable=SC2086
{ ./autogen.sh && ./configure --prefix="$prefix" $FLAGS && make -j"$(nproc)" && make install; } >"$work/build.log" 2>&1 || {
	echo "fstrace: erofs-utils build failed, see $work/build.log" >&2
	exit 1
}
got=$("$prefix/bin/mkfs.erofs" --version 2>&1 | head -1)
case "$got" in
*" $VERSION") ;;
*) echo "fstrace: built mkfs.erofs reports '$got', expected $VERSION" >&2; exit 1 ;;
esac
echo "$want" >"$stamp"
echo "fstrace: erofs-utils $VERSION built in $(($(date +%s) - t0)) s into $prefix" >&2
