"""Each fstrace command installs only what it uses: attach on a production box gets no fio, mkfs tools or
test tools, serve not even numpy or matplotlib.  apt-get, dpkg-query and make are replaced by stand-ins that
record what they were asked.  And the unit test lane needs no privileges."""
import os
import re
import subprocess
import sys

import pytest

from conftest import FSTRACE, NOBODY, ROOT

COLLECTOR_PKGS = {"clang", "libbpf-dev", "bpftool"}
# libdeflate-dev, liblz4-dev, autoconf: building erofs-utils 1.8.6 (scripts/build-erofs-utils.sh), not on attach boxes
WORKLOAD_PKGS = {"fio", "erofs-utils", "squashfs-tools", "btrfs-progs", "xfsprogs",
                 "libdeflate-dev", "liblz4-dev", "autoconf"}
CLI_PKGS = {"python3"}
ANALYSIS_PKGS = {"python3-numpy", "python3-matplotlib"}
TEST_PKGS = {"python3-pytest", "clang-format", "qemu-system-x86", "chromium"}


@pytest.fixture
def fresh_machine(tmp_path):
    """PATH where no package is installed, apt-get only records what it would install and make what it would
    build: (environment, log file)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    stubs = {"dpkg-query": "exit 1",
             "dpkg": 'echo "dpkg $*" >> %s' % log,  # no foreign architecture; adding one is recorded
             "apt-get": 'echo "apt-get $*" >> %s' % log,
             "make": 'echo "make $*" >> %s' % log}
    for name, body in stubs.items():
        (bin_dir / name).write_text("#!/bin/sh\n%s\n" % body)
        (bin_dir / name).chmod(0o755)
    return dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"])), log


def installed(log):
    """(packages apt-get was asked to install, whether make ran)."""
    lines = log.read_text().splitlines() if log.exists() else []
    pkgs = set()
    for l in lines:
        if l.startswith("apt-get ") and " install " in l:
            pkgs |= {w for w in l.split(" install ", 1)[1].split() if not w.startswith("-")}
    return pkgs, any(l.startswith("make ") for l in lines)


@pytest.mark.bpf
@pytest.mark.parametrize("command,wanted,unwanted,builds", [
    ("attach", COLLECTOR_PKGS | ANALYSIS_PKGS, WORKLOAD_PKGS | TEST_PKGS, True),
    ("serve", COLLECTOR_PKGS | CLI_PKGS, ANALYSIS_PKGS | WORKLOAD_PKGS | TEST_PKGS, True),
    ("advise", COLLECTOR_PKGS | WORKLOAD_PKGS | ANALYSIS_PKGS, TEST_PKGS, True),
    ("run", COLLECTOR_PKGS | WORKLOAD_PKGS | ANALYSIS_PKGS, TEST_PKGS, True),
    ("bench", COLLECTOR_PKGS | WORKLOAD_PKGS | ANALYSIS_PKGS, TEST_PKGS, True),
    ("report", ANALYSIS_PKGS, COLLECTOR_PKGS | WORKLOAD_PKGS | TEST_PKGS, False),
    ("compare", ANALYSIS_PKGS, COLLECTOR_PKGS | WORKLOAD_PKGS | TEST_PKGS, False),
])
def test_each_command_installs_what_it_uses(fresh_machine, command, wanted, unwanted, builds):
    env, log = fresh_machine
    p = subprocess.run([FSTRACE, command, "--help"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 0, p.stderr
    pkgs, built = installed(log)
    assert wanted <= pkgs and not pkgs & unwanted, pkgs
    assert built == builds


@pytest.mark.bpf
@pytest.mark.parametrize("command", ["run", "bench", "advise", "attach", "serve"])
def test_root_commands_refuse_other_users_before_installing(fresh_machine, command):
    """Commands that load BPF say so at once for another user, before any setup (which could not install)."""
    env, log = fresh_machine
    p = subprocess.run(NOBODY + [FSTRACE, command, "--help"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 1 and p.stderr == \
        "fstrace: error: '%s' must run as root (try: sudo ./fstrace %s --help)\n" % (command, command)
    assert installed(log) == (set(), False)


def without_numpy(tmp_path, env):
    """env with a numpy that cannot be imported ahead of the real one."""
    fake = tmp_path / "no-numpy" / "numpy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('numpy withheld by the test')\n")
    return dict(env, PYTHONPATH=str(fake.parent))


@pytest.mark.bpf
def test_serve_and_help_run_without_numpy(fresh_machine, tmp_path):
    """serve (and the help of every command) need no numpy; attach and report do, and say so in one line."""
    env, _ = fresh_machine
    env = without_numpy(tmp_path, env)
    for argv in (["--help"], ["serve", "--help"]):
        p = subprocess.run([FSTRACE] + argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode == 0 and "usage: fstrace" in p.stdout, p.stderr
    for command in ("attach", "report"):
        p = subprocess.run([FSTRACE, command, "--help"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        assert p.returncode == 1 and p.stderr.splitlines()[-1] == \
            "fstrace: error: python3-numpy is missing (run: sudo ./fstrace setup)", p.stderr


@pytest.mark.bpf
def test_the_test_command_installs_everything(fresh_machine):
    env, log = fresh_machine
    subprocess.run([os.path.join(ROOT, "scripts", "setup.sh"), "--test"], env=env, check=True)
    pkgs, built = installed(log)
    assert COLLECTOR_PKGS | WORKLOAD_PKGS | ANALYSIS_PKGS | TEST_PKGS <= pkgs and built


@pytest.mark.bpf
def test_cross_arm64_adds_the_architecture_and_builds_for_it(fresh_machine):
    """setup.sh cross-arm64 (part of --test: the vm lane's arm64 guests) adds arm64 to dpkg before installing the
    cross compiler and the :arm64 static libraries, and cross-builds the collector (make ARCH=arm64)."""
    env, log = fresh_machine
    subprocess.run([os.path.join(ROOT, "scripts", "setup.sh"), "cross-arm64"], env=env, check=True)
    lines = log.read_text().splitlines()
    pkgs, _ = installed(log)
    assert {"gcc-aarch64-linux-gnu", "libbpf-dev:arm64", "libjson-c-dev:arm64"} <= pkgs, pkgs
    added = lines.index("dpkg --add-architecture arm64")
    assert added < min(i for i, l in enumerate(lines) if l.startswith("apt-get ")), lines
    assert any(re.fullmatch(r"make -s -C \S+ ARCH=arm64", l) for l in lines), lines


@pytest.mark.unit
def test_help_and_unknown_commands_install_nothing(fresh_machine):
    env, log = fresh_machine
    subprocess.run([FSTRACE, "--help"], env=env, stdout=subprocess.PIPE, check=True)
    p = subprocess.run([FSTRACE, "frobnicate"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2 and "invalid choice: 'frobnicate'" in p.stderr
    assert installed(log) == (set(), False)


@pytest.mark.unit
def test_unknown_setup_part_is_refused(fresh_machine):
    env, log = fresh_machine
    p = subprocess.run([os.path.join(ROOT, "scripts", "setup.sh"), "everything"], env=env, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 2 and p.stderr.strip() == \
        "setup.sh: unknown part 'everything' (collector, workloads, cli, numpy, plots, analysis, unit, " \
        "cross-arm64, test or --test)"
    assert installed(log) == (set(), False)


@pytest.mark.bpf
def test_the_unit_lane_runs_as_an_unprivileged_user():
    """./scripts/test.sh --lane unit as nobody: every unit test runs and passes without privileges (none is
    skipped for want of them); the whole suite, as nobody, is refused in one line before any test runs."""
    test_sh = os.path.join(ROOT, "scripts", "test.sh")
    as_nobody = ["runuser", "-u", "nobody", "--"]
    if subprocess.run(as_nobody + ["test", "-r", test_sh]).returncode != 0:
        pytest.skip("this checkout (%s) is not readable by nobody" % ROOT)
    unit = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "unit", "--collect-only",
                           "-q"], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout
    n = int(re.search(r"^(\d+)/\d+ tests collected", unit, re.M).group(1))
    p = subprocess.run(as_nobody + [test_sh, "--lane", "unit", "-q"], cwd="/", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^%d passed, \d+ deselected in" % n, p.stdout.splitlines()[-1]), p.stdout
    q = subprocess.run(as_nobody + [test_sh, "-q"], cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert q.returncode == 1 and q.stdout == "" and q.stderr.startswith("fstrace tests: must run as root"), q.stderr
