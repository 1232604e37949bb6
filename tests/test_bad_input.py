"""Bad input: one line naming the problem, a non-zero exit, and nothing left behind (no mount, loop device,
cgroup, BPF program, temp, .partial or half-unpacked dataset directory, no results that read as complete)."""
import glob
import os
import subprocess

import pytest

from conftest import CACHE, FSTRACE, SCALE, settled_leftovers


def one_line_failure(p, expect):
    """p failed with exactly one error line, `expect` in it, and no traceback."""
    assert p.returncode != 0, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    errors = [l for l in p.stderr.splitlines() if l.startswith("fstrace: error:")]
    assert len(errors) == 1, p.stderr
    assert expect in errors[0], p.stderr
    assert p.stderr.splitlines()[-1] == errors[0], p.stderr


def run(*args, **kw):
    return subprocess.run([FSTRACE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=600, **kw)


@pytest.fixture
def clean_machine():
    before = settled_leftovers()
    tmps = set(glob.glob("/tmp/fstrace-run-*"))
    cgroups = set(glob.glob("/sys/fs/cgroup/*/fstrace-*") + glob.glob("/sys/fs/cgroup/fstrace-*"))
    yield
    assert settled_leftovers(expect=before) == before
    assert set(glob.glob("/tmp/fstrace-run-*")) <= tmps
    assert set(glob.glob("/sys/fs/cgroup/*/fstrace-*") + glob.glob("/sys/fs/cgroup/fstrace-*")) <= cgroups


def fs_run(tmp_path, *args, out=None, cache=CACHE):
    return run("run", "--fs", "erofs", "--workload", "tar-data", "--scale", SCALE, "--cache", str(cache),
               "-o", str(out or tmp_path / "out"), *args)


def test_dataset_missing(tmp_path, clean_machine):
    one_line_failure(fs_run(tmp_path, "--dataset", str(tmp_path / "nope")), "no such file or directory")
    assert not (tmp_path / "out").exists()


def test_dataset_not_a_tarball(tmp_path, clean_machine):
    bad = tmp_path / "data.tar"
    bad.write_bytes(b"this is not a tarball\n" * 100)
    cache = tmp_path / "cache"
    one_line_failure(fs_run(tmp_path, "--dataset", str(bad), cache=cache), "cannot unpack as a tarball")
    assert not glob.glob(str(cache / "datasets" / "*.partial"))
    assert not glob.glob(str(cache / "datasets" / "user-*"))
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_dataset_empty_directory(tmp_path, clean_machine):
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    one_line_failure(fs_run(tmp_path, "--dataset", str(empty)), "holds no files")


def test_output_under_proc(tmp_path, clean_machine):
    one_line_failure(fs_run(tmp_path, out="/proc/fstrace-out"), "cannot write results under /proc")


def test_output_on_read_only_filesystem(tmp_path, clean_machine):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    try:
        p = fs_run(tmp_path, out=ro / "out")
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    one_line_failure(p, "read-only filesystem")
    assert "running" not in p.stderr and "image:" not in p.stderr  # checked before any work


def test_output_symlink_to_directory_refused_before_work(tmp_path, clean_machine):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    p = fs_run(tmp_path, out=link)
    one_line_failure(p, "is a symbolic link")
    assert "running" not in p.stderr
    assert os.listdir(real) == []


def test_existing_partial_with_user_files_is_kept(tmp_path, clean_machine):
    partial = tmp_path / "out.partial"
    partial.mkdir()
    (partial / "notes.txt").write_text("mine\n")
    p = fs_run(tmp_path)
    one_line_failure(p, "out.partial already exists")
    assert (partial / "notes.txt").read_text() == "mine\n"
    assert not (tmp_path / "out").exists()


def test_full_disk_while_writing_results(tmp_path, clean_machine):
    """A small tmpfs as -o: results.fst fits, the report files do not (or the collector runs out first)."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(small)], check=True)
    try:
        p = fs_run(tmp_path, out=small / "out")
        left = os.listdir(small)
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "cleanup incomplete" not in p.stderr, p.stderr
    assert p.stderr.splitlines()[-1].startswith("fstrace: error:"), p.stderr
    assert "No space left on device" in p.stderr, p.stderr
    assert left == []  # neither the results directory nor its .partial


@pytest.mark.parametrize("args,expect", [
    (["--pid", "999999"], "--pid 999999: no such process"),
    (["--cgroup", "/nonexistent"], "--cgroup /nonexistent: not a cgroup directory"),
    (["--mount", "/proc/self"], "is not a mount point"),
    (["--duration", "0"], "--duration must be more than 0 seconds"),
    (["--duration", "-1"], "--duration must be more than 0 seconds"),
])
def test_attach_bad_filters_fail_before_attaching(tmp_path, clean_machine, args, expect):
    p = run("attach", "-o", str(tmp_path / "out"), *args)
    one_line_failure(p, expect)
    assert "attached" not in p.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_attach_mount_point_accepted(tmp_path, clean_machine):
    """The check above does not refuse real mount points (here /, with a short duration)."""
    p = run("attach", "--mount", "/", "--duration", "0.3", "--interval", "0", "-o", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out" / "summary.json").exists()


def test_shared_device_never_gives_a_negative_unseen_count(erofs_randread):
    """Two runs on one backing disk: the other run's completions at the window's edges make fstrace trace
    more requests than the kernel's diskstats difference.  Replayed on a real results file by lowering the
    kernel's end count below what was traced: nothing is unseen, and the excess is named."""
    from analysis import report, summary
    _, res, _ = erofs_randread
    stats = summary.device_stats(res)
    dev = next(d for d in res.header["devices"] if stats[summary.dev_name(d["dev"])].get("requests_in_window"))
    name = summary.dev_name(dev["dev"])
    traced = stats[name]["requests_in_window"]
    saved = dev["diskstats_end"]
    dev["diskstats_end"] = dict(saved, reads=dev["diskstats_start"]["reads"] + traced - 3)
    try:
        s = summary.summarize(res)
    finally:
        dev["diskstats_end"] = saved  # the fixture's results are shared with other tests
    st = s["devices"][name]
    assert st["unseen_requests"] == 0 and st["traced_beyond_diskstats"] == 3
    assert name not in (s.get("unseen_block_requests") or {})
    assert "3 more requests traced than the kernel counted" in report.render(s)
