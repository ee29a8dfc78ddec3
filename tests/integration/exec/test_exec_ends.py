# SPDX-License-Identifier: Apache-2.0
"""How an exec ends, and how that is said: a client that left, a timeout,
a working directory that is not there, the order of a stream's messages."""
import json
import time

from nsbox_client import Client


def wait_for(predicate, seconds=20, step=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def sandbox_pids(daemon, sandbox, name):
    """The pids in the sandbox whose command line is exactly `name`... (by ps)."""
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="ps -eo args= || true")
    return [line for line in r["stdout"].splitlines() if name in line and "ps -eo" not in line]


def test_a_call_whose_client_left_is_killed_not_run_to_its_end(daemon, sandbox):
    """A non-streamed sandbox.exec sent, then the socket closed: nobody will
    read its result, so it is killed at once; the marker it would write
    after its sleep never appears."""
    c = Client(daemon.socket)
    c.request("sandbox.exec", {"sandbox_id": sandbox, "timeout_seconds": 60,
                               "command": "echo up > /workspace/up; sleep 3; echo late > /workspace/late"})
    assert wait_for(lambda: daemon.call("sandbox.exec", sandbox_id=sandbox,
                                        command="test -e /workspace/up")["exit_code"] == 0)
    c.close()
    # Gone within the time its sleep would take (the sleep is 3 s).
    assert wait_for(lambda: not sandbox_pids(daemon, sandbox, "sleep 3"), seconds=2.5), \
        sandbox_pids(daemon, sandbox, "sleep 3")
    time.sleep(4)  # past the point where it would have written the marker
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="test -e /workspace/late")
    assert r["exit_code"] == 1


def test_a_background_exec_outlives_the_client_that_started_it(daemon, sandbox):
    c = Client(daemon.socket)
    started = c.call("sandbox.exec", sandbox_id=sandbox, background=True,
                     command="sleep 1; echo done > /workspace/bg")
    c.close()
    r = daemon.call("exec.status", exec_id=started["exec_id"])
    assert wait_for(lambda: not daemon.call("exec.status", exec_id=started["exec_id"])["running"])
    r = daemon.call("exec.status", exec_id=started["exec_id"])
    assert r["exit_code"] == 0
    assert daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["cat", "/workspace/bg"])["stdout"] == "done\n"


def test_a_call_sent_and_closed_at_once_never_runs_later(daemon):
    """The request and the client's close arrive together, on a fresh
    sandbox whose exec slot is still starting: the exec is killed before its
    process took the request. That request must not be left in the slot for
    the next exec's process to take and run."""
    sandboxes = []
    try:
        for i in range(10):
            sb = daemon.call("sandbox.create")["sandbox_id"]
            sandboxes.append(sb)
            c = Client(daemon.socket)
            c.request("sandbox.exec", {"sandbox_id": sb, "timeout_seconds": 60,
                                       "command": "sleep 1; echo ran > /workspace/late"})
            c.close()
        time.sleep(1.5)  # past the point where any of them would have written
        for sb in sandboxes:
            # The next exec runs its own command and gets its own result.
            r = daemon.call("sandbox.exec", sandbox_id=sb, argv=["echo", "next"])
            assert r["stdout"] == "next\n", r
            r = daemon.call("sandbox.exec", sandbox_id=sb, command="cat /workspace/late")
            assert r["exit_code"] == 1 and r["stdout"] == "", (sb, r)
    finally:
        for sb in sandboxes:
            daemon.call("sandbox.remove", sandbox_id=sb, force=True)


def test_shell_run_and_python_run_whose_client_left_do_not_run_on(daemon, sandbox):
    for method, params in (("shell.run", {"command": "sleep 2; echo late > /workspace/late3"}),
                           ("python.run", {"code": "import time; time.sleep(2); open('/workspace/late4','w')"})):
        c = Client(daemon.socket)
        c.request(method, dict(params, sandbox_id=sandbox, timeout_seconds=60))
        c.close()
    time.sleep(3)
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="ls /workspace")
    assert "late3" not in r["stdout"] and "late4" not in r["stdout"], r


def test_exec_started_comes_before_any_output_of_a_stream(daemon, sandbox):
    with Client(daemon.socket) as c:
        for i in range(50):
            c.notifications = []
            r = c.call("sandbox.exec", sandbox_id=sandbox, stream=True, command="echo out%d; echo err >&2" % i)
            methods = [n["method"] for n in c.notifications]
            assert methods and methods[0] == "exec.started", (i, methods)
            assert methods.count("exec.started") == 1, (i, methods)
            assert "exec.output" in methods
            assert r["exit_code"] == 0


