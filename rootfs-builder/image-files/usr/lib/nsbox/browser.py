# SPDX-License-Identifier: Apache-2.0
# The sandbox side of browser.start, browser.navigate and browser.screenshot
# (manager/browser.c runs it; docs/browser.md). Standard library only.
#
#   browser.py serve [START_TIMEOUT]
#                           start headless Chromium (or find the one running),
#                           print one JSON line {"ready": true, "port", "ws_path"}
#                           and keep it running, its DevTools port forwarded
#                           from the sandbox's own address so sandbox.expose
#                           reaches it
#   browser.py navigate URL [TIMEOUT]
#   browser.py screenshot JSON_OPTIONS
#                           drive that Chromium over CDP; print one JSON line
#
# Errors are one line on stderr and exit status 1.
import base64
import fcntl
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

DEVTOOLS_PORT = 9222  # Chromium's, on the sandbox's loopback only
FORWARD_PORT = 9223  # on every address of the sandbox: what sandbox.expose reaches
STATE_DIR = "/tmp/.nsbox-browser"
START_TIMEOUT_S = 30
# The binary, not Debian's /usr/bin/chromium wrapper: that one exports
# Google API keys (so Chromium calls accounts.google.com at start) and
# loads extensions.
CHROMIUM = "/usr/lib/chromium/chromium"


def fail(message):
    sys.stderr.write("browser: %s\n" % message)
    sys.stderr.flush()
    sys.exit(1)


def devtools_get(path, method="GET", timeout=5):
    conn = http.client.HTTPConnection("127.0.0.1", DEVTOOLS_PORT, timeout=timeout)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError("DevTools %s %s: HTTP %d" % (method, path, response.status))
        return json.loads(body)
    finally:
        conn.close()


def wait_devtools(deadline, chromium=None):
    while True:
        try:
            return devtools_get("/json/version", timeout=2)
        except (OSError, ValueError):
            pass
        if chromium is not None and chromium.poll() is not None:
            fail("chromium exited with status %d before DevTools answered: %s"
                 % (chromium.returncode, tail(os.path.join(STATE_DIR, "chromium.log"))))
        if time.monotonic() > deadline:
            fail("DevTools did not answer within %d s" % START_TIMEOUT_S)
        time.sleep(0.05)


def tail(path, size=600):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace").strip().replace("\n", " | ")
    except OSError:
        return "(no log)"


# --- serve -------------------------------------------------------------------


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def forward(listener):
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", DEVTOOLS_PORT), timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def ready_line(version):
    url = version.get("webSocketDebuggerUrl", "")
    path = url[url.find("/devtools/"):] if "/devtools/" in url else ""
    return json.dumps({"ready": True, "port": FORWARD_PORT, "ws_path": path,
                       "browser": version.get("Browser", ""), "pid": os.getpid()})


def serve():
    os.makedirs(STATE_DIR, mode=0o700, exist_ok=True)
    lock = open(os.path.join(STATE_DIR, "lock"), "w")
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # Another serve runs (or is starting) the browser: report it and end.
        print(ready_line(wait_devtools(deadline)), flush=True)
        return 0
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", FORWARD_PORT))
    listener.listen(64)
    log = open(os.path.join(STATE_DIR, "chromium.log"), "wb")
    # --no-sandbox: Chromium's own sandbox needs a user namespace, which
    # nsbox's seccomp filter refuses; the nsbox sandbox is the boundary
    # (docs/security.md). The rest keeps Chromium from calling home.
    chromium = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--remote-debugging-port=%d" % DEVTOOLS_PORT,
         "--user-data-dir=" + os.path.join(STATE_DIR, "profile"), "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--no-pings", "--dns-prefetch-disable", "--disable-domain-reliability", "--disable-breakpad",
         "--disable-client-side-phishing-detection", "--disable-default-apps", "--disable-extensions",
         "--metrics-recording-only", "--disable-field-trial-config", "--password-store=basic",
         "--use-mock-keychain", "--no-service-autorun", "--disable-search-engine-choice-screen",
         "--disable-component-extensions-with-background-pages",
         "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,"
         "DialMediaRouteProvider,Translate,AutofillServerCommunication,"
         "CertificateTransparencyComponentUpdater,HttpsUpgrades,LensOverlay,GlobalMediaControls",
         "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,800", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    print(ready_line(wait_devtools(deadline, chromium)), flush=True)
    threading.Thread(target=forward, args=(listener,), daemon=True).start()
    status = chromium.wait()
    fail("chromium exited with status %d: %s" % (status, tail(os.path.join(STATE_DIR, "chromium.log"))))


# --- a CDP client over one WebSocket ------------------------------------------


