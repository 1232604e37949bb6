"""Storage profiles (--storage NAME on run, bench and advise): the media the seeds measured on, imitated by
throttling the image's loop device with cgroup v2 io.max (bandwidth and IOPS, read and write).

Throttling caps what a faster device does; it cannot make the device faster, nor give it a slower device's
latency per request (an SD card's or a disk's seek): docs/storage.md says what it can and cannot imitate.
Each profile says where its numbers come from.
"""
from common.system import FstraceError

MIB = 1 << 20

PROFILES = {
    "sdcard": {
        "medium": "microSD card in a Raspberry Pi 3 (seed 002)",
        "rbps": 20 * MIB, "wbps": 10 * MIB, "riops": 1500, "wiops": 500,
        "source": "read bandwidth: seed 002's own (~20 MiB/s of tarball from the card); IOPS and write "
                  "bandwidth: the SD Association's A1 application class minimums (1500 random-read and 500 "
                  "random-write IOPS, 10 MB/s sustained sequential write)"},
    "emmc": {
        "medium": "eMMC 5.1 module (embedded boards, phones)",
        "rbps": 250 * MIB, "wbps": 90 * MIB, "riops": 8000, "wiops": 3000,
        "source": "a mid-range eMMC 5.1 part's data-sheet class (HS400: 250-300 MB/s sequential read); not "
                  "a seed's measurement"},
    "cloud-3000iops": {
        "medium": "cloud block volume capped at 3000 IOPS (seed 000)",
        "rbps": 125 * 1000 * 1000, "wbps": 125 * 1000 * 1000, "riops": 3000, "wiops": 3000,
        "source": "IOPS: seed 000's disk ('3000 IOPS upper limit'); bandwidth: the 125 MB/s a general-purpose "
                  "3000-IOPS volume comes with (the seed does not give one)"},
    "sata-ssd": {
        "medium": "SATA SSD on USB 3 (seed 004)",
        "rbps": 500 * MIB, "wbps": 300 * MIB, "riops": 40000, "wiops": 40000,
        "source": "bandwidth: seed 004's own (~500 MiB/s sequential read, ~300 MiB/s write); IOPS: a SATA "
                  "SSD's data-sheet class"},
    "nvme": {
        "medium": "NVMe SSD, PCIe 3.0 x4, QLC (seed 004)",
        "rbps": 1500 * 1000 * 1000, "wbps": 1000 * 1000 * 1000, "riops": 90000, "wiops": 220000,
        "source": "data-sheet figures of seed 004's NVMe drive class (1500/1000 MB/s, 90k/220k IOPS); seed "
                  "004 saw 600-700 MB/s for its large-file copies"},
    "hdd": {
        "medium": "7200 rpm hard disk (seed 004)",
        "rbps": 150 * MIB, "wbps": 150 * MIB, "riops": 120, "wiops": 120,
        "source": "a hard disk's class: ~150 MiB/s at the outer tracks, ~120 random IOPS (8 ms average "
                  "access); throttling caps sequential small requests too, which a disk does not"},
}
LIMITS = ("rbps", "wbps", "riops", "wiops")  # io.max's keys, in its order


def profile(name):
    """The profile as recorded with every result: its name, limits, medium and source."""
    if name not in PROFILES:
        raise FstraceError("unknown storage profile %r (choose from %s)" % (name, ", ".join(PROFILES)))
    return dict(PROFILES[name], name=name)


def check(name, iops_cap):
    """--storage NAME and --iops-cap, one throttle per run: NAME's profile, or None without one."""
    if name and iops_cap:
        raise FstraceError("--storage and --iops-cap both throttle the image's device: give one (a profile's "
                           "IOPS are part of it)")
    return profile(name) if name else None


def describe(p):
    return "%s: read %s/s %d IOPS, write %s/s %d IOPS" % (p["name"], _rate(p["rbps"]), p["riops"],
                                                         _rate(p["wbps"]), p["wiops"])


def _rate(b):
    return "%.0f MiB" % (b / MIB) if b % MIB == 0 else "%.0f MB" % (b / 1e6)


def add_argument(p):
    p.add_argument("--storage", help="throttle the image's device to a medium (cgroup io.max): %s"
                   % ", ".join(PROFILES))