def test_a_timeout_is_said_on_stderr_and_in_status(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, timeout_seconds=1,
                    command="echo partial >&2; printf unfinished >&2; sleep 30")
    assert r["status"] == "timeout"
    assert r["timed_out"] is True
    assert r["stderr"] == "partial\nunfinished\nnsbox: timed out after 1 s (timeout_seconds), killed\n"
    # Streamed: the command's stderr came as notifications, the result says the timeout.
    with Client(daemon.socket) as c:
        r = c.call("sandbox.exec", sandbox_id=sandbox, timeout_seconds=1, stream=True, argv=["sleep", "30"])
    assert r["status"] == "timeout"
    assert r["stderr"] == "nsbox: timed out after 1 s (timeout_seconds), killed\n"
    # Other ends keep their own words.
    assert daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["true"])["status"] == "exited"
    assert daemon.call("sandbox.exec", sandbox_id=sandbox, command="kill -TERM $$")["status"] == "signaled"
    assert daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["nosuchbin"])["status"] == "start_failed"


def test_python_run_timeout_is_said_the_same_way(daemon, sandbox):
    r = daemon.call("python.run", sandbox_id=sandbox, timeout_seconds=1, code="import time; time.sleep(30)")
    assert r["status"] == "timeout"
    assert "nsbox: timed out after 1 s (timeout_seconds), killed\n" in r["stderr"]


def test_cli_says_the_timeout_once_and_exits_124(daemon, sandbox):
    p = daemon.cli("exec", "--timeout", "1", sandbox, "--", "sleep", "30")
    assert p.returncode == 124
    err = p.stderr.decode()
    assert err.count("timed out after 1 s") == 1, err
    assert "--timeout" in err


def test_a_working_directory_that_is_not_there_is_named_and_exits_126(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, cwd="/nosuchdir", argv=["pwd"])
    assert r["stderr"] == ("nsbox: cannot run the command: working directory /nosuchdir: "
                           "No such file or directory\n")
    assert r["exit_code"] == 126 and r["status"] == "start_failed"
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, cwd="/etc/passwd", argv=["pwd"])
    assert r["exit_code"] == 126 and "working directory /etc/passwd: Not a directory" in r["stderr"]
    # A command that is not there stays 127, as in a shell.
    assert daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["nosuchbin"])["exit_code"] == 127
    p = daemon.cli("exec", "-w", "nosuchdir", sandbox, "--", "pwd")
    assert p.returncode == 126
    assert b"working directory /workspace/nosuchdir: No such file or directory" in p.stderr, p.stderr


def test_an_exec_ended_by_its_sandbox_removal_says_so(daemon):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    with Client(daemon.socket) as c:
        rid = c.request("sandbox.exec", {"sandbox_id": sb, "stream": True, "argv": ["sleep", "60"]})
        while not any(n["method"] == "exec.started" for n in c.notifications):
            c.notifications.append(c.read_message())
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)
        r = c.response(rid)["result"]
    assert r["status"] == "killed" and r["signal"] == 9
    assert r["ended_by"] == "sandbox_removed"
    assert "its sandbox was removed" in r["error"]


def test_shell_run_timeout_is_said_the_same_way(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="t")
    r = daemon.call("shell.run", sandbox_id=sandbox, session="t", timeout_seconds=1,
                    command="printf partial >&2; sleep 600")
    assert r["status"] == "timeout" and r["timed_out"] is True
    assert r["stderr"] == ("partial\nnsbox: timed out after 1 s (timeout_seconds), interrupted; "
                           "the shell and its state remain\n")
    r = daemon.call("shell.run", sandbox_id=sandbox, session="t", command="true")
    assert (r["status"], r["stderr"]) == ("exited", "")
    p = daemon.cli("shell", "run", "--timeout", "1", sandbox, "t", "--", "sleep 60")
    assert p.returncode == 124
    assert p.stderr.decode().count("timed out") == 1, p.stderr


def test_cli_python_says_the_timeout_once(daemon, sandbox):
    p = daemon.cli("python", "--timeout", "1", sandbox, "-c", "import time; time.sleep(30)")
    assert p.returncode == 124
    assert p.stderr.decode().count("timed out") == 1, p.stderr
