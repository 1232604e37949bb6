"""fstrace's commands: the argument parser and what each command does with its arguments.

Invoked through ./fstrace (which installs and builds what is missing first) as `python3 -m cli`.
"""
import argparse
import datetime
import functools
import json
import os
import sys


from analysis.load import error, in_dir, load_doc, load_results, note_unverified
from analysis.render import (analyse, flamegraph_specs, render_summary, run_html, run_summary, sets_html,
                             write_html)
from cli.runner import (COLLECTOR, DEFAULT_BUDGET_PCT, Tracing, add_tracing_arguments, check_collector_options,
                        check_iops_cap, check_ready, check_workload_ok, resolve_dataset, run_collector, run_once,
                        tool_versions, tracing_options, write_summary)
from cli.cgroups import is_cgroup2_dir
from cli.devices import block_devices_of_mount, kdev, mount_of, mounts, sdev_arg
from cli.directories import ResultsDir, make_tmpdir
from cli.leftovers import recorded_run
from cli.signals import Interrupted, install_signal_handlers
from common.system import Cleanup, FstraceError, process_alive, progress, shown

DEFAULT_CACHE = "/var/cache/fstrace"


def default_outdir(label, workload):
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("fstrace-results", "%s-%s-%s" % (stamp, label, workload))


def parse_image_opts(args):
    """run's image options; one that means nothing for the filesystem is refused (bench's matrices leave each
    filesystem the options it has: see bench.plan_configs)."""
    given = [name for name, v in (("--compress", args.compress), ("--level", args.level),
                                  ("--cluster", args.cluster)) if v is not None]
    if args.fs not in ("erofs", "squashfs", "btrfs") and given:
        raise FstraceError("%s is not for --fs %s: it compresses nothing" % (" and ".join(given), args.fs))
    if args.cluster is not None and args.fs == "btrfs":
        raise FstraceError("--cluster is erofs's pcluster size or squashfs's block size: btrfs has none")
    if args.level is not None and args.fs != "erofs":
        raise FstraceError("--level is for --fs erofs%s" % (
            " (btrfs takes its level in --compress: zlib:N, zstd:N)" if args.fs == "btrfs" else ""))
    if args.fs == "erofs" and args.compress == "none" and (args.cluster is not None or args.level is not None):
        raise FstraceError("%s means nothing with --compress none: an uncompressed erofs image has no "
                           "clusters" % " and ".join(n for n in given if n != "--compress"))
    opts = {"compress": args.compress, "level": args.level}
    if getattr(args, "features", None):
        if args.fs != "erofs":
            raise FstraceError("--features is for --fs erofs (its mkfs.erofs -E features), not %s" % args.fs)
        opts["features"] = args.features
    if args.cluster is not None:
        opts["cluster" if args.fs == "erofs" else "block"] = args.cluster
    return opts


def tracing_of(args):
    """What run and attach trace: their --records, --io-stacks, --sample-hz and --offcpu-sample-us."""
    return Tracing(records=args.records, io_stacks=args.io_stacks, sample_hz=args.sample_hz,
                   offcpu_sample_us=args.offcpu_sample_us)


def cmd_run(args):
    from cli import storage
    from workloads import catalog, images

    try:
        wl = catalog.get(args.workload)
    except KeyError as e:
        raise FstraceError(e.args[0])
    if args.fs not in images.FILESYSTEMS:
        raise FstraceError("unknown filesystem %r (choose from %s)" % (args.fs, ", ".join(images.FILESYSTEMS)))
    throttle = storage.check(args.storage, args.iops_cap)
    check_ready("fstrace run")
    check_iops_cap(args.iops_cap)
    tracing = tracing_of(args)
    check_collector_options(tracing_options(tracing))
    opts = images.normalize(args.fs, parse_image_opts(args))
    label = images.label(args.fs, opts)
    outdir = ResultsDir(args.out or default_outdir(label, wl.name), numbered=not args.out)  # checked before any work
    tools = tool_versions(args.fs, wl)
    droot, manifest = resolve_dataset(args.dataset, args.cache, args.scale)
    summary = run_once(args.fs, opts, wl, droot, manifest, os.path.abspath(args.cache), outdir,
                       warm=args.warm, direct_io=not args.no_direct_io, tools=tools, iops=args.iops_cap,
                       tracing=tracing, baseline=None if args.no_baseline else "before",
                       storage=throttle)
    sys.stdout.write(render_summary(summary, full=False))
    warn_if_nothing_seen(summary)
    check_workload_ok(summary, "results (of a failing run) in %s" % outdir.outdir)
    progress("results in %s" % outdir.outdir)
    return 0


