"""The standard workloads of the seeds, by name.

Each workload says which part of the dataset its image holds ("tree" for the
rootfs-like tree, "single" for the one large file), builds the command line
that runs inside the mounted image, and reads back its own ground truth (what
it read, by its own account) after the run.
"""
import json
import os
import random


RANDOM_LIST_SEED = 500  # the same random file order on every image of one dataset


class Workload:
    writes = False  # writes into an empty, writable image instead of reading the dataset's image
    # [(command, Debian package)] it runs beyond Debian's essential ones (sh, bash, tar, cat, cp, xargs, stat)
    tools = ()

    def __init__(self, name, part, summary, seed_ref):
        self.name = name
        self.part = part
        self.summary = summary
        self.seed_ref = seed_ref

    def prepare(self, mnt, outdir, ctx):
        """Write whatever the command needs into outdir; returns the argv to run with cwd=mnt."""
        raise NotImplementedError

    def ground_truth(self, outdir, ctx):
        """What the workload itself says it read: {"read_bytes": int, ...} or {} if it cannot say."""
        return {}


def tree_files(root):
    """Regular files of a tree, relative, sorted: the order random lists are drawn from."""
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, root))
    return sorted(out)


def random_list(files, n):
    rng = random.Random(RANDOM_LIST_SEED)
    order = list(files)
    rng.shuffle(order)
    return order if n is None else order[:n]


class Shell(Workload):
    """A shell pipeline over the mounted tree; ground truth = bytes of the files it reads in full."""

    def __init__(self, name, summary, seed_ref, script, reads_all_bytes_of=None):
        super().__init__(name, "tree", summary, seed_ref)
        self.script = script
        self.reads = reads_all_bytes_of

    def prepare(self, mnt, outdir, ctx):
        # pipefail: a pipeline's status is cat's otherwise, and tar's read errors (a corrupt image) would
        # leave the workload "succeeding"
        return ["bash", "-o", "pipefail", "-c", self.script]

    def ground_truth(self, outdir, ctx):
        if self.reads is None:
            return {}
        base = ctx["source"] if self.reads == "." else os.path.join(ctx["source"], self.reads)
        return {"read_bytes": sum(os.path.getsize(os.path.join(base, f)) for f in tree_files(base))}


class ListWorkload(Workload):
    """cat or stat over a fixed random list of files (seed 000's ~7 % and 100 % cases)."""

    def __init__(self, name, summary, tool, n, parallel=1):
        super().__init__(name, "tree", summary, "000")
        self.tool = tool
        self.n = n
        self.parallel = parallel

    def prepare(self, mnt, outdir, ctx):
        files = random_list(tree_files(ctx["source"]), self.n)
        path = os.path.join(outdir, "filelist.txt")
        with open(path, "w") as f:
            f.write("".join(x + "\n" for x in files))
        sink = " > /dev/null"
        # parallel readers: 16 files per process, so every reader starts early and they contend
        fan = " -P %d -n 16" % self.parallel if self.parallel > 1 else ""
        return ["sh", "-c", "xargs -d '\\n'%s %s < '%s'%s" % (fan, self.tool, path, sink)]

    def ground_truth(self, outdir, ctx):
        with open(os.path.join(outdir, "filelist.txt")) as f:
            files = f.read().splitlines()
        gt = {"files": len(files)}
        if self.tool == "cat":
            gt["read_bytes"] = sum(os.path.getsize(os.path.join(ctx["source"], x)) for x in files)
        return gt


