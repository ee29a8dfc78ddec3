# SPDX-License-Identifier: Apache-2.0
"""Headless Chromium in a sandbox of the browser image (docs/browser.md):
Playwright connects over CDP to the endpoint browser.start exposes on the
host's loopback, browser.screenshot and browser.navigate drive it for agents
without a CDP client (also through MCP, the SDK and the CLI), and the
browser stays inside the sandbox: its network is the sandbox's egress
policy (upstream.py's test-made internet), it reads no host file, reaches
no host loopback server and no other sandbox."""
import base64
import http.server
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib

import pytest

from conftest import BUILD, IMAGE_DIR, REPO, Daemon
from nsbox_client import RpcError
import upstream as U

# serial: the upstream namespace's addresses are host-wide (upstream.py)
pytestmark = [pytest.mark.serial, pytest.mark.xdist_group("host-network")]

POLICIES = {"allowed": {"allow": ["allowed.test"]}}
PAGE = """<!doctype html><html><head><title>nsbox page</title></head>
<body style="margin:0;background:rgb(0,0,255)">
<button id="go" onclick="document.getElementById('out').textContent='clicked ' + location.host;
document.body.style.background='rgb(0,255,0)'">go</button><p id="out">not yet</p></body></html>"""
# How Chromium reports a lookup the policy refused.
REFUSED_NAME = ("ERR_NAME_NOT_RESOLVED", "ERR_INTERNET_DISCONNECTED")
RED_PAGE = "data:text/html,<body style='margin:0;background:rgb(255,0,0)'></body>"


def png_size_and_pixel(png, x, y):
    """(width, height, (r, g, b)) of an 8-bit RGB(A) PNG: just enough decoder for the check."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:16]
    pos, idat = 8, b""
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", data[:10])
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    assert depth == 8 and color in (2, 6), (depth, color)
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    for row in range(y + 1):
        f, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        prev = line
    return width, height, tuple(prev[x * bpp:x * bpp + 3])


@pytest.fixture(scope="module")
def up():
    u = U.Upstream().start()
    yield u
    u.stop()


@pytest.fixture(scope="module")
def bd(up):
    if not os.path.isdir(os.path.join(IMAGE_DIR, "browser", "rootfs")):
        pytest.fail("no browser image in %s: make image IMAGE=browser builds it" % IMAGE_DIR)
    tmp = tempfile.mkdtemp(prefix="nsbox-browsertest-")
    os.chmod(tmp, 0o755)
    path = os.path.join(tmp, "nsboxd.json")
    with open(path, "w") as f:
        json.dump({"network_policies": POLICIES, "egress_dns_servers": U.DNS}, f)
    d = Daemon(extra_args=["--config", path, "--uid-pool-base", "1660000000", "--uid-pool-ranges", "16"])
    yield d
    rc = d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


@pytest.fixture(scope="module")
def playwright_dir():
    subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "playwright"], check=True, timeout=600)
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "playwright-dir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert os.path.isdir(os.path.join(out, "node_modules", "playwright-core")), out
    return out


def browser_sandbox(d, network="allowed"):
    kw = {"network": network} if network else {}
    return d.call("sandbox.create", image="browser", limits={"memory_bytes": "1G"}, **kw)["sandbox_id"]


@pytest.fixture
def sb(bd):
    sid = browser_sandbox(bd)
    yield sid
    bd.call("sandbox.remove", sandbox_id=sid, force=True)


def playwright(playwright_dir, cdp_url, steps):
    env = dict(os.environ, PLAYWRIGHT_DIR=playwright_dir)
    p = subprocess.run(["node", os.path.join(REPO, "tests", "browser", "cdp.mjs"), cdp_url, json.dumps(steps)],
                       env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, "cdp.mjs failed (%d):\n%s\n%s" % (p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def serve_page_inside(d, sid):
    """index.html and a server on the sandbox's 127.0.0.1:8000 (as long as its exec)."""
    d.call("fs.write", sandbox_id=sid, path="/workspace/index.html", content=PAGE)
    d.call("sandbox.exec", sandbox_id=sid, argv=["python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"],
           cwd="/workspace", background=True, timeout_seconds=600)
    check = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2)"
    deadline = time.monotonic() + 30
    while d.call("sandbox.exec", sandbox_id=sid, argv=["python3", "-c", check])["exit_code"] != 0:
        assert time.monotonic() < deadline, "the sandbox's page server did not answer"
        time.sleep(0.1)


