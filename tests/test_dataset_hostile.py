"""A user's tarball or directory is untrusted input: nothing is written outside the cache, nothing but regular
files, directories and links inside the tree is unpacked, and nothing made from it is readable by a user who
could not read its source."""
import io
import os
import pathlib
import shutil
import stat
import subprocess
import tarfile
import tempfile

import pytest

from common.system import FstraceError
from workloads import dataset, images


def _tar(path, members, mode=0o644):
    """A tarball of (TarInfo fields, data) built by hand: tarfile writes whatever names and types it is given."""
    with tarfile.open(path, "w") as t:
        for fields, data in members:
            ti = tarfile.TarInfo(fields.pop("name"))
            for k, v in fields.items():
                setattr(ti, k, v)
            if data is not None:
                ti.size = len(data)
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    os.chmod(path, mode)
    return str(path)


def _file(name, data=b"data" * 100, mode=0o644):
    return ({"name": name, "mode": mode}, data)


def _everything_under(path):
    out = set()
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, n), path))
    return out


@pytest.fixture
def outside(tmp_path):
    """A directory the hostile members aim at, beside the cache, and the cache."""
    o = tmp_path / "outside"
    o.mkdir()
    return o, tmp_path / "cache"


HOSTILE = {
    "absolute": lambda o: [_file("ok.txt"), _file(str(o / "ABS"))],
    "dotdot": lambda o: [_file("ok.txt"), _file("../../../../../../../../" + str(o).lstrip("/") + "/DOTDOT")],
    "dotdot-inside-name": lambda o: [_file("ok.txt"), _file("a/../../" + o.name + "/DOTDOT")],
    "hardlink-outside": lambda o: [_file("ok.txt"), ({"name": "shadow", "type": tarfile.LNKTYPE,
                                                      "linkname": "/etc/shadow"}, None)],
    "hardlink-dotdot": lambda o: [_file("ok.txt"), ({"name": "shadow", "type": tarfile.LNKTYPE,
                                                     "linkname": "../../../../../etc/shadow"}, None)],
    "symlink-absolute": lambda o: [_file("ok.txt"), ({"name": "esc", "type": tarfile.SYMTYPE,
                                                      "linkname": str(o)}, None), _file("esc/WRITTEN")],
    "symlink-dotdot": lambda o: [_file("ok.txt"), ({"name": "d/esc", "type": tarfile.SYMTYPE,
                                                    "linkname": "../.."}, None), _file("d/esc/WRITTEN")],
    # each link stays inside by its own text; together they resolve outside
    "symlink-chain": lambda o: [_file("ok.txt"), ({"name": "sub/s", "type": tarfile.SYMTYPE, "linkname": ".."}, None),
                                ({"name": "sub/t", "type": tarfile.SYMTYPE, "linkname": "s/../.."}, None)],
    # a link inside, then a member beneath it: tar would write through it
    "beneath-symlink": lambda o: [_file("sub/ok.txt"),
                                  ({"name": "d", "type": tarfile.SYMTYPE, "linkname": "sub"}, None),
                                  _file("d/WRITTEN")],
    "char-device": lambda o: [_file("ok.txt"), ({"name": "null", "type": tarfile.CHRTYPE, "devmajor": 1,
                                                 "devminor": 3}, None)],
    "block-device": lambda o: [_file("ok.txt"), ({"name": "sda", "type": tarfile.BLKTYPE, "devmajor": 8,
                                                  "devminor": 0}, None)],
    "fifo": lambda o: [_file("ok.txt"), ({"name": "pipe", "type": tarfile.FIFOTYPE}, None)],
    "setuid": lambda o: [_file("ok.txt"), _file("usr/bin/su", b"\x7fELF" + bytes(100), 0o4755)],
    "setgid": lambda o: [_file("ok.txt"), _file("usr/bin/wall", b"\x7fELF" + bytes(100), 0o2755)],
}


