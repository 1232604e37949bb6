"""The names and layouts the kernel side and the analysis share, as a results file carries them.

The collector writes them into the results header from bpf/records.h, where each is defined once: the
enumerations ("enums": request kinds, tiers, parts and figures by name, ...) and, from results format 3 on,
"schema": the attribution parts (their fields in index order, the bench tables' column each is summed into, its
colour in plots, what it means), the figures that are per-unit decompression (or copy) times, the counted
requests' histogram layout and table size, and the read amplification figures the analysis derives.  The
analysis reads them from the file it analyses (of(header)), never from today's records.h: a file of formats 1 and
2, whose header had no "schema", is read with what the collectors of those formats had, FORMAT_2 below, frozen: it
never changes when records.h does.
"""

# records.h as the collectors of results formats 1 and 2 had it: FST_PARTS (index order), FST_DECOMP_FIGURES,
# FST_LAT_SUB_BITS, FST_LAT_SLOTS, FST_HIST_SLOTS, FST_REQ_AGG_MAX, FST_AMPLIFICATION
FORMAT_2 = {
    "parts": [
        {"field": "oncpu_ns", "group": "oncpu", "colour": "#5aaa5a",
         "meaning": "on-CPU in the request (syscall work, page-cache copy, in-task decompression)"},
        {"field": "tracer_ns", "group": "tracer", "colour": "#d0508c",
         "meaning": "on-CPU in fstrace's own BPF programs inside the request (FST_TRACER_TIME_EVERY: 1 in 16 handler "
                    "runs timed, the rest charged their site's mean)"},
        {"field": "io_wait_ns", "group": "io_wait", "colour": "#285ac8",
         "meaning": "off-CPU waiting for I/O (in io_schedule, or own block I/O in flight)"},
        {"field": "worker_ns", "group": "kworker", "colour": "#009696",
         "meaning": "asleep while a kworker ran filesystem work that woke it (erofs decompression, btrfs end-io)"},
        {"field": "worker_wait_ns", "group": "kworker", "colour": "#7fcaca",
         "meaning": "asleep while that work waited for its kworker to get a CPU"},
        {"field": "lock_ns", "group": "lock", "colour": "#963caa",
         "meaning": "off-CPU waiting for a contended sleeping lock (mutex, rwsem; lock:contention_begin/end)"},
        {"field": "dsleep_ns", "group": "other", "colour": "#8c6e50",
         "meaning": "off-CPU, uninterruptible otherwise (work done by others, folio locks without own I/O)"},
        {"field": "sleep_ns", "group": "other", "colour": "#aaaaaa", "meaning": "off-CPU, interruptible sleep"},
        {"field": "runq_ns", "group": "other", "colour": "#e0b040", "meaning": "runnable, waiting for a CPU"},
        {"field": "missed_ns", "group": "other", "colour": "#ff4040",
         "meaning": "not attributable: the kernel did not deliver a context-switch event for it"},
    ],
    "decomp_figures": ["erofs_lz4_decompress", "erofs_lzma_decompress", "erofs_deflate_decompress",
                       "erofs_zstd_decompress", "erofs_plain_copy", "squashfs_decompress", "btrfs_zstd_decompress",
                       "btrfs_lzo_decompress", "btrfs_zlib_decompress"],
    "lat_sub_bits": 3,
    "lat_slots": 256,
    "hist_slots": 40,
    "req_agg_max": 64,
    "amplification": [
        {"name": "device_read_per_received",
         "meaning": "bytes read from the device level per byte the workload received"},
        {"name": "decompressed_per_received", "meaning": "bytes decompressed per byte the workload received"},
        {"name": "unit_lookups", "meaning": "how many times each compressed unit was looked up (decompressed)"},
        {"name": "unit_device_reads", "meaning": "how many times each compressed unit was read from the device"},
        {"name": "device_reread_share",
         "meaning": "share of the device bytes read that had been read before in the run"},
        {"name": "device_unneeded_share",
         "meaning": "share of the device bytes read that belong to blocks the request did not need"},
    ],
}
# records.h FST_FIGURES as those collectors had it: the figure names of a header without enums.figure
FORMAT_2_FIGURES = [
    "bio_queue", "bio_split", "rq_issue", "rq_complete", "work_exec", "work_queue", "req_start", "req_end",
    "cpu_split", "wakeup", "process_tree", "pcache_misses", "lock_wait", "readahead_windows", "erofs_extents",
    "erofs_readahead", "erofs_read_folio", "squashfs_cache_lookups", "squashfs_cache_misses", "btrfs_compress_write",
] + FORMAT_2["decomp_figures"]
# the encodings of a header that does not carry them (dev_encoding, io_op: formats 1 and early 2)
MINORBITS = 20
OP_MASK = 0xFF
IO_OPS = {"read": 0, "write": 1, "other": 2}