# --- Playwright over CDP ---------------------------------------------------------------


def test_playwright_over_cdp_clicks_reads_and_screenshots_inside_and_through_the_policy(bd, sb, playwright_dir):
    serve_page_inside(bd, sb)
    started = bd.call("browser.start", sandbox_id=sb)
    assert started["cdp_url"].startswith("ws://127.0.0.1:%d/devtools/browser/" % started["host_port"])
    # A second start finds the running browser: the same endpoint.
    assert bd.call("browser.start", sandbox_id=sb)["cdp_url"] == started["cdp_url"]
    r = playwright(playwright_dir, started["cdp_url"], [
        {"goto": "http://127.0.0.1:8000/", "click": "#go", "text": "#out", "screenshot": True},
        {"goto": "http://allowed.test/", "text": "body"},
        {"goto": "http://denied.test/", "text": "body"},
        {"goto": "http://%s/" % U.DENIED, "text": "body"},
    ])
    inside, allowed, denied_name, denied, version = r
    assert inside == {"status": 200, "text": "clicked 127.0.0.1:8000", "screenshot_bytes": inside["screenshot_bytes"]}
    assert inside["screenshot_bytes"] > 1000
    assert allowed["status"] == 200 and '"host": "allowed.test"' in allowed["text"].replace('":"', '": "'), allowed
    # The policy answers no name it does not allow, and refuses an address it does not allow.
    assert any(w in denied_name.get("error", "") for w in REFUSED_NAME), denied_name
    assert "error" in denied or denied.get("status") == 403, denied
    assert '"host"' not in json.dumps(denied), denied
    assert "Chrome" in version["version"] or version["version"][0].isdigit(), version


