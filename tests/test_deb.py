"""The Debian package (make deb), installed with apt-get into a minimal Debian bookworm root that has no compiler,
clang or bpftool, works there as it does in a checkout: the collector's --check, attach, report and a serve scrape,
each held to fio's counts of the reads it made; a `run` that lacks fio names fio and its package in one line.

The root is debootstrapped once (--variant=minbase) and kept in the test cache; each test run installs into an
overlay on it, so the cached root stays as debootstrap left it. apt's downloads are kept in the cache too."""
import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess

import pytest

from analysis import results
from analysis import requests
from conftest import CACHE, ROOT, drop_caches, finish_attach, fstrace, start_attach
from serving import fio_randread, fresh_scrape, parse, start_serve, stop, value

pytestmark = pytest.mark.bpf

MINBASE = os.path.join(CACHE, "bookworm-minbase")
APT_ARCHIVES = os.path.join(CACHE, "deb-apt-archives")
MIRROR = "http://deb.debian.org/debian"
# what the root must not have: the package brings a static collector, and installs or builds nothing
BUILD_TOOLS = ("clang", "gcc", "cc", "bpftool")
# the kernel's file systems the collector and the command read, bound into the root where the host has them
KERNEL_MOUNTS = ("/proc", "/sys", "/sys/kernel/tracing", "/sys/kernel/debug", "/sys/fs/bpf", "/sys/fs/cgroup", "/dev")
MNT = "/mnt/erofs"  # where the root sees the test's erofs mount


def minimal_root():
    """A minimal bookworm root (debootstrap --variant=minbase), made once into the cache: built under a temporary
    name and renamed, so a debootstrap cut short is never taken for a root."""
    os.makedirs(CACHE, exist_ok=True)
    with open(MINBASE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(MINBASE):
            tmp = MINBASE + ".tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run(["debootstrap", "--variant=minbase", "bookworm", tmp, MIRROR], check=True,
                           stdout=subprocess.DEVNULL)
            os.rename(tmp, MINBASE)
    return MINBASE


def in_root(root, *argv, check=True, **kw):
    p = subprocess.run(["chroot", root] + list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive", PATH="/usr/sbin:/usr/bin:/sbin:/bin"),
                       **kw)
    if check and p.returncode != 0:
        raise AssertionError("in the root: %s failed (%d):\n%s\n%s" % (" ".join(argv), p.returncode, p.stdout,
                                                                       p.stderr))
    return p


def build_tools_in(root):
    return in_root(root, "sh", "-c", "for t in %s; do command -v $t; done; true" % " ".join(BUILD_TOOLS)).stdout


@contextlib.contextmanager
def overlay_root(tmp, lower, binds):
    """An overlay on lower (its changes in tmp), with binds [(host path, path in the root)] mounted in it; all
    unmounted again, whatever happens."""
    merged, mounted = os.path.join(tmp, "root"), []
    for d in ("upper", "work", "root"):
        os.makedirs(os.path.join(tmp, d))
    try:
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", "lowerdir=%s,upperdir=%s/upper,workdir=%s/work"
                        % (lower, tmp, tmp), merged], check=True)
        mounted.append(merged)
        # private: nothing mounted in the root reaches the host's mounts, nor an unmount here
        subprocess.run(["mount", "--make-rprivate", merged], check=True)
        for src, dst in binds:
            target = merged + dst
            os.makedirs(target, exist_ok=True)
            subprocess.run(["mount", "--bind", src, target], check=True)
            mounted.append(target)
        yield merged
    finally:
        for m in reversed(mounted):
            subprocess.run(["umount", m], check=False)
        left = [m for m in mounted if os.path.ismount(m)]
        assert not left, "still mounted: %s" % left


@pytest.fixture(scope="module")
def deb():
    """The package make deb builds for this machine's architecture."""
    for old in glob.glob(os.path.join(ROOT, "build", "deb", "fstrace_*.deb")):
        os.unlink(old)
    subprocess.run(["make", "-s", "-C", ROOT, "deb"], check=True, stdout=subprocess.DEVNULL)
    arch = subprocess.run(["dpkg", "--print-architecture"], stdout=subprocess.PIPE, text=True).stdout.strip()
    found = glob.glob(os.path.join(ROOT, "build", "deb", "fstrace_*_%s.deb" % arch))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def installed(deb, mounted_erofs, tmp_path_factory):
    """The root with the package installed by apt-get (its dependencies from Debian), the kernel's file systems and
    the erofs mount (at MNT) bound in: (root, host mount point of the erofs)."""
    mnt, _ = mounted_erofs
    lower = minimal_root()
    assert build_tools_in(lower) == ""
    os.makedirs(os.path.join(APT_ARCHIVES, "partial"), exist_ok=True)
    binds = [(p, p) for p in KERNEL_MOUNTS if os.path.ismount(p) or p in ("/proc", "/sys", "/dev")]
    binds += [(APT_ARCHIVES, "/var/cache/apt/archives"), (mnt, MNT)]
    with overlay_root(str(tmp_path_factory.mktemp("debroot")), lower, binds) as root:
        shutil.copy(deb, os.path.join(root, "tmp"))
        in_root(root, "apt-get", "update", "-qq")
        in_root(root, "apt-get", "install", "-y", "-qq", "/tmp/" + os.path.basename(deb))
        yield root, mnt


def test_installed_package_has_no_build_tools_and_its_collector_checks(installed):
    root, _ = installed
    # the package and its dependencies brought no compiler, clang or bpftool
    assert build_tools_in(root) == ""
    assert in_root(root, "dpkg-query", "-W", "-f", "${Status}", "fstrace").stdout == "install ok installed"
    p = in_root(root, "fstrace-collect", "--check")
    assert p.stderr == ""
    # the command, its manual pages, completion and unit are where the package put them
    for path in ("/usr/bin/fstrace", "/usr/share/man/man8/fstrace.8.gz", "/usr/share/man/man8/fstrace-collect.8.gz",
                 "/usr/share/bash-completion/completions/fstrace", "/lib/systemd/system/fstrace-serve.service"):
        assert os.path.exists(root + path), path


