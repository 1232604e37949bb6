"""Ctrl-C, SIGTERM and SIGHUP as an exception (Interrupted) that unwinds a command's cleanup, and the one way
a command stops a child it started (a collector, a tracer, a workload's process group)."""
import contextlib
import os
import signal
import subprocess

from common.system import signals_held


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
    (start_new_session) and the whole group is signalled, so that nothing it started is left holding a mount.
    Signals are held off meanwhile: a second Ctrl-C (or a SIGTERM, SIGHUP) must not leave it running on the
    mount."""
    def send(s):
        if group:
            with contextlib.suppress(ProcessLookupError):  # the group is gone already
                os.killpg(p.pid, s)
        else:
            p.send_signal(s)

    with signals_held():
        send(sig)
        try:
            return p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            return p.wait()


def install_signal_handlers(keep_ignored=False):
    """SIGINT, SIGTERM and SIGHUP raise Interrupted; keep_ignored: not those ignored at the start (nohup, a
    shell's background job), so that a long run started that way is not stopped by a logout."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if not keep_ignored or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _raise_interrupted)
