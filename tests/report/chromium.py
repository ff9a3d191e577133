"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe),
for the HTML report's tests: open a page, collect every console message, exception and
network request, evaluate JavaScript, move the mouse, take a screenshot.

One browser per Browser object, with a fresh --user-data-dir; every wait has a deadline,
so a broken page fails the test instead of hanging it."""
import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def executable():
    """The Chromium binary (Debian's package `chromium`), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(AssertionError):
    pass


class Browser:
    """A headless Chromium with one page, attached over the DevTools pipe."""

    def __init__(self, width=1400, height=1000, timeout=60):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="memtrace-chromium-")
        # Chromium reads commands on fd 3 and writes replies on fd 4.
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # Our ends stay out of the browser (os.pipe() fds are not inheritable).

        def child_fds():
            # Through fresh descriptors first: either pipe end may itself be 3 or 4.
            read_end, write_end = os.dup(to_browser_read), os.dup(from_browser_write)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.process = subprocess.Popen(
            [executable(), *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            # Not close_fds: that would close 3 and 4 after child_fds() made them.
            close_fds=False, preexec_fn=child_fds)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events = []  # every protocol event seen, in order
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.page(f"{domain}.enable")
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    # ---- the protocol ------------------------------------------------------------------
    def _send(self, message):
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data):]

    def _receive(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the pipe: " + self._stderr())
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def _stderr(self):
        try:
            self.process.kill()
            return self.process.communicate(timeout=10)[1].decode(errors="replace")[-2000:]
        except Exception:  # noqa: BLE001 - best effort, for the message only
            return ""

    def call(self, method, session=None, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def page(self, method, **params):
        return self.call(method, session=self.session, **params)

    def wait_for_event(self, method, after=0, timeout=None):
        """The first `method` event from the `after`-th event on, waiting for it if need be."""
        deadline = time.monotonic() + (timeout or self.timeout)
        for event in self.events[after:]:
            if event["method"] == method:
                return event
        while True:
            reply = self._receive(deadline)
            if "method" in reply:
                self.events.append(reply)
                if reply["method"] == method:
                    return reply

    # ---- what the tests use ------------------------------------------------------------
    def open(self, path):
        """Opens a local file and waits for its load event."""
        before = len(self.events)
        self.page("Page.navigate", url=f"file://{os.path.abspath(path)}")
        self.wait_for_event("Page.loadEventFired", after=before)

    def evaluate(self, expression):
        result = self.page("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, expression, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise BrowserError(f"still false after the deadline: {expression}")
            time.sleep(0.05)

    def mouse(self, kind, x, y):
        self.page("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                  clickCount=1 if kind in ("mousePressed", "mouseReleased") else 0)

    def click(self, x, y):
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y)
        self.mouse("mouseReleased", x, y)

    def wheel(self, x, y, delta_y):
        """A mouse wheel turn at (x, y): negative `delta_y` scrolls up (d3 zooms in)."""
        self.page("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=0, deltaY=delta_y)

    def double_click(self, x, y):
        self.mouse("mouseMoved", x, y)
        for count in (1, 2):
            for kind in ("mousePressed", "mouseReleased"):
                self.page("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=count)

    def type_text(self, text):
        """Types `text` into the focused element, as a keyboard's input would."""
        self.page("Input.insertText", text=text)

    def screenshot(self, path, clip=None):
        """Saves the page as a PNG; `clip` ({x, y, width, height}, in CSS pixels) keeps a part."""
        options = {"clip": dict(clip, scale=1)} if clip else {}
        data = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         **options)["data"]
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))

    def problems(self):
        """Console errors and warnings, uncaught exceptions and log errors, as text."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(f"log {params['entry']['level']}: {params['entry'].get('text')}")
        return found

    def requests(self):
        """URLs the page asked for."""
        return [event["params"]["request"]["url"] for event in self.events
                if event["method"] == "Network.requestWillBeSent"]

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:  # noqa: BLE001 - it may already be gone; it is killed below anyway
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
