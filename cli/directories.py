"""A run's temporary directory and its results directory, which appears only when complete."""
import fcntl
import os
import shutil

from cli.devices import mount_of
from common.system import Cleanup, FstraceError, forget_recorded, lock_path


def remove_tree(path):
    """rmtree that fails when the tree is still there (a mount in it that would not go): its record then stays
    for the next start's sweep, which unmounts first (a silent ignore_errors would forget it and leave it)."""
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        raise FstraceError("%s is still there (something in it is still mounted or busy)" % path)


def make_tmpdir(cleanup):
    import tempfile
    tmp = tempfile.mkdtemp(prefix="fstrace-run-")
    cleanup.push("remove " + tmp, remove_tree, tmp, record={"kind": "dir", "path": tmp})
    return tmp


# filesystems results can never be written to, whatever the permission bits say
_NO_RESULTS_FS = {"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "bpf", "securityfs", "configfs"}


class ResultsDir:
    """A results directory that appears only when complete: checked and locked when made (before any work),
    written as DIR.partial/ (recorded, so a SIGKILLed run's is removed by the next start) and renamed to DIR
    on success, removed on failure.  Two runs on the same DIR: the second fails at once."""

    def __init__(self, outdir):
        self.outdir = os.path.abspath(outdir)
        self.partial = self.outdir + ".partial"
        if os.path.islink(self.outdir):
            raise FstraceError("output directory %s is a symbolic link; give the real path" % self.outdir)
        if os.path.exists(self.outdir) and (not os.path.isdir(self.outdir) or os.listdir(self.outdir)):
            raise FstraceError("output directory %s exists and is not empty" % self.outdir)
        parent = os.path.dirname(self.outdir)
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise FstraceError("cannot create %s: %s is not a directory" % (self.outdir, parent))
        m = mount_of(parent)
        if m and m[1] in _NO_RESULTS_FS:
            raise FstraceError("cannot write results under %s (a %s filesystem)" % (m[0], m[1]))
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            raise FstraceError("cannot write results under %s: read-only filesystem" % parent)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise FstraceError("cannot write results under %s: permission denied" % parent)
        self._lock = open(lock_path("out", self.outdir), "a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise FstraceError("output directory %s is being written by another fstrace run" % self.outdir)
        if os.path.lexists(self.partial):
            # not a dead run's (those were swept at start): someone's files, never deleted for them
            self._lock.close()
            raise FstraceError("%s already exists; remove it or choose another -o" % self.partial)

    def __enter__(self):
        try:
            os.makedirs(self.partial)
        except OSError as e:
            self._lock.close()
            raise FstraceError("cannot create %s: %s" % (self.partial, e.strerror))
        self._cleanup = Cleanup()
        self._cleanup.push("remove " + self.partial, remove_tree, self.partial,
                           record={"kind": "dir", "path": self.partial})
        return self.partial

    def __exit__(self, exc_type, *rest):
        try:
            if exc_type is None:
                if os.path.isdir(self.outdir):
                    os.rmdir(self.outdir)  # empty (checked above): replaced by the complete one
                os.rename(self.partial, self.outdir)
                forget_recorded("dir", self.partial)
            else:
                self._cleanup.run()
        finally:
            self._lock.close()
        return False
