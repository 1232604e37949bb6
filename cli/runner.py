"""Running a workload under tracing: the collector started and stopped (run, attach), the
options that decide what it records, and run_once, one workload on a freshly mounted image into a results
directory with its summary.  commands.py (run, attach), bench.py and advise.py (the matrices) and
scripts/bench_overhead.py import it.
"""
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

from analysis.render import flamegraph_specs, run_html, write_html
from cli.cgroups import in_cgroup, io_throttle, iops_cap, run_cgroup, run_process_group
from cli.devices import (backing_block_device, dev_numbers, drop_caches, kdev, mount_of, proactive_reclaim,
                         read_ahead_kb, sdev_arg)
from cli.directories import make_tmpdir
from cli.leftovers import delayacct_sweep
from cli.signals import Interrupted, stop_process
from common.safedir import trusted_cache
from common.system import (Cleanup, FstraceError, losetup, mount, proc_start, progress, require_tools, run,
                           write_json_atomic, writing)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTOR = os.path.join(ROOT, "build", "fstrace-collect")
# kernel stacks of the workload inside its requests (sampling tier).  Each sample is a timer interrupt on
# every CPU (a trap to the hypervisor on a VM) and a stack walk of microseconds, so a few thousand Hz cost a
# visible share of cold read throughput (docs/overhead.md): 997 (prime: it does not run in step with HZ
# timers); --sample-hz raises it where a short run needs more samples.
SAMPLE_HZ = 997
# off-CPU stacks (collector --offcpu-sample-us): walking a stack at every switch out of a request was the
# costliest thing the tracer did (microseconds a walk: docs/overhead.md); intervals of 1 ms and more are always
# walked (lock waits that matter are exact), shorter ones are threshold-sampled, each stack's time unbiased
OFFCPU_SAMPLE_US = 1000
# attach and serve stay attached for hours: where their request hooks tax every syscall (the syscall
# tracepoints), those get 1 % of the busy CPU time by default (user/window.c)
DEFAULT_BUDGET_PCT = 1.0


@dataclasses.dataclass(frozen=True)
class Tracing:
    """What the collector records and what that costs, as run and attach take it (--records, --io-stacks,
    --sample-hz, --offcpu-sample-us); the defaults are what every command ships with."""
    records: str = "slow"
    io_stacks: str = "sampled"
    sample_hz: int = SAMPLE_HZ
    offcpu_sample_us: int = OFFCPU_SAMPLE_US


def require_root(what):
    if os.geteuid() != 0:
        raise FstraceError("%s must run as root (try: sudo ./fstrace %s)" % (what, " ".join(sys.argv[1:])))


def check_ready(what):
    require_root(what)
    if not os.access(COLLECTOR, os.X_OK):
        raise FstraceError("collector not built: run make (or ./fstrace, which builds it)")


def check_collector_options(argv):
    """The collector's own checks of the options it is to run with (its --check, which loads nothing), made
    before anything is set up: one line naming what is wrong, not a collector's line after a mount and ours."""
    p = subprocess.run([COLLECTOR, "--check"] + list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, errors="replace")
    if p.returncode != 0:
        said = p.stderr.strip().splitlines()
        raise FstraceError(said[-1].removeprefix("fstrace-collect: ") if said
                           else "the collector refused its options (exit %d)" % p.returncode)


def check_iops_cap(iops):
    if iops is not None and iops <= 0:
        raise FstraceError("--iops-cap must be positive, got %d" % iops)


