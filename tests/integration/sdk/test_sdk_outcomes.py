# SPDX-License-Identifier: Apache-2.0
"""What the SDK does at the edges: the end of a session's `with` block, a
command that cannot start, a command or code that runs past its timeout."""
import asyncio
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import nsbox  # noqa: E402
from nsbox import Sandbox  # noqa: E402
from nsbox.aio import AsyncSandbox  # noqa: E402


def ids(daemon):
    return {s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]}


@pytest.fixture
def sb(daemon):
    with Sandbox.create(socket=daemon.socket) as s:
        yield s


def test_a_session_sandbox_outlives_every_with_block_unless_keep_false(daemon):
    with Sandbox.create(socket=daemon.socket, session_id="sdk-outlives") as first:
        assert not first.existing
        first.files.write("note.txt", "kept")
    assert first.sandbox_id in ids(daemon)
    with Sandbox.create(socket=daemon.socket, session_id="sdk-outlives") as again:
        assert again.existing and again.sandbox_id == first.sandbox_id
    assert first.sandbox_id in ids(daemon)
    with Sandbox.create(socket=daemon.socket, session_id="sdk-outlives", keep=False) as last:
        assert last.files.read("note.txt") == "kept"
    assert first.sandbox_id not in ids(daemon)
    with Sandbox.create(socket=daemon.socket) as unnamed:  # no session: removed as before
        pass
    assert unnamed.sandbox_id not in ids(daemon)


def test_asyncio_a_session_sandbox_outlives_every_with_block_unless_keep_false(daemon):
    async def main():
        async with AsyncSandbox.create(socket=daemon.socket, session_id="sdk-aio-outlives") as first:
            await first.files.write("note.txt", "kept")
        assert first.sandbox_id in ids(daemon)
        async with AsyncSandbox.create(socket=daemon.socket, session_id="sdk-aio-outlives") as again:
            assert again.existing and again.sandbox_id == first.sandbox_id
        assert first.sandbox_id in ids(daemon)
        async with AsyncSandbox.create(socket=daemon.socket, session_id="sdk-aio-outlives", keep=False) as last:
            assert await last.files.read("note.txt") == "kept"
        assert first.sandbox_id not in ids(daemon)
    asyncio.run(main())


def test_an_argv_command_that_does_not_exist_raises_command_not_found(sb):
    for binary in (False, True):
        with pytest.raises(nsbox.CommandNotFoundError) as e:
            sb.commands.run(["nosuchbin", "x"], binary=binary)
        assert e.value.exit_code == 127 and e.value.result.exit_code == 127
        assert isinstance(e.value, nsbox.CommandExitError) and isinstance(e.value, FileNotFoundError)
        stderr = e.value.result.stderr
        assert "nosuchbin" in (stderr.decode() if binary else stderr), stderr
        assert "nosuchbin" in str(e.value)
    seen = []
    with pytest.raises(nsbox.CommandNotFoundError):  # streamed: the message reaches the callback too
        sb.commands.run(["nosuchbin"], on_stderr=seen.append)
    assert "nosuchbin" in "".join(seen)
    sb.files.write("script.sh", "echo hi\n", mode=0o644)
    with pytest.raises(nsbox.CommandNotFoundError) as e:  # there, but not executable
        sb.commands.run(["/workspace/script.sh"])
    assert e.value.exit_code == 126
    r = sb.commands.run("nosuchbin")  # the shell reports it, as in a terminal
    assert r.exit_code == 127 and "not found" in r.stderr
    assert sb.commands.run(["echo", "after"]).stdout == "after\n"


def test_a_background_command_that_does_not_exist_reports_its_message(sb):
    try:
        h = sb.commands.run(["nosuchbin"], background=True)
    except nsbox.NsboxError as e:  # refused at once is as clear
        assert "nosuchbin" in str(e)
        return
    r = h.wait(timeout=30)
    assert r.exit_code == 127 and "nosuchbin" in r.stderr, r
    assert "nosuchbin" in h.status().stderr


def test_wait_gets_the_end_of_a_long_background_job_past_the_head(sb):
    h = sb.commands.run("seq 1 200000", background=True, max_output_bytes=65536)
    r = h.wait(timeout=60)
    lines = r.stdout.splitlines()
    assert lines[0] == "1" and lines[-1] == "200000", (lines[:2], lines[-2:])


def test_a_command_past_its_timeout_raises_with_the_output_so_far(sb):
    with pytest.raises(nsbox.CommandTimeoutError) as e:
        sb.commands.run("echo started; echo warn >&2; sleep 60", timeout=1)
    err = e.value
    assert isinstance(err, nsbox.SandboxTimeoutError) and isinstance(err, TimeoutError)
    assert err.kind == "timeout" and err.timeout == 1
    assert err.result.timed_out and err.result.stdout == "started\n"
    # nsboxd says the timeout after the command's own stderr.
    assert err.result.stderr == "warn\nnsbox: timed out after 1 s (timeout_seconds), killed\n"
    seen = []
    with pytest.raises(nsbox.CommandTimeoutError) as e:
        sb.commands.run(["sh", "-c", "echo one; sleep 60"], timeout=1, on_stdout=seen.append)
    assert e.value.result.stdout == "one\n" == "".join(seen)
    assert sb.commands.run("echo after").stdout == "after\n"


def test_code_past_its_timeout_raises_with_the_output_so_far(sb):
    with pytest.raises(nsbox.CommandTimeoutError) as e:
        sb.run_code("import time\nprint('begun', flush=True)\ntime.sleep(60)", timeout=1)
    assert e.value.result.status == "timeout" and "begun" in e.value.result.stdout, e.value.result
    assert sb.run_code("1 + 1").result == "2"


def test_asyncio_timeouts_and_missing_commands_raise(daemon):
    async def main():
        async with AsyncSandbox.create(socket=daemon.socket) as s:
            try:
                await s.commands.run("echo so-far; sleep 60", timeout=1)
                raise AssertionError("no CommandTimeoutError")
            except nsbox.CommandTimeoutError as e:
                assert e.result.stdout == "so-far\n"
            try:
                await s.run_code("import time; time.sleep(60)", timeout=1)
                raise AssertionError("no CommandTimeoutError")
            except nsbox.CommandTimeoutError as e:
                assert e.result.status == "timeout"
            sh = await s.shell.create()
            try:
                await sh.run("echo shell-so-far; sleep 60", timeout=1)
                raise AssertionError("no CommandTimeoutError")
            except nsbox.CommandTimeoutError as e:
                assert e.result.stdout == "shell-so-far\n"
            assert (await sh.run("echo still")).stdout == "still\n"
            try:
                await s.commands.run(["nosuchbin"])
                raise AssertionError("no CommandNotFoundError")
            except nsbox.CommandNotFoundError as e:
                assert e.exit_code == 127 and "nosuchbin" in e.result.stderr
    asyncio.run(main())
