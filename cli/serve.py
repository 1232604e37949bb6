"""fstrace serve: the collector keeps only in-kernel aggregates (no record stream) and writes a Prometheus text
exposition of them, with the same figures in OpenMetrics text beside it (user/expose.c); this serves the last
complete version of one of them on /metrics: OpenMetrics to a scraper whose Accept header asks for it (Prometheus
does), the classic text format to any other.  A private exposition is written when a scrape finds it older than
--update-interval (SIGHUP to the collector); a --textfile one every --update-interval, for its other readers.

The collector runs in its own session, so a terminal's Ctrl-C or hangup reaches only this process, which then
stops it in order (SIGTERM: it detaches its programs and exits 0) or asks it to rewrite its file (SIGHUP).
"""
import contextlib
import dataclasses
import http.server
import os
import select
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time

from cli.runner import die_with_parent
from cli.devices import mount_of, mounts
from cli.directories import remove_tree
from cli.signals import stop_process
from common.system import Cleanup, FstraceError, proc_start

# where serve keeps its private exposition files when it can: in memory.  The collector rewrites both at each
# scrape (at most every --update-interval), each a new file renamed over the last; on a disk that is a file
# created, written back (ext4 writes out a file renamed over another at the rename) and an inode freed each time,
# I/O and flash wear on the traced system itself
MEMORY_FS = ("tmpfs", "ramfs")
EXPOSITION_ROOTS = ("/run", "/dev/shm")
# what serve runs the collector with beyond the filters (scripts/bench_overhead.py measures exactly these)
COLLECTOR_OPTIONS = ["--records", "none", "--no-io-records", "--sample-hz", "0"]
# and with a private exposition: a file only a scrape reads is written for a scrape (Server.fresh), not every
# second of weeks of a 15 s or 1 min scrape interval, twice (both formats) each time
ON_DEMAND_OPTIONS = ["--exposition-on-demand"]
DEFAULT_LISTEN = "127.0.0.1:9464"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# a scraper holds a thread while it is connected: bounded in number and in time, so slow or stuck clients can
# neither exhaust the process nor keep one forever.  CLIENT_TIMEOUT_S bounds each read and write; a client that
# trickles its request a byte at a time gets REQUEST_TIMEOUT_S from its connect to send all of it, and
# CONNECTION_TIMEOUT_S in all, its reply included.  At MAX_CONNECTIONS a new connection closes the oldest one
# still sending its request: whoever holds many connections open cannot keep a scraper out.
MAX_CONNECTIONS = 256
CLIENT_TIMEOUT_S = 10
REQUEST_TIMEOUT_S = 10
CONNECTION_TIMEOUT_S = 30
READY_TIMEOUT_S = 120
# how long a scrape waits for the collector to rewrite a stale private exposition before the last one is served
# (its counters are cumulative: a late one is still right, only older); far under Prometheus's 10 s scrape timeout
REFRESH_TIMEOUT_S = 2
# and how long after such a miss scrapes get the last one at once, without asking: a collector that cannot write
# (a full filesystem, a stall) would otherwise hold each of many queued scrapes REFRESH_TIMEOUT_S in turn
REFRESH_RETRY_S = 10
STOP_TIMEOUT_S = 30


def add_arguments(p):
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="ADDR:PORT",
                   help="where to serve /metrics (default %(default)s; port 0: any free port, printed)")
    p.add_argument("--textfile", metavar="FILE",
                   help="keep the exposition in FILE (e.g. node_exporter's textfile directory, *.prom) rather "
                        "than a private temporary file; it is replaced atomically")
    p.add_argument("--per-comm", action="store_true",
                   help="also count requests per task name: at most 64 (name, filesystem, kind) series, later ones "
                        "together under comm=\"\" (one more map update per request)")
    p.add_argument("--update-interval", type=float, default=1.0, metavar="SEC",
                   help="how old an exposition served may be: a scrape finding an older one has the collector "
                        "rewrite it first; with --textfile, how often it is rewritten (default %(default)s)")