def resolve_filters(args):
    """attach and serve: (mounts chosen by --fs/--mount, their superblock devices, block devices to trace: those
    under the mounts and every --dev: {(major, minor): level}, the level None where the collector names it)."""
    if not 0 < args.budget <= 100:  # also nan; checked here, before anything is loaded
        raise FstraceError("--budget wants a percentage above 0 and at most 100, got %g" % args.budget)
    if args.window_duty is not None and not 0 < args.window_duty <= 1:
        raise FstraceError("--window-duty wants a share above 0 and at most 1, got %g" % args.window_duty)
    chosen = []
    if args.fs:
        chosen = [m for m in mounts() if m[1] == args.fs]
        if not chosen:
            raise FstraceError("no %s filesystem is mounted" % args.fs)
    for path in args.mount or []:
        if not os.path.exists(path):
            raise FstraceError("--mount %s: no such path" % path)
        m = mount_of(path)
        if m[0] != os.path.realpath(path):
            raise FstraceError("--mount %s is not a mount point (it is on %s)" % (path, m[0]))
        if m not in chosen:  # also of the --fs type: named once
            chosen.append(m)
    sdevs, devs = [], {}
    for m in chosen:
        if m[3] not in sdevs:
            sdevs.append(m[3])
        for d, level in block_devices_of_mount(m):
            devs.setdefault(d, level)  # a disk under one mount and behind another's loop device: the first's
    for d in args.dev or []:
        try:
            ma, mi = (int(x) for x in d.split(":"))
        except ValueError:
            raise FstraceError("--dev wants MAJ:MIN, got %r" % d)
        if not os.path.exists("/sys/dev/block/%d:%d" % (ma, mi)):
            raise FstraceError("--dev %s: no such block device" % d)
        devs.setdefault((ma, mi), None)  # under no traced filesystem: the collector names its level
    for pid in args.pid or []:
        if pid <= 0 or not process_alive(pid):
            raise FstraceError("--pid %d: no such process" % pid)
    if args.cgroup and not is_cgroup2_dir(args.cgroup):
        raise FstraceError("--cgroup %s: not a cgroup v2 directory" % args.cgroup)
    return chosen, sdevs, devs


def filter_argv(args, chosen, devs):
    """The collector options of attach's and serve's filters (chosen: the mounts, as resolve_filters gives them)."""
    argv = ["--budget", "%g" % args.budget]
    if args.window_duty is not None:
        argv += ["--window-duty", "%g" % args.window_duty]
    for (ma, mi), level in devs.items():
        argv += ["-d", "%d:%d:4096%s" % (ma, mi, ":" + level if level else "")]
    seen = set()
    for m in chosen:  # two subvolumes of one btrfs: one superblock, two stat() devices, both mapped
        arg = sdev_arg(m)
        if arg not in seen:
            seen.add(arg)
            argv += ["--sdev", arg]
    for pid in args.pid or []:
        argv += ["--pid", str(pid)]
    if args.comm:
        argv += ["--comm", args.comm]
    if args.cgroup:
        argv += ["--cgroup", args.cgroup]
    return argv