class Fio(Workload):
    """fio 4 KiB reads on the large single file; fio's own JSON is the ground truth."""
    tools = (("fio", "fio"),)

    def __init__(self, name, summary, rw, io_size=None, runtime_s=None):
        super().__init__(name, "single", summary, "000")
        self.rw = rw
        self.io_size = io_size
        self.runtime_s = runtime_s

    def prepare(self, mnt, outdir, ctx):
        # no --invalidate: the run decides the cache state (caches dropped for cold, a read-through for warm)
        argv = ["fio", "--name=" + self.name, "--filename=" + os.path.join(mnt, ctx["single_file"]),
                "--rw=" + self.rw, "--bs=4k", "--ioengine=psync", "--readonly", "--invalidate=0",
                "--randseed=1234", "--output-format=json", "--output=" + os.path.join(outdir, "fio.json")]
        if self.io_size:
            argv.append("--io_size=" + self.io_size)
        if self.runtime_s:
            argv += ["--time_based", "--runtime=%gs" % self.runtime_s]
        return argv

    def ground_truth(self, outdir, ctx):
        with open(os.path.join(outdir, "fio.json")) as f:
            text = f.read()
        # fio may print notes before the JSON object
        data = json.loads(text[text.index("{"):])
        job = data["jobs"][0]["read"]
        clat = job.get("clat_ns", {})
        return {
            "read_bytes": job["io_bytes"],
            "ios": job["total_ios"],
            "bw_bytes": job["bw_bytes"],
            "clat_ns": {"mean": clat.get("mean"), "percentile": clat.get("percentile", {})},
            "fio_version": data.get("fio version"),
        }


class CopyIn(Workload):
    """seed 004's write test: cp -a of the dataset (already in the page cache) into an empty image, then sync."""
    writes = True

    def prepare(self, mnt, outdir, ctx):
        return ["sh", "-c", "cp -a '%s/.' '%s/dst' && sync" % (ctx["source"], mnt)]

    def ground_truth(self, outdir, ctx):
        return {"write_bytes": sum(os.path.getsize(os.path.join(ctx["source"], f))
                                   for f in tree_files(ctx["source"]))}


WORKLOADS = {w.name: w for w in [
    Fio("randread", "fio 4 KiB random reads over the whole large file (seed 000 'Full Random I/Os')", "randread"),
    Fio("seqread", "fio 4 KiB sequential read of the large file (seed 000 'Sequential I/Os')", "read"),
    Fio("randread-10m", "fio 4 KiB random reads, 10 MiB in all (seed 000 'Small Random I/Os')", "randread", "10m"),
    Shell("tar-data", "tar cf - . | cat > /dev/null: every file's data, in tree order (seed 000)", "000",
          "tar cf - . | cat > /dev/null", "."),
    Shell("tar-meta", "tar cf /dev/null .: metadata only; GNU tar skips data for /dev/null (seed 000)", "000",
          "tar cf /dev/null ."),
    ListWorkload("cat-500", "cat 500 random files (~7 %, seed 000)", "cat", 500),
    ListWorkload("stat-500", "stat 500 random files (~7 %, seed 000)", "stat", 500),
    ListWorkload("cat-all", "cat all files in random order (seed 000)", "cat", None),
    ListWorkload("stat-all", "stat all files in random order (seed 000)", "stat", None),
    ListWorkload("cat-all-p4", "cat all files in random order, 4 readers at once (app start-up; shows contention "
                 "for squashfs's decompressor and other locks)", "cat", None, parallel=4),
    Shell("tar-usrbin", "tar cf - usr/bin | cat > /dev/null (seed 002)", "002",
          "tar cf - usr/bin | cat > /dev/null", "usr/bin"),
    Shell("cp-ram", "cp -a of the tree to a RAM disk (/dev/shm), cold cache (seed 004 read)", "004",
          'd=$(mktemp -d /dev/shm/fstrace-cp-XXXXXX) && cp -a . "$d"; s=$?; rm -rf "$d"; exit $s', "."),
    CopyIn("write-small", "tree", "cp -a of the many-small-files tree into an empty image && sync (seed 004 write)",
           "004"),
    CopyIn("write-large", "single", "cp -a of the one large file into an empty image && sync (seed 004 write)",
           "004"),
]}


def get(name):
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError("unknown workload %r (choose from %s)" % (name, ", ".join(sorted(WORKLOADS))))


def context(dataset_root, part, manifest):
    """What prepare/ground_truth need to know about the dataset part the image was built from."""
    if part == "single":
        if manifest.get("single_file"):
            src = os.path.join(dataset_root, "single")
            single = manifest["single_file"]
        else:  # a user's tree: the fio workloads use its largest file
            src = dataset_root
            files = tree_files(src)
            if not files:
                raise ValueError("dataset %s has no files" % dataset_root)
            single = max(files, key=lambda f: (os.path.getsize(os.path.join(src, f)), f))
        return {"source": src, "single_file": single}
    src = os.path.join(dataset_root, "tree") if manifest.get("single_file") else dataset_root
    return {"source": src}