def wants_openmetrics(accept):
    """Whether an Accept header prefers OpenMetrics text to the classic format: it names
    application/openmetrics-text (any version: 1.0.0 is what is served) with a q at least that of text/plain
    (or text/*, */*).  Without the header, or with only */*, the classic format, as before."""
    q_om = q_text = 0.0
    for rng in (accept or "").split(","):
        parts = [x.strip() for x in rng.split(";")]
        mtype = parts[0].lower()
        q = 1.0
        for param in parts[1:]:
            k, _, v = param.partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        if mtype == "application/openmetrics-text":
            q_om = max(q_om, q)
        elif mtype in ("text/plain", "text/*", "*/*"):
            q_text = max(q_text, q)
    return q_om > 0 and q_om >= q_text


def parse_listen(s):
    """ADDR:PORT (an IPv6 address in brackets) -> (addr, port)."""
    host, sep, port = (s or "").rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise FstraceError("--listen wants ADDR:PORT (e.g. %s), got %r" % (DEFAULT_LISTEN, s))
    return host, int(port)


class Handler(http.server.BaseHTTPRequestHandler):
    timeout = CLIENT_TIMEOUT_S  # each read and write of a client that stalls fails after this
    protocol_version = "HTTP/1.0"  # one request per connection: an idle keep-alive cannot pin a thread
    server_version = "fstrace-serve"

    def do_GET(self):
        self.reply(body=True)

    def do_HEAD(self):
        self.reply(body=False)

    def reply(self, body):
        self.server.replying(self.connection)
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served")
            return
        om = wants_openmetrics(self.headers.get("Accept"))
        self.server.fresh(self.server.openmetrics if om else self.server.exposition)
        try:
            # never through a symlink: the collector renames a regular file there (textfile_path)
            fd = os.open(self.server.openmetrics if om else self.server.exposition, os.O_RDONLY | os.O_NOFOLLOW)
            with open(fd, "rb") as f:
                data = f.read()
        except OSError as e:
            self.send_error(503, "exposition not readable: %s" % e.strerror)
            return
        self.send_response(200)
        self.send_header("Content-Type", OPENMETRICS_TYPE if om else CONTENT_TYPE)
        self.send_header("Vary", "Accept")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, fmt, *args):
        pass  # one line per scrape would fill a journal over weeks


