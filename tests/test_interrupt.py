"""Ctrl-C in the middle of a run: no mount, loop device, BPF program or results left behind."""
import os
import signal
import subprocess
import time

import pytest

from conftest import CACHE, FSTRACE, bpf_objects_left, bpf_objects_of, collector_under, leftovers, \
    settled_leftovers

pytestmark = pytest.mark.bpf


def workload_started(collector):
    """Whether the collector's child has exec'd the workload (before that it runs the collector's binary)."""
    try:
        with open("/proc/%d/task/%d/children" % (collector, collector)) as f:
            children = [int(c) for c in f.read().split()]
        return any(os.readlink("/proc/%d/exe" % c) != os.readlink("/proc/%d/exe" % collector) for c in children)
    except OSError:  # one of them exited meanwhile
        return False


def test_sigint_mid_run_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    before = settled_leftovers()
    # scale 0.25: a 32 MiB file, thousands of cold 4 KiB reads: seconds of work to interrupt
    p = subprocess.Popen([FSTRACE, "run", "--fs", "erofs", "--workload", "randread", "--scale", "0.25",
                          "--cache", CACHE, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    # wait until tracing runs: the collector starts the workload (its child, stopped until then) once every
    # program is attached; then what it holds is all it loaded, and the image is mounted
    collector = collector_under(p.pid)
    assert collector, "run ended before it could be interrupted:\n" + p.stderr.read()
    deadline = time.time() + 600
    while time.time() < deadline:
        if workload_started(collector) and leftovers()[1]:
            objs = bpf_objects_of(collector)
            break
        assert p.poll() is None, "run ended before it could be interrupted:\n" + p.stderr.read()
        time.sleep(0.02)
    else:
        raise AssertionError("tracing never started")
    assert any(kind == "link" for kind, _ in objs) and any(kind == "prog" for kind, _ in objs), objs
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=120)[1]
    assert p.returncode == 130, rest
    assert "interrupted" in rest
    assert settled_leftovers(expect=before) == before
    assert bpf_objects_left(objs) == set()
    assert not out.exists()
    assert not os.path.exists(str(out) + ".partial")
    assert not list(tmp_path.glob("**/*.fst*"))
