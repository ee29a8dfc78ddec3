# SPDX-License-Identifier: Apache-2.0
"""What nsbox exec, ps and logs tell their user: nsboxd gone mid-command,
the terminal type of exec -t, the command and start of each background
exec, the end of a long job's log."""
import os
import signal
import subprocess
import time

import pytest
from conftest import BUILD, Daemon

NSBOX = os.path.join(BUILD, "nsbox")


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_nsboxd_gone_mid_command_is_said_and_exits_255(how):
    d = Daemon()
    try:
        sb = d.call("sandbox.create")["sandbox_id"]
        p = subprocess.Popen([NSBOX, "--socket", d.socket, "exec", sb, "--", "sh", "-c", "echo up; sleep 60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout.readline() == b"up\n"
        d.proc.send_signal(how)
        out, err = p.communicate(timeout=60)
    finally:
        d.stop()
    assert p.returncode == 255, (p.returncode, err)
    assert err == b"nsbox: nsboxd went away during the command (its exit status is unknown)\n"


def nsbox(daemon, *args, env=None):
    full = {k: v for k, v in os.environ.items() if k != "TERM"}
    full.update(env or {})
    return subprocess.run([NSBOX, "--socket", daemon.socket, *args], capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=full)


def test_exec_t_passes_the_callers_terminal_type(daemon, sandbox):
    r = nsbox(daemon, "exec", "-t", sandbox, "--", "sh", "-c", "echo term=$TERM", env={"TERM": "screen-256color"})
    assert r.returncode == 0, r
    assert r.stdout.strip() == b"term=screen-256color", r.stdout
    r = nsbox(daemon, "exec", "-t", sandbox, "--", "sh", "-c", "echo term=$TERM")
    assert r.stdout.strip() == b"term=xterm-256color", r.stdout
    r = nsbox(daemon, "exec", "-t", "-e", "TERM=dumb", sandbox, "--", "sh", "-c", "echo term=$TERM",
              env={"TERM": "screen"})
    assert r.stdout.strip() == b"term=dumb", r.stdout
    # Without a terminal nothing claims one.
    r = nsbox(daemon, "exec", sandbox, "--", "sh", "-c", "echo term=$TERM", env={"TERM": "screen"})
    assert r.stdout == b"term=\n", r.stdout


def test_ps_shows_each_background_exec_with_its_state_start_and_command(daemon, sandbox):
    long_id = daemon.call("sandbox.exec", sandbox_id=sandbox, background=True,
                          command="sleep 100  # the long one")["exec_id"]
    done_id = daemon.call("sandbox.exec", sandbox_id=sandbox, background=True, argv=["sh", "-c", "exit 3"])["exec_id"]
    while daemon.call("exec.status", exec_id=done_id)["running"]:
        time.sleep(0.05)
    listed = {e["exec_id"]: e for e in daemon.call("exec.list", sandbox_id=sandbox)["execs"]}
    assert listed[long_id]["command"] == "sleep 100  # the long one"
    assert listed[long_id]["status"] == "running" and listed[long_id]["pid"] > 0
    assert listed[long_id]["started_at"].endswith("Z")
    assert listed[done_id]["command"] == "sh -c exit 3" and listed[done_id]["status"] == "exited"
    r = daemon.cli("ps", sandbox)
    assert r.returncode == 0, r
    lines = r.stdout.decode().splitlines()
    assert lines[0].split() == ["EXEC", "ID", "STATUS", "STARTED", "COMMAND"], lines[0]
    row = [line for line in lines if line.startswith(long_id)][0]
    assert "running" in row and row.endswith("sleep 100  # the long one")
    assert listed[long_id]["started_at"] in row
    row = [line for line in lines if line.startswith(done_id)][0]
    assert "exited 3" in row and row.endswith("sh -c exit 3")
    daemon.call("exec.kill", exec_id=long_id)


LINES = 10000
PRINT_LINES = "i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); done" % LINES


def finished(daemon, exec_id):
    while daemon.call("exec.status", exec_id=exec_id)["running"]:
        time.sleep(0.05)


def test_a_long_jobs_log_keeps_its_head_and_its_tail(daemon, sandbox):
    exec_id = daemon.call("sandbox.exec", sandbox_id=sandbox, background=True, max_output_bytes=4096,
                          command=PRINT_LINES)["exec_id"]
    finished(daemon, exec_id)
    total = len("".join("line %d\n" % i for i in range(LINES)))
    head = daemon.call("exec.output", exec_id=exec_id)
    assert head["stdout"].startswith("line 0\nline 1\n") and len(head["stdout"]) == 4096
    assert head["more"] is True and head["next"]["stdout"] == 4096
    tail = daemon.call("exec.output", exec_id=exec_id, since=head["next"])
    assert tail["stdout"].endswith("line 9998\nline 9999\n") and len(tail["stdout"]) == 2048
    assert tail["dropped"]["stdout"] == total - 4096 - 2048
    assert tail["next"]["stdout"] == total and tail["more"] is False and tail["truncated"] is True
    last = daemon.call("exec.output", exec_id=exec_id, tail=3)
    assert last["stdout"] == "line 9997\nline 9998\nline 9999\n" and last["next"]["stdout"] == total
    # The CLI: the head, a word on what was dropped, the tail.
    r = daemon.cli("logs", sandbox, exec_id)
    assert r.returncode == 0, r
    assert r.stdout.startswith(b"line 0\n") and r.stdout.endswith(b"line 9999\n")
    assert len(r.stdout) == 4096 + 2048
    assert ("%d bytes of stdout dropped here" % (total - 4096 - 2048)).encode() in r.stderr, r.stderr
    r = daemon.cli("logs", "--tail", "2", sandbox, exec_id)
    assert (r.returncode, r.stdout) == (0, b"line 9998\nline 9999\n"), r


def test_logs_tail_of_a_short_job_and_bad_tails(daemon, sandbox):
    exec_id = daemon.call("sandbox.exec", sandbox_id=sandbox, background=True,
                          command="printf 'a\\nb\\nc'; echo e1 >&2; echo e2 >&2")["exec_id"]
    finished(daemon, exec_id)
    r = daemon.call("exec.output", exec_id=exec_id, tail=1)
    assert (r["stdout"], r["stderr"], r["dropped"]) == ("c", "e2\n", {"stdout": 0, "stderr": 0})
    r = daemon.call("exec.output", exec_id=exec_id, tail=0)
    assert (r["stdout"], r["stderr"]) == ("", "")
    r = daemon.call("exec.output", exec_id=exec_id, tail=50)
    assert (r["stdout"], r["stderr"]) == ("a\nb\nc", "e1\ne2\n")
    r = daemon.cli("logs", "-n", "2", sandbox, exec_id)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"b\nc", b"e1\ne2\n"), r
    r = daemon.cli("logs", "--tail", "x", sandbox, exec_id)
    assert r.returncode == 125 and b"bad --tail" in r.stderr
    from nsbox_client import RpcError
    for bad in (-1, "3", 1.5):
        with pytest.raises(RpcError) as e:
            daemon.call("exec.output", exec_id=exec_id, tail=bad)
        assert e.value.kind == "invalid_params"
