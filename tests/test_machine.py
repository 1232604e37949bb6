"""The machine record every kind of run stores (common/machine.py) and the pages rendered from stored runs: the
machine they show is the one the run recorded, never the one rendering the page."""
import json
import os

import pytest

from common import machine
from scripts import docs_generated, overhead_report

pytestmark = pytest.mark.unit

OLD_BENCH_OVERHEAD = {"arch": "x86_64", "kernel": "6.1.0", "cpus": 2, "cpu_model": "Xeon", "memory_gib": 23.5,
                      "vm": "kvm", "container": None}


def test_the_record_is_this_machines():
    rec = machine.record()
    with open("/proc/meminfo") as f:
        mem_kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal:")))
    assert (rec["arch"], rec["kernel"], rec["cpus"]) == (os.uname().machine, os.uname().release, os.cpu_count())
    assert rec["memory_bytes"] == mem_kib * 1024


def test_an_older_bench_overhead_record_reads_in_todays_keys():
    rec = machine.stored(OLD_BENCH_OVERHEAD)
    assert rec["cpu"] == "Xeon" and rec["memory_bytes"] == 23.5 * (1 << 30)
    assert "cpu_model" not in rec and "memory_gib" not in rec
    assert overhead_report.machine_text(OLD_BENCH_OVERHEAD) == overhead_report.machine_text(rec) == \
        "x86_64, 2 CPUs; Xeon; 23.5 GiB; virtual machine: kvm, container: none detected"
    assert docs_generated._machine(OLD_BENCH_OVERHEAD) == "Linux 6.1.0 x86_64, Xeon, 2 CPUs, 24 GiB"


def _vmtest_doc(tmp_path, rec):
    doc = {"ok": True, "table": [["6.12", "decompression erofs lz4", "fentry", "fentry", 3, "ok"]], "runs": []}
    if rec is not None:
        doc["machine"] = rec
    path = tmp_path / "vmtest.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_vmtest_page_shows_the_host_the_guests_ran_on(tmp_path):
    rec = machine.stored(OLD_BENCH_OVERHEAD) | {"kernel": "9.9.9-elsewhere"}
    page = docs_generated.vmtest_page([_vmtest_doc(tmp_path, rec)], ["x"])
    assert "Machine: host Linux 9.9.9-elsewhere x86_64, Xeon, 2 CPUs, 24 GiB; guests:" in page
    page = docs_generated.vmtest_page([_vmtest_doc(tmp_path, None)], ["x"])  # a file from before it was recorded
    assert "Machine: host not recorded; guests:" in page and os.uname().release not in page


def test_the_findings_machine_is_the_one_their_benches_recorded(tmp_path):
    assert docs_generated.findings_machine(str(tmp_path)) is None
    bench = [name for name, kind, _ in docs_generated.FINDINGS if kind == "bench"][-1]
    os.makedirs(tmp_path / bench)
    (tmp_path / bench / "bench.json").write_text(json.dumps({"machine": {"kernel": "9.9.9", "cpu": "C", "cpus": 4,
                                                                         "memory_bytes": 8 << 30}}))
    assert docs_generated._machine(docs_generated.findings_machine(str(tmp_path))) == "Linux 9.9.9, C, 4 CPUs, 8 GiB"
