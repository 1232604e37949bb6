"""Which file a request is on: every read and stat call names its own file (inode and superblock device) and
position, however its descriptor was found (the table embedded in files_struct or a grown one, struct files
reused across filesystems) or, for a stat by path, from what the kernel wrote into the caller's buffer; and each
record carries its task's name as it was then."""
import os

import numpy as np
import pytest

from analysis import selection
from conftest import trace_python

pytestmark = pytest.mark.bpf


def inode_devices(paths):
    """{inode number: superblock device in the kernel's encoding} of files, as their reads must name them."""
    out = {}
    for p in paths:
        st = os.stat(p)
        out[st.st_ino] = os.major(st.st_dev) << 20 | os.minor(st.st_dev)
    return out


def test_file_identity_is_right_when_struct_files_are_reused(tmp_path):
    """sys_enter keeps the last inode's device and type per thread; struct files (and their addresses) are
    reused as soon as they are closed, across filesystems: every read must still name its own file."""
    paths = ["/etc/passwd", "/proc/cpuinfo", "/sys/kernel/mm/transparent_hugepage/enabled", "/etc/services",
             "/proc/version", "/etc/hostname"]
    paths = [p for p in paths if os.path.exists(p)]
    script = ("import sys\n"
              "for i in range(20):\n"
              "    for p in sys.argv[1:]:\n"
              "        with open(p, 'rb', buffering=0) as f:\n"
              "            f.read(64)\n")
    res = trace_python(tmp_path, "files", script, paths)
    req = res["req"]
    read = selection.enum_value(res.header, "req_kind", "read")
    expected = inode_devices(paths)
    reads = req[(req["kind"] == read) & np.isin(req["ino"], list(expected)) & (req["count"] == 64)]
    # 20 rounds of one 64-byte read per file, each attributed to its own inode on its own device
    assert len(reads) == 20 * len(paths)
    for ino, sdev in zip(reads["ino"].tolist(), reads["sdev"].tolist()):
        assert expected[ino] == sdev, (ino, sdev)


def test_descriptor_paths_and_task_names(tmp_path, mounted_erofs):
    """sys_enter reads a descriptor's file through typed loads while the thread's descriptors are in the table
    embedded in its files_struct (the first 64), and through helper reads once that table has grown (a
    descriptor past 64, and one under 64 in the grown table): each read names its own file, device and position.
    Records carry the task's name as it is now, clipped at its end after a rename to a shorter one."""
    mnt, _ = mounted_erofs
    files = sorted(os.path.join(d, n) for d, _, ns in os.walk(mnt) for n in ns)[:4]
    assert files
    script = ("import ctypes, os, sys\n"
              "prctl = ctypes.CDLL(None).prctl\n"
              "def rounds():\n"
              "    for p in sys.argv[1:]:\n"
              "        fd = os.open(p, os.O_RDONLY)\n"
              "        os.pread(fd, 64, 3)\n"
              "        os.lseek(fd, 5, 0)\n"
              "        os.read(fd, 32)\n"
              "        os.close(fd)\n"
              "prctl(15, b'fst-a-long-name', 0, 0, 0)\n"
              "prctl(15, b'fst-small', 0, 0, 0)\n"
              "rounds()\n"
              "held = [os.open('/dev/null', os.O_RDONLY) for _ in range(100)]\n"
              "prctl(15, b'fst-high', 0, 0, 0)\n"
              "rounds()\n"
              "os.close(held[10])\n"
              "prctl(15, b'fst-low', 0, 0, 0)\n"
              "rounds()\n")
    res = trace_python(tmp_path, "fds", script, files)
    req = res["req"]
    read = selection.enum_value(res.header, "req_kind", "read")
    want = inode_devices(files)
    for phase in (b"fst-small", b"fst-high", b"fst-low"):
        mine = req[(req["comm"] == phase) & (req["kind"] == read)]
        reads = mine[np.isin(mine["ino"], list(want))]
        # per file a pread of 64 bytes at 3 and a read of 32 at the file position 5, each on its own file
        assert sorted(zip(reads["count"].tolist(), reads["pos"].tolist())) == sorted([(64, 3), (32, 5)] * len(files))
        assert all(want[i] == d for i, d in zip(reads["ino"].tolist(), reads["sdev"].tolist()))
    # no record under the old long name's leftovers: every name is one the script set, or python's own
    names = set(req["comm"].tolist())
    assert {b"fst-small", b"fst-high", b"fst-low"} <= names
    assert not any(n.startswith(b"fst-") and n not in (b"fst-small", b"fst-high", b"fst-low") for n in names)


def test_path_based_stat_calls_are_placed_on_their_filesystem(tmp_path, mounted_erofs):
    """A stat call by path has no descriptor: its file is placed by what the kernel wrote into the caller's
    buffer (struct stat for newfstatat, struct statx for statx).  With a filesystem filter (--sdev) only the
    calls on that filesystem are kept, each with its file's device and inode; a failed call, or one on another
    filesystem, is not."""
    mnt, _ = mounted_erofs
    files = sorted(os.path.join(mnt, n) for n in os.listdir(mnt))
    sdev = os.stat(mnt).st_dev
    want = inode_devices(files)
    script = ("import os, subprocess, sys\n"
              "for p in sys.argv[1:]:\n"
              "    os.stat(p)\n"                               # newfstatat: struct stat
              "subprocess.run(['stat', '-c', '%i'] + sys.argv[1:] + ['/etc/hostname'], stdout=subprocess.DEVNULL)\n"
              "try:\n"
              "    os.stat(sys.argv[1] + '.missing')\n"
              "except FileNotFoundError:\n"
              "    pass\n")
    res = trace_python(tmp_path, "stat", script, files, "--sdev",
                            "%d:%d" % (os.major(sdev), os.minor(sdev)))
    req = res["req"]
    stat = req[req["kind"] == selection.enum_value(res.header, "req_kind", "stat")]
    assert res.header["stat_calls_placed"] is True
    # every kept stat call is on the filesystem, on one of its files: two per file (python's and stat's statx)
    assert set(stat["sdev"].tolist()) == {os.major(sdev) << 20 | os.minor(sdev)}
    by_ino = {}
    for ino in stat["ino"].tolist():
        by_ino[ino] = by_ino.get(ino, 0) + 1
    assert {i: n for i, n in by_ino.items() if i in want} == {i: 2 for i in want}, by_ino
    assert stat["ret"].min() == 0  # the failed call (ENOENT) has nothing to place it by: not kept
    nrs = set(stat["syscall_nr"].tolist())
    assert len(nrs) == 2, nrs  # both layouts: newfstatat and statx
