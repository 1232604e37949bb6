"""The mounts and block devices a command traces: mountinfo, device numbers as the kernel records them, the
devices under a mount (its disk, or its loop device and the disk behind it), readahead, tracefs."""
import glob
import os
import re

from common.system import mount


def ensure_tracefs(cleanup):
    """Mount tracefs for tools that look tracepoints up there (bpftrace), unmounted again at cleanup;
    it is not mounted by default on every system."""
    if not os.path.isdir("/sys/kernel/tracing/events"):
        mount("tracefs", "/sys/kernel/tracing", "tracefs", cleanup, options="rw")


def dev_numbers(path_or_dev):
    """(major, minor) of a block device node, or of the filesystem a path is on."""
    st = os.stat(path_or_dev)
    import stat as _stat
    rdev = st.st_rdev if _stat.S_ISBLK(st.st_mode) else st.st_dev
    return os.major(rdev), os.minor(rdev)


def kdev(major, minor):
    """Kernel-internal dev_t encoding the BPF side records."""
    return (major << 20) | minor


def read_ahead_kb(dev):
    """The readahead limit the kernel gives files on a block device (its bdi's ra_pages, in KiB)."""
    ma, mi = dev_numbers(dev)
    with open("/sys/dev/block/%d:%d/queue/read_ahead_kb" % (ma, mi)) as f:
        return int(f.read())


def whole_disk(dev, sysfs="/sys"):
    """The disk a block device (major, minor) is part of: a partition's disk (whose loop device, if it is one,
    serves the partition's requests); any other device itself."""
    base = os.path.join(sysfs, "dev/block/%d:%d" % dev)
    if not os.path.exists(os.path.join(base, "partition")):
        return dev
    try:
        with open(os.path.join(base, "..", "dev")) as f:
            ma, mi = f.read().split(":")
    except (OSError, ValueError):
        return dev
    return int(ma), int(mi)


def backing_block_device(path):
    """(major, minor) of the block device holding path's filesystem (a partition: fstrace names a request by the
    partition it is for, as /proc/diskstats counts it there too), or None (tmpfs, overlay, ...)."""
    ma, mi = dev_numbers(path)
    if os.path.exists("/sys/dev/block/%d:%d" % (ma, mi)):
        return ma, mi
    return None


DAMON_KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds"


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _permil_free(metric, high):
    """The watermark condition of a DAMON scheme (free memory rate in per mille): '' when it is always on."""
    if not metric or metric == "none":
        return ""
    return " while free memory is at most %s per mille" % (high or "?") if metric == "free_mem_rate" else \
        " under watermarks on %s" % metric


