"""A bench matrix split into shards and merged (bench --shard, --merge), on Slurm and Kubernetes; and compare
naming the figures that moved with the difference."""
import copy
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import CACHE, DATA, ROOT, SCALE, fstrace
from analysis import tables
from cli import shards

STORED = os.path.join(DATA, "erofs-randread-summary.json")


def _summary():
    with open(STORED) as f:
        return json.load(f)


def _bench_dir(d, machine, cells, shard=None, matrix=None, wall_s=None):
    """A bench directory as bench writes it, of the stored run summary, one run per (workload, label) cell (its
    time wall_s when given)."""
    s = _summary()
    os.makedirs(d)
    rows = []
    for wl, label in cells:
        run = os.path.join(label, wl, "run-1")
        os.makedirs(os.path.join(d, run))
        shutil.copy(STORED, os.path.join(d, run, "summary.json"))
        rows.append(dict(tables.row_from_summary(s), workload=wl, label=label, run=1, dir=run))
        rows[-1]["wall_s"] = wall_s or rows[-1]["wall_s"]
    labels = list(dict.fromkeys(label for _, label in cells))
    doc = {"schema_version": tables.SCHEMA_VERSION, "kind": "fstrace-bench", "dataset_id": "x", "runs": 1,
           "cache": "cold", "iops_cap": None, "storage": None, "kernel": machine["kernel"], "machine": machine,
           "images": [{"part": "single", "fs": "erofs", "label": label, "bytes": 100, "source_bytes": 200,
                       "ratio_to_uncompressed": 0.5, "build_seconds": 1.0, "tool": "mkfs.erofs"}
                      for label in labels],
           "configs": [{"fs": "erofs", "options": {}, "label": label} for label in labels], "rows": rows,
           "matrix": matrix or {"preset": None, "media": [None], "workloads": ["randread"],
                                "configs": ["erofs-a", "erofs-b"]},
           "shard": shard}
    with open(os.path.join(d, "bench.json"), "w") as f:
        json.dump(doc, f)
    return d


def _machine(host, cpu):
    return {"host": host, "kernel": "6.1.0", "cpu": cpu, "cpus": 2, "memory_bytes": 1 << 30,
            "disk": {"device": "vda", "disk": "vda", "model": None, "rotational": False}, "profile": None}


@pytest.mark.unit
def test_shards_split_the_matrix_once():
    """Every cell in exactly one shard, whatever the count, and the split a function of the matrix alone."""
    m = {"preset": None, "media": ["sata-ssd", "nvme", "hdd"], "workloads": ["w1", "w2", "w3", "w4"],
         "configs": ["c%d" % i for i in range(7)]}
    whole = shards.cells_of(m)
    assert len(whole) == len(set(whole)) == 3 * 4 * 7
    for count in (1, 2, 3, 4, 5, 84, 100):
        parts = [shards.cells_of(m, (i, count)) for i in range(count)]
        assert sorted(c for p in parts for c in p) == sorted(whole)
        assert parts == [shards.cells_of(copy.deepcopy(m), (i, count)) for i in range(count)]


@pytest.mark.unit
@pytest.mark.parametrize("text", ["4/4", "-1/4", "1", "a/b", "0/0", "1/2/3"])
def test_bad_shard_is_one_line(text):
    p = fstrace("bench", "--fs", "erofs", "--workload", "randread", "--shard=" + text, check=False)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "--shard" in p.stderr, p.stderr


SEED004 = {"preset": "seed004", "media": [None], "workloads": ["randread"], "configs": ["erofs-a", "erofs-b"]}


