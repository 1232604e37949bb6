"""The packages import one another from the checkout's root without changing the module path: pytest.ini's
pythonpath for the tests, `python3 -m` from the root for the scripts, and the launcher's PYTHONPATH for the
command, which must run the same from any directory, whatever that directory holds."""
import os
import re
import subprocess

import pytest

from conftest import FSTRACE, ROOT

pytestmark = pytest.mark.unit

# a call of insert, append or extend on the module path, or an assignment to it (a slice, +=)
PATH_CHANGE = re.compile(r"\bsys\." r"path\s*(\.\s*(insert|append|extend)\b|\[[^]]*\]\s*=|\+=)")


def test_no_module_changes_the_module_path():
    sources = []
    for d, dirs, files in os.walk(ROOT):
        # the sources, not build/ (its virtual environments' packages are not the project's) nor .git
        dirs[:] = [x for x in dirs if x != "build" and not x.startswith(".")]
        sources += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(".py")]
    assert "cli/commands.py" in sources and "tests/conftest.py" in sources
    changes = []
    for rel in sources:
        with open(os.path.join(ROOT, rel)) as f:
            changes += ["%s:%d: %s" % (rel, n, line.strip()) for n, line in enumerate(f, 1) if PATH_CHANGE.search(line)]
    assert not changes, "\n".join(changes)


def test_launcher_runs_the_checkouts_command_from_any_directory(tmp_path):
    """Run from a directory holding packages of the same names as fstrace's: the command still runs its own
    modules (the caller's directory is not on its module path)."""
    for pkg in ("cli", "common", "analysis"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("raise SystemExit('imported %s from the caller directory')\n"
                                                    % pkg)
    (tmp_path / "cli" / "__main__.py").write_text("raise SystemExit('ran cli from the caller directory')\n")
    p = subprocess.run([FSTRACE, "--help"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 0 and p.stdout.startswith("usage: fstrace"), p.stderr
