"""Prove the fentry tier and its kprobe twins on a real Debian 6.1 kernel, under QEMU (TCG).

The host downloads linux-image-6.1.0-<n>-amd64-unsigned (cached), builds a busybox initramfs with the
modules the test needs and the static collector, and boots it with small erofs, squashfs and btrfs images
as virtio disks.  Inside, the collector traces reads of every image twice: with fentry allowed, then with
--no-fentry (the kprobe twins).  Results come back as a tar on a raw virtio disk; the host checks them.

Usage: python3 scripts/vmtest.py [--cache DIR] [--keep]
"""
import argparse
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from analysis import results, sampling, schema, summary, timeline  # noqa: E402
from workloads import dataset, images  # noqa: E402

COLLECTOR = os.path.join(ROOT, "build", "fstrace-collect")
MODULES = ["virtio_pci", "virtio_blk", "loop", "erofs", "squashfs", "btrfs"]
# (disk, filesystem, build options, mount type); decompression algorithm expected in the records
IMAGES = [
    ("erofs", "erofs", {"compress": "lz4hc", "cluster": 4096}, "lz4"),
    ("sqxz", "squashfs", {"compress": "xz", "block": 131072}, "xz"),
    ("sqlz4", "squashfs", {"compress": "lz4", "block": 16384}, "lz4"),
    ("btrfs", "btrfs", {"compress": "zstd:1"}, "zstd"),
]
# (disk, source image): the source's files copied onto an empty btrfs mounted with compress=zstd:1
WRITES = [("bw", "sqxz")]


def timeline_slices(res):
    """(tracks, slices) of the run's timeline, written and read back (analysis/timeline.py)."""
    with tempfile.NamedTemporaryFile(suffix=".pftrace") as f:
        timeline.write(res, f.name)
        return timeline.read(f.name)


def log(msg):
    print("vmtest: " + msg, file=sys.stderr, flush=True)


