"""The run's cgroups: its own cgroup v2 directory for the workload (or, without cgroup v2, the workload's process
group in its place), emptied before the image is unmounted, and the I/O throttling cgroups of --iops-cap and
--storage."""
import contextlib
import os
import signal
import time

from cli.devices import mount_of
from common.system import FstraceError, stat_fields


def cgroup2_root():
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or its unified part in a hybrid layout), or
    None."""
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if os.path.exists(os.path.join(root, "cgroup.controllers")):
            return root
    return None


def is_cgroup2_dir(path):
    """path is a directory of the cgroup v2 hierarchy (the collector's --cgroup filter takes no other: a v1
    cgroup's or any directory's inode number would filter on a cgroup that never runs)."""
    m = mount_of(path) if os.path.isdir(path) else None
    return m is not None and m[1] == "cgroup2"


def run_cgroup(cleanup):
    """The run's own cgroup v2 directory, for its workload: at the end (or on any error or interrupt)
    everything in it is killed and waited for before the image is unmounted, however many processes the
    workload forked and whatever became of the collector.  None without cgroup v2: see run_process_group.
    FSTRACE_TEST_NO_CGROUP2=1 takes that path on a host that has it (the tests)."""
    root = None if os.environ.get("FSTRACE_TEST_NO_CGROUP2") == "1" else cgroup2_root()
    if root is None:
        return None
    d = os.path.join(root, "fstrace-run-%d" % os.getpid())
    os.mkdir(d)
    cleanup.push("remove cgroup " + d, remove_cgroup, d, record={"kind": "cgroup", "path": d})
    return d


def run_process_group(argv, tmp, cleanup):
    """Without cgroup v2, the workload's process group stands in for the run's cgroup: the collector's child
    makes its own group (collect.c) and execs argv through a shell that writes its pid, the group's id, to a
    file in tmp; at cleanup, before the image is unmounted, the group is ended (end_process_group).
    Returns the argv to run."""
    pgid_file = os.path.join(tmp, "workload.pgid")
    cleanup.push("end the workload's process group", end_process_group, pgid_file)
    return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', pgid_file] + list(argv)


def process_group_members(pgid, session=None):
    """Live processes of process group pgid in this session, or in session (a group id is a pid: reused, it
    would be another session's group or none)."""
    sid = str(os.getsid(0) if session is None else session)
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = stat_fields(int(d))
            if f and f[2] == str(pgid) and f[3] == sid:
                out.append(int(d))
    return out


def end_process_group(pgid_file, grace_s=1.0, limit_s=10.0):
    """SIGTERM to the workload's process group, SIGKILL after grace_s to whatever is left (a workload that
    ignores SIGTERM, or is stopped), and wait until none is left: the image is unmounted next."""
    try:
        with open(pgid_file) as f:
            pgid = int(f.read())
    except (OSError, ValueError):
        return  # the workload never started
    start = time.monotonic()
    termed = False
    while True:
        left = process_group_members(pgid)  # checked before every signal: only our session's group is hit
        if not left:
            return
        waited = time.monotonic() - start
        if waited > limit_s:
            raise FstraceError("processes %s of the workload's process group %d would not die" % (left, pgid))
        if not termed or waited > grace_s:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL if termed else signal.SIGTERM)
            termed = True
        time.sleep(0.02)


def iops_cap(devs, iops, cleanup):
    """A cgroup whose reads and writes on devs are capped at iops (block throttling); returns its directory."""
    return io_throttle(devs, {"riops": iops, "wiops": iops}, cleanup)


# cgroup v1 blkio's file for each io.max key
_V1_THROTTLE = {"rbps": "read_bps_device", "wbps": "write_bps_device", "riops": "read_iops_device",
                "wiops": "write_iops_device"}


def io_throttle(devs, limits, cleanup):
    """A cgroup whose I/O on devs is throttled to limits ({rbps, wbps, riops, wiops}: io.max's keys, bytes/s and
    requests/s; a key left out is not limited); returns its directory.

    cgroup v2 io.max where the io controller is available, else cgroup v1 blkio throttling."""
    name = "fstrace-%d" % os.getpid()
    root = cgroup2_root()
    controllers = []
    if root:
        with open(os.path.join(root, "cgroup.controllers")) as f:
            controllers = f.read().split()
    keys = [k for k in _V1_THROTTLE if limits.get(k)]
    if "io" in controllers:
        with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
            f.write("+io")
        d = os.path.join(root, name)
        os.mkdir(d)
        cleanup.push("remove cgroup " + d, remove_cgroup, d, record={"kind": "cgroup", "path": d})
        with open(os.path.join(d, "io.max"), "w") as f:
            for ma, mi in devs:
                f.write("%d:%d %s\n" % (ma, mi, " ".join("%s=%d" % (k, limits[k]) for k in keys)))
        return d
    v1 = "/sys/fs/cgroup/blkio"
    if not os.path.exists(os.path.join(v1, "blkio.throttle.read_iops_device")):
        raise FstraceError("cannot throttle the image's device: no cgroup v2 io controller and no cgroup v1 blkio "
                           "throttling")
    d = os.path.join(v1, name)
    os.mkdir(d)
    cleanup.push("remove cgroup " + d, remove_cgroup, d, record={"kind": "cgroup", "path": d})
    for ma, mi in devs:
        for k in keys:
            with open(os.path.join(d, "blkio.throttle." + _V1_THROTTLE[k]), "w") as f:
                f.write("%d:%d %d\n" % (ma, mi, limits[k]))
    return d


def cgroup_pids(d):
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def remove_cgroup(d):
    """Kill every process in cgroup d (v2 cgroup.kill, else one by one), wait until it is empty, remove it."""
    deadline = time.monotonic() + 10
    while True:
        pids = cgroup_pids(d)
        if not pids:
            break
        if time.monotonic() > deadline:
            raise FstraceError("processes %s in %s would not die" % (pids, d))
        if os.path.exists(os.path.join(d, "cgroup.kill")):
            with open(os.path.join(d, "cgroup.kill"), "w") as f:
                f.write("1")
        else:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    for _ in range(50):  # an emptied cgroup may be busy a moment longer
        try:
            os.rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    os.rmdir(d)


def in_cgroup(argv, cgroup_dirs):
    """argv run inside every one of cgroup_dirs (the shell moves itself in, then becomes the command)."""
    return (["sh", "-c", 'for d in $0; do echo $$ > "$d/cgroup.procs" || exit 126; done; exec "$@"',
             " ".join(cgroup_dirs)] + list(argv))
