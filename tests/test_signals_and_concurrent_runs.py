"""Ctrl-C in the middle of a run, signals to the fstrace process alone, to its collector, SIGKILL of fstrace itself,
and concurrent runs: the machine is checked afterwards for everything this run made (mounts, loop devices, cgroups
v1 and v2, the collector and its BPF programs, kernel.task_delayacct, temp and .partial directories, state files,
results that would read as complete)."""
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from cli.leftovers import task_comm as comm
from conftest import CACHE, COLLECTOR, FSTRACE, bpf_objects_left, bpf_objects_of, collector_under, descendants, \
    leftovers, settled_leftovers, alive

pytestmark = pytest.mark.bpf

DELAYACCT = "/proc/sys/kernel/task_delayacct"
STATE = "/run/fstrace"


def delayacct():
    with open(DELAYACCT) as f:
        return int(f.read())


def set_delayacct(v):
    with open(DELAYACCT, "w") as f:
        f.write("%d\n" % v)


def prog_ids_of(pid):
    """BPF programs whose fds pid holds (its /proc/PID/fdinfo prog_id lines)."""
    ids = set()
    for fd in glob.glob("/proc/%d/fdinfo/*" % pid):
        try:
            with open(fd) as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def loaded_prog_ids():
    out = subprocess.run(["bpftool", "prog", "show"], stdout=subprocess.PIPE, text=True).stdout
    return {int(l.split(":")[0]) for l in out.splitlines() if l and l[0].isdigit()}


def machine_state(fstrace_pid):
    """What a run with this pid can have made, by name and owner (not by guessing across the system)."""
    mounts = [l.split()[1] for l in open("/proc/mounts") if "fstrace-run-" in l.split()[1]]
    loops = subprocess.run(["losetup", "-a"], stdout=subprocess.PIPE, text=True).stdout
    return {
        "mounts": mounts,
        "loops": [l for l in loops.splitlines() if CACHE in l],
        "cgroups": [d for d in glob.glob("/sys/fs/cgroup/*/fstrace-*%d" % fstrace_pid) +
                    glob.glob("/sys/fs/cgroup/fstrace-*%d" % fstrace_pid)],
        "state": os.path.exists(os.path.join(STATE, "run-%d.json" % fstrace_pid)),
    }


def start_run(out, *extra, scale="0.25", workload="tar-data", env=None):
    # output to files, not pipes: a workload left behind (the failure looked for) would hold pipes open
    err = tempfile.TemporaryFile("w+")
    p = subprocess.Popen([FSTRACE, "run", "--fs", "erofs", "--workload", workload, "--scale", scale,
                          "--cache", CACHE, "-o", str(out)] + list(extra),
                         stdout=subprocess.DEVNULL, stderr=err, text=True,
                         env=dict(os.environ, **env) if env else None)
    p.errfile = err
    return p


def finish(p, timeout=120):
    """Wait for p; its stderr."""
    p.wait(timeout=timeout)
    p.errfile.seek(0)
    return p.errfile.read()


def wait_tracing(p, want=("tar",)):
    """The collector of fstrace process p once its BPF programs are attached and the workload runs; with
    the workload's processes (by comm) that are then alive."""
    deadline = time.time() + 600
    while time.time() < deadline:
        assert p.poll() is None, "run ended before it could be signalled:\n" + finish(p)
        kids = descendants(p.pid)
        coll = [k for k in kids if comm(k) == "fstrace-collect"]
        work = [k for k in kids if comm(k) in want]
        if coll and work and prog_ids_of(coll[0]):
            return coll[0], work
        time.sleep(0.01)
    raise AssertionError("tracing never started")


def assert_clean(pid, coll, progs, work, out, da_before):
    for w in work + [coll]:
        assert not alive(w), "process %d (%s) survived the run" % (w, comm(w))
    deadline = time.time() + 5  # programs are freed an RCU grace period after their last fd closes
    while progs & loaded_prog_ids() and time.time() < deadline:
        time.sleep(0.05)
    assert not progs & loaded_prog_ids(), "BPF programs of the collector still loaded"
    st = machine_state(pid)
    assert st == {"mounts": [], "loops": [], "cgroups": [], "state": False}, st
    assert not os.path.exists(str(out)) and not os.path.exists(str(out) + ".partial")
    assert not [d for d in glob.glob("/tmp/fstrace-run-*") if os.stat(d).st_uid == 0 and
                not _owner_live(d)], "temp directories left"
    assert delayacct() == da_before