@pytest.mark.bpf
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tarball_is_refused_and_writes_nothing_outside(tmp_path, outside, case):
    o, cache = outside
    tarball = _tar(tmp_path / "evil.tar", HOSTILE[case](o))
    before = _everything_under(str(tmp_path))
    with pytest.raises(FstraceError) as e:
        dataset.from_user(tarball, str(cache))
    msg = str(e.value)
    assert "\n" not in msg and "refused: member" in msg, msg
    assert os.listdir(str(o)) == [], "written outside the cache: %s" % os.listdir(str(o))
    assert not os.path.exists("/var/tmp" + str(o) + "/DOTDOT")
    # nothing left in the cache that could be taken for an unpacked dataset, nothing new anywhere else
    left = _everything_under(str(cache / "datasets")) if (cache / "datasets").exists() else set()
    assert left == set(), left
    assert _everything_under(str(tmp_path)) - before <= {"cache", "cache/datasets"}


@pytest.mark.bpf
def test_member_name_with_a_newline_is_shown_on_one_line(tmp_path, outside):
    o, cache = outside
    tarball = _tar(tmp_path / "evil.tar", [_file("ok.txt"), ({"name": "dev\nnull", "type": tarfile.CHRTYPE}, None)])
    with pytest.raises(FstraceError) as e:
        dataset.from_user(tarball, str(cache))
    assert "\n" not in str(e.value) and "dev\\nnull" in str(e.value)


@pytest.mark.bpf
def test_a_well_formed_tarball_unpacks_with_its_links_inside(tmp_path, outside):
    o, cache = outside
    tarball = _tar(tmp_path / "good.tar", [
        ({"name": "./", "type": tarfile.DIRTYPE, "mode": 0o755}, None),
        ({"name": "usr/bin", "type": tarfile.DIRTYPE, "mode": 0o755}, None),
        _file("usr/bin/tool", b"\x7fELF" + bytes(5000), 0o755),
        ({"name": "usr/bin/alias", "type": tarfile.LNKTYPE, "linkname": "usr/bin/tool"}, None),
        ({"name": "usr/bin/rel", "type": tarfile.SYMTYPE, "linkname": "tool"}, None),
        ({"name": "etc/private", "type": tarfile.DIRTYPE, "mode": 0o500}, None),
        _file("etc/private/key", b"secret" * 100, 0o600),
        _file("etc/group-writable", b"x" * 100, 0o666),
    ])
    root, m = dataset.from_user(tarball, str(cache))
    tool = os.lstat(os.path.join(root, "usr/bin/tool"))
    alias = os.lstat(os.path.join(root, "usr/bin/alias"))
    assert tool.st_ino == alias.st_ino and stat.S_IMODE(tool.st_mode) == 0o755
    assert os.readlink(os.path.join(root, "usr/bin/rel")) == "tool"
    assert stat.S_IMODE(os.lstat(os.path.join(root, "etc/private")).st_mode) == 0o500
    assert stat.S_IMODE(os.lstat(os.path.join(root, "etc/private/key")).st_mode) == 0o600
    # no write bit for group or other on anything unpacked
    assert stat.S_IMODE(os.lstat(os.path.join(root, "etc/group-writable")).st_mode) == 0o644
    assert os.listdir(str(o)) == []
    # the same tarball again: the cached tree, the same id
    assert dataset.from_user(tarball, str(cache)) == (root, m)


@pytest.mark.bpf
def test_a_private_tarball_unpacks_where_others_cannot_look(tmp_path, outside):
    o, cache = outside
    tarball = _tar(tmp_path / "mine.tar", [_file("a.txt", b"x" * 1000)], mode=0o600)
    root, _ = dataset.from_user(tarball, str(cache))
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


def _nobody_can_read(path):
    return subprocess.run(["runuser", "-u", "nobody", "--", "head", "-c", "1", path],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


@pytest.fixture
def open_dir():
    """A directory every user may search (pytest's own are root's alone), so that only the image's mode decides."""
    d = tempfile.mkdtemp(prefix="fstrace-test-modes-")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d)


