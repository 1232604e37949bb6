"""What each traced block device is to the traced filesystems (records.h FST_DEV_LEVELS), the read amplification
counted on each level, its footing under --budget windows, and the unavailable figures of the traced filesystems
only: pure analysis on forged results and summaries (tests/test_attach.py checks a live disk)."""
import copy
import os

import pytest

from analysis import amplification, results, summary
from cli.devices import whole_disk
from forge import forge, split

pytestmark = pytest.mark.unit

# the filesystems of some figures, as a results header's schema carries them (records.h FST_FS_FIGURES)
FIGURE_FS = {"squashfs_cache_lookups": "squashfs", "squashfs_cache_misses": "squashfs",
             "squashfs_decompress": "squashfs", "btrfs_compress_write": "btrfs", "btrfs_zstd_decompress": "btrfs",
             "btrfs_lzo_decompress": "btrfs", "btrfs_zlib_decompress": "btrfs", "erofs_lz4_decompress": "erofs",
             "erofs_lzma_decompress": "erofs", "erofs_deflate_decompress": "erofs",
             "erofs_zstd_decompress": "erofs", "erofs_plain_copy": "erofs", "erofs_extents": "erofs"}


def forged(tmp_path, real, level=None, config=None, figure_fs=None):
    """real.fst (direct reads of a file on this machine's disk) with its device's level, its config and its
    schema's figure_fs set, loaded."""
    fmt, header, data = split(real[1])
    if level:
        header["devices"][0]["level"] = level
    if config is not None:
        header["config"] = config
    if figure_fs is not None:
        from analysis import schema
        header["schema"] = dict(copy.deepcopy(schema.FORMAT_2), figure_fs=figure_fs)
    path = tmp_path / "forged.fst"
    path.write_bytes(forge(header, data, fmt))
    return results.load(str(path))


def test_a_disk_counts_the_traced_tasks_reads_and_a_backing_disk_the_loop_devices(tmp_path, real):
    """The same block requests (real.fst: a reader's own direct reads) are the workload's on a disk its
    filesystem sits on (charge direct) and none of it behind a loop device (charge loop only)."""
    disk = summary.summarize(forged(tmp_path, real, "disk"))
    name, dev = next(iter(disk["devices"].items()))
    direct = dev["by_charge"]["direct"]
    assert dev["level"] == "disk" and direct["bytes"] > 0 and dev["by_charge"]["none"]["bytes"] == 0
    assert dev["workload_reads"]["bytes"] == direct["bytes"] + dev["by_charge"]["loop"]["bytes"]
    lv = disk["amplification"][amplification.DEVICE_READ]["disk"]
    assert lv["device"] == name and lv["bytes"] == direct["bytes"]
    assert lv["per_received"] == direct["bytes"] / disk["reads"]["bytes"]
    from analysis import verdict
    assert "device %s (disk): %d reads (%d the traced tasks')" % (name, dev["requests"], direct["requests"]) in \
        verdict.render(disk)
    rr = disk["amplification"][amplification.REREAD]
    assert rr["available"] and rr["bytes"] == dev["workload_reads"]["reread_bytes"] == dev["reread_bytes"]
    backing = summary.summarize(forged(tmp_path, real, "backing"))
    lv = backing["amplification"][amplification.DEVICE_READ]["backing"]
    assert lv["bytes"] == 0
    # the filesystem's own device was not traced: no re-read share, and why
    assert backing["amplification"][amplification.REREAD] == {"available": False,
                                                              "why": "no filesystem's own device traced"}
    # a file from before levels: its non-loop device read as the disk behind the image, as then
    old = summary.summarize(results.load(real[0]))
    assert next(iter(old["devices"].values()))["level"] == "backing"


def windowed(s, estimate=None, why=None):
    s = copy.deepcopy(s)
    s["request_windows"] = {"active": True, "fraction": 0.1, "seen": s["reads"]["count"]}
    if estimate is not None:
        s["request_windows"]["estimate"] = estimate
    else:
        s["request_windows"]["why"] = why
    return s


