"""Filesystem images built from a dataset directory, cached by (dataset id, fs, options, tool version).

erofs and squashfs are built by their mkfs tools (erofs by erofs-utils 1.8.6, built from Debian trixie's
source into build/erofs-utils/ by scripts/build-erofs-utils.sh: bookworm's 1.5 has only lz4/lz4hc);
btrfs, ext4 and xfs are made
in a sparse file, mounted (btrfs with compress=), filled with cp -a and
unmounted.  Every option is checked against what the installed tool supports,
and the tool version goes into the image record.
"""
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import tempfile
import time

from common.safedir import trusted_cache
from common.system import (INSTALLED, ROOT, Cleanup, FstraceError, cache_lock, losetup, mount, require_tools, run,
                           write_json_atomic)

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

# the Debian package of each mkfs tool (and of unsquashfs, which reads squashfs images back)
PACKAGES = {"mkfs.erofs": "erofs-utils", "dump.erofs": "erofs-utils", "mksquashfs": "squashfs-tools",
            "unsquashfs": "squashfs-tools", "mkfs.btrfs": "btrfs-progs", "mkfs.ext4": "e2fsprogs",
            "mkfs.xfs": "xfsprogs"}

# a checkout's own erofs-utils (scripts/build-erofs-utils.sh), an installed fstrace's the system's (Debian's
# erofs-utils); FSTRACE_EROFS_UTILS names another prefix (the tests point it at bookworm's /usr to see features
# refused by a tool that lacks them; an installed fstrace at a build of 1.8, docs/erofs-utils.md)
EROFS_PREFIX = os.environ.get("FSTRACE_EROFS_UTILS") or ("/usr" if INSTALLED else os.path.join(ROOT, "build",
                                                                                                 "erofs-utils"))

# mkfs.erofs -E features fstrace offers -> the superblock feature flag dump.erofs shows for each, None: no flag
# (all-fragments puts every file's data into the packed inode: the superblock knows it only as fragments;
# the superblock's "dedupe" flag comes with fragments, not with -Ededupe, which shares pclusters between files)
EROFS_FEATURES = {"fragments": "fragments", "dedupe": None, "ztailpacking": "ztailpacking",
                  "all-fragments": "fragments"}


def erofs_tool(name):
    """Absolute path of fstrace's mkfs.erofs / dump.erofs; raises if it was not built."""
    path = os.path.join(EROFS_PREFIX, "bin", name)
    if not os.access(path, os.X_OK):
        if INSTALLED or "FSTRACE_EROFS_UTILS" in os.environ:
            require_tools("--fs erofs", [(path, PACKAGES[name])])
        raise FstraceError("%s is not built in %s (run scripts/setup.sh)" % (name, EROFS_PREFIX))
    return path


def tools_needed(fs):
    """[(command, package)] that building and checking an image of fs runs (a checkout's own erofs-utils is
    not a package: erofs_tool says how it is built)."""
    if fs == "erofs":
        if not INSTALLED and "FSTRACE_EROFS_UTILS" not in os.environ:
            return []
        return [(os.path.join(EROFS_PREFIX, "bin", t), PACKAGES[t]) for t in ("mkfs.erofs", "dump.erofs")]
    return [(t, PACKAGES[t]) for t in (_MKFS[fs], "unsquashfs" if fs == "squashfs" else None) if t]


