"""Root fstrace never writes (or chmods, or mounts) through a path another local user controls: results (-o and
the default fstrace-results/), the image cache (--cache), report --html.  The attacker is a real unprivileged
process (the user nobody) planting links beforehand or racing root's run; the kernel's fs.protected_symlinks
would stop some of these in sticky directories, so the directories used here are not sticky unless a test says
so, and fstrace alone must refuse.  Also: results are not world-readable, a truncated cached image is rebuilt,
mount's whole error is kept, two default result names in one second do not collide."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from common.system import Cleanup, FstraceError, mount
from conftest import FSTRACE, NOBODY, one_line_error

NOBODY_UID = 65534


def fstrace(*args, cwd=None):
    return subprocess.run([FSTRACE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300, cwd=cwd)


def snapshot(d):
    """Every file under d with its bytes and mode: what an attack must leave as it was."""
    out = {}
    for dirpath, _, files in os.walk(d):
        for name in files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, d)] = (open(p, "rb").read(), os.lstat(p).st_mode)
    return out


@pytest.fixture
def victim_dir():
    """A directory only root can reach, holding what root's results would overwrite."""
    d = tempfile.mkdtemp(prefix="fstrace-victim-")
    os.chmod(d, 0o700)
    for name in ("summary.json", "results.fst", "report.html", "precious"):
        with open(os.path.join(d, name), "w") as f:
            f.write("precious-%s" % os.urandom(8).hex())
        os.chmod(os.path.join(d, name), 0o600)
    yield d
    shutil.rmtree(d)


def owned_dir(uid, mode):
    d = tempfile.mkdtemp(prefix="fstrace-owned-")
    os.chown(d, uid, uid)
    os.chmod(d, mode)
    return d


@pytest.fixture
def nobodys_dir():
    """A directory the user nobody owns (not sticky: the kernel's protected_symlinks never steps in)."""
    d = owned_dir(NOBODY_UID, 0o755)
    yield d
    shutil.rmtree(d)


@pytest.fixture
def sticky_dir():
    """Root's sticky directory every user may write to, as /tmp."""
    d = owned_dir(0, 0o1777)
    yield d
    shutil.rmtree(d)


def as_nobody(*argv):
    subprocess.run(NOBODY + list(argv), check=True)


def plant_link(target, link):
    as_nobody("ln", "-s", target, link)
    assert os.lstat(link).st_uid == NOBODY_UID


