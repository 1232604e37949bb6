"""System helpers every layer uses, from below: errors, commands, the cleanup stack and its run record,
loop devices, mounts and cache locks.

workloads/ (image builds) and cli/ (runs, attach, serve) both build on this; it imports neither.
Everything a run sets up (loop device, mount, temporary directory) is pushed onto a Cleanup stack as it is
made, and undone in reverse order on normal exit, error, Ctrl-C or SIGTERM, so a run leaves nothing behind;
while a run is recorded (recording()), each item is also written to its state file so that the next start
can undo it should this process be SIGKILLed (cli/leftovers.py, sweep_dead_runs).
"""
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time

STATE_DIR = "/run/fstrace"  # what live runs created, and locks; tmpfs: gone at reboot like mounts and loops
# the packages' root: a checkout, or an installed fstrace's PREFIX/lib/fstrace (make install, the Debian package)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a checkout has scripts/setup.sh, which ./fstrace runs to install what a command needs; an installed fstrace
# installs nothing, so what is missing is named with the Debian package that has it
INSTALLED = not os.path.exists(os.path.join(ROOT, "scripts", "setup.sh"))


class FstraceError(Exception):
    """An error the user can act on; printed as one line."""


def shown(text):
    """A name from outside (a path, a tar member, a link target) as it may be printed on one line: control
    characters and undecodable bytes escaped (a trailing newline in a name would split the error line, an
    escape sequence would rewrite the terminal), anything else as it is."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   if ord(c) < 0xd800 or ord(c) > 0xdfff else "\\x%02x" % (ord(c) - 0xdc00)
                   for c in text)


def require_tools(what, tools):
    """tools: [(command, the Debian package that has it)] (a command with a "/" is that file; without, one on PATH).
    Raises one FstraceError naming every missing command and its package, with how to get them."""
    import shutil
    missing = [(cmd, pkg) for cmd, pkg in tools
               if not (os.access(cmd, os.X_OK) if "/" in cmd else shutil.which(cmd))]
    if not missing:
        return
    names = ", ".join("%s (Debian package %s)" % (cmd, pkg) for cmd, pkg in missing)
    if INSTALLED:
        how = "apt-get install %s" % " ".join(dict.fromkeys(pkg for _, pkg in missing))
    else:
        how = "sudo ./fstrace setup"
    raise FstraceError("%s needs %s, not installed: %s" % (what, names, how))


def run(argv, whole_stderr=False, **kw):
    """Run a command; a failure becomes an FstraceError naming the command and its last stderr line (whole_stderr:
    all its lines, for a command such as mount whose last line is a hint and whose reason comes first)."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    try:
        p = subprocess.run(argv, text=True, **kw)
    except FileNotFoundError:
        raise FstraceError("%s is not installed" % argv[0])
    if p.returncode != 0:
        err = [line.strip() for line in (p.stderr or "").splitlines() if line.strip()]
        err = " ".join(err) if whole_stderr else err[-1] if err else ""
        raise FstraceError("%s failed (exit %d)%s" % (" ".join(argv[:3]), p.returncode,
                                                      ": " + shown(err) if err else ""))
    return p


def progress(msg):
    """One line of progress (or a warning) for the user, on stderr."""
    print("fstrace: " + shown(msg), file=sys.stderr, flush=True)


class Cleanup:
    """Undo actions, run last-in first-out; signals are held off while they run."""

    def __init__(self):
        self._undo = []

    def push(self, what, fn, *args, record=None):
        """record: {"kind": ..., ...}, written to this run's state file until undone, so that the next
        fstrace start can undo it should this process be SIGKILLed (see sweep_dead_runs)."""
        if record is not None and _state is not None:
            item = _state.add(record)
            self._undo.append((what, _then_forget, (item, fn) + args))
        else:
            self._undo.append((what, fn, args))

    def undo(self, what):
        """Undo now the newest action named what, and forget it (a mount undone to be made again afresh)."""
        for i in range(len(self._undo) - 1, -1, -1):
            if self._undo[i][0] == what:
                _, fn, args = self._undo.pop(i)
                with signals_held():
                    fn(*args)
                return
        raise KeyError(what)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.run()
        return False

    def run(self):
        errors = []
        with signals_held():
            while self._undo:
                what, fn, args = self._undo.pop()
                try:
                    fn(*args)
                except Exception as e:  # keep undoing the rest
                    errors.append("%s: %s" % (what, e))
        if errors:
            raise FstraceError("cleanup incomplete: " + "; ".join(errors))