def tool_versions(fs, wl):
    """The versions of the tools an image of fs and the workload wl run, each missing one named first (all of
    them in one line, with their packages)."""
    from workloads import images
    require_tools("--fs %s --workload %s" % (fs, wl.name), images.tools_needed(fs) + list(wl.tools))
    tools = {"mkfs": images.tool_version(fs)}
    if any(cmd == "fio" for cmd, _ in wl.tools):
        tools["fio"] = subprocess.run(["fio", "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return tools


def resolve_dataset(given, cache, scale=1.0):
    """(dataset root, manifest): of given (--dataset: a directory or tarball), else of the built-in dataset at
    scale; datasets are kept under cache."""
    from workloads import dataset
    cache = os.path.abspath(cache)
    trusted_cache(cache).close()  # checked before root unpacks into it or uses what it finds there
    if given:
        return dataset.from_user(given, cache, progress)
    return dataset.ensure_default(cache, scale, progress)


def tracing_options(tracing=Tracing()):
    """The collector options of tracing (run, attach, bench alike)."""
    return ["--sample-hz", str(tracing.sample_hz), "--records", tracing.records, "--io-stacks", tracing.io_stacks,
            "--offcpu-sample-us", str(tracing.offcpu_sample_us)]


def add_tracing_arguments(p):
    p.add_argument("--records", choices=("slow", "all"), default=Tracing.records,
                   help="slow (default): one record per request that slept, did block I/O, missed the page cache, "
                        "failed or took over 1 ms; page-cache hits are counted in the kernel. all: a record each")
    p.add_argument("--io-stacks", choices=("sampled", "all"), default=Tracing.io_stacks,
                   help="kernel stacks bios were queued from: at most one per 10 ms per CPU (default) or every bio's")
    p.add_argument("--sample-hz", type=int, default=Tracing.sample_hz,
                   help="on-CPU stack sampling rate (default %(default)d; 0: off)")
    p.add_argument("--offcpu-sample-us", type=int, default=Tracing.offcpu_sample_us,
                   help="off-CPU stacks: intervals this long are always walked, shorter ones with probability "
                        "length/US and weighted US (default %(default)d; 0: every interval's stack at its switch out, "
                        "exact, with the scheduler's frames)")


def run_collector(argv, cwd, interrupt_ends=False, on_ready=None):
    """Run the collector; on interrupt, stop it so it finishes its file.  Returns only once it has exited,
    whatever happens: its cwd (run: the mounted image) is unmounted next.

    interrupt_ends: Ctrl-C is the normal way to end (attach) rather than an abort (run).
    on_ready: called once the collector says its programs are attached (its --ready-fd)."""
    ready_r = ready_w = None
    if on_ready:
        ready_r, ready_w = os.pipe()
        argv = argv[:1] + ["--ready-fd", str(ready_w)] + argv[1:]
    # should this process be SIGKILLed, the collector is told (SIGTERM) and ends its workload; the next
    # fstrace start kills it if it is still there (it is recorded with what the run made)
    p = subprocess.Popen(argv, cwd=cwd, preexec_fn=die_with_parent, pass_fds=(ready_w,) if on_ready else ())
    c = Cleanup()
    c.push("stop collector", lambda: None, record={"kind": "process", "pid": p.pid, "start": proc_start(p.pid)})
    try:
        if on_ready:
            os.close(ready_w)
            if os.read(ready_r, 16) == b"ready\n":  # b"": it exited before attaching
                on_ready()
        rc = p.wait()
    except Interrupted:
        rc = stop_process(p)
        if not interrupt_ends:
            raise
    finally:
        if ready_r is not None:
            os.close(ready_r)
        if p.returncode is None:  # any other way out: the collector must not outlive this (nor keep the mount)
            stop_process(p)
        c.run()
        delayacct_sweep()  # a collector that was killed could not give task_delayacct back itself
    if rc < 0:
        raise FstraceError("collector killed by %s; no results" % signal.Signals(-rc).name)
    if rc != 0:
        raise FstraceError("collector failed (exit %d); see its message above" % rc)


# looked up once, here: the child of a process with threads (serve's) must do no more than call it
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """preexec_fn of a child that must not outlive this process (a collector, a tracer): SIGTERM at its death."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def bpf_program_names():
    """Names of the BPF programs loaded on the system now (bpftool), or None where bpftool cannot say."""
    try:
        p = subprocess.run(["bpftool", "-j", "prog", "show"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, timeout=30)
        return sorted({prog.get("name", "") for prog in json.loads(p.stdout or "[]")}) if p.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def run_untraced(wl, mnt, ctx, bdir, cgroups, warm):
    """The workload once with nothing attached, in the traced run's cache state (caches dropped first for a cold
    run; a warm run follows the warming run): the truth the traced run is compared with.  Its own output
    (fio.json, file lists) goes to bdir.  Returns what it measured, with the BPF programs loaded as it ended
    (programs_at_end) so that a result can show no tracer was attached meanwhile."""
    wl_argv = wl.prepare(mnt, bdir, ctx)
    argv = in_cgroup(wl_argv, cgroups) if cgroups else wl_argv
    if not warm:
        drop_caches()
    progress("running %s untraced (the baseline; --no-baseline skips it)" % wl.name)
    t0 = time.monotonic()
    # its own process group: ended whole should this be interrupted (the run's cgroup is too, at cleanup)
    p = subprocess.Popen(argv, cwd=mnt, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        p.wait()
    finally:
        if p.returncode is None:
            stop_process(p, sig=signal.SIGKILL, group=True)
    wall = time.monotonic() - t0
    programs = bpf_program_names()
    gt = wl.ground_truth(bdir, ctx) if p.returncode == 0 else {}
    return {"wall_s": wall, "exit_status": p.returncode, "ground_truth": gt, "programs_at_end": programs,
            "cache": "warm" if warm else "cold"}


def read_through(path):
    """Read a cold run's image once, past this machine's page cache (O_DIRECT), before either pass: storage
    that caches below it (a virtual disk's host, a drive's own cache) then serves both passes alike, where the
    first pass would otherwise pay for warming it and the second be timed on its cache."""
    progress("reading the image once, so that the untraced and the traced pass find the storage below alike")
    run(["dd", "if=" + path, "of=/dev/null", "bs=1M", "iflag=direct", "status=none"])


def remount(c, dev, mnt, fs, opts):
    """The image unmounted and mounted again: a cold run's second pass must not find what the first left in the
    filesystem's own caches, which drop_caches does not empty (squashfs's metadata and fragment caches hold a
    small tree's whole inode table; erofs's and btrfs's in-memory inodes and extent maps)."""
    from workloads import images
    c.undo("unmount " + mnt)
    mount(dev, mnt, fs, c, images.mount_options(fs, opts))


def run_image(fs, opts, wl, ctx, manifest, cache):
    """The image a workload runs on: built (or reused from the cache) from its dataset part, or, for a workload that
    writes, a fresh empty one (made once mounted: mount_image)."""
    from workloads import images
    if wl.writes:
        if fs not in images.WRITABLE:
            raise FstraceError("workload %s writes: it needs --fs %s" % (wl.name, ", ".join(images.WRITABLE)))
        return {"fs": fs, "options": opts, "label": images.label(fs, opts), "fresh_empty": True,
                "tool": images.tool_version(fs)}
    return images.ensure_image(fs, opts, ctx["source"], "%s/%s" % (manifest["id"], wl.part), cache, progress)


def mount_image(c, image, fs, opts, wl, ctx, tmp, mnt, direct_io):
    """The image on a loop device mounted at mnt (read-only, or an empty one made in tmp for a workload that
    writes), undone by the Cleanup c: (loop device, whether it does direct I/O)."""
    from workloads import images
    if wl.writes:
        image["path"] = os.path.join(tmp, "empty.img")
        images.mkfs_empty(fs, image["path"], images.tree_bytes(ctx["source"]))
        dev, dio = losetup(image["path"], c, direct_io=direct_io, read_only=False)
        mount(dev, mnt, fs, c, images.mount_options(fs, opts, writable=True))
    else:
        dev, dio = losetup(image["path"], c, direct_io=direct_io)
        mount(dev, mnt, fs, c, images.mount_options(fs, opts))
    return dev, dio


def traced_devices(loop, unit, mnt, backing):
    """The collector's device options: the image's loop device (and the disk behind it), and the filesystem mounted
    at mnt: only the requests on the image (the workload's pipes and /dev/null cost the tracer without a word in the
    answer: the analysis keeps the image's alone)."""
    devs = ["-d", "%d:%d:%d:loop" % (loop[0], loop[1], unit), "--sdev", sdev_arg(mount_of(mnt))]
    if backing:
        devs += ["-d", "%d:%d:4096:backing" % backing]
    return devs


def workload_cgroups(c, wl_argv, loop, iops, storage, tmp):
    """The run's own cgroup (ended as a whole at cleanup) and the one throttling the image's device (--iops-cap,
    --storage): (cgroups, the workload's command run in them)."""
    own = run_cgroup(c)
    throttle = (iops_cap([loop], iops, c) if iops else
                io_throttle([loop], storage, c) if storage else None)
    cgroups = [d for d in (own, throttle) if d]
    argv = in_cgroup(wl_argv, cgroups) if cgroups else wl_argv
    if own is None:  # no cgroup v2: its process group is ended at cleanup instead
        argv = run_process_group(argv, tmp, c)
    return cgroups, argv


def device_meta(mnt, dev, dio, loop, backing):
    """The devices of a run's configuration: the filesystem's, its loop device's and the disk's behind it."""
    # the superblock's device as the kernel records it (btrfs's stat() shows a subvolume's instead)
    return {"fs_kdev": kdev(*mount_of(mnt)[3]), "loop_device": dev, "loop_kdev": kdev(*loop),
            "loop_direct_io": dio, "backing_kdev": kdev(*backing) if backing else None,
            "backing_note": None if backing else "image is not on a block device: backing level not traced"}


def write_meta(tmp, meta):
    """The run's configuration (the collector's -m file, which the results header keeps) in tmp: its path."""
    path = os.path.join(tmp, "meta.json")
    with open(path, "w") as f:
        json.dump(meta, f)
    return path


def prime_caches(wl, ctx, argv, mnt, warm):
    """What the page cache holds as the workload starts: a write workload's source files (seed 004: the files being
    copied are already in memory), or, for a warm run, what one untraced run left."""
    if wl.writes:
        subprocess.run(["tar", "cf", "-", "."], cwd=ctx["source"], stdout=subprocess.DEVNULL, check=True)
        os.sync()
    elif warm:
        progress("warming the page cache with one untraced run")
        subprocess.run(argv, cwd=mnt, stdout=subprocess.DEVNULL, check=False)


def no_baseline(wl, baseline):
    """Why the run has no untraced baseline ({"why"}), or None when it has one."""
    if wl.writes:
        return {"why": "a write workload: an untraced run would change the image the traced run writes"}
    if baseline is None:
        return {"why": "not run (--no-baseline)"}
    return None


def run_once(fs, opts, wl, droot, manifest, cache, outdir, warm=False, direct_io=True, tools=None, iops=None,
             tracing=Tracing(), baseline="before", storage=None):
    """Build (or reuse) the image, mount it, run one workload under tracing; returns its summary.

    iops: an IOPS cap on the image's device; storage: a storage profile (cli/storage.py) to throttle it to;
    tracing: what the collector records.
    baseline: "before" or "after" the traced run, the same workload runs once untraced in the same cache state
    (run_untraced; summary "baseline"); None: not (its reason is in the summary).

    Write workloads get a fresh, empty image instead.  outdir (a ResultsDir) appears only when complete; an
    error or interrupt leaves no mount, loop device, cgroup or partial output."""
    from workloads import catalog, images
    ctx = catalog.context(droot, wl.part, manifest)
    image = run_image(fs, opts, wl, ctx, manifest, cache)
    with outdir as partial:
        with Cleanup() as c:
            tmp = make_tmpdir(c)
            mnt = os.path.join(tmp, "mnt")
            dev, dio = mount_image(c, image, fs, opts, wl, ctx, tmp, mnt, direct_io)
            loop = dev_numbers(dev)
            unit = images.alignment_unit(fs, opts)
            backing = backing_block_device(image["path"])
            devs = traced_devices(loop, unit, mnt, backing)
            wl_argv = wl.prepare(mnt, partial, ctx)
            cgroups, argv = workload_cgroups(c, wl_argv, loop, iops, storage, tmp)
            meta_path = write_meta(tmp, dict({
                "fs": fs, "label": image["label"], "options": opts, "workload": wl.name,
                "workload_summary": wl.summary, "argv": wl_argv, "cgroups": cgroups, "dataset_id": manifest["id"],
                "dataset_part": wl.part, "dataset": manifest, "image": image, "tools": tools},
                **device_meta(mnt, dev, dio, loop, backing),
                cache="source in page cache" if wl.writes else ("warm" if warm else "cold"),
                alignment_unit_bytes=unit, iops_cap=iops, storage=storage, loop_read_ahead_kb=read_ahead_kb(dev),
                # page cache evicted with no memory pressure: a warm run's misses can be this machine's doing
                proactive_reclaim=proactive_reclaim()))
            prime_caches(wl, ctx, argv, mnt, warm)
            base = no_baseline(wl, baseline)
            if base is None:
                # its own output directory: the traced run's fio.json or file list is not the baseline's
                bdir = os.path.join(tmp, "baseline")
                os.makedirs(bdir)
                if not warm:
                    read_through(image["path"])
                if baseline == "before":
                    base = run_untraced(wl, mnt, ctx, bdir, cgroups, warm)
                    if not warm:
                        remount(c, dev, mnt, fs, opts)
            if not wl.writes and not warm:
                drop_caches()
            progress("running %s on %s (%s)" % (wl.name, image["label"], dev))
            run_collector([COLLECTOR, "-o", os.path.join(partial, "results.fst"), "-m", meta_path, "--progress"] +
                          tracing_options(tracing) + devs + ["--"] + argv, cwd=mnt)
            if baseline == "after" and not wl.writes:
                if not warm:
                    remount(c, dev, mnt, fs, opts)
                base = run_untraced(wl, mnt, ctx, bdir, cgroups, warm)
            if "wall_s" in base:
                base["order"] = baseline
        summary = write_summary(partial, wl, ctx, baseline=base)
    return summary


def write_summary(resdir, wl=None, ctx=None, baseline=None):
    """summary.json, the flamegraphs (SVG + folded), their speedscope file, the Perfetto timeline and the HTML
    report of a results directory.  baseline: run_untraced's measurement (or why there is none), compared with
    the traced run."""
    from analysis import flamegraph, results, speedscope, summary, timeline
    res = results.load(os.path.join(resdir, "results.fst"))
    # a workload killed by a signal never said what it read (fio writes its JSON as it ends)
    killed = (res.header.get("workload") or {}).get("signal")
    gt = wl.ground_truth(resdir, ctx) if wl and not killed else None
    s = summary.summarize_run(res, gt, baseline)
    # a full disk here is one line naming the file (ENOSPC names none); the directory is removed after it
    with writing(os.path.join(resdir, "summary.json")):
        write_json_atomic(os.path.join(resdir, "summary.json"), s, indent=1, sort_keys=True)
    specs = flamegraph_specs(res)
    for name, stacks, title, subtitle, unit in specs:
        with writing(os.path.join(resdir, name + ".svg")):
            flamegraph.write(resdir, name, stacks, title, subtitle, unit=unit)
    if specs:
        write_html(os.path.join(resdir, speedscope.NAME), speedscope.text(res, specs))
    try:
        with writing(os.path.join(resdir, timeline.NAME)):
            timeline.write(res, os.path.join(resdir, timeline.NAME))
    except ImportError as e:  # build/venv missing (setup.sh makes it): the rest of the results stand
        progress("no timeline: %s" % e)
    write_html(os.path.join(resdir, "report.html"), run_html(s, res))
    return s


def signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "an unknown signal"


def check_workload_ok(s, then):
    """A run whose workload failed, or whose reads failed, is reported but does not succeed (its timings
    are those of errors).  then: what the error line ends with (where the results are, or are not)."""
    failed = s.get("failed_requests") or {}
    status, sig = s["run"].get("workload_exit_status"), s["run"].get("workload_signal")
    if failed or status not in (0, None) or sig:
        raise FstraceError("workload %s%s; %s" % (
            "killed by signal %d (%s)" % (sig, signal_name(sig)) if sig else
            "exited with status %s" % status if status not in (0, None) else "ended",
            ", failed requests: " + ", ".join("%s x%d" % kv for kv in sorted(failed.items())) if failed else "",
            then))