@pytest.mark.unit
def test_two_machines_merge_into_labelled_cells(tmp_path):
    """The same cell from two machines stays two cells, each labelled by its machine's host name, with the
    machines' records; each machine's shards together are its whole matrix; seed 004's tables, which compare
    media, gain a column per machine."""
    a, b = _machine("alpha", "CPU A"), _machine("beta", "CPU B")
    parts = [_bench_dir(str(tmp_path / "a0"), a, [("randread", "erofs-a")], {"index": 0, "count": 2}, SEED004, 1.0),
             _bench_dir(str(tmp_path / "a1"), a, [("randread", "erofs-b")], {"index": 1, "count": 2}, SEED004, 2.0),
             _bench_dir(str(tmp_path / "b"), b, [("randread", "erofs-a"), ("randread", "erofs-b")], None, SEED004,
                        3.0)]
    out = tmp_path / "merged"
    p = fstrace("bench", "--merge", *parts, "-o", str(out))
    doc = json.loads((out / "bench.json").read_text())
    cells = sorted((r["label"], r["machine"], r["config_label"]) for r in doc["rows"])
    assert cells == [("erofs-a@alpha", "alpha", "erofs-a"), ("erofs-a@beta", "beta", "erofs-a"),
                     ("erofs-b@alpha", "alpha", "erofs-b"), ("erofs-b@beta", "beta", "erofs-b")]
    assert doc["machines"] == {"alpha": a, "beta": b}
    for r in doc["rows"]:
        assert json.loads((out / r["dir"] / "summary.json").read_text()) == _summary()
        assert r["label"] in p.stdout
    seed = (out / "seed-tables.txt").read_text()
    per = seed.split("per machine\n")[1].splitlines()
    assert per[:4] == ["| file system | alpha (vda) | beta (vda) |", "|---|", "| erofs-a | 1.000 | 3.000 |",
                       "| erofs-b | 2.000 | 3.000 |"], seed
    assert seed in p.stdout


@pytest.mark.unit
def test_merge_refuses_a_missing_shard_and_a_foreign_part(tmp_path):
    a = _machine("alpha", "CPU A")
    first = _bench_dir(str(tmp_path / "a0"), a, [("randread", "erofs-a")], {"index": 0, "count": 2})
    p = fstrace("bench", "--merge", first, "-o", str(tmp_path / "m"), check=False)
    assert p.returncode == 1 and "machine alpha lacks shard 1 of 2" in p.stderr
    other = _bench_dir(str(tmp_path / "o"), a, [("randread", "erofs-b")], {"index": 1, "count": 2},
                       matrix={"preset": None, "media": [None], "workloads": ["randread"], "configs": ["erofs-b"]})
    p = fstrace("bench", "--merge", first, other, "-o", str(tmp_path / "m"), check=False)
    assert p.returncode == 1 and "not parts of one bench: their matrix differ" in p.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "m.partial").exists()
    # a damaged part (its matrix names no configurations): one line, nothing written
    damaged = _bench_dir(str(tmp_path / "d"), a, [("randread", "erofs-a")],
                         matrix={"preset": None, "media": [None], "workloads": ["randread"], "configs": 5})
    p = fstrace("bench", "--merge", damaged, "-o", str(tmp_path / "m"), check=False)
    assert p.returncode == 1 and "not what bench writes there, or damaged (TypeError" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("fstrace: error:") == 1
    assert not (tmp_path / "m").exists() and not (tmp_path / "m.partial").exists()


def _run_dir(d, s):
    os.makedirs(d)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(s, f)
    return d


