"""What a run that died without cleaning up (SIGKILL, a power cut of its shell) left behind: each command that
changes the machine records what it creates (common/system.py, recording) after first undoing what dead runs
recorded."""
import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import time

from cli.cgroups import remove_cgroup
from common.system import (STATE_DIR, FstraceError, detach_loop, proc_start, recording, remove_unheld_locks,
                           require_host_pid_namespace, unmount)


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
    """The run that wrote doc is still running (same pid, same start time, still fstrace: `python3 -m cli`, as
    the launchers start it)."""
    pid = doc.get("pid")
    if not isinstance(pid, int) or proc_start(pid) != doc.get("start"):
        return False
    argv = _cmdline(pid)
    return (b"-m", __package__.encode()) in zip(argv, argv[1:])


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
        return "unmounted %s" % path if unmount(path) else None
    if kind == "loop":  # not if detached since, and maybe reused by someone else
        return "detached loop device %s (%s)" % (item["dev"], item["backing"]) \
            if detach_loop(item["dev"], item["backing"]) else None
    if kind == "dir":
        if not os.path.isdir(path):
            return None
        shutil.rmtree(path)
        return "removed %s" % path
    return None


def sweep_dead_runs():
    """Undo what runs that died without cleaning up (SIGKILL, power cut of the shell) left behind, one line
    each on stderr; runs whose process is alive are left alone.  Also restores kernel.task_delayacct once
    no live collector holds it.  Only from the host's pid namespace: elsewhere every run looks dead."""
    require_host_pid_namespace()
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
        remove_unheld_locks()


DELAYACCT_REFS = os.path.join(STATE_DIR, "delayacct")


def delayacct_sweep():
    """Drop dead collectors from the kernel.task_delayacct holder list (protocol: user/collect.c,
    delayacct_ref) and restore the value they found once none is left."""
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
        live = [p for p in holders if proc_start(p) is not None and task_comm(p) == "fstrace-collect"]
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


def task_comm(pid):
    """A process's name (/proc/PID/comm); None once it has gone."""
    try:
        with open("/proc/%d/comm" % int(pid)) as f:
            return f.read().strip()
    except OSError:
        return None