@contextlib.contextmanager
def signals_held():
    """SIGINT, SIGTERM and SIGHUP ignored meanwhile: what runs here (undoing, waiting for the collector to
    leave the mount) must finish, and a second Ctrl-C must not cut it short."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def writing(path):
    """An OSError while writing path as one line naming it: a full disk's ENOSPC comes from write() or
    close() and carries no file name."""
    try:
        yield
    except OSError as e:
        raise FstraceError("cannot write %s: %s" % (e.filename or path, e.strerror or e))


def write_json_atomic(path, doc, **dump_args):
    """path replaced whole (temp + rename): a crash or a full disk leaves the old file or none, never half."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f, **dump_args)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def retry(fn, tries=20, delay=0.1):
    for i in range(tries):
        try:
            return fn()
        except FstraceError:
            if i == tries - 1:
                raise
            time.sleep(delay)


def _then_forget(item, fn, *args):
    fn(*args)
    _state.forget(item)


def stat_fields(pid):
    """/proc/PID/stat after the command name (state, ppid, pgrp, session, ...); None if gone or a zombie
    (gone but for its pid)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields
    except (OSError, IndexError):
        return None


# the initial pid namespace's inode number (the kernel's PROC_PID_INIT_INO, fixed since 3.8)
INIT_PID_NS_INO = 0xEFFFFFFC


def require_host_pid_namespace():
    """fstrace names processes by the host's ids: its BPF side does, and the runs it undoes after a crash are
    known by pid.  From a pid namespace of its own (a container's) it would take live runs for dead ones and
    tear down their mounts and loop devices, and trace the wrong threads or none: refused."""
    try:
        ino = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return  # a kernel without namespaces: there is only the one
    if ino != INIT_PID_NS_INO:
        raise FstraceError("this process is in a pid namespace of its own (a container's): fstrace names processes "
                           "by the host's ids; run it in the host's pid namespace (docker run --pid=host, "
                           "Kubernetes hostPID: true)")


def process_alive(pid):
    """Whether any thread of process pid runs: its main thread may have exited (a zombie leader, which /proc/PID/stat
    shows) while the others go on."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
        except (OSError, IndexError):
            pass
    return False


def proc_start(pid):
    """A process's start time (clock ticks after boot), which with its pid names it uniquely; None if gone."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def descendants(pid):
    """The live processes below pid, each as (pid, proc_start), from /proc's parent links."""
    kids = {}
    for d in os.listdir("/proc"):
        f = stat_fields(int(d)) if d.isdigit() else None
        if f:
            kids.setdefault(int(f[1]), []).append(int(d))
    out, todo = [], list(kids.get(pid, []))
    while todo:
        k = todo.pop()
        start = proc_start(k)
        if start is not None:
            out.append((k, start))
        todo += kids.get(k, [])
    return out


class RunState:
    """/run/fstrace/run-PID.json: what this run has made and not yet undone (mounts, loop devices,
    directories, cgroups, the collector), rewritten at every change."""

    def __init__(self):
        os.makedirs(STATE_DIR, exist_ok=True)
        self.path = os.path.join(STATE_DIR, "run-%d.json" % os.getpid())
        self.doc = {"pid": os.getpid(), "start": proc_start(os.getpid()), "items": []}
        self._write()

    def _write(self):
        write_json_atomic(self.path, self.doc)

    def add(self, record):
        self.doc["items"].append(record)
        self._write()
        return record

    def forget(self, record):
        self.doc["items"] = [i for i in self.doc["items"] if i is not record]
        self._write()

    def close(self):
        if self.doc["items"]:  # cleanup incomplete (target busy...): the next start retries, once we are gone
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)


_state = None


@contextlib.contextmanager
def recording():
    """Record what this process creates (RunState) while inside."""
    global _state
    _state = RunState()
    try:
        yield _state
    finally:
        _state.close()
        _state = None


def forget_recorded(kind, path):
    """Drop the record of kind at path: it is no longer this run's to undo (a results directory completed)."""
    if _state is not None:
        for item in list(_state.doc["items"]):
            if item.get("kind") == kind and item.get("path") == path:
                _state.forget(item)