def cmd_attach(args):
    """Trace a live system: no images, no workloads of ours."""
    check_ready("fstrace attach")
    chosen, sdevs, devs = resolve_filters(args)
    # 0 is ours (no live view), not the collector's; every other bound of both is the collector's own check
    if not args.interval >= 0:
        raise FstraceError("--interval must be 0 (no live view) or more seconds, got %g" % args.interval)
    check_collector_options(attach_argv(args, chosen, devs))
    outdir = ResultsDir(args.out or default_outdir("attach", args.fs or "all"), numbered=not args.out)
    with outdir as partial:
        summary = _attach(args, partial, chosen, sdevs, devs)
    sys.stdout.write(render_summary(summary, full=False))
    warn_if_nothing_seen(summary)
    progress("results in %s" % outdir.outdir)
    return 0


def attach_argv(args, chosen, devs):
    """The collector options of attach: its filters, duration, live view and what it records."""
    argv = filter_argv(args, chosen, devs)
    if args.duration is not None:
        argv += ["--duration", str(args.duration)]
    if args.interval > 0:
        argv += ["--interval", str(args.interval)]
    return argv + tracing_options(tracing_of(args))


def _attach(args, partial, chosen, sdevs, devs):
    argv = [COLLECTOR, "-o", os.path.join(partial, "results.fst")] + attach_argv(args, chosen, devs)
    meta = {"mode": "attach", "label": "attach", "workload": "attach", "fs": args.fs,
            "mounts": [m[0] for m in chosen], "fs_kdevs": [kdev(*d) for d in sdevs] or None,
            # the traced filesystems' types: figures of others are not this run's to miss (probes.unavailable)
            "fs_types": sorted({m[1] for m in chosen}) or None,
            "devices_note": "alignment measured against 4 KiB (image cluster size unknown when attaching)",
            "filters": {"fs": args.fs, "mount": args.mount, "dev": args.dev, "pid": args.pid,
                        "comm": args.comm, "cgroup": args.cgroup}}
    # in a recorded temp dir, not a bare temp file: should this process be SIGKILLed, the next start removes it
    with Cleanup() as c:
        meta_path = os.path.join(make_tmpdir(c), "meta.json")
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        run_collector(argv + ["-m", meta_path], cwd="/", interrupt_ends=True, on_ready=lambda: progress(
            "attached: %s; Ctrl-C to stop" % (", ".join(m[0] for m in chosen) or "all filesystems")))
    return write_summary(partial)


def cmd_serve(args):
    """Always on: the collector keeps only in-kernel aggregates; they are served as Prometheus metrics."""
    from cli import serve
    check_ready("fstrace serve")
    listen = serve.parse_listen(args.listen)

    def resolve():
        chosen, sdevs, devs = resolve_filters(args)
        argv = filter_argv(args, chosen, devs)
        check_collector_options(argv + serve.COLLECTOR_OPTIONS)
        return chosen, [COLLECTOR] + argv
    settings = serve.Settings(listen=args.listen, update_interval=args.update_interval, textfile=args.textfile,
                              per_comm=args.per_comm, follows_pids=bool(args.pid))
    return serve.serve(listen, resolve, settings, progress)


def cmd_bench(args):
    from cli import bench, shards
    if args.merge:
        given = [o for o, v in (("--preset", args.preset), ("--fs", args.fs), ("--workload", args.workload),
                                ("--shard", args.shard), ("--storage", args.storage),
                                ("--iops-cap", args.iops_cap)) if v]
        if given:
            raise FstraceError("--merge takes the matrix from the parts it merges; drop %s" % ", ".join(given))
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        results = ResultsDir(args.out or os.path.join("fstrace-results", "%s-bench-merged" % stamp))
        with results as outdir:
            try:
                bench.merge(args.merge, outdir)
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                raise FstraceError("%s: not what bench writes there, or damaged (%s: %s)"
                                   % (" ".join(args.merge), type(e).__name__, str(e)[:100]))
        progress("merged bench in %s" % results.outdir)
        return 0
    shard = shards.parse(args.shard) if args.shard else None
    bench.check_counts(args.runs, args.iops_cap)
    configs = bench.plan_configs(preset=args.preset, fs=args.fs, compress=args.compress, cluster=args.cluster,
                                 features=args.features)
    workloads = bench.plan_workloads(preset=args.preset, workload=args.workload)
    media = bench.plan_storage(preset=args.preset, name=args.storage, iops_cap=args.iops_cap)
    results, droot, manifest, cache = bench.prepare("bench", args.out, args.dataset, args.cache, args.scale)
    with results as outdir:
        bench.run_bench(configs, workloads, media, droot, manifest, cache, outdir, args.runs, warm=args.warm,
                        iops_cap=args.iops_cap, baseline=not args.no_baseline, preset=args.preset, shard=shard)
    progress("bench results in %s" % results.outdir)
    return 0