@pytest.mark.unit
def test_compare_names_the_request_count_first(tmp_path):
    """B does five times as many device requests as A, each a quarter the size (so a quarter more device bytes),
    and waits on I/O for longer: what moved with the I/O wait is the request count first, then their size, and
    the device bytes per byte received last of the three."""
    a = _summary()
    b = copy.deepcopy(a)
    b["run"]["label"] = "erofs-lz4hc12-C16384"
    loop = [d for d in b["devices"].values() if d["level"] == "loop"][0]
    loop["requests"] *= 5
    loop["mean_bytes"] /= 4
    loop["bytes"] = int(loop["bytes"] * 5 / 4)
    b["attribution"]["parts_ns"]["io_wait_ns"] *= 3
    b["attribution"]["wall_ns"] += 2 * a["attribution"]["parts_ns"]["io_wait_ns"]
    b.pop("amplification", None)
    text = fstrace("compare", _run_dir(str(tmp_path / "a"), a), _run_dir(str(tmp_path / "b"), b)).stdout
    said = [line.strip()[len("with it: "):] for line in text.splitlines() if line.strip().startswith("with it:")]
    assert said[0].startswith("device requests %d (A) -> %d (B), x5.00" % (loop["requests"] // 5,
                                                                         loop["requests"])), text
    assert said[1].startswith("mean request size"), text
    assert said.index(next(x for x in said if x.startswith("loop device bytes per byte received"))) > 1, text


K8S_JOB = os.path.join(ROOT, "scripts", "k8s-bench-job.yaml")
K8S_VALIDATE = os.path.join(ROOT, "build", "k8s", "bin", "kubernetes-validate")


def _k8s_job():
    """The manifest as its YAML reader has it (PyYAML, which kubernetes-validate brings into build/k8s)."""
    p = subprocess.run([os.path.join(ROOT, "build", "k8s", "bin", "python3"), "-c",
                        "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)", K8S_JOB],
                       stdout=subprocess.PIPE, check=True)
    return json.loads(p.stdout)


