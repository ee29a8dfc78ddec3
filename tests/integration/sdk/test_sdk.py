# SPDX-License-Identifier: Apache-2.0
"""The Python SDK (sdk/python/nsbox) against the real daemon."""
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import nsbox  # noqa: E402
from nsbox import Sandbox  # noqa: E402
from nsbox.aio import AsyncSandbox  # noqa: E402

ALL_BYTES = bytes(range(256))


@pytest.fixture
def sb(daemon):
    with Sandbox.create(socket=daemon.socket) as s:
        yield s


def ids(daemon):
    return {s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]}


def test_context_manager_creates_and_removes_the_sandbox(daemon):
    with Sandbox.create(socket=daemon.socket, memory="256M", labels={"who": "sdk"}) as s:
        assert s.sandbox_id in ids(daemon)
        info = s.info()
        assert info["limits"]["memory_bytes"] == 256 << 20
        assert info["labels"] == {"who": "sdk"}
        assert s.sandbox_id in {x["sandbox_id"] for x in Sandbox.list(socket=daemon.socket)}
    assert s.sandbox_id not in ids(daemon)


def test_keep_leaves_the_sandbox_and_connect_finds_it(daemon):
    with Sandbox.create(socket=daemon.socket, keep=True, session_id="sdk-keep") as s:
        pass
    assert s.sandbox_id in ids(daemon)
    again = Sandbox.create(socket=daemon.socket, session_id="sdk-keep")
    assert again.sandbox_id == s.sandbox_id and again.existing
    again.close()
    with Sandbox.connect(s.sandbox_id, socket=daemon.socket) as c:
        assert c.commands.run("echo hi").stdout == "hi\n"
    assert s.sandbox_id in ids(daemon)  # connect keeps by default
    c.kill()
    assert s.sandbox_id not in ids(daemon)


def test_run_code_stateful_keeps_variables_and_stateless_does_not(sb):
    r = sb.run_code("x = 6 * 7\nprint('out')\nx")
    assert r.status == "ok" and r.result == "42" and r.text == "42" and r.stdout == "out\n"
    assert sb.run_code("x + 1").result == "43"
    r = sb.run_code("print(x)", stateful=False)
    assert r.status == "error" and r.error.name == "NameError" and "x" in r.error.value
    r = sb.run_code("raise KeyError('nope')")
    assert r.status == "error" and r.error.name == "KeyError" and "Traceback" in r.error.traceback


def test_run_code_returns_a_matplotlib_figure_as_png_bytes(sb):
    r = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", timeout=120)
    assert r.status == "ok", r.stderr
    assert len(r.images) == 1
    assert r.images[0].mime == "image/png" and r.images[0].data.startswith(b"\x89PNG\r\n\x1a\n")


def test_run_code_callbacks_get_a_cells_output_while_it_runs(daemon, sb):
    """The cell waits for a file that only the stdout callback creates; its
    figure, error, env and context come back as without callbacks."""
    other = Sandbox.connect(sb.sandbox_id, socket=daemon.socket)
    seen = []

    def on_stdout(chunk):
        seen.append(chunk)
        if "ready" in chunk:
            other.files.write("/workspace/go", "1")

    code = ("import os, sys, time\nimport matplotlib.pyplot as plt\nprint('ready')\nplt.plot([1, 2])\nplt.show()\n"
            "for _ in range(400):\n    if os.path.exists('/workspace/go'):\n        break\n    time.sleep(0.05)\n"
            "print('saw-go' if os.path.exists('/workspace/go') else 'no-go', os.environ.get('CELL'))\n"
            "print('e', file=sys.stderr)\nraise KeyError('k')")
    r = sb.run_code(code, on_stdout=on_stdout, on_stderr=seen.append, env={"CELL": "v"}, context="live",
                    timeout=60)
    other.close()
    assert r.stdout == "ready\nsaw-go v\n" and r.stderr.startswith("e\n"), r
    assert "".join(seen) == "ready\nsaw-go v\ne\n"
    assert (r.error.name, r.error.value) == ("KeyError", "'k'")
    assert len(r.images) == 1 and r.images[0].data.startswith(b"\x89PNG")
    assert sb.run_code("'plt' in globals()").result == "False"  # that was the context's
    assert sb.run_code("'plt' in globals()", context="live").result == "True"


