"""Bad input: one clear line on stderr and a non-zero exit, before anything is set up."""
import subprocess

import pytest

from conftest import FSTRACE, NOBODY, fstrace, one_line_error


@pytest.mark.bpf
def test_unknown_fs():
    line = one_line_error(fstrace("run", "--fs", "ntfs", "--workload", "randread", check=False))
    assert "unknown filesystem 'ntfs'" in line and "erofs" in line


@pytest.mark.bpf
def test_unknown_workload():
    line = one_line_error(fstrace("run", "--fs", "erofs", "--workload", "bonnie", check=False))
    assert "unknown workload 'bonnie'" in line and "randread" in line


@pytest.mark.bpf
def test_not_root():
    p = subprocess.run(NOBODY + [FSTRACE, "run", "--fs", "erofs", "--workload", "randread"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    line = one_line_error(p)
    assert "must run as root" in line and "sudo ./fstrace run" in line


@pytest.mark.bpf
def test_unsupported_compressor_is_named():
    line = one_line_error(fstrace("run", "--fs", "erofs", "--workload", "randread", "--compress", "brotli",
                                  "--scale", "0.05", check=False))
    assert "cannot compress with brotli" in line


@pytest.mark.unit
def test_report_of_missing_dir():
    line = one_line_error(fstrace("report", "/nonexistent/run", check=False))
    assert "no results file" in line


@pytest.mark.bpf
def test_control_characters_of_a_path_are_escaped_in_its_one_line(tmp_path):
    """A path holding a newline or an escape sequence is named as escapes: the error stays one line and drives
    nothing on the terminal."""
    bad = str(tmp_path / "no\nsuch\x1b[2J")
    shown = str(tmp_path / "no\\nsuch\\x1b[2J")
    for argv, says in ((["report", bad], "%s: no results file there" % shown),
                       (["attach", "--mount", bad], "--mount %s: no such path" % shown),
                       (["run", "--fs", "erofs", "--workload", "randread", "--dataset", bad, "--scale", "0.05",
                         "-o", str(tmp_path / "out")], "--dataset %s: no such file or directory" % shown)):
        line = one_line_error(fstrace(*argv, check=False))
        assert line == "fstrace: error: " + says, line
