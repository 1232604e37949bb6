"""The user documentation: README, docs/, the manual pages, `make install`, the bash completion and the EXAMPLES
of --help.  Each is checked against what it describes (bpf/records.h, the argument parser, the collector's own
--help, the installed tree), not against a copy kept here.  None of these tests loads BPF or mounts anything."""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import COLLECTOR, ROOT
from forge import forge

README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
MAN_PAGES = [os.path.join(ROOT, "man", "fstrace.8"), os.path.join(ROOT, "man", "fstrace-collect.8")]
RECORDS_H = os.path.join(ROOT, "bpf", "records.h")


def read(path):
    with open(path) as f:
        return f.read()


def markdown_files():
    return [README] + sorted(glob.glob(os.path.join(DOCS, "*.md")))


def parser():
    from cli.commands import build_parser
    return build_parser()


def commands(p):
    import argparse
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices


def option_strings(p):
    import argparse
    return [o for a in p._actions if a.help != argparse.SUPPRESS for o in a.option_strings]


# ---- README and docs/ ----

@pytest.mark.unit
def test_readme_fits_on_one_screen_and_a_half():
    n = len(read(README).splitlines())
    assert n <= 200, "README.md has %d lines; at most 200 (the rest belongs in docs/)" % n


def anchors(path):
    """The anchors GitHub gives a markdown file's headings: lowercased, punctuation other than '-' and '_'
    dropped, spaces as '-', a repeated heading numbered -1, -2, ..."""
    seen, out = {}, set()
    in_code = False
    for line in read(path).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6} (.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else "%s-%d" % (slug, n))
    return out


def local_links(path):
    """(target, anchor) of every link of a markdown file that is not a URL."""
    text = re.sub(r"```.*?```", "", read(path), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        yield file, anchor


@pytest.mark.unit
@pytest.mark.parametrize("path", markdown_files(), ids=os.path.basename)
def test_links_resolve_to_files_and_anchors(path):
    links = list(local_links(path))
    if path == README:
        assert any(f.startswith("docs/") for f, _ in links), "README links into docs/"
    for file, anchor in links:
        target = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        assert os.path.exists(target), "%s links to %s, which does not exist" % (os.path.basename(path), file)
        if anchor:
            assert target.endswith(".md"), "%s: anchor #%s into a file that is not markdown" % (path, anchor)
            assert anchor in anchors(target), "%s links to %s#%s: no such heading there (has: %s)" % (
                os.path.basename(path), file or "itself", anchor, ", ".join(sorted(anchors(target))))


@pytest.mark.unit
@pytest.mark.parametrize("path", markdown_files(), ids=os.path.basename)
def test_no_run_logs_or_history(path):
    """User documentation says what is, with the command and machine behind each number: no commit ids, no
    narration of how the code got here."""
    text = read(path)
    commit_id = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"  # hex with letters and digits, not a number
    for pattern in (r"\b(?:at|commit|since|before|round)\s+" + commit_id, r"\bthis round\b",
                    r"\bearlier this\b", r"\bprevious round\b", r"\bthe issue's targets\b"):
        m = re.search(pattern, text, re.I)
        assert not m, "%s: %r reads as a run log or history" % (os.path.basename(path), m.group(0))


GENERATED = os.path.join(DOCS, "generated")


def make_targets():
    """{target: its recipe} of the Makefile's rules (a rule's recipe: its tab-indented lines)."""
    out, target = {}, None
    for line in read(os.path.join(ROOT, "Makefile")).splitlines():
        m = re.match(r"([\w.-]+):(?!=)", line)
        if m:
            target = m.group(1)
            out.setdefault(target, "")
        elif line.startswith("\t") and target:
            out[target] += line + "\n"
        elif line.strip() and not line.startswith("\t"):
            target = None
    return out


@pytest.mark.unit
@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(GENERATED, "*.md"))), ids=os.path.basename)
def test_generated_page_names_the_make_target_that_renders_it(path):
    """A page under docs/generated/ says which make target regenerates it, and that target exists and renders
    it with scripts/docs_generated.py (a page copied by hand has no target that writes it)."""
    from scripts.docs_generated import MADE_BY
    pattern = re.escape(MADE_BY).replace(re.escape("%s"), r"([\w-]+)")
    m = re.search(pattern, read(path))
    assert m, "%s does not say which make target generates it (%r)" % (os.path.basename(path), MADE_BY)
    recipe = make_targets().get(m.group(1))
    assert recipe is not None, "%s names make %s, which the Makefile does not have" % (path, m.group(1))
    stem = re.sub(r"-seed\d+$", "", os.path.basename(path)[:-3])  # seeds-seed000.md: the recipe's seeds-$$p.md
    assert "scripts.docs_generated" in recipe and "docs/generated/%s" % stem in recipe, \
        "make %s does not render %s with scripts/docs_generated.py" % (m.group(1), os.path.relpath(path, ROOT))


