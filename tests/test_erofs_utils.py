"""fstrace's own erofs-utils 1.8.6 (built from Debian trixie's source by scripts/setup.sh): every compressor and
-E feature fstrace offers is read back from the image it built (dump.erofs: superblock, extents, file
contents), a tool that lacks a feature is refused by name, and a randread on a zstd image reads what fio says."""
import glob
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import CACHE, FSTRACE, ROOT, SCALE, one_line_error, run_workload, settled_leftovers
from workloads import images

DUMP = os.path.join(ROOT, "build", "erofs-utils", "bin", "dump.erofs")


def dump(*args):
    return subprocess.run([DUMP] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True).stdout


def superblock(image):
    out = dump("-s", image).decode()
    line = {l.split(":", 1)[0].strip(): l.split(":", 1)[1].split() for l in out.splitlines() if ":" in l}
    return set(line.get("Filesystem compr_algs", [])), set(line["Filesystem features"])


@pytest.mark.bpf
def test_build_is_cached_and_is_1_8_6():
    mkfs = images.erofs_tool("mkfs.erofs")
    before = os.stat(mkfs)
    p = subprocess.run([os.path.join(ROOT, "scripts", "build-erofs-utils.sh")], stderr=subprocess.PIPE, text=True,
                       check=True)
    # the second setup is a no-op: it says nothing and leaves the binary it built the first time
    after = os.stat(mkfs)
    assert p.stderr == "" and (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), p.stderr
    out = subprocess.run([images.erofs_tool("mkfs.erofs"), "--version"], stdout=subprocess.PIPE, text=True).stdout
    assert out.splitlines()[0] == "mkfs.erofs (erofs-utils) 1.8.6"
    assert images.tool_version("erofs") == "mkfs.erofs 1.8.6"


@pytest.mark.bpf
@pytest.mark.parametrize("opts,alg", [
    ({"compress": "lz4"}, "lz4"),
    ({"compress": "lz4hc", "level": 9}, "lz4"),
    ({"compress": "lzma", "level": 6}, "lzma"),
    ({"compress": "deflate", "level": 9}, "deflate"),
    ({"compress": "libdeflate", "level": 12}, "deflate"),  # libdeflate writes the same deflate streams
    ({"compress": "zstd", "level": 15, "cluster": 16384}, "zstd"),
    ({"compress": "none"}, None),
    ({"compress": "lz4hc", "features": "fragments", "cluster": 16384}, "lz4"),
    ({"compress": "zstd", "features": "fragments,ztailpacking"}, "zstd"),
    ({"compress": "deflate", "features": "all-fragments"}, "deflate"),
])
def test_each_algorithm_and_feature_is_in_the_image(default_tree, opts, alg):
    src, manifest = default_tree
    rec = images.ensure_image("erofs", opts, src, manifest["id"] + "/tree", CACHE)
    # the version says it is fstrace's build, not the system's 1.5; the path is the checkout's that built the
    # cached image, which may be another checkout of fstrace sharing the cache
    assert rec["tool"] == "mkfs.erofs 1.8.6" and os.path.basename(rec["mkfs_argv"][0]) == "mkfs.erofs"
    assert not rec["mkfs_argv"][0].startswith("/usr/")
    assert images.verify("erofs", rec["options"], rec["path"])["checked"] is True  # also on a cached image
    algs, feats = superblock(rec["path"])
    if alg is None:
        assert "0padding" not in feats and not algs
    else:
        # an image without compr_cfgs names no algorithm: the format then means lz4
        assert "0padding" in feats
        assert algs == {alg} or (alg == "lz4" and not algs and "compr_cfgs" not in feats)
        level = rec["options"].get("level")  # lz4hc gets its default 12 when none was asked for
        assert "-z" + opts["compress"] + ("" if level is None else ",%d" % level) in rec["mkfs_argv"]
    if "features" in opts:
        assert "-E" + opts["features"] in rec["mkfs_argv"]  # the test lists them sorted, as fstrace passes them
        for f in opts["features"].split(","):
            assert images.EROFS_FEATURES[f] in feats
    # the compressed image holds the source's bytes: dump.erofs decompresses a file in user space
    files = sorted(glob.glob(os.path.join(src, "**", "*"), recursive=True), key=lambda p: -os.path.getsize(p))
    big = [p for p in files if os.path.isfile(p) and not os.path.islink(p)][0]
    with open(big, "rb") as f:
        assert dump("--cat", "--path=/" + os.path.relpath(big, src), rec["path"]) == f.read()
    # all-fragments has only the fragments flag: its layout shows it, the biggest file lies wholly in the packed
    # inode (extents with no physical blocks of their own), where plain fragments packs only its tail
    ext = images.erofs_extents(rec["path"], "/" + os.path.relpath(big, src))
    assert ext and os.path.getsize(big) > 65536
    assert all(e[3] == 0 for e in ext) == ("all-fragments" in opts.get("features", ""))


@pytest.mark.bpf
def test_dedupe_shares_the_extents_of_identical_files(tmp_path, default_tree):
    """-Ededupe has no superblock flag: its ground truth is the layout, the copy's extents are the original's."""
    src, _ = default_tree
    d = tmp_path / "src"
    d.mkdir()
    files = [p for p in glob.glob(os.path.join(src, "**", "*"), recursive=True)
             if os.path.isfile(p) and not os.path.islink(p)]
    big = max(files, key=os.path.getsize)
    shutil.copy(big, d / "a")
    shutil.copy(big, d / "b")
    assert os.path.getsize(d / "a") > 65536
    for feats, shared in (("dedupe", True), (None, False)):
        rec = images.ensure_image("erofs", {"compress": "lz4hc", "cluster": 16384, "features": feats}, str(d),
                                  "dedupe-test-%s" % feats, str(tmp_path / "cache"))
        a, b = (images.erofs_extents(rec["path"], "/" + n) for n in ("a", "b"))
        assert a and len(a) == len(b)
        assert ([e[2] for e in a] == [e[2] for e in b]) == shared