def test_budget_windows_weight_the_bytes_received_up_to_the_device_bytes(tmp_path, real):
    """With --budget windows the reads received are the windows' and the block requests all the time's: the
    bytes received are weighted up as the reads were, and the figure says so; without an estimate, no ratio."""
    s = summary.summarize(forged(tmp_path, real, "disk"))
    own = next(iter(s["devices"].values()))["workload_reads"]["bytes"]
    count, received = s["reads"]["count"], s["reads"]["bytes"]
    a = amplification.figures(windowed(s, estimate=4.0 * count))
    lv = a[amplification.DEVICE_READ]["disk"]
    assert a["received_footing"]["bytes"] == received * 4.0
    assert lv["per_received"] == pytest.approx(own / (4.0 * received))
    assert "both weighted" in lv["method"] and "both weighted" in a["received_footing"]["method"]
    line = amplification.lines(dict(s, amplification=a))[0]
    assert "estimated in all" in line and "disk %.2f" % (own / (4.0 * received)) in line
    # bytes decompressed (probes attached all the time, as the block ones) on the same footing
    dec = dict(s, run=dict(s["run"], fs="erofs"),
               decompression={"available": True, "groups": [{"out_bytes": 3 * received}], "probes": {"p": "fentry"}})
    assert amplification.figures(windowed(dec, estimate=4.0 * count))[amplification.DECOMPRESSED][
        "per_received"] == pytest.approx(3 / 4.0)
    a = amplification.figures(windowed(s, why="one window: no interval"))
    assert a[amplification.DEVICE_READ]["disk"]["per_received"] is None
    assert "no estimate" in a["received_footing"]["method"]
    # always attached: over the bytes received, as before
    a = amplification.figures(s)
    assert "received_footing" not in a and a[amplification.DEVICE_READ]["disk"]["per_received"] == own / received


def test_the_unavailable_figures_are_the_traced_filesystems_only(tmp_path, real):
    """Tracing ext4, no erofs, squashfs or btrfs figure is missed; tracing erofs, its own are (and the
    decompression line names erofs alone); a file whose schema does not say keeps every figure."""
    def unavailable(fs_types=None, fs=None, figure_fs=FIGURE_FS, level="disk"):
        cfg = {"mode": "attach", "fs_types": fs_types, "fs": fs}
        return summary.summarize(forged(tmp_path, real, level, cfg, figure_fs))["unavailable"]
    every = unavailable(figure_fs=None)
    assert any("squashfs" in u["figure"] for u in every) and any("btrfs" in u["figure"] for u in every)
    ext4 = unavailable(fs_types=["ext4"])
    assert not [u for u in ext4 if any(fs in u["figure"] for fs in ("erofs", "squashfs", "btrfs"))], ext4
    erofs = unavailable(fs="erofs")
    assert not [u for u in erofs if any(fs in u["figure"] for fs in ("squashfs", "btrfs"))], erofs
    assert [u["figure"] for u in erofs if u["figure"].startswith("decompression")] == ["decompression time (erofs)"]
    # all filesystems traced: all of them
    assert len(unavailable()) == len(every)


def test_a_partitions_disk_is_its_parent(tmp_path):
    """A partition's disk (whose loop device, if it is one, serves it) is the device of its parent directory in
    sysfs (the partition has a partition file); any other device is its own."""
    disk = tmp_path / "devices" / "sda"
    part = disk / "sda1"
    part.mkdir(parents=True)
    (disk / "dev").write_text("8:0\n")
    (part / "dev").write_text("8:1\n")
    (part / "partition").write_text("1\n")
    block = tmp_path / "dev" / "block"
    block.mkdir(parents=True)
    os.symlink(part, block / "8:1")
    os.symlink(disk, block / "8:0")
    assert whole_disk((8, 1), sysfs=str(tmp_path)) == (8, 0)
    assert whole_disk((8, 0), sysfs=str(tmp_path)) == (8, 0)
