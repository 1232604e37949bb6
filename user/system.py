"""What runs under user/ go through beyond common/system.py: signals, the sweep of what dead runs left,
mounts and devices to trace, the run's cgroups and process group, temporary and results directories.

The helpers workloads/ shares (errors, the cleanup stack and its run record, loop devices, mounts, cache locks)
are in common/system.py and are imported from here too, so that user/ has one place to import them from.
"""
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time

from common.system import (STATE_DIR, Cleanup, FstraceError, forget_recorded, lock_path, losetup, mount,  # noqa: F401
                           proc_start, progress, recording, retry, run, signals_held, stat_fields, shown,
                           write_json_atomic, writing)


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived."""

    def __init__(self, signum):
        super().__init__("interrupted by %s" % signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def stop_process(p, timeout_s=30, sig=signal.SIGINT):
    """Ask a child (a collector, a tracer) to finish with sig and wait for it, SIGKILL after timeout_s; its exit
    status (-SIGKILL when it had to be killed).  Signals are held off meanwhile: a second Ctrl-C (or a SIGTERM,
    SIGHUP) must not leave it running on the mount."""
    with signals_held():
        p.send_signal(sig)
        try:
            return p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()


def install_signal_handlers(keep_ignored=False):
    """SIGINT, SIGTERM and SIGHUP raise Interrupted; keep_ignored: not those ignored at the start (nohup, a
    shell's background job), so that a long run started that way is not stopped by a logout."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if not keep_ignored or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _raise_interrupted)


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


@contextlib.contextmanager
def recorded_run():
    """Record what this process creates, after first removing what dead runs left behind."""
    sweep_dead_runs()
    with recording() as state:
        yield state


def _owner_alive(doc):
    """The run that wrote doc is still running (same pid, same start time, still fstrace)."""
    pid = doc.get("pid")
    return (isinstance(pid, int) and proc_start(pid) == doc.get("start")
            and any(a.endswith(b"cli.py") for a in _cmdline(pid)))


def _undo_record(item):
    """Undo one record of a dead run; returns a description, or None when nothing was left of it."""
    kind, path = item.get("kind"), item.get("path")
    if kind == "process":
        pid = item["pid"]
        if proc_start(pid) != item.get("start"):
            return None
        os.kill(pid, signal.SIGKILL)  # the collector: its BPF programs go with it
        for _ in range(100):
            if proc_start(pid) != item.get("start"):
                break
            time.sleep(0.05)
        return "killed orphaned collector pid %d" % pid
    if kind == "cgroup":
        if not os.path.isdir(path):
            return None
        remove_cgroup(path)
        return "removed cgroup %s" % path
    if kind == "mount":
        if not any(m[0] == path for m in mounts()):
            return None
        retry(lambda: run(["umount", path]), tries=100)
        return "unmounted %s" % path
    if kind == "loop":
        name = os.path.basename(item["dev"])
        try:
            with open("/sys/block/%s/loop/backing_file" % name) as f:
                if f.read().strip() != item["backing"]:
                    return None  # detached since, and reused by someone else
        except OSError:
            return None
        retry(lambda: run(["losetup", "-d", item["dev"]]))
        return "detached loop device %s (%s)" % (item["dev"], item["backing"])
    if kind == "dir":
        if not os.path.isdir(path):
            return None
        shutil.rmtree(path)
        return "removed %s" % path
    return None


def sweep_dead_runs():
    """Undo what runs that died without cleaning up (SIGKILL, power cut of the shell) left behind, one line
    each on stderr; runs whose process is alive are left alone.  Also restores kernel.task_delayacct once
    no live collector holds it."""
    import sys
    if not os.path.isdir(STATE_DIR):
        return
    with open(os.path.join(STATE_DIR, "sweep.lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        for name in sorted(os.listdir(STATE_DIR)):
            if not (name.startswith("run-") and name.endswith(".json")):
                continue
            path = os.path.join(STATE_DIR, name)
            try:
                with open(path) as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                continue
            if _owner_alive(doc):
                continue
            for item in reversed(doc.get("items", [])):
                try:
                    what = _undo_record(item)
                except (OSError, FstraceError) as e:
                    what = "could not undo %s: %s" % (item, e)
                if what:
                    print("fstrace: leftover of dead run %s: %s" % (doc.get("pid"), what), file=sys.stderr)
            os.unlink(path)
        delayacct_sweep()


DELAYACCT_REFS = os.path.join(STATE_DIR, "delayacct")


def delayacct_sweep():
    """Drop dead collectors from the kernel.task_delayacct holder list (protocol: user/collect.c,
    delayacct_ref) and restore the value they found once none is left."""
    import sys
    try:
        fd = os.open(DELAYACCT_REFS, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        words = os.read(fd, 1 << 16).split()
        if not words:
            return
        restore, holders = int(words[0]), [int(w) for w in words[1:]]
        live = [p for p in holders if proc_start(p) is not None and _comm(p) == "fstrace-collect"]
        if live == holders:
            return
        os.lseek(fd, 0, 0)
        os.ftruncate(fd, 0)
        if live:
            os.write(fd, ("%d\n" % restore + "".join("%d\n" % p for p in live)).encode())
        elif restore >= 0:
            with open("/proc/sys/kernel/task_delayacct", "w") as f:
                f.write("%d\n" % restore)
            print("fstrace: leftover of dead collector %s: kernel.task_delayacct restored to %d"
                  % (",".join(map(str, holders)), restore), file=sys.stderr)
    finally:
        os.close(fd)


def _comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def ensure_tracefs(cleanup):
    """Mount tracefs for tools that look tracepoints up there (bpftrace), unmounted again at cleanup;
    it is not mounted by default on every system."""
    if not os.path.isdir("/sys/kernel/tracing/events"):
        mount("tracefs", "/sys/kernel/tracing", "tracefs", cleanup, options="rw")


def dev_numbers(path_or_dev):
    """(major, minor) of a block device node, or of the filesystem a path is on."""
    st = os.stat(path_or_dev)
    import stat as _stat
    rdev = st.st_rdev if _stat.S_ISBLK(st.st_mode) else st.st_dev
    return os.major(rdev), os.minor(rdev)


def kdev(major, minor):
    """Kernel-internal dev_t encoding the BPF side records."""
    return (major << 20) | minor


def read_ahead_kb(dev):
    """The readahead limit the kernel gives files on a block device (its bdi's ra_pages, in KiB)."""
    ma, mi = dev_numbers(dev)
    with open("/sys/dev/block/%d:%d/queue/read_ahead_kb" % (ma, mi)) as f:
        return int(f.read())


def backing_block_device(path):
    """(major, minor) of the block device holding path's filesystem, or None (tmpfs, overlay, ...)."""
    ma, mi = dev_numbers(path)
    if os.path.exists("/sys/dev/block/%d:%d" % (ma, mi)):
        return ma, mi
    return None


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mounts():
    """[(mountpoint, fstype, source, (major, minor) of the superblock)] from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.rstrip("\n").split(" - ", 1)
            fields = left.split()
            ma, mi = fields[2].split(":")
            fstype, source = right.split()[:2]
            mnt = re.sub(r"\\([0-7]{3})", lambda e: chr(int(e.group(1), 8)), fields[4])  # \040, \011, \134 ...
            out.append((mnt, fstype, source, (int(ma), int(mi))))
    return out


def mount_of(path):
    """The mount holding path (the longest mountpoint prefix)."""
    path = os.path.realpath(path)
    best = None
    for m in mounts():
        mp = m[0]
        if path == mp or path.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) > len(best[0]):
                best = m
    return best


def sdev_arg(mount):
    """The collector's --sdev for a mount (its mountinfo tuple): its superblock's device, and the device stat()
    reports for its files where that differs (a btrfs subvolume's anonymous device), which places stat calls."""
    ma, mi = mount[3]
    try:
        st = os.stat(mount[0]).st_dev
    except OSError:  # gone meanwhile: its superblock's device alone
        return "%d:%d" % (ma, mi)
    # a mount another one covers stats as the covering filesystem: no alias from it
    if (os.major(st), os.minor(st)) == (ma, mi) or mount_of(mount[0])[3] != (ma, mi):
        return "%d:%d" % (ma, mi)
    return "%d:%d=%d:%d" % (ma, mi, os.major(st), os.minor(st))


def block_devices_of_mount(m):
    """Block devices under a mount: its own device, and for a loop device the disk holding its backing file."""
    _, _, source, sdev = m
    devs = []
    if os.path.exists("/sys/dev/block/%d:%d" % sdev):
        devs.append(sdev)
    elif source.startswith("/dev/") and os.path.exists(source):
        devs.append(dev_numbers(source))   # btrfs: anonymous superblock device, real one is the source
    for d in list(devs):
        name = os.path.basename(os.path.realpath("/sys/dev/block/%d:%d" % d))
        try:
            with open("/sys/block/%s/loop/backing_file" % name) as f:
                backing = f.read().strip()
        except OSError:
            continue
        under = backing_block_device(backing) if os.path.exists(backing) else None
        if under and under not in devs:
            devs.append(under)
    return devs


def _cgroup2_root():
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
    root = None if os.environ.get("FSTRACE_TEST_NO_CGROUP2") == "1" else _cgroup2_root()
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


def process_group_members(pgid):
    """Live processes of process group pgid in this session (a group id is a pid: reused, it would be
    another session's group or none)."""
    sid = str(os.getsid(0))
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
    root = _cgroup2_root()
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


def remove_tree(path):
    """rmtree that fails when the tree is still there (a mount in it that would not go): its record then stays
    for the next start's sweep, which unmounts first (a silent ignore_errors would forget it and leave it)."""
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        raise FstraceError("%s is still there (something in it is still mounted or busy)" % path)


def make_tmpdir(cleanup):
    import tempfile
    tmp = tempfile.mkdtemp(prefix="fstrace-run-")
    cleanup.push("remove " + tmp, remove_tree, tmp, record={"kind": "dir", "path": tmp})
    return tmp


# filesystems results can never be written to, whatever the permission bits say
_NO_RESULTS_FS = {"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "bpf", "securityfs", "configfs"}


class ResultsDir:
    """A results directory that appears only when complete: checked and locked when made (before any work),
    written as DIR.partial/ (recorded, so a SIGKILLed run's is removed by the next start) and renamed to DIR
    on success, removed on failure.  Two runs on the same DIR: the second fails at once."""

    def __init__(self, outdir):
        self.outdir = os.path.abspath(outdir)
        self.partial = self.outdir + ".partial"
        if os.path.islink(self.outdir):
            raise FstraceError("output directory %s is a symbolic link; give the real path" % self.outdir)
        if os.path.exists(self.outdir) and (not os.path.isdir(self.outdir) or os.listdir(self.outdir)):
            raise FstraceError("output directory %s exists and is not empty" % self.outdir)
        parent = os.path.dirname(self.outdir)
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise FstraceError("cannot create %s: %s is not a directory" % (self.outdir, parent))
        m = mount_of(parent)
        if m and m[1] in _NO_RESULTS_FS:
            raise FstraceError("cannot write results under %s (a %s filesystem)" % (m[0], m[1]))
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            raise FstraceError("cannot write results under %s: read-only filesystem" % parent)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise FstraceError("cannot write results under %s: permission denied" % parent)
        self._lock = open(lock_path("out", self.outdir), "a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise FstraceError("output directory %s is being written by another fstrace run" % self.outdir)
        if os.path.lexists(self.partial):
            # not a dead run's (those were swept at start): someone's files, never deleted for them
            self._lock.close()
            raise FstraceError("%s already exists; remove it or choose another -o" % self.partial)

    def __enter__(self):
        try:
            os.makedirs(self.partial)
        except OSError as e:
            self._lock.close()
            raise FstraceError("cannot create %s: %s" % (self.partial, e.strerror))
        self._cleanup = Cleanup()
        self._cleanup.push("remove " + self.partial, remove_tree, self.partial,
                           record={"kind": "dir", "path": self.partial})
        return self.partial

    def __exit__(self, exc_type, *rest):
        try:
            if exc_type is None:
                if os.path.isdir(self.outdir):
                    os.rmdir(self.outdir)  # empty (checked above): replaced by the complete one
                os.rename(self.partial, self.outdir)
                forget_recorded("dir", self.partial)
            else:
                self._cleanup.run()
        finally:
            self._lock.close()
        return False
