"""What bounds the requests: the traced filesystems' entry points (fentry/fexit, kprobe twins) where the kernel
allows them, else the syscall tracepoints, and the results header and the report say which and why.

Where the entry points can be used is proven in the guests (tests/test_vm.py test_request_bounds): this machine's
kernel refuses fentry and has no kprobes.  Here: whichever tier bounds them, the requests are the workload's own
(bytes against the file read, parts adding up to wall time), and each reason the syscall tracepoints are used
instead is the one named."""
import os
import subprocess

import pytest

from analysis import report, results, selection, summary
from conftest import COLLECTOR, assert_exact_partition, erofs_mounted

pytestmark = pytest.mark.bpf

DATA = os.urandom(96 << 10) + bytes(160 << 10)  # 256 KiB: half incompressible


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    """A small compressed erofs image, mounted: (mount point, its --sdev, the file read)."""
    with erofs_mounted(tmp_path_factory.mktemp("bounds"), {"data.bin": DATA}, ["-zlz4hc", "-C16384"]) as (mnt, _):
        st = os.stat(mnt).st_dev
        yield mnt, "%d:%d" % (os.major(st), os.minor(st)), os.path.join(mnt, "data.bin")


def trace_cat(tmp_path, path, *args):
    """The collector around `cat path`: its results, loaded."""
    out = tmp_path / ("%d.fst" % len(list(tmp_path.iterdir())))
    subprocess.run([COLLECTOR, "-o", str(out), "--records", "all"] + list(args) + ["--", "cat", path],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return results.load(str(out))


def reads_on(res, sdev):
    """The read requests on the superblock `sdev` ("MAJ:MIN"): (count, bytes); every request's parts must add
    up to its wall time."""
    assert_exact_partition(res)
    req = res["req"]
    ma, mi = (int(x) for x in sdev.split(":"))
    reads = req[(req["kind"] == selection.enum_value(res.header, "req_kind", "read")) &
                (req["sdev"] == (ma << res.minor_bits | mi))]
    return len(reads), int(reads["ret"][reads["ret"] > 0].sum())


def test_the_tier_that_bounded_the_requests_is_named(tmp_path, mounted):
    """With the traced filesystem named (--sdev), the filesystem's entry points bound the requests where the
    kernel lets fstrace hook them, and when it does not, the syscall tracepoints do and the header names the
    entry point it refused; either way cat's reads add up to the file."""
    mnt, sdev, path = mounted
    res = trace_cat(tmp_path, path, "--sdev", sdev)
    rb = res.header["request_bounds"]
    assert set(rb["kinds"]) == {"read", "stat", "open", "getdents", "write", "sync"}
    if rb["at"] == "filesystem entry points":
        assert rb["why"] == "" and set(rb["kinds"].values()) <= {"fentry", "kprobe", "fentry+kprobe", "none"}
        assert {p["probe"] for p in res.header["probes"] if p["figure"] == "req_start"} and \
            all(p["tier"] == "unavailable" for p in res.header["probes"] if p["figure"] in ("req_start", "req_end"))
    else:
        assert rb["at"] == "syscall tracepoints", rb
        # the first entry point erofs needs, and why the kernel refused it (this machine: fentry and kprobes)
        bounds = [p for p in res.header["probes"] if p["figure"] == "req_bounds"]
        first = [p for p in bounds if p["tier"] == "unavailable" and " not tried: " not in p["why"]][0]
        assert rb["why"].startswith(first["probe"] + ": ") and first["why"] in rb["why"], (rb, first)
        assert set(rb["kinds"].values()) <= {"tp_btf", "raw_tp"}
    n, nbytes = reads_on(res, sdev)
    assert nbytes == len(DATA) and n >= 2  # the data, and the read that returned 0 at its end
    text = report.render(summary.summarize(res))
    assert ("requests bounded at the traced filesystems' entry points" in text if rb["at"] != "syscall tracepoints"
            else "requests bounded by the syscall tracepoints" in text and first["probe"] in text)


@pytest.mark.parametrize("how", ["asked", "no filesystem named", "another filesystem"])
def test_syscall_tracepoints_bound_them_and_say_why(tmp_path, mounted, how):
    """--syscall-boundaries, no --sdev, or an --sdev whose filesystem has no entry points fstrace hooks: the
    syscall tracepoints bound the requests, the header says why, the entry points' probes are left unloaded,
    and the reads are the same."""
    mnt, sdev, path = mounted
    if how == "asked":
        args, why = ["--sdev", sdev, "--syscall-boundaries"], "asked for (--syscall-boundaries)"
    elif how == "no filesystem named":
        args, why = [], "no filesystem named (--sdev): requests on every file need the syscall tracepoints"
    else:
        other = os.stat(str(tmp_path)).st_dev
        fstype = [l.split(" - ")[1].split()[0] for l in open("/proc/self/mountinfo")
                  if l.split()[2] == "%d:%d" % (os.major(other), os.minor(other))][0]
        if fstype in ("erofs", "squashfs", "btrfs"):
            pytest.skip("the test's directory is on %s" % fstype)
        args = ["--sdev", "%d:%d" % (os.major(other), os.minor(other)), "--sdev", sdev]
        why = "--sdev %d:%d is %s, whose entry points fstrace does not hook" % (os.major(other), os.minor(other),
                                                                              fstype)
    res = trace_cat(tmp_path, path, *args)
    rb = res.header["request_bounds"]
    assert rb["at"] == "syscall tracepoints" and rb["why"] == why, rb
    bounds = [p for p in res.header["probes"] if p["figure"] == "req_bounds"]
    assert bounds and all(p["tier"] == "unavailable" and p["why"].startswith("fentry: not tried: ") for p in bounds)
    assert reads_on(res, sdev)[1] == len(DATA)
    s = summary.summarize(res)
    # the probes left unloaded are not figures the run could not measure
    assert not [u for u in s["unavailable"] if "request start and end" in u["figure"]]