@pytest.mark.unit
@pytest.mark.parametrize("path", markdown_files(), ids=os.path.basename)
def test_links_to_generated_pages_are_generated_pages(path):
    """A page that links a run's generated output links one that exists and was generated (names its target)."""
    from scripts.docs_generated import MADE_BY
    for file, _ in local_links(path):
        target = os.path.normpath(os.path.join(os.path.dirname(path), file))
        if os.path.dirname(target) != GENERATED:
            continue
        assert os.path.exists(target), "%s links to %s, which is not generated (make docs-...)" % (
            os.path.basename(path), file)
        assert MADE_BY.split("%s")[0] in read(target), "%s links to %s, which is not a generated page" % (
            os.path.basename(path), file)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["seeds", "vmtest", "findings", "overhead"])
def test_generated_page_renderer_refuses_missing_results_in_one_line(kind, tmp_path):
    """Rendering a page from results that are not there writes no page and says so in one line."""
    out = tmp_path / "page.md"
    p = subprocess.run([sys.executable, "-m", "scripts.docs_generated", kind, str(tmp_path / "none"), "--command",
                        "x", "-o", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0 and not out.exists(), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr


# Names the docs quote that are the kernel's, not the tree's (functions and syscalls no program of ours names):
# every other code name in backticks must be found in the tree (below).
KERNEL_NAMES = {"page_cache_ra_unbounded", "copy_file_range"}
TREE_DIRS = ("analysis", "bpf", "cli", "common", "dashboards", "docs", "man", "scripts", "tests", "user",
             "vmlinux", "workloads", ".ci")


def tracked_files():
    # safe.directory: the unit lane also runs as a user who does not own the checkout
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", ROOT, "ls-files"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.split()


def quoted_code_names(text):
    """The code names a page quotes in backticks: ("path", p) for a path in the tree or a source file's name,
    ("name", n) for an identifier that can only be code (snake_case, a call `f()`, or SHOUTING_CASE)."""
    for q in re.findall(r"`([^`\n]+)`", text):
        q = q.strip()
        path = re.sub(r"(#[\w-]+|:\d+(-\d+)?)$", "", q)  # an anchor or a line number after a path
        if re.fullmatch(r"[\w.-]+(/[\w.-]+)+/?", path) and path.split("/")[0] in TREE_DIRS:
            yield "path", path.rstrip("/")
        elif re.fullmatch(r"[\w-]+\.(c|h|py|sh|js)", path):
            yield "path", path
        elif re.fullmatch(r"[A-Za-z]\w*(\(\))?", q) and ("_" in q or q.endswith("()")) \
                and not q.startswith("CONFIG_"):  # kernel build options are the kernel's
            yield "name", q.removesuffix("()")


@pytest.mark.unit
def test_code_names_the_docs_quote_exist_in_the_tree():
    """Every function, variable, macro and file a page quotes as code is in the tree, so that a rename or a
    removal cannot leave the docs pointing at nothing."""
    files = [f for f in tracked_files() if os.path.isfile(os.path.join(ROOT, f))]
    basenames = {os.path.basename(f) for f in files}
    dirs = {os.path.dirname(f) for f in files}
    code = "\n".join(read(os.path.join(ROOT, f)) for f in files
                      if not f.endswith(".md") and not f.startswith(("vmlinux/", "tests/data/")))
    words = set(re.findall(r"\w+", code))
    missing = []
    for path in markdown_files():
        for kind, q in quoted_code_names(read(path)):
            if kind == "path":
                found = q in files or q in dirs or ("/" not in q and q in basenames)
            else:
                found = q in words or q in KERNEL_NAMES
            if not found:
                missing.append("%s: `%s`" % (os.path.relpath(path, ROOT), q))
    assert not missing, "quoted as code but not in the tree: " + ", ".join(missing)


def xmacro_fields(name):
    """[(C type, field name, size)] of `#define name(F, S)` in bpf/records.h, in order."""
    m = re.search(r"#define %s\(F, S\)((?:.*\\\n)*.*)" % re.escape(name), read(RECORDS_H))
    assert m, "bpf/records.h has no X-macro %s" % name
    sizes = {"__u8": 1, "__s8": 1, "__u16": 2, "__s16": 2, "__u32": 4, "__s32": 4, "__u64": 8, "__s64": 8}
    out = []
    for kind, args in re.findall(r"\b([FS])\(([^)]*)\)", m.group(1)):
        a, b = (x.strip() for x in args.split(","))
        out.append((a, b, sizes[a]) if kind == "F" else ("char", a, int(b)))
    return out


def c_layout(fields):
    """[(offset, size, type, name)] as a C compiler lays the fields out (natural alignment)."""
    off, out = 0, []
    for ctype, name, size in fields:
        align = 1 if ctype == "char" else size
        off += -off % align
        out.append((off, size, ctype, name))
        off += size
    return out


def xmacro(name):
    """[(C name, value, name)] of the X-macro `#define name(E) E(C, v, "n") ...` in bpf/records.h (or E(C, v, n),
    n an identifier, as FST_PARTS has), in value order: what the documentation describes."""
    m = re.search(r"#define %s\(E\)((?:.*\\\n)*.*)" % re.escape(name), read(RECORDS_H))
    assert m, "bpf/records.h has no X-macro %s" % name
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    rows = [(c, int(v, 0), n) for c, v, n in re.findall(r'E\((\w+),\s*([0-9a-fA-Fx]+),\s*"?(\w[^",)]*)"?', body)]
    for nested in re.findall(r"\b(FST_\w+)\(E\)", body):  # an X-macro that includes another
        rows += xmacro(nested)
    return sorted(rows, key=lambda r: r[1])


def record_types():
    return [(n, v) for _, v, n in xmacro("FST_REC_TYPES")]


def doc_record_table(text, name, value):
    m = re.search(r"^### %s \(type %d\).*?\n((?:.*\n)*?)(?=^#|\Z)" % (re.escape(name), value), text, re.M)
    assert m, "docs/results-format.md has no section '### %s (type %d)'" % (name, value)
    rows = re.findall(r"^\| (\d+) \| (\d+) \| `(\w+)` \| `(\w+)` \|", m.group(1), re.M)
    return [(int(o), int(s), t, n) for o, s, t, n in rows]


@pytest.mark.unit
@pytest.mark.parametrize("name,value", record_types())
def test_results_format_record_tables_match_records_h(name, value):
    """Each record type's table in docs/results-format.md is its layout as bpf/records.h defines it."""
    want = c_layout(xmacro_fields("FST_REC_HEADER") + xmacro_fields("FST_%s_FIELDS" % name.upper()))[2:]
    got = doc_record_table(read(os.path.join(DOCS, "results-format.md")), name, value)
    assert got == want, "docs/results-format.md's %s table differs from bpf/records.h:\n doc %s\n  .h %s" % (
        name, got, want)


@pytest.mark.unit
def test_measuring_describes_every_part_and_figure():
    text = read(os.path.join(DOCS, "measuring.md"))
    parts = re.findall(r"^\| \w+ \| `(\w+_ns)` \|", text, re.M)
    assert parts == [n for _, _, n in xmacro("FST_PARTS")], "docs/measuring.md's parts table, in order, is FST_PARTS"
    want = {n for _, _, n in xmacro("FST_FIGURES")}
    figures = set(re.findall(r"^\| `(\w+)` \| `", text, re.M))
    assert figures == want, "docs/measuring.md's figures table is FST_FIGURES: missing %s, extra %s" % (
        sorted(want - figures), sorted(figures - want))


@pytest.mark.unit
def test_results_format_reader_reads_what_the_reference_reader_reads(tmp_path):
    """The minimal reader docs/results-format.md gives reads a format 2 file as analysis/results.py does."""
    from analysis import results
    text = read(os.path.join(DOCS, "results-format.md"))
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    layout = c_layout(xmacro_fields("FST_REC_HEADER") + xmacro_fields("FST_REQ_FIELDS"))
    size = layout[-1][0] + layout[-1][1]
    size += -size % 8
    n = 5
    data = np.random.default_rng(7).integers(0, 256, n * size, dtype=np.uint8).tobytes()
    enums = {e: {str(v): name for _, v, name in xmacro(x)}
             for e, x in (("req_kind", "FST_REQ_KINDS"), ("charge", "FST_CHARGES"))}
    import zlib
    header = {"format": "fstrace-results", "kernel": {"release": "test"}, "collector": {},
              "time": {"start_ns": 0, "end_ns": 1}, "enums": enums,
              "records": {"req": {"type": 1, "size": size, "fields": [
                  {"name": nm, "type": t, "offset": o, "size": s} for o, s, t, nm in layout]}},
              "sections": [{"record": "req", "offset": 0, "count": n, "size": size, "crc32": zlib.crc32(data)}]}
    path = tmp_path / "forged.fst"
    path.write_bytes(forge(header, data))
    ns = {}
    exec(code, ns)
    doc_header, doc_records = ns["read"](str(path))
    ref = results.load(str(path))
    assert doc_header["sections"] == ref.header["sections"]
    assert doc_records["req"].tobytes() == ref["req"].tobytes() == data
    for field in ("ts_start_ns", "ret", "kind", "comm"):
        assert (doc_records["req"][field] == ref["req"][field]).all()


# ---- manual pages ----

@pytest.mark.unit
@pytest.mark.parametrize("page", MAN_PAGES, ids=os.path.basename)
def test_man_page_renders_without_warnings(page):
    g = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", page], stderr=subprocess.PIPE, text=True)
    assert g.returncode == 0 and not g.stderr, "groff warns on %s:\n%s" % (page, g.stderr)
    m = subprocess.run(["man", "--warnings", "-l", page], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=dict(os.environ, MANWIDTH="100"))
    assert m.returncode == 0 and not m.stderr, "man -l %s: %s" % (page, m.stderr)
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "EXAMPLES", "SEE ALSO"):
        assert re.search(r"^%s$" % section, m.stdout, re.M), "%s has no %s section" % (page, section)


def man_text(page):
    """A manual page's source with roff's escaped '-' and '\\' as plain characters and font changes dropped."""
    return re.sub(r"\\f[BIRP]", "", read(page)).replace("\\-", "-").replace("\\e", "\\")


@pytest.mark.unit
def test_fstrace_man_page_describes_every_command_and_option():
    text = man_text(MAN_PAGES[0])
    p = parser()
    for name, sub in commands(p).items():
        assert re.search(r"^\.SS %s$" % name, text, re.M), "man/fstrace.8 has no section for %s" % name
        for opt in option_strings(sub):
            if opt not in ("-h", "--help"):
                assert re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), text), \
                    "man/fstrace.8 does not describe %s %s" % (name, opt)