def _owner_live(d):
    """A temp dir of another live run (the machine is shared): its mount or state names it."""
    for f in glob.glob(os.path.join(STATE, "run-*.json")):
        if d in open(f).read():
            return True
    return False


@pytest.fixture
def delayacct_off():
    was = delayacct()
    set_delayacct(0)
    yield 0
    set_delayacct(was)


@pytest.mark.parametrize("sig,no_cgroup2", [(signal.SIGTERM, False), (signal.SIGINT, False),
                                            (signal.SIGHUP, False), (signal.SIGTERM, True)])
def test_signal_to_fstrace_alone_ends_the_whole_workload(tmp_path, sig, no_cgroup2, delayacct_off):
    """kill PID (systemd, CI runners), or the terminal closing (SIGHUP): only fstrace gets it, not its
    process group.  no_cgroup2: as on a host without cgroup v2 (FSTRACE_TEST_NO_CGROUP2), where the
    workload's process group is all there is to end it by, and a stopped tar ignores its SIGTERM."""
    out = tmp_path / "out"
    p = start_run(out, env={"FSTRACE_TEST_NO_CGROUP2": "1"} if no_cgroup2 else None)
    coll, tar = wait_tracing(p)
    progs = prog_ids_of(coll)
    work = descendants(coll)  # the workload tree: sh, tar, cat
    assert delayacct() == 1
    if no_cgroup2:
        assert not glob.glob("/sys/fs/cgroup/**/fstrace-run-%d" % p.pid, recursive=True)
    # tar stopped: it would never finish by itself, and holds the mount busy until it is killed (a workload
    # that ignores or is slow to act on signals)
    os.kill(tar[0], signal.SIGSTOP)
    try:
        os.kill(p.pid, sig)
        err = finish(p)
        assert p.returncode == 130, err
        assert "Traceback" not in err and "cleanup incomplete" not in err, err
        assert "interrupted; cleaned up, no results written" in err
        assert_clean(p.pid, coll, progs, work, out, 0)
    finally:
        kill_all(work)


def kill_all(pids):
    """After a failure: leave no stopped workload holding a mount on the shared machine."""
    for w in pids:
        if alive(w):
            os.kill(w, signal.SIGKILL)


def test_collector_killed_ends_workload_and_says_so(tmp_path, delayacct_off):
    out = tmp_path / "out"
    p = start_run(out)
    coll, tar = wait_tracing(p)
    progs = prog_ids_of(coll)
    work = descendants(coll)
    os.kill(tar[0], signal.SIGSTOP)  # still busy on the mount when the collector dies
    try:
        os.kill(coll, signal.SIGKILL)
        err = finish(p)
        assert p.returncode == 1, err
        lines = [l for l in err.splitlines() if "error" in l]
        assert lines == ["fstrace: error: collector killed by SIGKILL; no results"], err
        assert "see its message above" not in err
        assert_clean(p.pid, coll, progs, work, out, 0)
    finally:
        kill_all(work)


def parent_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_workload_killed_by_a_signal_is_one_line(tmp_path, delayacct_off):
    """fio SIGKILLed mid-run never writes its JSON (the run's ground truth): the run fails with one line saying
    how its workload ended, and its results, kept as a failing run's, say it too and claim no ground truth."""
    out = tmp_path / "out"
    p = start_run(out, workload="randread")
    coll, fios = wait_tracing(p, want=("fio",))
    progs = prog_ids_of(coll)
    work = descendants(coll)
    (fio,) = [f for f in fios if parent_of(f) == coll]  # the workload itself: its job is fio's child
    try:
        os.kill(fio, signal.SIGKILL)
        err = finish(p)
        assert p.returncode == 1, err
        assert "Traceback" not in err, err
        errors = [l for l in err.splitlines() if "error" in l]
        assert errors == ["fstrace: error: workload killed by signal 9 (SIGKILL); results (of a failing run) "
                          "in %s" % out], err
        s = json.loads((out / "summary.json").read_text())
        assert s["run"]["workload_signal"] == 9 and s["run"]["workload_exit_status"] == -1
        assert s["ground_truth"] == {}
        shutil.rmtree(out)  # what assert_clean looks for: nothing else left
        assert_clean(p.pid, coll, progs, work, out, 0)
    finally:
        kill_all(work)


