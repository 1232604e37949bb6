"""Shared fixtures and helpers, and the test lanes (pytest.ini): every test is marked unit, bpf or vm.

unit tests run as any user on stored results (tests/data/) and fixtures; bpf tests run as root on this machine
(the project set up and built once per session); vm tests boot QEMU guests of other kernels."""
import contextlib
import json
import os
import re
import subprocess

import pytest

from cli.cgroups import cgroup2_root, remove_cgroup
from cli.runner import COLLECTOR

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FSTRACE = os.path.join(ROOT, "fstrace")
# results and summaries kept in the repository for the unit lane (tests/data/README.md: how each was made)
DATA = os.path.join(ROOT, "tests", "data")
# datasets and images are cached between test runs on one machine; a fresh machine builds them once
CACHE = os.environ.get("FSTRACE_TEST_CACHE", "/var/cache/fstrace-tests")
SCALE = "0.05"  # ~400 files, ~10 MB tree and a 6.4 MiB single file: fast, and still real I/O
LANES = ("unit", "bpf", "vm")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def lanes_of(item):
    return [m.name for m in item.iter_markers() if m.name in LANES]


@pytest.hookimpl(trylast=True)  # after -m has deselected: only the tests that will run are checked
def pytest_collection_modifyitems(config, items):
    wrong = ["%s (%s)" % (item.nodeid, ", ".join(lanes_of(item)) or "no lane") for item in items
             if len(lanes_of(item)) != 1]
    if wrong:
        raise pytest.UsageError("every test belongs to exactly one lane of %s (pytest.ini); these do not:\n  %s"
                                % ("/".join(LANES), "\n  ".join(wrong)))
    if os.geteuid() != 0:
        privileged = [item.nodeid for item in items if lanes_of(item) != ["unit"]]
        if privileged:
            raise pytest.UsageError(
                "%d selected tests load BPF programs, mount images or boot guests (e.g. %s): run them as root "
                "(sudo ./scripts/test.sh), or the unit lane alone as any user (./scripts/test.sh --lane unit)"
                % (len(privileged), privileged[0]))


_built = []


def pytest_runtest_setup(item):
    """The collector built and the packages installed, once, before the first test that runs them."""
    if lanes_of(item) != ["unit"] and not _built:
        subprocess.run([os.path.join(ROOT, "scripts", "setup.sh"), "--test"], check=True)
        assert os.access(COLLECTOR, os.X_OK)
        _built.append(True)


