"""Storage profiles (--storage NAME on run, bench and advise): the media the seeds measured on, imitated by
throttling the image's loop device with cgroup v2 io.max (bandwidth and IOPS, read and write).

Throttling caps what a faster device does; it cannot make the device faster, nor give it a slower device's
latency per request (an SD card's or a disk's seek): docs/storage.md says what it can and cannot imitate.
Each profile says where its numbers come from.
"""
from common.system import FstraceError

MIB = 1 << 20
MB = 1000 * 1000

PROFILES = {
    "sdcard": {
        "medium": "microSD card in a Raspberry Pi 3 (seed 002)",
        "rbps": 20 * MIB, "wbps": 10 * MIB, "riops": 1500, "wiops": 500,
        "source": "read bandwidth: seed 002's own (~20 MiB/s of tarball from the card); IOPS and write "
                  "bandwidth: the SD Association's A1 application performance class (SD 5.1), 'Sequential 10 "
                  "MB/s, Read IOPS 1500, Write IOPS 500' (anandtech.com/show/10860)"},
    "emmc": {
        "medium": "eMMC 5.1 module (embedded boards, phones)",
        "rbps": 250 * MB, "wbps": 125 * MB, "riops": 11000, "wiops": 13000,
        "source": "Samsung's first eMMC 5.1 part (64 GB) as announced: 250 MB/s sequential read, 125 MB/s "
                  "sequential write, up to 11,000 random read and 13,000 random write IOPS "
                  "(cdrinfo.com/d7/content/samsung-develops-first-emmc-51-flash-memory); not a seed's medium"},
    "cloud-3000iops": {
        "medium": "cloud block volume capped at 3000 IOPS (seed 000)",
        "rbps": 125 * MIB, "wbps": 125 * MIB, "riops": 3000, "wiops": 3000,
        "source": "IOPS: seed 000's disk ('3000 IOPS upper limit'); bandwidth: an AWS EBS gp3 volume's "
                  "baseline, which comes with 3,000 IOPS ('The default for gp3 volumes is 3,000 IOPS', AWS SDK "
                  "EbsBlockDevice.iops; throughput 'defaults to 125' MiB/s, Google Anthos AwsVolumeTemplate); "
                  "the seed gives no bandwidth"},
    "sata-ssd": {
        "medium": "SATA SSD on USB 3 (seed 004)",
        "rbps": 500 * MIB, "wbps": 300 * MIB, "riops": 8000, "wiops": 21000,
        "source": "bandwidth: seed 004's own ('about 300MiB/s sequencial write speed and 500MiB/s sequencial "
                  "read speed'); IOPS: a SATA SSD behind a USB 3 bridge, Samsung's Portable SSD T1 (an 850 EVO "
                  "and an ASMedia SATA-USB 3 bridge): 'Claimed ... 8K read IOPS / 21K write IOPS' "
                  "(anandtech.com/show/8885); seed 004 does not name its drive"},
    "nvme": {
        "medium": "NVMe SSD, PCIe 3.0 x4, QLC (seed 004)",
        "rbps": 1500 * MB, "wbps": 1000 * MB, "riops": 90000, "wiops": 220000,
        "source": "the data sheet of seed 004's drive (INTEL SSDPEKNW512G8, the 512 GB Intel SSD 660p): read "
                  "1500 MB/s, write 1000 MB/s, read 90 K and write 220 K IOPS (e-catalog.com/cmp/47022); seed "
                  "004 saw 600-700 MB/s for its large-file copies"},
    "hdd": {
        "medium": "7200 rpm hard disk (seed 004)",
        "rbps": 150 * MIB, "wbps": 150 * MIB, "riops": 120, "wiops": 120,
        "source": "a hard disk's class, not a data sheet: ~150 MiB/s at the outer tracks, ~120 random IOPS (8 "
                  "ms average access); seed 004's disk (a Seagate One Touch HDD) is said to read 'less than "
                  "100MB/s'; throttling caps sequential small requests too, which a disk does not"},
}


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


def add_argument(p):
    p.add_argument("--storage", help="throttle the image's device to a medium (cgroup io.max): %s"
                   % ", ".join(PROFILES))
