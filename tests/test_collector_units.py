"""The collector's pure parts in C (option parsing, records.h's names, the OpenMetrics text, the string buffer),
each tested alone by its cmocka program in tests/c/, built by `make test-c` into a directory of the test's own
(the unit lane runs as any user, in a checkout it may not write)."""
import glob
import os
import re
import subprocess

import pytest

from conftest import ROOT

PROGRAMS = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(ROOT, "tests", "c", "*_test.c")))


@pytest.mark.unit
@pytest.mark.parametrize("program", PROGRAMS)
def test_collector_part(program, tmp_path):
    built = subprocess.run(["make", "-s", "-C", ROOT, "TEST_C_OUT=%s" % tmp_path, str(tmp_path / program)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert built.returncode == 0, built.stdout
    ran = subprocess.run([str(tmp_path / program)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stdout
    counted = re.search(r"^\[==========\] (\d+) test\(s\) run\.$", ran.stdout, re.M)
    passed = re.search(r"^\[  PASSED  \] (\d+) test\(s\)\.$", ran.stdout, re.M)
    assert counted and passed and int(passed.group(1)) == int(counted.group(1)) > 0, ran.stdout
