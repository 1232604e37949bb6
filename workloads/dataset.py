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
import posixpath
import random
import shutil
import stat

from common.system import FstraceError, cache_lock, shown, writing
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
    return {"elf": rng.choice(["", "", ".so.1", ".so"]), "script": "",
            "text": rng.choice([".txt", ".py", ".conf", ".list", ""]),
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
    with writing(path):  # a full cache disk: one line naming the file (ENOSPC carries no name)
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
    """SHA-256 over (path, mode, size, content) of every file, sorted by path (a symlink's content is its target)."""
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
        if stat.S_ISLNK(st.st_mode):  # a link is its target's text, never what it points at
            h.update(os.readlink(p).encode(errors="surrogateescape"))
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def generate(dest, scale=1.0, progress=None):
    """Write the dataset into dest/{tree,single}; returns its manifest (dict)."""
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        manifest = _generate(tmp, scale, progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk is not left full of half a dataset
        raise
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    return manifest


def _generate(tmp, scale, progress):
    gen = Generator()
    nfiles = max(40, int(8000 * scale))
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
    with writing(os.path.join(tmp, "manifest.json")), open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
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
                       "nothing to read" % shown(src))


def _refuse(src, member, why):
    raise FstraceError("--dataset %s: refused: member %s %s" % (shown(src), shown(member), why))


def _inside(rel):
    """rel (a path relative to the destination, '/'-separated) names something inside it: not absolute, and no
    '..' that climbs out."""
    if rel.startswith("/") or rel.startswith("\\"):
        return False
    norm = posixpath.normpath(rel)
    return norm != ".." and not norm.startswith("../")


def _member_name(src, m):
    """The member's path relative to the destination, or a refusal: absolute names and '..' are never
    rewritten into something else, as GNU tar and Python's filters would; a user's tarball that has them is not
    a tree to build an image of."""
    name = m.name
    if name.startswith("/"):
        _refuse(src, name, "has an absolute name")
    if ".." in name.split("/"):
        _refuse(src, name, "has '..' in its name")
    norm = posixpath.normpath(name)
    return "" if norm == "." else norm


def _no_link_on_the_way(src, dest, rel):
    """No directory of rel's path under dest is a symlink: extraction never writes through a link (a symlink
    member followed by a member beneath it is how a tarball writes outside its directory)."""
    parts = rel.split("/")[:-1]
    path = dest
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            _refuse(src, rel, "lies beneath symlink %s" % shown("/".join(parts[:i + 1])))
        if not stat.S_ISDIR(st.st_mode):
            _refuse(src, rel, "lies beneath %s, which is not a directory" % shown("/".join(parts[:i + 1])))


def _clear(path):
    """Remove a non-directory at path (a later member of the same name replaces it, as tar does)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    os.unlink(path)


# the permission bits a member keeps: no set-id or sticky bit (refused or dropped), and no group or other write
# (the cache is root's, and an image built from it should not hand out write bits its maker chose)
_KEEP_BITS = 0o755


def safe_extract(tar, dest, src):
    """Unpack an untrusted tarball into dest, member by member, whatever the Python version: regular files,
    directories, symlinks and hard links that stay inside dest, nothing else.  Refused, with one line naming the
    member: absolute names, '..', paths beneath a symlink, symlinks whose target is absolute or leaves dest, hard
    links to anything but a regular file unpacked before them, device nodes, FIFOs and other special files, and
    set-user-id or set-group-id bits.  Nothing is written outside dest, and no link is followed while writing."""
    dirs = []
    links = []
    for m in tar:
        rel = _member_name(src, m)
        if not rel:  # the archive's own top directory ("." or "./")
            continue
        _refuse_kind(src, m)
        _no_link_on_the_way(src, dest, rel)
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if m.isdir():
            _unpack_dir(path)
            dirs.append((path, m))
        elif m.issym():
            _unpack_symlink(src, m, rel, path)
            links.append((path, m))
        elif m.islnk():
            _unpack_hard_link(src, m, dest, path)
        else:
            _unpack_file(tar, m, path)
    _links_resolve_inside(src, dest, links)
    # directories last, deepest first: a directory without write or search permission is filled before it
    # gets its mode
    for path, m in sorted(dirs, key=lambda d: d[0].count(os.sep), reverse=True):
        os.chmod(path, m.mode & _KEEP_BITS)
        os.utime(path, (m.mtime, m.mtime))


def _refuse_kind(src, m):
    """Refuse a member with a set-id bit, or of a kind other than a regular file, directory, symlink or hard link."""
    if m.mode & (stat.S_ISUID | stat.S_ISGID):
        _refuse(src, m.name, "has a set-user-id or set-group-id bit")
    if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
        kind = ("a character device" if m.ischr() else "a block device" if m.isblk() else
                "a FIFO" if m.isfifo() else "a special file")
        _refuse(src, m.name, "is %s (only regular files, directories and symlinks are unpacked)" % kind)


def _unpack_dir(path):
    """A directory member, private until safe_extract gives it its mode (a non-directory of its name replaced)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.mkdir(path, 0o700)
    else:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            os.mkdir(path, 0o700)


def _unpack_symlink(src, m, rel, path):
    """A symlink member, refused when its target is absolute or leaves the tree."""
    target = m.linkname
    if target.startswith("/"):
        _refuse(src, m.name, "is a symlink to an absolute path (%s)" % shown(target))
    if not _inside(posixpath.join(posixpath.dirname(rel), target)):
        _refuse(src, m.name, "is a symlink that leaves the tree (to %s)" % shown(target))
    _clear(path)
    os.symlink(target, path)
    os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)


