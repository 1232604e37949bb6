"""Prove the fentry tier and its kprobe twins on real Debian kernels, under QEMU (KVM when it boots, else TCG).

For each kernel of a list (default: bullseye's 5.10, bookworm's 6.1 and bookworm-backports' 6.12) the host
downloads the unsigned image package with apt-get download (a private apt configuration for suites the system does not
list; cached), builds a busybox initramfs with the modules the test needs and the static collector, and boots
it with small erofs, squashfs and btrfs images as virtio disks.  Inside, the collector traces reads of every
image twice: with fentry allowed, then with --no-fentry (the kprobe twins); then fio's random reads and a tree
walk on one image per filesystem with the requests bounded at the filesystem's entry points by fentry, by kprobes
and by the syscall tracepoints (--syscall-boundaries), with bpf_stats on; then what getppid and preads cost a
task fstrace does not trace, with nothing attached and with each of fentry and the syscall tracepoints bounding
another process's requests; then fio's random reads of one file alone on each squashfs image (the device bytes
around the blocks read).  Results come back as a tar on a raw virtio disk; the host extracts them and checks
them (tests/test_vm.py asserts on the same checks) and prints the figures.  The arm64 kernels (6.1-arm64,
6.12-arm64) boot under qemu-system-aarch64 with the collector `make ARCH=arm64` cross-builds and arm64's fio and
busybox, and run the request bounds and the scattered reads only (STEPS; docs/vmtest.md says why).

Usage, from the checkout's root:
  python3 -m scripts.vmtest [--kernels 5.10,6.1,6.12,6.1-arm64,6.12-arm64] [--smp 2] [--accel auto|kvm|tcg]
                            [--cache DIR] [--keep]
"""
import argparse
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

from analysis import caches, devices, probes, requests, results, sampling, selection, timeline
from cli.runner import COLLECTOR
from cli.serve import COLLECTOR_OPTIONS as SERVE_OPTIONS
from common import machine
from workloads import dataset, images

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODULES = ["virtio_pci", "virtio_blk", "loop", "erofs", "squashfs", "btrfs"]
# (disk, filesystem, build options, mount type); decompression algorithm expected in the records
IMAGES = [
    ("erofs", "erofs", {"compress": "lz4hc", "cluster": 4096}, "lz4"),
    ("sqxz", "squashfs", {"compress": "xz", "block": 131072}, "xz"),
    ("sqlz4", "squashfs", {"compress": "lz4", "block": 16384}, "lz4"),
    ("btrfs", "btrfs", {"compress": "zstd:1"}, "zstd"),
]
# erofs's other algorithms: a disk for each that the host's mkfs.erofs offers (bookworm's 1.5 offers only lz4 and
# lz4hc; a newer erofs-utils adds them without a change here) and the guest kernel was built with
# (CONFIG_EROFS_FS_ZIP_<ALG>); the cluster is larger since these compress whole pclusters of several pages
EROFS_MORE = [("erofs-" + a, "erofs", {"compress": a, "cluster": 16384}, a) for a in ("lzma", "deflate", "zstd")]
# Debian kernels the matrix runs: name -> (apt suite, package pattern with the ABI/patch number as group 1); the
# package's Debian architecture (amd64, arm64) is the guest's (kernel_arch)
KERNELS = {
    "5.10": ("bullseye", r"linux-image-5\.10\.0-(\d+)-amd64-unsigned"),
    "6.1": ("bookworm", r"linux-image-6\.1\.0-(\d+)-amd64-unsigned"),
    "6.12": ("bookworm-backports", r"linux-image-6\.12\.(\d+)\+deb12-amd64-unsigned"),
    "6.1-arm64": ("bookworm", r"linux-image-6\.1\.0-(\d+)-arm64-unsigned"),
    "6.12-arm64": ("bookworm-backports", r"linux-image-6\.12\.(\d+)\+deb12-arm64-unsigned"),
}
# (disk, source image): the source's files copied onto an empty btrfs mounted with compress=zstd:1
WRITES = [("bw", "sqxz")]
# What a guest of each Debian architecture boots with: bpf/'s __TARGET_ARCH_ name (syscall numbers), the GNU
# triplet of its library directories, the QEMU command and machine, its serial console, the C compiler of its
# static programs and its collector (an arm64 one cross-built by `make ARCH=arm64`, scripts/setup.sh cross-arm64)
ARCHES = {
    "amd64": {"bpf": "x86", "gnu": "x86_64-linux-gnu", "qemu": ["qemu-system-x86_64"], "console": "ttyS0",
              "cc": "cc", "collector": COLLECTOR},
    "arm64": {"bpf": "arm64", "gnu": "aarch64-linux-gnu", "qemu": ["qemu-system-aarch64", "-M", "virt"],
              "console": "ttyAMA0", "cc": "aarch64-linux-gnu-gcc",
              "collector": os.path.join(ROOT, "build", "arm64", "fstrace-collect")},
}
HOST_ARCH = "amd64"  # the lane runs on x86-64 hosts: its own fio and busybox go into amd64 guests as they are
# The guest steps (GUEST_INIT's functions) each architecture's guest runs. arm64 guests run under TCG on an x86
# host, and the x86 guests take most of CI's budget for the lane already (docs/vmtest.md has the times): they run
# the request checks (fio's count and bytes, parts adding up to wall, on every tier the kernel offers) and fio's
# scattered reads alone on squashfs (whose results the host's fstrace report reads), not the cold reads of every
# image, the writes or the cost step, whose probes are the same C on every architecture and proven on x86.
ALL_STEPS = ("run", "write", "bounds", "scattered", "cost")
STEPS = {"amd64": ALL_STEPS, "arm64": ("bounds", "scattered")}


def kernel_arch(name):
    """The Debian architecture of the matrix's kernel name (its package's): the guest's."""
    return re.search(r"-(amd64|arm64)-", KERNELS[name][1]).group(1)


def timeline_slices(res):
    """(tracks, slices) of the run's timeline, written and read back (analysis/timeline.py)."""
    with tempfile.NamedTemporaryFile(suffix=".pftrace") as f:
        timeline.write(res, f.name)
        return timeline.read(f.name)


def log(msg):
    print("vmtest: " + msg, file=sys.stderr, flush=True)