def tool_version(fs):
    tool = _MKFS[fs]
    if fs == "erofs":
        return _erofs_version(erofs_tool("mkfs.erofs"))
    require_tools("--fs %s" % fs, tools_needed(fs))
    for args in (["-V"], ["-version"], ["--version"]):
        p = subprocess.run([tool] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        m = re.search(r"(\d+\.\d+(\.\d+)*)", p.stdout)
        if m and "usage" not in p.stdout.lower()[:20]:
            return "%s %s" % (tool, m.group(1))
    return tool


@functools.lru_cache(maxsize=None)
def _erofs_version(mkfs):
    # 1.8 prints "mkfs.erofs (erofs-utils) 1.8.6" for --version; 1.5 has no --version and names itself in -V's usage
    for args in (["--version"], ["-V"]):
        p = subprocess.run([mkfs] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        m = re.search(r"^mkfs\.erofs (?:\(erofs-utils\) )?(\d+\.\d+(?:\.\d+)*)", p.stdout, re.M)
        if m:
            return "mkfs.erofs %s" % m.group(1)
    return "mkfs.erofs (version unknown)"


@functools.lru_cache(maxsize=None)
def _erofs_help(mkfs, arg="--help"):
    return subprocess.run([mkfs, arg], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout


def erofs_compressors():
    # 1.5: "Available compressors are: lz4, lz4hc"; 1.8: "available compressors: lz4, lz4hc, lzma, ..."
    # (1.8 prints the list for --version, 1.5 for --help)
    mkfs = erofs_tool("mkfs.erofs")
    text = _erofs_help(mkfs, "--version") + _erofs_help(mkfs)
    m = re.search(r"available compressors(?: are)?: (.*)", text, re.I)
    return [c.strip() for c in m.group(1).split(",")] if m else []


def erofs_level_ranges(comp):
    """[(lo, hi)] of the levels mkfs.erofs --help lists for comp ([] when it lists none: no levels); None when
    the tool lists no ranges at all (1.5: its own error message is the check)."""
    text = _erofs_help(erofs_tool("mkfs.erofs"))
    if "option ranges" not in text:
        return None
    m = re.search(r"^\s+%s\n\s+\[,level=<([\d,-]+)>\]" % re.escape(comp), text, re.M)
    if not m:
        return []
    return [tuple(int(x) for x in r.split("-")) for r in m.group(1).split(",")]


@functools.lru_cache(maxsize=None)
def erofs_feature_support(mkfs, feature):
    """Whether this mkfs.erofs writes -E<feature>, read from the layout of a small image it builds.

    Asking the tool is the only reliable test: 1.5 accepts -Efragments and -Ededupe without a word and
    writes neither.  Two identical compressible files and a small one: fragments, all-fragments and
    ztailpacking must show their superblock flag; dedupe has no flag, so the second file's extents must be
    the first file's."""
    d = tempfile.mkdtemp(prefix="fstrace-erofs-probe-")
    try:
        src = os.path.join(d, "src")
        os.mkdir(src)
        text = "".join("fstrace line %d\n" % i for i in range(20000)).encode()
        # a and b: identical, several pclusters each; c: one small tail for ztailpacking to inline
        for name, data in (("a", text), ("b", text), ("c", text[:3000])):
            with open(os.path.join(src, name), "wb") as f:
                f.write(data)
        img = os.path.join(d, "probe.img")
        p = subprocess.run([mkfs, "-zlz4hc", "-C16384", "-E" + feature, img, src], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0 or not os.path.exists(img):
            return False
        if feature == "dedupe":
            a, b = (erofs_extents(img, "/" + n) for n in ("a", "b"))
            return bool(a) and [e[2] for e in a] == [e[2] for e in b]
        return EROFS_FEATURES[feature] in erofs_superblock(img)["features"]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def erofs_extents(image, path):
    """[(logical start, logical length, physical start, physical length)] of a file (dump.erofs -e)."""
    out = run([erofs_tool("dump.erofs"), "-e", "--path=" + path, image]).stdout
    return [tuple(int(x) for x in m.groups()) for m in
            re.finditer(r"^\s*\d+:\s*(\d+)\.\.\s*\d+ \|\s*(\d+) :\s*(\d+)\.\.\s*\d+ \|\s*(\d+)", out, re.M)]


def erofs_superblock(image):
    """The compression algorithms and feature flags in an erofs image's superblock (dump.erofs -s)."""
    out = run([erofs_tool("dump.erofs"), "-s", image]).stdout
    m = re.search(r"Filesystem features:\s*(.*)", out)
    a = re.search(r"Filesystem compr_algs:\s*(.*)", out)
    return {"features": set(m.group(1).split()) if m else set(),
            "compr_algs": set(a.group(1).replace(",", " ").split()) if a else set()}


def squashfs_layout(path):
    """What the image says about its caches' blocks, read from the superblock and the metadata block headers
    (independent of the kernel): fragment blocks, metadata block addresses of the inode and directory tables,
    every metadata block address the index tables point to, the root inode's blocks (read at mount), and where the
    inode table starts (everything from there on is metadata: mksquashfs writes the data blocks before it)."""
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
            "mount_blocks": set(walked[i:i + 2]), "inode_table": inode_table}


def _erofs_features(value):
    """--features text or list -> sorted list of known feature names; raises naming an unknown one."""
    feats = value.split(",") if isinstance(value, str) else list(value or [])
    feats = sorted({f.strip() for f in feats if f.strip()})
    for f in feats:
        if f not in EROFS_FEATURES:
            raise FstraceError("unknown erofs feature %r (choose from %s)" % (f, ", ".join(EROFS_FEATURES)))
    return feats


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
        o["features"] = _erofs_features(o.get("features"))
        if o["compress"] != "none":
            have = erofs_compressors()
            if o["compress"] not in have:
                raise FstraceError("%s cannot compress with %s (it offers: %s)"
                                   % (tool_version("erofs"), o["compress"], ", ".join(have) or "nothing"))
            if o["compress"] != "lz4hc" and opts.get("level") is None:
                o.pop("level", None)  # the default level 12 is lz4hc's; the others keep their tool's default
            ranges = erofs_level_ranges(o["compress"])
            level = o.get("level")
            if level is not None and ranges is not None and not any(lo <= level <= hi for lo, hi in ranges):
                raise FstraceError("erofs %s level must be in %s, got %d" % (
                    o["compress"], ", ".join("%d..%d" % r for r in ranges) or "(no levels)", o["level"]))
        else:
            o.pop("level", None)
            o["cluster"] = 4096
            if o["features"]:
                raise FstraceError("erofs features %s work on compressed data: use them with --compress"
                                   % ",".join(o["features"]))
        mkfs = erofs_tool("mkfs.erofs")
        for f in o["features"]:
            if not erofs_feature_support(mkfs, f):
                raise FstraceError("%s cannot write erofs feature %s (-E%s: %s)" % (
                    tool_version("erofs"), f, f, "identical files got separate extents" if f == "dedupe"
                    else "no %s flag in the superblock" % EROFS_FEATURES[f]))
        if not o["features"]:
            del o["features"]  # images built before features existed keep their cache key
        if o.get("cluster") is not None and (o["cluster"] < 4096 or o["cluster"] & (o["cluster"] - 1)):
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
        m = re.fullmatch(r"none|lzo|(zlib|zstd)(?::(\d+))?", o["compress"])
        if not m:
            raise FstraceError("btrfs compress must be none, lzo, zlib[:N] or zstd[:N], got %r" % o["compress"])
        # btrfs's levels (zlib 1..9, zstd 1..15): the kernel bounds a higher one to its highest without a word,
        # and the image would be labelled by a level it was never compressed at
        top = {"zlib": 9, "zstd": 15}.get(m.group(1))
        if m.group(2) is not None and not 1 <= int(m.group(2)) <= top:
            raise FstraceError("btrfs %s level must be in 1..%d, got %s" % (m.group(1), top, m.group(2)))
    else:  # ext4 and xfs compress nothing: a baseline has no options
        o = {}
    return o


def mkfs_argv(fs, o, image, src):
    if fs == "erofs":
        argv = [erofs_tool("mkfs.erofs"), "-T0", "--all-root"]
        if o["compress"] != "none":
            # "-zX,N": the seed's own spelling (1.8 also reads it as level=N)
            z = o["compress"] + (",%d" % o["level"] if o.get("level") is not None else "")
            argv += ["-z" + z, "-C%d" % o["cluster"]]
        if o.get("features"):
            argv.append("-E" + ",".join(o["features"]))
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
        return "erofs-%s%s-C%d%s" % (o["compress"], o.get("level", ""), o["cluster"],
                                     "".join("-" + f for f in o.get("features", [])))
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
            uncompressed = all("%s are uncompressed" % w in out for w in ("Inodes", "Fragments")) and \
                "Data is uncompressed" in out
            if not uncompressed:
                raise FstraceError("squashfs image %s: data, inodes or fragments compressed despite -noD -noI -noF"
                                   % image)
            got["uncompressed"] = True
        else:
            want = {"compression": "lz4" if o["compress"] == "lz4hc" else o["compress"], "block": o["block"]}
            if o["compress"] == "lz4hc" and not got["high_compression"]:
                raise FstraceError("squashfs image %s: -Xhc was not applied" % image)
    elif fs == "erofs":
        sb = erofs_superblock(image)
        feats = sb["features"]
        got["features"] = sorted(feats)
        got["compr_algs"] = sorted(sb["compr_algs"])
        # lz4 and lz4hc write the same format: the superblock shows compression (0padding) and
        # physical clusters above one block (big_pcluster), not the compressor's level
        want = {}
        compressed = o["compress"] != "none"
        if ("0padding" in feats) != compressed:
            raise FstraceError("erofs image %s: compression %s was not applied (features: %s)"
                               % (image, o["compress"], " ".join(sorted(feats))))
        # an image that names no algorithm (no compr_cfgs, and all of 1.5's) is lz4 by the format;
        # lz4hc is lz4 on disk, libdeflate deflate
        alg = {"lz4hc": "lz4", "libdeflate": "deflate"}.get(o["compress"], o["compress"])
        if compressed and (sb["compr_algs"] or {"lz4"}) != {alg}:
            raise FstraceError("erofs image %s: compressed with %s, asked for %s"
                               % (image, " ".join(sorted(sb["compr_algs"] or {"lz4"})), o["compress"]))
        # 1.8 sets big_pcluster for lzma, deflate and zstd at any cluster size: only lz4 says 4 KiB by its absence
        big = "big_pcluster" in feats
        if compressed and (big != (o["cluster"] > 4096) if o["compress"] in ("lz4", "lz4hc")
                           else o["cluster"] > 4096 and not big):
            raise FstraceError("erofs image %s: cluster size %d was not applied (features: %s)"
                               % (image, o["cluster"], " ".join(sorted(feats))))
        # fragments has its flag in every image with a regular file; dedupe leaves none and ztailpacking
        # only when a tail was small enough to inline: those two were proven on the tool's probe image
        got["features_probed"] = [f for f in o.get("features", []) if f in ("dedupe", "ztailpacking")]
        for f in o.get("features", []):
            if f in ("fragments", "all-fragments") and EROFS_FEATURES[f] not in feats:
                raise FstraceError("erofs image %s: feature %s was not applied (features: %s)"
                                   % (image, f, " ".join(sorted(feats))))
    else:
        return {"checked": False, "why": "options of %s are mount options, checked at mount" % fs}
    for k, v in want.items():
        if got.get(k) != v:
            raise FstraceError("%s image %s: %s is %r, asked for %r" % (fs, image, k, got.get(k), v))
    got["checked"] = True
    return got


def world_readable(src):
    """Every file (and directory) under src can be read by any user: only then may what is made from it (an
    image, an unpacked copy) be readable by any user.  A tree with one private file gives private images."""
    st = os.stat(src)
    if not st.st_mode & stat.S_IROTH:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return True
    for dirpath, dirnames, filenames in os.walk(src):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISLNK(st.st_mode):
                continue
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
            if st.st_mode & need != need:
                return False
    return True


def image_name(fs, o, dataset_id, version):
    """The cached image's file name: its cache key, of (dataset id, fs, normalized options o, tool version)."""
    key = hashlib.sha256(json.dumps([dataset_id, fs, o, version], sort_keys=True).encode()).hexdigest()[:12]
    return "%s-%s.img" % (label(fs, o), key)


def ensure_image(fs, opts, src, dataset_id, cache_dir, progress=None):
    """Build (or reuse) the image of src; returns its record (dict).  The image file is readable by every user
    only when every file of src is (world_readable): anyone who can read an image can read every file in it."""
    o = normalize(fs, opts)
    version = tool_version(fs)
    # root losetups, mounts and chmods what it finds here: only in a directory no other user can change
    with trusted_cache(os.path.join(cache_dir, "images")) as d:
        name = image_name(fs, o, dataset_id, version)
        image = d.join(name)
        with cache_lock(image):  # the same new image asked for by two runs: one builds it, the other waits
            rec = _ensure_image(fs, o, version, image, src, dataset_id, progress)
            d.chmod(name, 0o644 if world_readable(src) else 0o600)  # also an image cached before this rule
            return rec


def _ensure_image(fs, o, version, image, src, dataset_id, progress):
    meta_path = image + ".json"
    rec = _cached_record(image, meta_path)
    if rec is not None:
        if "verified" not in rec:  # cached by a version that did not check: check before using it
            rec["verified"] = verify(fs, o, image)
            write_json_atomic(meta_path, rec, indent=1, sort_keys=True)
        return rec
    if progress:
        progress("image: building %s from %s" % (label(fs, o), src))
    tmp = image + ".partial"
    if os.path.exists(tmp):
        os.unlink(tmp)
    # made private before mkfs writes into it (the tools keep an existing file's mode): until ensure_image
    # has looked at the source, nobody else may read what goes in
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
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
    write_json_atomic(meta_path, rec, indent=1, sort_keys=True)
    return rec


def _cached_record(image, meta_path):
    """The cached image's record, or None: no image, or no readable record of it (a record cut short by a
    full disk or a crash, from a version that wrote it in place, means the image is rebuilt, not a traceback),
    or one that is not this image's as it is now (another path; a size other than built, as an image cut short
    by a full disk or a copy has: it would fail every mount, and be reused so forever)."""
    if not (os.path.exists(image) and os.path.exists(meta_path)):
        return None
    try:
        with open(meta_path) as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    if not (isinstance(rec, dict) and "label" in rec) or rec.get("path") != image:
        return None
    return rec if rec.get("bytes") == os.stat(image).st_size else None


def alignment_unit(fs, o):
    """Bytes that block I/O alignment is measured against: the image's cluster or block size."""
    if fs == "erofs":
        return o.get("cluster", 4096)
    if fs == "squashfs":
        return o["block"]
    return 4096


def mount_options(fs, o, writable=False):
    # nosuid, nodev: an image made from a user's tree never grants privileges or devices, whatever it holds
    base = ("rw" if writable else "ro") + ",nosuid,nodev"
    if fs == "btrfs":
        return base + ("" if o["compress"] == "none" else ",compress=" + o["compress"])
    return base
