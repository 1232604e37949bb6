"""fstrace attach: filters applied in the kernel, live view, Ctrl-C ends normally, results like run's."""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from analysis import results
from analysis import summary as S
from cli.devices import backing_block_device
from conftest import COLLECTOR, FSTRACE, NOBODY, bpf_objects_left, bpf_objects_of, collector_under, drop_caches, \
    finish_attach, settled_leftovers, start_attach

pytestmark = pytest.mark.bpf


def test_attach_mount_counts_every_read_of_the_workload(tmp_path, mounted_erofs):
    mnt, dev = mounted_erofs
    drop_caches()
    out = tmp_path / "out"
    p, seen = start_attach(out, "--mount", mnt, "--duration", "4", "--interval", "0.5")
    fio = subprocess.run(["fio", "--name=x", "--filename=" + os.path.join(mnt, "big.bin"), "--rw=randread",
                          "--bs=4k", "--ioengine=psync", "--readonly", "--io_size=2m", "--output-format=json"],
                         stdout=subprocess.PIPE, text=True, check=True)
    text = finish_attach(p, seen)
    ios = json.loads(fio.stdout[fio.stdout.index("{"):])["jobs"][0]["read"]["total_ios"]
    res = results.load(str(out / "results.fst"))
    st = os.stat(os.path.join(mnt, "big.bin"))
    reads = S.reads_of(res, st.st_ino)
    # the reads of the file fio read, recorded, and the page-cache hits the kernel counted on that filesystem
    # (fio is the only reader there)
    cnt = S.counted_requests(res, kinds=("read",))
    assert len(reads) + (cnt["count"] if cnt else 0) == ios == 512
    # only requests on the mounted filesystem were kept (in the kernel): nothing from other filesystems
    assert set(np.unique(res["req"]["sdev"]).tolist()) <= {os.major(st.st_dev) << 20 | os.minor(st.st_dev)}
    assert "fio" in text and "IO_WAIT_MS" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["mode"] == "attach"
    loop = summary["devices"]["%d:%d" % (os.major(os.stat(dev).st_rdev), os.minor(os.stat(dev).st_rdev))]
    assert loop["requests"] > 0 and loop["level"] == "loop"
    # every task passes attach's filters here, loop workers too: the backing disk's reads a loop worker made for
    # fio's loop requests are still fio's, through the loop device (not the worker's own), as in run
    with open("/sys/block/%s/loop/backing_file" % os.path.basename(dev)) as f:
        backing = backing_block_device(f.read().strip())
    if backing is None:
        pytest.skip("the image is on no block device here: no backing disk traced")
    io = res["io"]
    mine = io[(io["dev"] == (backing[0] << res.minor_bits | backing[1])) & (res.io_ops(io) == res.io_op("read"))]
    by_workers = [r for r in mine if bytes(r["comm"]).startswith(b"kworker")]
    to_fio = [r for r in by_workers if r["charge"] == S.enum_value(res.header, "charge", "loop")
              and r["pid"] in set(reads["pid"].tolist())]
    assert by_workers and len(to_fio) >= 0.9 * len(by_workers), (len(to_fio), len(by_workers))


def test_attach_comm_filter_and_ctrl_c(tmp_path, mounted_erofs):
    mnt, _ = mounted_erofs
    out = tmp_path / "out"
    before = settled_leftovers()
    p, seen = start_attach(out, "--comm", "fstrace-reader", "--interval", "0.5", "--records", "all")
    # attached (it prints the live view): what its collector holds now is everything it loaded
    objs = bpf_objects_of(collector_under(p.pid, timeout=10))
    assert any(kind == "link" for kind, _ in objs), objs
    target = os.path.join(mnt, "small.txt")
    # the same program under two names: only the one named in --comm is traced
    for name in ("fstrace-reader", "other-reader"):
        subprocess.run(["bash", "-c", "exec -a %s cat %s > /dev/null" % (name, target)], check=True)
        subprocess.run(["python3", "-c", "import ctypes,sys; libc=ctypes.CDLL(None); "
                        "libc.prctl(15, sys.argv[1].encode(), 0, 0, 0); open(sys.argv[2],'rb').read()",
                        name, target], check=True)
    finish_attach(p, seen, signal.SIGINT)
    res = results.load(str(out / "results.fst"))
    comms = {bytes(c).rstrip(b"\0") for c in res["req"]["comm"]}
    assert comms == {b"fstrace-reader"}
    reads = S.reads_of(res, os.stat(target).st_ino)
    assert int(reads["ret"].sum()) == os.path.getsize(target)
    assert settled_leftovers(expect=before) == before
    assert bpf_objects_left(objs) == set()