def cmd_advise(args):
    from cli import advise, bench, storage
    from workloads import catalog
    mix = advise.parse_mix(args.mix)
    workloads = [catalog.get(n) for n, _ in mix]
    configs = advise.plan_configs(fs=args.fs, compress=args.compress, cluster=args.cluster)
    if args.budget_bytes is not None and args.budget_bytes <= 0:
        raise FstraceError("--budget-bytes must be positive, got %d" % args.budget_bytes)
    bench.check_counts(args.runs, args.iops_cap)
    throttle = storage.check(args.storage, args.iops_cap)
    results, droot, manifest, cache = bench.prepare("advise", args.out, args.dataset, args.cache, args.scale)
    with results as outdir:
        text = advise.run_advise(mix, workloads, configs, droot, manifest, cache, outdir, args.runs,
                                 budget_bytes=args.budget_bytes, iops_cap=args.iops_cap, throttle=throttle)
    sys.stdout.write(text)
    progress("advice in %s" % results.outdir)
    return 0


def requests_seen(s):
    """Requests of every kind the summary counts (reads, writes, open/getdents, stat)."""
    m = s["metadata"]
    return (s["reads"]["count"] + (s.get("writes") or {}).get("count", 0) + m["open_getdents"]["count"]
            + m["stat"]["count"])


def warn_if_nothing_seen(s):
    """A trace of no requests is not a fast filesystem: said after the report, where it is read."""
    if not requests_seen(s):
        progress("WARNING: no requests were traced: %s" % (
            "the filters matched nothing that did I/O" if s["run"].get("mode") == "attach"
            else "the workload read nothing from the image"))


def report_bench(bench_dir):
    """Re-render a bench directory's tables, re-summarizing every run from its own results file."""
    from analysis import report, results, tables
    bench = os.path.join(bench_dir, "bench.json")
    doc = load_doc(bench, results.BENCH_SCHEMA)
    rows = []
    for r in doc["rows"]:
        rundir = in_dir(bench_dir, r["dir"], bench)
        stored = load_doc(os.path.join(rundir, "summary.json"), results.SUMMARY_SCHEMA)
        fst = in_dir(rundir, "results.fst")
        s, _ = analyse(load_results(fst), stored.get("ground_truth"), fst, baseline=stored.get("baseline"))
        # a merged bench's cells keep the machine in their label (cli/shards.py), which no run's summary has
        rows.append(dict(tables.row_from_summary(s), run=r["run"], dir=r["dir"], label=r["label"]))
    doc["rows"] = rows
    sys.stdout.write(report.terminal_safe(tables.render_bench(doc)))
    return 0


def cmd_report(args):
    from analysis import results
    path = args.dir
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "bench.json")):
        if args.speedscope:
            from analysis import speedscope
            raise FstraceError("--speedscope exports one run's stacks; %s is a bench directory (each run directory "
                               "in it has %s)" % (path, speedscope.NAME))
        rc = report_bench(path)
        if args.html:
            write_html(args.html, sets_html("fstrace bench: %s" % path, [("", path)], None))
            progress("HTML report in %s" % args.html)
        return rc
    fst = in_dir(path, "results.fst") if os.path.isdir(path) else path
    res = load_results(fst)
    stored = {}
    spath = os.path.join(os.path.dirname(fst), "summary.json")
    if os.path.lexists(spath):
        stored = load_doc(spath, results.SUMMARY_SCHEMA)
    s, text = analyse(res, stored.get("ground_truth"), fst, args.full, baseline=stored.get("baseline"))
    sys.stdout.write(text)
    if args.html:
        write_html(args.html, run_html(s, res))
        progress("HTML report in %s" % args.html)
    if args.speedscope:
        from analysis import speedscope
        specs = flamegraph_specs(res)
        if not specs:
            raise FstraceError("--speedscope: %s holds no stacks (sampling and off-CPU stacks were off)" % fst)
        write_html(args.speedscope, speedscope.text(res, specs))
        progress("speedscope profile in %s" % args.speedscope)
    return 0


