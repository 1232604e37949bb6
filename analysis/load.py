"""Loading results for reports: every file is untrusted.

Reporting reads results made on other machines, as root: damage is one line naming the file and what is wrong
(never a traceback), names in bench.json resolve only inside the directory reported, and text from the files
reaches the terminal only through report.terminal_safe.
"""
import os

from common.system import FstraceError, progress


def error(where, what):
    """An FstraceError naming where (a file) and what is wrong with it, safe to print."""
    from analysis.report import terminal_safe
    return FstraceError(terminal_safe("%s: %s" % (where, what)))


def in_dir(base, name, named_in=None):
    """base/name, refused unless it resolves inside base (a symlink or .. out of a results directory)."""
    from analysis import report, results
    try:
        return results.inside(base, name, named_in)
    except results.ResultsError as e:
        raise FstraceError(report.terminal_safe(str(e)))


def load_results(fst):
    """A loaded results file, or one line naming the file and its damage."""
    from analysis import results
    try:
        res = results.load(fst)
    except FileNotFoundError:
        raise error(fst, "no results file there")
    except OSError as e:
        raise error(fst, "cannot read it: %s" % e.strerror)
    except results.ResultsError as e:
        raise error(fst, e)
    return res


def note_unverified(res, fst):
    """Say so when a file had no checksums to check (after its analysis, so damage stays one line)."""
    if not res.verified:
        progress("%s: results format %d carries no checksums: damage in it cannot be detected"
                 % (fst, res.format))


def load_doc(path, schema):
    """A JSON document of a results or bench directory (summary.json, bench.json), or one line on its damage."""
    from analysis import results
    d = os.path.dirname(path) or "."
    path = in_dir(d, os.path.basename(path))
    try:
        return results.load_json(path, schema)
    except OSError as e:
        raise error(path, "cannot read it: %s" % e.strerror)
    except results.ResultsError as e:
        raise error(path, e)