def proactive_reclaim(kdamonds=DAMON_KDAMONDS, damon_reclaim="/sys/module/damon_reclaim/parameters"):
    """What on this machine pages out memory it judges idle, with no memory pressure (nothing in /proc/vmstat's
    pgscan or pgsteal): DAMON's running kdamonds with a pageout scheme on physical memory (page cache included;
    a virtual-address one pages out only its target processes' mappings), and DAMON_RECLAIM when enabled.  Under
    them a warm run can miss the cache for pages its warming pass read: DAMON samples a page per region, and a
    region judged idle is paged out whole.  One line each, as configured (filters counted, not interpreted);
    empty when there is none."""
    found = []
    for k in sorted(glob.glob(os.path.join(kdamonds, "[0-9]*")), key=lambda p: int(os.path.basename(p))):
        if _read(os.path.join(k, "state")) != "on":
            continue
        for ctx in sorted(glob.glob(os.path.join(k, "contexts", "[0-9]*"))):
            if _read(os.path.join(ctx, "operations")) not in ("paddr", None):
                continue
            aggr_us = _read(os.path.join(ctx, "monitoring_attrs", "intervals", "aggr_us"))
            aggr_s = int(aggr_us) / 1e6 if aggr_us and aggr_us.isdigit() else None  # DAMON's unit of age
            for sch in sorted(glob.glob(os.path.join(ctx, "schemes", "[0-9]*"))):
                if _read(os.path.join(sch, "action")) != "pageout":
                    continue
                pat = os.path.join(sch, "access_pattern")
                age, most = _read(os.path.join(pat, "age", "min")), _read(os.path.join(pat, "nr_accesses", "max"))
                what = "physical memory regions"
                if aggr_s is not None and most and most.isdigit():
                    what += " seen accessed in at most %s sample%s per %g s" % (most, "" if most == "1" else "s",
                                                                                aggr_s)
                if aggr_s is not None and age and age.isdigit():
                    what += " for %g s or more" % (int(age) * aggr_s)
                nf = sum(int(_read(os.path.join(sch, d, "nr_filters")) or 0)
                         for d in ("filters", "core_filters", "ops_filters"))
                what += _permil_free(_read(os.path.join(sch, "watermarks", "metric")),
                                     _read(os.path.join(sch, "watermarks", "high")))
                found.append("DAMON kdamond %s (pid %s): pageout of %s%s" % (
                    os.path.basename(k), _read(os.path.join(k, "pid")) or "?", what,
                    ", %d filter%s" % (nf, "" if nf == 1 else "s") if nf else ""))
    if _read(os.path.join(damon_reclaim, "enabled")) == "Y":
        age = _read(os.path.join(damon_reclaim, "min_age"))
        found.append("DAMON_RECLAIM: pageout of memory unaccessed for %s%s" % (
            "%g s or more" % (int(age) / 1e6) if age and age.isdigit() else "a while",
            _permil_free("free_mem_rate", _read(os.path.join(damon_reclaim, "wmarks_high")))))
    return found


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mounts():
    """[(mountpoint, fstype, source, (major, minor) of the superblock)] from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.rstrip("\n").split(" - ", 1)
            fields = left.split()
            ma, mi = fields[2].split(":")
            fstype, source = right.split()[:2]
            mnt = re.sub(r"\\([0-7]{3})", lambda e: chr(int(e.group(1), 8)), fields[4])  # \040, \011, \134 ...
            out.append((mnt, fstype, source, (int(ma), int(mi))))
    return out


def mount_of(path):
    """The mount holding path (the longest mountpoint prefix)."""
    path = os.path.realpath(path)
    best = None
    for m in mounts():
        mp = m[0]
        if path == mp or path.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) > len(best[0]):
                best = m
    return best


def sdev_arg(mount):
    """The collector's --sdev for a mount (its mountinfo tuple): its superblock's device, and the device stat()
    reports for its files where that differs (a btrfs subvolume's anonymous device), which places stat calls."""
    ma, mi = mount[3]
    try:
        st = os.stat(mount[0]).st_dev
    except OSError:  # gone meanwhile: its superblock's device alone
        return "%d:%d" % (ma, mi)
    # a mount another one covers stats as the covering filesystem: no alias from it
    if (os.major(st), os.minor(st)) == (ma, mi) or mount_of(mount[0])[3] != (ma, mi):
        return "%d:%d" % (ma, mi)
    return "%d:%d=%d:%d" % (ma, mi, os.major(st), os.minor(st))


def block_devices_of_mount(m):
    """Block devices under a mount, each (major, minor) with its level (records.h FST_DEV_LEVELS): its own
    device (a loop device or a partition of one: "loop"; a disk or a partition of one: "disk"), and for a loop
    device the device holding its backing file ("backing").  A partition is traced as itself: the block programs
    name a request by the partition it is for (the request's part), as /proc/diskstats counts it."""
    _, _, source, sdev = m
    own = None
    if os.path.exists("/sys/dev/block/%d:%d" % sdev):
        own = sdev
    elif source.startswith("/dev/") and os.path.exists(source):
        own = dev_numbers(source)   # btrfs: anonymous superblock device, real one is the source
    if own is None:
        return []
    # a partition of a loop device is the image's device as the loop device would be
    name = os.path.basename(os.path.realpath("/sys/dev/block/%d:%d" % whole_disk(own)))
    try:
        with open("/sys/block/%s/loop/backing_file" % name) as f:
            backing = f.read().strip()
    except OSError:
        return [(own, "disk")]
    under = backing_block_device(backing) if os.path.exists(backing) else None
    return [(own, "loop")] + ([(under, "backing")] if under and under != own else [])
