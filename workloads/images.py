"""Filesystem images built from a dataset directory, cached by (dataset id, fs, options, tool version).

erofs and squashfs are built by their mkfs tools; btrfs, ext4 and xfs are made
in a sparse file, mounted (btrfs with compress=), filled with cp -a and
unmounted.  Every option is checked against what the installed tool supports,
and the tool version goes into the image record.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from user.system import Cleanup, FstraceError, cache_lock, losetup, mount, run

FILESYSTEMS = ("erofs", "squashfs", "btrfs", "ext4", "xfs")

DEFAULTS = {
    # the seed 000 configuration: LZ4HC level 12 with 4 KiB clusters
    "erofs": {"compress": "lz4hc", "level": 12, "cluster": 4096},
    "squashfs": {"compress": "lz4hc", "block": 4096},
    "btrfs": {"compress": "zstd:1"},
    "ext4": {},
    "xfs": {},
}

_MKFS = {"erofs": "mkfs.erofs", "squashfs": "mksquashfs", "btrfs": "mkfs.btrfs", "ext4": "mkfs.ext4",
         "xfs": "mkfs.xfs"}


def tool_version(fs):
    tool = _MKFS[fs]
    if not shutil.which(tool):
        raise FstraceError("%s is not installed (needed for --fs %s); run scripts/setup.sh" % (tool, fs))
    for args in (["-V"], ["-version"], ["--version"]):
        p = subprocess.run([tool] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        m = re.search(r"(\d+\.\d+(\.\d+)*)", p.stdout)
        if m and "usage" not in p.stdout.lower()[:20]:
            return "%s %s" % (tool, m.group(1))
    return tool


def erofs_compressors():
    p = subprocess.run(["mkfs.erofs", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"Available compressors are: (.*)", p.stdout)
    return [c.strip() for c in m.group(1).split(",")] if m else []


def squashfs_compressors():
    p = subprocess.run(["mksquashfs", "-help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    block = p.stdout.split("Compressors available", 1)[-1].split("-b <block_size>", 1)[0]
    return re.findall(r"^\s+(\w+)", block, re.M)


def normalize(fs, opts):
    """Fill defaults and validate options against the installed tools; returns a new dict."""
    if fs not in FILESYSTEMS:
        raise FstraceError("unknown filesystem %r (choose from %s)" % (fs, ", ".join(FILESYSTEMS)))
    o = dict(DEFAULTS[fs])
    o.update({k: v for k, v in opts.items() if v is not None})
    if fs == "erofs":
        if o["compress"] != "none":
            have = erofs_compressors()
            if o["compress"] not in have:
                raise FstraceError("installed mkfs.erofs cannot compress with %s (it offers: %s)"
                                   % (o["compress"], ", ".join(have) or "nothing"))
        else:
            o.pop("level", None)
            o["cluster"] = 4096
        if o.get("cluster") and (o["cluster"] < 4096 or o["cluster"] & (o["cluster"] - 1)):
            raise FstraceError("erofs cluster size must be a power of two >= 4096, got %d" % o["cluster"])
        if o["compress"] == "lz4":
            o.pop("level", None)
    elif fs == "squashfs":
        comp = o["compress"]
        base = "lz4" if comp == "lz4hc" else comp
        if comp != "none" and base not in squashfs_compressors():
            raise FstraceError("installed mksquashfs cannot compress with %s" % base)
        b = int(o["block"])
        if b < 4096 or b > 1 << 20 or b & (b - 1):
            raise FstraceError("squashfs block size must be a power of two in 4K..1M, got %d" % b)
    elif fs == "btrfs":
        if not re.fullmatch(r"none|lzo|zlib(:\d+)?|zstd(:\d+)?", o["compress"]):
            raise FstraceError("btrfs compress must be none, lzo, zlib[:N] or zstd[:N], got %r" % o["compress"])
    else:  # ext4 and xfs compress nothing: a baseline has no options
        o = {}
    return o


def mkfs_argv(fs, o, image, src):
    if fs == "erofs":
        argv = ["mkfs.erofs", "-T0", "--all-root"]
        if o["compress"] != "none":
            z = o["compress"] + (",%d" % o["level"] if o.get("level") else "")
            argv += ["-z" + z, "-C%d" % o["cluster"]]
        return argv + [image, src]
    if fs == "squashfs":
        argv = ["mksquashfs", src, image, "-b", str(o["block"]), "-no-xattrs", "-all-time", "0", "-mkfs-time", "0",
                "-all-root", "-noappend", "-quiet", "-no-progress"]
        if o["compress"] == "none":
            argv += ["-noD", "-noI", "-noX", "-noF", "-no-duplicates"]
        elif o["compress"] == "lz4hc":
            argv += ["-comp", "lz4", "-Xhc"]
        else:
            argv += ["-comp", o["compress"]]
        return argv
    raise ValueError(fs)


def label(fs, o):
    """Short human name of a configuration, e.g. erofs-lz4hc12-C4096."""
    if fs == "erofs":
        if o["compress"] == "none":
            return "erofs-none"
        return "erofs-%s%s-C%d" % (o["compress"], o.get("level", ""), o["cluster"])
    if fs == "squashfs":
        return "squashfs-%s-b%d" % (o["compress"], o["block"])
    if fs == "btrfs":
        return "btrfs-%s" % o["compress"].replace(":", "")
    return fs


def tree_bytes(src):
    total = 0
    for dirpath, _, files in os.walk(src):
        for f in files:
            total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


WRITABLE = ("btrfs", "ext4", "xfs")


def mkfs_empty(fs, image, src_bytes):
    """An empty btrfs/ext4/xfs in a sparse file with room for src_bytes twice over."""
    size = max(src_bytes * 2 + (400 << 20), 512 << 20)
    with open(image, "wb") as f:
        f.truncate(size)
    if fs == "btrfs":
        run(["mkfs.btrfs", "-q", "-f", image])
    elif fs == "ext4":
        run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", image])
    else:
        run(["mkfs.xfs", "-q", "-f", image])


def _build_writable(fs, o, image, src):
    """btrfs/ext4/xfs: sparse file, mkfs, mount (loop), cp -a, unmount."""
    mkfs_empty(fs, image, tree_bytes(src))
    with Cleanup() as c:
        dev, _ = losetup(image, c, direct_io=False, read_only=False)
        mnt = tempfile.mkdtemp(prefix="fstrace-build-")
        c.push("remove " + mnt, os.rmdir, mnt)
        mount(dev, mnt, fs, c, mount_options(fs, o, writable=True))
        run(["cp", "-a", src + "/.", mnt])
        run(["sync", "-f", mnt])


def verify(fs, o, image):
    """Read the options back from the built image; raise if one was not applied. Returns what was checked."""
    got = {}
    if fs == "squashfs":
        out = run(["unsquashfs", "-s", image]).stdout
        m = re.search(r"^Compression (\w+)", out, re.M)
        got["compression"] = m.group(1) if m else None
        got["high_compression"] = "-Xhc" in out
        m = re.search(r"^Block size (\d+)", out, re.M)
        got["block"] = int(m.group(1)) if m else None
        if o["compress"] == "none":
            want = {"block": o["block"]}
            uncompressed = all("%s are uncompressed" % w in out for w in ("Inodes", "Fragments")) and "Data is uncompressed" in out
            if not uncompressed:
                raise FstraceError("squashfs image %s: data, inodes or fragments compressed despite -noD -noI -noF" % image)
            got["uncompressed"] = True
        else:
            want = {"compression": "lz4" if o["compress"] == "lz4hc" else o["compress"], "block": o["block"]}
            if o["compress"] == "lz4hc" and not got["high_compression"]:
                raise FstraceError("squashfs image %s: -Xhc was not applied" % image)
    elif fs == "erofs":
        out = run(["dump.erofs", "-s", image]).stdout
        m = re.search(r"Filesystem features:\s*(.*)", out)
        feats = set(m.group(1).split()) if m else set()
        got["features"] = sorted(feats)
        # lz4 and lz4hc write the same format: the superblock shows compression (0padding) and
        # physical clusters above one block (big_pcluster), not the compressor's level
        want = {}
        compressed = o["compress"] != "none"
        if ("0padding" in feats) != compressed:
            raise FstraceError("erofs image %s: compression %s was not applied (features: %s)"
                               % (image, o["compress"], " ".join(sorted(feats))))
        if compressed and ("big_pcluster" in feats) != (o["cluster"] > 4096):
            raise FstraceError("erofs image %s: cluster size %d was not applied (features: %s)"
                               % (image, o["cluster"], " ".join(sorted(feats))))
    else:
        return {"checked": False, "why": "options of %s are mount options, checked at mount" % fs}
    for k, v in want.items():
        if got.get(k) != v:
            raise FstraceError("%s image %s: %s is %r, asked for %r" % (fs, image, k, got.get(k), v))
    got["checked"] = True
    return got


def ensure_image(fs, opts, src, dataset_id, cache_dir, progress=None):
    """Build (or reuse) the image of src; returns its record (dict)."""
    o = normalize(fs, opts)
    version = tool_version(fs)
    key = hashlib.sha256(json.dumps([dataset_id, fs, o, version], sort_keys=True).encode()).hexdigest()[:12]
    d = os.path.join(cache_dir, "images")
    os.makedirs(d, exist_ok=True)
    image = os.path.join(d, "%s-%s.img" % (label(fs, o), key))
    with cache_lock(image):  # the same new image asked for by two runs: one builds it, the other waits
        return _ensure_image(fs, o, version, image, src, dataset_id, progress)


def _ensure_image(fs, o, version, image, src, dataset_id, progress):
    meta_path = image + ".json"
    if os.path.exists(image) and os.path.exists(meta_path):
        with open(meta_path) as f:
            rec = json.load(f)
        if "verified" not in rec:  # cached by a version that did not check: check before using it
            rec["verified"] = verify(fs, o, image)
            with open(meta_path + ".tmp", "w") as f:
                json.dump(rec, f, indent=1, sort_keys=True)
            os.rename(meta_path + ".tmp", meta_path)
        return rec
    if progress:
        progress("image: building %s from %s" % (label(fs, o), src))
    tmp = image + ".partial"
    if os.path.exists(tmp):
        os.unlink(tmp)
    t0 = time.monotonic()
    try:
        if fs in ("erofs", "squashfs"):
            argv = mkfs_argv(fs, o, tmp, src)
            run(argv)
        else:
            argv = None
            _build_writable(fs, o, tmp, src)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    build_s = time.monotonic() - t0
    try:
        verified = verify(fs, o, tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    os.rename(tmp, image)
    rec = {
        "fs": fs, "options": o, "label": label(fs, o), "path": image, "bytes": os.path.getsize(image),
        "allocated_bytes": os.stat(image).st_blocks * 512, "dataset_id": dataset_id,
        "tool": version, "mkfs_argv": argv, "build_seconds": round(build_s, 3),
        "source_bytes": tree_bytes(src), "verified": verified,
    }
    with open(meta_path, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
    return rec


def alignment_unit(fs, o):
    """Bytes that block I/O alignment is measured against: the image's cluster or block size."""
    if fs == "erofs":
        return o.get("cluster", 4096)
    if fs == "squashfs":
        return o["block"]
    return 4096


def mount_options(fs, o, writable=False):
    base = "rw" if writable else "ro"
    if fs == "btrfs":
        return base + ("" if o["compress"] == "none" else ",compress=" + o["compress"])
    return base
