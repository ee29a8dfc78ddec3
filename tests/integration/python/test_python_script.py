# SPDX-License-Identifier: Apache-2.0
"""Stateless python.run as `python3 FILE ARG...`: the script's directory on
sys.path, script_name and args, streamed output, and `nsbox python` on top
of them ("nsbox python streams output, takes script arguments,
does not overwrite the user's /workspace/script.py, and hides the runner's
own frames in tracebacks")."""
import base64
import subprocess
import threading
import time

import pytest
from conftest import ok
from nsbox_client import RpcError

pytestmark = [pytest.mark.nested]


def test_a_stateless_script_imports_modules_next_to_it(daemon, sandbox):
    r = daemon.call("python.run", sandbox_id=sandbox, code="import helper\nprint(helper.X)",
                    files={"helper.py": "X = 5\n"})
    assert r["status"] == "ok" and r["stdout"] == "5\n", r


def test_a_named_script_gets_its_arguments_and_its_name_and_leaves_script_py_alone(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/script.py", content="# mine\n")
    code = "import sys\nprint(sys.argv)\nprint(sys.path[0])\nraise ValueError('boom')\n"
    r = daemon.call("python.run", sandbox_id=sandbox, code=code, script_name="analysis.py",
                    args=["--in", "a b", "ü"])
    assert r["status"] == "error" and r["exit_code"] == 1
    assert r["stdout"] == "['analysis.py', '--in', 'a b', 'ü']\n/workspace\n", r
    # The user's frame only, named as the user named it, with its line.
    assert r["stderr"].startswith("Traceback (most recent call last):\n  File \"analysis.py\", line 4, in <module>\n"), r
    assert "raise ValueError('boom')" in r["stderr"] and "nsbox" not in r["stderr"], r["stderr"]
    assert "runpy" not in r["stderr"] and "run.py" not in r["stderr"]
    assert daemon.call("fs.read", sandbox_id=sandbox, path="/workspace/script.py")["content"] == "# mine\n"
    assert r["files_produced"] == {}
    left = daemon.call("sandbox.exec", sandbox_id=sandbox, command="ls -a /tmp")["stdout"]
    assert ".nsbox-script" not in left and ".nsbox-report" not in left, left


def test_a_nested_traceback_shows_the_users_frames_only(daemon, sandbox):
    code = "def f():\n    return 1 / 0\n\nf()\n"
    r = daemon.call("python.run", sandbox_id=sandbox, code=code, script_name="job.py")
    frames = [l for l in r["stderr"].splitlines() if l.startswith("  File ")]
    assert frames == ['  File "job.py", line 4, in <module>', '  File "job.py", line 2, in f'], r["stderr"]


def test_stream_sends_output_as_it_comes_then_the_result(daemon, sandbox):
    code = ("import sys, time\nprint('first', flush=True)\nprint('err', file=sys.stderr, flush=True)\n"
            "time.sleep(1.5)\nprint('last')\n")
    with daemon.client() as c:
        seen = []

        def watch():
            # The first line arrives while the code still sleeps.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not c.notifications:
                time.sleep(0.02)
            seen.append(list(c.notifications))

        t = threading.Thread(target=watch)
        t.start()
        r = c.call("python.run", sandbox_id=sandbox, code=code, stream=True)
        t.join()
        notes = [n["params"] for n in c.notifications if n.get("method") == "exec.output"]
    assert r["status"] == "ok" and r["stdout"] == "" and r["stderr"] == "", r
    assert seen and seen[0], "no notification arrived before the result"
    first = [n["params"] for n in seen[0] if n.get("method") == "exec.output"]
    assert first and "last" not in "".join(n["data"] for n in first)
    assert "".join(n["data"] for n in notes if n["stream"] == "stdout") == "first\nlast\n"
    assert "".join(n["data"] for n in notes if n["stream"] == "stderr") == "err\n"


@pytest.mark.parametrize("params, message", [
    ({"args": ["a"], "stateful": True}, "args is for stateless calls"),
    ({"context": "a"}, "context is for stateful calls"),
    ({"cwd": "/tmp"}, "cwd is for stateful calls"),
    ({"script_name": "a/b.py"}, "script_name must be a file name"),
    ({"script_name": ".."}, "script_name must be a file name"),
    ({"script_name": "a\nb"}, "script_name must be a file name"),
    ({"args": [1]}, "args[0] must be a string"),
    ({"args": "x"}, "args must be an array"),
    ({"args": ["x" * 70000]}, "args must total at most"),
    ({"stream": "yes"}, "stream must be a boolean"),
])
def test_bad_script_params_are_refused_clearly(daemon, sandbox, params, message):
    with pytest.raises(RpcError) as e:
        daemon.call("python.run", sandbox_id=sandbox, code="print(1)", **params)
    assert e.value.kind == "invalid_params" and message in str(e.value), str(e.value)


def test_nsbox_python_takes_arguments_and_names_the_file(daemon, sandbox, tmp_path):
    prog = tmp_path / "report.py"
    prog.write_text("import sys\nprint(sys.argv[1:])\nassert sys.argv[0] == 'report.py'\n1/0\n")
    r = daemon.cli("python", sandbox, str(prog), "--rows", "3", "-x")
    assert r.returncode == 1, r
    assert r.stdout == b"['--rows', '3', '-x']\n"
    assert b'File "report.py", line 4' in r.stderr, r.stderr
    r = ok(daemon.cli("python", sandbox, "-c", "import sys; print(sys.argv)", "a", "b"))
    assert r.stdout == b"['<string>', 'a', 'b']\n"
    r = ok(daemon.cli("python", "-c", "import sys; print(sys.argv)", sandbox, "c"))
    assert r.stdout == b"['<string>', 'c']\n"
    r = daemon.cli("python", "--stateful", sandbox, "-c", "print(1)", "a")
    assert r.returncode != 0 and b"stateless" in r.stderr


def test_nsbox_python_prints_output_before_the_code_ends(daemon, sandbox):
    from conftest import BUILD
    import os
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)\n"
    p = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "python", "--timeout", "90",
                          sandbox, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline()  # blocks until the first line arrives, not until the code ends
        assert line == b"started\n"
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_a_stateful_system_exit_gives_its_code_and_keeps_the_interpreter(daemon, sandbox):
    daemon.call("python.run", sandbox_id=sandbox, stateful=True, code="kept = 7")
    r = daemon.call("python.run", sandbox_id=sandbox, stateful=True, code="raise SystemExit(3)")
    assert r["status"] == "error" and r["exit_code"] == 3, r
    r = daemon.call("python.run", sandbox_id=sandbox, stateful=True, code="import sys; sys.exit('bye')")
    assert r["exit_code"] == 1 and "bye" in r["stderr"], r
    r = daemon.call("python.run", sandbox_id=sandbox, stateful=True, code="kept")
    assert r["status"] == "ok" and r["exit_code"] == 0 and r["result"] == "7", r


@pytest.mark.hostroot("cgroup limits and stats: nsboxd in a user namespace has no cgroup it may write here (server.info limits_reason)")
def test_a_stateful_call_killed_for_memory_says_out_of_memory(daemon):
    sb = daemon.call("sandbox.create", limits={"memory_bytes": 96 << 20})["sandbox_id"]
    try:
        daemon.call("python.run", sandbox_id=sb, stateful=True, code="y = 1")
        r = daemon.call("python.run", sandbox_id=sb, stateful=True,
                        code="x = []\nwhile True: x.append(bytearray(8 << 20))", timeout_seconds=60)
        assert r["status"] == "error" and r["oom_killed"] is True, r
        assert "ran out of memory" in r["stderr"] and "variables are lost" in r["stderr"], r
        r = daemon.call("python.run", sandbox_id=sb, stateful=True, code="print('fresh')")
        assert r["status"] == "ok" and r["stdout"] == "fresh\n", r
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)
