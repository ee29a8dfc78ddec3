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
