"""A FUSE file system of one file, disk.img, whose reads the tests hold or cut short: a loop device on it
(direct I/O, so that every block request is one read here) keeps a block request in flight as long as a test
chooses, or sees a short read, which makes the loop driver complete the request in part and requeue the rest.

    slow_disk.py MOUNTPOINT STATE_DIR [--size BYTES] [--hold OFF=SECONDS]... [--hold-until-released OFF]...
                 [--short OFF]...

A read whose range holds OFF is held SECONDS, or until STATE_DIR/release-OFF exists; STATE_DIR/held-OFF appears
when its hold begins.  The first read whose range holds a --short OFF returns half the bytes asked for.  Every read
is logged to STATE_DIR/reads as "OFF SIZE".  The file's bytes: each 8-byte little-endian word holds its own offset
(expected()).  Prints "ready" once mounted; SIGTERM or SIGINT unmounts and ends it (held reads then fail).
The tests take it, with its loop device, through slow_loop()."""
import argparse
import contextlib
import errno
import os
import signal
import stat
import subprocess
import sys

NAME = b"disk.img"


def expected(off, size):
    """The file's bytes [off, off + size)."""
    start = off - off % 8
    words = b"".join((w).to_bytes(8, "little") for w in range(start, off + size, 8))
    return words[off - start:off - start + size]


@contextlib.contextmanager
def slow_loop(d, *server_args, nr_requests=None):
    """(loop device, its kernel dev_t, the server's state directory) of a direct-I/O loop device on
    slow_disk.py's file, served with server_args; everything undone at the end."""
    mnt, state = d / "fuse", d / "state"
    mnt.mkdir()
    state.mkdir()
    srv = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(mnt), str(state)] + list(server_args),
                           stdout=subprocess.PIPE, text=True)
    dev = nr_path = was = None
    try:
        assert srv.stdout.readline() == "ready\n"
        dev = subprocess.run(["losetup", "-f", "--show", "-r", "--direct-io=on", str(mnt / "disk.img")],
                             check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
        name = os.path.basename(dev)
        with open("/sys/block/%s/loop/dio" % name) as f:
            assert f.read().strip() == "1"  # direct I/O: one FUSE read per block request
        if nr_requests:
            # the loop device outlives its binding: its queue depth is put back before it is detached
            nr_path = "/sys/block/%s/queue/nr_requests" % name
            with open(nr_path) as f:
                was = f.read().strip()
            with open(nr_path, "w") as f:
                f.write(str(nr_requests))
        rdev = os.stat(dev).st_rdev
        yield dev, (os.major(rdev) << 20) | os.minor(rdev), str(state)
    finally:
        # each step whatever the one before did: the loop device and the FUSE mount are never left behind
        try:
            srv.terminate()  # held reads fail: nothing waits on the loop device any more
            srv.wait(timeout=60)
        finally:
            try:
                if was:
                    with open(nr_path, "w") as f:
                        f.write(was)
            finally:
                try:
                    if dev:
                        subprocess.run(["losetup", "-d", dev], check=True)
                finally:
                    subprocess.run(["umount", "-l", str(mnt)], stderr=subprocess.DEVNULL)


def main():
    import pyfuse3
    import trio

    ap = argparse.ArgumentParser()
    ap.add_argument("mountpoint")
    ap.add_argument("state")
    ap.add_argument("--size", type=int, default=4 << 20)
    ap.add_argument("--hold", action="append", default=[], help="OFF=SECONDS")
    ap.add_argument("--hold-until-released", type=int, action="append", default=[])
    ap.add_argument("--short", type=int, action="append", default=[])
    a = ap.parse_args()
    holds = {int(o): float(s) for o, s in (h.split("=") for h in a.hold)}
    ino = pyfuse3.ROOT_INODE + 1

    class Disk(pyfuse3.Operations):
        shortened = set()

        async def getattr(self, inode, ctx=None):
            e = pyfuse3.EntryAttributes()
            if inode == pyfuse3.ROOT_INODE:
                e.st_mode, e.st_size = stat.S_IFDIR | 0o755, 0
            elif inode == ino:
                e.st_mode, e.st_size = stat.S_IFREG | 0o444, a.size
            else:
                raise pyfuse3.FUSEError(errno.ENOENT)
            e.st_ino = inode
            e.st_blksize = 4096
            e.st_blocks = (e.st_size + 511) // 512
            return e

        async def lookup(self, parent, name, ctx=None):
            if parent != pyfuse3.ROOT_INODE or name != NAME:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return await self.getattr(ino)

        async def opendir(self, inode, ctx):
            return inode

        async def readdir(self, fh, start_id, token):
            if start_id == 0:
                pyfuse3.readdir_reply(token, NAME, await self.getattr(ino), 1)

        async def open(self, inode, flags, ctx):
            if inode != ino:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return pyfuse3.FileInfo(fh=inode)

        async def read(self, fh, off, size):
            with open(os.path.join(a.state, "reads"), "a") as f:
                f.write("%d %d\n" % (off, size))
            for at in [o for o in list(holds) + a.hold_until_released if off <= o < off + size]:
                open(os.path.join(a.state, "held-%d" % at), "w").close()
                if at in holds:
                    await trio.sleep(holds[at])
                while at not in holds and not os.path.exists(os.path.join(a.state, "release-%d" % at)):
                    await trio.sleep(0.01)
            cut = [o for o in a.short if off <= o < off + size and o not in self.shortened]
            if cut:
                self.shortened.update(cut)
                size //= 2
            return expected(off, max(0, min(size, a.size - off)))

    options = set(pyfuse3.default_options) | {"fsname=fstrace-slow-disk"}
    options.discard("default_permissions")
    pyfuse3.init(Disk(), a.mountpoint, options)

    async def serve():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pyfuse3.main)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                print("ready", flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(serve)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
