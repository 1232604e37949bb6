"""The built-in default dataset: deterministic, offline, shaped like the seeds' Debian rootfs.

Two parts, as in seed 000:
  tree/    ~8 k files, ~170 MB: binaries (ELF-like, compress about 2x), text (docs,
           configs, scripts: 3-4x), already-compressed files (gz, png, deb: 1x),
           in a Debian-like directory layout (usr/bin, usr/lib, usr/share/doc, etc, var/lib/dpkg)
  single/  one 128 MiB file with silesia-like mixed content, for the fio workloads

Everything comes from one seeded Mersenne Twister (random.Random, stable across
CPython versions and machines), written in a fixed order with fixed modes and
mtimes, so the same bytes appear everywhere.  The dataset id is a SHA-256 over
(path, mode, size, content) of every file in sorted order.
"""
import hashlib
import json
import os
import random
import shutil

from common.system import FstraceError, cache_lock
from workloads.catalog import tree_files

GENERATOR_VERSION = 1
FIXED_MTIME = 1700000000  # 2023-11-14, any fixed value will do
SINGLE_FILE = "silesia.bin"

# size classes in bytes (lower, upper), with weights; shaped after a Debian docker rootfs
_SIZE_CLASSES = [((16, 1024), 30), ((1024, 4096), 26), ((4096, 16384), 22), ((16384, 65536), 14),
                 ((65536, 262144), 5.5), ((262144, 1048576), 1.2), ((1048576, 4194304), 0.2)]
# content kinds and how often they occur per directory role
_DIRS = [
    # (directory pattern, number of subdirectories, share of files, {kind: weight})
    ("usr/bin", 1, 0.06, {"elf": 9, "script": 1}),
    ("usr/sbin", 1, 0.02, {"elf": 9, "script": 1}),
    ("usr/lib/x86_64-linux-gnu/lib{}", 60, 0.20, {"elf": 8, "text": 1, "compressed": 1}),
    ("usr/lib/python3/dist-packages/pkg{}", 40, 0.16, {"text": 8, "elf": 1, "compressed": 1}),
    ("usr/share/doc/package{}", 220, 0.20, {"text": 8, "compressed": 2}),
    ("usr/share/locale/l{}/LC_MESSAGES", 40, 0.08, {"catalog": 1}),
    ("usr/share/zoneinfo/Region{}", 12, 0.07, {"elf": 1, "text": 1}),
    ("usr/share/icons/theme{}", 8, 0.04, {"compressed": 1}),
    ("etc/conf{}", 30, 0.09, {"text": 1}),
    ("var/lib/dpkg/info", 1, 0.08, {"text": 1}),
]


def _zipf_cum(n, a):
    cum, t = [], 0.0
    for i in range(n):
        t += 1.0 / (i + 1) ** a
        cum.append(t)
    return cum