class Schema:
    """What one results file says records.h was: parts (fields in index order), part_group, part_colour,
    part_meaning ({field: ...}), figures and decomp_figures (names), lat_sub_bits, lat_slots, hist_slots, and
    req_agg_max: the (superblock, kind) pairs the kernel could count requests of (the rest were recorded),
    amplification: the read amplification figures the analysis derives ({id: meaning}), and figure_fs: the
    figures that belong to one filesystem ({figure: fs}; empty in files from before records.h said)."""

    def __init__(self, doc, figures):
        self.parts = tuple(p["field"] for p in doc["parts"])
        self.part_group = {p["field"]: p["group"] for p in doc["parts"]}
        self.part_colour = {p["field"]: p["colour"] for p in doc["parts"]}
        self.part_meaning = {p["field"]: p["meaning"] for p in doc["parts"]}
        self.figures = frozenset(figures)
        self.decomp_figures = frozenset(doc["decomp_figures"])
        self.lat_sub_bits = doc["lat_sub_bits"]
        self.lat_slots = doc["lat_slots"]
        self.hist_slots = doc["hist_slots"]
        self.req_agg_max = doc["req_agg_max"]
        self.amplification = {a["name"]: a["meaning"] for a in doc["amplification"]}
        self.figure_fs = dict(doc.get("figure_fs") or {})

    def parts_in(self, group):
        """The parts the bench tables sum into one column (FST_PARTS' group)."""
        return tuple(p for p in self.parts if self.part_group[p] == group)

    def figure(self, name):
        """A figure id (records.h FST_FIGURES) by its name, checked: a typo is an error, not a figure never
        found."""
        if name not in self.figures:
            raise KeyError("the results' FST_FIGURES have no figure %s" % name)
        return name

    def amp(self, name):
        """A read amplification figure id (records.h FST_AMPLIFICATION) by its name, checked."""
        if name not in self.amplification:
            raise KeyError("the results' FST_AMPLIFICATION have no figure %s" % name)
        return name

    def part_info(self):
        """[{field, group, colour, meaning}] in index order, as a summary carries them for its readers."""
        return [{"field": p, "group": self.part_group[p], "colour": self.part_colour[p],
                 "meaning": self.part_meaning[p]} for p in self.parts]


def of(header):
    """The schema a results header describes (format 3 on: its "schema"; before: FORMAT_2)."""
    figures = (header.get("enums") or {}).get("figure")
    return Schema(header.get("schema") or FORMAT_2, figures.values() if figures else FORMAT_2_FIGURES)


def of_summary(s):
    """The parts' schema a summary was made with (its attribution's part_info), FORMAT_2's for a summary.json
    written before summaries carried it."""
    info = ((s or {}).get("attribution") or {}).get("part_info")
    return Schema(dict(FORMAT_2, parts=info) if info else FORMAT_2, FORMAT_2_FIGURES)


FORMAT_2_SCHEMA = Schema(FORMAT_2, FORMAT_2_FIGURES)
