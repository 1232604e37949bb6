"""An image that does not mount, and a user's own dataset."""
import glob
import json
import os

import pytest

from conftest import fstrace, settled_leftovers

pytestmark = pytest.mark.bpf


def test_image_that_fails_to_mount(tmp_path):
    cache = str(tmp_path / "cache")
    before = settled_leftovers()
    fstrace("run", "--fs", "squashfs", "--workload", "tar-meta", "--scale", "0.02", "--cache", cache,
            "-o", str(tmp_path / "ok"))
    # corrupt the cached image in place: same cache key, unmountable bytes
    images = glob.glob(os.path.join(cache, "images", "*.img"))
    assert len(images) == 1
    with open(images[0], "r+b") as f:
        f.write(b"\0" * 8192)
    p = fstrace("run", "--fs", "squashfs", "--workload", "tar-meta", "--scale", "0.02", "--cache", cache,
                "-o", str(tmp_path / "bad"), check=False)
    assert p.returncode == 1
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "cannot mount" in lines[0], p.stderr
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.partial").exists()
    assert settled_leftovers(expect=before) == before


def test_user_dataset_directory(tmp_path):
    src = tmp_path / "tree"
    (src / "a" / "b").mkdir(parents=True)
    sizes = {"a/one": 5000, "a/b/two": 123457, "three": 1}
    for rel, n in sizes.items():
        (src / rel).write_bytes(os.urandom(n))
    out = tmp_path / "out"
    fstrace("run", "--fs", "erofs", "--workload", "cat-all", "--dataset", str(src), "--cache",
            str(tmp_path / "cache"), "-o", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ground_truth"]["read_bytes"] == sum(sizes.values())
    assert summary["reads"]["bytes"] == sum(sizes.values())
    assert summary["run"]["dataset_id"].startswith("user-")


@pytest.fixture(scope="module")
def corrupt_image(tmp_path_factory):
    """A dataset whose erofs lz4hc image (built by a good run) mounts but has its compressed data damaged: the
    workloads' reads fail (EUCLEAN, 117).  (source tree, cache, the run's arguments, leftovers before)."""
    d = tmp_path_factory.mktemp("corrupt")
    src = d / "tree"
    src.mkdir()
    for i in range(8):  # compressible and distinct: lz4hc clusters in the image's data area
        (src / ("f%d" % i)).write_bytes(("file %d line\n" % i).encode() * 30000)
    cache = d / "cache"
    args = ["--fs", "erofs", "--compress", "lz4hc", "--dataset", str(src), "--cache", str(cache)]
    fstrace("run", "--workload", "cat-all", *args, "-o", str(d / "ok"))
    images = glob.glob(os.path.join(str(cache), "images", "*.img"))
    assert len(images) == 1
    size = os.path.getsize(images[0])
    with open(images[0], "r+b") as f:  # past the metadata, before the end: the file data
        f.seek(size // 4)
        f.write(b"\xa5" * (size // 2))
    return src, cache, args, settled_leftovers()


@pytest.mark.parametrize("workload,status", [("cat-all", 123), ("tar-data", 2)])
def test_reads_that_fail_on_a_corrupt_image(tmp_path, corrupt_image, workload, status):
    """The run must not succeed, and its report names the failed reads.  tar-data is tar | cat: the pipeline's
    status is tar's (2), not cat's 0 (pipefail)."""
    _, _, args, before = corrupt_image
    p = fstrace("run", "--workload", workload, *args, "-o", str(tmp_path / "bad"), check=False)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("fstrace: error: workload exited with status %d, failed requests: " % status), p.stderr
    assert "read errno 117 (EUCLEAN)" in last, p.stderr
    assert "FAILED requests: read errno 117 (EUCLEAN)" in p.stdout, p.stdout
    s = json.loads((tmp_path / "bad" / "summary.json").read_text())
    assert s["failed_requests"].get("read errno 117 (EUCLEAN)", 0) > 0
    assert s["run"]["workload_exit_status"] == status
    assert settled_leftovers(expect=before) == before


@pytest.mark.parametrize("command", ["bench", "advise"])
def test_bench_and_advise_stop_on_failed_reads(tmp_path, corrupt_image, command):
    """A time measured over failed reads is not a time: bench and advise stop at the run, one line naming it,
    and leave no bench or advice directory (nothing that reads as a ranking)."""
    _, _, args, before = corrupt_image
    what = ["--workload", "cat-all"] if command == "bench" else ["--mix", "cat-all=1"]
    p = fstrace(command, *what, *args, "--runs", "1", "-o", str(tmp_path / "b"), check=False)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    errors = [l for l in p.stderr.splitlines() if l.startswith("fstrace: error:")]
    assert len(errors) == 1 and errors[0] == p.stderr.strip().splitlines()[-1], p.stderr
    assert "read errno 117 (EUCLEAN)" in errors[0] and "cat-all on erofs-lz4hc" in errors[0], p.stderr
    assert "stopped, nothing kept" in errors[0]
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.partial").exists()
    assert settled_leftovers(expect=before) == before


def test_image_record_cut_short_is_rebuilt(tmp_path, monkeypatch):
    """The cache's IMG.json: written whole or not at all (a full disk, a crash), and one cut short by an
    older version is "no image" (rebuilt), not a JSONDecodeError."""
    from workloads import images
    src = tmp_path / "tree"
    src.mkdir()
    (src / "a").write_bytes(b"some data\n" * 5000)
    cache = str(tmp_path / "cache")
    said = []
    rec = images.ensure_image("erofs", {"compress": "lz4hc"}, str(src), "t/tree", cache, said.append)
    meta = rec["path"] + ".json"
    text = open(meta).read()
    with open(meta, "w") as f:
        f.write(text[:len(text) // 2])
    said.clear()
    again = images.ensure_image("erofs", {"compress": "lz4hc"}, str(src), "t/tree", cache, said.append)
    assert [m for m in said if m.startswith("image: building")], said
    with open(meta) as f:
        assert json.load(f) == again
    assert again["bytes"] == os.path.getsize(again["path"])

    def dump_then_fail(doc, f, **kw):  # the disk fills up halfway through the record
        f.write(json.dumps(doc)[:20])
        raise OSError(28, "No space left on device")
    os.unlink(meta)
    monkeypatch.setattr(json, "dump", dump_then_fail)
    with pytest.raises(OSError):
        images.ensure_image("erofs", {"compress": "lz4hc"}, str(src), "t/tree", cache)
    monkeypatch.undo()
    assert not os.path.exists(meta) and not os.path.exists(meta + ".tmp")
    assert images.ensure_image("erofs", {"compress": "lz4hc"}, str(src), "t/tree", cache)["path"] == again["path"]