def test_devtools_host_check_still_refuses_a_dns_name(bd, sb):
    """Chromium's DNS-rebinding guard works through the exposure: the IP literal the
    endpoint is reached by passes, any other name is refused."""
    http_url = bd.call("browser.start", sandbox_id=sb)["http_url"]
    with urllib.request.urlopen(http_url + "/json/version", timeout=30) as r:
        assert "webSocketDebuggerUrl" in json.loads(r.read())
    req = urllib.request.Request(http_url + "/json/version", headers={"Host": "rebind.example:80"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert b"not an IP address or localhost" in e.value.read()


def test_async_sdk_browser(bd, sb):
    import asyncio
    sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
    from nsbox.aio import AsyncSandbox

    async def main():
        async with await AsyncSandbox.connect(sb, socket=bd.socket, keep=True) as box:
            png = await box.browser.screenshot(url=RED_PAGE, width=40, height=30)
            return png_size_and_pixel(png, 3, 3)
    assert asyncio.run(main()) == (40, 30, (255, 0, 0))


def test_browser_start_without_network_says_what_to_do(bd):
    sid = browser_sandbox(bd, network=None)
    try:
        with pytest.raises(RpcError) as e:
            bd.call("browser.start", sandbox_id=sid)
        assert e.value.kind == "invalid_params" and "no network" in str(e.value), e.value.error
        # Without network, screenshots still work: the browser runs, only nothing is exposed.
        shot = bd.call("browser.screenshot", sandbox_id=sid, url=RED_PAGE, width=64, height=48)
        assert (shot["width"], shot["height"]) == (64, 48)
    finally:
        bd.call("sandbox.remove", sandbox_id=sid, force=True)


# --- browser.screenshot / browser.navigate -----------------------------------------------


def test_screenshot_is_a_png_of_the_asked_size_showing_the_page(bd, sb):
    shot = bd.call("browser.screenshot", sandbox_id=sb, url=RED_PAGE, width=320, height=200)
    png = base64.b64decode(shot["png"])
    assert png_size_and_pixel(png, 160, 100) == (320, 200, (255, 0, 0))
    assert (shot["width"], shot["height"]) == (320, 200)


def test_navigate_then_screenshot_shows_the_page_navigated_to(bd, sb):
    serve_page_inside(bd, sb)
    nav = bd.call("browser.navigate", sandbox_id=sb, url="http://127.0.0.1:8000/")
    assert nav["url"] == "http://127.0.0.1:8000/" and nav["title"] == "nsbox page"
    shot = bd.call("browser.screenshot", sandbox_id=sb, width=200, height=150)
    assert png_size_and_pixel(base64.b64decode(shot["png"]), 150, 120)[2] == (0, 0, 255)
    assert shot["title"] == "nsbox page"


def test_full_page_screenshot_is_as_tall_as_the_page(bd, sb):
    tall = "data:text/html,<body style='margin:0'><div style='height:3000px;background:rgb(255,0,0)'></div></body>"
    shot = bd.call("browser.screenshot", sandbox_id=sb, url=tall, width=300, height=200, full_page=True)
    assert (shot["width"], shot["height"]) == (300, 3000)


def test_a_denied_site_is_refused_by_the_policy(bd, sb, up):
    with pytest.raises(RpcError) as e:
        bd.call("browser.navigate", sandbox_id=sb, url="http://denied.test/")
    # The policy answers no lookup of a name it does not allow (Chromium may call that offline).
    assert e.value.kind == "unavailable" and any(w in str(e.value) for w in REFUSED_NAME), e.value.error
    # An address the policy does not allow: refused by the proxy, and counted; it never arrives.
    refused = bd.call("sandbox.info", sandbox_id=sb)["egress"]["stats"]["refused"]
    try:
        bd.call("browser.navigate", sandbox_id=sb, url="http://%s/" % U.DENIED)
    except RpcError as e:
        assert e.kind == "unavailable", e.error
    deadline = time.monotonic() + 30  # the proxy's counts reach nsboxd on their own
    while bd.call("sandbox.info", sandbox_id=sb)["egress"]["stats"]["refused"] <= refused:
        assert time.monotonic() < deadline, "the refusal of %s was not counted" % U.DENIED
        time.sleep(0.1)
    assert not [h for h in up.hits() if h.get("local") == U.DENIED or "denied.test" in (h.get("host") or "")], \
        up.hits()


@pytest.mark.parametrize("params, message", [
    ({"url": "file:///etc/passwd"}, "url must be"),
    ({"url": "javascript:alert(1)"}, "url must be"),
    ({"url": 5}, "url must be"),
    ({"url": "http://x/" + "a" * 9000}, "url must be"),
    ({"width": 0}, "width must be"),
    ({"height": 100000}, "height must be"),
    ({"full_page": "yes"}, "full_page"),
    ({"timeout_seconds": 0}, "timeout"),
    ({"bogus": 1}, "bogus"),
])
def test_bad_screenshot_params_are_refused(bd, sb, params, message):
    with pytest.raises(RpcError) as e:
        bd.call("browser.screenshot", sandbox_id=sb, **params)
    assert e.value.kind == "invalid_params" and message in str(e.value), e.value.error


def test_an_image_without_a_browser_is_refused_and_info_says_which_sandbox(bd, sb):
    sid = bd.call("sandbox.create")["sandbox_id"]
    try:
        with pytest.raises(RpcError) as e:
            bd.call("browser.start", sandbox_id=sid)
        assert e.value.kind == "invalid_params" and "has no browser" in str(e.value)
        assert "browser" not in bd.call("sandbox.info", sandbox_id=sid)
    finally:
        bd.call("sandbox.remove", sandbox_id=sid, force=True)
    info = bd.call("sandbox.info", sandbox_id=sb)["browser"]
    assert info["chromium_sandbox"] is False and "seccomp" in info["why"]
    assert info["chromium_version"]


def test_a_page_that_fails_to_load_is_reported(bd, sb):
    with pytest.raises(RpcError) as e:
        bd.call("browser.navigate", sandbox_id=sb, url="http://127.0.0.1:8999/")
    assert e.value.kind == "unavailable" and "ERR_CONNECTION_REFUSED" in str(e.value), e.value.error


def test_a_page_that_eats_memory_is_reported_not_hung(bd):
    """The browser's memory counts in the sandbox's limit: a page that allocates without end is
    stopped by it, and the call says so instead of hanging."""
    sid = bd.call("sandbox.create", image="browser", limits={"memory_bytes": "512M"})["sandbox_id"]
    try:
        hog = ("data:text/html,<script>let a=[];for(;;)a.push(new Float64Array(1<<20).fill(Math.random()))"
               "</script>")
        with pytest.raises(RpcError) as e:
            bd.call("browser.navigate", sandbox_id=sid, url=hog, timeout_seconds=60)
        assert e.value.kind == "unavailable", e.value.error
        assert any(w in str(e.value) for w in ("crashed", "out of memory", "closed the connection", "ended")), \
            e.value.error
        # The sandbox is still there, and a new browser starts in it.
        shot = bd.call("browser.screenshot", sandbox_id=sid, url=RED_PAGE, width=32, height=32)
        assert png_size_and_pixel(base64.b64decode(shot["png"]), 5, 5)[2] == (255, 0, 0)
    finally:
        bd.call("sandbox.remove", sandbox_id=sid, force=True)


def test_a_crashed_tab_does_not_hang_the_next_call(bd, sb, playwright_dir):
    cdp = bd.call("browser.start", sandbox_id=sb)["cdp_url"]
    # Playwright crashes its tab; the helper takes a tab that answers, or opens one.
    r = playwright(playwright_dir, cdp, [{"goto": "data:text/html,<title>doomed</title>", "crash": True}])
    assert r[0].get("crashed") is True, r
    shot = bd.call("browser.screenshot", sandbox_id=sb, url=RED_PAGE, width=48, height=48)
    assert png_size_and_pixel(base64.b64decode(shot["png"]), 24, 24) == (48, 48, (255, 0, 0))


def test_a_busy_page_does_not_keep_the_sandbox_alive(bd):
    sid = bd.call("sandbox.create", image="browser", limits={"memory_bytes": "1G"}, idle_timeout_seconds=3,
                  idle_action="remove")["sandbox_id"]
    busy = "data:text/html,<script>setInterval(()=>{let x=0;for(let i=0;i<1e6;i++)x+=i},10)</script>"
    bd.call("browser.navigate", sandbox_id=sid, url=busy)
    deadline = time.monotonic() + 60
    while True:
        try:
            bd.call("sandbox.info", sandbox_id=sid)
        except RpcError as e:
            assert e.kind in ("gone", "not_found"), e.error
            break
        assert time.monotonic() < deadline, "the idle sandbox with a busy page was not removed"
        time.sleep(0.2)


# --- isolation ---------------------------------------------------------------------------


class HostServer:
    """An HTTP server on the host's 127.0.0.1 that counts its requests."""

    def __init__(self):
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"host loopback secret")

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_chromium_reads_no_host_file_and_reaches_no_host_loopback(bd, sb, playwright_dir):
    canary = tempfile.NamedTemporaryFile("w", prefix="nsbox-canary-", dir="/tmp", delete=False)
    canary.write("host canary secret")
    canary.close()
    host = HostServer()
    try:
        cdp = bd.call("browser.start", sandbox_id=sb)["cdp_url"]
        r = playwright(playwright_dir, cdp, [
            {"goto": "file://" + canary.name, "text": "body"},
            {"goto": "http://127.0.0.1:%d/" % host.port, "text": "body"},
            {"goto": "http://%s:%d/" % (U.HOST_ADDR, host.port), "text": "body"},
        ])
        for step in r[:3]:
            assert "secret" not in json.dumps(step), step
            assert "error" in step or step.get("status") in (403, None), step
        assert host.hits == []
    finally:
        host.close()
        os.unlink(canary.name)


def test_two_browser_sandboxes_do_not_see_each_other(bd, sb, playwright_dir):
    other = browser_sandbox(bd)
    try:
        bd.call("browser.start", sandbox_id=other)
        address = bd.call("sandbox.info", sandbox_id=other)["egress"]["address"]
        cdp = bd.call("browser.start", sandbox_id=sb)["cdp_url"]
        r = playwright(playwright_dir, cdp, [{"goto": "http://%s:9223/json/version" % address, "text": "body"}])
        assert "error" in r[0] or r[0].get("status") == 403, r[0]
        assert "webSocketDebuggerUrl" not in json.dumps(r[0])
    finally:
        bd.call("sandbox.remove", sandbox_id=other, force=True)


def test_the_endpoint_goes_with_the_sandbox(bd):
    sid = browser_sandbox(bd)
    port = bd.call("browser.start", sandbox_id=sid)["host_port"]
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass
    bd.call("sandbox.remove", sandbox_id=sid, force=True)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()


# --- the fronts: CLI, SDK, MCP -------------------------------------------------------------


def test_cli_browser_prints_the_cdp_url_and_screenshot_writes_the_png(bd, sb):
    r = bd.cli("browser", sb)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip().startswith("ws://127.0.0.1:")
    r = bd.cli("screenshot", "--url", RED_PAGE, "--width", "100", "--height", "80", sb)
    assert r.returncode == 0, r.stderr
    assert png_size_and_pixel(r.stdout, 50, 40) == (100, 80, (255, 0, 0))
    r = bd.cli("screenshot", "--width", "many", sb)
    assert r.returncode == 125 and b"not a number" in r.stderr


def test_sdk_browser_cdp_url_screenshot_and_navigate(bd, sb):
    sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
    from nsbox import Sandbox
    with Sandbox.connect(sb, socket=bd.socket, keep=True) as box:
        assert box.browser.cdp_url().startswith("ws://127.0.0.1:")
        png = box.browser.screenshot(url=RED_PAGE, width=90, height=60)
        assert png_size_and_pixel(png, 10, 10) == (90, 60, (255, 0, 0))
        assert box.browser.navigate("data:text/html,<title>sdk</title>")["title"] == "sdk"


def test_mcp_browser_screenshot_is_an_image_block_showing_the_page(bd):
    proc = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", bd.socket, "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def request(rid, method, params):
            proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
                              + "\n").encode())
            proc.stdin.flush()
            while True:
                m = json.loads(proc.stdout.readline())
                if m.get("id") == rid:
                    return m
        request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "test", "version": "0"}})
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        tools = {t["name"]: t for t in request(2, "tools/list", {})["result"]["tools"]}
        assert "browser_navigate" in tools and "4096" in tools["browser_screenshot"]["description"]
        made = request(5, "tools/call", {"name": "create_sandbox", "arguments": {
            "image": "browser", "memory_mb": 1024}})["result"]
        assert made["isError"] is False, made
        sb = json.loads(made["content"][0]["text"])["sandbox_id"]
        r = request(3, "tools/call", {"name": "browser_screenshot", "arguments": {
            "sandbox_id": sb, "url": RED_PAGE, "width": 120, "height": 90}})["result"]
        assert r["isError"] is False, r
        images = [c for c in r["content"] if c["type"] == "image"]
        assert len(images) == 1 and images[0]["mimeType"] == "image/png"
        assert png_size_and_pixel(base64.b64decode(images[0]["data"]), 60, 45) == (120, 90, (255, 0, 0))
        assert "png" not in r["content"][0]["text"]
        r = request(4, "tools/call", {"name": "browser_navigate", "arguments": {
            "sandbox_id": sb, "url": "data:text/html,<title>mcp</title>"}})["result"]
        assert r["isError"] is False and '"mcp"' in r["content"][0]["text"], r
        r = request(6, "tools/call", {"name": "remove_sandbox", "arguments": {"sandbox_id": sb, "force": True}})
        assert r["result"]["isError"] is False, r
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
