#!/bin/sh
# Install what fstrace needs (Debian bookworm packages) and build it. Idempotent: a no-op when all is there.
# Why not bcc/python3-bcc: bcc compiles its BPF C against kernel headers on the target at every start;
# fstrace's CO-RE objects are compiled once and relocated by libbpf on any kernel with BTF.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)

PKGS="make gcc clang llvm libbpf-dev libelf-dev zlib1g-dev libzstd-dev bpftool
      fio erofs-utils squashfs-tools btrfs-progs xfsprogs e2fsprogs util-linux tar lz4
      python3 python3-numpy python3-matplotlib"
# --test: what only the tests need (pytest; QEMU, busybox, kmod and cpio for the Debian 6.1 kernel test;
# headless Chromium and PIL to check the HTML report renders)
if [ "${1:-}" = "--test" ]; then
	PKGS="$PKGS python3-pytest qemu-system-x86 busybox-static kmod cpio chromium python3-pil"
fi

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "fstrace: missing packages:$missing (run as root to install them)" >&2
		exit 1
	fi
	echo "fstrace: installing:$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

make -s -C "$here" >&2