def kernel(cache):
    """Unpacked Debian 6.1 kernel package: (vmlinuz, modules dir)."""
    def search():
        out = subprocess.run(["apt-cache", "search", "--names-only", "^linux-image-6.1.0-[0-9]+-amd64-unsigned$"],
                             stdout=subprocess.PIPE, text=True).stdout
        return sorted(re.findall(r"^(linux-image-6\.1\.0-(\d+)-amd64-unsigned)", out, re.M), key=lambda x: int(x[1]))

    cached = sorted(glob.glob(os.path.join(cache, "linux-image-6.1.0-*-amd64-unsigned")))
    names = search()
    if not names and not cached:  # apt lists never fetched on this machine
        subprocess.run(["apt-get", "update", "-qq"], check=True, stdout=subprocess.DEVNULL)
        names = search()
    if not names and cached:
        names = [(os.path.basename(cached[-1]), "0")]
    if not names:
        raise SystemExit("vmtest: no linux-image-6.1.0-*-amd64-unsigned in the apt lists (run apt-get update)")
    pkg = names[-1][0]
    d = os.path.join(cache, pkg)
    if not os.path.isdir(d):
        log("downloading %s" % pkg)
        tmp = tempfile.mkdtemp(dir=cache)
        subprocess.run(["apt-get", "download", pkg], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        deb = glob.glob(os.path.join(tmp, "*.deb"))[0]
        subprocess.run(["dpkg-deb", "-x", deb, tmp + "/x"], check=True)
        os.rename(tmp + "/x", d)
        shutil.rmtree(tmp)
    vmlinuz = glob.glob(os.path.join(d, "boot", "vmlinuz-*"))[0]
    moddir = glob.glob(os.path.join(d, "lib", "modules", "*"))[0]
    return vmlinuz, moddir


def module_order(moddir, wanted):
    """Module files in load order, dependencies and soft dependencies first (depmod + modprobe, as the
    distribution resolves them); modules built into the kernel are skipped."""
    base, version = os.path.dirname(os.path.dirname(os.path.dirname(moddir))), os.path.basename(moddir)
    subprocess.run(["depmod", "-b", base, version], check=True)
    order = []
    for m in wanted:
        out = subprocess.run(["modprobe", "-d", base, "-S", version, "--show-depends", m], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        for line in out.stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["insmod"] and parts[1] not in order:
                order.append(parts[1])
    return order


GUEST_INIT = r"""#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
mount -t tmpfs tmp /tmp
for m in $(cat /modules.order); do insmod /modules/$m || echo "vmguest: insmod $m failed"; done
sleep 1
mkdir -p /out
run() {  # name disk fstype: every file read cold, once per tier, each on a fresh mount (squashfs's caches too)
    mkdir -p /mnt/$1
    dev=$(cat /sys/block/$2/dev)
    for mode in fentry kprobe; do
        flag=""; [ $mode = kprobe ] && flag=--no-fentry
        echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: reading $1 ($mode)"
        mount -t $3 -o ro /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
        echo 3 > /proc/sys/vm/drop_caches
        /fstrace-collect $flag --sample-hz 4999 -o /out/$1-$mode.fst -d $dev:4096 -- sh -c "find /mnt/$1 -type f -exec cat {} + > /dev/null" \
            2>> /out/collector.log || echo "vmguest: collector $1 $mode failed" >> /out/collector.log
        umount /mnt/$1
    done
}
write() {  # name disk srcdisk srcfs: seed 004's cp -a && sync onto an empty btrfs mounted with compress=zstd:1
    mkdir -p /mnt/$1 /mnt/$1-src
    dev=$(cat /sys/block/$2/dev)
    mount -t $4 -o ro /dev/$3 /mnt/$1-src || { echo "vmguest: mount $1 source failed"; return; }
    mount -t btrfs -o compress=zstd:1 /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
    for mode in fentry kprobe; do
        flag=""; [ $mode = kprobe ] && flag=--no-fentry
        echo "vmguest: $(cut -d' ' -f1 /proc/uptime) s: writing $1 ($mode)"
        /fstrace-collect $flag -o /out/$1-$mode.fst -d $dev:4096 -- sh -c "cp -a /mnt/$1-src/. /mnt/$1/$mode && sync" \
            2>> /out/collector.log || echo "vmguest: collector $1 $mode failed" >> /out/collector.log
    done
    umount /mnt/$1 /mnt/$1-src
}
"""


def guest_script(disks, writes):
    lines = [GUEST_INIT]
    for name, disk, fstype in disks:
        lines.append("run %s %s %s" % (name, disk, fstype))
    for name, disk, src_disk, src_fs in writes:
        lines.append("write %s %s %s %s" % (name, disk, src_disk, src_fs))
    lines.append("uname -r > /out/kernel.txt")
    out_disk = "vd" + chr(ord("a") + len(disks) + len(writes))  # the raw disk after the images
    lines.append("cd /out && tar cf /dev/%s . && sync" % out_disk)
    lines.append("echo vmguest: done")
    lines.append("poweroff -f")
    return "\n".join(lines) + "\n"


def build_initramfs(work, moddir):
    root = os.path.join(work, "initramfs")
    for d in ("bin", "proc", "sys", "dev", "tmp", "mnt", "modules"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    os.symlink("busybox", os.path.join(root, "bin", "sh"))
    shutil.copy(COLLECTOR, os.path.join(root, "fstrace-collect"))
    order = module_order(moddir, MODULES)
    for path in order:
        shutil.copy(path, os.path.join(root, "modules", os.path.basename(path)))
    with open(os.path.join(root, "modules.order"), "w") as f:
        f.write("\n".join(os.path.basename(p) for p in order) + "\n")
    return root, order


def pack(root, out):
    files = subprocess.run(["find", "."], cwd=root, stdout=subprocess.PIPE, check=True).stdout
    with open(out, "wb") as f:
        cpio = subprocess.Popen(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        gz = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=f)
        cpio.stdin.write(files)
        cpio.stdin.close()
        cpio.stdout.close()
        if gz.wait() or cpio.wait():
            raise SystemExit("vmtest: packing the initramfs failed")


def squashfs_layout(path):
    """What the image says about its caches' blocks, read from the superblock and the metadata block headers
    (independent of the kernel): fragment blocks, metadata block addresses of the inode and directory tables,
    every metadata block address the index tables point to, and the root inode's blocks (read at mount)."""
    with open(path, "rb") as f:
        img = f.read()
    (_, inodes, _, _, fragments, _, _, _, no_ids, _, _, root_inode, _, id_table, xattr_table, inode_table, dir_table,
     frag_table, lookup_table) = struct.unpack_from("<IIIIIHHHHHHQQQQQQQQ", img, 0)
    none = 0xFFFFFFFFFFFFFFFF

    def index(start, entries, per_block):
        n = (entries + per_block - 1) // per_block
        return list(struct.unpack_from("<%dQ" % n, img, start)) if start != none and n else []

    tables = index(frag_table, fragments, 512) + index(id_table, no_ids, 2048) + index(lookup_table, inodes, 1024)
    # the directory table ends where the first metadata block of another table begins
    end = min([b for b in tables if b > dir_table] + [frag_table, id_table] +
              [t for t in (lookup_table, xattr_table) if t != none])
    walked, addr = [], inode_table
    while addr < end:
        walked.append(addr)
        addr += 2 + (struct.unpack_from("<H", img, addr)[0] & 0x7FFF)
    root = inode_table + (root_inode >> 16)
    i = walked.index(root)
    return {"fragments": fragments, "inode_dir_blocks": set(walked), "all_blocks": set(walked) | set(tables),
            "mount_blocks": set(walked[i:i + 2])}


def probe_states(header, figures):
    """Tier and reason of the probes of these figures (records.h FST_FIGURES ids), for a failure message."""
    return "; ".join("%s=%s %s" % (p["probe"], p["tier"], p["why"][:80]) for p in header["probes"]
                     if p["figure"] in figures)


def check_squashfs_caches(name, mode, res, layout, fail, lines):
    """squashfs cache lookups against the image: every fragment block missed at least once (the workload reads
    every file), metadata misses only on metadata blocks, and every inode and directory block missed unless
    mount left it cached."""
    h = res.header
    c = res.records.get("fs_cache")
    if c is None or not len(c):
        figures = {schema.figure("squashfs_cache_lookups"), schema.figure("squashfs_cache_misses")}
        fail("%s %s: no squashfs cache lookups (probes: %s)" % (name, mode, probe_states(h, figures)))
        return
    meta = c[c["cache"] == summary.enum_value(h, "fs_cache", "squashfs metadata")]
    frag = c[c["cache"] == summary.enum_value(h, "fs_cache", "squashfs fragment")]
    meta_missed = set(meta["block"][meta["missed"] != 0].tolist())
    frag_missed = set(frag["block"][frag["missed"] != 0].tolist())
    lines.append("%-6s %-7s squashfs caches: metadata %d lookups, %d misses on %d blocks (image: %d inode/directory "
                 "blocks); fragment %d lookups, %d misses on %d blocks (image: %d fragment blocks)" % (
                     name, mode, len(meta), int((meta["missed"] != 0).sum()), len(meta_missed),
                     len(layout["inode_dir_blocks"]), len(frag), int((frag["missed"] != 0).sum()), len(frag_missed),
                     layout["fragments"]))
    if len(frag_missed) != layout["fragments"]:
        fail("%s %s: %d distinct fragment blocks missed, the image has %d" % (name, mode, len(frag_missed),
                                                                              layout["fragments"]))
    if meta_missed - layout["all_blocks"]:
        fail("%s %s: metadata misses at %s, not metadata block addresses of the image" % (
            name, mode, sorted(meta_missed - layout["all_blocks"])[:5]))
    unread = layout["inode_dir_blocks"] - meta_missed - layout["mount_blocks"]
    if unread:
        fail("%s %s: inode/directory blocks never missed: %s" % (name, mode, sorted(unread)[:5]))
    if not (meta["missed"] == 0).any():
        fail("%s %s: no metadata cache hits" % (name, mode))
    tier_id = summary.enum_value(h, "tier", mode)
    if set(c["tier"].tolist()) != {tier_id}:
        fail("%s %s: cache records from tiers %s" % (name, mode, sorted(set(c["tier"].tolist()))))
    slices = [e for e in timeline_slices(res)[1] if e["name"].endswith("cache miss")]
    if len(slices) != int((c["missed"] != 0).sum()):
        fail("%s %s: %d cache-miss slices in the timeline for %d misses" % (name, mode, len(slices),
                                                                           int((c["missed"] != 0).sum())))


def check_write_compression(name, mode, res, src, fail, lines):
    """btrfs compression on write against the copied files: each chunk at most 128 KiB of one file, compressed
    bytes below the input, inputs adding up to no more than the files' sizes, run by kworkers inside the
    btrfs write-compression work items the tracepoint tier timed."""
    h = res.header
    c = res.records.get("compress")
    if c is None or not len(c):
        fail("%s %s: no compression records (probes: %s)" % (name, mode, probe_states(h, {schema.figure("btrfs_compress_write")})))
        return
    # the tier must be the one asked for, unless the probe says why the better one could not be used (6.1's
    # trampolines take at most 6 arguments: btrfs_compress_pages has 7 and goes to its kprobe twin)
    probe = [p for p in h["probes"] if p["figure"] == schema.figure("btrfs_compress_write") and
             p["tier"] != "unavailable"]
    tier = probe[0]["tier"] if probe else "unavailable"
    if tier != mode and not (mode == "fentry" and tier == "kprobe" and probe[0]["why"].startswith("fentry:")):
        fail("%s %s: compression probe on tier %s (%s)" % (name, mode, tier, probe[0]["why"] if probe else ""))
    sizes = [os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(src) for f in fs
             if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))]
    file_bytes = sum(sizes)
    ok = c[c["ret"] == 0]
    dur = (c["ts_end_ns"] - c["ts_start_ns"]).astype("int64")
    in_total = int(ok["in_bytes"].astype("int64").sum())
    lines.append("%-6s %-7s btrfs compression: %d chunks (%d not compressed), %d B in -> %d B out, %.1f ms; "
                 "files copied %d B in %d files; ctx %s; tier %s" % (
                     name, mode, len(c), len(c) - len(ok), in_total, int(ok["out_bytes"].astype("int64").sum()),
                     dur.sum() / 1e6, file_bytes, len(sizes),
                     ",".join(sorted({h["enums"]["context"][str(x)] for x in set(c["context"].tolist())})),
                     tier if tier == mode else "%s (%s)" % (tier, probe[0]["why"])))
    if set(c["tier"].tolist()) != {summary.enum_value(h, "tier", tier)}:
        fail("%s %s: compression records from tiers %s" % (name, mode, sorted(set(c["tier"].tolist()))))
    if int(c["in_bytes"].max()) > 128 * 1024:
        fail("%s %s: a chunk of %d bytes, above btrfs's 128 KiB" % (name, mode, c["in_bytes"].max()))
    if (ok["out_bytes"] >= ok["in_bytes"]).any():
        fail("%s %s: compressed chunks that did not shrink" % (name, mode))
    if not 0.5 * file_bytes <= in_total <= file_bytes:
        fail("%s %s: %d bytes compressed for %d bytes of files copied" % (name, mode, in_total, file_bytes))
    by_ino = {}
    for ino, n in zip(ok["ino"].tolist(), ok["in_bytes"].tolist()):
        by_ino[ino] = by_ino.get(ino, 0) + n
    if max(by_ino.values()) > max(sizes):
        fail("%s %s: %d bytes compressed for one file, the largest is %d" % (name, mode, max(by_ino.values()),
                                                                             max(sizes)))
    tracks, slices = timeline_slices(res)
    slices = [e for e in slices if e["name"].startswith("compress ")]
    # on the in-kernel work track of the kworker that ran them
    if len(slices) != len(c) or any(not tracks[tracks[e["track"]][1]][0].startswith("kworker") for e in slices):
        fail("%s %s: %d compression slices in the timeline for %d chunks" % (name, mode, len(slices), len(c)))
    # the tracepoint tier's exact figure on the same run: compression runs inside the work items
    w = res.records.get("work")
    kind = summary.enum_value(h, "work_kind", "btrfs write compression")
    items = w[w["kind"] == kind] if w is not None else []
    if not len(items):
        fail("%s %s: no btrfs write-compression work items timed" % (name, mode))
        return
    inside = 0
    for r, d in zip(c, dur):
        m = (items["pid"] == r["pid"]) & (items["ts_start_ns"] <= r["ts_start_ns"]) & (items["ts_end_ns"] >= r["ts_end_ns"])
        inside += int(d) if m.any() else 0
    work_ns = int((items["ts_end_ns"] - items["ts_start_ns"]).sum())
    lines.append("%-6s %-7s workqueue tier: %d compression work items, %.1f ms; %.1f ms of compression inside them"
                 % (name, mode, len(items), work_ns / 1e6, inside / 1e6))
    if inside != int(dur.sum()):
        fail("%s %s: %.1f of %.1f ms of compression ran outside the timed work items" % (
            name, mode, (dur.sum() - inside) / 1e6, dur.sum() / 1e6))


def check(outdir, paths, src):
    """Host-side checks; returns (ok, report lines)."""
    lines, ok = [], True

    def fail(msg):
        nonlocal ok
        ok = False
        lines.append("FAIL " + msg)

    kver = open(os.path.join(outdir, "kernel.txt")).read().strip() if os.path.exists(
        os.path.join(outdir, "kernel.txt")) else "?"
    lines.append("guest kernel %s" % kver)
    for name, fs, opts, alg in IMAGES:
        loaded = {}
        for mode, tier in (("fentry", "fentry"), ("kprobe", "kprobe")):
            path = os.path.join(outdir, "%s-%s.fst" % (name, mode))
            if not os.path.exists(path):
                fail("%s %s: no results" % (name, mode))
                continue
            res = loaded[mode] = results.load(path)
            h = res.header
            # 6.1 has task-local storage and tp_btf: the per-task state must live there, on both tiers
            if (h.get("task_state") or {}).get("store") != "task_storage":
                fail("%s %s: per-task state not in task storage: %s" % (name, mode, h.get("task_state")))
            # (not starting with the image name: test_vm reads an image's first such line as its decompression)
            lines.append("per-task state %s %s: %s; records: %s, %d requests counted in the kernel" % (
                name, mode, h["task_state"]["store"], h["request_records"]["mode"],
                sum(r["count"] for r in h["kernel_aggregates"]["requests_counted"])))
            d = res.records.get("decomp")
            fs_id = [int(k) for k, v in h["enums"]["fs"].items() if v == fs][0]
            alg_id = [int(k) for k, v in h["enums"]["alg"].items() if v == alg][0]
            tier_id = [int(k) for k, v in h["enums"]["tier"].items() if v == tier][0]
            mine = d[(d["fs"] == fs_id)] if d is not None else []
            used = {p["probe"]: p["tier"] for p in h["probes"] if p["tier"] == tier}
            if not len(mine):
                fail("%s %s: no decompression records (probes: %s)" % (name, mode, probe_states(h, schema.DECOMP_FIGURES)))
                continue
            if set(mine["tier"].tolist()) != {tier_id}:
                fail("%s %s: records from tiers %s" % (name, mode, sorted(set(mine["tier"].tolist()))))
            if set(mine["alg"].tolist()) - {alg_id, [int(k) for k, v in h["enums"]["alg"].items() if v == "plain"][0]}:
                fail("%s %s: unexpected algorithms %s" % (name, mode, sorted(set(mine["alg"].tolist()))))
            read = int(res["req"][(res["req"]["kind"] == 1) & (res["req"]["ret"] > 0)]["ret"].sum())
            out_total = int(mine["out_bytes"].sum())
            in_total = int(mine["in_bytes"].sum())
            dur = (mine["ts_end_ns"] - mine["ts_start_ns"]).astype("int64")
            unit = opts.get("cluster") or opts.get("block") or 131072
            if fs == "erofs" and int(mine["in_bytes"].max()) > unit:
                fail("%s: a pcluster of %d bytes, above the %d-byte cluster size" % (name, mine["in_bytes"].max(),
                                                                                    unit))
            if fs == "squashfs" and int(mine["out_bytes"].max()) > max(unit, 8192):
                fail("%s: a block decompressed to %d bytes, above the block size %d" % (
                    name, mine["out_bytes"].max(), unit))
            if fs == "btrfs" and int(mine["out_bytes"].max()) > 128 * 1024:
                fail("%s: an extent of %d bytes, above btrfs's 128 KiB compressed extent" % (name,
                                                                                            mine["out_bytes"].max()))
            # every byte read came out of a decompression (or was stored uncompressed, inline, or in a
            # fragment shared with files read before): decompressed output must cover most of it
            if out_total < 0.5 * read:
                fail("%s %s: %d bytes decompressed for %d bytes read" % (name, mode, out_total, read))
            if (dur <= 0).any():
                fail("%s %s: non-positive decompression times" % (name, mode))
            lines.append("%-6s %-7s tier %-7s %5d units  in %9d B  out %9d B  read %9d B  time %7.1f ms  ctx %s" % (
                name, mode, tier, len(mine), in_total, out_total, read, dur.sum() / 1e6,
                ",".join(sorted({h["enums"]["context"][str(c)] for c in set(mine["context"].tolist())}))))
            if not used:
                fail("%s %s: no probe used tier %s" % (name, mode, tier))
            ctx_traced = [int(k) for k, v in h["enums"]["context"].items() if v == "traced task"][0]
            in_task = int(dur[mine["context"] == ctx_traced].sum())
            est = sampling.decompression_estimate(h)
            if est and in_task > 200e6:  # enough samples for the band (xz: ~4000; lz4 at ~60 ms swung 0.6-1.4)
                # sampling tier vs fentry/kprobe on the same run: the estimate must fall in a band around it
                ratio = est["ns"] / in_task
                lines.append("%-6s %-7s sampling tier: %.1f ms estimated (95%% %.1f-%.1f) vs %.1f ms measured "
                             "in the reading task: ratio %.2f" % (name, mode, est["ns"] / 1e6,
                                                                 est["ci95_ns"][0] / 1e6, est["ci95_ns"][1] / 1e6,
                                                                 in_task / 1e6, ratio))
                if not 0.5 <= ratio <= 1.5:
                    fail("%s %s: sampling estimate %.0f%% of the measured in-task decompression (band 50-150%%)"
                         % (name, mode, 100 * ratio))
            if fs == "erofs":
                # the two tiers on one run: erofs decompression measured by fentry/kprobe inside kworkers
                # must fit inside the workqueue-timed erofs work items (the tracepoint tier's exact figure)
                w = res.records.get("work")
                kind = [int(k) for k, v in h["enums"]["work_kind"].items() if v == "erofs decompression"][0]
                items = w[w["kind"] == kind] if w is not None else []
                kctx = [int(k) for k, v in h["enums"]["context"].items() if v == "kworker"][0]
                in_kworkers = int(dur[mine["context"] == kctx].sum())
                work_ns = int((items["ts_end_ns"] - items["ts_start_ns"]).sum()) if len(items) else 0
                lines.append("%-6s %-7s workqueue tier: %d erofs work items, %.1f ms; %s decompression inside "
                             "them: %.1f ms" % (name, mode, len(items), work_ns / 1e6, tier, in_kworkers / 1e6))
                if in_kworkers and not len(items):
                    fail("%s %s: kworker decompression measured but no erofs work items" % (name, mode))
                if in_kworkers > work_ns:
                    fail("%s %s: decompression in kworkers (%d ns) exceeds the work items' time (%d ns)"
                         % (name, mode, in_kworkers, work_ns))
                if work_ns and in_kworkers < 0.2 * work_ns:
                    fail("%s %s: decompression is only %.0f%% of the erofs work items' time"
                         % (name, mode, 100.0 * in_kworkers / work_ns))
                # erofs's own tracepoints (raw_tp on this kernel) against the decompressor probes of the same
                # run: the pclusters the reads mapped are the ones decompressed, with the same compressed bytes
                ev = summary.erofs_events(res, res["req"])
                if not ev or not ev.get("pclusters"):
                    fail("%s %s: no erofs pclusters from the map tracepoint (%s)" % (name, mode, ev))
                else:
                    lines.append("%-6s %-7s erofs tracepoints: %d pclusters, %d B compressed; decompressor saw "
                                 "%d units, %d B in" % (name, mode, ev["pclusters"], ev["pcluster_bytes"],
                                                       len(mine), in_total))
                    if not 0.8 <= ev["pclusters"] / len(mine) <= 1.25:
                        fail("%s %s: %d pclusters mapped vs %d decompressed" % (name, mode, ev["pclusters"],
                                                                                len(mine)))
                    if not 0.9 <= ev["pcluster_bytes"] / max(in_total, 1) <= 1.1:
                        fail("%s %s: %d compressed bytes mapped vs %d decompressed" % (
                            name, mode, ev["pcluster_bytes"], in_total))
        if fs == "squashfs":
            layout = squashfs_layout(paths[name])
            for mode, res in loaded.items():
                check_squashfs_caches(name, mode, res, layout, fail, lines)
    for name, _ in WRITES:
        for mode in ("fentry", "kprobe"):
            path = os.path.join(outdir, "%s-%s.fst" % (name, mode))
            if not os.path.exists(path):
                fail("%s %s: no results" % (name, mode))
                continue
            check_write_compression(name, mode, results.load(path), src, fail, lines)
    return ok, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", "/var/cache/fstrace"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    vmcache = os.path.join(args.cache, "vmtest")
    os.makedirs(vmcache, exist_ok=True)
    vmlinuz, moddir = kernel(vmcache)
    droot, manifest = dataset.ensure_default(args.cache, 0.02)
    src = os.path.join(droot, "tree")
    work = tempfile.mkdtemp(prefix="fstrace-vmtest-")
    try:
        disks, drives, paths = [], [], {}
        for i, (name, fs, opts, _) in enumerate(IMAGES):
            rec = images.ensure_image(fs, opts, src, manifest["id"] + "/tree", args.cache, log)
            paths[name] = rec["path"]
            disks.append((name, "vd" + chr(ord("a") + i), fs))
            drives += ["-drive", "file=%s,if=virtio,format=raw,readonly=on" % rec["path"]]
        writes = []
        for name, src_name in WRITES:
            target = os.path.join(work, name + ".img")
            images.mkfs_empty("btrfs", target, images.tree_bytes(src))
            src_disk = [d for d in disks if d[0] == src_name][0]
            writes.append((name, "vd" + chr(ord("a") + len(disks) + len(writes)), src_disk[1], src_disk[2]))
            drives += ["-drive", "file=%s,if=virtio,format=raw" % target]
        out_img = os.path.join(work, "out.img")
        with open(out_img, "wb") as f:
            f.truncate(64 << 20)
        drives += ["-drive", "file=%s,if=virtio,format=raw" % out_img]
        root, order = build_initramfs(work, moddir)
        with open(os.path.join(root, "init"), "w") as f:
            f.write(guest_script(disks, writes))
        os.chmod(os.path.join(root, "init"), 0o755)
        initrd = os.path.join(work, "initrd.gz")
        pack(root, initrd)
        log("booting %s with %d modules under TCG" % (os.path.basename(vmlinuz), len(order)))
        console = os.path.join(work, "console.log")
        with open(console, "w") as con:
            try:
                # one vCPU: with two, a guest was seen (2 runs in 7) to stall for good in the collector's
                # context while the other vCPU took no timer interrupts (soft lockup, RCU stall), consistent
                # with a cross-CPU call (text patching on attach/detach) never completing under TCG, though
                # not proven; softlockup_panic ends such a run at once with the stack printed (loglevel 5)
                p = subprocess.run(["qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-m", "2048", "-smp", "1", "-nographic",
                                    "-no-reboot", "-kernel", vmlinuz, "-initrd", initrd,
                                    "-append", "console=ttyS0 panic=-1 loglevel=5 softlockup_panic=1"] + drives,
                                   stdout=con, stderr=subprocess.STDOUT, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                sys.stderr.write(open(console, errors="replace").read()[-12000:])
                raise SystemExit("vmtest: the guest did not finish within %d s" % args.timeout)
        text = open(console, errors="replace").read()
        if "vmguest: done" not in text:
            sys.stderr.write(text[-12000:])
            raise SystemExit("vmtest: the guest did not finish (qemu exit %d)" % p.returncode)
        outdir = os.path.join(work, "out")
        os.makedirs(outdir)
        with tarfile.open(out_img) as t:
            t.extractall(outdir)
        for l in text.splitlines():
            if l.startswith("vmguest:") and "done" not in l:
                log("guest said: " + l)
        ok, lines = check(outdir, paths, src)
        collector_log = os.path.join(outdir, "collector.log")
        print("\n".join(lines))
        report = {"ok": ok, "lines": lines, "kernel": os.path.basename(vmlinuz)}
        with open(os.path.join(vmcache, "last.json"), "w") as f:
            json.dump(report, f, indent=1)
        if not ok:
            if os.path.exists(collector_log):
                sys.stderr.write(open(collector_log).read()[-3000:])
            raise SystemExit(1)
    finally:
        if args.keep:
            log("work directory kept: " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
