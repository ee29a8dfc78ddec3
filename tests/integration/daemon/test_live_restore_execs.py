# SPDX-License-Identifier: Apache-2.0
"""Live restore of the execs a client waits on: a foreground `nsbox exec` and
an SDK call whose nsboxd is killed (kill -9) mid-command, with live restore,
take the command back from the next nsboxd, show all its output once and end
with its own exit code; nothing is left or doubled."""
import contextlib
import json
import os
import pty
import select
import subprocess
import sys
import threading

import pytest
import test_live_restore
from conftest import BUILD
from test_live_restore import helpers, inits, live_sandbox, remove_and_stop, root  # noqa: F401
from test_service import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import nsbox  # noqa: E402

NSBOX = os.path.join(BUILD, "nsbox")


@pytest.fixture(autouse=True)
def own_pool(monkeypatch):
    """A uid pool of this file's own: test_live_restore.py, whose helpers
    these tests use, may run beside it on another worker, and its census of
    sandbox inits would count these tests' sandboxes (and theirs the same
    host ids)."""
    monkeypatch.setattr(test_live_restore, "POOL_BASE", 1_750_000_000)

# Lines on both streams, then a wait for /tmp/go (made by the test once the
# next nsboxd runs), more lines, and an exit code of its own.
COMMAND = ("for i in $(seq 1 20); do echo out $i; echo err $i >&2; done; touch /tmp/half; "
           "while [ ! -e /tmp/go ]; do sleep 0.05; done; "
           "for i in $(seq 21 40); do echo out $i; echo err $i >&2; done; exit 7")
OUT = "".join("out %d\n" % i for i in range(1, 41))
ERR = "".join("err %d\n" % i for i in range(1, 41))


def init_of(svc, sb):
    """The pid of the sandbox's init, as its record says (other tests' sandboxes may share the pool)."""
    with open(os.path.join(svc.state, "sandboxes", sb, "sandbox.json")) as f:
        return json.load(f)["pid"]


def the_same_init(init):
    """init is still the one process of its uid range: nothing doubled."""
    found = inits()
    return init in found and list(found.values()).count(found[init]) == 1


def read(path):
    with open(path, "rb") as f:
        return f.read().decode()


def in_sandbox(init, path):
    return os.path.exists("/proc/%d/root%s" % (init, path))


@contextlib.contextmanager
def nsbox_exec(svc, root, sb, command):
    """nsbox exec of sh -c command, its stdout and stderr to files: (the process, their paths).
    Killed at the end if it still runs."""
    out_path, err_path = os.path.join(root, "out"), os.path.join(root, "err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen([NSBOX, "--socket", svc.socket, "exec", sb, "--", "sh", "-c", command],
                             stdout=out, stderr=err)
    try:
        yield p, out_path, err_path
    finally:
        if p.poll() is None:
            p.kill()


def restart_mid_command(svc, sb, init):
    """kill -9 nsboxd once the command waits for /tmp/go, start the next one, let it go on."""
    assert wait_until(lambda: in_sandbox(init, "/tmp/half"), timeout=120)
    svc.kill9()
    svc.start()
    svc.call("sandbox.exec", sandbox_id=sb, command="touch /tmp/go")


def test_a_foreground_nsbox_exec_takes_its_command_back_after_a_restart(root):
    svc, sb = live_sandbox(root)
    init = init_of(svc, sb)
    with nsbox_exec(svc, root, sb, COMMAND) as (p, out_path, err_path):
        restart_mid_command(svc, sb, init)
        assert p.wait(timeout=120) == 7, (read(out_path), read(err_path))
    assert read(out_path) == OUT
    said = [line for line in read(err_path).splitlines(True) if line.startswith("nsbox: ")]
    assert said == ["nsbox: nsboxd went away during the command, which runs on (live restore); waiting up "
                    "to 30 s for nsboxd to come back\n"], read(err_path)
    assert "".join(line for line in read(err_path).splitlines(True) if not line.startswith("nsbox: ")) == ERR
    # the same init, and no exec left behind: the command's processes ended with it
    assert the_same_init(init)
    assert not [e for e in svc.call("exec.list", sandbox_id=sb)["execs"] if e["running"]]
    remove_and_stop(svc, sb)