@functools.lru_cache(maxsize=None)
def summary_of(d):
    """run_summary(d), made once per directory: a results file alone is analysed once however often compare
    asks for its summary."""
    return run_summary(d)


def median_summary(d, rows):
    """The summary of the median run of rows (one configuration and workload) in the bench or run directory d."""
    from analysis import tables
    m = tables._median_row(rows)
    return summary_of(in_dir(d, m["dir"], os.path.join(d, "bench.json")) if m.get("dir") else d)


def config_pairs(a, rows_a, b, rows_b):
    """Two result sets with no (workload, configuration) in common: per workload both ran with one configuration
    each, the median runs' summaries [(A's, B's)]; none when a workload has several configurations on a side
    (which to pair with which would be a guess)."""
    from analysis import tables
    ga, gb = tables.group({"rows": rows_a}), tables.group({"rows": rows_b})
    out = []
    for wl in dict.fromkeys(k[0] for k in ga):
        la, lb = [k for k in ga if k[0] == wl], [k for k in gb if k[0] == wl]
        if len(la) == 1 and len(lb) == 1:
            out.append((median_summary(a, ga[la[0]]), median_summary(b, gb[lb[0]])))
        elif la and lb:
            raise FstraceError("workload %s has %d configurations in %s and %d in %s: compare one against one "
                               "(a run directory, or a bench with one configuration)" % (wl, len(la), a, len(lb), b))
    return out


def cmd_compare(args):
    from analysis import compare, report, results, sampling, tables
    docs = []
    for d in (args.a, args.b):
        bench, summ, fst = (os.path.join(d, n) for n in ("bench.json", "summary.json", "results.fst"))
        if os.path.exists(bench):
            load_doc(bench, results.BENCH_SCHEMA)
            docs.append(bench)
        elif os.path.exists(summ) or os.path.exists(fst):
            summary_of(d)
            docs.append(summ if os.path.exists(summ) else fst)
        else:
            raise FstraceError("%s holds none of bench.json, summary.json and results.fst" % d)
    try:
        rows_a, rows_b = tables.load_rows(args.a, summary_of), tables.load_rows(args.b, summary_of)
        same = tables.compare(rows_a, rows_b)
        pairs = [] if same else config_pairs(args.a, rows_a, args.b, rows_b)
        if same or not pairs:
            text = tables.render_compare(same)
        else:
            text = "\n".join(compare.render(compare.pair(sa, sb), sa, sb) for sa, sb in pairs)
    except (ArithmeticError, KeyError, TypeError, ValueError, results.ResultsError) as e:
        raise error(" or ".join(docs), "not what fstrace writes there, or damaged (%s: %s)"
                     % (type(e).__name__, str(e)[:100]))
    sys.stdout.write(report.terminal_safe(text))
    if args.html:
        write_html(args.html, sets_html("fstrace compare: %s vs %s" % (args.a, args.b),
                                        [("A", args.a), ("B", args.b)], text))
        progress("HTML report in %s" % args.html)
    if args.flamegraph:
        from analysis import flamegraph
        folded = []
        for d in (args.a, args.b):
            if not os.path.exists(os.path.join(d, "results.fst")):
                raise FstraceError("--flamegraph compares two run directories; %s has no results.fst" % d)
            fst = in_dir(d, "results.fst")
            res = load_results(fst)
            note_unverified(res, fst)
            folded.append(sampling.folded(res.header, kworkers=True))
        write_html(args.flamegraph, flamegraph.standalone(
            flamegraph.differential(folded[0], folded[1], "%s vs %s" % (args.b, args.a))))
        progress("differential flamegraph in %s" % args.flamegraph)
    return 0


