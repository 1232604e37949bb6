"""Loop devices, mounts, caches and the cleanup stack every run goes through.

Everything a run sets up (loop device, mount, temporary directory) is pushed
onto a Cleanup stack as it is made, and undone in reverse order on normal exit,
error, Ctrl-C or SIGTERM, so a run leaves nothing behind.
"""
import os
import signal
import subprocess
import time


class FstraceError(Exception):
    """An error the user can act on; printed as one line."""


def run(argv, **kw):
    """Run a command; a failure becomes an FstraceError naming the command and its last stderr line."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    try:
        p = subprocess.run(argv, text=True, **kw)
    except FileNotFoundError:
        raise FstraceError("%s is not installed" % argv[0])
    if p.returncode != 0:
        err = (p.stderr or "").strip().splitlines()
        raise FstraceError("%s failed (exit %d)%s" % (" ".join(argv[:3]), p.returncode,
                                                      ": " + err[-1] if err else ""))
    return p


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived."""

    def __init__(self, signum):
        super().__init__("interrupted by %s" % signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def install_signal_handlers():
    signal.signal(signal.SIGINT, _raise_interrupted)
    signal.signal(signal.SIGTERM, _raise_interrupted)
    signal.signal(signal.SIGHUP, _raise_interrupted)


class Cleanup:
    """Undo actions, run last-in first-out; signals are held off while they run."""

    def __init__(self):
        self._undo = []

    def push(self, what, fn, *args):
        self._undo.append((what, fn, args))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.run()
        return False

    def run(self):
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        errors = []
        try:
            while self._undo:
                what, fn, args = self._undo.pop()
                try:
                    fn(*args)
                except Exception as e:  # keep undoing the rest
                    errors.append("%s: %s" % (what, e))
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        if errors:
            raise FstraceError("cleanup incomplete: " + "; ".join(errors))


def _retry(fn, tries=20, delay=0.1):
    for i in range(tries):
        try:
            return fn()
        except FstraceError:
            if i == tries - 1:
                raise
            time.sleep(delay)


def losetup(image, cleanup, direct_io=True, read_only=True):
    """Attach image to a free loop device; returns (/dev/loopN, direct_io actually in effect)."""
    argv = ["losetup", "--find", "--show"]
    if read_only:
        argv.append("--read-only")
    if direct_io:
        argv.append("--direct-io=on")
    dev = run(argv + [image]).stdout.strip()
    cleanup.push("detach " + dev, lambda: _retry(lambda: run(["losetup", "-d", dev])))
    name = os.path.basename(dev)
    dio = False
    try:
        with open("/sys/block/%s/loop/dio" % name) as f:
            dio = f.read().strip() == "1"
    except OSError:
        pass
    return dev, dio


def mount(dev, mnt, fstype, cleanup, options="ro"):
    os.makedirs(mnt, exist_ok=True)
    try:
        run(["mount", "-t", fstype, "-o", options, dev, mnt])
    except FstraceError as e:
        raise FstraceError("cannot mount %s as %s: %s" % (dev, fstype, e))
    cleanup.push("unmount " + mnt, lambda: _retry(lambda: run(["umount", mnt])))


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
            mnt = fields[4].replace("\\040", " ")
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


def iops_cap(devs, iops, cleanup):
    """A cgroup whose reads and writes on devs are capped at iops (block throttling); returns its directory.

    cgroup v2 io.max where the io controller is available, else cgroup v1 blkio throttling."""
    name = "fstrace-%d" % os.getpid()
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        try:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                if "io" not in f.read().split():
                    continue
        except OSError:
            continue
        with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
            f.write("+io")
        d = os.path.join(root, name)
        os.mkdir(d)
        cleanup.push("remove cgroup " + d, _rmdir_cgroup, d)
        with open(os.path.join(d, "io.max"), "w") as f:
            for ma, mi in devs:
                f.write("%d:%d riops=%d wiops=%d\n" % (ma, mi, iops, iops))
        return d
    v1 = "/sys/fs/cgroup/blkio"
    if not os.path.exists(os.path.join(v1, "blkio.throttle.read_iops_device")):
        raise FstraceError("cannot cap IOPS: no cgroup v2 io controller and no cgroup v1 blkio throttling")
    d = os.path.join(v1, name)
    os.mkdir(d)
    cleanup.push("remove cgroup " + d, _rmdir_cgroup, d)
    for ma, mi in devs:
        for knob in ("read", "write"):
            with open(os.path.join(d, "blkio.throttle.%s_iops_device" % knob), "w") as f:
                f.write("%d:%d %d\n" % (ma, mi, iops))
    return d


def _rmdir_cgroup(d):
    for _ in range(50):  # its tasks may take a moment to be gone
        try:
            os.rmdir(d)
            return
        except OSError:
            time.sleep(0.1)
    os.rmdir(d)


def in_cgroup(argv, cgroup_dir):
    """argv run inside cgroup_dir (the shell moves itself in, then becomes the command)."""
    return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup_dir] + list(argv)