class Connection:
    """A client connection the server holds: when it came, whether its request is read, whether it is closed."""

    def __init__(self, now):
        self.since, self.replying, self.closed = now, False, False


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr, exposition, openmetrics, max_age_s=None, progress=None):
        """max_age_s: rewritten on demand (a private exposition), when a scrape finds the file older than that."""
        self.exposition, self.openmetrics = exposition, openmetrics
        self.max_age_s, self.progress = max_age_s, progress
        # the collector that rewrites on demand (serve sets it; None once it has exited), one rewrite at a time
        self.collector, self.refresh_lock, self.refresh_late, self.late_since = None, threading.Lock(), False, 0.0
        # every connection from its accept to its close; the lock also orders a close by its handler thread
        # against a shutdown from here (a closed socket's number may already be another client's)
        self.conns, self.lock = {}, threading.Lock()
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, Handler)

    def _cut(self, request, conn):
        """End a held connection: its handler's next read or write fails at once and its thread ends."""
        if not conn.closed:
            conn.closed = True
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)

    def use_collector(self, proc):
        """proc (None: none) rewrites on demand from now on; what was said of the last one is not its."""
        with self.refresh_lock:
            self.collector, self.refresh_late, self.late_since = proc, False, 0.0

    def fresh(self, path):
        """With max_age_s, path no older than that: the collector asked to rewrite it (SIGHUP) and waited for, at
        most REFRESH_TIMEOUT_S; the last one stays served where it does not (said once, until it does again), and
        for REFRESH_RETRY_S after without asking.  A scrape that finds another's rewrite under way waits for it and
        takes it."""
        if self.max_age_s is None:
            return
        with self.refresh_lock:
            proc = self.collector
            try:
                before = os.stat(path)
            except OSError:
                before = None
            # the file's age by the wall clock, its time's: one stepped back makes the file look younger for as
            # long, so a negative age is no age
            age = time.time() - before.st_mtime if before else -1
            if 0 <= age < self.max_age_s or not proc or proc.poll() is not None:
                return
            if self.refresh_late and time.monotonic() < self.late_since + REFRESH_RETRY_S:
                return
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + REFRESH_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.002)
                try:
                    now = os.stat(path)
                except OSError:
                    continue
                # each rewrite is a new file renamed over the last (user/expose.c write_atomic)
                if not before or (now.st_ino, now.st_mtime_ns) != (before.st_ino, before.st_mtime_ns):
                    if self.refresh_late:
                        self.refresh_late = False
                        self.progress("serve: the collector rewrites the exposition on demand again")
                    return
            if proc.poll() is not None:
                return
            self.late_since = time.monotonic()
            if not self.refresh_late:
                self.refresh_late = True
                self.progress("serve: the collector did not rewrite the exposition within %d s of a scrape; the "
                              "last one is served" % REFRESH_TIMEOUT_S)

    def process_request(self, request, client_address):
        now = time.monotonic()
        with self.lock:
            held = [(c.since, id(r), r, c) for r, c in self.conns.items() if not c.closed]
            if len(held) >= MAX_CONNECTIONS:
                reading = [x for x in held if not x[3].replying]
                # the handlers of connections cut a moment ago are still ending: never more threads than twice
                # the bound, whatever the rate of new connections
                if not reading or len(self.conns) >= 2 * MAX_CONNECTIONS:
                    super().shutdown_request(request)
                    return
                _, _, r, c = min(reading)
                self._cut(r, c)
            self.conns[request] = Connection(now)
        try:
            super().process_request(request, client_address)
        except Exception:
            self.shutdown_request(request)
            raise

    def replying(self, request):
        """The request of this connection is read: it is no longer one to close for a new one."""
        with self.lock:
            conn = self.conns.get(request)
            if conn:
                conn.replying = True

    def shutdown_request(self, request):
        with self.lock:
            conn = self.conns.pop(request, None)
            if conn:
                conn.closed = True
            super().shutdown_request(request)

    def service_actions(self):
        """Between accepts (at least every poll interval): cut the connections past their time."""
        now = time.monotonic()
        with self.lock:
            for r, c in self.conns.items():
                if now - c.since > CONNECTION_TIMEOUT_S or not c.replying and now - c.since > REQUEST_TIMEOUT_S:
                    self._cut(r, c)

    def server_close(self):
        with self.lock:  # the threads it waits for end at once
            for r, c in self.conns.items():
                self._cut(r, c)
        super().server_close()

    def handle_error(self, request, client_address):
        pass  # a client gone mid-response (broken pipe, reset): nothing to do, the next scrape is unaffected


def watch_mounts(chosen, state, progress):
    """Say when a traced mount goes away or comes back (the collector's fstrace_filesystem_mounted says it too);
    True when one is back from another device, which the filters must be resolved again to follow."""
    now = mounts()
    moved = False
    for m in chosen:
        here = [x for x in now if x[0] == m[0]]
        st = "mounted" if any(x[3] == m[3] for x in here) else ("other" if here else "gone")
        if state.get(m[0], "mounted") != st:
            if st == "gone":
                progress("serve: %s is no longer mounted; its counters stay, fstrace_filesystem_mounted is 0"
                         % m[0])
            elif st == "other":
                progress("serve: %s is mounted again from another device (%d:%d): following it, counters restart"
                         % ((m[0],) + next(x[3] for x in here)))
                moved = True
            else:
                progress("serve: %s is mounted again from the same device; counting on" % m[0])
        state[m[0]] = st
    return moved


def wait_ready(proc, fd, stop):
    """Until the collector writes "ready" on fd; False if it exited or we were told to stop first."""
    left = READY_TIMEOUT_S
    while left > 0 and not stop.is_set():
        if select.select([fd], [], [], 0.5)[0]:
            return os.read(fd, 16) == b"ready\n"
        if proc.poll() is not None:
            return False
        left -= 0.5
    return False