def fstrace(*args, check=True, **kw):
    p = subprocess.run([FSTRACE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError("fstrace %s failed (%d):\n%s\n%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p


def start_attach(out, *args, command=(FSTRACE,)):
    """fstrace attach -o out, once it traces: (process, what it printed so far).  command: how fstrace is started
    (e.g. in a chroot, where out is a path in the root)."""
    import time
    # --budget 100: these tests check exact counts, so the request hooks stay attached (test_budget.py
    # checks the windows)
    p = subprocess.Popen(list(command) + ["attach", "--budget", "100", "-o", str(out)] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # tracing is live once the collector prints its first live view line
    deadline = time.time() + 120
    seen = ""
    while time.time() < deadline:
        line = p.stdout.readline()
        seen += line
        if line.startswith("fstrace ") and "requests/s" in line:
            return p, seen
        assert line or p.poll() is None, seen
    raise AssertionError("attach never started:\n" + seen)


def finish_attach(p, seen, sig=None):
    """attach's whole output, once it has ended (after sig, if given) with 0."""
    if sig:
        p.send_signal(sig)
    rest = p.communicate(timeout=120)[0]
    assert p.returncode == 0, seen + rest
    return seen + rest


def short_of_kernel(counted, kernel, probe):
    """How many of the kernel's count of a device's requests (/proc/diskstats) the count fstrace made of them is
    short by, asserting it is never more and short only by what the kernel skipped: Linux 6.18 now and then runs
    no BPF program for a block_rq_complete and counts no missed run (docs/measuring.md, Lost events; bpftrace's
    classic tracepoint loses the same ones), a few requests; where it counted the runs it skipped (the probe's
    missed_runs), as many as those."""
    assert 0 < counted <= kernel, (counted, kernel, probe)
    assert probe.get("missed_runs") or kernel - counted <= max(5, 0.01 * kernel), (counted, kernel, probe)
    return kernel - counted


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


def read_folded(path):
    """{stack: weight} of a folded-stacks file (flamegraph.py folded_text)."""
    out = {}
    with open(path) as f:
        for line in f:
            st, n = line.rsplit(" ", 1)
            out[st] = int(n)
    return out


def leftovers():
    """State a run must not leave behind: our loop devices and erofs/squashfs mounts (by our own paths)."""
    loops = subprocess.run(["losetup", "-a"], stdout=subprocess.PIPE, text=True).stdout
    ours = [l for l in loops.splitlines() if CACHE in l]
    mounts = [l for l in open("/proc/mounts") if "fstrace-run-" in l or "fstrace-build-" in l]
    return ours, mounts


def settled_leftovers(expect=None, timeout=5.0):
    """leftovers() once a cleanup in progress has finished: wait for it to equal `expect`, or (without
    `expect`) for a short while."""
    import time
    deadline = time.time() + timeout
    state = leftovers()
    while expect is not None and state != expect and time.time() < deadline:
        time.sleep(0.05)
        state = leftovers()
    return state


def collector_under(parent, timeout=600.0):
    """The pid of the collector tracing below process `parent` (fstrace's CLI), once it runs; None if `parent`
    ended first."""
    import time
    exe = os.path.realpath(COLLECTOR)
    deadline = time.time() + timeout
    while time.time() < deadline:
        children = {}
        for d in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
        todo = list(children.get(parent, []))
        while todo:
            pid = todo.pop()
            try:
                # not the check of its options the CLI makes first (collector --check, which loads nothing and
                # is gone in a moment)
                if os.readlink("/proc/%d/exe" % pid) == exe:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        args = f.read().split(b"\0")
                    # the check's first argument (cli/runner.py check_collector_options); an exited one's is empty
                    if len(args) > 1 and args[1] not in (b"--check", b""):
                        return pid
            except OSError:
                pass
            todo += children.get(pid, [])
        if not os.path.exists("/proc/%d" % parent):
            return None
        time.sleep(0.02)
    raise AssertionError("no collector started under pid %d" % parent)


def collector_map_ids(pid):
    """The ids of the BPF maps a process holds open (its fds' fdinfo), so a test touches its own collector's."""
    ids = set()
    fd_dir = "/proc/%d/fdinfo" % pid
    for fd in os.listdir(fd_dir) if os.path.isdir(fd_dir) else ():
        try:
            with open(os.path.join(fd_dir, fd)) as f:
                ids |= {int(line.split()[1]) for line in f if line.startswith("map_id:")}
        except OSError:
            pass  # closed meanwhile
    return ids


def map_of(pid, name):
    """The bpftool description of the BPF map name that process pid (a collector) holds."""
    ids = collector_map_ids(pid)
    shown = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], stdout=subprocess.PIPE, text=True,
                                      check=True).stdout)
    [m] = [m for m in shown if m.get("name") == name and m["id"] in ids]
    return m


def map_entries(m):
    """{key bytes: value bytes} of map m."""
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m["id"])], stdout=subprocess.PIPE,
                         check=True).stdout
    return {bytes(int(b, 16) for b in e["key"]): bytes(int(b, 16) for b in e["value"]) for e in json.loads(out)}


def map_update(m, key, value):
    subprocess.run(["bpftool", "map", "update", "id", str(m["id"]), "key"] + [str(b) for b in key] + ["value"]
                   + [str(b) for b in value], check=True)


def bpf_objects_of(pid):
    """The BPF programs, maps and links process `pid` holds, as {("prog", id), ("map", id), ("link", id)}:
    read from its /proc/PID/fdinfo, so what another tracer on the machine loaded is never taken for ours."""
    objs = set()
    fdinfo = "/proc/%d/fdinfo" % pid
    try:
        fds = os.listdir(fdinfo)
    except FileNotFoundError:  # it has exited
        return objs
    for fd in fds:
        try:
            with open(os.path.join(fdinfo, fd)) as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("prog_id", "map_id", "link_id"):
                        objs.add((key[:-3], int(value)))
        except OSError:  # an fd closed meanwhile
            continue
    return objs