def _unpack_hard_link(src, m, dest, path):
    """A hard link member, refused unless its target is a regular file inside dest unpacked before it."""
    target = m.linkname
    if target.startswith("/") or ".." in target.split("/"):
        _refuse(src, m.name, "is a hard link outside the tree (to %s)" % shown(target))
    tpath = os.path.join(dest, posixpath.normpath(target))
    _no_link_on_the_way(src, dest, posixpath.normpath(target))
    try:
        tst = os.lstat(tpath)
    except FileNotFoundError:
        tst = None
    if tst is None or not stat.S_ISREG(tst.st_mode):
        _refuse(src, m.name, "is a hard link to %s, which is not a regular file unpacked before it"
                % shown(target))
    _clear(path)
    os.link(tpath, path, follow_symlinks=False)


def _unpack_file(tar, m, path):
    """A regular file member, created afresh (never through a link) with the bits it keeps (_KEEP_BITS)."""
    _clear(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        f = tar.extractfile(m)
        shutil.copyfileobj(f, out, 1 << 20)
        os.fchmod(out.fileno(), m.mode & _KEEP_BITS)
    os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)


def _links_resolve_inside(src, dest, links):
    """A symlink inside whose target goes through another symlink can still resolve outside (sub/s -> ..,
    sub/t -> s/../..): checked on the unpacked tree, where every link now exists."""
    real_dest = os.path.realpath(dest)
    for path, m in links:
        real = os.path.realpath(path)
        if real != real_dest and not real.startswith(real_dest + os.sep):
            _refuse(src, m.name, "is a symlink that resolves outside the tree (to %s)" % shown(m.linkname))


def check_tree(src, root):
    """A user's directory is untrusted input as a tarball is: device nodes, FIFOs, sockets and set-id files are
    refused with one line naming the entry (mkfs would copy them into the image).  Symlinks are kept as links,
    never followed, wherever they point."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                kind = ("a character device" if stat.S_ISCHR(st.st_mode) else "a block device"
                        if stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                        "a socket" if stat.S_ISSOCK(st.st_mode) else "a special file")
                raise FstraceError("--dataset %s: refused: %s is %s (only regular files, directories and "
                                   "symlinks are built into images)" % (shown(src), shown(rel), kind))
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                raise FstraceError("--dataset %s: refused: %s has a set-user-id or set-group-id bit"
                                   % (shown(src), shown(rel)))


def from_user(src, cache_dir, progress=None):
    """--dataset DIR|TARBALL: use the user's tree (a tarball is unpacked once into the cache, safely:
    safe_extract)."""
    src = os.path.abspath(src)
    if os.path.isdir(src):
        root = src
        check_tree(src, root)
    elif os.path.isfile(src):
        import tarfile
        stamp = "%s:%d:%d" % (src, os.path.getsize(src), int(os.path.getmtime(src)))
        key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
        root = os.path.join(cache_dir, "datasets", "user-" + key)
        os.makedirs(os.path.dirname(root), exist_ok=True)
        with cache_lock(root):  # two runs unpacking the same tarball: one unpacks, the other waits
            if not os.path.isdir(root):
                if progress:
                    progress("dataset: unpacking %s" % shown(src))
                tmp = root + ".partial"
                shutil.rmtree(tmp, ignore_errors=True)
                # no wider than the tarball: a tarball other users cannot read unpacks where they cannot look
                os.makedirs(tmp, mode=0o755 if os.stat(src).st_mode & stat.S_IROTH else 0o700)
                try:
                    with tarfile.open(src) as t:
                        safe_extract(t, tmp, src)
                except BaseException as e:
                    shutil.rmtree(tmp, ignore_errors=True)
                    if isinstance(e, tarfile.ReadError):  # its message lists every method tried, one a line
                        raise FstraceError("--dataset %s: cannot unpack as a tarball: not a tar archive "
                                           "(plain, gzip, bzip2 or xz)" % shown(src))
                    if isinstance(e, (tarfile.TarError, EOFError, OSError)):
                        why = shown(str(e).splitlines()[0]) if str(e) else type(e).__name__
                        raise FstraceError("--dataset %s: cannot unpack as a tarball: %s" % (shown(src), why))
                    raise
                if not _has_data(tmp):  # refused before it becomes a cache entry
                    shutil.rmtree(tmp, ignore_errors=True)
                    _refuse_empty(src)
                os.rename(tmp, root)
    else:
        raise FstraceError("--dataset %s: no such file or directory" % shown(src))
    if not _has_data(root):
        _refuse_empty(src)
    if progress:
        progress("dataset: hashing %s" % shown(root))
    tid = tree_id(root)
    return root, {"id": "user-" + tid[:16], "tree_id": tid, "source": src}