def losetup(image, cleanup, direct_io=True, read_only=True):
    """Attach image to a free loop device; returns (/dev/loopN, direct_io actually in effect)."""
    argv = ["losetup", "--find", "--show"]
    if read_only:
        argv.append("--read-only")
    if direct_io:
        argv.append("--direct-io=on")
    dev = run(argv + [image]).stdout.strip()
    backing = os.path.realpath(image)
    cleanup.push("detach " + dev, lambda: detach_loop(dev, backing) or progress(
        "%s was detached already (not by fstrace): nothing to undo there" % dev),
                 record={"kind": "loop", "dev": dev, "backing": backing})
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
        run(["mount", "-t", fstype, "-o", options, dev, mnt], whole_stderr=True)
    except FstraceError as e:
        raise FstraceError("cannot mount %s as %s: %s" % (dev, fstype, e))
    cleanup.push("unmount " + mnt, lambda: unmount(mnt) or progress(
        "%s was unmounted already (not by fstrace): nothing to undo there" % mnt),
                 record={"kind": "mount", "path": mnt})


def unmount(mnt):
    """Unmount mnt; False when it is no mount point any more (someone unmounted it: there is nothing to undo, and
    what was traced on it stands)."""
    if not os.path.ismount(mnt):
        return False
    # the workload's cgroup is killed and emptied before this runs; allow the last file references a moment
    retry(lambda: run(["umount", mnt]) if os.path.ismount(mnt) else None, tries=100)
    return True


def detach_loop(dev, backing):
    """Detach loop device dev from backing; False when it is not attached to backing any more (detached by
    someone else, and maybe attached since to another file, which is not fstrace's to detach)."""
    try:
        with open("/sys/block/%s/loop/backing_file" % os.path.basename(dev)) as f:
            if f.read().strip() != backing:
                return False
    except OSError:
        return False
    retry(lambda: run(["losetup", "-d", dev]))
    return True


def lock_at(lp, blocking=True, wait_s=0.0):
    """The open lock file at lp, flocked, or None (not blocking, and someone held it for wait_s: a start's sweep
    holds an unheld one for a moment before it removes it).  A file its holder removed while this waited on it
    locks nothing any more: then the one at lp now is taken (made if missing)."""
    deadline = time.monotonic() + wait_s
    while True:
        f = open(lp, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            f.close()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)
            continue
        try:
            st, now = os.fstat(f.fileno()), os.stat(lp)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                return f
        except FileNotFoundError:
            pass
        f.close()


def unlock_removing(f, lp):
    """Remove the lock file while still holding it (its waiters then take the next one at lp), then unlock."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lp)
    f.close()


@contextlib.contextmanager
def cache_lock(path):
    """Exclusive lock on a cache entry while it is checked and, if missing, made.  The lock file lives in
    STATE_DIR, not in the cache: a failed build leaves nothing there; its holder removes it when done, so STATE_DIR
    does not keep one per cache entry ever made."""
    lp = lock_path("cache", path)
    f = lock_at(lp)
    try:
        yield
    finally:
        unlock_removing(f, lp)


def remove_unheld_locks():
    """Remove the lock files of cache entries and output directories no one holds (a run killed while it held one
    leaves it)."""
    for name in os.listdir(STATE_DIR):
        if name.startswith(("cache-", "out-")) and name.endswith(".lock"):
            lp = os.path.join(STATE_DIR, name)
            f = lock_at(lp, blocking=False)
            if f:
                unlock_removing(f, lp)


def lock_dir():
    """Where this user's locks live: STATE_DIR for root; for another user (report, compare, bench --merge, which
    need no root) a directory of its own, mode 0700, in XDG_RUNTIME_DIR or /tmp, refused when it is anything else
    (another user could have made it, or put a link there, to have this user's lock files made where it chose)."""
    if os.geteuid() == 0:
        os.makedirs(STATE_DIR, exist_ok=True)
        return STATE_DIR
    return private_dir(os.environ.get("XDG_RUNTIME_DIR") or "/tmp", "fstrace-locks", os.geteuid())


def private_dir(base, name, uid):
    """base/name-uid, made mode 0700 if missing; FstraceError unless it is a directory (not a link) of uid alone."""
    d = os.path.join(base, "%s-%d" % (name, uid))
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, 0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        raise FstraceError("%s is not a directory of this user's alone (mode 0700): move it away" % shown(d))
    return d


def lock_path(kind, path):
    key = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    return os.path.join(lock_dir(), "%s-%s.lock" % (kind, key))
