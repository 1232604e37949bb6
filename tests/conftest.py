"""Shared fixtures: the project is set up and built once; tests run as root on real kernels."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
FSTRACE = os.path.join(ROOT, "fstrace")
COLLECTOR = os.path.join(ROOT, "build", "fstrace-collect")
# datasets and images are cached between test runs on one machine; a fresh machine builds them once
CACHE = os.environ.get("FSTRACE_TEST_CACHE", "/var/cache/fstrace-tests")
SCALE = "0.05"  # ~400 files, ~10 MB tree and a 6.4 MiB single file: fast, and still real I/O


def pytest_configure(config):
    if os.geteuid() != 0:
        pytest.exit("the fstrace tests load BPF programs and mount images: run them as root", returncode=2)


@pytest.fixture(scope="session", autouse=True)
def built():
    subprocess.run([os.path.join(ROOT, "scripts", "setup.sh"), "--test"], check=True)
    assert os.access(COLLECTOR, os.X_OK)


def fstrace(*args, check=True, **kw):
    p = subprocess.run([FSTRACE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError("fstrace %s failed (%d):\n%s\n%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p


def run_summary(tmp_path, *args):
    """fstrace run with the test dataset and cache; its summary.json."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "out"
    fstrace("run", "--scale", SCALE, "--cache", CACHE, "-o", str(out), *args)
    return json.loads((out / "summary.json").read_text())


def run_workload(tmp_path_factory, fs, workload, *extra):
    out = tmp_path_factory.mktemp("run") / "out"
    fstrace("run", "--fs", fs, "--workload", workload, "--scale", SCALE, "--cache", CACHE, "-o", str(out), *extra)
    from analysis import results
    res = results.load(str(out / "results.fst"))
    with open(out / "summary.json") as f:
        summary = json.load(f)
    return out, res, summary


@pytest.fixture(scope="session")
def erofs_randread(tmp_path_factory):
    return run_workload(tmp_path_factory, "erofs", "randread")


@pytest.fixture(scope="session")
def squashfs_tar(tmp_path_factory):
    return run_workload(tmp_path_factory, "squashfs", "tar-data", "--compress", "lz4hc", "--cluster", "4096")


@pytest.fixture(scope="session")
def erofs_tar_16k(tmp_path_factory):
    # every bio's queue stack: the test compares the compressed bytes erofs mapped with those queued from its path
    return run_workload(tmp_path_factory, "erofs", "tar-data", "--compress", "lz4hc", "--cluster", "16384",
                        "--io-stacks", "all")


def leftovers():
    """State a run must not leave behind: our loop devices, erofs/squashfs mounts, fstrace BPF programs."""
    loops = subprocess.run(["losetup", "-a"], stdout=subprocess.PIPE, text=True).stdout
    ours = [l for l in loops.splitlines() if CACHE in l]
    mounts = [l for l in open("/proc/mounts") if "fstrace-run-" in l or "fstrace-build-" in l]
    progs = subprocess.run(["bpftool", "prog", "show"], stdout=subprocess.PIPE, text=True).stdout
    ours_progs = [l for l in progs.splitlines() if any(n in l for n in ("block_rq_issue", "sched_switch_",
                                                                        "sys_enter_btf", "sys_enter_raw"))]
    return ours, mounts, ours_progs


def settled_leftovers(expect=None, timeout=5.0):
    """leftovers() once the kernel has freed programs of collectors that already exited.

    Programs are freed an RCU grace period after their last fd closes; wait for the state to
    stop changing (or to equal `expect`)."""
    import time
    deadline = time.time() + timeout
    state = leftovers()
    while time.time() < deadline:
        if (expect is not None and state == expect) or (expect is None and not state[2]):
            break
        time.sleep(0.05)
        state = leftovers()
    return state