def apt_options(cache, suite, arch=HOST_ARCH):
    """apt-get/apt-cache options reading a private source list for suite (its own lists and archive cache under
    cache), so a suite the system does not list (bookworm-backports) is searched without touching the system's
    apt configuration; for another architecture than the host's, that architecture's packages alone."""
    d = os.path.join(cache, "apt-" + suite + ("" if arch == HOST_ARCH else "-" + arch))
    for sub in ("lists/partial", "archives/partial", "preferences.d"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    with open(os.path.join(d, "sources.list"), "w") as f:
        f.write("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n"
                % suite)
    opts = {"Dir::Etc::SourceList": os.path.join(d, "sources.list"), "Dir::Etc::SourceParts": "/dev/null",
            "Dir::State::Lists": os.path.join(d, "lists"), "Dir::Cache": d, "Dir::Cache::Archives": d + "/archives",
            "Dir::Etc::Preferences": "/dev/null", "Dir::Etc::PreferencesParts": os.path.join(d, "preferences.d")}
    if arch != HOST_ARCH:  # and none installed: an :arm64 library the host has from elsewhere is no candidate
        opts.update({"APT::Architecture": arch, "APT::Architectures": arch, "Dir::State::status": "/dev/null"})
    return sum((["-o", "%s=%s" % kv] for kv in opts.items()), []), os.path.join(d, "lists")


def kernel(cache, name):
    """Unpacked Debian kernel package of the matrix's kernel name: (vmlinuz, modules dir)."""
    suite, pattern = KERNELS[name]
    opts, lists = apt_options(cache, suite, kernel_arch(name))

    def search():
        names = "^%s$" % pattern.replace(r"\d", "[0-9]")
        out = subprocess.run(["apt-cache"] + opts + ["search", "--names-only", names],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        return sorted(re.findall(r"^(%s)" % pattern, out, re.M), key=lambda x: int(x[1]))

    cached = sorted(glob.glob(os.path.join(cache, "linux-image-*-unsigned")))
    cached = [c for c in cached if re.fullmatch(pattern, os.path.basename(c))]
    names = search() if glob.glob(os.path.join(lists, "*Packages*")) else []
    if not names and not cached:  # this suite's lists never fetched
        subprocess.run(["apt-get"] + opts + ["update", "-qq"], check=True, stdout=subprocess.DEVNULL)
        names = search()
    if not names and cached:
        names = [(os.path.basename(cached[-1]), "0")]
    if not names:
        raise SystemExit("vmtest: no %s in %s's apt lists" % (pattern.replace("\\", ""), suite))
    pkg = names[-1][0]
    d = os.path.join(cache, pkg)
    if not os.path.isdir(d):
        log("downloading %s from %s" % (pkg, suite))
        tmp = tempfile.mkdtemp(dir=cache)
        subprocess.run(["apt-get"] + opts + ["download", pkg], cwd=tmp, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        deb = glob.glob(os.path.join(tmp, "*.deb"))[0]
        subprocess.run(["dpkg-deb", "-x", deb, tmp + "/x"], check=True)
        os.rename(tmp + "/x", d)
        shutil.rmtree(tmp)
    vmlinuz = glob.glob(os.path.join(d, "boot", "vmlinuz-*"))[0]
    moddir = glob.glob(os.path.join(d, "lib", "modules", "*"))[0]
    return vmlinuz, moddir


def guest_userland(cache, arch, suite="bookworm"):
    """For a guest of another architecture than the host's: a directory with that architecture's fio,
    busybox-static and the packages of the libraries fio links (the packages of the host's fio's libraries, the
    same Debian release), downloaded with apt-get download through the private apt configuration and unpacked
    with dpkg-deb -x (cached).  None for the host's architecture (its own fio and busybox go in)."""
    if arch == HOST_ARCH:
        return None
    fio = shutil.which("fio")
    ldd = subprocess.run(["ldd", fio], stdout=subprocess.PIPE, text=True, check=True).stdout
    # each library by the path ldd gives and its real path, each also without /usr (merged /usr: a package's
    # path may be either)
    real = {p for x in [fio] + re.findall(r"(/\S+) \(0x", ldd) for p in (x, os.path.realpath(x))}
    owners = subprocess.run(["dpkg", "-S"] + sorted(real | {p[4:] for p in real if p.startswith("/usr/")}),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    pkgs = sorted({l.split(":")[0].split(",")[0] for l in owners.splitlines() if ":" in l} | {"busybox-static", "fio"})
    d = os.path.join(cache, "userland-%s-%s" % (arch, suite))
    if os.path.exists(os.path.join(d, "packages")) and open(os.path.join(d, "packages")).read().split() == pkgs:
        return d
    opts, lists = apt_options(cache, suite, arch)
    if not glob.glob(os.path.join(lists, "*Packages*")):
        subprocess.run(["apt-get"] + opts + ["update", "-qq"], check=True, stdout=subprocess.DEVNULL)
    log("downloading %d %s packages (fio, busybox-static, fio's libraries) from %s" % (len(pkgs), arch, suite))
    tmp = tempfile.mkdtemp(dir=cache)
    subprocess.run(["apt-get"] + opts + ["download"] + pkgs, cwd=tmp, check=True, stdout=subprocess.DEVNULL)
    for deb in glob.glob(os.path.join(tmp, "*.deb")):
        subprocess.run(["dpkg-deb", "-x", deb, os.path.join(tmp, "root")], check=True)
    with open(os.path.join(tmp, "root", "packages"), "w") as f:
        f.write("\n".join(pkgs) + "\n")
    shutil.rmtree(d, ignore_errors=True)
    os.rename(os.path.join(tmp, "root"), d)
    shutil.rmtree(tmp)
    return d


def in_root(root, path):
    """path (absolute, as the guest sees it) inside root, its symbolic links followed inside root too."""
    for _ in range(40):
        full = os.path.join(root, path.lstrip("/"))
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):  # the first link on the way, resolved against root
            p = os.path.join(root, *parts[:i])
            if os.path.islink(p):
                target = os.readlink(p)
                base = "/" + "/".join(parts[:i - 1])
                path = os.path.normpath(os.path.join(base, target) if not target.startswith("/") else target)
                path = "/".join([path] + parts[i:])
                break
        else:
            return full
    raise SystemExit("vmtest: a link loop at %s in %s" % (path, root))


def needed_libraries(root, binary, triplet):
    """The guest paths of the shared libraries binary needs (DT_NEEDED, recursively, with the dynamic loader), found
    in root where the guest's loader looks: its multiarch directories and the RUNPATH of the object needing it."""
    found, todo = {}, [binary]
    while todo:
        path = todo.pop()
        dyn = subprocess.run(["readelf", "-dl", in_root(root, path)], stdout=subprocess.PIPE, text=True,
                             check=True).stdout
        interp = re.findall(r"Requesting program interpreter: (\S+)\]", dyn)
        dirs = [d for r in re.findall(r"R(?:UN)?PATH\).*\[(.*)\]", dyn) for d in r.split(":")]
        dirs += ["/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"]
        for soname in re.findall(r"\(NEEDED\).*\[(.*)\]", dyn):
            if soname in found:
                continue
            where = [os.path.join(d, soname) for d in dirs if os.path.exists(in_root(root, os.path.join(d, soname)))]
            if not where:
                raise SystemExit("vmtest: %s needs %s, not in %s's packages" % (path, soname, root))
            found[soname] = where[0]
            todo.append(where[0])
        for i in interp:
            found.setdefault(i, i)
    return sorted(found.values())


def kernel_config(vmlinuz):
    """The kernel's build options (config-<version> next to vmlinuz), as a dict."""
    path = os.path.join(os.path.dirname(vmlinuz), os.path.basename(vmlinuz).replace("vmlinuz-", "config-"))
    with open(path) as f:
        return dict(l.strip().split("=", 1) for l in f if "=" in l and not l.startswith("#"))


def kver_tuple(kver):
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", kver).groups())


def module_order(moddir, wanted):
    """Module files in load order, dependencies and soft dependencies first (depmod + modprobe, as the
    distribution resolves them); modules built into the kernel are skipped."""
    base, version = os.path.dirname(os.path.dirname(os.path.dirname(moddir))), os.path.basename(moddir)
    subprocess.run(["depmod", "-b", base, version], check=True)
    order = []
    for m in wanted:
        out = subprocess.run(["modprobe", "-d", base, "-S", version, "--show-depends", m], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        for line in out.stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["insmod"] and parts[1] not in order:
                order.append(parts[1])
    return order


GUEST_INIT = r"""#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
mount -t tmpfs tmp /tmp
for m in $(cat /modules.order); do insmod /modules/$m || echo "vmguest: insmod $m failed"; done
sleep 1
mkdir -p /out
collect() {  # the collector; with MODE none or churn only the command after "--" (the same guest without fstrace)
    if [ "$MODE" = fstrace ]; then /fstrace-collect "$@"; return $?; fi
    while [ "$1" != -- ]; do shift; done
    shift
    "$@"
}
churn() {  # a minimal BPF attach and detach, over and over (the block tracepoints only), beside the workloads
    i=0
    while [ $i -lt $1 ]; do
        /fstrace-collect --block-only -o /tmp/churn.fst -- true 2>/dev/null || echo "vmguest: churn $i failed"
        i=$((i + 1))
        [ $((i % 5)) = 0 ] && echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: churn: $i cycles"
    done
    echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: churn: $i attach/detach cycles"
}
run() {  # name disk fstype: every file read cold, once per tier, each on a fresh mount (squashfs's caches too)
    mkdir -p /mnt/$1
    dev=$(cat /sys/block/$2/dev)
    for mode in fentry kprobe; do
        flag=""; [ $mode = kprobe ] && flag=--no-fentry
        echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: reading $1 ($mode)"
        mount -t $3 -o ro /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
        echo 3 > /proc/sys/vm/drop_caches
        collect $flag --sample-hz 4999 -o /out/$1-$mode.fst -d $dev:4096 -- \
            sh -c "find /mnt/$1 -type f -exec cat {} + > /dev/null" \
            2>> /out/collector.log || echo "vmguest: collector $1 $mode failed" >> /out/collector.log
        umount /mnt/$1
    done
}
sdev_of() {  # the collector's --sdev of a mount: its superblock's device, and the one stat() reports where it differs
    sb=$(grep " $1 " /proc/self/mountinfo | cut -d' ' -f3)
    st=$(stat -c %d $1)
    st="$(( (st >> 8) & 0xfff )):$(( (st & 0xff) | ((st >> 12) & 0xfff00) ))"
    if [ "$st" = "$sb" ]; then echo $sb; else echo "$sb=$st"; fi
}
tier_flag() {  # what bounds the requests: fentry (the default where the kernel allows), kprobe, syscall
    case $1 in kprobe) echo --no-fentry;; syscall) echo --syscall-boundaries;; esac
}
bounds() {  # name disk fstype file: fio 4 KiB random reads of file, a listing and a cat of the tree, cold, with the
            # requests bounded by each tier in turn (bpf_stats on: each program's run time)
    mkdir -p /mnt/$1
    dev=$(cat /sys/block/$2/dev)
    mount -t $3 -o ro /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
    sdev=$(sdev_of /mnt/$1)
    for mode in fentry kprobe syscall; do
        echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: bounds $1 ($mode)"
        echo 3 > /proc/sys/vm/drop_caches
        echo 1 > /proc/sys/kernel/bpf_stats_enabled
        collect $(tier_flag $mode) --records all -o /out/bounds-$1-$mode.fst -d $dev:4096 --sdev $sdev -- sh -c \
            "fio --name=bounds --filename=/mnt/$1/$4 --rw=randread --bs=4k --ioengine=psync --readonly --invalidate=0 \
             --randseed=1234 --io_size=1m --thread --output-format=json --output=/out/bounds-$1-$mode-fio.json &&
             ls -lR /mnt/$1 > /dev/null && find /mnt/$1 -type f -exec cat {} + > /dev/null" \
            2>> /out/collector.log || echo "vmguest: collector bounds $1 $mode failed" >> /out/collector.log
        echo 0 > /proc/sys/kernel/bpf_stats_enabled
    done
    umount /mnt/$1
}
scattered() {  # name disk fstype file: fio's 4 KiB random reads of one file alone, cold: the device reads around
               # each block squashfs reads, with few of its neighbours read
    mkdir -p /mnt/$1
    dev=$(cat /sys/block/$2/dev)
    mount -t $3 -o ro /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
    echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: scattered reads $1"
    echo 3 > /proc/sys/vm/drop_caches
    collect --records all -o /out/scattered-$1.fst -d $dev:4096 --sdev $(sdev_of /mnt/$1) -- \
        fio --name=scattered --filename=/mnt/$1/$4 --rw=randread --bs=4k --ioengine=psync --readonly \
            --invalidate=0 --randseed=4321 --io_size=256k --thread --output-format=json \
            --output=/out/scattered-$1-fio.json 2>> /out/collector.log \
        || echo "vmguest: collector scattered $1 failed" >> /out/collector.log
    umount /mnt/$1
    # the same reads under serve's options ($SERVE_OPTS, --records none), on a fresh mount (squashfs's caches
    # empty): which probes it leaves unloaded, and what it counts
    mount -t $3 -o ro /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
    echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: scattered reads $1 (serve's options)"
    echo 3 > /proc/sys/vm/drop_caches
    collect $SERVE_OPTS -o /out/scattered-$1-serve.fst -d $dev:4096 --sdev $(sdev_of /mnt/$1) -- \
        fio --name=scattered --filename=/mnt/$1/$4 --rw=randread --bs=4k --ioengine=psync --readonly \
            --invalidate=0 --randseed=4321 --io_size=256k --thread --output-format=json \
            --output=/out/scattered-$1-serve-fio.json 2>> /out/collector.log \
        || echo "vmguest: collector scattered $1 serve failed" >> /out/collector.log
    umount /mnt/$1
}
COST_ARGS="-n 5000 -p 500 -r 61"  # short batches (under TCG each pread is slow), the least disturbed kept
cost() {  # name disk fstype file: what getppid and 4 KiB preads (of a tmpfs copy of file, and of file) cost an
          # untraced task: with nothing attached (before and after, the noise), and with fentry and with the
          # syscall tracepoints bounding a sleeping process's requests
    mkdir -p /mnt/$1
    dev=$(cat /sys/block/$2/dev)
    mount -t $3 -o ro /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
    sdev=$(sdev_of /mnt/$1)
    cp /mnt/$1/$4 /tmp/cost-file
    for mode in none fentry syscall none-after; do
        case $mode in none*)
            echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: cost ($mode: nothing attached)"
            /syscall-cost $COST_ARGS /tmp/cost-file /mnt/$1/$4 > /out/cost-$mode.txt
            continue;;
        esac
        echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: cost ($mode)"
        sleep 600 &
        spid=$!
        rm -f /tmp/ready && mkfifo /tmp/ready
        /fstrace-collect $(tier_flag $mode) -o /out/cost-$mode.fst -d $dev:4096 --sdev $sdev --pid $spid \
            --ready-fd 3 3> /tmp/ready 2>> /out/collector.log &
        cpid=$!
        read ready < /tmp/ready
        /syscall-cost $COST_ARGS /tmp/cost-file /mnt/$1/$4 > /out/cost-$mode.txt
        kill $spid
        wait $cpid || echo "vmguest: collector cost $mode failed" >> /out/collector.log
    done
    umount /mnt/$1
}
write() {  # name disk srcdisk srcfs: seed 004's cp -a && sync onto an empty btrfs mounted with compress=zstd:1
    mkdir -p /mnt/$1 /mnt/$1-src
    dev=$(cat /sys/block/$2/dev)
    mount -t $4 -o ro /dev/$3 /mnt/$1-src || { echo "vmguest: mount $1 source failed"; return; }
    mount -t btrfs -o compress=zstd:1 /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
    for mode in fentry kprobe; do
        flag=""; [ $mode = kprobe ] && flag=--no-fentry
        echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: writing $1 ($mode)"
        collect $flag -o /out/$1-$mode.fst -d $dev:4096 -- sh -c "cp -a /mnt/$1-src/. /mnt/$1/$mode && sync" \
            2>> /out/collector.log || echo "vmguest: collector $1 $mode failed" >> /out/collector.log
    done
    umount /mnt/$1 /mnt/$1-src
}
"""


# what the guest runs around the workloads: fstrace (the test), none (the same workloads with no BPF at all) or
# churn (no fstrace tracing, but a block-only collector attached and detached in a loop beside the workloads):
# the stall investigation compares the three
GUEST_MODES = ("fstrace", "none", "churn")


# the read disks whose requests are bounded by each tier in turn (one per filesystem: squashfs's read entry point
# is the one other filesystems share), and the one the untraced task's syscall cost is measured on
BOUNDS = ("erofs", "sqlz4", "btrfs")
# the squashfs disks read at scattered offsets alone (the share of device bytes outside the blocks read)
SCATTERED = ("sqlz4", "sqxz")
COST = "sqlz4"


def bounds_file(src):
    """The file fio reads in the bounds step: the tree's largest, relative to it."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs]
    files = [f for f in files if os.path.isfile(f) and not os.path.islink(f)]
    return os.path.relpath(max(files, key=lambda f: (os.path.getsize(f), f)), src)


def step_disks(steps):
    """The read disks the guest steps use (None: every one)."""
    if "run" in steps:
        return None
    used = {src for _, src in WRITES} if "write" in steps else set()
    return used | (set(BOUNDS) if "bounds" in steps else set()) | (set(SCATTERED) if "scattered" in steps else set()) \
        | ({COST} if "cost" in steps else set())


def guest_script(disks, writes, mode="fstrace", fio_file=None, steps=ALL_STEPS):
    lines = [GUEST_INIT, "MODE=%s" % mode, "SERVE_OPTS='%s'" % " ".join(SERVE_OPTIONS)]
    if mode == "churn":
        lines.append("churn 30 &")
    for name, disk, fstype in disks:
        if "run" in steps:
            lines.append("run %s %s %s" % (name, disk, fstype))
    for name, disk, src_disk, src_fs in writes:
        lines.append("write %s %s %s %s" % (name, disk, src_disk, src_fs))
    for name, disk, fstype in disks:
        if fio_file and name in BOUNDS and "bounds" in steps:
            lines.append("bounds %s %s %s '%s'" % (name, disk, fstype, fio_file))
    for name, disk, fstype in disks:
        if fio_file and name in SCATTERED and "scattered" in steps:
            lines.append("scattered %s %s %s '%s'" % (name, disk, fstype, fio_file))
    for name, disk, fstype in disks:
        if fio_file and name == COST and mode == "fstrace" and "cost" in steps:
            lines.append("cost %s %s %s '%s'" % (name, disk, fstype, fio_file))
    if mode == "churn":
        lines.append("wait")
    lines.append("uname -r > /out/kernel.txt")
    # what the kernel has, for the host's checks (guest_has): modules' BTF, and the symbols of what fstrace
    # finds by test loads (task storage maps, bpf_task_pt_regs)
    lines.append("ls /sys/kernel/btf > /out/btf.txt; grep -owE '%s' /proc/kallsyms | sort -u > /out/has.txt"
                 % "|".join(GUEST_SYMBOLS.values()))
    out_disk = "vd" + chr(ord("a") + len(disks) + len(writes))  # the raw disk after the images
    lines.append("cd /out && tar cf /dev/%s . && sync" % out_disk)
    lines.append("echo vmguest: done")
    lines.append("poweroff -f")
    return "\n".join(lines) + "\n"


def build_initramfs(work, moddir, arch=HOST_ARCH, userland=None):
    """The guest's initramfs tree (busybox, the collector, fio and its libraries, the modules): the host's own
    programs for an amd64 guest, userland's (guest_userland) and the cross-built collector for another."""
    a = ARCHES[arch]
    root = os.path.join(work, "initramfs")
    for d in ("bin", "proc", "sys", "dev", "tmp", "mnt", "modules"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    shutil.copy(in_root(userland, "/bin/busybox") if userland else "/bin/busybox", os.path.join(root, "bin", "busybox"))
    os.symlink("busybox", os.path.join(root, "bin", "sh"))
    if not os.path.exists(a["collector"]):
        raise SystemExit("vmtest: no %s collector at %s (make ARCH=%s, or scripts/setup.sh cross-%s)" % (
            arch, a["collector"], a["bpf"], arch))
    shutil.copy(a["collector"], os.path.join(root, "fstrace-collect"))
    subprocess.run([a["cc"], "-O2", "-Wall", "-static", os.path.join(ROOT, "scripts", "syscall_cost.c"), "-o",
                    os.path.join(root, "syscall-cost")], check=True)
    # fio (the bounds step's ground truth) and the libraries it links, at their own paths
    if userland:
        for path in ["/usr/bin/fio"] + needed_libraries(userland, "/usr/bin/fio", a["gnu"]):
            dst = os.path.join(root, path.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(in_root(userland, path), dst)
    else:
        fio = shutil.which("fio")
        ldd = subprocess.run(["ldd", fio], stdout=subprocess.PIPE, text=True, check=True).stdout
        for path in [fio] + re.findall(r"(/\S+) \(0x", ldd):
            dst = os.path.join(root, path.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(os.path.realpath(path), dst)
    order = module_order(moddir, MODULES)
    for path in order:
        shutil.copy(path, os.path.join(root, "modules", os.path.basename(path)))
    with open(os.path.join(root, "modules.order"), "w") as f:
        f.write("\n".join(os.path.basename(p) for p in order) + "\n")
    return root, order


def pack(root, out):
    files = subprocess.run(["find", "."], cwd=root, stdout=subprocess.PIPE, check=True).stdout
    with open(out, "wb") as f:
        cpio = subprocess.Popen(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        gz = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=f)
        cpio.stdin.write(files)
        cpio.stdin.close()
        cpio.stdout.close()
        if gz.wait() or cpio.wait():
            raise SystemExit("vmtest: packing the initramfs failed")


def probe_states(header, figures):
    """Tier and reason of the probes of these figures (records.h FST_FIGURES ids), for a failure message."""
    return "; ".join("%s=%s %s" % (p["probe"], p["tier"], p["why"][:80]) for p in header["probes"]
                     if p["figure"] in figures)


def check_squashfs_caches(name, mode, res, layout, fail, lines):
    """squashfs cache lookups against the image: every fragment block missed at least once (the workload reads
    every file), metadata misses only on metadata blocks, and every inode and directory block missed unless
    mount left it cached."""
    h = res.header
    c = res.records.get("fs_cache")
    if c is None or not len(c):
        figures = {res.schema.figure("squashfs_cache_lookups"), res.schema.figure("squashfs_cache_misses")}
        fail("%s %s: no squashfs cache lookups (probes: %s)" % (name, mode, probe_states(h, figures)))
        return
    meta = c[c["cache"] == selection.enum_value(h, "fs_cache", "squashfs metadata")]
    frag = c[c["cache"] == selection.enum_value(h, "fs_cache", "squashfs fragment")]
    meta_missed = set(meta["block"][meta["missed"] != 0].tolist())
    frag_missed = set(frag["block"][frag["missed"] != 0].tolist())
    lines.append("%-6s %-7s squashfs caches: metadata %d lookups, %d misses on %d blocks (image: %d inode/directory "
                 "blocks); fragment %d lookups, %d misses on %d blocks (image: %d fragment blocks)" % (
                     name, mode, len(meta), int((meta["missed"] != 0).sum()), len(meta_missed),
                     len(layout["inode_dir_blocks"]), len(frag), int((frag["missed"] != 0).sum()), len(frag_missed),
                     layout["fragments"]))
    if len(frag_missed) != layout["fragments"]:
        fail("%s %s: %d distinct fragment blocks missed, the image has %d" % (name, mode, len(frag_missed),
                                                                              layout["fragments"]))
    if meta_missed - layout["all_blocks"]:
        fail("%s %s: metadata misses at %s, not metadata block addresses of the image" % (
            name, mode, sorted(meta_missed - layout["all_blocks"])[:5]))
    unread = layout["inode_dir_blocks"] - meta_missed - layout["mount_blocks"]
    if unread:
        fail("%s %s: inode/directory blocks never missed: %s" % (name, mode, sorted(unread)[:5]))
    if not (meta["missed"] == 0).any():
        fail("%s %s: no metadata cache hits" % (name, mode))
    tier_id = selection.enum_value(h, "tier", mode)
    if set(c["tier"].tolist()) != {tier_id}:
        fail("%s %s: cache records from tiers %s" % (name, mode, sorted(set(c["tier"].tolist()))))
    slices = [e for e in timeline_slices(res)[1] if e["name"].endswith("cache miss")]
    if len(slices) != int((c["missed"] != 0).sum()):
        fail("%s %s: %d cache-miss slices in the timeline for %d misses" % (name, mode, len(slices),
                                                                           int((c["missed"] != 0).sum())))


# squashfs_fs.h SQUASHFS_DEVBLK_SIZE: squashfs_bio_read reads whole blocks of it around each block (sb_min_blocksize
# keeps it on the guests' disks, whose logical blocks are 512 bytes)
SQUASHFS_DEVBLK = 1024


def check_unneeded(what, res, image_path, layout, fail, lines, scattered=False):
    """The device bytes outside the squashfs blocks read, against the image: each block read (fs_read) is one of
    the image's (a metadata block: at an address its tables list, its length its 2-byte header's; a data or
    fragment block: in the data area before the inode table), and squashfs_bio_read's reads around them (whole
    SQUASHFS_DEVBLK blocks; a metadata block's header read first) add up to the device's bytes and give the bytes
    outside every block read that the summary says.  Scattered reads leave some outside."""
    r = res.records.get("fs_read")
    if r is None or not len(r):
        fail("%s: no squashfs block reads (probes: %s)" % (what, probe_states(res.header, {
            res.schema.figure("squashfs_cache_misses")})))
        return
    with open(image_path, "rb") as f:
        img = f.read()
    r = r[r["ret"] >= 0]
    unit = np.zeros(len(img) + SQUASHFS_DEVBLK, dtype=bool)
    reads = []
    for pos, n in zip(r["pos"].tolist(), r["bytes"].tolist()):
        if pos in layout["all_blocks"]:
            if n != 2 + (struct.unpack_from("<H", img, pos)[0] & 0x7FFF):
                fail("%s: metadata block at %d read as %d bytes, its header says %d" % (
                    what, pos, n, 2 + (struct.unpack_from("<H", img, pos)[0] & 0x7FFF)))
            reads += [(pos, pos + 2), (pos + 2, pos + n)]
        else:
            if pos + n > layout["inode_table"]:
                fail("%s: a data block at [%d, %d), past the data area's end %d" % (what, pos, pos + n,
                                                                                   layout["inode_table"]))
            reads.append((pos, pos + n))
        unit[pos:pos + n] = True
    rounded = [(a // SQUASHFS_DEVBLK * SQUASHFS_DEVBLK, -(-b // SQUASHFS_DEVBLK) * SQUASHFS_DEVBLK) for a, b in reads]
    total = sum(b - a for a, b in rounded)
    outside = sum(int((~unit[a:b]).sum()) for a, b in rounded)
    u = devices.device_unneeded(res)
    dev = [d for d in devices.device_stats(res).values() if d.get("diskstats_delta")]
    lines.append("%s: %d blocks read, device %s B (diskstats %s B, squashfs_bio_read's reads %d B); outside the "
                 "blocks %s B + %s B in requests with none (predicted %d B): unneeded share %s" % (
                     what, len(r), u.get("bytes"), dev[0]["diskstats_delta"]["sectors_read"] * 512 if dev else "?",
                     total, u.get("unneeded_bytes"), u.get("no_unit_bytes"), outside,
                     "%.3f" % (u["unneeded_bytes"] / u["bytes"]) if u.get("available") else u.get("why")))
    if not u.get("available"):
        fail("%s: device_unneeded unavailable: %s" % (what, u.get("why")))
        return
    if dev and u["bytes"] != dev[0]["diskstats_delta"]["sectors_read"] * 512:
        fail("%s: %d device bytes in block requests, /proc/diskstats %d" % (
            what, u["bytes"], dev[0]["diskstats_delta"]["sectors_read"] * 512))
    if u["bytes"] != total or u["unneeded_bytes"] + u["no_unit_bytes"] != outside:
        fail("%s: device bytes %d, outside the blocks %d + %d; squashfs_bio_read's reads of the blocks give %d "
             "and %d" % (what, u["bytes"], u["unneeded_bytes"], u["no_unit_bytes"], total, outside))
    if scattered and not u["unneeded_bytes"]:
        fail("%s: scattered reads, yet no device byte outside the blocks read" % what)


def squashfs_cache_figures(res):
    """The figures of squashfs's cache-lookup and block-read probes."""
    return {res.schema.figure("squashfs_cache_lookups"), res.schema.figure("squashfs_cache_misses")}


def check_scattered(outdir, name, image_path, fail, lines):
    """One squashfs disk read at scattered offsets alone: check_unneeded, and fio's own count of its reads."""
    path = os.path.join(outdir, "scattered-%s.fst" % name)
    fio_path = os.path.join(outdir, "scattered-%s-fio.json" % name)
    if not os.path.exists(path) or not os.path.exists(fio_path):
        fail("%s scattered: no results" % name)
        return
    res = results.load(path)
    with open(fio_path) as f:
        text = f.read()
    job = json.loads(text[text.index("{"):])["jobs"][0]["read"]
    reads = res["req"][res["req"]["kind"] == selection.enum_value(res.header, "req_kind", "read")]
    if int(reads["ret"][reads["ret"] > 0].sum()) != job["io_bytes"]:
        fail("%s scattered: %d bytes read, fio read %d" % (name, int(reads["ret"][reads["ret"] > 0].sum()),
                                                          job["io_bytes"]))
    if unavailable_without_module_btf("%s scattered" % name, res, squashfs_cache_figures(res), ["fs_read"], fail,
                                      lines):
        return
    check_unneeded("%s scattered" % name, res, image_path, images.squashfs_layout(image_path), fail, lines,
                   scattered=True)


def check_scattered_serve(outdir, name, fail, lines):
    """The scattered reads under serve's collector options (--records none): squashfs's cache-lookup and
    block-read probes, whose events are per-request records only, not loaded and no such record written; its
    decompression probe loaded and timing (serve sums its records); every read counted in the kernel, as many and
    as many bytes as fio's own."""
    path = os.path.join(outdir, "scattered-%s-serve.fst" % name)
    fio_path = os.path.join(outdir, "scattered-%s-serve-fio.json" % name)
    if not os.path.exists(path) or not os.path.exists(fio_path):
        fail("%s scattered serve: no results" % name)
        return
    res = results.load(path)
    h = res.header
    records_only = squashfs_cache_figures(res)
    no_module_btf = unavailable_without_module_btf("%s scattered serve" % name, res,
                                                   records_only | {res.schema.figure("squashfs_decompress")},
                                                   ["fs_cache", "fs_read", "decomp"], fail, lines)
    for p in h["probes"] if not no_module_btf else []:
        if p["figure"] in records_only and not (p["tier"] == "unavailable"
                                               and p["why"].startswith("not loaded: --records none")):
            fail("%s scattered serve: %s on tier %s (%s)" % (name, p["probe"], p["tier"], p["why"]))
    for kind in ("fs_cache", "fs_read"):
        r = res.records.get(kind)
        if r is not None and len(r):
            fail("%s scattered serve: %d %s records" % (name, len(r), kind))
    decomp = [p for p in h["probes"] if p["figure"] == res.schema.figure("squashfs_decompress")
              and p["tier"] != "unavailable"]
    d = res.records.get("decomp")
    if (not decomp or d is None or not len(d)) and not no_module_btf:
        fail("%s scattered serve: no decompression records (probes: %s)"
             % (name, probe_states(h, {res.schema.figure("squashfs_decompress")})))
    with open(fio_path) as f:
        text = f.read()
    job = json.loads(text[text.index("{"):])["jobs"][0]["read"]
    cnt = requests.counted_requests(res, kinds=("read",)) or {"count": 0, "bytes": 0}
    if (cnt["count"], cnt["bytes"]) != (job["total_ios"], job["io_bytes"]):
        fail("%s scattered serve: %d reads of %d bytes counted, fio made %d of %d" % (
            name, cnt["count"], cnt["bytes"], job["total_ios"], job["io_bytes"]))
    lines.append("%s scattered serve: %d reads counted, %d decompressions on %s; cache probes: %s" % (
        name, cnt["count"], 0 if d is None else len(d), decomp[0]["tier"] if decomp else "-",
        probe_states(h, records_only)))


def check_write_compression(name, mode, res, src, fail, lines, kver="?"):
    """btrfs compression on write against the copied files: each chunk at most 128 KiB of one file, compressed
    bytes below the input, inputs adding up to no more than the files' sizes, run by kworkers inside the
    btrfs write-compression work items the tracepoint tier timed."""
    h = res.header
    c = res.records.get("compress")
    figure = {res.schema.figure("btrfs_compress_write")}
    if unavailable_without_module_btf("%-6s %-7s btrfs compression: none;" % (name, mode), res, figure,
                                      ["compress"], fail, lines):
        return
    if c is None or not len(c):
        fail("%s %s: no compression records (probes: %s)"
             % (name, mode, probe_states(h, {res.schema.figure("btrfs_compress_write")})))
        return
    tier, tier_said = compression_tier(name, mode, res, fail, kver)
    sizes = [os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(src) for f in fs
             if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))]
    file_bytes = sum(sizes)
    ok = c[c["ret"] == 0]
    dur = (c["ts_end_ns"] - c["ts_start_ns"]).astype("int64")
    in_total = int(ok["in_bytes"].astype("int64").sum())
    lines.append("%-6s %-7s btrfs compression: %d chunks (%d not compressed), %d B in -> %d B out, %.1f ms; "
                 "files copied %d B in %d files; ctx %s; tier %s" % (
                     name, mode, len(c), len(c) - len(ok), in_total, int(ok["out_bytes"].astype("int64").sum()),
                     dur.sum() / 1e6, file_bytes, len(sizes),
                     ",".join(sorted({h["enums"]["context"][str(x)] for x in set(c["context"].tolist())})),
                     tier_said))
    if set(c["tier"].tolist()) != {selection.enum_value(h, "tier", tier)}:
        fail("%s %s: compression records from tiers %s" % (name, mode, sorted(set(c["tier"].tolist()))))
    check_compression_chunks(name, mode, c, ok, sizes, in_total, fail)
    # run by workqueue workers: their names are no proof (6.1 names a workqueue's rescuer after the workqueue,
    # "btrfs-delalloc", and a slow guest's mayday timer hands it work), PF_WQ_WORKER is
    kworker = selection.enum_value(h, "context", "kworker")
    if (c["context"] != kworker).any():
        fail("%s %s: %d of %d chunks compressed outside a workqueue worker" % (
            name, mode, int((c["context"] != kworker).sum()), len(c)))
    check_compression_slices(name, mode, res, c, fail)
    check_compression_in_work_items(name, mode, res, c, dur, fail, lines)


def compression_tier(name, mode, res, fail, kver):
    """The tier btrfs compression was measured on, and how the results line says it: the one asked for, unless
    the probe says why the better one could not be used (6.1's trampolines take at most 6 arguments:
    btrfs_compress_pages has 7 and goes to its kprobe twin)."""
    probe = [p for p in res.header["probes"] if p["figure"] == res.schema.figure("btrfs_compress_write") and
             p["tier"] != "unavailable"]
    tier = probe[0]["tier"] if probe else "unavailable"
    before_6_6 = kver == "?" or kver_tuple(kver) < (6, 6)
    if tier != mode and not (before_6_6 and mode == "fentry" and tier == "kprobe"
                             and probe[0]["why"].startswith("fentry:")):
        fail("%s %s: compression probe on tier %s (%s)" % (name, mode, tier, probe[0]["why"] if probe else ""))
    return tier, tier if tier == mode else "%s (%s)" % (tier, probe[0]["why"])


def check_compression_chunks(name, mode, c, ok, sizes, in_total, fail):
    """Each chunk at most btrfs's 128 KiB, shrunk when compressed; the inputs within the copied files' sizes,
    in all and per file."""
    file_bytes = sum(sizes)
    if int(c["in_bytes"].max()) > 128 * 1024:
        fail("%s %s: a chunk of %d bytes, above btrfs's 128 KiB" % (name, mode, c["in_bytes"].max()))
    if (ok["out_bytes"] >= ok["in_bytes"]).any():
        fail("%s %s: compressed chunks that did not shrink" % (name, mode))
    if not 0.5 * file_bytes <= in_total <= file_bytes:
        fail("%s %s: %d bytes compressed for %d bytes of files copied" % (name, mode, in_total, file_bytes))
    by_ino = {}
    for ino, n in zip(ok["ino"].tolist(), ok["in_bytes"].tolist()):
        by_ino[ino] = by_ino.get(ino, 0) + n
    if max(by_ino.values()) > max(sizes):
        fail("%s %s: %d bytes compressed for one file, the largest is %d" % (name, mode, max(by_ino.values()),
                                                                             max(sizes)))


def check_compression_slices(name, mode, res, c, fail):
    """Each chunk a slice on the in-kernel work track of the thread that ran it."""
    tracks, slices = timeline_slices(res)
    slices = [e for e in slices if e["name"].startswith("compress ")]
    ran_by = {(int(r["ts_start_ns"]), max(int(r["ts_end_ns"]), int(r["ts_start_ns"]))):
              bytes(r["comm"]).rstrip(b"\0").decode(errors="replace") for r in c}
    misplaced = ["%s on %r" % (ran_by.get((e["start"], e["end"]), "no chunk"), tracks[tracks[e["track"]][1]][0])
                 for e in slices if ran_by.get((e["start"], e["end"])) != tracks[tracks[e["track"]][1]][0]]
    if len(slices) != len(c) or misplaced:
        fail("%s %s: %d compression slices in the timeline for %d chunks%s" % (
            name, mode, len(slices), len(c), "; not on their thread: " + ", ".join(misplaced[:3]) if misplaced else ""))


def check_compression_in_work_items(name, mode, res, c, dur, fail, lines):
    """The tracepoint tier's exact figure on the same run: compression runs inside the work items."""
    h = res.header
    w = res.records.get("work")
    kind = selection.enum_value(h, "work_kind", "btrfs write compression")
    items = w[w["kind"] == kind] if w is not None else []
    if not len(items):
        fail("%s %s: no btrfs write-compression work items timed" % (name, mode))
        return
    inside = 0
    for r, d in zip(c, dur):
        m = (items["pid"] == r["pid"]) & (items["ts_start_ns"] <= r["ts_start_ns"]) & \
            (items["ts_end_ns"] >= r["ts_end_ns"])
        inside += int(d) if m.any() else 0
    work_ns = int((items["ts_end_ns"] - items["ts_start_ns"]).sum())
    lines.append("%-6s %-7s workqueue tier: %d compression work items, %.1f ms; %.1f ms of compression inside them"
                 % (name, mode, len(items), work_ns / 1e6, inside / 1e6))
    if inside != int(dur.sum()):
        fail("%s %s: %.1f of %.1f ms of compression ran outside the timed work items" % (
            name, mode, (dur.sum() - inside) / 1e6, dur.sum() / 1e6))


def check_image(outdir, name, fs, opts, alg, image_path, fail, lines):
    """One read image's results, both tiers: decompression records against the image and the bytes read, the
    other tiers of the same run, and (squashfs) cache lookups against the image's layout."""
    loaded = {}
    for mode, tier in (("fentry", "fentry"), ("kprobe", "kprobe")):
        path = os.path.join(outdir, "%s-%s.fst" % (name, mode))
        if not os.path.exists(path):
            fail("%s %s: no results" % (name, mode))
            continue
        res = loaded[mode] = results.load(path)
        check_task_state(outdir, name, mode, res.header, fail, lines)
        check_decompression(name, fs, opts, alg, mode, tier, res, fail, lines)
    if fs == "squashfs":
        layout = images.squashfs_layout(image_path)
        for mode, res in loaded.items():
            if unavailable_without_module_btf("squashfs caches of %s %s" % (name, mode), res,
                                              squashfs_cache_figures(res), ["fs_cache", "fs_read"], fail, lines):
                continue
            check_squashfs_caches(name, mode, res, layout, fail, lines)
            check_unneeded("%s %s" % (name, mode), res, image_path, layout, fail, lines)


def check_task_state(outdir, name, mode, h, fail, lines):
    """A kernel with task-local storage maps and tp_btf (6.1 on): the per-task state must live there, on both
    tiers; one without (its kallsyms has no bpf_task_storage_get): a pid hash, saying so."""
    if guest_has(outdir)["task_storage"]:
        if (h.get("task_state") or {}).get("store") != "task_storage":
            fail("%s %s: per-task state not in task storage: %s" % (name, mode, h.get("task_state")))
    elif h["task_state"] != {"store": "pid_hash", "why": "pid hash: the kernel has no task-local storage maps"}:
        fail("%s %s: per-task state %s on a kernel without task storage" % (name, mode, h["task_state"]))
    # (not starting with the image name: test_vm reads an image's first such line as its decompression)
    lines.append("per-task state %s %s: %s; records: %s, %d requests counted in the kernel" % (
        name, mode, h["task_state"]["store"], h["request_records"]["mode"],
        sum(r["count"] for r in h["kernel_aggregates"]["requests_counted"])))


def check_decompression(name, fs, opts, alg, mode, tier, res, fail, lines):
    """One tier's decompression records of an image against the bytes read, the image's unit size and the
    other tiers of the same run (sampling; erofs: the workqueue and erofs's tracepoints)."""
    h = res.header
    d = res.records.get("decomp")
    fs_id = [int(k) for k, v in h["enums"]["fs"].items() if v == fs][0]
    alg_id = [int(k) for k, v in h["enums"]["alg"].items() if v == alg][0]
    tier_id = [int(k) for k, v in h["enums"]["tier"].items() if v == tier][0]
    mine = d[(d["fs"] == fs_id)] if d is not None else []
    used = {p["probe"]: p["tier"] for p in h["probes"] if p["tier"] == tier}
    if unavailable_without_module_btf("%s %s" % (name, mode), res, res.schema.decomp_figures, ["decomp"], fail,
                                      lines):
        if not int(res["req"][(res["req"]["kind"] == 1) & (res["req"]["ret"] > 0)]["ret"].sum()):
            fail("%s %s: no bytes read" % (name, mode))
        return
    if not len(mine):
        fail("%s %s: no decompression records (probes: %s)"
             % (name, mode, probe_states(h, res.schema.decomp_figures)))
        return
    if set(mine["tier"].tolist()) != {tier_id}:
        fail("%s %s: records from tiers %s" % (name, mode, sorted(set(mine["tier"].tolist()))))
    if set(mine["alg"].tolist()) - {alg_id, [int(k) for k, v in h["enums"]["alg"].items() if v == "plain"][0]}:
        fail("%s %s: unexpected algorithms %s" % (name, mode, sorted(set(mine["alg"].tolist()))))
    read = int(res["req"][(res["req"]["kind"] == 1) & (res["req"]["ret"] > 0)]["ret"].sum())
    out_total = int(mine["out_bytes"].sum())
    in_total = int(mine["in_bytes"].sum())
    dur = (mine["ts_end_ns"] - mine["ts_start_ns"]).astype("int64")
    check_unit_sizes(name, fs, opts, mine, fail)
    # every byte read came out of a decompression (or was stored uncompressed, inline, or in a
    # fragment shared with files read before): decompressed output must cover most of it
    if out_total < 0.5 * read:
        fail("%s %s: %d bytes decompressed for %d bytes read" % (name, mode, out_total, read))
    if (dur <= 0).any():
        fail("%s %s: non-positive decompression times" % (name, mode))
    lines.append("%-6s %-7s tier %-7s %5d units  in %9d B  out %9d B  read %9d B  time %7.1f ms  ctx %s" % (
        name, mode, tier, len(mine), in_total, out_total, read, dur.sum() / 1e6,
        ",".join(sorted({h["enums"]["context"][str(c)] for c in set(mine["context"].tolist())}))))
    if not used:
        fail("%s %s: no probe used tier %s" % (name, mode, tier))
    check_sampling_band(name, mode, h, mine, dur, fail, lines)
    if fs == "erofs":
        check_erofs_work_items(name, mode, tier, res, mine, dur, fail, lines)
        check_erofs_tracepoints(name, mode, res, mine, in_total, fail, lines)


def check_unit_sizes(name, fs, opts, mine, fail):
    """No decompression larger than the image's unit: erofs's pcluster, squashfs's block, btrfs's extent."""
    unit = opts.get("cluster") or opts.get("block") or 131072
    if fs == "erofs" and int(mine["in_bytes"].max()) > unit:
        fail("%s: a pcluster of %d bytes, above the %d-byte cluster size" % (name, mine["in_bytes"].max(),
                                                                            unit))
    if fs == "squashfs" and int(mine["out_bytes"].max()) > max(unit, 8192):
        fail("%s: a block decompressed to %d bytes, above the block size %d" % (
            name, mine["out_bytes"].max(), unit))
    if fs == "btrfs" and int(mine["out_bytes"].max()) > 128 * 1024:
        fail("%s: an extent of %d bytes, above btrfs's 128 KiB compressed extent" % (name,
                                                                                    mine["out_bytes"].max()))


def check_sampling_band(name, mode, h, mine, dur, fail, lines):
    """Sampling tier vs fentry/kprobe on the same run: the estimate must fall in a band around the decompression
    measured in the reading task."""
    ctx_traced = [int(k) for k, v in h["enums"]["context"].items() if v == "traced task"][0]
    in_task = int(dur[mine["context"] == ctx_traced].sum())
    est = sampling.decompression_estimate(h)
    if est and in_task > 200e6:  # enough samples for the band: a short decompression time gives too few to bound
        ratio = est["ns"] / in_task
        lines.append("%-6s %-7s sampling tier: %.1f ms estimated (95%% %.1f-%.1f) vs %.1f ms measured "
                     "in the reading task: ratio %.2f" % (name, mode, est["ns"] / 1e6,
                                                         est["ci95_ns"][0] / 1e6, est["ci95_ns"][1] / 1e6,
                                                         in_task / 1e6, ratio))
        if not 0.5 <= ratio <= 1.5:
            fail("%s %s: sampling estimate %.0f%% of the measured in-task decompression (band 50-150%%)"
                 % (name, mode, 100 * ratio))


def check_erofs_work_items(name, mode, tier, res, mine, dur, fail, lines):
    """The two tiers on one run: erofs decompression measured by fentry/kprobe inside kworkers must fit inside
    the workqueue-timed erofs work items (the tracepoint tier's exact figure)."""
    h = res.header
    w = res.records.get("work")
    kind = [int(k) for k, v in h["enums"]["work_kind"].items() if v == "erofs decompression"][0]
    items = w[w["kind"] == kind] if w is not None else []
    kctx = [int(k) for k, v in h["enums"]["context"].items() if v == "kworker"][0]
    in_kworkers = int(dur[mine["context"] == kctx].sum())
    work_ns = int((items["ts_end_ns"] - items["ts_start_ns"]).sum()) if len(items) else 0
    lines.append("%-6s %-7s workqueue tier: %d erofs work items, %.1f ms; %s decompression inside "
                 "them: %.1f ms" % (name, mode, len(items), work_ns / 1e6, tier, in_kworkers / 1e6))
    if in_kworkers and not len(items):
        fail("%s %s: kworker decompression measured but no erofs work items" % (name, mode))
    if in_kworkers > work_ns:
        fail("%s %s: decompression in kworkers (%d ns) exceeds the work items' time (%d ns)"
             % (name, mode, in_kworkers, work_ns))
    # a floor only on fentry: each kprobe hit is a trap, which under TCG costs more than the work
    # around it and falls inside the work item but outside the decompression it times
    if mode == "fentry" and work_ns and in_kworkers < 0.2 * work_ns:
        fail("%s %s: decompression is only %.0f%% of the erofs work items' time"
             % (name, mode, 100.0 * in_kworkers / work_ns))


def check_erofs_tracepoints(name, mode, res, mine, in_total, fail, lines):
    """erofs's own tracepoints (raw_tp on this kernel) against the decompressor probes of the same run: the
    pclusters the reads mapped are the ones decompressed, with the same compressed bytes."""
    ev = caches.erofs_events(res, res["req"])
    if not ev or not ev.get("pclusters"):
        fail("%s %s: no erofs pclusters from the map tracepoint (%s)" % (name, mode, ev))
        return
    lines.append("%-6s %-7s erofs tracepoints: %d pclusters, %d B compressed; decompressor saw "
                 "%d units, %d B in" % (name, mode, ev["pclusters"], ev["pcluster_bytes"],
                                       len(mine), in_total))
    if not 0.8 <= ev["pclusters"] / len(mine) <= 1.25:
        fail("%s %s: %d pclusters mapped vs %d decompressed" % (name, mode, ev["pclusters"],
                                                                len(mine)))
    if not 0.9 <= ev["pcluster_bytes"] / max(in_total, 1) <= 1.1:
        fail("%s %s: %d compressed bytes mapped vs %d decompressed" % (
            name, mode, ev["pcluster_bytes"], in_total))


def syscall_numbers(arch="x86"):
    """bpf/syscalls.h's syscall numbers of an architecture (its __TARGET_ARCH_ name; {"PREAD64": 17, ...})."""
    with open(os.path.join(ROOT, "bpf", "syscalls.h")) as f:
        text = f.read()
    block = re.search(r"__TARGET_ARCH_%s\)\n(.*?)#el" % arch, text, re.S).group(1)
    return {n: int(v) for n, v in re.findall(r"#define FST_NR_(\w+) (-?\d+)", block)}


MACHINES = {"x86_64": "x86", "aarch64": "arm64"}  # uname's machine -> bpf/'s __TARGET_ARCH_ name
BOUND_TIERS = ("fentry", "kprobe", "syscall")  # the guest's bounds step: requests bounded by each in turn
COST_CONFIGS = ("none", "fentry", "syscall", "none-after")  # its cost step: nothing attached, a tier, nothing again


def bounds_expected(outdir):
    """Where the fentry and kprobe runs of the bounds step bound the requests: at the filesystem entry points, or
    at the syscall tracepoints on a kernel without bpf_task_pt_regs (guest_has)."""
    return "filesystem entry points" if guest_has(outdir)["task_pt_regs"] else "syscall tracepoints"


def check_bounds(outdir, name, fail, lines):
    """One disk's bounds step: fio's 4 KiB random reads, then a listing and a cat of the tree, each run cold, with
    the requests bounded at the filesystem's entry points by fentry, by kprobes (--no-fentry), and by the syscall
    tracepoints (--syscall-boundaries): each tier's fio reads are fio's own count and bytes, every other kind has
    the same count and bytes on every tier, every request's parts add up to its wall time, and the header says
    which tier bounded them.  Each boundary program's run time (bpf_stats) is reported beside the syscall
    tracepoints'."""
    per_tier = {}
    for mode in BOUND_TIERS:
        path = os.path.join(outdir, "bounds-%s-%s.fst" % (name, mode))
        fio_path = os.path.join(outdir, "bounds-%s-%s-fio.json" % (name, mode))
        if not os.path.exists(path) or not os.path.exists(fio_path):
            fail("%s bounds %s: no results" % (name, mode))
            continue
        res = results.load(path)
        check_bounded_at(outdir, name, mode, res.header, fail, lines)
        with open(fio_path) as f:
            text = f.read()
        job = json.loads(text[text.index("{"):])["jobs"][0]["read"]
        per_tier[mode] = check_bounded_requests(name, mode, res, job, fail, lines)
    for mode, kinds in per_tier.items():
        if kinds != per_tier.get("syscall", kinds):
            fail("%s bounds %s: requests %s, the syscall tracepoints' %s" % (name, mode, kinds, per_tier["syscall"]))


def check_bounded_at(outdir, name, mode, h, fail, lines):
    """The header of one tier's bounds run says where the requests were bounded, and it is where they should be."""
    rb = h.get("request_bounds") or {}
    want = "syscall tracepoints" if mode == "syscall" else bounds_expected(outdir)
    # a kernel without bpf_task_pt_regs: the entry points cannot read the syscall, and the header says so
    if want != "filesystem entry points" and mode != "syscall" and "bpf_task_pt_regs" not in rb.get("why", ""):
        fail("%s bounds %s: bounded at %s without saying bpf_task_pt_regs is missing (%s)" % (
            name, mode, rb.get("at"), rb.get("why")))
    if rb.get("at") != want:
        fail("%s bounds %s: requests bounded at %s (%s), not at the %s" % (name, mode, rb.get("at"), rb.get("why"),
                                                                         want))
    elif want == "filesystem entry points" and set(rb["kinds"].values()) - {mode, "none"}:
        # fentry asked, its kprobe twins taken: only where the kernel refused each fentry test attach (arm64's
        # 6.1 has no ftrace direct calls for trampolines), and the header says so for each
        twins = [p for p in h["probes"] if p["figure"] in probes.boundary_figures(h) and p["tier"] == "kprobe"]
        if mode != "fentry" or set(rb["kinds"].values()) - {mode, "kprobe", "none"} or \
                not all(p["why"].startswith("fentry: test attach of") for p in twins):
            fail("%s bounds %s: kinds bounded by %s (%s)" % (name, mode, rb["kinds"],
                                                           probe_states(h, probes.boundary_figures(h))))
        lines.append("%-6s bounds %-7s on kprobe twins: %s" % (name, mode, twins[0]["why"] if twins else ""))


def check_bounded_requests(name, mode, res, job, fail, lines):
    """One tier's bounded requests: all recorded, their parts adding up to their wall time, fio's preads its own
    count and bytes; the boundary programs' bpf_stats reported.  Returns {kind: (count, bytes)} of the others."""
    h = res.header
    nr = syscall_numbers(MACHINES[h["kernel"]["machine"]])  # the guest's: its results header says which
    rb = h.get("request_bounds") or {}
    req = res["req"]
    counted = sum(r["count"] for r in h["kernel_aggregates"]["requests_counted"])
    if counted:
        fail("%s bounds %s: %d requests counted, not recorded (--records all)" % (name, mode, counted))
    wall = (req["ts_end_ns"] - req["ts_start_ns"]).astype("int64")
    parts = sum(req[p].astype("int64") for p in res.schema.parts)
    if (parts != wall).any():
        fail("%s bounds %s: %d requests whose parts do not add up to their wall time" % (
            name, mode, int((parts != wall).sum())))
    kinds = {}
    pread = req["syscall_nr"] == nr["PREAD64"]
    for k in sorted(set(req["kind"].tolist())):
        g = req[(req["kind"] == k) & ~pread]
        kinds[selection.enum_name(h, "req_kind", k)] = (len(g), int(g["ret"][g["ret"] > 0].sum()))
    fio = req[pread]
    fio_bytes = int(fio["ret"][fio["ret"] > 0].sum())
    lines.append("%-6s bounds %-7s at %-23s fio %d reads %d B, requests %d reads %d B; others %s" % (
        name, mode, rb.get("at"), job["total_ios"], job["io_bytes"], len(fio), fio_bytes,
        ", ".join("%s %d/%d B" % (k, n, b) for k, (n, b) in sorted(kinds.items()))))
    if len(fio) != job["total_ios"] or fio_bytes != job["io_bytes"]:
        fail("%s bounds %s: %d reads of %d B, fio made %d of %d B" % (name, mode, len(fio), fio_bytes,
                                                                     job["total_ios"], job["io_bytes"]))
    ran = [p for p in h["probes"] if p["figure"] in probes.boundary_figures(h) and p.get("runs")]
    for p in ran:
        lines.append("%-6s bounds %-7s bpf_stats %-24s %-7s %7d runs %8.0f ns/run %9.2f ms" % (
            name, mode, p["probe"], p["tier"], p["runs"], p["run_ns"] / p["runs"], p["run_ns"] / 1e6))
    lines.append("%-6s bounds %-7s bpf_stats of the boundary programs: %d runs, %.2f ms in all" % (
        name, mode, sum(p["runs"] for p in ran), sum(p["run_ns"] for p in ran) / 1e6))
    return kinds


def check_cost(outdir, fail, lines):
    """The cost step: an untraced task's getppid and 4 KiB preads (a tmpfs file's, and a file's on the traced
    filesystem), ns per call, with nothing attached (before and after: the noise) and with fentry and the syscall
    tracepoints bounding another process's requests.  Reported, not judged (no timing thresholds): only that every
    configuration was measured."""
    table = {}
    for mode in COST_CONFIGS:
        path = os.path.join(outdir, "cost-%s.txt" % mode)
        if not os.path.exists(path):
            fail("cost %s: not measured" % mode)
            continue
        row = {}
        for line in open(path):
            w = line.split()
            if w[0] == "getppid":
                row["getppid"] = float(w[1])
            elif w[0] == "pread":
                row["pread tmpfs" if w[1].startswith("/tmp/") else "pread traced fs"] = float(w[2])
        table[mode] = row
    cols = ("getppid", "pread tmpfs", "pread traced fs")
    for mode, row in table.items():
        if set(row) != set(cols):
            fail("cost %s: measured %s" % (mode, sorted(row)))
        what = {"none": "nothing attached", "none-after": "nothing attached again"}.get(
            mode, "requests bounded by " + mode)
        lines.append("untraced task, ns per call, %-27s %s" % (
            what, "  ".join("%s %7.1f" % (c, row.get(c, float("nan"))) for c in cols)))
    return table


def check_writes(outdir, name, src, kver, fail, lines):
    """One write disk's results, both tiers."""
    for mode in ("fentry", "kprobe"):
        path = os.path.join(outdir, "%s-%s.fst" % (name, mode))
        if not os.path.exists(path):
            fail("%s %s: no results" % (name, mode))
            continue
        check_write_compression(name, mode, results.load(path), src, fail, lines, kver)


# a capability of the guest's kernel -> the kernel symbol that shows it
# the helpers' own functions (text symbols: in /proc/kallsyms whether or not the kernel lists its data, which
# Debian's arm64 6.1 does not: its kallsyms has no bpf_task_pt_regs_proto although its kernel has the helper)
GUEST_SYMBOLS = {"task_storage": "bpf_task_storage_get", "task_pt_regs": "bpf_task_pt_regs"}


def guest_has(outdir):
    """What the guest's kernel has, as it listed it: module_btf (loaded modules with BTF of their own in
    /sys/kernel/btf) and each of GUEST_SYMBOLS (in /proc/kallsyms); everything when the guest did not say."""
    facts = {"module_btf": True, **{k: True for k in GUEST_SYMBOLS}}
    btf, has = os.path.join(outdir, "btf.txt"), os.path.join(outdir, "has.txt")
    if os.path.exists(btf) and os.path.exists(has):
        facts["module_btf"] = any(n != "vmlinux" for n in open(btf).read().split())
        syms = set(open(has).read().split())
        facts.update({k: v in syms for k, v in GUEST_SYMBOLS.items()})
    return facts


def unavailable_without_module_btf(what, res, figures, kinds, fail, lines):
    """On a kernel whose modules have no BTF (guest_has): every probe of these figures (records.h FST_FIGURES ids)
    must be unavailable, saying so, and no record of these kinds written.  True when the kernel is such (the
    caller's checks of the figures are then moot), else False."""
    if guest_has(os.path.dirname(res.path))["module_btf"]:
        return False
    probes = [p for p in res.header["probes"] if p["figure"] in figures]
    if not probes:
        fail("%s: no probe of the figures %s in the header" % (what, sorted(figures)))
    for p in probes:
        if p["tier"] != "unavailable" or "modules have none" not in p["why"]:
            fail("%s: %s on tier %s (%s), on a kernel whose modules have no BTF" % (what, p["probe"], p["tier"],
                                                                                  p["why"]))
    for kind in kinds:
        r = res.records.get(kind)
        if r is not None and len(r):
            fail("%s: %d %s records from probes that cannot load" % (what, len(r), kind))
    lines.append("%s tier unavailable: %d probes, as %s" % (what, len(probes), probes[0]["why"] if probes else "?"))
    return True


def guest_kernel(outdir):
    path = os.path.join(outdir, "kernel.txt")
    return open(path).read().strip() if os.path.exists(path) else "?"


def check(outdir, images_run, paths, src, steps=ALL_STEPS):
    """Host-side checks of one guest's extracted results (of the steps it ran); returns (failures, report lines)."""
    lines, failures = [], []
    kver = guest_kernel(outdir)
    lines.append("guest kernel %s" % kver)
    for name, fs, opts, alg in images_run:
        if "run" in steps:
            check_image(outdir, name, fs, opts, alg, paths[name], failures.append, lines)
    for name, _ in WRITES:
        if "write" in steps:
            check_writes(outdir, name, src, kver, failures.append, lines)
    for name, fs, opts, alg in images_run:
        if name in BOUNDS and "bounds" in steps:
            check_bounds(outdir, name, failures.append, lines)
    for name, fs, opts, alg in images_run:
        if name in SCATTERED and "scattered" in steps:
            check_scattered(outdir, name, paths[name], failures.append, lines)
            check_scattered_serve(outdir, name, failures.append, lines)
    if COST in [e[0] for e in images_run] and "cost" in steps:
        check_cost(outdir, failures.append, lines)
    lines += ["FAIL " + f for f in failures]
    return failures, lines


def prepare(cache):
    """Host side, shared by every kernel: the dataset and the images (cached; building the read-only btrfs image
    mounts a loop device, the rest only runs mkfs).  Returns (src, {disk: image path}, erofs disks skipped
    with why)."""
    droot, manifest = dataset.ensure_default(cache, 0.02)
    src = os.path.join(droot, "tree")
    have = images.erofs_compressors()
    paths, skipped = {}, {}
    for name, fs, opts, alg in IMAGES + EROFS_MORE:
        if fs == "erofs" and opts["compress"] not in have:
            skipped[name] = "host mkfs.erofs offers %s" % ",".join(have)
            continue
        paths[name] = images.ensure_image(fs, opts, src, manifest["id"] + "/tree", cache, log)["path"]
    return src, paths, skipped


def images_for(vmlinuz, paths, skipped, arch=HOST_ARCH):
    """The read disks this kernel can mount and its guest's steps use: (images to run, {disk: why skipped})."""
    config = kernel_config(vmlinuz)
    run, why = [], dict(skipped)
    used = step_disks(STEPS[arch])
    for name, fs, opts, alg in IMAGES + EROFS_MORE:
        if name in why:
            continue
        if used is not None and name not in used:
            why[name] = "the %s guest runs only the steps %s (docs/vmtest.md)" % (arch, ", ".join(STEPS[arch]))
            continue
        if name in [e[0] for e in EROFS_MORE] and config.get("CONFIG_EROFS_FS_ZIP_" + alg.upper()) != "y":
            why[name] = "kernel built without CONFIG_EROFS_FS_ZIP_" + alg.upper()
            continue
        run.append((name, fs, opts, alg))
    return run, why


KVM_PROBE_S = 20  # a usable KVM boots a guest kernel to its root mount in a few seconds: room for a loaded host


def kvm_probe(vmlinuz):
    """(cpu model, None) if a test boot under KVM gets through the whole kernel boot (to the missing root file
    system's panic) within KVM_PROBE_S seconds, else (None, why).  `-cpu host` first; if QEMU aborts on an MSR
    the host's KVM refuses (seen: 0x10a, arch-capabilities), once more without that feature."""
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
    except OSError as e:
        return None, "/dev/kvm: %s" % e.strerror
    why = None
    for cpu in ("host", "host,-arch-capabilities"):
        t0 = time.monotonic()
        try:
            p = subprocess.run(["qemu-system-x86_64", "-accel", "kvm", "-cpu", cpu, "-m", "256", "-smp", "1",
                                "-nographic", "-no-reboot", "-kernel", vmlinuz, "-append", "console=ttyS0 panic=-1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=KVM_PROBE_S)
            out = p.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace")
        if re.search(r"VFS: Unable to mount root|Kernel panic", out):
            return cpu, None
        err = [l.strip() for l in out.splitlines() if "qemu-system" in l and "terminating" not in l]
        last = [l.strip() for l in out.splitlines() if l.startswith("[")][-1:]
        why = "a test boot under KVM (-cpu %s) %s" % (cpu, err[0] if err else "did not finish booting in %d s (%s)"
                                                      % (KVM_PROBE_S, "last line: " + last[0][:80] if last
                                                         else "no kernel line"))
        if not err:  # it ran, only too slowly: without the feature it will not run faster
            break
        log("%s after %.0f s" % (why, time.monotonic() - t0))
    return None, why


def choose_accel(asked, vmlinuz, cache=None, arch=HOST_ARCH):
    """(accelerator, cpu model, why): KVM if asked or auto and a guest kernel boots fully under it within
    KVM_PROBE_S seconds, else TCG.  The probe's verdict is cached per host kernel, QEMU and guest kernel (under
    cache) so each run does not pay for it.  Seen here: /dev/kvm is kvm-pvm (nested_pvm=1: no hardware
    virtualization below it), `-cpu host` aborts on MSR 0x10a, and without arch-capabilities an unmodified guest
    kernel runs, but far slower than TCG (its privileged code emulated: 60 s of wall time to reach 16.7 s of
    early boot), so auto falls back to TCG and says why."""
    if arch != HOST_ARCH:
        if asked == "kvm":
            raise SystemExit("vmtest: KVM asked for, but KVM runs only the host's architecture, not %s" % arch)
        # pauth-impdef: pointer authentication with QEMU's own cheap hash, not the architected QARMA, which
        # under TCG costs more than the rest of the emulation (QEMU's docs, "Arm CPU Features")
        return "tcg", "max,pauth-impdef=on", "an %s guest on an %s host: KVM runs only the host's architecture" % (
            arch, HOST_ARCH)
    if asked == "tcg":
        return "tcg", "max", "asked"
    key = None
    if cache:
        qemu = subprocess.run(["qemu-system-x86_64", "--version"], stdout=subprocess.PIPE,
                              text=True).stdout.split("\n")[0]
        key = "%s | %s | %s" % (os.uname().release, qemu, os.path.basename(vmlinuz))
        path = os.path.join(cache, "kvm-probe.json")
        try:
            known = json.load(open(path))
        except (OSError, ValueError):
            known = {}
    if key and key in known:
        cpu, why = known[key]
        why = why and why + " (cached in %s)" % path
    else:
        cpu, why = kvm_probe(vmlinuz)
        if key:
            known[key] = [cpu, why]
            with open(path + ".tmp", "w") as f:
                json.dump(known, f, indent=1)
            os.replace(path + ".tmp", path)
    if cpu:
        return "kvm", cpu, "a test boot under KVM booted the kernel in under %d s" % KVM_PROBE_S
    if asked == "kvm":
        raise SystemExit("vmtest: KVM asked for but unusable: " + why)
    return "tcg", "max", why


def vcpus(asked, accel):
    """vCPUs per guest: as asked, else two under KVM and one under TCG.  TCG with two vCPUs stalls or oopses
    (int3 at a site being text-poked, see tcg_text_poke_stall) in about one guest run in four here, at boot or as
    a tracepoint link is released, with no BPF program on either stack: its cross-modified code, which one vCPU
    cannot meet.  One vCPU per guest also lets two guests run side by side on a 2-core host."""
    if asked:
        return asked
    return 2 if accel[0] == "kvm" else 1


def run_guest(kname, vmlinuz, moddir, images_run, paths, src, work, smp, accel, timeout, mode="fstrace",
              userland=None):
    """Boot one guest over the disks, wait for it, extract its results into work/out; returns facts of the run.
    userland: another architecture's programs (guest_userland)."""
    arch = kernel_arch(kname)
    a, steps = ARCHES[arch], STEPS[arch]
    disks, writes, drives, out_img = guest_disks(images_run, paths, src, work, steps)
    root, order = build_initramfs(work, moddir, arch, userland)
    with open(os.path.join(root, "init"), "w") as f:
        f.write(guest_script(disks, writes, mode, bounds_file(src), steps))
    os.chmod(os.path.join(root, "init"), 0o755)
    initrd = os.path.join(work, "initrd.gz")
    pack(root, initrd)
    acc, cpu, why = accel
    log("%s: booting %s with %d modules, %d vCPUs under %s (%s), guest mode %s" % (
        kname, os.path.basename(vmlinuz), len(order), smp, acc.upper(), why, mode))
    console = os.path.join(work, "console.log")
    run = {"kernel": kname, "mode": mode, "vmlinuz": os.path.basename(vmlinuz), "smp": smp, "accel": acc,
           "accel_why": why, "console": console, "outdir": os.path.join(work, "out"), "images": images_run,
           "arch": arch, "steps": steps}
    t0 = time.monotonic()
    # the guest kernel panics on a soft lockup (softlockup_panic), with every CPU's backtrace
    # (softlockup_all_cpu_backtrace), so a stall ends the run at once with its stacks on the console
    # (loglevel 5)
    monitor = os.path.join(work, "monitor.sock")
    qemu = a["qemu"] + ["-accel", acc, "-cpu", cpu, "-m", "2048", "-smp", str(smp),
                        "-nographic", "-no-reboot", "-kernel", vmlinuz, "-initrd", initrd,
                        "-monitor", "unix:%s,server,nowait" % monitor,
                        "-append", "console=%s panic=-1 loglevel=5 softlockup_panic=1 " % a["console"] +
                        "softlockup_all_cpu_backtrace=1 unknown_nmi_panic=1 panic_print=0x40"] + drives
    run["qemu_exit"] = watch_guest(kname, qemu, console, monitor, t0, timeout)
    run["seconds"] = round(time.monotonic() - t0, 1)
    text = open(console, errors="replace").read()
    run["finished"] = "vmguest: done" in text
    run["lockup"] = [l.strip() for l in text.splitlines()
                     if re.search(r"soft lockup|rcu_sched detected stall|rcu: INFO|hung_task|Kernel panic", l)]
    os.makedirs(run["outdir"])
    if run["finished"]:
        with tarfile.open(out_img) as t:
            t.extractall(run["outdir"])
    for l in text.splitlines():
        if l.startswith("vmguest:") and "done" not in l:
            log("%s: guest said: %s" % (kname, l))
    return run


def guest_disks(images_run, paths, src, work, steps):
    """A guest's disks: the read images (read-only), an empty btrfs per write step, and the disk its results
    come back on.  Returns ([(name, device, fs)] of the images, [(name, device, source device, source fs)] of the
    writes, QEMU's -drive arguments, the results disk's path)."""
    disks, drives = [], []
    for i, (name, fs, opts, _) in enumerate(images_run):
        disks.append((name, "vd" + chr(ord("a") + i), fs))
        drives += ["-drive", "file=%s,if=virtio,format=raw,readonly=on" % paths[name]]
    writes = []
    for name, src_name in (WRITES if "write" in steps else []):
        target = os.path.join(work, name + ".img")
        images.mkfs_empty("btrfs", target, images.tree_bytes(src))
        src_disk = [d for d in disks if d[0] == src_name][0]
        writes.append((name, "vd" + chr(ord("a") + len(disks) + len(writes)), src_disk[1], src_disk[2]))
        drives += ["-drive", "file=%s,if=virtio,format=raw" % target]
    out_img = os.path.join(work, "out.img")
    with open(out_img, "wb") as f:
        f.truncate(64 << 20)
    drives += ["-drive", "file=%s,if=virtio,format=raw" % out_img]
    return disks, writes, drives, out_img


def watch_guest(kname, qemu, console, monitor, t0, timeout):
    """Run QEMU with its console into a file until it exits; returns its exit (a code, or why it was stopped).
    A guest silent for SILENCE_S seconds (steps print every ~15 s) gets an NMI from the QEMU monitor, which
    panics it (unknown_nmi_panic) with all CPUs' backtraces (panic_print=0x40), then is stopped: a hang costs
    SILENCE_S, not the whole timeout."""
    exit_said = None
    with open(console, "w") as con:
        p = subprocess.Popen(qemu, stdout=con, stderr=subprocess.STDOUT)
        size, quiet_since, nmi_at = 0, time.monotonic(), None
        while p.poll() is None:
            time.sleep(1)
            now = time.monotonic()
            if os.path.getsize(console) != size:
                size, quiet_since = os.path.getsize(console), now
            if now - t0 > timeout:
                exit_said = "timeout after %d s" % timeout
            elif nmi_at is None and now - quiet_since > SILENCE_S:
                log("%s: no console output for %d s: NMI to every vCPU for their stacks" % (kname, SILENCE_S))
                monitor_command(monitor, "nmi")
                nmi_at = now
                continue
            elif nmi_at is not None and now - nmi_at > 30:
                exit_said = "silent for %d s (stacks after the NMI above)" % SILENCE_S
            else:
                continue
            p.kill()
            p.wait()
            break
    return p.returncode if exit_said is None else exit_said


SILENCE_S = 120  # a guest that prints nothing for this long is stalled (its steps print every ~15 s under TCG)


def monitor_command(path, cmd):
    """One command to a guest's QEMU monitor (a unix socket); its reply is ignored."""
    import socket
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(path)
            s.sendall((cmd + "\n").encode())
            time.sleep(0.5)
    except OSError as e:
        log("monitor %s: %s" % (cmd, e))


def tcg_text_poke_stall(run):
    """The stall seen under TCG with two vCPUs (6.1, 1 run in 4 here): the collector's CPU soft-locked in
    smp_call_function_many_cond under text_poke_bp (a tracepoint's static call being repatched as a link is
    released), waiting for the other vCPU, whose NMI backtrace shows it inside the int3 exception at the patch
    site, taking no timer interrupts.  The int3 handler emulates the patched instruction and returns on real
    CPUs; a vCPU that never leaves it is the emulator's cross-modifying code, not a BPF program (no BPF frame on
    either CPU).  Only that exact picture under TCG is retried, once, and said; any other stall fails."""
    if run["accel"] != "tcg" or run["finished"]:
        return False
    text = open(run["console"], errors="replace").read()
    # the same mechanism caught in the act at boot, before any BPF (6.12, 1 run in 6 here): a vCPU answering the
    # text-poke sync IPI executed an int3 the patching had already removed ("Oops: int3" in a static key site)
    if "Oops: int3" in text and "vmguest:" not in text.split("Oops: int3", 1)[0]:
        return True
    # and mid-run (6.12, 1 run in 3 here): a link's release repatching a static call on one vCPU while the
    # other, in the scheduler with no BPF program on its stack, executed the int3 the patching had removed
    if "Oops: int3" in text:
        oops = text.split("Oops: int3", 1)[1][:30000]
        if ("__static_call_update" in oops or "text_poke" in oops) and "bpf_prog_" not in oops \
                and "[fstrace]" not in oops:
            return True
    return ("soft lockup" in text and "text_poke_bp" in text and "smp_call_function_many_cond" in text
            and "NMI backtrace for cpu 1" in text
            and "asm_exc_int3" in text.split("NMI backtrace for cpu 1", 1)[1].split("NMI backtrace", 1)[0][:4000])


def run_guest_retrying(kname, vmlinuz, moddir, images_run, paths, src, work, smp, accel, timeout, mode="fstrace",
                       deadline=None, userland=None):
    """run_guest, once more (in a fresh directory) after a TCG text-poke stall; the run says it was retried.
    deadline (time.monotonic()): no guest runs past it, and there is no second boot unless a whole guest's
    timeout still fits before it (the test suite's budget for all its guests, so CI stays bounded)."""
    def left():
        return timeout if deadline is None else min(timeout, deadline - time.monotonic())
    if left() < 60:
        return {"kernel": kname, "finished": False, "lockup": [], "qemu_exit": "not booted: the guests' time budget "
                "is spent", "seconds": 0, "console": os.devnull, "accel": accel[0], "images": images_run,
                "outdir": os.path.join(work, "out")}
    run = run_guest(kname, vmlinuz, moddir, images_run, paths, src, work, smp, accel, left(), mode, userland)
    if tcg_text_poke_stall(run):
        if left() < timeout:
            log("%s: TCG text-poke stall; no second boot: %.0f s left of the guests' budget" % (kname, left()))
            return run
        log("%s: TCG text-poke stall (the other vCPU stuck in int3 at the patch site): booting again once" % kname)
        first = run
        work2 = work + "-retry"
        os.makedirs(work2)
        run = run_guest(kname, vmlinuz, moddir, images_run, paths, src, work2, smp, accel, left(), mode, userland)
        run["retried_after"] = {"console": first["console"], "lockup": first["lockup"][:6]}
    return run


def load_cached(path, _memo={}):
    if path not in _memo:
        _memo[path] = results.load(path)
    return _memo[path]


def table_rows(run, failures, skipped):
    """One row per kernel x probe x asked tier: the tier the records came from, how many fired, and whether the
    host's checks of that disk and tier passed."""
    steps = run.get("steps", ALL_STEPS)
    rows = read_rows(run, failures) if "run" in steps else []
    rows += write_rows(run, failures) if "write" in steps else []
    rows += bounds_rows(run, failures)
    for name, why in sorted(skipped.items()):
        fs, alg = [(e[1], e[3]) for e in IMAGES + EROFS_MORE if e[0] == name][0]
        rows.append((run["kernel"], "decompression %s %s" % (fs, alg), "both", "-", "-", "not run: " + why))
    return rows


def row_status(failures, name, mode):
    """A table row's check: FAIL where the host's checks of that disk (and tier) failed."""
    bad = [f for f in failures if f.startswith("%s %s:" % (name, mode)) or f.startswith("%s:" % name)]
    return "FAIL" if bad else "ok"


def row_tiers(h, recs):
    """The tiers records came from, by name."""
    return ",".join(sorted({h["enums"]["tier"][str(t)] for t in set(recs["tier"].tolist())})) or "-"


def none_chosen(res, figures):
    """No records: "unavailable" where every probe of the figures is (the checks then verified why), else "-"."""
    probes = [p for p in res.header["probes"] if p["figure"] in figures]
    return "unavailable" if probes and all(p["tier"] == "unavailable" for p in probes) else "-"


def read_rows(run, failures):
    """The read images' rows: decompression, and squashfs's caches."""
    rows = []
    for name, fs, opts, alg in run["images"]:
        for mode in ("fentry", "kprobe"):
            path = os.path.join(run["outdir"], "%s-%s.fst" % (name, mode))
            if not os.path.exists(path):
                rows.append((run["kernel"], "decompression %s %s" % (fs, alg), mode, "-", 0, "FAIL (no results)"))
                continue
            res = load_cached(path)
            h = res.header
            d = res.records.get("decomp")
            fs_id = selection.enum_value(h, "fs", fs)
            mine = d[d["fs"] == fs_id] if d is not None else d
            n = len(mine) if mine is not None else 0
            rows.append((run["kernel"], "decompression %s %s" % (fs, alg), mode,
                         row_tiers(h, mine) if n else none_chosen(res, res.schema.decomp_figures), n,
                         row_status(failures, name, mode)))
            if fs == "squashfs":
                c = res.records.get("fs_cache")
                n = len(c) if c is not None else 0
                rows.append((run["kernel"], "squashfs caches (%s)" % alg, mode,
                             row_tiers(h, c) if n else none_chosen(res, squashfs_cache_figures(res)), n,
                             row_status(failures, name, mode)))
    return rows


def write_rows(run, failures):
    """The write step's rows: btrfs compression on write."""
    rows = []
    for name, _ in WRITES:
        for mode in ("fentry", "kprobe"):
            path = os.path.join(run["outdir"], "%s-%s.fst" % (name, mode))
            if not os.path.exists(path):
                rows.append((run["kernel"], "btrfs compression on write", mode, "-", 0, "FAIL (no results)"))
                continue
            res = load_cached(path)
            c = res.records.get("compress")
            n = len(c) if c is not None else 0
            rows.append((run["kernel"], "btrfs compression on write", mode,
                         row_tiers(res.header, c) if n else
                         none_chosen(res, {res.schema.figure("btrfs_compress_write")}),
                         n, row_status(failures, name, mode)))
    return rows


def bounds_rows(run, failures):
    """The bounds step's rows: where each asked tier bounded the requests."""
    rows = []
    for name, fs, _, _ in run["images"]:
        if name not in BOUNDS:
            continue
        for mode in BOUND_TIERS:
            path = os.path.join(run["outdir"], "bounds-%s-%s.fst" % (name, mode))
            if not os.path.exists(path):
                rows.append((run["kernel"], "request bounds %s" % fs, mode, "-", 0, "FAIL (no results)"))
                continue
            res = load_cached(path)
            rb = res.header.get("request_bounds") or {}
            chosen = ",".join(sorted(set(rb.get("kinds", {}).values()) - {"none"})) or "-"
            bad = [f for f in failures if f.startswith("%s bounds %s:" % (name, mode))]
            rows.append((run["kernel"], "request bounds %s" % fs, mode, chosen, len(res["req"]),
                         "FAIL" if bad else "ok"))
    return rows


def format_table(rows):
    head = ("kernel", "probe", "asked", "tier chosen", "fired", "checked")
    cells = [head] + [tuple(str(c) for c in r) for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(head))]

    def fmt(r):
        return "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
    return "\n".join([fmt(head), "|" + "|".join("-" * (x + 2) for x in w) + "|"] + [fmt(r) for r in cells[1:]])


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", "/var/cache/fstrace"))
    ap.add_argument("--kernels", default=os.environ.get("FSTRACE_VM_KERNELS", ",".join(KERNELS)),
                    help="comma-separated, from: %s" % ", ".join(KERNELS))
    ap.add_argument("--smp", type=int, default=0, help="vCPUs per guest (default: 2 under KVM, 1 under TCG)")
    ap.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    ap.add_argument("--guest-mode", choices=GUEST_MODES, default="fstrace",
                    help="none/churn: the same guests without fstrace or with attach/detach churn (no checks, "
                         "only whether the guest finished without a lockup)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per guest (they take 6-7 min under TCG)")
    ap.add_argument("--json", metavar="FILE",
                    help="also write the run's table and per-kernel lines to FILE (what `make docs-vmtest` renders)")
    args = ap.parse_args()
    names = [k for k in args.kernels.split(",") if k]
    bad = [k for k in names if k not in KERNELS]
    if bad or not names:
        raise SystemExit("vmtest: unknown kernel %s (choose from %s)" % (",".join(bad) or "''", ", ".join(KERNELS)))
    return args, names


def guest_of_kernel(args, kname, vmcache, work, src, paths, skipped):
    """Boot one kernel's guest and check what it wrote: (ok, its table rows, its report for --json or None)."""
    vmlinuz, moddir = kernel(vmcache, kname)
    arch = kernel_arch(kname)
    images_run, why = images_for(vmlinuz, paths, skipped, arch)
    kwork = os.path.join(work, kname)
    os.makedirs(kwork)
    accel = choose_accel(args.accel, vmlinuz, vmcache, arch)
    smp = vcpus(args.smp, accel)
    run = run_guest_retrying(kname, vmlinuz, moddir, images_run, paths, src, kwork, smp, accel,
                             args.timeout, args.guest_mode, userland=guest_userland(vmcache, arch))
    if run["lockup"]:
        log("%s: lockup on the console: %s" % (kname, " / ".join(run["lockup"][:6])))
    if not run["finished"]:
        sys.stderr.write(open(run["console"], errors="replace").read()[-12000:])
        log("%s: the guest did not finish (qemu exit %s)" % (kname, run["qemu_exit"]))
        return False, [(kname, "(guest)", "-", "-", "-", "FAIL: did not finish (%s)" % run["qemu_exit"])], None
    if args.guest_mode != "fstrace":
        log("%s: guest mode %s finished in %.0f s, %s" % (kname, args.guest_mode, run["seconds"],
                                                           "lockup seen" if run["lockup"] else "no lockup"))
        return not run["lockup"], [], None
    failures, lines = check(run["outdir"], images_run, paths, src, run["steps"])
    print("\n".join(lines))
    log("%s: guest ran %.0f s (%d vCPUs, %s)" % (kname, run["seconds"], run["smp"], run["accel"]))
    if failures:
        log_path = os.path.join(run["outdir"], "collector.log")
        if os.path.exists(log_path):
            sys.stderr.write(open(log_path).read()[-3000:])
    report = {k: v for k, v in run.items() if k not in ("images",)} | {"lines": lines}
    return not failures, table_rows(run, failures, why), report


def main():
    args, names = parse_args()
    vmcache = os.path.join(args.cache, "vmtest")
    os.makedirs(vmcache, exist_ok=True)
    src, paths, skipped = prepare(args.cache)
    work = tempfile.mkdtemp(prefix="fstrace-vmtest-")
    rows, ok, report = [], True, []
    try:
        for kname in names:
            kernel_ok, kernel_rows, kernel_report = guest_of_kernel(args, kname, vmcache, work, src, paths, skipped)
            ok = ok and kernel_ok
            rows += kernel_rows
            report += [kernel_report] if kernel_report else []
        if rows:
            print(format_table(rows))
        # the host the guests ran on, for the page rendered from this file (maybe elsewhere)
        for path in [os.path.join(vmcache, "last.json")] + ([args.json] if args.json else []):
            with open(path, "w") as f:
                json.dump({"ok": ok, "machine": machine.record(), "table": rows, "runs": report}, f, indent=1)
        if not ok:
            raise SystemExit(1)
    finally:
        if args.keep:
            log("work directory kept: " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
