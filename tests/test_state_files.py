"""What fstrace leaves on the machine between runs: cache and output directory lock files are removed by their
holder (and the stale ones of killed runs by the next start's sweep), and matplotlib says nothing on stderr when
HOME is read-only."""
import contextlib
import fcntl
import os
import subprocess

import pytest

from common import system
from common.system import FstraceError
from conftest import FSTRACE, ROOT


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """The locks' directory, root's STATE_DIR, as a directory of the test's (the lane runs as any user)."""
    d = str(tmp_path / "state")
    monkeypatch.setattr(system, "STATE_DIR", d)
    monkeypatch.setattr(system, "lock_dir", lambda: (os.makedirs(d, exist_ok=True), d)[1])
    return d


@pytest.mark.unit
def test_cache_lock_files_go_with_their_holder(state_dir, tmp_path):
    entries = [str(tmp_path / ("entry%d" % i)) for i in range(5)]
    for e in entries:
        with system.cache_lock(e):
            assert os.listdir(state_dir) == [os.path.basename(system.lock_path("cache", e))]
    with pytest.raises(RuntimeError):
        with system.cache_lock(entries[0]):
            raise RuntimeError("a failed build")
    assert os.listdir(state_dir) == []


@pytest.mark.unit
def test_a_lock_removed_while_waited_on_is_taken_again_at_its_path(state_dir, tmp_path):
    """A waiter that opened the lock file its holder then removed must not count as holding the lock: it takes the
    file at the path, which whoever came after the removal may hold."""
    entry = str(tmp_path / "entry")
    lp = system.lock_path("cache", entry)
    with system.cache_lock(entry):
        waiter = open(lp, "a")  # opened before the holder is done, as a waiter's open is
    with system.cache_lock(entry):  # a later run holds the file now at the path
        fcntl.flock(waiter, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the removed file: free, but no lock any more
        assert system.lock_at(lp, blocking=False) is None  # the path's is taken: the waiter waits for it
    waiter.close()
    assert os.listdir(state_dir) == []


@pytest.mark.unit
def test_the_sweep_removes_only_the_locks_no_one_holds(state_dir, tmp_path):
    os.makedirs(state_dir)
    held = [system.lock_path(kind, str(tmp_path / "a")) for kind in ("cache", "out")]
    stale = [system.lock_path(kind, str(tmp_path / "b")) for kind in ("cache", "out")]
    other = os.path.join(state_dir, "delayacct")  # no lock file: the sweep's other business
    for p in stale + [other]:
        open(p, "w").close()  # a killed run's
    holders = [system.lock_at(p) for p in held]
    system.remove_unheld_locks()
    assert sorted(os.listdir(state_dir)) == sorted([os.path.basename(p) for p in held] + ["delayacct"])
    for h in holders:
        h.close()


@pytest.mark.unit
def test_an_output_directory_lock_goes_with_its_run(state_dir, tmp_path):
    """Each run's output directory is locked while written; the lock file is removed at its end, done or failed,
    so the state directory does not keep one per run ever made (a live system's /run, over months)."""
    from cli.directories import ResultsDir
    for n, fails in enumerate((False, True)):
        rd = ResultsDir(str(tmp_path / ("run%d" % n)))
        with pytest.raises(FstraceError) as e:  # a second writer of the same directory is refused meanwhile
            ResultsDir(str(tmp_path / ("run%d" % n)))
        assert "being written by another fstrace run" in str(e.value)
        with contextlib.suppress(RuntimeError):
            with rd:
                assert os.listdir(state_dir) == [os.path.basename(system.lock_path("out", rd.outdir))]
                if fails:
                    raise RuntimeError("the run failed")
        assert os.listdir(state_dir) == []
    assert os.path.isdir(tmp_path / "run0") and not os.path.exists(tmp_path / "run1")


@pytest.mark.unit
def test_an_output_directory_held_a_moment_by_the_sweep_is_still_claimed(state_dir, tmp_path):
    """A start's sweep holds an unheld lock file a moment before it removes it: a run claiming that directory
    then waits it out rather than take it for another run's."""
    import threading
    from cli.directories import ResultsDir
    out = str(tmp_path / "run")
    lp = system.lock_path("out", out)
    sweep = system.lock_at(lp)
    threading.Timer(0.03, lambda: system.unlock_removing(sweep, lp)).start()
    rd = ResultsDir(out)
    with rd:
        pass
    assert os.path.isdir(out) and os.listdir(state_dir) == []


@pytest.mark.unit
def test_an_output_directory_claimed_and_never_written_leaves_no_lock(tmp_path):
    """A command that fails after claiming its directory and before writing it (a dataset not found, an image
    that would not build) leaves no lock file behind at its exit."""
    import sys
    state = tmp_path / "state"
    script = ("import os, sys; from common import system; d = sys.argv[1]; "
              "system.lock_dir = lambda: (os.makedirs(d, exist_ok=True), d)[1]; "
              "from cli.directories import ResultsDir; r = ResultsDir(sys.argv[2]); "
              "print(len(os.listdir(d)), flush=True); sys.exit(3)")
    p = subprocess.run([sys.executable, "-c", script, str(state), str(tmp_path / "run")], cwd=ROOT,
                       stdout=subprocess.PIPE, text=True)
    assert p.returncode == 3 and p.stdout == "1\n", p
    assert os.listdir(state) == [] and not os.path.exists(tmp_path / "run")


@pytest.mark.unit
def test_html_report_says_nothing_of_matplotlib_when_home_is_read_only(real, tmp_path):
    """HOME with no writable ~/.config (a read-only home, nobody's /nonexistent): matplotlib wrote a warning on
    stderr on every report --html; now it gets a private directory, removed after."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "results.fst").write_bytes(real[1])
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env["HOME"] = "/dev/null/home"  # under a file: nothing can be made there, even by root
    env["TMPDIR"] = str(tmp_path)
    p = subprocess.run([FSTRACE, "report", str(d), "--html", str(tmp_path / "r.html")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "atplotlib" not in p.stderr, p.stderr
    assert "<svg" in (tmp_path / "r.html").read_text()
    assert [n for n in os.listdir(tmp_path) if "matplotlib" in n] == []


@pytest.mark.unit
def test_another_users_locks_are_in_a_directory_of_its_own_and_a_planted_one_is_refused(tmp_path):
    """A user other than root (report, compare and bench --merge need no root) locks in a directory of its own,
    mode 0700; one another user made in its place, a link there or a wider mode is refused in one line, never
    written through."""
    me = os.geteuid()
    d = system.private_dir(str(tmp_path), "fstrace-locks", me)
    assert d == str(tmp_path / ("fstrace-locks-%d" % me)) and (os.stat(d).st_mode & 0o777) == 0o700
    assert system.private_dir(str(tmp_path), "fstrace-locks", me) == d  # taken again as it is
    with pytest.raises(system.FstraceError, match="not a directory of this user's alone"):
        system.private_dir(str(tmp_path), "fstrace-locks", me + 1)  # made by another user
    os.chmod(d, 0o777)
    with pytest.raises(system.FstraceError, match="not a directory of this user's alone"):
        system.private_dir(str(tmp_path), "fstrace-locks", me)
    os.rmdir(d)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(str(tmp_path / "elsewhere"), d)
    with pytest.raises(system.FstraceError, match="not a directory of this user's alone"):
        system.private_dir(str(tmp_path), "fstrace-locks", me)