def add_filter_arguments(p):
    """attach's and serve's filters (resolve_filters, filter_argv)."""
    p.add_argument("--fs", help="only files on (and devices under) mounted filesystems of this type")
    p.add_argument("--mount", action="append", help="only files on (and devices under) this mount; repeatable")
    p.add_argument("--dev", action="append", help="also trace this block device, MAJ:MIN; repeatable")
    p.add_argument("--pid", action="append", type=int, help="only this process and its children; repeatable")
    p.add_argument("--comm", help="only tasks with this name")
    p.add_argument("--cgroup", help="only tasks in this cgroup v2 directory")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_PCT, metavar="PCT",
                   help="where requests are bounded by the syscall tracepoints (no fentry or kprobes), which tax "
                        "every syscall of the system while attached: attach them only in random windows costing "
                        "PCT %% of busy CPU time on average, and weight what they saw (default %(default)g; "
                        "100: always attached)")
    # a fixed share of time in windows instead of the budget's (tests and benchmarks that need a known one)
    p.add_argument("--window-duty", type=float, help=argparse.SUPPRESS)


# the EXAMPLES section of `fstrace --help` and of each command's --help (man/fstrace.8 has the same and more)
EXAMPLES = {
    None: """examples:
  sudo fstrace run --fs erofs --workload randread       build an image, trace fio random reads, report
  sudo fstrace attach --fs squashfs --duration 60       trace the squashfs mounts of a live system
  sudo fstrace serve --fs erofs                         Prometheus metrics on 127.0.0.1:9464/metrics
  sudo fstrace bench --preset seed000                   seed 000's matrix, with causes
  sudo fstrace advise --dataset rootfs.tar --mix boot   which image for this tree
  fstrace compare DIR_A DIR_B                           what changed between two result sets
  fstrace report DIR --full                             a results directory again, on any machine

In a source tree the command is ./fstrace. See man fstrace (man -l man/fstrace.8) and docs/.""",
    "run": """examples:
  sudo fstrace run --fs erofs --workload randread
  sudo fstrace run --fs erofs --compress zstd --cluster 16384 --features fragments --workload tar-data
  sudo fstrace run --fs squashfs --compress xz --cluster 131072 --workload cat-all-p4 --iops-cap 3000
  sudo fstrace run --fs btrfs --compress zstd:3 --workload write-small
  sudo fstrace run --fs erofs --workload cat-500 --dataset rootfs.tar --warm -o results/cat-warm""",
    "attach": """examples:
  sudo fstrace attach --fs erofs --duration 60
  sudo fstrace attach --mount /usr --pid 1234 --interval 5
  sudo fstrace attach --cgroup /sys/fs/cgroup/system.slice/app.service -o results/app""",
    "serve": """examples:
  sudo fstrace serve --fs squashfs
  sudo fstrace serve --mount /opt/app --listen 0.0.0.0:9464 --per-comm
  sudo fstrace serve --fs erofs --textfile /var/lib/node_exporter/textfile/fstrace.prom
  curl -s 127.0.0.1:9464/metrics | grep fstrace_request_time_seconds_total""",
    "bench": """examples:
  sudo fstrace bench --preset seed000 --runs 3
  sudo fstrace bench --fs erofs,squashfs --compress none,lz4hc --cluster 4096,131072 --workload tar-data,randread
  sudo fstrace bench --fs erofs --compress lz4hc,lzma,deflate,zstd --features fragments --workload randread
  sudo fstrace bench --fs btrfs,ext4,xfs --compress none,zstd:1 --workload write-small --iops-cap 3000
  sudo fstrace bench --preset seed004 --shard 0/4 -o shards/0     (and 1/4, 2/4, 3/4, on any machines)
  fstrace bench --merge shards/* -o merged""",
    "advise": """examples:
  sudo fstrace advise --mix boot
  sudo fstrace advise --dataset rootfs.tar --mix app --iops-cap 3000 --runs 5
  sudo fstrace advise --dataset /srv/tree --mix tar-data=1,cat-500=5 --budget-bytes 100000000
  sudo fstrace advise --dataset /srv/tree --fs erofs,squashfs --compress lz4hc,zstd --cluster 16384,131072""",
    "compare": """examples:
  fstrace compare fstrace-results/BENCH_A fstrace-results/BENCH_B
  fstrace compare RUN_A RUN_B --flamegraph diff.svg --html compare.html""",
    "report": """examples:
  fstrace report fstrace-results/RUN_DIR
  fstrace report fstrace-results/RUN_DIR --full --html report.html
  fstrace report run.fst                    a results file from fstrace-collect""",
}