@pytest.mark.bpf
def test_collect_man_page_describes_every_collector_option():
    out = subprocess.run([COLLECTOR, "--help"], stdout=subprocess.PIPE, text=True, check=True).stdout
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+|-[a-zA-Z])\b", out))
    assert "--records" in options and "-o" in options
    text = man_text(MAN_PAGES[1])
    missing = sorted(o for o in options if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), text))
    assert not missing, "man/fstrace-collect.8 does not describe %s" % ", ".join(missing)


# ---- examples: in --help, the man pages and the README, each parses ----

def example_argvs(text, prefixes):
    """The argv (after the command name) of every example line of text that starts with one of prefixes; a
    description after two or more spaces, and line continuations, are not part of it."""
    text = re.sub(r"\s*\\\n\s*", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        for prefix in prefixes:
            if line.startswith(prefix + " "):
                out.append(shlex.split(re.split(r"\s{2,}", line[len(prefix):].strip())[0]))
    return out


def parses(argv):
    try:
        parser().parse_args(argv)
    except SystemExit as e:
        return "fstrace %s: does not parse (exit %s)" % (" ".join(argv), e.code)
    return None


@pytest.mark.unit
def test_help_has_examples_that_parse():
    from cli.commands import EXAMPLES
    p = parser()
    helps = [p.format_help()] + [sub.format_help() for sub in commands(p).values()]
    for name, text in zip([None] + list(commands(p)), helps):
        assert "\nexamples:\n" in text, "fstrace %s --help has no examples" % (name or "")
        argvs = example_argvs(text, ("sudo fstrace", "fstrace"))
        assert argvs, "fstrace %s --help: no example of the command" % (name or "")
        if name:
            assert all(a[0] == name for a in argvs), "fstrace %s --help shows other commands" % name
        bad = [e for e in map(parses, argvs) if e]
        assert not bad, "\n".join(bad)
    assert set(EXAMPLES) == {None} | set(commands(p))


@pytest.mark.unit
def test_man_and_readme_examples_parse():
    examples = man_text(MAN_PAGES[0]).split("\n.SH EXAMPLES\n")[1].split("\n.SH ")[0]
    argvs = example_argvs(examples, ("sudo fstrace", "fstrace"))
    argvs += example_argvs(read(README), ("sudo ./fstrace",))
    assert len(argvs) >= 8
    bad = [e for e in map(parses, argvs) if e]
    assert not bad, "\n".join(bad)


# ---- bash completion ----

@pytest.fixture(scope="module")
def completion(tmp_path_factory):
    path = tmp_path_factory.mktemp("completion") / "fstrace.bash"
    with open(path, "w") as f:
        subprocess.run([sys.executable, "-m", "scripts.completion"], cwd=ROOT, stdout=f, check=True)
    return str(path)


def complete(script, *words):
    """What the completion offers for `fstrace WORDS...` with the cursor on the last word."""
    words = ("fstrace",) + words
    cmd = "source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _fstrace; printf '%%s\\n' \"${COMPREPLY[@]}\"" % (
        shlex.quote(script), " ".join(shlex.quote(w) for w in words), len(words) - 1)
    return subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, text=True, check=True).stdout.split()


