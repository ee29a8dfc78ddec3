# SPDX-License-Identifier: Apache-2.0
"""Computer use on the desktop image: desktop.start runs a real X server
(Xvfb), a window manager, x11vnc and noVNC in the sandbox; screenshots are
read pixel by pixel, clicks and typing go through xdotool into real windows
(Tk, xterm) the tests open, noVNC is fetched over HTTP from the host through
the sandbox's exposure. Needs the desktop image (make image IMAGE=desktop)."""
import base64
import json
import re
import os
import socket
import struct
import subprocess
import sys
import tempfile
import urllib.request
import zlib

import pytest

from conftest import BUILD, IMAGE_DIR, REPO, Daemon, until
from nsbox_client import RpcError

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
from nsbox import Sandbox  # noqa: E402

# serial: every desktop sandbox has network (a veth, counted by network/'s tests)
pytestmark = [pytest.mark.serial, pytest.mark.xdist_group("host-network")]

# Nothing outbound: a desktop needs its network only for the exposure of noVNC (inbound).
POLICY = "desktop-view"


def png_pixels(png):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG, non-interlaced."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:16]
    pos, idat, width = 8, b"", None
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
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
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def png_size(png):
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", png[:32]
    return struct.unpack(">II", png[16:24])


def poll(fn, what):
    """fn() until it returns something true (a minute at most); that value."""
    return until(what, fn, seconds=60, step=0.2)


def run(d, sid, argv, **kw):
    return d.call("sandbox.exec", sandbox_id=sid, argv=argv, env={"DISPLAY": ":0"}, **kw)


def start_app(d, sid, argv):
    """A program on the desktop, as a background exec."""
    d.call("sandbox.exec", sandbox_id=sid, argv=argv, env={"DISPLAY": ":0"}, background=True)


def window(d, sid, title):
    """(x, y, width, height) of the window titled `title` once it is mapped."""
    def find():
        r = run(d, sid, ["xdotool", "search", "--onlyvisible", "--name", "^%s$" % title, "getwindowgeometry",
                         "--shell"])
        if r["exit_code"] != 0:
            return None
        g = dict(line.split("=", 1) for line in r["stdout"].split() if "=" in line)
        return int(g["X"]), int(g["Y"]), int(g["WIDTH"]), int(g["HEIGHT"])
    return poll(find, "window " + title)


def screenshot(d, sid):
    r = d.call("desktop.screenshot", sandbox_id=sid)
    return base64.b64decode(r["data"])


def pixel_at(d, sid, x, y):
    _, _, rows = png_pixels(screenshot(d, sid))
    return rows[y][x]


def near(colour, want, slack=40):
    return all(abs(a - b) <= slack for a, b in zip(colour, want))


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def d():
    assert os.path.isdir(os.path.join(IMAGE_DIR, "desktop", "rootfs")), (
        "no desktop image in %s: make image IMAGE=desktop (or rootfs-builder/build-image.sh --name desktop)"
        % IMAGE_DIR)
    tmp = tempfile.mkdtemp(prefix="nsbox-desktop-")
    os.chmod(tmp, 0o755)
    path = os.path.join(tmp, "nsboxd.json")
    with open(path, "w") as f:
        json.dump({"network_policies": {POLICY: {"allow": []}}, "warm_pool": 0}, f)
    daemon = Daemon(extra_args=["--config", path, "--uid-pool-base", "1680000000", "--uid-pool-ranges", "16"])
    yield daemon
    rc = daemon.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, daemon.final_log[-6000:])


def create_desktop_sandbox(d, **kw):
    return d.call("sandbox.create", image="desktop", network=POLICY, **kw)["sandbox_id"]


@pytest.fixture
def fresh(d):
    made = []

    def make(**kw):
        made.append(create_desktop_sandbox(d, **kw))
        return made[-1]
    yield make
    for sid in made:
        try:
            d.call("sandbox.remove", sandbox_id=sid, force=True)
        except Exception:
            pass


@pytest.fixture(scope="module")
def desk(d):
    """One running desktop for the tests that only look and click: (sandbox_id, desktop.start's reply)."""
    sid = create_desktop_sandbox(d)
    started = d.call("desktop.start", sandbox_id=sid, width=800, height=600)
    yield sid, started
    d.call("sandbox.remove", sandbox_id=sid, force=True)


# --- the screen ------------------------------------------------------------------------------