@pytest.mark.bpf
def test_partial_swapped_for_a_link_during_attach(nobodys_dir, victim_dir):
    """-o under a directory nobody owns: once attach says it is attached (its collector has its spools open),
    nobody moves OUT.partial away and puts a link to root's directory in its place, so that what root writes
    "in" it afterwards (results.fst linked into place, summary.json) would land there.  Root refuses the
    directory at once (nobody could swap any name in it), before it is ever attached; nothing of root's changes."""
    before = snapshot(victim_dir)
    out = os.path.join(nobodys_dir, "out")
    p = subprocess.Popen([FSTRACE, "attach", "--duration", "3", "--interval", "0", "-o", out],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "attached" in line:
            as_nobody("sh", "-c", 'mv "$1" "$1.moved" && ln -s "$2" "$1"', "-", out + ".partial", victim_dir)
            break
    rest_out, rest_err = p.communicate(timeout=300)
    p.stderr = "".join(seen) + rest_err
    assert snapshot(victim_dir) == before
    line = one_line_error(p)
    assert nobodys_dir in line and "owned by uid %d" % NOBODY_UID in line, line
    assert os.listdir(nobodys_dir) == []


@pytest.mark.bpf
@pytest.mark.parametrize("planted", ["link", "dir"])
def test_default_results_directory_planted_by_another_user(sticky_dir, victim_dir, planted):
    """The default fstrace-results/ made beforehand by nobody in a sticky directory (as /tmp/fstrace-results):
    a link to root's directory, or a directory of nobody's (in which nobody could swap any name).  Refused."""
    before = snapshot(victim_dir)
    planted_path = os.path.join(sticky_dir, "fstrace-results")
    if planted == "link":
        plant_link(victim_dir, planted_path)
    else:
        as_nobody("mkdir", "-m", "0777", planted_path)
    p = fstrace("attach", "--duration", "1", "--interval", "0", cwd=sticky_dir)
    assert snapshot(victim_dir) == before
    line = one_line_error(p)
    assert planted_path in line and "uid %d" % NOBODY_UID in line, line
    if planted == "dir":
        assert os.listdir(planted_path) == []


@pytest.mark.bpf
def test_results_are_not_world_readable(sticky_dir):
    """Results hold other users' commands and paths: 0750 and 0640, whatever wrote them, and nobody can read
    them (checked as nobody, not only by mode bits)."""
    out = os.path.join(sticky_dir, "out")
    p = fstrace("attach", "--duration", "1", "--interval", "0", "-o", out)
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o750
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs]
    assert {"results.fst", "summary.json"} <= {os.path.basename(f) for f in files}
    for f in files:
        st = os.lstat(f)
        assert stat.S_ISLNK(st.st_mode) or st.st_mode & 0o027 == 0, (f, oct(st.st_mode))
    assert subprocess.run(NOBODY + ["cat", os.path.join(out, "summary.json")], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0


@pytest.mark.bpf
def test_cache_another_user_controls_is_refused(tmp_path, nobodys_dir):
    """A --cache nobody owns, with the image's name planted as a link to a root-only file and a record whose
    path names it: ensure_image neither chmods the file nor hands its path on to be set up and mounted."""
    from workloads import images
    victim = tmp_path / "secret"
    victim.write_bytes(b"root only\n")
    os.chmod(victim, 0o600)
    src = tmp_path / "tree"
    src.mkdir()
    (src / "a").write_bytes(b"public\n" * 100)
    os.chmod(tmp_path, 0o755)
    imgs = os.path.join(nobodys_dir, "images")
    as_nobody("mkdir", imgs)
    o = images.normalize("erofs", {})
    name = images.image_name("erofs", o, "t/tree", images.tool_version("erofs"))
    plant_link(str(victim), os.path.join(imgs, name))
    rec = {"fs": "erofs", "options": o, "label": images.label("erofs", o), "path": str(victim), "bytes": 10,
           "verified": {"checked": True}}
    as_nobody(sys.executable, "-c", "import json, sys; json.dump(json.loads(sys.argv[1]), open(sys.argv[2], 'w'))",
              json.dumps(rec), os.path.join(imgs, name + ".json"))
    with pytest.raises(FstraceError) as e:
        images.ensure_image("erofs", {}, str(src), "t/tree", nobodys_dir)
    assert nobodys_dir in str(e.value) and "uid %d" % NOBODY_UID in str(e.value)
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600

    line = one_line_error(fstrace("run", "--fs", "erofs", "--workload", "randread", "--cache", nobodys_dir,
                                  "-o", str(tmp_path / "out")))
    assert "cache" in line and nobodys_dir in line, line
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.bpf
@pytest.mark.parametrize("where", ["nobodys", "sticky"])
def test_html_through_a_directory_link_is_refused(real, tmp_path, victim_dir, where, nobodys_dir, sticky_dir):
    """report --html DIR/LINK/report.html, LINK nobody's link to root's directory (in nobody's directory, or in
    a sticky one as /tmp): refused, nothing written there."""
    from forge import results_dir
    run = results_dir(str(tmp_path / "run"), real[1])
    base = nobodys_dir if where == "nobodys" else sticky_dir
    plant_link(victim_dir, os.path.join(base, "link"))
    before = snapshot(victim_dir)
    p = fstrace("report", run, "--html", os.path.join(base, "link", "report.html"))
    assert snapshot(victim_dir) == before
    line = one_line_error(p)
    assert "uid %d" % NOBODY_UID in line, line


@pytest.mark.unit
@pytest.mark.parametrize("mode,why", [(0o777, "writable by others"), (0o775, "writable by its group")])
def test_verified_dir_refuses_a_directory_others_may_write(tmp_path, mode, why):
    from common.safedir import VerifiedDir
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, mode)
    with pytest.raises(FstraceError) as e:
        VerifiedDir.open(str(d / "out"), create=True)
    assert str(d) in str(e.value) and why in str(e.value)
    assert os.listdir(d) == []
    os.chmod(d, 0o755)
    with VerifiedDir.open(str(d / "out"), create=True) as v:
        v.write_atomic("f", "text")
    assert stat.S_IMODE(os.stat(d / "out" / "f").st_mode) == 0o640


