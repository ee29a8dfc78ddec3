# SPDX-License-Identifier: Apache-2.0
"""E2B's desktop SDK (@e2b/desktop, pinned in tests/e2b/package.json),
unmodified, against nsbox-http on the desktop image: Sandbox.create starts its
own Xvfb and `startxfce4` through commands, a Tk window is opened, and its
screenshots, mouse and keyboard change what is drawn; getScreenSize (xrandr)
says the screen's size and launch (gtk-launch) opens xterm by its .desktop
entry; the SDK's stream (x11vnc, noVNC) starts in the sandbox. Needs the
desktop image (make image IMAGE=desktop)."""
import base64
import os

from conftest import IMAGE_DIR
from e2b_front import front  # noqa: F401 (fixture)
from test_desktop import png_pixels
from test_e2b_sdk import scenario, sdk_dir  # noqa: F401 (fixture)


def near(colour, want, slack=40):
    return all(abs(a - b) <= slack for a, b in zip(colour, want))


def test_desktop_sdk_screenshot_mouse_keyboard_screen_size_launch_kill(front, sdk_dir):
    assert os.path.isdir(os.path.join(IMAGE_DIR, "desktop", "rootfs")), (
        "no desktop image in %s: make image IMAGE=desktop" % IMAGE_DIR)
    r = scenario(front, sdk_dir, "desktop")
    assert r["display"] == ":0\n"  # the SDK's DISPLAY, given as the sandbox's env
    x, y = r["window"]["x"], r["window"]["y"]
    assert r["cursor"] == {"x": x + 5, "y": y + 150}
    shots = {}
    for name in ("before", "clicked", "typed"):
        width, height, rows = png_pixels(base64.b64decode(r[name]))
        assert (width, height) == (800, 600), name  # the resolution Sandbox.create asked for
        shots[name] = rows
    # blue window, white pad; the click turned the pad red; typing "#00ff00" + Enter the window green
    assert near(shots["before"][y + 60][x + 250], (0, 0, 255))
    assert near(shots["before"][y + 170][x + 250], (255, 255, 255))
    assert near(shots["clicked"][y + 170][x + 250], (255, 0, 0))
    assert near(shots["clicked"][y + 60][x + 250], (0, 0, 255))
    assert near(shots["typed"][y + 60][x + 250], (0, 255, 0))
    assert near(shots["typed"][y + 170][x + 250], (255, 0, 0))
    # outside the window: the root window, which nothing draws on (the SDK's Xvfb -retro: black and white)
    assert shots["typed"][590][790] in ((0, 0, 0), (255, 255, 255))
    assert len(r["windowIds"]) >= 1
    assert r["screenSize"] == {"width": 800, "height": 600}
    # launch("xterm"): its window, found by class, titled by xterm, drawn white where it is
    assert len(r["launchedWindows"]) >= 1 and r["launchedWindows"][0] not in r["windowIds"]
    assert r["launchedTitle"] == "xterm"
    g = r["launchedGeometry"]
    _, _, launched = png_pixels(base64.b64decode(r["launched"]))
    middle = [(g["X"] + g["WIDTH"] // 2 + dx, g["Y"] + g["HEIGHT"] // 2 + dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)]
    assert all(launched[py][px] == (255, 255, 255) for px, py in middle), g
    assert not all(shots["typed"][py][px] == (255, 255, 255) for px, py in middle), g  # not there before
    assert r["launchedAtEnd"] == r["launchedWindows"]  # still running after the stream's start and stop
    # the stream's noVNC answers inside the sandbox; its URL names E2B's domain, not nsbox-http (docs/e2b.md)
    assert r["novncPage"] is True
    assert r["streamUrl"].startswith("https://6080-" + r["sandboxId"] + "."), r["streamUrl"]
    assert "/vnc.html?autoconnect=true" in r["streamUrl"], r["streamUrl"]
    assert r["isRunningAfterKill"] is False
