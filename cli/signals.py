"""Ctrl-C, SIGTERM and SIGHUP as an exception (Interrupted) that unwinds a command's cleanup, and the one way
a command stops a child it started (a collector, a tracer, a workload's process group)."""
import contextlib
import os
import signal
import subprocess
import time

from cli.cgroups import process_group_members
from common.system import descendants, proc_start, signals_held


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived."""

    def __init__(self, signum):
        super().__init__("interrupted by %s" % signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def stop_process(p, timeout_s=30, sig=signal.SIGINT, group=False):
    """Ask a child (a collector, a tracer) to finish with sig and wait for it, SIGKILL after timeout_s; its exit
    status (-SIGKILL when it had to be killed).  group: the child leads a process group of its own
    (start_new_session) and the whole group is signalled, so that nothing it started is left holding a mount:
    with every process below it at the signal, which may have left the group (fio's job processes make sessions
    of their own), and each is waited for, not only the leader (one the leader's end orphaned may still be
    closing its files on the mount), and killed with the leader after timeout_s.  Signals are held off meanwhile:
    a second Ctrl-C (or a SIGTERM, SIGHUP) must not leave it running on the mount."""
    below = descendants(p.pid) if group else []

    def send(s):
        if group:
            with contextlib.suppress(ProcessLookupError):  # the group is gone already
                os.killpg(p.pid, s)
            for pid, start in below:
                if proc_start(pid) == start:  # still that process, not another given its pid
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, s)
        else:
            p.send_signal(s)

    def group_ended(deadline):
        # the group's session is its own (start_new_session): its leader's pid
        while group and (process_group_members(p.pid, session=p.pid) or
                         any(proc_start(pid) == start for pid, start in below)):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    with signals_held():
        deadline = time.monotonic() + timeout_s
        send(sig)
        try:
            rc = p.wait(timeout=timeout_s)
            if group_ended(deadline):
                return rc
        except subprocess.TimeoutExpired:
            rc = None
        send(signal.SIGKILL)
        rc = p.wait() if rc is None else rc
        group_ended(time.monotonic() + timeout_s)  # SIGKILL'd: they leave at once, bar one in the kernel's I/O
        return rc


def install_signal_handlers(keep_ignored=False):
    """SIGINT, SIGTERM and SIGHUP raise Interrupted; keep_ignored: not those ignored at the start (nohup, a
    shell's background job), so that a long run started that way is not stopped by a logout."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if not keep_ignored or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _raise_interrupted)
