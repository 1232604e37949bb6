"""The shape of the Python code: no import cycles among analysis/, cli/ and common/ (imports inside functions
included: one there hides a cycle, it does not break it), and no function in any of the project's Python
directories (CODE_DIRS: all but tests/) longer than a screen."""
import ast
import graphlib
import os

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("analysis", "cli", "common")
CODE_DIRS = ("analysis", "cli", "common", "scripts", "workloads")  # every directory of the project's Python but tests/
MAX_FUNCTION_LINES = 60
# the functions allowed to be longer, each with its reason
LONG_FUNCTIONS = {
    "cli/commands.py:build_parser": "argparse's declarations of every command and option, one after another",
    "cli/serve.py:serve": "one try/finally that undoes all it sets up (signal handlers, the HTTP server, the "
                          "collector, a private directory) around the loop that serves and follows mounts",
}


def modules():
    """{dotted module name: path} of every module in PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for name in sorted(os.listdir(os.path.join(ROOT, pkg))):
            if name.endswith(".py"):
                mod = pkg if name == "__init__.py" else "%s.%s" % (pkg, name[:-3])
                out[mod] = os.path.join(ROOT, pkg, name)
    return out


def imported(tree, known):
    """The modules of known that a module's code imports anywhere in it (functions included)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # from pkg import mod (a module) or from pkg.mod import name (a name in it)
            names = ["%s.%s" % (node.module, a.name) if "%s.%s" % (node.module, a.name) in known else node.module
                     for a in node.names]
        else:
            continue
        out.update(n for n in names if n in known)
    return out


def import_graph():
    known = modules()
    graph = {}
    for mod, path in known.items():
        with open(path) as f:
            graph[mod] = imported(ast.parse(f.read(), path), known) - {mod}
    return graph


def test_the_import_graph_has_no_cycles():
    graph = import_graph()
    assert graph["analysis.verdict"] >= {"analysis.amplification"}, "the walk misses imports"
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail("import cycle: %s" % " -> ".join(e.args[1]))


def test_the_walk_sees_imports_inside_functions():
    tree = ast.parse("def f():\n    from analysis import summary\n    import cli.runner\n")
    assert imported(tree, {"analysis.summary", "cli.runner", "analysis"}) == {"analysis.summary", "cli.runner"}
    # a cycle through one is found
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).static_order())


def long_functions(path, rel):
    """{"rel:name": lines} of the functions (methods and nested ones too) in a file longer than the limit."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    return {"%s:%s" % (rel, n.name): n.end_lineno - n.lineno + 1 for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES}


def test_the_length_check_walks_every_python_directory():
    """No directory with Python in it (tests/ and the build's own aside) is left out of CODE_DIRS."""
    with_python = {os.path.relpath(d, ROOT).split(os.sep)[0] for d, _, files in os.walk(ROOT)
                   if any(f.endswith(".py") for f in files)}
    assert with_python - {"tests", "build", "."} <= set(CODE_DIRS), with_python


def test_no_function_is_longer_than_a_screen():
    found = {}
    for pkg in CODE_DIRS:
        for name in sorted(os.listdir(os.path.join(ROOT, pkg))):
            if name.endswith(".py"):
                found.update(long_functions(os.path.join(ROOT, pkg, name), "%s/%s" % (pkg, name)))
    too_long = {k: v for k, v in found.items() if k not in LONG_FUNCTIONS}
    assert not too_long, "functions over %d lines (split them): %s" % (MAX_FUNCTION_LINES, too_long)
    assert set(LONG_FUNCTIONS) <= set(found), "allowed, but no longer long: %s" % (set(LONG_FUNCTIONS) - set(found))


def test_the_length_check_counts_a_long_function(tmp_path):
    body = "".join("    x%d = %d\n" % (i, i) for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text("def short():\n    pass\n\n\ndef long():\n" + body)
    assert long_functions(str(tmp_path / "m.py"), "m.py") == {"m.py:long": MAX_FUNCTION_LINES + 1}