def test_run_code_writes_text_and_binary_files_first(sb):
    r = sb.run_code("print(open('a.txt').read(), list(open('b.bin', 'rb').read()) == list(range(256)))",
                    stateful=False, files={"a.txt": "hello", "b.bin": ALL_BYTES})
    assert r.stdout == "hello True\n", r


def test_commands_binary_stdin_and_stdout_round_trip(sb):
    r = sb.commands.run(["cat"], stdin=ALL_BYTES, binary=True)
    assert r.exit_code == 0 and r.stdout == ALL_BYTES
    r = sb.commands.run("cat | wc -c", stdin=ALL_BYTES * 4)
    assert r.stdout.strip() == "1024"
    r = sb.commands.run(["sh", "-c", "cat; echo err >&2; exit 3"], stdin="text in")
    assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("text in", "err\n", 3, False)
    with pytest.raises(nsbox.CommandExitError) as e:
        sb.commands.run("exit 4", check=True)
    assert e.value.result.exit_code == 4


def test_commands_run_cwd_env_user(sb):
    r = sb.commands.run("pwd; echo $FOO; id -u", cwd="/tmp", env={"FOO": "bar"}, user="root")
    assert r.stdout == "/tmp\nbar\n0\n"


def test_streaming_callbacks_receive_output_before_the_command_ends(daemon, sb):
    """The command waits for a file that only the stdout callback creates: it
    ends only if the callback ran while it was still running."""
    other = Sandbox.connect(sb.sandbox_id, socket=daemon.socket)
    seen = []

    def on_stdout(chunk):
        seen.append(chunk)
        if "ready" in chunk:
            other.files.write("/workspace/go", "1")

    r = sb.commands.run("echo ready; i=0; while [ ! -e /workspace/go ] && [ $i -lt 200 ]; do sleep 0.05; "
                        "i=$((i+1)); done; [ -e /workspace/go ] && echo done; echo e >&2",
                        on_stdout=on_stdout, on_stderr=seen.append, timeout=60)
    other.close()
    assert r.exit_code == 0 and "".join(seen).replace("e\n", "", 1) == "ready\ndone\n", (r, seen)
    assert r.stdout == "ready\ndone\n" and r.stderr == "e\n"


def test_streaming_a_multibyte_character_split_between_chunks_stays_whole(sb):
    chunks = []
    r = sb.commands.run(["sh", "-c", r"printf '\303'; sleep 0.3; printf '\251\n'"], on_stdout=chunks.append)
    assert r.stdout == "é\n" and "".join(chunks) == "é\n" and "\ufffd" not in r.stdout


def test_background_handle_wait_output_and_kill(sb):
    h = sb.commands.run("echo start; sleep 0.5; echo end", background=True)
    got = []
    r = h.wait(on_stdout=got.append, timeout=60)
    assert r.exit_code == 0 and r.stdout == "start\nend\n" and "".join(got) == r.stdout
    long = sb.commands.run(["sleep", "300"], background=True, timeout=None)
    assert long.status().running
    assert long.exec_id in {x.exec_id for x in sb.commands.list()}
    long.kill(15)
    r = long.wait(timeout=60)
    assert r.exit_code is None and r.signal == 15 and not r.running
    b = sb.commands.run(["head", "-c", "256", "/dev/urandom"], background=True, binary=True)
    out = b.wait(timeout=60).stdout
    assert isinstance(out, bytes) and len(out) == 256


def test_files_binary_round_trip_list_exists_remove(sb):
    sb.files.write("/workspace/d/e/all.bin", ALL_BYTES, mode=0o600)
    assert sb.files.read("d/e/all.bin", binary=True) == ALL_BYTES
    sb.files.write("t.txt", "héllo\n")
    assert sb.files.read("t.txt") == "héllo\n"
    entries = {e.name: e for e in sb.files.list("/workspace/d/e")}
    assert entries["all.bin"].size == 256 and entries["all.bin"].type == "file"
    assert entries["all.bin"].mode & 0o777 == 0o600
    assert sb.files.exists("t.txt") and not sb.files.exists("nope.txt")
    sb.files.mkdir("x/y")
    assert sb.files.list("x")[0].name == "y"
    sb.files.remove("d", recursive=True)
    assert not sb.files.exists("d")