TK_COLOUR = r'''
import sys, tkinter as tk
root = tk.Tk()
root.title(sys.argv[1])
root.geometry("300x200+150+120")
tk.Frame(root, bg=sys.argv[2]).pack(fill="both", expand=True)
root.mainloop()
'''

TK_BUTTON = r'''
import sys, tkinter as tk
root = tk.Tk()
root.title(sys.argv[1])
root.geometry("300x200+420+300")
def clicked():
    b.config(bg="#00ff00", activebackground="#00ff00")
b = tk.Button(root, text="", bg="#0000ff", activebackground="#0000ff", relief="flat", command=clicked)
b.pack(fill="both", expand=True)
root.mainloop()
'''


def test_start_says_the_screen_and_where_to_watch_it(desk):
    sid, r = desk
    assert (r["width"], r["height"], r["display"]) == (800, 600, ":0"), r
    assert r["vnc_port"] == 5900 and r["novnc_port"] == 6080, r
    assert r["novnc_url"] == "http://127.0.0.1:%d/vnc.html?autoconnect=1&resize=scale" % r["novnc_host_port"], r
    assert isinstance(r["vnc_host_port"], int), r


def test_screenshot_is_a_png_of_the_screen_showing_a_window_the_test_opened(d, desk):
    sid, _ = desk
    assert png_size(screenshot(d, sid)) == (800, 600)
    start_app(d, sid, ["python3", "-c", TK_COLOUR, "nsbox-red", "#ff0000"])
    x, y, w, h = window(d, sid, "nsbox-red")
    cx, cy = x + w // 2, y + h // 2
    poll(lambda: near(pixel_at(d, sid, cx, cy), (255, 0, 0)), "the red window in the screenshot")
    # and not everywhere: the root window around it is not red
    assert not near(pixel_at(d, sid, 5, 595), (255, 0, 0))


def test_a_click_changes_what_is_drawn(d, desk):
    sid, _ = desk
    start_app(d, sid, ["python3", "-c", TK_BUTTON, "nsbox-button"])
    x, y, w, h = window(d, sid, "nsbox-button")
    cx, cy = x + w // 2, y + h // 2
    poll(lambda: near(pixel_at(d, sid, cx, cy), (0, 0, 255)), "the blue button")
    r = d.call("desktop.click", sandbox_id=sid, x=cx, y=cy)
    assert r == {"sandbox_id": sid, "done": True}, r
    poll(lambda: near(pixel_at(d, sid, cx, cy), (0, 255, 0)), "the button turned green by the click")


TYPED = "it's \"quoted\" $(touch /tmp/pwned) `touch /tmp/pwned2` \\ ; | & > /tmp/redirect $HOME *\nline two\n"