@pytest.mark.unit
def test_kubernetes_indexed_job_is_valid(tmp_path):
    """The manifest validates against the Kubernetes API's own schema (kubernetes-validate, strict: no field
    the API does not have), a misspelt field does not, and the pod's command runs shard JOB_COMPLETION_INDEX of
    as many as the job's completions, on the node's PID 1 namespaces."""
    p = subprocess.run([K8S_VALIDATE, "--strict", K8S_JOB], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert p.returncode == 0 and "passed" in p.stdout, p.stdout
    with open(K8S_JOB) as f:
        bad = f.read().replace("hostPID: true", "hostPid: true")
    (tmp_path / "bad.yaml").write_text(bad)
    p = subprocess.run([K8S_VALIDATE, "--strict", str(tmp_path / "bad.yaml")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert p.returncode != 0 and "'hostPid' was unexpected" in p.stdout, p.stdout
    job = _k8s_job()
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed" and pod["hostPID"] is True
    (c,) = pod["containers"]
    assert c["securityContext"]["privileged"] is True
    env = {e["name"]: e["value"] for e in c["env"]}
    assert int(env["SHARDS"]) == spec["completions"]
    # the pod's command, with an nsenter that says what it was asked to run
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "nsenter").write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    (stub / "nsenter").chmod(0o755)
    p = subprocess.run(c["command"] + c["args"], stdout=subprocess.PIPE, text=True, check=True,
                       env=dict(env, JOB_COMPLETION_INDEX="2", PATH="%s:/usr/bin:/bin" % stub))
    argv = p.stdout.splitlines()
    assert argv == ["--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--",
                    env["FSTRACE_HOME"] + "/fstrace", "bench"] + env["BENCH_OPTIONS"].split() + [
        "--shard", "2/%s" % env["SHARDS"], "-o", env["OUT"] + ".shards/2"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SLURM_CONF = """ClusterName=fstracetest
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={d}/munge.socket
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _wait_for(what, check, tries=600, delay=0.5):
    for _ in range(tries):
        if check():
            return
        time.sleep(delay)
    raise AssertionError("gave up waiting for " + what)


@pytest.fixture
def slurm(tmp_path):
    """A single-node Slurm cluster of this machine: munged, slurmctld and slurmd started as this test's own
    processes (no systemd), with a key, a slurm.conf, ports and state of their own; stopped after.  Yields the
    environment its client commands (sbatch, squeue) need."""
    d = tmp_path / "slurm"
    for sub in ("state", "spool"):
        (d / sub).mkdir(parents=True)
    (d / "munge.key").write_bytes(os.urandom(1024))
    (d / "munge.key").chmod(0o600)
    node = socket.gethostname().split(".")[0]
    (d / "slurm.conf").write_text(SLURM_CONF.format(node=node, d=d, ctld_port=_free_port(), d_port=_free_port(),
                                                     cpus=os.cpu_count()))
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
    daemons = []
    try:
        for argv in (["munged", "--foreground", "--force", "--socket=%s/munge.socket" % d,
                      "--key-file=%s/munge.key" % d, "--pid-file=%s/munged.pid" % d,
                      "--log-file=%s/munged.log" % d, "--seed-file=%s/munged.seed" % d],
                     ["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            with open(d / ("%s.out" % argv[0]), "w") as log:
                daemons.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            if argv[0] == "munged":
                _wait_for("munged's socket", lambda: (d / "munge.socket").exists())
        _wait_for("the node idle in sinfo", lambda: subprocess.run(
            ["sinfo", "-h", "-o", "%T"], env=env, stdout=subprocess.PIPE, text=True).stdout.strip() == "idle")
        yield env
    finally:
        subprocess.run(["scancel", "--user", "root"], env=env, stderr=subprocess.DEVNULL)
        for p in reversed(daemons):
            p.terminate()
            p.wait(timeout=60)


def _cells(doc):
    """{(workload, configuration label, run): the run's read requests}."""
    return {(r["workload"], r["label"], r["run"]): r["requests"] for r in doc["rows"]}


@pytest.mark.bpf
def test_slurm_array_of_shards_merges_into_the_whole_bench(slurm, tmp_path):
    """scripts/slurm-bench.sh on a real single-node Slurm: a 4-task array runs the four shards of a 2 x 2
    matrix, one cell each, and the merge job after them; the merged bench has exactly the cells, and each the
    request count, of the same matrix run whole (times differ run to run and are not compared)."""
    matrix = ["--fs", "erofs,squashfs", "--compress", "lz4hc", "--cluster", "4096",
              "--workload", "cat-500,randread-10m", "--runs", "1", "--no-baseline", "--scale", SCALE,
              "--cache", CACHE]
    out = tmp_path / "sharded"
    p = subprocess.run([os.path.join(ROOT, "scripts", "slurm-bench.sh"), str(out), "4"] + matrix, env=slurm,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    array, merge = p.stdout.split()

    def done():
        q = subprocess.run(["squeue", "-h", "-o", "%i %r"], env=slurm, stdout=subprocess.PIPE, text=True).stdout
        assert "DependencyNeverSatisfied" not in q, "a shard failed: %s" % "\n".join(
            (tmp_path / "sharded.logs" / f).read_text() for f in sorted(os.listdir(tmp_path / "sharded.logs")))
        return not q.strip()
    _wait_for("the array %s and merge %s to finish" % (array, merge), done, tries=3600)
    assert (out / "bench.json").exists(), (tmp_path / "sharded.logs" / "merge.log").read_text()
    merged = json.loads((out / "bench.json").read_text())
    shard_docs = [json.loads((tmp_path / "sharded.shards" / str(i) / "bench.json").read_text()) for i in range(4)]
    assert [d["shard"] for d in shard_docs] == [{"index": i, "count": 4} for i in range(4)]
    assert all(len(d["rows"]) == 1 for d in shard_docs)
    assert {d["machine"]["host"] for d in shard_docs} == {socket.gethostname()}
    whole = tmp_path / "whole"
    fstrace("bench", *matrix, "-o", str(whole))
    expected = json.loads((whole / "bench.json").read_text())
    assert _cells(merged) == _cells(expected) and len(_cells(expected)) == 4
    table = (out / "tables.txt").read_text()
    for wl, label, _ in _cells(expected):
        assert label in table.split(wl + "\n")[1]
    # the merged bench reads as any bench
    report = fstrace("report", str(out)).stdout
    assert all(label in report for _, label, _ in _cells(expected))
