"""Ctrl-C in the middle of a run: no mount, loop device, BPF program or results left behind."""
import os
import signal
import subprocess
import time

from conftest import CACHE, FSTRACE, leftovers, settled_leftovers


def test_sigint_mid_run_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    before = settled_leftovers()
    # scale 0.25: a 32 MiB file, thousands of cold 4 KiB reads: seconds of work to interrupt
    p = subprocess.Popen([FSTRACE, "run", "--fs", "erofs", "--workload", "randread", "--scale", "0.25",
                          "--cache", CACHE, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    # wait until tracing runs: our BPF programs are loaded and the image is mounted
    deadline = time.time() + 600
    while time.time() < deadline:
        loops, mounts, progs = leftovers()
        if progs and mounts:
            break
        assert p.poll() is None, "run ended before it could be interrupted:\n" + p.stderr.read()
        time.sleep(0.02)
    else:
        raise AssertionError("tracing never started")
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=120)[1]
    assert p.returncode == 130, rest
    assert "interrupted" in rest
    assert settled_leftovers(expect=before) == before
    assert not out.exists()
    assert not os.path.exists(str(out) + ".partial")
    assert not list(tmp_path.glob("**/*.fst*"))
