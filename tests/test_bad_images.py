"""An image that does not mount, and a user's own dataset."""
import glob
import json
import os

from conftest import fstrace, settled_leftovers


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


def test_reads_that_fail_on_a_corrupt_image(tmp_path):
    """An image that mounts but whose compressed data is damaged: the workload's reads fail (EUCLEAN, 117).
    The run must not succeed, and its report names the failed reads."""
    src = tmp_path / "tree"
    src.mkdir()
    for i in range(8):  # compressible and distinct: lz4hc clusters in the image's data area
        (src / ("f%d" % i)).write_bytes(("file %d line\n" % i).encode() * 30000)
    cache = tmp_path / "cache"
    args = ["run", "--fs", "erofs", "--compress", "lz4hc", "--workload", "cat-all", "--dataset", str(src),
            "--cache", str(cache)]
    fstrace(*args, "-o", str(tmp_path / "ok"))
    before = settled_leftovers()
    images = glob.glob(os.path.join(str(cache), "images", "*.img"))
    assert len(images) == 1
    size = os.path.getsize(images[0])
    with open(images[0], "r+b") as f:  # past the metadata, before the end: the file data
        f.seek(size // 4)
        f.write(b"\xa5" * (size // 2))
    p = fstrace(*args, "-o", str(tmp_path / "bad"), check=False)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("fstrace: error: workload exited with status") and "read errno 117 (EUCLEAN)" in last, \
        p.stderr
    assert "FAILED requests: read errno 117 (EUCLEAN)" in p.stdout, p.stdout
    s = json.loads((tmp_path / "bad" / "summary.json").read_text())
    assert s["failed_requests"].get("read errno 117 (EUCLEAN)", 0) > 0
    assert settled_leftovers(expect=before) == before
