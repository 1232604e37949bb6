"""The packages import one another from the checkout's root without changing the module path: pytest.ini's
pythonpath for the tests, `python3 -m` from the root for the scripts, and the launcher's PYTHONPATH for the
command, which must run the same from any directory, whatever that directory holds."""
import ast
import os
import re
import subprocess

import pytest

from conftest import FSTRACE, ROOT

pytestmark = pytest.mark.unit

# a call of insert, append or extend on the module path, or an assignment to it (a slice, +=)
PATH_CHANGE = re.compile(r"\bsys\." r"path\s*(\.\s*(insert|append|extend)\b|\[[^]]*\]\s*=|\+=)")


def test_no_module_changes_the_module_path():
    sources = []
    for d, dirs, files in os.walk(ROOT):
        # the sources, not build/ (its virtual environments' packages are not the project's) nor .git
        dirs[:] = [x for x in dirs if x != "build" and not x.startswith(".")]
        sources += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(".py")]
    assert "cli/commands.py" in sources and "tests/conftest.py" in sources
    changes = []
    for rel in sources:
        with open(os.path.join(ROOT, rel)) as f:
            changes += ["%s:%d: %s" % (rel, n, line.strip()) for n, line in enumerate(f, 1) if PATH_CHANGE.search(line)]
    assert not changes, "\n".join(changes)


