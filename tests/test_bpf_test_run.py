"""The kernel side's handlers run by the kernel on forged inputs (BPF_PROG_TEST_RUN), unattached: block.bpf.c's
expire_stale (a syscall program) on forged in-flight entries, requests.bpf.c's raw syscall tracepoint programs on
a forged read of this process.  tests/c/bpf_test_run.c loads the real objects through the collector's
skeletons and asserts on their maps: what each test checks is said there, beside it."""
import re
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.bpf


def test_handlers_on_forged_inputs():
    built = subprocess.run(["make", "-s", "-C", ROOT, "build/bpf-test-run"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    assert built.returncode == 0, built.stdout
    ran = subprocess.run([ROOT + "/build/bpf-test-run"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout
    counted = re.search(r"^\[==========\] (\d+) test\(s\) run\.$", ran.stdout, re.M)
    passed = re.search(r"^\[  PASSED  \] (\d+) test\(s\)\.$", ran.stdout, re.M)
    # every test ran and passed: a skipped one (a machine up for less than FST_STALE_NS) is no pass
    assert counted and passed and int(passed.group(1)) == int(counted.group(1)) == 4, ran.stdout