def live_bpf_objects():
    """Every BPF program, map and link the kernel holds now, as bpf_objects_of() names them."""
    objs = set()
    for kind in ("prog", "map", "link"):
        out = subprocess.run(["bpftool", "-j", kind, "show"], stdout=subprocess.PIPE, check=True, text=True).stdout
        objs |= {(kind, o["id"]) for o in json.loads(out or "[]")}
    return objs


def bpf_objects_left(objs, timeout=5.0):
    """Which of `objs` (a collector's, from bpf_objects_of) the kernel still holds once the collector exited.

    Programs are freed an RCU grace period after their last fd closes: wait up to `timeout` for them to go.
    Ids are not reused soon after (the kernel allocates them cyclically), so an id still there is ours."""
    import time
    deadline = time.time() + timeout
    left = objs & live_bpf_objects()
    while left and time.time() < deadline:
        time.sleep(0.05)
        left = objs & live_bpf_objects()
    return left


def offcpu_by_reason(res):
    """({reason: ns} of the off-CPU stacks, {reason: ns} of the same parts in the request records plus those of
    the requests not kept, whose off-CPU time the stacks hold too: header offcpu.dropped_ns_by_reason)."""
    from analysis import sampling
    names = res.header["enums"]["offcpu_reason"]
    total = {}
    for _, reason, ns in res.header["offcpu"]["folded"]:
        total[names[str(reason)]] = total.get(names[str(reason)], 0) + ns
    req = res["req"]
    parts = {"io_wait": int(req["io_wait_ns"].sum()), "dsleep": int(req["dsleep_ns"].sum()),
             "sleep": int(req["sleep_ns"].sum()), "lock_wait": int(req["lock_ns"].sum()),
             "worker": int(req["worker_ns"].sum() + req["worker_wait_ns"].sum())}
    for reason, ns in sampling.offcpu_dropped_by_reason(res.header).items():
        parts[reason] += ns
    return total, parts


def timeline_flows(res, slices):
    """{flow id: (source slice, destination slice, (source kind, destination kind))} of a timeline read back
    (analysis/timeline.py read()), each kind "request", "block request" or "work item", after checking that
    every flow has both ends and that its source event comes first (Perfetto drops a flow that ends before it
    begins)."""
    starts = {f: s for s in slices for f in s["flows"]}
    ends = {f: s for s in slices for f in s["ends"]}
    assert set(starts) == set(ends), (len(starts), len(ends))
    late = [f for f in starts if starts[f]["flow_at"][f] >= ends[f]["flow_at"][f]]
    assert not late, late[:5]
    requests = set(res.header["enums"]["req_kind"].values())
    work = set(res.header["enums"]["work_kind"].values())

    def kind(s):
        return ("request" if s["name"] in requests else "block request" if re.match(r"[RW] \d+ KiB$", s["name"])
                else "work item" if s["name"] in work else s["name"])
    return {f: (starts[f], ends[f], (kind(starts[f]), kind(ends[f]))) for f in starts}


def one_line_error(p):
    """The one line a command that refused its input printed (it failed, with that line alone on stderr)."""
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("fstrace: error:"), p.stderr
    return lines[0]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


@contextlib.contextmanager
def cgroup2_child(name):
    """A new cgroup v2 directory under the root; whatever still runs in it at the end is killed, then it is
    removed.  Skips the test where no cgroup v2 hierarchy is mounted."""
    root = cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy mounted here")
    path = os.path.join(root, "%s-%d" % (name, os.getpid()))
    os.mkdir(path)
    try:
        yield path
    finally:
        remove_cgroup(path)