def test_launcher_runs_the_checkouts_command_from_any_directory(tmp_path):
    """Run from a directory holding packages of the same names as fstrace's: the command still runs its own
    modules (the caller's directory is not on its module path)."""
    for pkg in ("cli", "common", "analysis"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("raise SystemExit('imported %s from the caller directory')\n"
                                                    % pkg)
    (tmp_path / "cli" / "__main__.py").write_text("raise SystemExit('ran cli from the caller directory')\n")
    p = subprocess.run([FSTRACE, "--help"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 0 and p.stdout.startswith("usage: fstrace"), p.stderr


def test_only_the_command_layer_reads_the_command_line():
    """The argparse namespace stops at cli/commands.py: every room below takes plain values or a small typed
    configuration, so that each function says what it needs."""
    readers = []
    for pkg in ("cli", "analysis", "workloads", "common"):
        for name in sorted(os.listdir(os.path.join(ROOT, pkg))):
            rel = os.path.join(pkg, name)
            if not name.endswith(".py") or rel == os.path.join("cli", "commands.py"):
                continue
            with open(os.path.join(ROOT, rel)) as f:
                tree = ast.parse(f.read(), rel)
            # a parameter named args (not *args), or a namespace made up to call such a function
            for n in ast.walk(tree):
                if isinstance(n, (ast.FunctionDef, ast.Lambda)):
                    params = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
                    readers += ["%s:%d" % (rel, a.lineno) for a in params if a.arg == "args"]
                elif isinstance(n, ast.Attribute) and n.attr in ("Namespace", "SimpleNamespace"):
                    readers.append("%s:%d" % (rel, n.lineno))
    assert not readers, "the command line's namespace read below the command layer: " + ", ".join(readers)


def test_no_test_file_imports_from_another():
    """Shared fixtures and helpers are in conftest.py or a helper module: a test file imported by another would
    have its tests collected, and its fixtures used, from two places."""
    tests = os.path.join(ROOT, "tests")
    imports = []
    for name in sorted(os.listdir(tests)):
        if name.endswith(".py"):
            with open(os.path.join(tests, name)) as f:
                tree = ast.parse(f.read(), name)
            imports += ["%s:%d" % (name, n.lineno) for n in ast.walk(tree)
                        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("test_")
                        or isinstance(n, ast.Import) and any(a.name.startswith("test_") for a in n.names)]
    assert not imports, "test files importing test files: " + ", ".join(imports)


def _strip_c_comments(text):
    """C source without its comments (block and line), each replaced by as many newlines as it held, so that
    line numbers stay."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


# a CO-RE shim: a question asked of the running kernel's BTF, or a ___flavour of a kernel structure defined
CORE_SHIM = re.compile(r"\bbpf_core_(field_exists|type_exists|enum_value_exists|field_size|enum_value|type_size)\b"
                       r"|\bstruct\s+\w+___\w+\s*\{")


def test_core_shims_only_in_compat():
    """Every read of a kernel structure whose layout changed between kernels is in bpf/compat.bpf.h, where each
    names the kernel change it follows: a shim elsewhere is one the next kernel change would be missed in."""
    bpf = os.path.join(ROOT, "bpf")
    sources = sorted(n for n in os.listdir(bpf) if n.endswith((".c", ".h")))
    assert "compat.bpf.h" in sources and "block.bpf.c" in sources
    shims = []
    for name in sources:
        if name == "compat.bpf.h":
            continue
        with open(os.path.join(bpf, name)) as f:
            code = _strip_c_comments(f.read())
        shims += ["bpf/%s:%d: %s" % (name, code.count("\n", 0, m.start()) + 1, m.group(0))
                  for m in CORE_SHIM.finditer(code)]
    assert not shims, "CO-RE shims outside bpf/compat.bpf.h: " + ", ".join(shims)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _cycles(graph):
    """The cycles of a directed graph ({node: [nodes it points to]}), each as "a -> b -> a"."""
    cycles, state = [], {}  # state: 1 on the walk's path, 2 done

    def walk(node, path):
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                walk(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    return cycles


def test_no_include_cycle():
    """The collector's and the kernel side's quoted includes form no cycle: a header that includes, through
    others, itself compiles only by its guard's accident of order."""
    dirs = [os.path.join(ROOT, "user"), os.path.join(ROOT, "bpf")]  # the Makefile's -Ibpf; build/ is generated
    graph = {}
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                path = os.path.join(d, name)
                with open(path) as f:
                    code = _strip_c_comments(f.read())
                targets = []
                for inc in INCLUDE.findall(code):
                    found = [os.path.join(x, inc) for x in [d] + dirs if os.path.exists(os.path.join(x, inc))]
                    if found:  # else generated (skeletons) or outside the tree (vmlinux.h)
                        targets.append(os.path.relpath(found[0], ROOT))
                graph[os.path.relpath(path, ROOT)] = targets
    assert "bpf/common.bpf.h" in graph["bpf/block.bpf.c"]
    cycles = _cycles(graph)
    assert not cycles, "#include cycles: " + "; ".join(cycles)


def _collector_room_graph():
    """{room: rooms it uses}: a room of user/ is NAME.c with NAME.h, and it uses every other room whose header
    its .c or .h includes (directly: a header included through another is that other room's use)."""
    user = os.path.join(ROOT, "user")
    rooms = {os.path.splitext(n)[0] for n in os.listdir(user) if n.endswith((".c", ".h"))}
    graph = {}
    for room in sorted(rooms):
        uses = set()
        for ext in (".c", ".h"):
            path = os.path.join(user, room + ext)
            if os.path.exists(path):
                with open(path) as f:
                    uses |= {os.path.splitext(inc)[0] for inc in INCLUDE.findall(_strip_c_comments(f.read()))}
        graph[room] = sorted((uses & rooms) - {room})
    return graph


def test_collector_rooms_form_no_circle():
    """No room of the collector uses, through others, itself (probes.c once read program statistics that
    stacks.c and window.c borrowed from it while it called them): each leaf a room needs is a room of its own
    (progstats.c), so that a room can be read, tested and changed from the ones below it alone."""
    graph = _collector_room_graph()
    assert "progstats" in graph["stacks"] and "probes" in graph["window"]
    cycles = _cycles(graph)
    assert not cycles, "rooms of user/ in a circle: " + "; ".join(cycles)


# C functions (the collector's and the kernel side's) no longer than a screen; the allowed ones with their reason
MAX_C_FUNCTION_LINES = 80
LONG_C_FUNCTIONS = {
    "bpf/req_sched.bpf.h:handle_switch": "sched_switch's handler, the hottest path of the kernel side: split into "
                                         "inline helpers, clang allocates its registers differently, and the "
                                         "verifier's walk and the measured cost are of this shape",
}
C_FUNCTION = re.compile(r"^(?P<sig>[A-Za-z_][^;{}()]*?\b(?P<name>\w+)\s*\([^;{}]*\))\s*\n\{\n(?P<body>.*?)^\}$",
                        re.M | re.S)


def long_c_functions(text, rel):
    """{"rel:name": lines} of the functions in C source text (each opened by a "{" line and closed by a "}" line at
    the left margin, as clang-format lays them out) longer than MAX_C_FUNCTION_LINES, signature included."""
    out = {}
    for m in C_FUNCTION.finditer(text):
        n = m.group(0).count("\n") + 1
        if n > MAX_C_FUNCTION_LINES:
            out["%s:%s" % (rel, m.group("name"))] = n
    return out


def test_no_c_function_is_longer_than_a_screen():
    found = {}
    for d in ("user", "bpf"):
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            if name.endswith((".c", ".h")):
                with open(os.path.join(ROOT, d, name)) as f:
                    found.update(long_c_functions(f.read(), "%s/%s" % (d, name)))
    too_long = {k: v for k, v in found.items() if k not in LONG_C_FUNCTIONS}
    assert not too_long, "C functions over %d lines (split them): %s" % (MAX_C_FUNCTION_LINES, too_long)
    assert set(LONG_C_FUNCTIONS) <= set(found), "allowed, but no longer long: %s" % (set(LONG_C_FUNCTIONS) - set(found))


def test_the_c_length_check_counts_a_long_function():
    body = "".join("\tx%d = %d;\n" % (i, i) for i in range(MAX_C_FUNCTION_LINES))
    text = "static int short_one(void)\n{\n\treturn 0;\n}\n\nint long_one(int a,\n\t     int b)\n{\n" + body + "}\n"
    assert long_c_functions(text, "f.c") == {"f.c:long_one": MAX_C_FUNCTION_LINES + 4}
