"""The fentry tier and its kprobe twins on a real Debian 6.1 kernel (QEMU, TCG): scripts/vmtest.py.

This machine's kernel refuses fentry and has no kprobes, so the decompression probes can only be proven
on another kernel; the harness boots one, traces cold reads of erofs, squashfs (xz, lz4) and btrfs (zstd)
images with each tier, and checks the records against the images (unit sizes, bytes covered, tiers)."""
import os
import re
import subprocess
import sys

from conftest import ROOT


def test_decompression_probes_on_debian_61():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "vmtest.py")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert re.search(r"guest kernel 6\.1\.", p.stdout)
    for name in ("erofs", "sqxz", "sqlz4", "btrfs"):
        for tier in ("fentry", "kprobe"):
            line = [l for l in p.stdout.splitlines() if l.startswith(name) and " tier %s " % tier in l]
            assert line, "%s %s missing:\n%s" % (name, tier, p.stdout)
            units = int(re.search(r"(\d+) units", line[0]).group(1))
            assert units > 0
    # btrfs decompresses in its end-io workers, squashfs in the reading task (6.1 percpu decompressor)
    assert "ctx kworker" in [l for l in p.stdout.splitlines() if l.startswith("btrfs")][0]
    assert "traced task" in [l for l in p.stdout.splitlines() if l.startswith("sqxz")][0]