def test_errors_map_to_exception_classes(daemon, sb):
    with pytest.raises(nsbox.NotFoundError) as e:
        Sandbox.connect("00000000-0000-0000-0000-000000000000", socket=daemon.socket)
    assert e.value.kind == "not_found" and isinstance(e.value, nsbox.NsboxError)
    with pytest.raises(nsbox.NotFoundError):
        sb.files.read("/does/not/exist")
    with pytest.raises(nsbox.InvalidParamsError):
        sb.commands.run("true", user="nobody")
    with pytest.raises(nsbox.InvalidParamsError):
        sb.pip_install(["--index-url=http://evil/ x"])
    with pytest.raises(nsbox.BusyError):
        h = sb.commands.run(["sleep", "300"], background=True, timeout=None)
        sb.remove(force=False)
    h.kill()
    with pytest.raises(nsbox.NsboxConnectionError):
        Sandbox.create(socket=os.path.join(daemon.dir, "no-such.sock"))
    sb.kill()
    with pytest.raises(nsbox.NotFoundError):  # exists() does not hide a missing sandbox
        sb.files.exists("x")
    with pytest.raises(nsbox.NotFoundError):
        sb.commands.run("true")


def test_asyncio_twin(daemon):
    async def main():
        async with AsyncSandbox.create(socket=daemon.socket) as s:
            assert s.sandbox_id in {x["sandbox_id"] for x in await AsyncSandbox.list(socket=daemon.socket)}
            assert (await s.run_code("y = 5\ny * 2")).result == "10"
            assert (await s.run_code("y")).result == "5"
            r = await s.commands.run(["cat"], stdin=ALL_BYTES, binary=True)
            assert r.stdout == ALL_BYTES
            seen = []

            async def on_stdout(chunk):
                seen.append(chunk)
            r = await s.commands.run("echo a; echo b", on_stdout=on_stdout)
            assert "".join(seen) == "a\nb\n" == r.stdout
            h = await s.commands.run("sleep 0.2; echo bg", background=True)
            assert (await h.wait(timeout=60)).stdout == "bg\n"
            await s.files.write("z.bin", ALL_BYTES)
            assert await s.files.read("z.bin", binary=True) == ALL_BYTES
            assert await s.files.exists("z.bin")
            try:
                await s.files.read("nope")
                raise AssertionError("read of a missing file did not raise")
            except nsbox.NotFoundError:
                pass
            # Two sandboxes at once on the same loop, each on its own socket.
            other = await AsyncSandbox.create(socket=daemon.socket)
            a, b = await asyncio.gather(s.commands.run("echo one"), other.commands.run("echo two"))
            assert (a.stdout, b.stdout) == ("one\n", "two\n")
            await other.kill()
            await other.close()
            return s.sandbox_id
    sid = asyncio.run(main())
    assert sid not in ids(daemon)


def test_pip_install_from_the_repo_into_a_prefix_imports(daemon):
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(REPO, "sdk", "python"), src,
                        ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
        target = os.path.join(tmp, "site")
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                            "--no-build-isolation", "--target", target, src], capture_output=True, timeout=300)
        assert p.returncode == 0, p.stderr.decode()
        code = ("import nsbox, sys; assert nsbox.__file__.startswith(sys.argv[1]), nsbox.__file__\n"
                "with nsbox.Sandbox.create(socket=sys.argv[2]) as s: print(s.run_code('1+1').result)")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = target
        p = subprocess.run([sys.executable, "-c", code, target, daemon.socket], capture_output=True, cwd=tmp,
                           env=env, timeout=120)
        assert p.returncode == 0 and p.stdout == b"2\n", p.stderr.decode()


