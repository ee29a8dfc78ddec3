# SPDX-License-Identifier: Apache-2.0
"""The documentation: README.md's tour runs as written, and the docs hold together.

Every ```sh block of README.md is run with bash (-e, -o pipefail) against a real nsboxd
(a private one, see conftest.Daemon), from the source tree, with the built binaries first
on PATH and NSBOX_SOCKET naming the daemon's socket. A ```text block right after a ```sh
block is its expected output: each of its lines must appear in the block's stdout, in
order; "..." inside a line stands for anything.

The rest: README.md is at most 16 KiB, every relative link of README.md and docs/ points
at a file that exists, and no page carries development wording ("MISSED", "issue N").
"""
import os
import re
import shutil
import socket
import subprocess

import pytest

from conftest import BUILD, REPO, Daemon

README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs")
FENCE = re.compile(r"^```([A-Za-z0-9_-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def fenced_blocks(text):
    """(tag, body, end offset) of each fenced block, in order."""
    return [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]


def runnable_blocks():
    """(index, script, expected lines or None) of README.md's ```sh blocks."""
    text = open(README, encoding="utf-8").read()
    blocks = fenced_blocks(text)
    out = []
    for k, (tag, body, _start, end) in enumerate(blocks):
        if tag != "sh":
            continue
        expected = None
        if k + 1 < len(blocks):
            ntag, nbody, nstart, _ = blocks[k + 1]
            if ntag == "text" and text[end:nstart].strip() == "":
                expected = [l for l in nbody.split("\n") if l.strip()]
        out.append((len(out), body, expected))
    return out


def doc_pages():
    pages = [README]
    for root, _dirs, files in os.walk(DOCS):
        pages += [os.path.join(root, f) for f in files if f.endswith(".md")]
    return sorted(pages)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def appears_in_order(expected, stdout):
    """Each expected line (with "..." as a wildcard) found in stdout, each after the last."""
    pos = 0
    for line in expected:
        pattern = ".*?".join(re.escape(part) for part in line.strip().split("..."))
        m = re.compile(pattern).search(stdout, pos)
        if m is None:
            return line
        pos = m.end()
    return None


@pytest.fixture(scope="module")
def tour_daemon():
    d = Daemon()
    yield d
    d.stop()


BLOCKS = runnable_blocks()


def test_readme_has_a_tour():
    assert len(BLOCKS) >= 4, "README.md should have runnable ```sh blocks (CLI, MCP, SDK, HTTP)"
    assert all(expected for _k, _body, expected in BLOCKS), "every ```sh block shows its output"


@pytest.mark.parametrize("index,script,expected", BLOCKS, ids=[f"sh-block-{b[0]}" for b in BLOCKS])
def test_readme_block_runs(tour_daemon, index, script, expected):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
    env.update({
        "NSBOX_SOCKET": tour_daemon.socket,
        "PATH": os.path.abspath(BUILD) + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
        "PORT": str(free_port()),
    })
    env.pop("PYTHONPATH", None)
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (f"README.md ```sh block {index} exited {r.returncode}\n--- script\n{script}"
                               f"\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    if expected:
        missing = appears_in_order(expected, r.stdout)
        assert missing is None, (f"README.md ```sh block {index}: expected line {missing!r} not in its "
                                 f"output (in order)\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")


def test_readme_size():
    size = os.path.getsize(README)
    assert size <= 16384, f"README.md is {size} bytes, more than 16384"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_relative_links_resolve():
    broken = []
    for page in doc_pages():
        text = open(page, encoding="utf-8").read()
        # links inside fenced blocks are examples, not links
        text = FENCE.sub("", text)
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            full = os.path.normpath(os.path.join(os.path.dirname(page), path))
            if not os.path.exists(full):
                broken.append(f"{os.path.relpath(page, REPO)}: {target}")
    assert not broken, "broken relative links:\n" + "\n".join(broken)


def test_no_development_wording():
    bad = []
    for page in doc_pages():
        for n, line in enumerate(open(page, encoding="utf-8"), 1):
            if "MISSED" in line or re.search(r"\bissue \d", line):
                bad.append(f"{os.path.relpath(page, REPO)}:{n}: {line.strip()}")
    assert not bad, "development wording in the docs:\n" + "\n".join(bad)


def test_man_pages_render():
    for page in ("docs/man/nsbox.1", "docs/man/nsboxd.8"):
        if shutil.which("man") is None:
            pytest.skip("man is not installed")
        r = subprocess.run(["man", "--warnings", "-l", os.path.join(REPO, page)], capture_output=True,
                           text=True, env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "80"})
        assert r.returncode == 0 and r.stderr.strip() == "", f"{page}: man -l failed or warned\n{r.stderr}"
        assert "NAME" in r.stdout, f"{page} rendered without a NAME section"