def test_installed_attach_and_report_count_fio_reads(installed):
    root, mnt = installed
    drop_caches()
    out = "/tmp/attach-out"
    p, seen = start_attach(out, "--mount", MNT, "--duration", "3", "--interval", "0.5",
                           command=["chroot", root, "fstrace"])
    job = fio_randread(mnt)
    text = finish_attach(p, seen)
    # no perfetto in Debian: the timeline alone is missing, and the line says how to add it
    assert "no timeline: the timeline needs the Python packages perfetto and protobuf from PyPI" in text
    assert "FSTRACE_PYTHON=" in text
    host_out = root + out
    for name in ("results.fst", "summary.json", "report.html", "oncpu.svg", "profile.speedscope.json"):
        assert os.path.exists(os.path.join(host_out, name)), (name, sorted(os.listdir(host_out)))
    assert not os.path.exists(os.path.join(host_out, "timeline.pftrace"))
    res = results.load(os.path.join(host_out, "results.fst"))
    reads = requests.reads_of(res, os.stat(os.path.join(mnt, "big.bin")).st_ino)
    cnt = requests.counted_requests(res, kinds=("read",))
    assert len(reads) + (cnt["count"] if cnt else 0) == job["total_ios"] == 512
    summary = json.loads(open(os.path.join(host_out, "summary.json")).read())
    assert summary["run"]["mode"] == "attach"
    # the installed report of the directory is the checkout's report of it
    installed_report = in_root(root, "fstrace", "report", out).stdout
    assert installed_report and installed_report == fstrace("report", host_out).stdout


def test_installed_serve_scrape_counts_fio_reads(installed):
    root, mnt = installed
    p, port, rest = start_serve("--mount", MNT, command=["chroot", root, "fstrace"])
    try:
        drop_caches()
        before = parse(fresh_scrape(port))
        job = fio_randread(mnt)
        after = parse(fresh_scrape(port))
        sel = dict(kind="read", mount=MNT, fs="erofs")
        assert (value(after, "fstrace_requests_total", **sel) - value(before, "fstrace_requests_total", **sel)
                == job["total_ios"] == 512)
    finally:
        stop(p, rest)
    assert p.returncode == 0


def test_installed_run_names_missing_fio_and_its_package(installed):
    root, _ = installed
    # e2fsprogs is in the minimal root, fio is not
    p = in_root(root, "fstrace", "run", "--fs", "ext4", "--workload", "randread", check=False)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == ("fstrace: error: --fs ext4 --workload randread needs fio (Debian package fio), not "
                        "installed: apt-get install fio\n")


def test_serve_unit_verifies_and_runs_the_installed_command(tmp_path):
    """systemd's own check of the unit make install writes (its command must be there: installed under tmp_path)."""
    prefix = tmp_path / "usr"
    subprocess.run(["make", "-s", "-C", ROOT, "install", "PREFIX=%s" % prefix], check=True, stdout=subprocess.DEVNULL)
    unit = prefix / "lib" / "systemd" / "system" / "fstrace-serve.service"
    assert "\nExecStart=%s serve " % (prefix / "bin" / "fstrace") in unit.read_text()
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0 and p.stdout == "", p.stdout


def test_arm64_package_holds_a_static_aarch64_collector_that_runs(tmp_path):
    """make deb DEB_ARCH=arm64 cross-builds the same package for arm64: its control says arm64, its collector is a
    static AArch64 executable (no program interpreter: it needs no library on the box) that checks its options
    under qemu-user, and it holds the same files as the native package."""
    for old in glob.glob(os.path.join(ROOT, "build", "deb", "fstrace_*_arm64.deb")):
        os.unlink(old)
    subprocess.run(["make", "-s", "-C", ROOT, "deb", "DEB_ARCH=arm64"], check=True, stdout=subprocess.DEVNULL)
    found = glob.glob(os.path.join(ROOT, "build", "deb", "fstrace_*_arm64.deb"))
    assert len(found) == 1, found
    info = subprocess.run(["dpkg-deb", "-f", found[0], "Architecture", "Package"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout
    assert info.split() == ["Architecture:", "arm64", "Package:", "fstrace"], info
    subprocess.run(["dpkg-deb", "-x", found[0], str(tmp_path)], check=True)
    collector = tmp_path / "usr" / "bin" / "fstrace-collect"
    with open(collector, "rb") as f:
        elf = f.read(64)
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and int.from_bytes(elf[18:20], "little") == 183  # EM_AARCH64
    headers = subprocess.run(["readelf", "-lW", str(collector)], stdout=subprocess.PIPE, text=True,
                             check=True).stdout
    assert "INTERP" not in headers and "DYNAMIC" not in headers, headers
    ran = subprocess.run(["qemu-aarch64-static", str(collector), "--check", "--duration", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    bad = subprocess.run(["qemu-aarch64-static", str(collector), "--check", "--budget", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("fstrace-collect: --budget wants"), bad.stderr
    listed = subprocess.run(["dpkg-deb", "-c", found[0]], stdout=subprocess.PIPE, text=True, check=True).stdout
    for path in ("./usr/bin/fstrace", "./usr/lib/fstrace/cli/commands.py", "./usr/lib/fstrace/bpf/records.h",
                 "./usr/share/man/man8/fstrace.8.gz", "./lib/systemd/system/fstrace-serve.service"):
        assert path in listed, path
