#!/bin/sh
# Install what fstrace needs (Debian bookworm packages) and build it. Idempotent: a no-op when all is there.
# Why not bcc/python3-bcc: bcc compiles its BPF C against kernel headers on the target at every start;
# fstrace's CO-RE objects are compiled once and relocated by libbpf on any kernel with BTF.
#
#   setup.sh [PART...]   PART: collector, workloads, cli, numpy, plots, analysis (cli numpy plots), unit (the
#                        analysis and what the unit test lane needs), cross-arm64 (`make ARCH=arm64`), test;
#                        none: collector workloads analysis
#   setup.sh --test      all of them (the test command)
# so that `fstrace attach` on a production box installs no fio, mkfs tools or test tools, and `fstrace serve`
# no numpy or matplotlib either (see ./fstrace).
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)

# building and running the collector (libc6-dev comes with gcc: its libc.a is part of the static link)
COLLECTOR="make gcc clang llvm libbpf-dev libelf-dev zlib1g-dev libzstd-dev libjson-c-dev bpftool"
# building images and running the standard workloads on them
WORKLOADS="fio erofs-utils squashfs-tools btrfs-progs xfsprogs e2fsprogs util-linux tar lz4"
# the command line itself (serve needs nothing more); summaries and reports (numpy: the results reader, the
# summary, the timeline); the figures of the HTML reports every run, attach and bench writes (matplotlib:
# analysis/plots.py only); python3-venv for build/venv (below), which the timeline's writer needs
CLI="python3"
NUMPY="python3-numpy python3-venv"
PLOTS="python3-matplotlib"
# The timeline's writer (analysis/timeline.py): the perfetto package's trace protos and streaming builder, and
# the recent protobuf they need (Debian's is older), pinned, from PyPI into the project's own virtual
# environment over Debian's Python (--system-site-packages: numpy, matplotlib, pytest stay Debian's).
# ./fstrace and scripts/test.sh run build/venv/bin/python3 when it is there.
VENV_PACKAGES="perfetto==0.59.1 protobuf==7.36.2"
# only the tests: pytest; QEMU (x86 and arm), busybox, kmod and cpio for the Debian kernel guests (tests/test_vm.py); headless Chromium
# and PIL to check the HTML report renders; strace to see that bad collector options load nothing; prometheus
# (the server and promtool) to scrape fstrace serve and lint its exposition (where systemd runs, Debian also
# starts its own prometheus service on :9090; the tests start theirs on 127.0.0.1 and never use that one);
# python3-prometheus-client (0.16 in bookworm) for its OpenMetrics parser, which validates serve's OpenMetrics text;
# groff-base and man-db to render the manual pages (man/) as tests/test_docs.py checks them
# building erofs-utils 1.8.6 from Debian trixie's source (scripts/build-erofs-utils.sh, part of workloads)
EROFS_BUILD="dpkg-dev autoconf automake libtool pkg-config make gcc liblz4-dev liblzma-dev libzstd-dev libdeflate-dev zlib1g-dev uuid-dev libxxhash-dev"
# the unit test lane (tests on stored results and the documentation, as any user): pytest, groff-base and man-db
# to render the manual pages (man/) as tests/test_docs.py checks them, clang-format (14) for the C style check, gcc,
# make and libcmocka-dev for the collector's C unit tests (tests/c/, make test-c)
UNIT="python3-pytest groff-base man-db clang-format gcc make libcmocka-dev"
# The Python linter the unit lane runs (tests/test_style.py; its configuration: ruff.toml), pinned, from PyPI into
# a virtual environment of its own, build/lint (the tests', not the command line's)
LINT_PACKAGES="ruff==0.17.6"
# Slurm's controller and node daemons, its client commands and munge (its authentication): the test of bench's Slurm
# job array (tests/test_shards.py) starts them as its own processes on this machine, with a slurm.conf of its own
SLURM="slurmctld slurmd slurm-client munge"
# python3-websocket: the tests drive headless Chromium over its DevTools protocol (click, type, read back);
# python3-jsonschema: they check exported profiles against the viewer's own schema; python3-pyfuse3: the FUSE file
# whose reads the block tests hold or cut short (tests/slow_disk.py); libbpf-tools: the overhead bench's
# biolatency, which a test interrupts as it runs; debhelper and dh-python build the Debian package (make deb) and
# debootstrap the minimal bookworm root tests/test_deb.py installs it into; systemd for systemd-analyze, which
# checks serve's unit; qemu-user-static runs the arm64 package's collector (tests/test_deb.py)
TEST="$UNIT qemu-system-x86 qemu-system-arm busybox-static kmod cpio chromium python3-pil strace prometheus python3-prometheus-client python3-websocket python3-jsonschema python3-pyfuse3 libbpf-tools debhelper dh-python debootstrap systemd qemu-user-static $SLURM"
# cross-building the collector for arm64 (`make ARCH=arm64`, into build/arm64/): Debian's cross compiler and the
# arm64 static libraries it links (multiarch :arm64 packages; the part adds the architecture to dpkg); the vm test
# lane boots arm64 guests with it under qemu-system-aarch64 (in qemu-system-arm)
CROSS_ARM64="gcc-aarch64-linux-gnu libbpf-dev:arm64 libelf-dev:arm64 zlib1g-dev:arm64 libzstd-dev:arm64 libjson-c-dev:arm64"
# kubernetes-validate validates bench's Kubernetes Indexed Job (scripts/k8s-bench-job.yaml) against the
# Kubernetes API's own schemas, which it ships (no cluster, no network), pinned, into build/k8s (the unit lane's)
K8S_PACKAGES="kubernetes-validate==1.37.0"
# The speedscope viewer the tests open exported profiles in, pinned, from the npm registry into build/speedscope
# (npm from Debian's nodejs and npm packages where no npm is installed yet)
SPEEDSCOPE="speedscope@1.25.0"