def test_a_flood_streamed_to_nsbox_exec_comes_once_across_a_restart(root):
    # nsboxd is killed (kill -9, at whatever point of its loop) while about
    # 6.9 MB flow to the CLI: what it had sent, what was on its way, what it
    # was moving from the pipe and what comes after all reach stdout once, in order.
    svc, sb = live_sandbox(root)
    init = init_of(svc, sb)
    command = ("seq 1 1000000; touch /tmp/half; while [ ! -e /tmp/go ]; do sleep 0.05; done; "
               "seq 1000001 1000100; exit 9")
    with nsbox_exec(svc, root, sb, command) as (p, out_path, err_path):
        assert wait_until(lambda: os.path.getsize(out_path) > 1_000_000, timeout=120)
        svc.kill9()
        svc.start()
        assert wait_until(lambda: in_sandbox(init, "/tmp/half"), timeout=120)
        svc.call("sandbox.exec", sandbox_id=sb, command="touch /tmp/go")
        assert p.wait(timeout=120) == 9, read(err_path)
    with open(out_path, "rb") as f:
        assert f.read() == b"".join(b"%d\n" % i for i in range(1, 1000101))
    assert "lost" not in read(err_path), read(err_path)
    remove_and_stop(svc, sb)


def test_a_new_exec_runs_in_a_sandbox_adopted_with_a_kept_job(root):
    # The new lease reaches the init at fd numbers its kept job's fds pushed
    # up: placed at their fixed numbers, none of them may be lost.
    svc, sb = live_sandbox(root)
    job = svc.call("sandbox.exec", sandbox_id=sb, command="sleep 300", background=True)["exec_id"]
    svc.kill9()
    svc.start()
    for _ in range(3):
        r = svc.call("sandbox.exec", sandbox_id=sb, command="echo hi")
        assert (r["exit_code"], r["stdout"]) == (0, "hi\n"), r
    assert svc.call("exec.status", sandbox_id=sb, exec_id=job)["running"]
    remove_and_stop(svc, sb, force=True)


def sdk_run_across_a_restart(root, **kwargs):
    """An SDK commands.run of COMMAND whose nsboxd is killed mid-command: its
    result (or what it raised), what reached stderr, and the sandbox's id."""
    svc, sid = live_sandbox(root)
    sb = nsbox.Sandbox.connect(sid, socket=svc.socket)
    init = init_of(svc, sb.sandbox_id)
    outcome = {}

    def run():
        try:
            outcome["result"] = sb.commands.run(COMMAND, timeout=120, **kwargs)
        except Exception as e:  # reported below
            outcome["error"] = e

    t = threading.Thread(target=run)
    t.start()
    restart_mid_command(svc, sb.sandbox_id, init)
    t.join(120)
    assert not t.is_alive()
    assert "error" not in outcome, outcome
    assert the_same_init(init)
    remove_and_stop(svc, sb.sandbox_id)
    return outcome["result"]


def test_an_sdk_command_running_at_a_restart_returns_its_full_result(root, capfd):
    r = sdk_run_across_a_restart(root)
    assert (r.exit_code, r.stdout, r.stderr) == (7, OUT, ERR)
    assert "nsboxd went away during the command, which runs on (live restore)" in capfd.readouterr().err


def test_an_sdk_command_streamed_at_a_restart_streams_each_byte_once(root):
    seen = {"stdout": [], "stderr": []}
    r = sdk_run_across_a_restart(root, on_stdout=seen["stdout"].append, on_stderr=seen["stderr"].append)
    assert (r.exit_code, r.stdout, r.stderr) == (7, OUT, ERR)
    assert ("".join(seen["stdout"]), "".join(seen["stderr"])) == (OUT, ERR)


def call_in_thread(svc, method, **params):
    """A call whose nsboxd is killed before it answers: what it raised."""
    outcome = {}

    def call():
        try:
            outcome["result"] = svc.call(method, **params)
        except Exception as e:  # the connection went with nsboxd
            outcome["error"] = e

    t = threading.Thread(target=call)
    t.start()
    return t, outcome


CELL = ("import os, time\nx = 41\nopen('/tmp/cell-in', 'w').close()\n"
        "while not os.path.exists('/tmp/cell-go'):\n    time.sleep(0.05)\nx += 1\n")
SHELL_COMMAND = ("cd /tmp/proj && touch /tmp/sh-in && while [ ! -e /tmp/sh-go ]; do sleep 0.05; done; "
                 "echo after; (exit 5)")