def test_sigkill_of_fstrace_leftovers_removed_by_next_start(tmp_path, delayacct_off):
    """SIGKILL cannot be handled: the next start finds the dead run's state file, names what it removes
    (one line each) and leaves the machine clean.  The collector is stopped first so that it is still there
    (orphaned, BPF attached) when fstrace dies; --iops-cap adds the cgroup v1 blkio (or v2 io) cgroup."""
    out = tmp_path / "out"
    p = start_run(out, "--iops-cap", "100000")
    coll, work = wait_tracing(p)
    progs = prog_ids_of(coll)
    work = descendants(coll)
    state = os.path.join(STATE, "run-%d.json" % p.pid)
    assert os.path.exists(state)
    os.kill(coll, signal.SIGSTOP)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    before = machine_state(p.pid)
    assert before["mounts"] and before["loops"] and before["cgroups"] and before["state"], before
    assert alive(coll) and os.path.isdir(str(out) + ".partial")
    q = subprocess.run([FSTRACE, "attach", "--duration", "-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    lines = [l for l in q.stderr.splitlines() if "leftover of dead run %d" % p.pid in l]
    said = "\n".join(lines)
    assert "killed orphaned collector pid %d" % coll in said, q.stderr
    assert "unmounted " + before["mounts"][0] in said, q.stderr
    assert "detached loop device" in said and "removed %s.partial" % out in said, q.stderr
    for cg in before["cgroups"]:
        assert "removed cgroup " + cg in said, q.stderr
    assert any(l.endswith("kernel.task_delayacct restored to 0") for l in q.stderr.splitlines()), q.stderr
    assert q.stderr.splitlines()[-1] == ("fstrace: error: --duration wants a number of seconds above 0 (at most "
                                         "1e+08), got '-1.0'")
    assert_clean(p.pid, coll, progs, work, out, 0)


def test_live_run_is_never_swept(tmp_path):
    out = tmp_path / "out"
    p = start_run(out, scale="0.25", workload="randread")
    coll, _ = wait_tracing(p, want=("fio",))
    q = subprocess.run([FSTRACE, "attach", "--duration", "-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    assert "leftover" not in q.stderr, q.stderr
    assert alive(coll) and machine_state(p.pid)["mounts"]
    p.send_signal(signal.SIGINT)
    finish(p)


def test_a_start_in_a_pid_namespace_of_its_own_is_refused_and_sweeps_nothing(tmp_path):
    """fstrace and its collector started in a pid namespace of their own (a container's, here unshare's) see no
    host process: a live run would look dead to the leftover sweep, which would tear down its mounts and loop
    devices, and the BPF side's thread ids would match no filter.  Both refuse in one line before doing anything,
    and the live run (its fio stopped meanwhile, so that it is still running) goes on untouched."""
    out = tmp_path / "out"
    p = start_run(out, scale="0.25", workload="randread")
    coll, fio = wait_tracing(p, want=("fio",))
    for pid in fio:
        os.kill(pid, signal.SIGSTOP)
    try:
        before, held = machine_state(p.pid), delayacct()
        own_ns = ["unshare", "--pid", "--fork", "--mount-proc"]
        q = subprocess.run(own_ns + [FSTRACE, "attach", "--duration", "5"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=120)
        said = ("fstrace: error: this process is in a pid namespace of its own (a container's): fstrace names "
                "processes by the host's ids; run it in the host's pid namespace (docker run --pid=host, Kubernetes "
                "hostPID: true)")
        assert q.returncode == 1 and q.stderr.splitlines() == [said], q.stderr
        f = tmp_path / "c.fst"
        c = subprocess.run(own_ns + [COLLECTOR, "-o", str(f), "--pid", "1", "--", "true"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        assert c.returncode == 2 and len(c.stderr.splitlines()) == 1 and "pid namespace of its own" in c.stderr, \
            c.stderr
        assert not os.path.exists(f) and not glob.glob(str(f) + "*")
        assert alive(coll) and machine_state(p.pid) == before and delayacct() == held == 1
    finally:
        for pid in fio:
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
    p.send_signal(signal.SIGINT)
    finish(p)


def collector(tmp_path, name, *args):
    """A collector tracing nothing in particular (no task has this name) for a while."""
    return subprocess.Popen([COLLECTOR, "-o", str(tmp_path / (name + ".fst")), "--comm", "nothing-x"] + list(args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def delayacct_holders():
    """The collectors in the kernel.task_delayacct holder list (collect.c delayacct_ref)."""
    try:
        with open(os.path.join(STATE, "delayacct")) as f:
            return [int(w) for w in f.read().split()[1:]]
    except FileNotFoundError:
        return []


def wait_holding(p):
    deadline = time.time() + 60
    while p.pid not in delayacct_holders():
        assert p.poll() is None and time.time() < deadline, "collector %d never held task_delayacct" % p.pid
        time.sleep(0.02)


def test_delayacct_shared_by_crossing_collectors(tmp_path, delayacct_off):
    """Two collectors cross: A starts, B starts, A ends while B still runs (delay accounting must stay on for
    B), then B ends, the last one out, and restores the value A found."""
    a = collector(tmp_path, "a", "--duration", "3")
    wait_holding(a)
    assert delayacct() == 1
    b = collector(tmp_path, "b", "--duration", "10")
    wait_holding(b)
    a.communicate(timeout=60)
    assert a.returncode == 0
    assert b.poll() is None, "B ended before A: the runs did not cross"
    assert delayacct() == 1 and delayacct_holders() == [b.pid]
    b.communicate(timeout=60)
    assert b.returncode == 0
    assert delayacct() == 0 and delayacct_holders() == []


def test_delayacct_given_back_by_a_collector_that_fails_after_taking_it(tmp_path, delayacct_off):
    """A collector that fails after switching delay accounting on: --exposition in a missing directory
    fails at the first exposition, written after delayacct_ref() and the loading of the programs (collect.c),
    through die() and its atexit release.  Alone, the value goes back; beside another holder, it stays on."""
    bad_args = ["--exposition", str(tmp_path / "no" / "such" / "dir" / "m.prom"), "--duration", "5"]
    bad = collector(tmp_path, "bad", *bad_args)
    err = bad.communicate(timeout=60)[1]
    assert bad.returncode == 2 and "writing --exposition" in err, err
    assert delayacct() == 0 and delayacct_holders() == []
    a = collector(tmp_path, "a", "--duration", "10")
    wait_holding(a)
    bad = collector(tmp_path, "bad2", *bad_args)
    err = bad.communicate(timeout=60)[1]
    assert bad.returncode == 2 and "writing --exposition" in err, err
    assert a.poll() is None, "the holder ended before the failing collector did"
    assert delayacct() == 1 and delayacct_holders() == [a.pid]
    a.communicate(timeout=60)
    assert delayacct() == 0


def test_second_sigint_waits_for_the_collector_before_unmounting(tmp_path, delayacct_off):
    """Ctrl-C twice: the second arrives while fstrace waits for the collector to finish (here stopped, so it
    cannot).  fstrace keeps waiting rather than unmounting under it (the collector's cwd is the mount): it
    would have given up on the busy mount after its unmount retries (10 s), so the collector is let go on
    only after that."""
    out = tmp_path / "out"
    p = start_run(out)
    coll, _ = wait_tracing(p)
    progs = prog_ids_of(coll)
    work = descendants(coll)
    os.kill(coll, signal.SIGSTOP)
    try:
        os.kill(p.pid, signal.SIGINT)
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGINT)
        time.sleep(11)
        assert p.poll() is None, finish(p)
        assert machine_state(p.pid)["mounts"], "unmounted while the collector was still there"
    finally:
        os.kill(coll, signal.SIGCONT)
    err = finish(p)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "cleanup incomplete" not in err and "busy" not in err, err
    try:
        assert_clean(p.pid, coll, progs, work, out, 0)
    finally:
        kill_all(work)


def test_sigkill_of_attach_leaves_no_temp_file(tmp_path):
    """attach's run configuration is written in a recorded temp directory, not a bare /tmp/tmp*.json: SIGKILL
    of fstrace leaves it, and the next start names and removes it."""
    out = tmp_path / "out"
    bare = set(glob.glob("/tmp/tmp*.json"))
    p = subprocess.Popen([FSTRACE, "attach", "--comm", "nothing-x", "--interval", "0", "-o", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        while "fstrace: attached" not in seen:
            line = p.stderr.readline()
            assert line, "attach ended before attaching:\n" + seen
            seen += line
        with open(os.path.join(STATE, "run-%d.json" % p.pid)) as f:
            items = json.load(f)["items"]
        tmps = [i["path"] for i in items if i["kind"] == "dir" and "/fstrace-run-" in i["path"]]
        assert len(tmps) == 1 and os.path.isfile(os.path.join(tmps[0], "meta.json")), items
        assert set(glob.glob("/tmp/tmp*.json")) <= bare
        coll = next(k for k in descendants(p.pid) if comm(k) == "fstrace-collect")
    finally:  # the SIGKILL is the test; on a failure before it, the attach must not trace on
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
    deadline = time.time() + 30  # told by its parent's death (SIGTERM), it finishes its file and exits
    while alive(coll) and time.time() < deadline:
        time.sleep(0.05)
    assert os.path.isdir(tmps[0])
    q = subprocess.run([FSTRACE, "attach", "--duration", "-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    assert "fstrace: leftover of dead run %d: removed %s" % (p.pid, tmps[0]) in q.stderr, q.stderr
    assert not os.path.exists(tmps[0]) and not os.path.exists(str(out) + ".partial")
    assert set(glob.glob("/tmp/tmp*.json")) <= bare


def test_same_output_twice_second_fails_first_untouched(tmp_path):
    out = tmp_path / "out"
    p = start_run(out, scale="0.25", workload="randread")
    wait_tracing(p, want=("fio",))
    q = subprocess.run([FSTRACE, "run", "--fs", "erofs", "--workload", "randread", "--scale", "0.25",
                        "--cache", CACHE, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    assert q.returncode == 1
    assert q.stderr.strip().splitlines()[-1] == (
        "fstrace: error: output directory %s is being written by another fstrace run" % out), q.stderr
    assert "running" not in q.stderr  # refused before any work
    assert os.path.isdir(str(out) + ".partial")
    err = finish(p, timeout=600)
    assert p.returncode == 0, err
    assert (out / "summary.json").exists()


def test_same_new_image_two_runs_one_builds(tmp_path):
    """A fresh cache and one dataset: both runs want the same image; one builds it, the other waits."""
    data = tmp_path / "data"
    for i in range(30):
        (data / ("d%d" % (i % 3))).mkdir(parents=True, exist_ok=True)
        (data / ("d%d" % (i % 3)) / ("f%d" % i)).write_bytes(os.urandom(1000) * (i + 1))
    cache = tmp_path / "cache"
    ps = [subprocess.Popen([FSTRACE, "run", "--fs", "squashfs", "--workload", "tar-data", "--dataset", str(data),
                            "--cache", str(cache), "-o", str(tmp_path / ("out%d" % i))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    errs = [p.communicate(timeout=600)[1] for p in ps]
    assert [p.returncode for p in ps] == [0, 0], errs
    assert sum("image: building" in e for e in errs) == 1, errs
    assert not glob.glob(str(cache / "images" / "*.partial"))
    assert (tmp_path / "out0" / "summary.json").exists() and (tmp_path / "out1" / "summary.json").exists()


def test_mount_kept_busy_is_left_recorded_for_the_next_start(tmp_path, delayacct_off):
    """Something outside the run (here a process whose cwd is on the mount) keeps the image busy past
    unmount's retries: cleanup is incomplete, says so, and leaves the mount and the temp directory it is in
    recorded (the directory is not forgotten as removed while still there); the next start undoes both."""
    out = tmp_path / "out"
    p = start_run(out)
    coll, _ = wait_tracing(p)
    mnt = machine_state(p.pid)["mounts"][0]
    holder = subprocess.Popen(["sleep", "600"], cwd=mnt)
    try:
        p.send_signal(signal.SIGINT)
        err = finish(p)
        assert p.returncode == 1 and "cleanup incomplete: unmount %s" % mnt in err, err
        tmp = os.path.dirname(mnt)
        with open(os.path.join(STATE, "run-%d.json" % p.pid)) as f:
            left = {(i["kind"], i.get("path")) for i in json.load(f)["items"]}
        assert ("mount", mnt) in left and ("dir", tmp) in left, left
    finally:
        holder.kill()
        holder.wait()
    q = subprocess.run([FSTRACE, "attach", "--duration", "-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    said = "\n".join(l for l in q.stderr.splitlines() if "leftover of dead run %d" % p.pid in l)
    assert "unmounted " + mnt in said and "removed " + tmp in said, q.stderr
    assert not os.path.exists(tmp)
    assert machine_state(p.pid) == {"mounts": [], "loops": [], "cgroups": [], "state": False}


def workload_started(collector):
    """Whether the collector's child has exec'd the workload (before that it runs the collector's binary)."""
    try:
        with open("/proc/%d/task/%d/children" % (collector, collector)) as f:
            children = [int(c) for c in f.read().split()]
        return any(os.readlink("/proc/%d/exe" % c) != os.readlink("/proc/%d/exe" % collector) for c in children)
    except OSError:  # one of them exited meanwhile
        return False


def test_sigint_mid_run_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    before = settled_leftovers()
    # scale 0.25: a 32 MiB file, thousands of cold 4 KiB reads: seconds of work to interrupt
    p = subprocess.Popen([FSTRACE, "run", "--fs", "erofs", "--workload", "randread", "--scale", "0.25",
                          "--cache", CACHE, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    # wait until tracing runs: the collector starts the workload (its child, stopped until then) once every
    # program is attached; then what it holds is all it loaded, and the image is mounted
    collector = collector_under(p.pid)
    assert collector, "run ended before it could be interrupted:\n" + p.stderr.read()
    deadline = time.time() + 600
    while time.time() < deadline:
        if workload_started(collector) and leftovers()[1]:
            objs = bpf_objects_of(collector)
            break
        assert p.poll() is None, "run ended before it could be interrupted:\n" + p.stderr.read()
        time.sleep(0.02)
    else:
        raise AssertionError("tracing never started")
    assert any(kind == "link" for kind, _ in objs) and any(kind == "prog" for kind, _ in objs), objs
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=120)[1]
    assert p.returncode == 130, rest
    assert "interrupted" in rest
    assert settled_leftovers(expect=before) == before
    assert bpf_objects_left(objs) == set()
    assert not out.exists()
    assert not os.path.exists(str(out) + ".partial")
    assert not list(tmp_path.glob("**/*.fst*"))


def test_a_trace_whose_mount_and_loop_device_vanished_before_cleanup_is_kept(tmp_path, delayacct_off):
    """Someone else unmounts the run's image (lazily: tar reads on in its working directory) and detaches its
    loop device while the workload runs: the run completes, its results are kept, and cleanup says in one line
    each that there was nothing left to undo (it was "cleanup incomplete" and the finished trace was discarded)."""
    out = tmp_path / "out"
    p = start_run(out, "--no-baseline")
    coll, _ = wait_tracing(p)
    mnt = machine_state(p.pid)["mounts"][0]
    dev = next(l.split()[0] for l in open("/proc/mounts") if l.split()[1] == mnt)
    subprocess.run(["umount", "-l", mnt], check=True)
    subprocess.run(["losetup", "-d", dev], check=True)  # busy: detached once its filesystem lets go (autoclear)
    err = finish(p, timeout=600)
    assert p.returncode == 0, err
    assert "cleanup incomplete" not in err and "Traceback" not in err, err
    assert "%s was unmounted already (not by fstrace): nothing to undo there" % mnt in err, err
    assert (out / "results.fst").exists() and (out / "summary.json").exists()
    assert machine_state(p.pid) == {"mounts": [], "loops": [], "cgroups": [], "state": False}


def test_cleanup_leaves_a_loop_device_reused_by_someone_else(tmp_path):
    """The run's loop device detached by someone else and attached again to another file: not fstrace's any more,
    cleanup leaves it attached (and says so) instead of detaching someone else's device."""
    from common.system import Cleanup, losetup
    mine, theirs = tmp_path / "mine.img", tmp_path / "theirs.img"
    for f in (mine, theirs):
        f.write_bytes(bytes(1 << 20))
    c = Cleanup()
    dev, _ = losetup(str(mine), c, direct_io=False)
    try:
        subprocess.run(["losetup", "-d", dev], check=True)
        subprocess.run(["losetup", "-r", dev, str(theirs)], check=True)
        c.run()
        with open("/sys/block/%s/loop/backing_file" % os.path.basename(dev)) as f:
            assert f.read().strip() == str(theirs)
    finally:
        subprocess.run(["losetup", "-d", dev])