@pytest.mark.unit
def test_completion_parses(completion):
    r = subprocess.run(["bash", "-n", completion], stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0 and not r.stderr, r.stderr


@pytest.mark.unit
def test_completion_completes_commands_options_and_values(completion):
    from workloads import catalog, images
    p = parser()
    assert set(complete(completion, "")) == set(commands(p)) | {"-h", "--help"}
    assert set(complete(completion, "r")) == {c for c in commands(p) if c.startswith("r")}
    for name, sub in commands(p).items():
        assert set(complete(completion, name, "-")) == set(option_strings(sub)), name
    assert set(complete(completion, "run", "--workload", "")) == set(catalog.WORKLOADS)
    assert set(complete(completion, "run", "--fs", "e")) == {f for f in images.FILESYSTEMS if f.startswith("e")}
    assert complete(completion, "run", "--fs", "erofs", "--rec") == ["--records"]


# ---- make install ----

@pytest.mark.bpf
def test_make_install_puts_everything_under_destdir(tmp_path):
    dest = tmp_path / "dest"
    r = subprocess.run(["make", "-s", "-C", ROOT, "install", "DESTDIR=%s" % dest, "PREFIX=/usr"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    prefix = dest / "usr"
    for rel in ("bin/fstrace", "bin/fstrace-collect", "lib/fstrace/cli/__main__.py", "lib/fstrace/analysis/results.py",
                "lib/fstrace/workloads/catalog.py", "lib/fstrace/common/system.py", "lib/fstrace/bpf/records.h",
                "share/man/man8/fstrace.8", "share/man/man8/fstrace-collect.8",
                "share/bash-completion/completions/fstrace", "lib/systemd/system/fstrace-serve.service",
                "lib/fstrace/timeline-packages"):
        assert (prefix / rel).is_file(), "make install did not install %s" % rel
    assert os.access(prefix / "bin" / "fstrace", os.X_OK) and os.access(prefix / "bin" / "fstrace-collect", os.X_OK)
    # every file of the package's directories that is not the collector's C source: modules and the data they read
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "analysis", "cli", "common", "workloads"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    package = [f for f in tracked if not f.endswith((".c", ".h"))]
    assert "analysis/flamegraph.js" in package
    missing = [f for f in package if not (prefix / "lib" / "fstrace" / f).is_file()]
    assert not missing, "make install left out %s" % ", ".join(missing)
    # the package's collector is the installed one, reached by a link that stays inside the prefix
    link = prefix / "lib" / "fstrace" / "build" / "fstrace-collect"
    assert not os.path.isabs(os.readlink(link))
    assert os.path.samefile(link, prefix / "bin" / "fstrace-collect")
    with open(COLLECTOR, "rb") as a, open(prefix / "bin" / "fstrace-collect", "rb") as b:
        assert a.read() == b.read()
    # nothing outside DESTDIR: every installed file is under the prefix
    assert {p.name for p in dest.iterdir()} == {"usr"}
    # from elsewhere than the checkout: the installed package alone, not the checkout's modules
    help_ = subprocess.run([str(prefix / "bin" / "fstrace"), "--help"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert help_.returncode == 0 and "usage: fstrace" in help_.stdout and "examples:" in help_.stdout, help_.stderr
    for name in ("run", "report"):
        sub = subprocess.run([str(prefix / "bin" / "fstrace"), name, "--help"], stdout=subprocess.PIPE, text=True)
        assert sub.returncode == 0 and "usage: fstrace %s" % name in sub.stdout
    collect = subprocess.run([str(prefix / "bin" / "fstrace-collect"), "--help"], stdout=subprocess.PIPE, text=True)
    assert collect.returncode == 0 and "usage: fstrace-collect" in collect.stdout
    man = subprocess.run(["man", "-l", str(prefix / "share" / "man" / "man8" / "fstrace.8")], stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, MANWIDTH="80"))
    assert "fstrace - explain why reads" in man.stdout
    installed = (prefix / "share" / "bash-completion" / "completions" / "fstrace").read_text()
    assert "complete -F _fstrace fstrace" in installed
    shutil.rmtree(dest)
