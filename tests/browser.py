"""Headless Chromium driven over the DevTools protocol (a websocket per page): the tests click, type into
prompts and read the page back as a person's browser would show it."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import websocket

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--no-first-run", "--hide-scrollbars", "--remote-debugging-port=0",
            "--remote-allow-origins=*", "--window-size=1400,1000"]


class Browser:
    """One headless Chromium with its own profile directory; page() opens a tab."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="fstrace-test-chromium-")
        # its own temporary files (the singleton socket, shared memory without /dev/shm) inside the profile, and
        # its helper processes in a group of their own: close() ends them all before it removes the profile
        tmp = os.path.join(self.profile, "tmp")
        os.mkdir(tmp)
        self.p = subprocess.Popen(CHROMIUM + ["--user-data-dir=" + self.profile, "about:blank"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, TMPDIR=tmp), start_new_session=True)
        deadline = time.time() + 60
        seen = ""
        while time.time() < deadline:
            line = self.p.stderr.readline()
            seen += line
            m = re.search(r"DevTools listening on ws://([\d.]+:\d+)/", line)
            if m:
                self.http = "http://" + m.group(1)
                return
            if not line and self.p.poll() is not None:
                break
        self.close()
        raise AssertionError("chromium did not start:\n" + seen)

    def page(self, url):
        """A new tab at url, loaded (its load event fired)."""
        req = urllib.request.Request(self.http + "/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            target = json.load(r)
        pg = Page(target["webSocketDebuggerUrl"])
        pg.goto(url)
        return pg

    def close(self):
        """End Chromium and every helper it started (a helper still writing into the profile would leave it
        behind), then remove the profile."""
        def signal_group(sig):
            try:
                os.killpg(self.p.pid, sig)
                return True
            except ProcessLookupError:  # the group is empty
                return False
        signal_group(signal.SIGTERM)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            signal_group(signal.SIGKILL)
            self.p.wait()
        deadline = time.time() + 10
        while signal_group(0) and time.time() < deadline:
            time.sleep(0.05)
        signal_group(signal.SIGKILL)
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events = []
        self.errors = []  # console messages, uncaught exceptions, log errors (a CSP violation is one)
        self.prompt_answer = None
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")

    def _event(self, msg):
        method, params = msg["method"], msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            self.errors.append("console.%s: %s" % (params["type"], " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", []))))
        elif method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            self.errors.append("exception: %s" % (d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
            self.errors.append("log %s %s: %s" % (params["entry"]["level"], params["entry"]["source"],
                                                  params["entry"]["text"]))
        elif method == "Page.javascriptDialogOpening":
            answer = self.prompt_answer
            self.prompt_answer = None
            if params["type"] != "prompt" or answer is None:  # an alert, or a prompt the test did not expect
                self.errors.append("dialog %s: %s" % (params["type"], params["message"]))
            self._send("Page.handleJavaScriptDialog", {"accept": answer is not None, "promptText": answer or ""})
        self.events.append(msg)

    def _send(self, method, params=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def call(self, method, **params):
        i = self._send(method, params)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg["result"]
            if "method" in msg:
                self._event(msg)

    def wait_event(self, method, timeout=60):
        for k, msg in enumerate(self.events):
            if msg["method"] == method:
                return self.events.pop(k)
        self.ws.settimeout(timeout)
        try:
            while True:
                msg = json.loads(self.ws.recv())
                if "method" in msg:
                    self._event(msg)
                    if msg["method"] == method:
                        self.events.remove(msg)
                        return msg
        finally:
            self.ws.settimeout(60)

    def goto(self, url):
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def js(self, expression):
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError("%s: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def click(self, x, y):
        """A left click at page coordinates, as the mouse makes it."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left" if kind != "mouseMoved"
                      else "none", clickCount=1 if kind != "mouseMoved" else 0)

    def click_element(self, expression):
        """Click the middle of the element the expression names, scrolled into view first."""
        box = self.js("(function(){var e=%s; e.scrollIntoView({block:'center'}); var r=e.getBoundingClientRect();"
                      "return [r.left + r.width/2, r.top + r.height/2, r.width, r.height];})()" % expression)
        assert box[2] > 0 and box[3] > 0, ("not laid out", expression, box)
        self.click(box[0], box[1])

    def answer_prompt(self, text):
        """The text to type into the next prompt() the page opens."""
        self.prompt_answer = text

    def settle(self, seconds=0.2):
        """Let the page handle what was sent (events queued meanwhile are read)."""
        self.js("new Promise(function(r){setTimeout(r, %d)})" % int(seconds * 1000))

    def close(self):
        self.ws.close()


def open_in_browser(url):
    """(browser, page) for a url; the caller closes the browser."""
    b = Browser()
    try:
        return b, b.page(url)
    except BaseException:
        b.close()
        raise


def file_url(path):
    return "file://" + os.path.abspath(str(path))
