"""The sources are as their formatter and linter leave them: clang-format (.clang-format) for the C of bpf/, user/,
scripts/ and tests/c/, ruff (ruff.toml, pinned in scripts/setup.sh) for the Python."""
import glob
import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.unit

C_SOURCES = sorted(f for pattern in ("bpf/*.c", "bpf/*.h", "user/*.c", "user/*.h", "scripts/*.c", "tests/c/*.c")
                   for f in glob.glob(pattern, root_dir=ROOT))


def test_c_sources_are_clang_formatted():
    assert {"bpf/records.h", "user/collect.c", "scripts/bench_helpers.bpf.c"} <= set(C_SOURCES)
    p = subprocess.run(["clang-format", "--dry-run", "--Werror"] + C_SOURCES, cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, "not as clang-format leaves them (clang-format -i FILE):\n" + p.stderr[:3000]


def test_python_is_clean_under_ruff():
    ruff = os.path.join(ROOT, "build", "lint", "bin", "ruff")
    p = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "All checks passed!", p.stdout
