# SPDX-License-Identifier: Apache-2.0
"""Calls on one sandbox run at once, from threads and from asyncio.gather.
Each command waits to see the other's file: if the SDK ran them one after
the other, the first would wait for the second until its timeout."""
import asyncio
import os
import sys
import threading
import time

import pytest

from conftest import REPO, Daemon

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import nsbox  # noqa: E402
from nsbox import Sandbox  # noqa: E402
from nsbox.aio import AsyncSandbox  # noqa: E402

# Long enough never to end a run that overlaps; the test fails at it otherwise.
WAIT = 20


def meet(me, other):
    """Make my file, then wait for the other command's."""
    return ("touch /tmp/%s && while [ ! -e /tmp/%s ]; do sleep 0.01; done && echo %s-saw-%s"
            % (me, other, me, other))


def run_overlapping(sb, name):
    try:
        return sb.commands.run(meet(name, "b" if name == "a" else "a"), timeout=WAIT)
    except nsbox.CommandTimeoutError as e:
        return e.result


def test_commands_from_two_threads_run_at_once(daemon):
    with Sandbox.create(socket=daemon.socket) as sb:
        results = {}
        threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, run_overlapping(sb, n)))
                   for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["a"].stdout == "a-saw-b\n" and not results["a"].timed_out, results
        assert results["b"].stdout == "b-saw-a\n" and not results["b"].timed_out, results
        assert sb.commands.run("echo after").stdout == "after\n"


def test_files_calls_do_not_wait_behind_a_running_command(daemon):
    with Sandbox.create(socket=daemon.socket) as sb:
        done = {}

        def long_command():
            try:
                done["r"] = sb.commands.run("touch started; while [ ! -e go ]; do sleep 0.01; done; echo went",
                                            timeout=WAIT)
            except nsbox.NsboxError as e:
                done["r"] = e
        t = threading.Thread(target=long_command)
        t.start()
        try:
            while not sb.files.exists("started"):  # answered while the command runs
                pass
            sb.files.write("go", "")
        finally:
            t.join()
        assert not isinstance(done["r"], Exception) and done["r"].stdout == "went\n", done


def test_asyncio_gathered_calls_on_one_sandbox_run_at_once(daemon):
    async def main():
        async with AsyncSandbox.create(socket=daemon.socket) as sb:
            async def run(name, **kw):
                try:
                    return await sb.commands.run(meet(name, "b" if name == "a" else "a"), timeout=WAIT, **kw)
                except nsbox.CommandTimeoutError as e:
                    return e.result
            streamed = []
            a, b = await asyncio.gather(run("a", on_stdout=streamed.append), run("b"))
            assert a.stdout == "a-saw-b\n" == "".join(streamed) and b.stdout == "b-saw-a\n", (a, b)

            async def waiter():
                return await sb.commands.run("touch started; while [ ! -e go ]; do sleep 0.01; done; echo went",
                                             timeout=WAIT)

            async def files():
                while not await sb.files.exists("started"):
                    await asyncio.sleep(0)
                await sb.files.write("go", "")
            r, _ = await asyncio.gather(waiter(), files())
            assert r.stdout == "went\n"
            assert (await sb.commands.run("echo after")).stdout == "after\n"
    asyncio.run(main())


@pytest.fixture(scope="module")
def quick_idle_daemon():
    """An nsboxd that closes a client's connection idle for 1 s."""
    d = Daemon(extra_args=["--client-idle-timeout-seconds", "1"])
    yield d
    assert d.stop() == 0


def wait_for_idle_closes(daemon, n):
    while daemon.read_log().count("; closing") < n:
        time.sleep(0.05)


def test_a_call_after_nsboxd_closed_the_idle_connection_works(quick_idle_daemon):
    d = quick_idle_daemon
    with Sandbox.create(socket=d.socket) as sb:
        closed = d.read_log().count("; closing")
        assert sb.commands.run("echo one").stdout == "one\n"
        wait_for_idle_closes(d, closed + 1)
        assert sb.commands.run("echo two").stdout == "two\n"

    async def main():
        async with AsyncSandbox.create(socket=d.socket) as s:
            closed = d.read_log().count("; closing")
            assert (await s.commands.run("echo one")).stdout == "one\n"
            wait_for_idle_closes(d, closed + 1)  # blocks the loop: it has not read the EOF
            assert (await s.commands.run("echo two")).stdout == "two\n"
    asyncio.run(main())


def test_many_threads_share_one_sandbox_and_few_connections_stay_open(daemon):
    threads = 8
    with Sandbox.create(socket=daemon.socket) as sb:
        out, errors = {}, []

        def work(i):
            try:
                sb.files.write("t%d" % i, str(i))
                out[i] = sb.commands.run(["cat", "t%d" % i]).stdout
            except Exception as e:
                errors.append(e)
        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors and out == {i: str(i) for i in range(threads)}
        assert len(sb._conn._idle) <= sb._conn.MAX_IDLE
