# SPDX-License-Identifier: Apache-2.0
"""The documentation: every example in README.md and docs/ runs as written, and the docs hold
together.

Every fenced block of README.md and docs/ says what it holds (```sh, ```console, ```text,
```json, ```python...): commands cannot hide in an untagged block. Every ```sh and ```console
block runs against a real nsboxd (a private one, see conftest.Daemon), with the built binaries
first on PATH and NSBOX_SOCKET naming the daemon's socket; README.md's from the source tree,
docs/'s in an empty directory of their own ($REPO names the source tree). A block that cannot
run here says so where a reader sees it: the text right before it ends with
"(not run by the docs tests: REASON)".

A ```sh block runs with bash (-e, -o pipefail); a ```text block right after it is its expected
output. A ```console block is a session: each "$ " line is a command (run in one bash, -e,
-o pipefail), the lines after it are what it prints. Expected lines must appear in the block's
stdout, in order; "..." inside a line stands for anything.

The rest: README.md is at most 16 KiB, every relative link of README.md and docs/ points at a
file that exists, the help texts in docs/reference/cli.md are the CLI's own, and no page carries
development wording ("MISSED", "issue N").
"""
import json
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


NOT_RUN = re.compile(r"\(not\s+run\s+by\s+the\s+docs\s+tests:\s+([^)]+)\)[.:]?\s*$")


def page_blocks(page):
    """(tag, body, line, reason not run or None, expected lines or None) of a page's blocks."""
    text = open(page, encoding="utf-8").read()
    blocks = fenced_blocks(text)
    out = []
    prev_end = 0
    for k, (tag, body, start, end) in enumerate(blocks):
        m = NOT_RUN.search(text[prev_end:start])
        prev_end = end
        expected = None
        if tag == "sh" and k + 1 < len(blocks):
            ntag, nbody, nstart, _ = blocks[k + 1]
            if ntag == "text" and text[end:nstart].strip() == "":
                expected = [l for l in nbody.split("\n") if l.strip()]
        if tag == "console":
            body, expected = console_script(body)
        out.append((tag, body, text.count("\n", 0, start) + 1, m.group(1) if m else None, expected))
    return out


def console_script(body):
    """A ```console block as (script, expected output lines): "$ " lines run, the rest is output."""
    script, expected = [], []
    for line in body.split("\n"):
        if line.startswith("$ "):
            script.append(line[2:])
        elif line.strip():
            expected.append(line)
    return "\n".join(script) + "\n", expected


def runnable_blocks():
    """(index, script, expected lines or None) of README.md's ```sh blocks that run."""
    return [(line, body, expected) for _tag, body, line, reason, expected in page_blocks(README)
            if _tag in ("sh", "console") and reason is None]


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