def test_make_install_sdk_puts_nsbox_where_python3_imports_it(daemon):
    with tempfile.TemporaryDirectory() as dest:
        p = subprocess.run(["make", "-s", "-C", REPO, "install-sdk", "DESTDIR=" + dest, "PREFIX=/usr/local"],
                           capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        found = [root for root, dirs, files in os.walk(dest) if "aio.py" in files and "__init__.py" in files]
        assert len(found) == 1, found
        site = os.path.dirname(found[0])[len(dest):]
        # Without DESTDIR that directory is on /usr/bin/python3's own path.
        p = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.argv[1] in sys.path)", site],
                           capture_output=True, timeout=60)
        assert p.stdout == b"True\n", (site, p.stdout)
        env = dict(os.environ, PYTHONPATH=dest + site)
        p = subprocess.run(["/usr/bin/python3", "-c", "import nsbox.aio, sys\n"
                            "print(nsbox.Sandbox.server_info(socket=sys.argv[1])['version'] is not None)",
                            daemon.socket], capture_output=True, cwd=dest, env=env, timeout=60)
        assert p.stdout == b"True\n", p.stderr.decode()


def test_a_raising_callback_propagates_and_the_connection_stays_usable(sb):
    def boom(chunk):
        raise RuntimeError("callback failed on %r" % chunk)
    with pytest.raises(RuntimeError, match="callback failed"):
        sb.commands.run("echo one; echo two", on_stdout=boom)
    assert sb.commands.run("echo next").stdout == "next\n"
    assert sb.run_code("2 + 2").result == "4"


def test_pause_resume_snapshot_and_a_sandbox_from_the_snapshot(daemon):
    with Sandbox.create(socket=daemon.socket) as s:
        s.files.write("kept.bin", ALL_BYTES)
        assert s.run_code("n = 3").status == "ok"
        assert s.pause()["state"] == "paused" and s.info()["state"] == "paused"
        assert s.resume()["state"] == "running"
        assert s.run_code("n + 1").result == "4"  # the interpreter was frozen, not lost
        snap = s.snapshot(name="sdk-snap")
        assert snap["name"] == "sdk-snap" and snap["sandbox_id"] == s.sandbox_id
        with Sandbox.create(socket=daemon.socket, from_snapshot=snap["snapshot_id"]) as fork:
            assert fork.created["from_snapshot"] == snap["snapshot_id"]
            assert fork.files.read("kept.bin", binary=True) == ALL_BYTES
    daemon.call("snapshot.remove", snapshot_id=snap["snapshot_id"])


def test_asyncio_pause_and_resume(daemon):
    async def main():
        async with AsyncSandbox.create(socket=daemon.socket) as s:
            assert (await s.pause())["state"] == "paused"
            assert (await s.resume())["state"] == "running"
    asyncio.run(main())


def test_a_removed_sandbox_raises_sandbox_gone_saying_why(daemon):
    s = Sandbox.create(socket=daemon.socket)
    sid = s.sandbox_id
    s.remove()
    s.close()
    with pytest.raises(nsbox.SandboxGoneError) as e:
        Sandbox.connect(sid, socket=daemon.socket)
    # Still a NotFoundError for code that catches that.
    assert isinstance(e.value, nsbox.NotFoundError) and e.value.kind == "gone"
    assert e.value.data["sandbox_id"] == sid and "asked by uid" in e.value.data["reason"]
    assert "was removed at" in str(e.value)


def test_a_background_command_of_a_removed_sandbox_raises_sandbox_gone(daemon):
    s = Sandbox.create(socket=daemon.socket)
    h = s.commands.run("sleep 100", background=True)
    daemon.call("sandbox.remove", sandbox_id=s.sandbox_id, force=True)
    for call in (h.status, h.output, h.kill):
        with pytest.raises(nsbox.SandboxGoneError) as e:
            call()
        assert e.value.data["exec_id"] == h.exec_id and "asked by uid" in e.value.data["reason"]
        assert "ended with its sandbox" in str(e.value)
    s.close()


def test_create_says_what_idling_does(daemon):
    with Sandbox.create(socket=daemon.socket, idle_action="remove", paused_timeout=600) as s:
        info = s.info()
        assert info["idle_action"] == "remove" and info["paused_timeout_seconds"] == 600
        assert info["expires"]["action"] == "remove"