def test_task_names_with_control_bytes_reach_the_terminal_escaped(tmp_path, mounted_erofs):
    """Security: any process sets its own name, so a name of terminal escapes (clear screen, set the title, ring)
    must reach attach's live view, report and verdict escaped, never as the raw bytes."""
    mnt, _ = mounted_erofs
    name = "\x1b[2J\x1b]0;x\x07\x9b"  # 14 bytes: CSI 2J, OSC title, BEL, and U+009B (C1 CSI) in UTF-8
    out = tmp_path / "out"
    drop_caches()
    p, seen = start_attach(out, "--mount", mnt, "--interval", "0.5", "--records", "all")
    subprocess.run(["python3", "-c", "import ctypes,sys,time; libc=ctypes.CDLL(None); "
                    "libc.prctl(15, sys.argv[1].encode(), 0, 0, 0); f=open(sys.argv[2],'rb'); "
                    "[(f.seek(0), f.read(), time.sleep(0.1)) for _ in range(15)]",
                    name, os.path.join(mnt, "big.bin")], check=True)
    text = finish_attach(p, seen, signal.SIGINT)
    res = results.load(str(out / "results.fst"))
    assert name.encode() in {bytes(c).rstrip(b"\0") for c in res["req"]["comm"]}  # it was traced
    assert "\\x1b[2J\\x1b]0;x\\x07\\xc2\\x9b" in text  # in the live view's table, escaped
    assert not [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) < 0xa0], text


ZOMBIE_LEADER = """
import ctypes, os, sys, threading, time
path, go, done, stop = sys.argv[1:]
def reader():
    while not os.path.exists(go):
        time.sleep(0.01)
    with open(path, "rb", buffering=0) as f:
        for _ in range(50):
            os.pread(f.fileno(), 4096, 0)
    open(done, "w").close()
    while not os.path.exists(stop):
        time.sleep(0.01)
threading.Thread(target=reader).start()
ctypes.CDLL(None).syscall(60, 0)  # exit(2): the main thread alone ends (a zombie leader); the reader goes on
"""


def test_pid_of_a_process_whose_main_thread_exited(tmp_path, mounted_erofs):
    """--pid of a live process whose main thread exited (its leader a zombie, its other thread running): traced,
    each of the 50 reads its thread makes once attach runs counted, and attach ends when the process does (it
    refused the pid; the collector took the process for gone at once)."""
    mnt, _ = mounted_erofs
    go, done, stop = tmp_path / "go", tmp_path / "done", tmp_path / "stop"
    w = subprocess.Popen(["python3", "-c", ZOMBIE_LEADER, os.path.join(mnt, "small.txt"), str(go), str(done),
                          str(stop)])
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            with open("/proc/%d/stat" % w.pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.05)
        tids = [int(t) for t in os.listdir("/proc/%d/task" % w.pid)]
        assert len(tids) == 2  # the zombie leader and the reader
        out = tmp_path / "out"
        p, seen = start_attach(out, "--pid", str(w.pid), "--interval", "0.5", "--records", "all")
        go.touch()
        while not done.exists() and p.poll() is None and time.time() < deadline + 30:
            time.sleep(0.05)
        stop.touch()
        text = finish_attach(p, seen)  # ends on its own once the reader, the last thread, is gone
    finally:
        stop.touch()
        w.wait(timeout=30)
    reads = S.reads_of(results.load(str(out / "results.fst")), os.stat(os.path.join(mnt, "small.txt")).st_ino)
    reader = [t for t in tids if t != w.pid]
    assert len(reads[reads["pid"] == reader[0]]) == 50, text


def test_collector_alone_then_offline_report(tmp_path, mounted_erofs):
    """As on a target box without Python: the collector by itself, the report elsewhere without root."""
    mnt, _ = mounted_erofs
    target = os.path.join(mnt, "big.bin")
    reader = subprocess.Popen(["sh", "-c", "sleep 1; dd if=%s of=/dev/null bs=64k; sleep 1" % target])
    f = tmp_path / "box.fst"
    subprocess.run([COLLECTOR, "-o", str(f), "--records", "all", "--pid", str(reader.pid)], check=True, timeout=60,
                   stderr=subprocess.DEVNULL)
    reader.wait()
    # carried to "another machine": a directory an unprivileged user can read
    import shutil
    import tempfile
    elsewhere = tempfile.mkdtemp(prefix="fstrace-offline-")
    try:
        os.chmod(elsewhere, 0o755)
        shutil.copy(str(f), elsewhere)
        copy = os.path.join(elsewhere, "box.fst")
        os.chmod(copy, 0o644)
        p = subprocess.run(NOBODY + [FSTRACE, "report", copy], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    finally:
        shutil.rmtree(elsewhere)
    assert p.returncode == 0, p.stderr
    assert "reads:" in p.stdout
    res = results.load(str(f))
    reads = S.reads_of(res, os.stat(target).st_ino)
    assert int(reads["ret"].sum()) == os.path.getsize(target)