def ended(rc):
    """How a collector ended, for a message (rc: its Popen returncode): a signal leaves no message of its own."""
    if rc < 0:
        return "was killed by %s" % signal.Signals(-rc).name
    return "exited %d; see its message above" % rc


@dataclasses.dataclass(frozen=True)
class Settings:
    """serve's own options: --listen as given (for messages), --update-interval (the most a private exposition
    served may be stale, seconds between rewrites of a --textfile), --textfile (None: a private file), --per-comm,
    and whether --pid chose processes to trace (once they are gone their final counters stay served)."""
    listen: str
    update_interval: float
    textfile: str | None = None
    per_comm: bool = False
    follows_pids: bool = False


def start_collector(collector_argv, path, om_path, settings, stop):
    """The collector, aggregate-only, rewriting path and om_path; None if told to stop while it started."""
    r, w = os.pipe()
    argv = collector_argv + COLLECTOR_OPTIONS + (["--per-comm"] if settings.per_comm else []) + [
        "--exposition", path, "--openmetrics", om_path, "--exposition-interval", str(settings.update_interval)] + (
        [] if settings.textfile else ON_DEMAND_OPTIONS) + ["--ready-fd", str(w)]
    # should this process be SIGKILLed, the collector is told (SIGTERM: it detaches and exits), and the next
    # fstrace start kills it should it still be there (it is recorded as a run's collector is)
    proc = subprocess.Popen(argv, pass_fds=(w,), start_new_session=True, stdin=subprocess.DEVNULL,
                            preexec_fn=die_with_parent)
    proc.record = Cleanup()
    proc.record.push("forget the collector", lambda: None,
                     record={"kind": "process", "pid": proc.pid, "start": proc_start(proc.pid)})
    os.close(w)
    try:
        ready = wait_ready(proc, r, stop)
    finally:
        os.close(r)
    if ready:
        return proc
    if not stop.is_set():
        # its end of the pipe closed as it exits, a moment before it can be reaped: not hung, exited
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    hung = proc.poll() is None
    stop_collector(proc, lambda msg: None)
    if stop.is_set():
        return None
    if hung:
        raise FstraceError("the collector did not attach in %d s; stopped" % READY_TIMEOUT_S)
    raise FstraceError("the collector did not start: it %s" % ended(proc.returncode))


def textfile_path(textfile):
    """--textfile's absolute path, refused (FstraceError) where someone else could swap it for a symlink: in a
    directory another user can write, unless it is root's and sticky (as /tmp: then no one can remove what the
    collector writes there, and the file itself must not be a symlink).  The collector writes a new file of a
    random name and renames it over the path in any case (user/expose.c write_atomic)."""
    path = os.path.abspath(textfile)
    parent = os.path.dirname(path)
    try:
        st = os.stat(parent)
    except OSError:
        raise FstraceError("--textfile %s: no such directory %s" % (textfile, parent)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise FstraceError("--textfile %s: no such directory %s" % (textfile, parent))
    others_write = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0) or \
        st.st_uid not in (0, os.geteuid())
    if others_write and not (st.st_mode & stat.S_ISVTX and st.st_uid == 0):
        raise FstraceError("--textfile %s: other users can write its directory %s (mode %04o, owner uid %d, group "
                           "gid %d): they could replace the file by a symlink; use a directory only root can write"
                           % (textfile, parent, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid))
    if others_write and os.path.islink(path):
        raise FstraceError("--textfile %s: a symlink, in a directory others can write: refused" % textfile)
    return path


def exposition_root():
    """The directory serve makes its private one in: the first of systemd's RuntimeDirectory= (the packaged unit's
    /run/fstrace, where its read-only system leaves /run itself unwritable) and EXPOSITION_ROOTS that is a directory
    root can write on an in-memory filesystem (MEMORY_FS); else, or when TMPDIR names one, None (the temporary
    directory)."""
    runtime = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if not runtime and os.environ.get("TMPDIR"):
        return None
    for root in ([runtime] if runtime else []) + list(EXPOSITION_ROOTS):
        on = mount_of(root) if os.path.isdir(root) and os.access(root, os.W_OK | os.X_OK) else None
        if on and on[1] in MEMORY_FS:
            return root
    return None


