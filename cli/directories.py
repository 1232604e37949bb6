"""A run's temporary directory and its results directory, which appears only when complete."""
import atexit
import os
import shutil
import stat

from cli.devices import mount_of
from common.safedir import VerifiedDir, narrow_modes
from common.system import Cleanup, FstraceError, forget_recorded, lock_at, lock_path, unlock_removing


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
    on success, removed on failure.  Two runs on the same DIR: the second fails at once; numbered (a default
    name, made of the time): the second takes DIR-2 (DIR-3...) instead.

    DIR's parent is a VerifiedDir (no other user can change it, so nobody can swap DIR.partial for a link while
    root writes in it), held open: DIR.partial is made and renamed relative to it, and is itself made
    RESULTS_DIR_MODE (results hold other users' commands, paths and stacks)."""

    def __init__(self, outdir, numbered=False):
        outdir = os.path.abspath(outdir)
        parent = os.path.dirname(outdir)
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise FstraceError("cannot create %s: %s is not a directory" % (outdir, parent))
        m = mount_of(parent)
        if m and m[1] in _NO_RESULTS_FS:
            raise FstraceError("cannot write results under %s (a %s filesystem)" % (m[0], m[1]))
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            raise FstraceError("cannot write results under %s: read-only filesystem" % parent)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise FstraceError("cannot write results under %s: permission denied" % parent)
        self.parent = VerifiedDir.open(os.path.dirname(outdir), create=True)
        self._lock = None
        try:
            for n in range(1, 1000 if numbered else 2):
                self.outdir = outdir if n == 1 else "%s-%d" % (outdir, n)
                self.name = os.path.basename(self.outdir)
                self.partial = self.outdir + ".partial"
                why = self._taken()
                if why is None:
                    break
                if not numbered:
                    raise FstraceError(why)
            else:
                raise FstraceError(why)
        except BaseException:
            self.parent.close()
            raise

    def _taken(self):
        """Why self.outdir cannot be this run's (None: it is now, locked), checked relative to the parent."""
        st = self.parent.lstat(self.name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            return "output directory %s is a symbolic link; give the real path" % self.outdir
        # removed by its holder when done (as a cache entry's), so the state directory does not keep one per
        # output directory ever written
        lp = lock_path("out", self.outdir)
        lock = lock_at(lp, blocking=False, wait_s=0.1)
        if lock is None:
            return "output directory %s is being written by another fstrace run" % self.outdir
        # looked at under the lock: a run that held it may have just renamed its complete directory there
        st = self.parent.lstat(self.name)
        why = None
        if st is not None and (stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or self._listdir(self.name)):
            why = "output directory %s exists and is not empty" % self.outdir
        elif self.parent.lstat(self.name + ".partial") is not None:
            # not a dead run's (those were swept at start): someone's files, never deleted for them
            why = "%s already exists; remove it or choose another -o" % self.partial
        if why:
            unlock_removing(lock, lp)
            return why
        self._lock, self._lock_path = lock, lp
        # a claim given up however the command ends, should it never write the directory (a failure before)
        atexit.register(self.release)
        return None

    def release(self):
        """Give up the claim on the directory (its lock file removed); again, or never claimed: nothing."""
        if self._lock is not None:
            unlock_removing(self._lock, self._lock_path)
            self._lock = None
            atexit.unregister(self.release)

    def _listdir(self, name):
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.parent.fd)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def __enter__(self):
        try:
            self.dir = self.parent.mkdir(self.name + ".partial")
        except OSError as e:
            self.release()
            self.parent.close()
            raise FstraceError("cannot create %s: %s" % (self.partial, e.strerror))
        self._cleanup = Cleanup()
        self._cleanup.push("remove " + self.partial, remove_tree, self.partial,
                           record={"kind": "dir", "path": self.partial})
        return self.partial

    def __exit__(self, exc_type, *rest):
        try:
            if exc_type is None:
                narrow_modes(self.dir)
                st = self.parent.lstat(self.name)
                if st is not None and stat.S_ISDIR(st.st_mode):
                    os.rmdir(self.name, dir_fd=self.parent.fd)  # empty (checked above): replaced by the complete one
                self.parent.rename(self.name + ".partial", self.name)
                forget_recorded("dir", self.partial)
            else:
                self._cleanup.run()
        finally:
            self.dir.close()
            self.parent.close()
            self.release()
        return False