def test_a_python_call_and_a_shell_command_running_at_a_restart_carry_on(root):
    svc, sb = live_sandbox(root)
    assert svc.call("python.run", sandbox_id=sb, code="y = 1", stateful=True)["status"] == "ok"
    svc.call("shell.create", sandbox_id=sb, name="dev")
    assert svc.call("shell.run", sandbox_id=sb, session="dev", command="mkdir -p /tmp/proj; V=7")["exit_code"] == 0
    init = init_of(svc, sb)
    # counted between commands: a command's own forks would show as bash for a moment
    kept = helpers()
    assert len(kept.get("python", [])) == 1 and len(kept.get("bash", [])) == 1, kept
    cell, cell_outcome = call_in_thread(svc, "python.run", sandbox_id=sb, code=CELL, stateful=True)
    command, command_outcome = call_in_thread(svc, "shell.run", sandbox_id=sb, session="dev",
                                              command=SHELL_COMMAND)
    assert wait_until(lambda: in_sandbox(init, "/tmp/cell-in") and in_sandbox(init, "/tmp/sh-in"), timeout=120)

    svc.kill9()
    cell.join(60)
    command.join(60)
    assert "error" in cell_outcome and "error" in command_outcome  # their clients went with nsboxd
    svc.start()
    log = svc.log()
    assert "python interpreter adopted (live restore), running a call" in log, log
    assert "shell dev adopted (live restore), running command" in log, log
    # busy: the interpreter's next call waits for the one in flight, whose answer is dropped
    listed = svc.call("shell.list", sandbox_id=sb)["sessions"]
    assert listed[0]["running"] is True, listed
    svc.call("sandbox.exec", sandbox_id=sb, command="touch /tmp/cell-go /tmp/sh-go")
    r = svc.call("python.run", sandbox_id=sb, code="print(x, y)", stateful=True)
    assert r["stdout"] == "42 1\n", r
    # the command's end is kept for shell.check: its code, and what it wrote after the restart
    assert wait_until(lambda: not svc.call("shell.check", sandbox_id=sb, session="dev")["running"], timeout=60)
    r = svc.call("shell.check", sandbox_id=sb, session="dev")
    assert (r["exit_code"], r["stdout"], r["truncated"]) == (5, "after\n", True), r
    assert "before the restart is not kept" in r["note"], r
    r = svc.call("shell.run", sandbox_id=sb, session="dev", command="pwd; echo $V")
    assert r["stdout"] == "/tmp/proj\n7\n", r
    # the same processes, none doubled
    assert the_same_init(init)
    assert helpers() == kept
    remove_and_stop(svc, sb)


def test_a_background_exec_that_ended_before_a_restart_keeps_its_status_and_output(root):
    svc, sb = live_sandbox(root)
    ended = svc.call("sandbox.exec", sandbox_id=sb, background=True,
                     command="echo hello; echo oops >&2; exit 3")["exec_id"]
    missing = svc.call("sandbox.exec", sandbox_id=sb, background=True, argv=["no-such-command"])["exec_id"]
    running = svc.call("sandbox.exec", sandbox_id=sb, background=True, command="sleep 300")["exec_id"]
    for job in (ended, missing):
        assert wait_until(lambda: not svc.call("exec.status", exec_id=job)["running"], timeout=60)
    before = {e["exec_id"]: e for e in svc.call("exec.list", sandbox_id=sb)["execs"]}
    status_before = svc.call("exec.status", exec_id=missing)

    svc.kill9()
    svc.start()
    # and once more, by SIGTERM with live restore: the record is kept again
    assert svc.terminate() == 0
    svc.start()
    after = {e["exec_id"]: e for e in svc.call("exec.list", sandbox_id=sb)["execs"]}
    assert set(after) == {ended, missing, running}
    for job in (ended, missing):
        assert after[job] == before[job], (after[job], before[job])
    assert after[ended]["status"] == "exited" and after[ended]["exit_code"] == 3
    assert after[running]["running"] is True
    r = svc.call("exec.output", exec_id=ended)
    assert (r["stdout"], r["stderr"], r["running"], r["exit_code"]) == ("hello\n", "oops\n", False, 3), r
    status = svc.call("exec.status", exec_id=missing)
    for key in ("status", "exit_code", "stderr", "running"):
        assert status[key] == status_before[key], key
    assert status["status"] == "start_failed" and status["exit_code"] == 127, status
    remove_and_stop(svc, sb, force=True)


TTY_COMMAND = ("echo fi''rst; touch /tmp/half; while [ ! -e /tmp/go ]; do sleep 0.05; done; "
               "read line; echo \"got $line\"; exit 4")


def test_a_tty_exec_takes_its_terminal_back_after_a_restart(root):
    svc, sb = live_sandbox(root)
    init = init_of(svc, sb)
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(NSBOX, ["nsbox", "--socket", svc.socket, "exec", "-it", sb, "--", "sh", "-c", TTY_COMMAND])
    out = [b""]

    def drain():
        while select.select([fd], [], [], 0)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return False
            if not chunk:
                return False
            out[0] += chunk
        return True

    try:
        assert wait_until(lambda: drain() and in_sandbox(init, "/tmp/half"), timeout=120)
        svc.kill9()
        svc.start()
        svc.call("sandbox.exec", sandbox_id=sb, command="touch /tmp/go")
        # typed while the CLI takes the terminal back: it reaches the command once
        os.write(fd, b"hello\r")
        wait_until(lambda: not drain(), timeout=120)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    text = out[0].decode(errors="replace")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 4, (status, text)
    assert text.count("first") == 1 and text.count("got hello") == 1, text
    assert "waiting up to 30 s for nsboxd to come back" in text, text
    remove_and_stop(svc, sb)