class Generator:
    """Content generators; every byte comes from self.rng, in call order."""

    def __init__(self, seed=20231114):
        self.rng = random.Random(seed)
        rng = self.rng
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(3000)]
        wcum = _zipf_cum(len(self.words), 1.0)
        # text repeats whole phrases (boilerplate, config keys), as real docs do
        self.lines = [" ".join(rng.choices(self.words, cum_weights=wcum, k=rng.randint(3, 12)))
                      for _ in range(12000)]
        self.lines_cum = _zipf_cum(len(self.lines), 0.5)
        self.words_cum = wcum
        # machine code repeats instruction sequences: phrases of 8-64 bytes from a pool
        self.phrases = [rng.randbytes(rng.randint(4, 40)) for _ in range(5000)]
        self.phrases_cum = _zipf_cum(len(self.phrases), 1.1)

    def text(self, n):
        rng = self.rng
        out, size = [], 0
        while size < n:
            k = max(1, (n - size) // 40 + 1)
            lines = rng.choices(self.lines, cum_weights=self.lines_cum, k=k)
            # fresh words and numbers on every line keep text from being pure repetition
            fresh = rng.choices(self.words, k=2 * k)
            nums = rng.choices(range(100000), k=k)
            block = "\n".join("%s %s %d %s" % (l, fresh[2 * i], nums[i], fresh[2 * i + 1])
                              for i, l in enumerate(lines))
            out.append(block.encode() + b"\n")
            size += len(out[-1])
        return b"".join(out)[:n]

    def elf(self, n):
        rng = self.rng
        parts = [b"\x7fELF\x02\x01\x01" + bytes(9) + rng.randbytes(48)]
        size = len(parts[0])
        while size < n:
            r = rng.random()
            if r < 0.86:
                chunk = b"".join(rng.choices(self.phrases, cum_weights=self.phrases_cum, k=32))
            elif r < 0.95:
                chunk = rng.randbytes(rng.randint(64, 512))
            else:
                chunk = bytes(rng.randint(16, 256))
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)[:n]

    def compressed(self, n):
        return self.rng.randbytes(n)

    def catalog(self, n):
        # gettext .mo: a table of offsets then strings
        k = min(n // 4, 2048)
        return (self.rng.randbytes(k) + self.text(n - k))[:n]

    def content(self, kind, n):
        if kind == "script":
            return b"#!/bin/sh\n" + self.text(max(n - 10, 0))
        return getattr(self, kind)(n)

    def size(self):
        rng = self.rng
        (lo, hi), = rng.choices([c for c, _ in _SIZE_CLASSES], weights=[w for _, w in _SIZE_CLASSES])
        return int(lo * (hi / lo) ** rng.random())


def _ext(kind, rng):
    return {"elf": rng.choice(["", "", ".so.1", ".so"]), "script": "", "text": rng.choice([".txt", ".py", ".conf", ".list", ""]),
            "compressed": rng.choice([".gz", ".png", ".xz", ".deb"]), "catalog": ".mo"}[kind]


def plan_tree(gen, nfiles):
    """[(relative path, kind, size, mode)] in generation order."""
    rng = gen.rng
    files = []
    for pattern, nsub, share, kinds in _DIRS:
        count = max(1, int(nfiles * share))
        names = list(kinds)
        weights = [kinds[k] for k in names]
        for i in range(count):
            d = pattern.format(i % nsub) if "{}" in pattern else pattern
            kind = rng.choices(names, weights=weights)[0]
            name = "%s-%d%s" % (rng.choice(gen.words), i, _ext(kind, rng))
            mode = 0o755 if kind in ("elf", "script") and "bin" in d else 0o644
            files.append((d + "/" + name, kind, gen.size(), mode))
    return files


def _write(path, data, mode):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    os.utime(path, (FIXED_MTIME, FIXED_MTIME))


def _fix_dir_times(root):
    for dirpath, dirnames, _ in os.walk(root, topdown=False):
        for d in dirnames:
            os.utime(os.path.join(dirpath, d), (FIXED_MTIME, FIXED_MTIME))
        os.chmod(dirpath, 0o755)
    os.utime(root, (FIXED_MTIME, FIXED_MTIME))


def tree_id(root):
    """SHA-256 over (path, mode, size, content) of every regular file, sorted by path."""
    h = hashlib.sha256()
    entries = []
    for dirpath, _, filenames in os.walk(root):
        for fn in filenames:
            p = os.path.join(dirpath, fn)
            entries.append(os.path.relpath(p, root))
    for rel in sorted(entries):
        p = os.path.join(root, rel)
        st = os.lstat(p)
        h.update(b"%s\0%o\0%d\0" % (rel.encode(), st.st_mode & 0o7777, st.st_size))
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def generate(dest, scale=1.0, progress=None):
    """Write the dataset into dest/{tree,single}; returns its manifest (dict)."""
    gen = Generator()
    nfiles = max(40, int(8000 * scale))
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    plan = plan_tree(gen, nfiles)
    total = 0
    for i, (rel, kind, size, mode) in enumerate(plan):
        _write(os.path.join(tmp, "tree", rel), gen.content(kind, size), mode)
        total += size
        if progress and i % 500 == 0:
            progress("dataset: %d/%d files, %.0f MB" % (i, len(plan), total / 1e6))
    _fix_dir_times(os.path.join(tmp, "tree"))

    # silesia-like single file: a mix of text, binaries and incompressible runs
    single_size = max(1 << 20, int((128 << 20) * scale)) // 4096 * 4096
    chunks, size = [], 0
    while size < single_size:
        kind = gen.rng.choices(["text", "elf", "compressed"], weights=[5, 4, 2])[0]
        n = min(gen.rng.randint(1 << 16, 1 << 20), single_size - size)
        chunks.append(gen.content(kind, n))
        size += n
    _write(os.path.join(tmp, "single", SINGLE_FILE), b"".join(chunks), 0o644)
    _fix_dir_times(os.path.join(tmp, "single"))
    if progress:
        progress("dataset: hashing")
    manifest = {
        "generator_version": GENERATOR_VERSION,
        "scale": scale,
        "files": len(plan),
        "tree_bytes": total,
        "single_file": SINGLE_FILE,
        "single_bytes": single_size,
        "tree_id": tree_id(os.path.join(tmp, "tree")),
        "single_id": tree_id(os.path.join(tmp, "single")),
    }
    manifest["id"] = hashlib.sha256((manifest["tree_id"] + manifest["single_id"]).encode()).hexdigest()[:16]
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    return manifest


def ensure_default(cache_dir, scale=1.0, progress=None):
    """The default dataset in the cache (generated once); returns (path, manifest)."""
    name = "default-v%d" % GENERATOR_VERSION + ("" if scale == 1.0 else "-s%g" % scale)
    dest = os.path.join(cache_dir, "datasets", name)
    mpath = os.path.join(dest, "manifest.json")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with cache_lock(dest):  # two runs on a fresh cache: one generates, the other waits and reuses it
        if os.path.exists(mpath):
            with open(mpath) as f:
                return dest, json.load(f)
        return dest, generate(dest, scale, progress)


def _has_data(root):
    """Some regular file (not a symlink) of the tree has bytes: the workloads read those, and a tree of empty
    files or links would trace nothing and read as a fast filesystem."""
    return any(os.path.getsize(os.path.join(root, f)) for f in tree_files(root))


def _refuse_empty(src):
    raise FstraceError("--dataset %s holds no files with data (only empty files, links or directories): "
                       "nothing to read" % src)


def from_user(src, cache_dir, progress=None):
    """--dataset DIR|TARBALL: use the user's tree (a tarball is unpacked once into the cache)."""
    src = os.path.abspath(src)
    if os.path.isdir(src):
        root = src
    elif os.path.isfile(src):
        import tarfile
        key = hashlib.sha256(("%s:%d:%d" % (src, os.path.getsize(src), int(os.path.getmtime(src)))).encode()).hexdigest()[:16]
        root = os.path.join(cache_dir, "datasets", "user-" + key)
        os.makedirs(os.path.dirname(root), exist_ok=True)
        with cache_lock(root):  # two runs unpacking the same tarball: one unpacks, the other waits
            if not os.path.isdir(root):
                if progress:
                    progress("dataset: unpacking %s" % src)
                tmp = root + ".partial"
                shutil.rmtree(tmp, ignore_errors=True)
                os.makedirs(tmp)
                try:
                    with tarfile.open(src) as t:
                        t.extractall(tmp, filter="tar") if hasattr(tarfile, "data_filter") else t.extractall(tmp)
                except BaseException as e:
                    shutil.rmtree(tmp, ignore_errors=True)
                    if isinstance(e, tarfile.ReadError):  # its message lists every method tried, one a line
                        raise FstraceError("--dataset %s: cannot unpack as a tarball: not a tar archive "
                                           "(plain, gzip, bzip2 or xz)" % src)
                    if isinstance(e, (tarfile.TarError, EOFError, OSError)):
                        raise FstraceError("--dataset %s: cannot unpack as a tarball: %s"
                                           % (src, str(e).splitlines()[0] if str(e) else type(e).__name__))
                    raise
                if not _has_data(tmp):  # refused before it becomes a cache entry
                    shutil.rmtree(tmp, ignore_errors=True)
                    _refuse_empty(src)
                os.rename(tmp, root)
    else:
        raise FstraceError("--dataset %s: no such file or directory" % src)
    if not _has_data(root):
        _refuse_empty(src)
    if progress:
        progress("dataset: hashing %s" % root)
    tid = tree_id(root)
    return root, {"id": "user-" + tid[:16], "tree_id": tid, "source": src}
