"""cli.signals.stop_process, the one way a command stops a child it started: a collector alone, or a child
leading a process group (a workload, a benchmark's tracer) with everything it started."""
import contextlib
import os
import signal
import subprocess
import time

import pytest

from cli.signals import stop_process
from common.system import descendants, stat_fields

pytestmark = pytest.mark.unit


def group_members(pgid):
    """Live (not zombie) processes of process group pgid."""
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and (stat_fields(int(d)) or [None] * 3)[2] == str(pgid)]


def started_group(script, members):
    """sh -c script leading a process group of its own, once members processes are in it."""
    p = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    while len(group_members(p.pid)) < members:
        assert p.poll() is None, "the group's leader exited before it was complete"
        time.sleep(0.01)
    return p


def left_of(pgid):
    """The group's members still alive once the signal has had its effect (those it killed leave at once; a
    process the leader's death orphaned is reaped by init meanwhile)."""
    for _ in range(500):
        left = group_members(pgid)
        if not left:
            break
        time.sleep(0.01)
    return left


def test_a_group_is_stopped_whole():
    """What the leader started in the background goes with it (signalling the leader alone would leave it)."""
    p = started_group("sleep 600 & sleep 600 & wait", 3)
    try:
        assert stop_process(p, sig=signal.SIGTERM, group=True) == -signal.SIGTERM
        assert left_of(p.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):  # a failed assertion leaves nothing running either
            os.killpg(p.pid, signal.SIGKILL)


def test_a_group_that_ignores_the_signal_is_killed_whole_after_the_timeout():
    p = started_group("trap '' TERM; sleep 600 & wait", 2)
    try:
        assert stop_process(p, timeout_s=0.2, sig=signal.SIGTERM, group=True) == -signal.SIGKILL
        assert left_of(p.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):  # a failed assertion leaves nothing running either
            os.killpg(p.pid, signal.SIGKILL)


def test_a_group_is_waited_for_after_its_leader():
    """A leader the signal ends at once, with a child that takes a while to go (fio's parent and its job process,
    which still holds the file on the mount): stop_process returns only once the child has gone too."""
    p = started_group("sh -c \"trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.01; done\" & wait", 2)
    try:
        assert stop_process(p, sig=signal.SIGTERM, group=True) == -signal.SIGTERM
        assert group_members(p.pid) == []  # at once, not after a while
    finally:
        with contextlib.suppress(ProcessLookupError):  # a failed assertion leaves nothing running either
            os.killpg(p.pid, signal.SIGKILL)


def test_a_child_that_left_the_group_is_stopped_and_waited_for():
    """A child in a session of its own (as fio's job processes make), which the group's signal does not reach:
    signalled too, as it was below the leader, and gone when stop_process returns."""
    p = subprocess.Popen(["sh", "-c", "setsid sh -c \"trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.01; done\" "
                          "& wait"], start_new_session=True)
    try:
        while not [pid for pid, _ in descendants(p.pid) if os.getsid(pid) != p.pid]:
            assert p.poll() is None
            time.sleep(0.01)
        away = [pid for pid, _ in descendants(p.pid) if os.getsid(pid) != p.pid]
        stop_process(p, sig=signal.SIGTERM, group=True)
        assert [pid for pid in away if stat_fields(pid)] == []  # at once, not after a while
    finally:
        for pid, _ in descendants(p.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)


def trapping(trap):
    """sh with trap set for SIGINT, once it is (before, SIGINT would end it by the signal).  SIGINT back to its
    default first: a shell cannot trap a signal ignored when it started, as it is under a test run started in the
    background (`./scripts/test.sh &`), where the trap would be a no-op and the first case killed after 30 s."""
    p = subprocess.Popen(["sh", "-c", "trap %s INT; echo trapped; while :; do sleep 0.01; done" % trap],
                         stdout=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout.readline() == "trapped\n"
    return p


def test_a_child_alone_is_asked_then_killed():
    assert stop_process(trapping("'exit 3'")) == 3
    assert stop_process(trapping("''"), timeout_s=0.2) == -signal.SIGKILL
