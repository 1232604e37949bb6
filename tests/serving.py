"""Helpers of the tests of fstrace serve (test_serve.py, test_dashboard.py): serve started and stopped as a
user starts it, its exposition scraped (as Prometheus does, too) and parsed, a real Prometheus server scraping it,
and the counts fio and the block layer give to check it against."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import FSTRACE

# what Prometheus 2.x sends when it scrapes (scrape/scrape.go scrapeAcceptHeader)
PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75," \
                    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, frozenset of (label, value)): value} of an exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        out[(m.group(1), frozenset(LABEL.findall(m.group(2) or "")))] = float(m.group(3))
    return out


def normalized(samples):
    """samples with le labels as numbers: OpenMetrics writes le="1.0" where the classic format has le="1"."""
    return {(n, frozenset((k, float(v) if k == "le" else v) for k, v in ls)): v for (n, ls), v in samples.items()}


def value(samples, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def start_serve(*args, env=None, command=(FSTRACE,)):
    """fstrace serve on a free port (env: added to its environment; command: how fstrace is started, e.g. in a
    chroot): (process, port, its later messages)"""
    # --budget 100: these tests check exact counts, so the request hooks stay attached (test_budget.py
    # checks the windows)
    p = subprocess.Popen(list(command) + ["serve", "--listen", "127.0.0.1:0", "--update-interval", "0.2",
                                          "--budget", "100"] + list(args),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})))
    seen = ""
    deadline = time.time() + 120
    while time.time() < deadline:
        line = p.stderr.readline()
        seen += line
        m = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", line)
        if m:
            # the rest of its messages, read on so the pipe never fills
            rest = []
            threading.Thread(target=lambda: rest.extend(p.stderr), daemon=True).start()
            return p, int(m.group(1)), rest
        assert line or p.poll() is None, seen
    raise AssertionError("serve never started:\n" + seen)


def scrape(port, path="/metrics"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def scrape_om(port):
    """A scrape as Prometheus makes it: OpenMetrics text, checked by prometheus_client's OpenMetrics parser."""
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, headers={"Accept": PROMETHEUS_ACCEPT})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Content-Type"] == OPENMETRICS_TYPE
        text = r.read().decode()
    assert text.endswith("# EOF\n")
    list(text_string_to_metric_families(text))  # raises on anything OpenMetrics 1.0 does not allow
    return text


def fresh_scrape(port, om=False):
    """A scrape the collector wrote after now (its interval is 0.2 s)."""
    t = time.time()
    while time.time() < t + 10:
        text = scrape_om(port) if om else scrape(port)
        if value(parse(text), "fstrace_last_update_time_seconds") > t:
            return text
        time.sleep(0.05)
    raise AssertionError("the exposition was not rewritten within 10 s")


def stop(p, rest):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    time.sleep(0.1)
    return "".join(rest)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def diskstat(dev):
    """(reads completed, bytes read) of a block device from /proc/diskstats."""
    st = os.stat(dev).st_rdev
    with open("/proc/diskstats") as f:
        for line in f:
            v = line.split()
            if int(v[0]) == os.major(st) and int(v[1]) == os.minor(st):
                return int(v[3]), int(v[5]) * 512
    raise AssertionError("%s not in /proc/diskstats" % dev)


def fio_randread(mnt):
    """fio's read figures of 512 random 4 KiB reads of big.bin on mnt, once the readahead they started is done."""
    fio = subprocess.run(["fio", "--name=x", "--filename=" + os.path.join(mnt, "big.bin"), "--rw=randread",
                          "--bs=4k", "--ioengine=psync", "--readonly", "--io_size=2m", "--output-format=json"],
                         stdout=subprocess.PIPE, text=True, check=True)
    job = json.loads(fio.stdout[fio.stdout.index("{"):])["jobs"][0]["read"]
    time.sleep(0.5)  # readahead fio started has completed
    return job


class Prometheus:
    """A real Prometheus server on 127.0.0.1 scraping `target` every second, with its own data directory."""

    def __init__(self, target):
        self.dir = tempfile.mkdtemp(prefix="fstrace-test-prom-")
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                    "  - job_name: fstrace\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % target)
        self.port = free_port()
        self.p = subprocess.Popen(["prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + self.dir + "/data",
                                   "--web.listen-address=127.0.0.1:%d" % self.port],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port, timeout=2).read()
                return
            except OSError:
                assert self.p.poll() is None, "prometheus exited %s" % self.p.returncode
                time.sleep(0.2)
        raise AssertionError("prometheus never became ready")

    def query(self, q, at=None):
        """The instant query's single value (None when it has no result)."""
        params = {"query": q}
        if at is not None:
            params["time"] = "%.3f" % at
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.port, urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10) as r:
            data = json.load(r)
        assert data["status"] == "success", data
        res = data["data"]["result"]
        assert len(res) <= 1, res
        return float(res[0]["value"][1]) if res else None

    def query_all(self, q):
        """{frozenset of the result's labels: value} of an instant query."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.port, urllib.parse.urlencode({"query": q}))
        with urllib.request.urlopen(url, timeout=10) as r:
            data = json.load(r)
        assert data["status"] == "success", data
        return {frozenset(x["metric"].items()): float(x["value"][1]) for x in data["data"]["result"]}

    def wait_for(self, q, want, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = self.query(q)
            if got == want:
                return
            time.sleep(0.2)
        raise AssertionError("%s: %s, never %s" % (q, got, want))

    def close(self):
        self.p.terminate()
        self.p.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)
