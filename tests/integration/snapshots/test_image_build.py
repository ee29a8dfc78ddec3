# SPDX-License-Identifier: Apache-2.0
"""The image build's long steps (debootstrap, apt-get install) say how far
they are while they run: build-image.sh's with_progress, taken out of the
script as it is and run here alone on a step of our own (the whole build
takes minutes and needs Debian's mirror). The step's output goes to the
build log; the terminal gets a line every 10 s, or on a terminal one line
redrawn every second, with the step's time and the newest line of its log."""
import os
import pty
import re
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from conftest import REPO  # noqa: E402

BUILDER = os.path.join(REPO, "rootfs-builder", "build-image.sh")
# with_progress as build-image.sh calls it: NAME and LOG are its globals.
RUN = ('eval "$(sed -n "/^with_progress() {/,/^}/p" "$0")"; NAME=python; LOG=$1; '
       'with_progress "apt-get install" sh -c "$2"')


def test_a_long_step_prints_a_line_every_10_s_with_its_newest_log_line(tmp_path):
    log = tmp_path / "build.log"
    step = 'for i in $(seq 1 12); do echo "Unpacking package-$i"; sleep 1; done'
    r = subprocess.run(["bash", "-c", RUN, BUILDER, str(log), step], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert len(lines) >= 1, r
    # At 10 s: the step's name, its time and what it last wrote.
    assert re.fullmatch(r"image python: apt-get install, 10 s: Unpacking package-\d+", lines[0]), lines
    assert all(re.fullmatch(r"image python: apt-get install, \d+0 s: Unpacking package-\d+", line)
               for line in lines), lines
    # The step's own output is in the log, not on the terminal.
    assert log.read_text().splitlines() == ["Unpacking package-%d" % i for i in range(1, 13)]


def test_on_a_terminal_one_line_is_redrawn_every_second(tmp_path):
    log = tmp_path / "build.log"
    step = 'for i in 1 2 3 4 5 6; do echo "Setting up tool-$i"; sleep 1; done'
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("bash", ["bash", "-c", RUN, BUILDER, str(log), step])
    out = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 1)[0]:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, out
    text = out.decode()
    # Each second the line is cleared (CR, erase line) and drawn again; it
    # ends cleared, with no newline.
    draws = re.findall(r"\r\x1b\[Kimage python: apt-get install, (\d+) s: ([^\r]*)", text)
    assert [int(n) for n, _ in draws][:2] == [1, 2], text
    assert draws[0][1].startswith("Setting up tool-"), text
    assert text.endswith("\r\x1b[K") and "\n" not in text, repr(text)


def test_a_failed_step_returns_its_status_and_leaves_its_output_in_the_log(tmp_path):
    log = tmp_path / "build.log"
    r = subprocess.run(["bash", "-c", RUN + '; echo "status $?"', BUILDER, str(log),
                        'echo "E: Unable to locate package nosuch"; exit 100'],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines()[-1] == "status 100", r
    assert "E: Unable to locate package nosuch" in log.read_text()
    assert "Unable to locate" not in r.stdout, r