class CDP:
    def __init__(self, ws_url, timeout):
        rest = ws_url.split("://", 1)[1]
        hostport, path = rest.split("/", 1)
        self.sock = socket.create_connection(("127.0.0.1", DEVTOOLS_PORT), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           % (path, DEVTOOLS_PORT, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                fail("DevTools closed the connection during the WebSocket handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            fail("DevTools refused the WebSocket: %s" % head.split(b"\r\n", 1)[0].decode("latin-1"))
        self.next_id = 0
        self.events = []

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                fail("the browser closed the connection (did Chromium end? out of memory?)")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _frame(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                fail("the browser closed the connection")
            if opcode in (9, 10):
                continue
            message += payload
            if b0 & 0x80:
                return json.loads(message)

    def send(self, method, params=None):
        self.next_id += 1
        data = json.dumps({"id": self.next_id, "method": method, "params": params or {}}).encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        if len(data) < 126:
            header += bytes([0x80 | len(data)])
        elif len(data) < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(data))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(data))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)
        return self.next_id

    def call(self, method, params=None):
        wanted = self.send(method, params)
        while True:
            message = self._frame()
            if message.get("id") == wanted:
                if "error" in message:
                    fail("%s: %s" % (method, message["error"].get("message", message["error"])))
                return message.get("result", {})
            self.check_event(message)
            self.events.append(message)

    def check_event(self, message):
        if message.get("method") == "Inspector.targetCrashed":
            fail("the page's renderer crashed (out of memory?)")

    def wait_event(self, name, deadline):
        for i, message in enumerate(self.events):
            if message.get("method") == name:
                del self.events[: i + 1]
                return message
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                message = self._frame()
            except socket.timeout:
                return None
            self.check_event(message)
            if message.get("method") == name:
                return message


PROBE_TIMEOUT_S = 5


def page(timeout):
    """The first tab, or a new one when there is none or it does not answer
    (its renderer crashed or was killed by the memory limit)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    wait_devtools(deadline)
    targets = [t for t in devtools_get("/json/list") if t.get("type") == "page"]
    if targets:
        try:
            cdp = CDP(targets[0]["webSocketDebuggerUrl"], PROBE_TIMEOUT_S)
            cdp.call("Runtime.evaluate", {"expression": "1", "returnByValue": True})
            cdp.sock.settimeout(timeout)
            cdp.call("Page.enable")
            cdp.call("Inspector.enable")
            return cdp
        except OSError:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", DEVTOOLS_PORT, timeout=PROBE_TIMEOUT_S)
                conn.request("GET", "/json/close/" + targets[0]["id"])
                conn.getresponse().read()
                conn.close()
            except OSError:
                pass
    target = devtools_get("/json/new?about:blank", method="PUT")
    cdp = CDP(target["webSocketDebuggerUrl"], timeout)
    cdp.call("Page.enable")
    cdp.call("Inspector.enable")
    return cdp


def navigate_in(cdp, url, timeout):
    deadline = time.monotonic() + timeout
    result = cdp.call("Page.navigate", {"url": url})
    if result.get("errorText"):
        fail("navigate to %s: %s" % (url, result["errorText"]))
    if cdp.wait_event("Page.loadEventFired", deadline) is None:
        fail("the page did not finish loading within %d s" % timeout)


def location(cdp):
    value = cdp.call("Runtime.evaluate", {"expression": "[location.href, document.title]",
                                           "returnByValue": True})
    return value.get("result", {}).get("value") or ["", ""]


def navigate(url, timeout):
    cdp = page(timeout)
    navigate_in(cdp, url, timeout)
    href, title = location(cdp)
    print(json.dumps({"url": href, "title": title}))


def screenshot(options):
    timeout = options.get("timeout", 30)
    cdp = page(timeout)
    if options.get("width") or options.get("height"):
        cdp.call("Emulation.setDeviceMetricsOverride", {
            "width": options.get("width") or 1280, "height": options.get("height") or 800,
            "deviceScaleFactor": 1, "mobile": False})
    if options.get("url"):
        navigate_in(cdp, options["url"], timeout)
    params = {"format": "png"}
    if options.get("full_page"):
        size = cdp.call("Page.getLayoutMetrics")["cssContentSize"]
        params["captureBeyondViewport"] = True
        params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    data = cdp.call("Page.captureScreenshot", params)["data"]
    width, height = struct.unpack(">II", base64.b64decode(data[:44])[16:24])
    href, title = location(cdp)
    sys.stdout.write(json.dumps({"png": data, "width": width, "height": height, "url": href,
                                 "title": title}))
    sys.stdout.flush()


def main(argv):
    try:
        if argv[:1] == ["serve"]:
            global START_TIMEOUT_S
            if len(argv) > 1:
                START_TIMEOUT_S = int(argv[1])
            return serve()
        if len(argv) >= 2 and argv[0] == "navigate":
            return navigate(argv[1], int(argv[2]) if len(argv) > 2 else 30)
        if len(argv) == 2 and argv[0] == "screenshot":
            return screenshot(json.loads(argv[1]))
    except (OSError, ValueError, KeyError) as e:
        fail(str(e))
    fail("usage: browser.py serve | navigate URL [TIMEOUT] | screenshot JSON")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