@pytest.mark.bpf
@pytest.mark.parametrize("extra,env,msg", [
    # bookworm's 1.5 takes -Efragments without a word and writes none: fstrace refuses it by name
    (["--features", "fragments"], {"FSTRACE_EROFS_UTILS": "/usr"},
     "mkfs.erofs 1.5 cannot write erofs feature fragments (-Efragments: no fragments flag in the superblock)"),
    (["--features", "dedupe"], {"FSTRACE_EROFS_UTILS": "/usr"},
     "mkfs.erofs 1.5 cannot write erofs feature dedupe (-Ededupe: identical files got separate extents)"),
    (["--compress", "zstd"], {"FSTRACE_EROFS_UTILS": "/usr"}, "mkfs.erofs 1.5 cannot compress with zstd"),
    (["--features", "fragmnets"], {}, "unknown erofs feature 'fragmnets'"),
    (["--compress", "zstd", "--level", "23"], {}, "erofs zstd level must be in 0..22, got 23"),
    (["--compress", "none", "--features", "fragments"], {}, "erofs features fragments work on compressed data"),
])
def test_refused_with_one_line(tmp_path, extra, env, msg):
    before = settled_leftovers()
    p = subprocess.run([FSTRACE, "run", "--fs", "erofs", "--workload", "randread", "--scale", SCALE, "--cache", CACHE,
                        "-o", str(tmp_path / "out")] + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=dict(os.environ, **env))
    assert msg in one_line_error(p)
    assert not (tmp_path / "out").exists()
    assert settled_leftovers(expect=before) == before


@pytest.mark.bpf
def test_features_are_for_erofs_only(tmp_path):
    p = subprocess.run([FSTRACE, "run", "--fs", "squashfs", "--features", "fragments", "--workload", "randread",
                        "--scale", SCALE, "--cache", CACHE, "-o", str(tmp_path / "out")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "--features is for --fs erofs" in one_line_error(p)


@pytest.mark.bpf
def test_zstd_randread_reads_what_fio_says(tmp_path_factory):
    from analysis import requests
    out, res, summary = run_workload(tmp_path_factory, "erofs", "randread", "--compress", "zstd")
    gt = summary["ground_truth"]
    reads = requests.reads_of(res)
    counted = requests.counted_requests(res, kinds=("read",))
    assert gt["ios"] > 1000
    assert len(reads) + (counted["count"] if counted else 0) == gt["ios"]
    assert int(reads["ret"].sum()) + (counted["bytes"] if counted else 0) == gt["read_bytes"]
    assert len(np.unique(reads["ino"])) == 1
    run = summary["run"]
    assert run["label"] == "erofs-zstd-C4096" and run["tools"]["mkfs"] == "mkfs.erofs 1.8.6"
    assert os.path.basename(run["mkfs_argv"][0]) == "mkfs.erofs" and not run["mkfs_argv"][0].startswith("/usr/")
    assert "-zzstd" in run["mkfs_argv"]
    algs, _ = superblock(glob.glob(os.path.join(CACHE, "images", "erofs-zstd-C4096-*.img"))[0])
    assert algs == {"zstd"}
    # decompression: measured where fentry/kprobes load, otherwise unavailable with the reason
    dec = summary["decompression"]
    if dec["available"]:
        assert dec["ns"] > 0
    else:
        assert dec["why"]


@pytest.mark.unit
def test_bench_plans_the_seeds_erofs_images_with_fragments():
    """seed 000 builds its compressed erofs images with -Efragments; bench --features does the same for a list."""
    from cli import bench
    plan = bench.plan_configs(preset="seed000")
    erofs = [o for fs, o in plan if fs == "erofs"]
    assert [o["cluster"] for o in erofs if o.get("features") == ["fragments"]] == [4096, 16384, 65536, 131072]
    assert [o for o in erofs if o["compress"] == "none"] == [{"compress": "none", "cluster": 4096}]
    assert all("features" not in o for fs, o in plan if fs == "squashfs")
    plan = bench.plan_configs(fs="erofs", compress="zstd,lzma", cluster="16384", features="dedupe,fragments")
    assert [images.mkfs_argv("erofs", o, "i", "s")[3:6] for _, o in plan] == [
        ["-zzstd", "-C16384", "-Ededupe,fragments"], ["-zlzma", "-C16384", "-Ededupe,fragments"]]


@pytest.mark.bpf
def test_verify_refuses_an_image_of_another_algorithm(default_tree):
    src, manifest = default_tree
    rec = images.ensure_image("erofs", {"compress": "zstd"}, src, manifest["id"] + "/tree", CACHE)
    for other in ({"compress": "lzma", "cluster": 4096}, {"compress": "lz4hc", "level": 12, "cluster": 4096}):
        with pytest.raises(images.FstraceError, match="compressed with zstd, asked for " + other["compress"]):
            images.verify("erofs", other, rec["path"])
    with pytest.raises(images.FstraceError, match="feature fragments was not applied"):
        images.verify("erofs", dict(rec["options"], features=["fragments"]), rec["path"])