@pytest.mark.bpf
@pytest.mark.parametrize("fs", ["erofs", "squashfs"])
def test_image_of_a_private_tree_is_private(open_dir, fs):
    """A tree with one file only its owner may read gives an image only root may read; a public tree, a public
    image.  Checked as the user nobody, not only by mode bits."""
    tmp_path = open_dir
    cache = tmp_path / "cache"
    public = tmp_path / "public"
    (public / "d").mkdir(parents=True)
    (public / "d" / "f").write_bytes(b"open" * 1000)
    rec = images.ensure_image(fs, {}, str(public), "public-tree", str(cache))
    assert stat.S_IMODE(os.stat(rec["path"]).st_mode) == 0o644
    assert _nobody_can_read(rec["path"])

    private = tmp_path / "private"
    (private / "d").mkdir(parents=True)
    (private / "d" / "f").write_bytes(b"open" * 1000)
    (private / "d" / "secret").write_bytes(b"hidden" * 1000)
    os.chmod(str(private / "d" / "secret"), 0o600)
    rec = images.ensure_image(fs, {}, str(private), "private-tree", str(cache))
    assert stat.S_IMODE(os.stat(rec["path"]).st_mode) == 0o600
    assert not _nobody_can_read(rec["path"])
    # an image cached by a version without the rule is narrowed when it is next used
    os.chmod(rec["path"], 0o644)
    images.ensure_image(fs, {}, str(private), "private-tree", str(cache))
    assert stat.S_IMODE(os.stat(rec["path"]).st_mode) == 0o600


@pytest.mark.bpf
def test_directory_with_a_fifo_or_device_is_refused(tmp_path):
    d = tmp_path / "tree"
    d.mkdir()
    (d / "f").write_bytes(b"x" * 100)
    os.mkfifo(str(d / "pipe"))
    with pytest.raises(FstraceError) as e:
        dataset.from_user(str(d), str(tmp_path / "cache"))
    assert "pipe is a FIFO" in str(e.value)
    os.unlink(str(d / "pipe"))
    os.mknod(str(d / "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(FstraceError) as e:
        dataset.from_user(str(d), str(tmp_path / "cache"))
    assert "null is a character device" in str(e.value)
    os.unlink(str(d / "null"))
    (d / "su").write_bytes(b"x" * 100)
    os.chmod(str(d / "su"), 0o4755)
    with pytest.raises(FstraceError) as e:
        dataset.from_user(str(d), str(tmp_path / "cache"))
    assert "su has a set-user-id" in str(e.value)


@pytest.mark.unit
def test_directory_symlink_out_is_not_followed(tmp_path):
    """A link to a file outside the tree is hashed as a link (its target's name), never read: the dataset's id
    does not change with the outside file, and a link to a FIFO outside does not hang the hash."""
    d = tmp_path / "tree"
    d.mkdir()
    (d / "f").write_bytes(b"x" * 100)
    out = tmp_path / "outside.txt"
    out.write_bytes(b"one")
    os.symlink(str(out), str(d / "link"))
    os.mkfifo(str(tmp_path / "fifo"))
    os.symlink(str(tmp_path / "fifo"), str(d / "to-fifo"))
    _, m1 = dataset.from_user(str(d), str(tmp_path / "cache"))
    out.write_bytes(b"two, longer")
    _, m2 = dataset.from_user(str(d), str(tmp_path / "cache"))
    assert m1["id"] == m2["id"]


@pytest.mark.unit
def test_images_mount_nosuid_nodev():
    for fs in ("erofs", "squashfs", "btrfs"):
        for writable in (False, True):
            opts = images.mount_options(fs, images.normalize(fs, {}), writable=writable).split(",")
            assert "nosuid" in opts and "nodev" in opts