if [ "${1:-}" = "--test" ]; then
	set -- collector workloads analysis test cross-arm64
elif [ $# -eq 0 ]; then
	set -- collector workloads analysis
fi
PKGS="" build="" erofs="" venv="" viewer="" lint="" k8s="" cross=""
for part in "$@"; do
	case "$part" in
	collector) PKGS="$PKGS $COLLECTOR" build=1 ;;
	workloads) PKGS="$PKGS $WORKLOADS $EROFS_BUILD" erofs=1 ;;
	cli) PKGS="$PKGS $CLI" ;;
	numpy) PKGS="$PKGS $CLI $NUMPY" venv=1 ;;
	plots | analysis) PKGS="$PKGS $CLI $NUMPY $PLOTS" venv=1 ;;  # plots.py draws numpy arrays
	unit) PKGS="$PKGS $CLI $NUMPY $PLOTS $UNIT" venv=1 lint=1 k8s=1 ;;
	test) PKGS="$PKGS $TEST" viewer=1 lint=1 k8s=1 ;;
	cross-arm64) PKGS="$PKGS $COLLECTOR $CROSS_ARM64" cross=arm64 ;;
	*) echo "setup.sh: unknown part '$part' (collector, workloads, cli, numpy, plots, analysis, unit, cross-arm64, test or --test)" >&2
		exit 2 ;;
	esac
done

if [ -n "$viewer" ] && ! command -v npm >/dev/null 2>&1; then
	PKGS="$PKGS nodejs npm"
fi
missing=""
for p in $PKGS; do
	case " $missing " in *" $p "*) continue ;; esac  # parts share packages (numpy and plots: python3)
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "fstrace: missing packages:$missing (run as root to install them)" >&2
		exit 1
	fi
	echo "fstrace: installing:$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	case "$missing" in *:arm64*)
		dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64 ;;
	esac
	apt-get update -qq >/dev/null
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ -n "$build" ]; then
	make -s -C "$here" >&2
fi
if [ -n "$cross" ]; then
	make -s -C "$here" ARCH="$cross" >&2
fi
if [ -n "$erofs" ]; then
	"$here/scripts/build-erofs-utils.sh"
fi
# build/$1 holds the pinned packages $2 (its fstrace-packages file says which) or is made by the command after them
pinned() {
	dir=$1 want=$2
	shift 2
	[ "$(cat "$here/build/$dir/fstrace-packages" 2>/dev/null)" = "$want" ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "fstrace: build/$dir is missing or out of date (run as root to make it)" >&2
		exit 1
	fi
	echo "fstrace: making build/$dir: $want" >&2
	mkdir -p "$here/build/$dir"
	"$@"
	echo "$want" > "$here/build/$dir/fstrace-packages"
}
make_venv() {
	/usr/bin/python3 -m venv --system-site-packages "$here/build/venv"
	# shellcheck disable=SC2086
	"$here/build/venv/bin/pip" install -q --disable-pip-version-check $VENV_PACKAGES >&2
}
make_lint() {
	/usr/bin/python3 -m venv "$here/build/lint"
	# shellcheck disable=SC2086
	"$here/build/lint/bin/pip" install -q --disable-pip-version-check $LINT_PACKAGES >&2
}
make_k8s() {
	/usr/bin/python3 -m venv "$here/build/k8s"
	# shellcheck disable=SC2086
	"$here/build/k8s/bin/pip" install -q --disable-pip-version-check $K8S_PACKAGES >&2
}
if [ -n "$venv" ]; then
	pinned venv "$VENV_PACKAGES" make_venv
fi
if [ -n "$lint" ]; then
	pinned lint "$LINT_PACKAGES" make_lint
fi
if [ -n "$k8s" ]; then
	pinned k8s "$K8S_PACKAGES" make_k8s
fi
if [ -n "$viewer" ]; then
	pinned speedscope "$SPEEDSCOPE" npm install --prefix "$here/build/speedscope" --no-save --no-package-lock \
		--no-audit --no-fund --ignore-scripts --loglevel=error "$SPEEDSCOPE" >&2
fi