def test_typed_text_with_shell_metacharacters_arrives_literally(d, desk):
    sid, _ = desk
    start_app(d, sid, ["xterm", "-T", "nsbox-typed", "-geometry", "80x10+0+0", "-e", "sh", "-c",
                       "cat > /tmp/typed"])
    x, y, w, h = window(d, sid, "nsbox-typed")
    d.call("desktop.click", sandbox_id=sid, x=x + w // 2, y=y + h // 2)
    d.call("desktop.type", sandbox_id=sid, text=TYPED)
    d.call("desktop.key", sandbox_id=sid, keys="ctrl+d")  # cat sees the end of its input
    typed = poll(lambda: run(d, sid, ["sh", "-c", "cat /tmp/typed 2>/dev/null"])["stdout"] == TYPED,
                 "the typed text in /tmp/typed")
    assert typed
    r = run(d, sid, ["ls", "/tmp/pwned", "/tmp/pwned2", "/tmp/redirect"])
    assert r["exit_code"] != 0 and "/tmp/pwned" in r["stderr"], r


def test_move_and_scroll_drive_the_pointer(d, desk):
    sid, _ = desk
    d.call("desktop.move", sandbox_id=sid, x=123, y=234)
    r = run(d, sid, ["xdotool", "getmouselocation", "--shell"])
    g = dict(line.split("=", 1) for line in r["stdout"].split())
    assert (g["X"], g["Y"]) == ("123", "234"), r
    assert d.call("desktop.scroll", sandbox_id=sid, direction="down", amount=2, x=10, y=20)["done"]
    r = run(d, sid, ["xdotool", "getmouselocation", "--shell"])
    assert "X=10\nY=20\n" in r["stdout"], r


def test_a_move_or_click_where_the_pointer_already_is_answers(d, desk):
    sid, _ = desk
    d.call("desktop.move", sandbox_id=sid, x=321, y=210)
    # xdotool's mousemove --sync waited 15 s for a motion that never comes
    # when the pointer is already there; a healthy call takes milliseconds.
    with d.client(timeout=10) as c:
        assert c.call("desktop.move", sandbox_id=sid, x=321, y=210)["done"]
        assert c.call("desktop.click", sandbox_id=sid, x=321, y=210)["done"]


def test_novnc_and_vnc_answer_on_the_host_through_the_exposure(desk):
    _, r = desk
    with urllib.request.urlopen(r["novnc_url"], timeout=30) as resp:
        assert resp.status == 200
        assert b"noVNC" in resp.read()
    with socket.create_connection(("127.0.0.1", r["vnc_host_port"]), timeout=30) as s:
        s.settimeout(30)
        assert s.recv(12).startswith(b"RFB 003."), "no VNC server greeting"
    # what noVNC's page does next: a WebSocket to websockify, which carries the VNC stream
    with socket.create_connection(("127.0.0.1", r["novnc_host_port"]), timeout=30) as s:
        s.settimeout(30)
        s.sendall(b"GET /websockify HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n\r\n")
        data = b""
        while b"RFB 003." not in data:
            chunk = s.recv(4096)
            assert chunk, "websockify closed before the VNC greeting: %r" % data
            data += chunk
        assert data.startswith(b"HTTP/1.1 101"), data[:200]


def test_start_again_gives_the_running_desktop(d, desk):
    sid, first = desk
    again = d.call("desktop.start", sandbox_id=sid)
    assert again == first, (first, again)
    with pytest.raises(RpcError) as e:
        d.call("desktop.start", sandbox_id=sid, width=1024, height=768)
    assert e.value.kind == "busy" and "800x600" in str(e.value), e.value
    r = run(d, sid, ["sh", "-c", "pgrep -c -x Xvfb"])
    assert r["stdout"].strip() == "1", r


# --- bounds and errors -----------------------------------------------------------------------


@pytest.mark.parametrize("method, params, words", [
    ("desktop.click", {"x": 800, "y": 0}, "x must be an integer from 0 to 799"),
    ("desktop.click", {"x": -1, "y": 0}, "x must be an integer from 0 to 799"),
    ("desktop.click", {"x": 1}, "x and y must be integers"),
    ("desktop.click", {"x": 1, "y": 1, "button": "left; rm -rf /"}, "button must be"),
    ("desktop.click", {"x": 1, "y": 1, "colour": 1}, "colour"),
    ("desktop.move", {"x": "1", "y": 1}, "x and y must be integers"),
    ("desktop.scroll", {"direction": "sideways"}, "direction must be"),
    ("desktop.scroll", {"direction": "up", "amount": 51}, "amount must be an integer from 1 to 50"),
    ("desktop.type", {"text": ""}, "text must be a string of 1 to 4096 bytes"),
    ("desktop.type", {"text": "x" * 4097}, "text must be a string of 1 to 4096 bytes"),
    ("desktop.key", {"keys": "ctrl+l $(id)"}, "\"$(id)\" is not a key name"),
    ("desktop.key", {"keys": "--help"}, "is not a key name"),
    ("desktop.key", {"keys": "   "}, "at least one key"),
    ("desktop.key", {"keys": " ".join(["a"] * 17)}, "at most 16 keys"),
    ("desktop.start", {"width": 100000}, "width must be an integer from 320 to 3840"),
])
def test_bad_input_is_refused_clearly(d, desk, method, params, words):
    sid, _ = desk
    with pytest.raises(RpcError) as e:
        d.call(method, sandbox_id=sid, **params)
    assert e.value.kind == "invalid_params" and words in str(e.value), e.value


def test_text_with_nul_is_refused(d, desk):
    sid, _ = desk
    with pytest.raises(RpcError) as e:
        d.call("desktop.type", sandbox_id=sid, text="a\u0000b")
    assert "NUL" in str(e.value), e.value


def test_calls_before_start_say_to_start_it(d, fresh):
    sid = fresh()
    for method, params in [("desktop.screenshot", {}), ("desktop.click", {"x": 1, "y": 1}),
                           ("desktop.type", {"text": "a"}), ("desktop.key", {"keys": "a"})]:
        with pytest.raises(RpcError) as e:
            d.call(method, sandbox_id=sid, **params)
        assert e.value.kind == "unavailable" and "desktop.start" in str(e.value), e.value


def test_start_in_a_sandbox_without_the_desktop_image_says_which_image(d):
    sid = d.call("sandbox.create")["sandbox_id"]
    try:
        with pytest.raises(RpcError) as e:
            d.call("desktop.start", sandbox_id=sid)
        assert "desktop image" in str(e.value), e.value
        with pytest.raises(RpcError) as e:
            d.call("desktop.screenshot", sandbox_id=sid)
        assert e.value.kind == "unavailable", e.value
    finally:
        d.call("sandbox.remove", sandbox_id=sid, force=True)


def test_without_network_the_desktop_runs_and_says_why_no_novnc(d):
    sid = d.call("sandbox.create", image="desktop")["sandbox_id"]
    try:
        r = d.call("desktop.start", sandbox_id=sid)
        assert r["novnc_url"] is None and r["novnc_host_port"] is None, r
        assert "has no network" in r["exposure_error"], r
        assert png_size(screenshot(d, sid)) == (1280, 800)
    finally:
        d.call("sandbox.remove", sandbox_id=sid, force=True)


def test_x_server_death_is_reported_and_a_new_start_recovers(d, fresh):
    sid = fresh()
    d.call("desktop.start", sandbox_id=sid)
    run(d, sid, ["pkill", "-KILL", "-x", "Xvfb"])

    def refused():
        try:
            screenshot(d, sid)
            return None
        except RpcError as e:
            assert e.kind == "unavailable", e
            # first scrot's own failure, then (the desktop has ended) the advice to start it again
            return "desktop.start starts one" in str(e)
    poll(refused, "screenshots to say the desktop is gone once Xvfb died")
    # its log names the process that ended it (Xvfb, or one that lost its display first)
    log = run(d, sid, ["cat", "/tmp/.nsbox-desktop.log"])["stdout"]
    assert re.search(r"nsbox-desktop: (xvfb|openbox|x11vnc|websockify) \(pid \d+\) exited with status \d+; "
                     r"the desktop stops", log), log
    r = d.call("desktop.start", sandbox_id=sid)
    assert png_size(screenshot(d, sid)) == (r["width"], r["height"])


def test_the_desktop_counts_in_the_sandboxs_processes_and_ends_with_it(d, fresh):
    sid = fresh()
    before = d.call("sandbox.stats", sandbox_id=sid)["sandboxes"][0]
    d.call("desktop.start", sandbox_id=sid)
    r = run(d, sid, ["ps", "-eo", "comm"])
    names = set(r["stdout"].split())
    assert {"Xvfb", "openbox", "x11vnc"} <= names, names
    after = d.call("sandbox.stats", sandbox_id=sid)["sandboxes"][0]
    assert after["pids"] >= before["pids"] + 4, (before, after)
    # the X server, VNC and websockify's Python: tens of MiB, in the sandbox's memory cgroup
    assert after["memory_bytes"] >= before["memory_bytes"] + (16 << 20), (before, after)
    # a running desktop keeps nothing busy: removed without force
    d.call("sandbox.remove", sandbox_id=sid)
    with pytest.raises(RpcError):
        d.call("desktop.screenshot", sandbox_id=sid)


def test_the_desktop_cannot_reach_the_hosts_x_or_loopback(d, desk):
    sid, _ = desk
    # An X server's sockets on the host: the abstract one of display :93 and TCP 6093 (X's port for
    # :93) on every address. The sandbox's TCP goes to the egress proxy, which may accept and then
    # refuse: what counts is that nothing arrives at the host's listener.
    ux = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ux.bind(b"\0/tmp/.X11-unix/X93")
    ux.listen(4)
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", 6093))
    tcp.listen(4)
    gateway = d.call("sandbox.info", sandbox_id=sid)["egress"]["gateway"]
    try:
        code = r'''
import json, socket, sys
out = {}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(b"\0/tmp/.X11-unix/X93"); out["abstract"] = "connected"
except OSError as e:
    out["abstract"] = type(e).__name__
for host in ("127.0.0.1", sys.argv[1]):
    try:
        c = socket.create_connection((host, 6093), timeout=5)
        c.sendall(b"l\0\x0b\0")  # an X client's first bytes
        c.settimeout(5)
        out[host] = "answered" if c.recv(8) else "closed"
    except OSError as e:
        out[host] = type(e).__name__
print(json.dumps(out))
'''
        r = run(d, sid, ["python3", "-c", code, gateway], timeout_seconds=60)
        out = json.loads(r["stdout"])
        assert out["abstract"] != "connected" and "answered" not in out.values(), out
        tcp.setblocking(False)
        ux.setblocking(False)
        for listener in (tcp, ux):
            with pytest.raises(BlockingIOError):
                listener.accept()
        r = d.call("sandbox.exec", sandbox_id=sid, argv=["xdpyinfo"], env={"DISPLAY": ":93"})
        assert r["exit_code"] != 0, r
        r = d.call("sandbox.exec", sandbox_id=sid, argv=["xdpyinfo"], env={"DISPLAY": "%s:93" % gateway})
        assert r["exit_code"] != 0, r
    finally:
        ux.close()
        tcp.close()


# --- through the fronts ----------------------------------------------------------------------


def test_mcp_screenshot_is_an_image_block_of_a_png_of_the_screen(d, desk):
    from test_mcp import McpProcess, init_params
    sid, _ = desk
    m = McpProcess(d.socket)
    try:
        m.request("initialize", init_params("2025-11-25"))
        m.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = {t["name"] for t in m.request("tools/list")["result"]["tools"]}
        assert {"desktop_start", "desktop_screenshot", "desktop_click", "desktop_type", "desktop_key",
                "desktop_move", "desktop_scroll"} <= tools, tools
        r = m.request("tools/call", {"name": "desktop_screenshot", "arguments": {"sandbox_id": sid}})["result"]
        assert r["isError"] is False, r
        images = [c for c in r["content"] if c["type"] == "image"]
        assert len(images) == 1 and images[0]["mimeType"] == "image/png", r["content"][0]
        assert png_size(base64.b64decode(images[0]["data"])) == (800, 600)
        text = json.loads(r["content"][0]["text"])
        assert text["width"] == 800 and "data" not in text, text
        # an agent makes its own desktop sandbox
        r = m.request("tools/call", {"name": "create_sandbox", "arguments": {"image": "desktop",
                                                                              "network": POLICY}})["result"]
        own = json.loads(r["content"][0]["text"])["sandbox_id"]
        r = m.request("tools/call", {"name": "desktop_start", "arguments": {"sandbox_id": own, "width": 640,
                                                                             "height": 480}})["result"]
        assert r["isError"] is False and "vnc.html" in r["content"][0]["text"], r["content"][0]["text"]
        r = m.request("tools/call", {"name": "desktop_screenshot", "arguments": {"sandbox_id": own}})["result"]
        assert png_size(base64.b64decode(r["content"][1]["data"])) == (640, 480)
        m.request("tools/call", {"name": "remove_sandbox", "arguments": {"sandbox_id": own, "force": True}})
        r = m.request("tools/call", {"name": "desktop_click", "arguments": {"sandbox_id": sid, "x": 900,
                                                                             "y": 1}})["result"]
        assert r["isError"] is True and "x must be an integer from 0 to 799" in r["content"][0]["text"], r
    finally:
        rc, err = m.close()
        assert rc == 0, err


def test_sdk_desktop(d, desk):
    sid, _ = desk
    with Sandbox.connect(sid, socket=d.socket) as sb:
        assert sb.desktop.start()["width"] == 800
        png = sb.desktop.screenshot()
        assert png_size(png) == (800, 600)
        sb.desktop.move(7, 8)
        sb.desktop.click(7, 8, button="right")
        sb.desktop.key(["Escape"])
        r = run(d, sid, ["xdotool", "getmouselocation", "--shell"])
        assert "X=7\nY=8\n" in r["stdout"], r


def test_cli_desktop(d, desk):
    sid, _ = desk
    nsbox = [os.path.join(BUILD, "nsbox"), "--socket", d.socket]
    r = subprocess.run(nsbox + ["desktop", "start", sid], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("http://127.0.0.1:") and "vnc.html" in r.stdout, r
    r = subprocess.run(nsbox + ["desktop", "screenshot", sid], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert png_size(r.stdout) == (800, 600)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "shot.png")
        r = subprocess.run(nsbox + ["desktop", "screenshot", sid, path], capture_output=True, timeout=120)
        assert r.returncode == 0 and r.stdout == b"", r
        with open(path, "rb") as f:
            assert png_size(f.read()) == (800, 600)
    r = subprocess.run(nsbox + ["desktop", "click", sid, "5", "6"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "", r
    r = subprocess.run(nsbox + ["desktop", "click", sid, "5", "6000"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 125 and "y must be an integer from 0 to 599" in r.stderr, r