@pytest.mark.bpf
def test_default_results_names_in_one_second_do_not_collide(tmp_path, monkeypatch):
    """Two runs started in the same second get the same default name: the second takes NAME-2, not a refusal."""
    from cli.commands import default_outdir
    from cli.directories import ResultsDir
    monkeypatch.chdir(tmp_path)
    name = default_outdir("attach", "all")
    first = ResultsDir(name, numbered=True)
    with first as partial:
        second = ResultsDir(name, numbered=True)
        assert second.outdir == os.path.abspath(name) + "-2"
        with second:
            pass
        open(os.path.join(partial, "f"), "w").close()
    assert os.path.isdir(name) and os.path.isdir(name + "-2")


@pytest.mark.unit
def test_mount_error_keeps_every_line(tmp_path, monkeypatch):
    """mount's reason comes first and its last line is only a hint to read dmesg: both are kept."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mount").write_text("#!/bin/sh\necho 'mount: /mnt: wrong fs type, bad option, bad superblock' >&2\n"
                                "echo '       dmesg(1) may have more information after failed mount.' >&2\n"
                                "exit 32\n")
    os.chmod(fake / "mount", 0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (fake, os.environ["PATH"]))
    with pytest.raises(FstraceError) as e, Cleanup() as c:
        mount("/dev/loop99", str(tmp_path / "mnt"), "erofs", c)
    assert "wrong fs type" in str(e.value) and "dmesg" in str(e.value)


@pytest.mark.bpf
def test_truncated_cached_image_is_rebuilt(tmp_path):
    """An image cut short after its record was written (a full disk, a copy): rebuilt, not reused forever."""
    from workloads import images
    src = tmp_path / "tree"
    src.mkdir()
    (src / "a").write_bytes(os.urandom(200000))
    cache = str(tmp_path / "cache")
    rec = images.ensure_image("erofs", {}, str(src), "t/trunc", cache)
    size = os.path.getsize(rec["path"])
    with open(rec["path"], "r+b") as f:
        f.truncate(size // 2)
    said = []
    again = images.ensure_image("erofs", {}, str(src), "t/trunc", cache, said.append)
    assert [m for m in said if m.startswith("image: building")], said
    assert os.path.getsize(again["path"]) == again["bytes"] == size


@pytest.mark.bpf
def test_collector_alone_refuses_a_directory_another_user_controls(nobodys_dir):
    """The collector run by itself (on a box without Python) writes its results only in a directory of its user's
    that no one else may write to (or root's sticky one): not in nobody's, where the name could be swapped."""
    from conftest import COLLECTOR
    p = subprocess.run([COLLECTOR, "-o", os.path.join(nobodys_dir, "box.fst"), "--duration", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode != 0
    assert "%s/box.fst" % nobodys_dir in p.stderr and "owned by another user" in p.stderr, p.stderr
    assert os.listdir(nobodys_dir) == []


@pytest.mark.bpf
def test_the_sudo_users_own_directory_is_trusted(nobodys_dir, monkeypatch):
    """sudo fstrace run in the invoking user's own checkout: that user's directory is theirs to write in, not
    another user's; for anyone else it is refused."""
    from common.safedir import VerifiedDir
    with pytest.raises(FstraceError):
        VerifiedDir.open(nobodys_dir)
    monkeypatch.setenv("SUDO_UID", str(NOBODY_UID))
    with VerifiedDir.open(os.path.join(nobodys_dir, "fstrace-results"), create=True) as d:
        d.write_atomic("f", "text")
    assert stat.S_IMODE(os.stat(os.path.join(nobodys_dir, "fstrace-results", "f")).st_mode) == 0o640
