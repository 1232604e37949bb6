"""Directories root may write in, held open by fd.

Root writes results, reports and cache files in directories a user names (-o, --html, --cache), and some of those
can be under the control of another local user: a directory they own or may write to lets them swap a name for a
symbolic link between fstrace's check and its write, and root would write (or chmod, or read) wherever it points.
A VerifiedDir is reached from / one component at a time with O_NOFOLLOW, each component checked on its open fd:
only a directory no other user can change is trusted, so no name under it can be swapped afterwards, and every
file is then made relative to its fd, exclusively, under a random name, and renamed into place.

Trusted: owned by root, by this process's user or by the user sudo ran fstrace for (SUDO_UID), and writable by no
one else (no group or other write bit), or else sticky and owned by root (/tmp): then only its entries owned by a
trusted user may be entered, and only links owned by a trusted user followed.
"""
import contextlib
import errno
import os
import stat

from common.system import FstraceError, shown

RESULTS_DIR_MODE = 0o750  # traces of other users' commands: not for every user to read
RESULTS_FILE_MODE = 0o640
_MAX_LINKS = 40  # as the kernel's own path walk


def trusted_uids():
    uids = {0, os.geteuid()}
    if os.geteuid() == 0 and os.environ.get("SUDO_UID", "").isdigit():
        uids.add(int(os.environ["SUDO_UID"]))
    return uids


def why_untrusted(st, uids=None):
    """Why a directory with stat st is not one others cannot change, or None."""
    uids = trusted_uids() if uids is None else uids
    if st.st_uid not in uids:
        return "owned by uid %d" % st.st_uid
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (st.st_mode & stat.S_ISVTX and st.st_uid == 0):
        return "writable by %s" % ("others" if st.st_mode & stat.S_IWOTH else "its group")
    return None


def refuse(path, why, doing="write under"):
    return FstraceError("refusing to %s %s: %s" % (doing, shown(path), why))


class VerifiedDir:
    """A directory held open (fd) that no untrusted user can change; path is for messages and for commands that
    take a path (every component of it is trusted, so it names this directory for as long as it is open)."""

    def __init__(self, fd, path):
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path, create=False, mode=0o755, doing="write under"):
        """path walked from / (create: missing directories made, with mode); FstraceError if any component is
        one another user could change."""
        path = os.path.abspath(path)
        todo = [c for c in path.split("/") if c]
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        at, links, uids = "/", 0, trusted_uids()
        try:
            why = why_untrusted(os.fstat(fd), uids)
            if why:
                raise refuse(path, "/ is " + why, doing)
            while todo:
                name = todo.pop(0)
                if name == ".":
                    continue
                if name == "..":  # lexically: at is a verified chain, its parent is too
                    at = os.path.dirname(at)
                    os.close(fd)
                    fd = cls.open(at).fd
                    continue
                sub = os.path.join(at, name)
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    if not create:
                        raise refuse(path, "%s does not exist" % shown(sub), doing)
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, mode, dir_fd=fd)
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    if st.st_uid not in uids:
                        raise refuse(path, "%s is a symbolic link owned by uid %d" % (shown(sub), st.st_uid), doing)
                    links += 1
                    if links > _MAX_LINKS:
                        raise refuse(path, "too many levels of symbolic links", doing)
                    target = os.readlink(name, dir_fd=fd)
                    todo = [c for c in target.split("/") if c] + todo
                    if target.startswith("/"):
                        os.close(fd)
                        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                        at = "/"
                    continue
                try:
                    nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ENOTDIR, errno.ELOOP):
                        raise refuse(path, "%s is not a directory" % shown(sub), doing)
                    raise refuse(path, "%s: %s" % (shown(sub), e.strerror), doing)
                os.close(fd)
                fd, at = nfd, sub
                why = why_untrusted(os.fstat(fd), uids)
                if why:
                    raise refuse(path, "%s is %s" % (shown(sub), why), doing)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def join(self, name):
        return os.path.join(self.path, name)

    def lstat(self, name):
        """name's own stat (a link is not followed), or None if there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def mkdir(self, name, mode=RESULTS_DIR_MODE):
        """A new directory name (it must not exist), opened: the caller's own."""
        os.mkdir(name, mode, dir_fd=self.fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        os.fchmod(fd, mode)  # whatever the umask took away or left
        return VerifiedDir(fd, self.join(name))

    def write_atomic(self, name, data, mode=RESULTS_FILE_MODE):
        """name replaced whole by data (str or bytes): a temporary of a random name made exclusively, then
        renamed over name; a link at name is refused, not replaced (a user may have meant it)."""
        st = self.lstat(name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise FstraceError("%s is a symbolic link; refusing to write through it" % shown(self.join(name)))
        for _ in range(100):
            tmp = ".%s.%s.tmp" % (name, os.urandom(6).hex())
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                             dir_fd=self.fd)
                break
            except FileExistsError:
                continue
        else:
            raise FstraceError("cannot make a temporary file in %s" % shown(self.path))
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), mode)
                f.write(data.encode() if isinstance(data, str) else data)
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            if isinstance(e, OSError):
                raise FstraceError("cannot write %s: %s" % (shown(self.join(name)), e.strerror))
            raise

    def chmod(self, name, mode):
        """name's mode set, name opened here without following a link (a link is refused)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=self.fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise FstraceError("%s is a symbolic link; refusing to change its mode" % shown(self.join(name)))
            raise
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def rename(self, old, new):
        os.rename(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)


def trusted_cache(path):
    """The cache directory (made if missing) as a VerifiedDir: what root finds there (images, their records,
    datasets) is used as it is, so only a directory no other user can change is."""
    return VerifiedDir.open(path, create=True, doing="use the cache")


def narrow_modes(vdir):
    """Every file and directory under vdir made no wider than RESULTS_DIR_MODE / RESULTS_FILE_MODE's reach (group
    may read, others nothing), whoever wrote it (the collector, the workload, a renderer): each opened relative to
    its directory's fd without following a link (links are left as they are: a mode is never a link's)."""
    mask = ~0o027
    os.fchmod(vdir.fd, os.fstat(vdir.fd).st_mode & mask & 0o7777)
    for _, dirs, files, dfd in os.fwalk(dir_fd=vdir.fd):
        for name in dirs + files:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENXIO):  # a link; a socket (no mode of ours to narrow)
                    continue
                raise
            try:
                os.fchmod(fd, os.fstat(fd).st_mode & mask & 0o7777)
            finally:
                os.close(fd)
