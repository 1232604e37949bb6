"""The fentry tier and its kprobe twins on a real Debian 6.1 kernel (QEMU, TCG): scripts/vmtest.py.

This machine's kernel refuses fentry and has no kprobes, so the decompression probes can only be proven
on another kernel; the harness boots one, traces cold reads of erofs, squashfs (xz, lz4) and btrfs (zstd)
images with each tier, and checks the records against the images (unit sizes, bytes covered, tiers), squashfs's cache lookups against
the image's own metadata and fragment blocks, and btrfs's write compression (seed 004's cp -a && sync onto a
compress=zstd:1 mount) against the files copied and the work items the tracepoint tier timed."""
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
    # squashfs caches and btrfs write compression, checked against the images and files by vmtest itself
    for name in ("sqxz", "sqlz4"):
        for tier in ("fentry", "kprobe"):
            assert re.search(r"^%s +%s +squashfs caches: metadata \d+ lookups" % (name, tier), p.stdout, re.M), p.stdout
    for tier in ("fentry", "kprobe"):
        line = re.search(r"^bw +%s +btrfs compression: (\d+) chunks.*ctx (\S+); tier (\S+)" % tier, p.stdout, re.M)
        assert line and int(line.group(1)) > 0 and line.group(2) == "kworker", p.stdout
        assert line.group(3) in (tier, "kprobe"), p.stdout  # fentry -> kprobe only with the reason printed
    # btrfs decompresses in its end-io workers, squashfs in the reading task (6.1 percpu decompressor)
    assert "ctx kworker" in [l for l in p.stdout.splitlines() if l.startswith("btrfs")][0]
    assert "traced task" in [l for l in p.stdout.splitlines() if l.startswith("sqxz")][0]
