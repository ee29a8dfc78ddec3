# SPDX-License-Identifier: Apache-2.0
"""The Python SDK's shell sessions (sb.shell over shell.*) and the file
calls over fs.rename / fs.symlink / fs.chmod, against the real daemon."""
import asyncio
import os
import sys
import time

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import nsbox  # noqa: E402
from nsbox import Sandbox  # noqa: E402
from nsbox.aio import AsyncSandbox  # noqa: E402


@pytest.fixture
def sb(daemon):
    with Sandbox.create(socket=daemon.socket) as s:
        yield s


def test_a_shell_session_keeps_cwd_and_variables_between_commands(sb):
    sh = sb.shell.create(name="work")
    assert sh.name == "work"
    r = sh.run("mkdir -p /tmp/w && cd /tmp/w && export GREETING=hi && f() { echo fn; }")
    assert r.exit_code == 0 and not r.running
    r = sh.run("pwd; echo $GREETING; f; exit_status_test() { return 3; }; exit_status_test")
    assert r.stdout == "/tmp/w\nhi\nfn\n" and r.exit_code == 3 and r.cwd == "/tmp/w"
    # The same through sb.shell with the session's name.
    assert sb.shell.run("work", "echo $GREETING").stdout == "hi\n"
    assert [s["session"] for s in sb.shell.list()] == ["work"]


def test_a_non_blocking_command_is_polled_with_check_and_since(sb):
    sh = sb.shell.create()
    r = sh.run("echo first; sleep 1; echo second", blocking=False)
    assert r.running and r.command_id
    deadline = time.monotonic() + 60
    seen, since = "", None
    while True:
        c = sh.check(since=since)
        seen += c.stdout
        since = c.next
        if not c.running or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not c.running and c.exit_code == 0
    assert seen == "first\nsecond\n"


def test_binary_output_and_terminate(sb):
    sh = sb.shell.create(name="bin")
    r = sh.run("printf '\\x00\\xff\\x80'", binary=True)
    assert r.stdout == b"\x00\xff\x80"
    assert sh.terminate() is True
    assert sb.shell.list() == []
    with pytest.raises(nsbox.NotFoundError):
        sb.shell.run("bin", "echo gone")


def test_a_blocking_timeout_interrupts_the_command_raises_and_keeps_the_session(sb):
    sh = sb.shell.create(cwd="/tmp", env={"K": "v"})
    with pytest.raises(nsbox.CommandTimeoutError) as e:
        sh.run("echo so-far; sleep 30", timeout=1)
    assert e.value.result.timed_out and e.value.result.stdout == "so-far\n" and e.value.timeout == 1
    assert sh.run("pwd; echo $K").stdout == "/tmp\nv\n"


def test_files_rename_symlink_chmod(sb):
    sb.files.write("a.txt", "A")
    sb.files.write("b.txt", "B")
    sb.files.rename("a.txt", "c.txt")
    assert sb.files.read("c.txt") == "A" and not sb.files.exists("a.txt")
    with pytest.raises(nsbox.InvalidParamsError):
        sb.files.rename("b.txt", "c.txt")
    sb.files.rename("b.txt", "c.txt", overwrite=True)
    assert sb.files.read("c.txt") == "B"
    sb.files.symlink("c.txt", "link")
    st = sb.files.stat("link")
    assert st["type"] == "symlink" and st["target"] == "c.txt"
    assert sb.files.read("link") == "B"
    sb.files.chmod("c.txt", 0o600)
    assert sb.files.stat("c.txt")["mode"] == 0o600


def test_asyncio_shell_and_files(daemon):
    async def main():
        async with AsyncSandbox.create(socket=daemon.socket) as s:
            sh = await s.shell.create(name="a")
            await sh.run("cd /tmp && X=42")
            r = await sh.run("echo $X $PWD")
            assert r.stdout == "42 /tmp\n"
            assert (await s.shell.check("a")).exit_code == 0
            assert [x["session"] for x in await s.shell.list()] == ["a"]
            assert await s.shell.terminate("a")
            await s.files.write("x", "1")
            await s.files.rename("x", "y")
            await s.files.symlink("y", "z")
            await s.files.chmod("y", 0o640)
            assert await s.files.read("z") == "1"
            assert (await s.files.stat("y"))["mode"] == 0o640
    asyncio.run(main())