def run_block(daemon, page, line, script, expected, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
    env.update({
        "NSBOX_SOCKET": daemon.socket,
        "PATH": os.path.abspath(BUILD) + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
        "PORT": str(free_port()),
        "REPO": REPO,
    })
    env.pop("PYTHONPATH", None)
    where = "%s:%d" % (os.path.relpath(page, REPO), line)
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, (f"{where}: the block exited {r.returncode}\n--- script\n{script}"
                               f"\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    if expected:
        missing = appears_in_order(expected, r.stdout)
        assert missing is None, (f"{where}: expected line {missing!r} not in its output (in order)"
                                 f"\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")


def test_readme_has_a_tour():
    assert len(BLOCKS) >= 4, "README.md should have runnable ```sh blocks (CLI, MCP, SDK, HTTP)"
    assert all(expected for _k, _body, expected in BLOCKS), "every ```sh block shows its output"


@pytest.mark.parametrize("line,script,expected", BLOCKS, ids=[f"README.md:{b[0]}" for b in BLOCKS])
def test_readme_block_runs(tour_daemon, line, script, expected):
    run_block(tour_daemon, README, line, script, expected, REPO)


def docs_blocks():
    out = []
    for page in doc_pages():
        if page == README:
            continue
        for tag, body, line, reason, expected in page_blocks(page):
            if tag in ("sh", "console") and reason is None:
                out.append(pytest.param(page, line, body, expected,
                                        id="%s:%d" % (os.path.relpath(page, DOCS), line)))
    return out


@pytest.mark.parametrize("page,line,script,expected", docs_blocks())
def test_docs_block_runs(tour_daemon, tmp_path, page, line, script, expected):
    os.chmod(tmp_path, 0o755)
    run_block(tour_daemon, page, line, script, expected, str(tmp_path))


def test_every_block_says_what_it_holds():
    """An untagged block is neither run nor known not to be commands."""
    bad = []
    for page in doc_pages():
        for tag, body, line, reason, _expected in page_blocks(page):
            if tag == "":
                bad.append("%s:%d: a ``` block without a language (sh, console, text, json, ...)"
                           % (os.path.relpath(page, REPO), line))
            if reason is not None and tag not in ("sh", "console"):
                bad.append("%s:%d: 'not run' said of a %s block" % (os.path.relpath(page, REPO), line, tag))
    assert not bad, "\n".join(bad)


def test_json_blocks_are_json():
    bad = []
    for page in doc_pages():
        for tag, body, line, _reason, _expected in page_blocks(page):
            if tag == "json":
                try:
                    json.loads(body)
                except ValueError as e:
                    bad.append("%s:%d: %s" % (os.path.relpath(page, REPO), line, e))
    assert not bad, "\n".join(bad)


def cli_help_sections():
    """(command words, documented help) of every "### nsbox WORDS" text block of
    docs/reference/cli.md and ".SS WORDS" of the man page nsbox(1)."""
    out = []
    text = open(os.path.join(DOCS, "reference", "cli.md"), encoding="utf-8").read()
    for m in re.finditer(r"^### nsbox ([a-z ]+)\n+```text\n(.*?)^```", text, re.M | re.S):
        out.append(pytest.param(m.group(1).split(), m.group(2), id="cli.md:" + m.group(1)))
    text = open(os.path.join(DOCS, "man", "nsbox.1"), encoding="utf-8").read()
    for m in re.finditer(r"^\.SS ([a-z ]+)\n\.nf\n(.*?)^\.fi$", text, re.M | re.S):
        body = m.group(2).replace("\\e", "\\").replace("\\&", "")
        out.append(pytest.param(m.group(1).split(), body, id="nsbox.1:" + m.group(1)))
    return out


@pytest.mark.parametrize("words,documented", cli_help_sections())
def test_cli_reference_help_is_the_clis(words, documented):
    """The reference and the man page show what `nsbox WORDS --help` prints (an empty "nsbox
    image" there hid that `nsbox image --help` failed)."""
    r = subprocess.run([os.path.join(BUILD, "nsbox"), "--socket", "/nonexistent", *words, "--help"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert documented.rstrip() == r.stdout.rstrip(), (
        "the documented help of 'nsbox %s' is not what `nsbox %s --help` prints:\n%s"
        % (" ".join(words), " ".join(words), r.stdout))


def test_every_command_is_in_the_reference_and_the_man_page():
    out = subprocess.run([os.path.join(BUILD, "nsbox"), "--help"], capture_output=True, text=True).stdout
    commands = {m for m in re.findall(r"^  nsbox ([a-z]+)", out, re.M)}
    documented = {}
    for p in cli_help_sections():
        words, _body = p.values
        documented.setdefault(p.id.split(":")[0], set()).add(words[0])
    for where in ("cli.md", "nsbox.1"):
        assert commands <= documented.get(where, set()), (where, commands - documented.get(where, set()))


def test_install_makes_the_etc_nsbox_the_docs_write_to(tmp_path):
    """docs/http-and-kubernetes.md writes /etc/nsbox/http-tokens, nsbox-http.service reads it and
    nsboxd reads /etc/nsbox/nsboxd.json: make install makes that directory."""
    dest = tmp_path / "root"
    # -o: install the binaries already built in BUILD, build nothing.
    r = subprocess.run(["make", "-s", "-C", REPO, "install", "-o", "all", "-o", "install-sdk",
                        "DESTDIR=" + str(dest), "BUILD=" + os.path.abspath(BUILD)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    etc = dest / "etc" / "nsbox"
    assert etc.is_dir() and (etc.stat().st_mode & 0o777) == 0o755, list((dest / "etc").iterdir())
    assert (dest / "etc" / "systemd" / "system" / "nsbox-http.service").read_text().count("/etc/nsbox/http-tokens")
