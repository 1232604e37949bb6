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
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from analysis import results, sampling, summary  # noqa: E402
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
run() {  # name disk fstype
    mkdir -p /mnt/$1
    mount -t $3 -o ro /dev/$2 /mnt/$1 || { echo "vmguest: mount $1 failed"; return; }
    dev=$(cat /sys/block/$2/dev)
    for mode in fentry kprobe; do
        flag=""; [ $mode = kprobe ] && flag=--no-fentry
        echo 3 > /proc/sys/vm/drop_caches
        /fstrace-collect $flag --sample-hz 4999 -o /out/$1-$mode.fst -d $dev:4096 -- sh -c "find /mnt/$1 -type f -exec cat {} + > /dev/null" \
            2>> /out/collector.log || echo "vmguest: collector $1 $mode failed" >> /out/collector.log
    done
    umount /mnt/$1
}
"""


def guest_script(disks):
    lines = [GUEST_INIT]
    for name, disk, fstype in disks:
        lines.append("run %s %s %s" % (name, disk, fstype))
    lines.append("uname -r > /out/kernel.txt")
    out_disk = "vd" + chr(ord("a") + len(disks))  # the raw disk after the images
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


def check(outdir):
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
        for mode, tier in (("fentry", "fentry"), ("kprobe", "kprobe")):
            path = os.path.join(outdir, "%s-%s.fst" % (name, mode))
            if not os.path.exists(path):
                fail("%s %s: no results" % (name, mode))
                continue
            res = results.load(path)
            h = res.header
            d = res.records.get("decomp")
            fs_id = [int(k) for k, v in h["enums"]["fs"].items() if v == fs][0]
            alg_id = [int(k) for k, v in h["enums"]["alg"].items() if v == alg][0]
            tier_id = [int(k) for k, v in h["enums"]["tier"].items() if v == tier][0]
            probes = {p["probe"]: p for p in h["probes"]}
            mine = d[(d["fs"] == fs_id)] if d is not None else []
            used = {p["probe"]: p["tier"] for p in h["probes"] if p["tier"] == tier}
            if not len(mine):
                fail("%s %s: no decompression records (probes: %s)" % (
                    name, mode, "; ".join("%s=%s %s" % (k, v["tier"], v["why"][:80]) for k, v in probes.items()
                                          if "decompress" in k or "transform" in k)))
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
            if est and in_task > 50e6:
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
        disks, drives = [], []
        for i, (name, fs, opts, _) in enumerate(IMAGES):
            rec = images.ensure_image(fs, opts, src, manifest["id"] + "/tree", args.cache, log)
            disks.append((name, "vd" + chr(ord("a") + i), fs))
            drives += ["-drive", "file=%s,if=virtio,format=raw,readonly=on" % rec["path"]]
        out_img = os.path.join(work, "out.img")
        with open(out_img, "wb") as f:
            f.truncate(64 << 20)
        drives += ["-drive", "file=%s,if=virtio,format=raw" % out_img]
        root, order = build_initramfs(work, moddir)
        with open(os.path.join(root, "init"), "w") as f:
            f.write(guest_script(disks))
        os.chmod(os.path.join(root, "init"), 0o755)
        initrd = os.path.join(work, "initrd.gz")
        pack(root, initrd)
        log("booting %s with %d modules under TCG" % (os.path.basename(vmlinuz), len(order)))
        console = os.path.join(work, "console.log")
        with open(console, "w") as con:
            p = subprocess.run(["qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-m", "2048", "-smp", "2", "-nographic",
                                "-no-reboot", "-kernel", vmlinuz, "-initrd", initrd,
                                "-append", "console=ttyS0 panic=-1 quiet"] + drives,
                               stdout=con, stderr=subprocess.STDOUT, timeout=args.timeout)
        text = open(console, errors="replace").read()
        if "vmguest: done" not in text:
            sys.stderr.write(text[-4000:])
            raise SystemExit("vmtest: the guest did not finish (qemu exit %d)" % p.returncode)
        outdir = os.path.join(work, "out")
        os.makedirs(outdir)
        with tarfile.open(out_img) as t:
            t.extractall(outdir)
        for l in text.splitlines():
            if l.startswith("vmguest:") and "done" not in l:
                log("guest said: " + l)
        ok, lines = check(outdir)
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