def add_examples(parser, commands):
    """The EXAMPLES epilog of the parser and of each of its commands (an add_subparsers() result), kept as
    written: line breaks and alignment."""
    for name, p in [(None, parser)] + list(commands.choices.items()):
        p.epilog, p.formatter_class = EXAMPLES[name], argparse.RawDescriptionHelpFormatter


def build_parser():
    from cli import bench, storage
    from workloads import catalog, images
    p = argparse.ArgumentParser(prog="fstrace", description="Explain why reads on erofs, squashfs and btrfs "
                                "are as fast or slow as they are.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="build an image, run a standard workload on it under tracing, report")
    r.add_argument("--fs", required=True, help="one of: " + ", ".join(images.FILESYSTEMS))
    r.add_argument("--workload", required=True, help="one of: " + ", ".join(sorted(catalog.WORKLOADS)))
    r.add_argument("--compress", help="compressor (erofs: lz4, lz4hc, lzma, deflate, libdeflate, zstd, none; "
                   "squashfs: gzip, lzo, lz4, lz4hc, xz, zstd, none; btrfs: none, lzo, zlib[:N], zstd[:N])")
    r.add_argument("--level", type=int, help="compression level (erofs lz4hc 0-12, default 12; lzma 0-9 or 100-109; "
                   "deflate 0-9; zstd 0-22; others: the tool's default)")
    r.add_argument("--features", help="erofs only, comma-separated mkfs.erofs -E features: "
                   + ", ".join(images.EROFS_FEATURES))
    r.add_argument("--cluster", type=int, help="erofs pcluster size / squashfs block size, bytes")
    r.add_argument("--dataset", help="directory or tarball to use instead of the built-in dataset")
    r.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)  # small datasets for tests
    r.add_argument("--warm", action="store_true", help="trace a warm-cache run (default: caches dropped)")
    r.add_argument("--no-baseline", action="store_true",
                   help="skip the untraced run of the same workload that the traced one is compared with")
    r.add_argument("--no-direct-io", action="store_true", help="buffered loop device (backing file cached too)")
    r.add_argument("--iops-cap", type=int, help="cap the image device at this many IOPS (block throttling), "
                   "e.g. 3000 for seed 000's cloud disk")
    storage.add_argument(r)
    r.add_argument("-o", "--out", help="results directory (default: fstrace-results/<time>-<config>-<workload>)")
    add_tracing_arguments(r)
    r.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", DEFAULT_CACHE),
                   help="where datasets and images are kept (default %(default)s)")
    r.set_defaults(func=cmd_run)
    a = sub.add_parser("attach", help="trace a live system until Ctrl-C or --duration")
    add_filter_arguments(a)
    a.add_argument("--duration", type=float, help="seconds to trace (default: until Ctrl-C)")
    a.add_argument("--interval", type=float, default=1.0, help="live view refresh, seconds (0: off)")
    a.add_argument("-o", "--out", help="results directory (default: fstrace-results/<time>-attach-<fs>)")
    add_tracing_arguments(a)
    a.set_defaults(func=cmd_attach)
    from cli import serve
    sv = sub.add_parser("serve", help="always on: the in-kernel aggregates as Prometheus metrics on /metrics")
    add_filter_arguments(sv)
    serve.add_arguments(sv)
    sv.set_defaults(func=cmd_serve)
    b = sub.add_parser("bench", help="the seed tables: fs x compressor x cluster x workload x runs, with causes")
    b.add_argument("--preset", help="a whole matrix: " + ", ".join(sorted(bench.PRESETS)))
    b.add_argument("--fs", help="comma-separated filesystems")
    b.add_argument("--compress", help="comma-separated compressors (see run --compress)")
    b.add_argument("--cluster", help="comma-separated cluster/block sizes, bytes")
    b.add_argument("--features", help="erofs -E features for its compressed images (see run --features)")
    b.add_argument("--workload", help="comma-separated workloads (default with --preset: the preset's)")
    b.add_argument("--runs", type=int, default=3, help="runs of each (default %(default)s)")
    b.add_argument("--warm", action="store_true", help="warm-cache runs")
    b.add_argument("--no-baseline", action="store_true",
                   help="skip each run's untraced twin (its order alternates: before the traced run, then after)")
    b.add_argument("--iops-cap", type=int, help="cap the image device at this many IOPS")
    storage.add_argument(b)
    b.add_argument("--dataset", help="directory or tarball instead of the built-in dataset")
    b.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)
    b.add_argument("--shard", metavar="I/N", help="run only part I of N of the matrix (I from 0, as Slurm's and "
                   "Kubernetes' array indexes): the same split on every machine; bench --merge joins the parts")
    b.add_argument("--merge", nargs="+", metavar="DIR", help="merge these bench directories (shards, or whole "
                   "benches from several machines) into one, -o; no root needed")
    b.add_argument("-o", "--out", help="bench directory (default: fstrace-results/<time>-bench)")
    b.add_argument("--cache", default=os.environ.get("FSTRACE_CACHE", DEFAULT_CACHE))
    b.set_defaults(func=cmd_bench)
    from cli import advise
    ad = sub.add_parser("advise", help="which fs, compressor and cluster size for a tree and a read mix: "
                        "ranking, Pareto front, causes")
    advise.add_arguments(ad, os.environ.get("FSTRACE_CACHE", DEFAULT_CACHE))
    ad.set_defaults(func=cmd_advise)
    c = sub.add_parser("compare", help="what changed between two result sets (bench or run directories), or between "
                       "two configurations of one workload: verdicts side by side, parts, read amplification")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--flamegraph", help="also write a differential on-CPU flamegraph SVG (two run directories)")
    c.add_argument("--html", help="also write a self-contained HTML report of the comparison to this file")
    c.set_defaults(func=cmd_compare)
    rep = sub.add_parser("report", help="print the report of a run or bench directory (no root, no BPF)")
    rep.add_argument("dir")
    rep.add_argument("--html", help="also write the run's self-contained HTML report to this file")
    rep.add_argument("--speedscope", metavar="FILE", help="also write the run's wall-clock, on-CPU and off-CPU "
                     "stacks (on-CPU also per thread) in speedscope's file format to FILE")
    rep.add_argument("--full", action="store_true", help="the detail under headings after the verdict "
                     "(histograms, per device, decompression, caches, tiers)")
    rep.set_defaults(func=cmd_report)
    add_examples(p, sub)
    return p


def main(argv=None):
    install_signal_handlers()
    command = "fstrace"
    try:
        args = build_parser().parse_args(argv)
        command = "fstrace " + args.command
        if args.command in ("run", "attach", "serve", "bench", "advise") and os.geteuid() == 0:
            with recorded_run():
                return args.func(args)
        return args.func(args)
    except FstraceError as e:  # a path or name from the command line may hold a newline: one line still
        print("fstrace: error: %s" % shown(e), file=sys.stderr)
        return 1
    except OSError as e:  # a vanished directory: one line, everything already undone.  Files fstrace writes
        # are named by writing(); an error without a file name (ENOSPC) still says what it came from
        print("fstrace: error: %s" % shown("%s: %s" % (e.filename or "in " + command, e.strerror or e)),
              file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt):
        print("fstrace: interrupted; cleaned up, no results written", file=sys.stderr)
        return 130