def serve(listen, resolve, settings, progress):
    """Serve on listen (parse_listen's address) until stopped, with settings (Settings); resolve() -> (mounts
    chosen, collector argv of the filters): at start, and again when a mount moved."""
    if not 0 < settings.update_interval <= 3600:
        raise FstraceError("--update-interval wants seconds above 0 and at most 3600, got %s"
                           % settings.update_interval)
    chosen, collector_argv = resolve()
    if settings.textfile:
        path = textfile_path(settings.textfile)
    # the OpenMetrics version is ours alone: kept out of a textfile directory, whose readers want one format.
    # Recorded: should this process be SIGKILLed, the next fstrace start removes it
    cleanup = Cleanup()
    private = tempfile.mkdtemp(prefix="fstrace-serve-", dir=exposition_root())
    cleanup.push("remove " + private, remove_tree, private, record={"kind": "dir", "path": private})
    om_path = os.path.join(private, "metrics.om")
    if not settings.textfile:
        path = os.path.join(private, "metrics.prom")
    stop, hup = threading.Event(), threading.Event()
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGHUP, lambda *a: hup.set())
    server = proc = None
    serving = False
    rc = 1
    try:
        try:  # bound before anything is loaded: a port in use is one line and no BPF
            server = Server(listen, path, om_path, None if settings.textfile else settings.update_interval, progress)
        except OSError as e:
            raise FstraceError("--listen %s: %s" % (settings.listen, e.strerror or e))
        proc = start_collector(collector_argv, path, om_path, settings, stop)
        if not proc:
            return 0
        server.use_collector(proc)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True).start()
        serving = True
        host, port = server.server_address[:2]
        progress("serving http://%s:%d/metrics for %s; SIGTERM or Ctrl-C stops, SIGHUP rewrites %s"
                 % ("[%s]" % host if ":" in host else host, port,
                    ", ".join(m[0] for m in chosen) or "all filesystems", path))
        state = {}
        traced_gone = False
        while not stop.wait(1.0):
            if hup.is_set():
                hup.clear()
                if not traced_gone:
                    proc.send_signal(signal.SIGHUP)
            if not traced_gone and proc.poll() is not None:
                if proc.returncode != 0 or not settings.follows_pids:
                    raise FstraceError("the collector %s" % ended(proc.returncode))
                traced_gone = True  # --pid: every traced process is gone; its final counters stay served
                progress("serve: the traced processes have exited; serving their final counters until stopped")
            if watch_mounts(chosen, state, progress) and not traced_gone:
                try:
                    chosen, collector_argv = resolve()
                except FstraceError as e:
                    progress("serve: cannot follow it (%s); the old filters stay" % e)
                    continue
                # the old collector's file stays served until the new one has written its first
                if not stop_collector(proc, progress):
                    raise FstraceError("the collector %s" % ended(proc.returncode))
                server.use_collector(None)
                proc = start_collector(collector_argv, path, om_path, settings, stop)
                if not proc:
                    return 0
                server.use_collector(proc)
                state = {}
        rc = 0
    finally:
        if serving:
            server.shutdown()  # waits for serve_forever to return (it never returns if it never ran)
        if server:
            server.server_close()
        if proc and not stop_collector(proc, progress):
            rc = 1
        for s, h in old.items():
            signal.signal(s, h)
        cleanup.run()
    return rc


def stop_collector(proc, progress):
    """SIGTERM (it detaches and exits 0); False if it had to be killed or failed.  One that had already exited
    is the caller's to report."""
    try:
        if proc.poll() is not None:
            return proc.returncode == 0
        rc = stop_process(proc, STOP_TIMEOUT_S, signal.SIGTERM)
        if rc == -signal.SIGKILL:
            progress("serve: the collector did not stop in %d s and was killed" % STOP_TIMEOUT_S)
            return False
        if rc != 0:
            progress("serve: the collector %s" % ended(rc))
            return False
        return True
    finally:
        proc.record.run()  # it is gone: no longer for the next start to reclaim