def descendants(pid):
    """Every descendant of pid, from /proc (ppid links)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


@pytest.fixture(scope="session")
def real():
    """(path, bytes) of a small real results file kept in tests/data (a collector's format 2 file of direct reads
    of a 512 KiB file: requests, block requests, folded stacks, device figures; forge.real_results made it)."""
    path = os.path.join(DATA, "real.fst")
    with open(path, "rb") as f:
        return path, f.read()


@pytest.fixture(scope="session")
def erofs_randread_summary():
    """summary.json of a cold erofs randread run kept in tests/data (tests/data/README.md)."""
    with open(os.path.join(DATA, "erofs-randread-summary.json")) as f:
        return json.load(f)


@contextlib.contextmanager
def erofs_mounted(d, files, mkfs_options=(), direct_io=False, mount_options="ro"):
    """An erofs image of files ({name: bytes}) made in directory d with mkfs.erofs mkfs_options, on a read-only
    loop device (direct I/O to the image file with direct_io), mounted under d with mount_options: (mount point,
    loop device) until the block ends."""
    src = d / "src"
    src.mkdir()
    for name, data in files.items():
        (src / name).write_bytes(data)
    img = str(d / "img.erofs")
    subprocess.run(["mkfs.erofs"] + list(mkfs_options) + [img, str(src)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    mnt = str(d / "mnt")
    os.mkdir(mnt)
    dev = subprocess.run(["losetup", "-f", "--show", "-r"] + (["--direct-io=on"] if direct_io else []) + [img],
                         check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    try:
        subprocess.run(["mount", "-t", "erofs", "-o", mount_options, dev, mnt], check=True)
    except BaseException:
        subprocess.run(["losetup", "-d", dev])  # the mount's failure is the one to see
        raise
    try:
        yield mnt, dev
    finally:
        subprocess.run(["umount", mnt], check=True)
        subprocess.run(["losetup", "-d", dev], check=True)


@pytest.fixture(scope="module")
def mounted_erofs(tmp_path_factory):
    """(mount point, loop device) of a small compressed erofs image: big.bin (4 MiB random, 4 MiB zeros) and
    small.txt (14 KB of text)."""
    files = {"big.bin": os.urandom(4 << 20) + bytes(4 << 20), "small.txt": b"hello fstrace\n" * 1000}
    with erofs_mounted(tmp_path_factory.mktemp("erofs"), files, ["-zlz4hc", "-C16384", "-T0"]) as m:
        yield m


@pytest.fixture(scope="session")
def default_tree():
    """(directory, manifest) of the default dataset's tree at the test scale, generated once per cache."""
    from workloads import dataset
    root, manifest = dataset.ensure_default(CACHE, float(SCALE))
    return os.path.join(root, "tree"), manifest


def alive(pid):
    """Whether process pid runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def trace_python(tmp_path, name, script, args, *options):
    """The collector around `python3 -c script args`, --records all (and options); its loaded results."""
    from analysis import results
    f = tmp_path / (name + ".fst")
    subprocess.run([COLLECTOR, "-o", str(f), "--records", "all", *options, "--", "/usr/bin/python3", "-c", script]
                   + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return results.load(str(f))


def assert_exact_partition(res):
    """Every recorded request's parts sum to its wall time; every counted key's parts to its wall time."""
    import numpy as np
    req = res["req"]
    wall = (req["ts_end_ns"] - req["ts_start_ns"]).astype(np.int64)
    parts = sum(req[p].astype(np.int64) for p in res.schema.parts)
    assert np.array_equal(wall, parts)
    for row in res.header["kernel_aggregates"]["requests_counted"]:
        assert sum(row["part_ns"].values()) == row["wall_ns"]
        assert set(row["part_ns"]) == set(res.schema.parts)
        # counted requests never left the CPU: only on-CPU work and the tracer's
        assert {p for p, v in row["part_ns"].items() if v} <= {"oncpu_ns", "tracer_ns"}
        assert sum(row["wall_hist"]) == sum(row["wall_ns_loglin"]) == row["count"]
        for p, v in row["part_ns"].items():
            assert sum(row["part_hist"][p]) <= row["count"] and (sum(row["part_hist"][p]) > 0) == (v > 0)


@pytest.fixture(scope="session")
def collector_header(tmp_path_factory):
    """The results header of today's collector (a run of `true`): records.h's names and layouts as it writes
    them (its "schema", "enums", "losses", ...), for the tests that need them before or without a run."""
    from analysis import results
    out = tmp_path_factory.mktemp("header") / "true.fst"
    subprocess.run([COLLECTOR, "-o", str(out), "--", "true"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return results.load(str(out)).header
