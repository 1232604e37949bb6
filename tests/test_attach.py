"""fstrace attach: filters applied in the kernel, live view, Ctrl-C ends normally, results like run's."""
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import numpy as np
import pytest

from analysis import results
from analysis import requests, selection
from cli.devices import backing_block_device, block_devices_of_mount, mount_of
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
    reads = requests.reads_of(res, st.st_ino)
    # the reads of the file fio read, recorded, and the page-cache hits the kernel counted on that filesystem
    # (fio is the only reader there)
    cnt = requests.counted_requests(res, kinds=("read",))
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
    to_fio = [r for r in by_workers if r["charge"] == selection.enum_value(res.header, "charge", "loop")
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
    reads = requests.reads_of(res, os.stat(target).st_ino)
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
    reads = requests.reads_of(results.load(str(out / "results.fst")), os.stat(os.path.join(mnt, "small.txt")).st_ino)
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
    reads = requests.reads_of(res, os.stat(target).st_ino)
    assert int(reads["ret"].sum()) == os.path.getsize(target)


def cold_cat_under_attach(out, files, d, *args):
    """`fstrace attach ARGS --pid` of a reader that waits until attach is live, then reads files once, cold
    (dropped from the cache first; d: a directory for its fifo): (attach's output, summary)."""
    drop_caches()
    go = os.path.join(d, "go")
    os.mkfifo(go)
    reader = subprocess.Popen(["sh", "-c", 'read x < "$0"; exec cat "$@" > /dev/null', go] + files)
    try:
        p, seen = start_attach(out, *args, "--pid", str(reader.pid), "--interval", "0.5")
    except BaseException:
        reader.kill()
        raise
    with open(go, "w") as f:
        f.write("go\n")
    text = finish_attach(p, seen)  # attach ends when the reader has exited
    assert reader.wait(timeout=60) == 0
    return text, json.loads((out / "summary.json").read_text())


def test_attach_on_the_root_disk_counts_the_readers_own_reads(tmp_path):
    """attach on a filesystem that sits on a disk (this machine's root filesystem; its files read only, the test's
    own written under /var/tmp and removed): the disk is named for what it is, and its amplification and re-read
    are of the reader's own block requests there, at least the bytes the reader needed from the disk (its files,
    dropped from the cache; unless the kernel skipped a completion, which is said) and at most what /proc/diskstats
    counted on the disk meanwhile (other tasks' I/O included); and no other filesystem's figure is listed
    unavailable."""
    root = mount_of("/")
    levels = dict((level, dev) for dev, level in block_devices_of_mount(root))
    if "disk" not in levels:
        pytest.skip("/ is not on a disk here (%s)" % (root,))
    disk = "%d:%d" % levels["disk"]
    d = tempfile.mkdtemp(dir="/var/tmp", prefix="fstrace-disk-test-")
    try:
        files = []
        for i in range(4):
            files.append(os.path.join(d, "f%d" % i))
            with open(files[-1], "wb") as f:
                f.write(os.urandom(4 << 20))
        needed = sum(os.path.getsize(f) for f in files)
        out = tmp_path / "out"
        text, s = cold_cat_under_attach(out, files, d, "--fs", root[1], "--mount", "/")
    finally:
        shutil.rmtree(d)
    assert {n: dv["level"] for n, dv in s["devices"].items()} == {disk: "disk"}
    dev = s["devices"][disk]
    own = dev["workload_reads"]
    # at most what the kernel counted on the disk between the collector's own /proc/diskstats snapshots, which
    # enclose the reader's life
    assert own["bytes"] <= dev["diskstats_delta"]["sectors_read"] * 512, (own, dev)
    if dev["unseen_requests"] or s["losses"]["request_completion_missed"]:
        # Linux 6.18 now and then runs no BPF program for a block completion (docs/measuring.md, Lost events):
        # the shortfall is said, never hidden, and the reader's bytes may be short by it
        assert "LOST" in text, text
    else:
        # every request the kernel counted was seen: all the bytes the reader needed from the disk are there
        assert needed <= own["bytes"], (needed, own, dev)
    assert own["bytes"] == dev["by_charge"]["direct"]["bytes"] + dev["by_charge"]["loop"]["bytes"]
    a = s["amplification"]
    received = s["reads"]["bytes"]
    assert received >= needed  # every byte of the files (and what the loader read of cat's libraries)
    lv = a["device_read_per_received"]
    assert list(lv) == ["disk"] and lv["disk"]["bytes"] == own["bytes"]
    assert lv["disk"]["per_received"] == own["bytes"] / received
    assert a["device_reread_share"] == {"available": True, "bytes": own["reread_bytes"],
                                        "share": own["reread_bytes"] / own["bytes"]}
    assert "device %s (disk): %d reads (%d the traced tasks')" % (disk, dev["requests"], own["requests"]) in text
    amp_line = next(line for line in text.splitlines() if "read amplification" in line)
    assert " disk %.2f" % lv["disk"]["per_received"] in amp_line and "backing" not in text
    h = results.load(str(out / "results.fst")).header
    # every figure of another filesystem is named so in the results (records.h FST_FS_FIGURES), and none is listed
    others = {fig: fs for fig, fs in h["schema"]["figure_fs"].items() if fs != root[1]}
    assert {p["figure"] for p in h["probes"] if p["figure"].split("_")[0] in ("erofs", "squashfs", "btrfs")} <= \
        set(others)
    measures = {p["measures"] for p in h["probes"] if p["figure"] in others}
    assert not [u for u in s["unavailable"] if u["figure"] in measures or "decompression" in u["figure"]], \
        s["unavailable"]
    assert not [u for u in s["unavailable"] if "backing" in u["figure"]]


def test_attach_on_a_partition_of_a_loop_device(tmp_path):
    """A filesystem on a partition, here of a loop device (losetup -P): the partition is traced (a request is
    named by the partition it is for) as the image's device (level loop, every read the workload's), with the
    device behind the loop device; its reads are at least the file's bytes the reader needed and, the partition
    being this test's alone, the kernel's own count of it (its /proc/diskstats line) when nothing was lost."""
    img = str(tmp_path / "disk.img")
    size, first = 64 << 20, 2048
    with open(img, "wb") as f:
        f.truncate(size)
        # an MBR with one Linux partition from sector 2048 to the end
        f.seek(446)
        f.write(struct.pack("<B3sB3sII", 0, bytes(3), 0x83, bytes(3), first, size // 512 - first))
        f.seek(510)
        f.write(b"\x55\xaa")
    dev = subprocess.run(["losetup", "-f", "--show", "-P", img], check=True, stdout=subprocess.PIPE,
                         text=True).stdout.strip()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        part = dev + "p1"
        if not os.path.exists(part):  # the kernel's own scan may not read an MBR (its parser not built): partx's
            subprocess.run(["partx", "-a", dev], check=True)
        subprocess.run(["mkfs.ext4", "-q", part], check=True)
        part_rdev = os.stat(part).st_rdev
        subprocess.run(["mount", part, str(mnt)], check=True)
        try:
            data = str(mnt / "data")
            with open(data, "wb") as f:
                f.write(os.urandom(4 << 20))
            out = tmp_path / "out"
            text, s = cold_cat_under_attach(out, [data], str(tmp_path), "--mount", str(mnt))
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    finally:
        subprocess.run(["partx", "-d", dev], stderr=subprocess.DEVNULL)  # none to remove when mkfs never ran
        subprocess.run(["losetup", "-d", dev], check=True)
    loop = "%d:%d" % (os.major(part_rdev), os.minor(part_rdev))
    levels = {n: d["level"] for n, d in s["devices"].items()}
    backing = backing_block_device(img)
    assert levels == dict({loop: "loop"}, **({"%d:%d" % backing: "backing"} if backing else {})), levels
    d = s["devices"][loop]
    lv = s["amplification"]["device_read_per_received"]["loop"]
    assert lv["bytes"] == d["bytes"] == d["workload_reads"]["bytes"] > 0
    if not d["unseen_requests"]:
        assert lv["bytes"] >= 4 << 20 and lv["diskstats_bytes"] == lv["bytes"], (lv, d)
    assert "device %s (loop)" % loop in text
