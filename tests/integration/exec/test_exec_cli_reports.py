# SPDX-License-Identifier: Apache-2.0
"""What nsbox exec, ps and logs tell their user: nsboxd gone mid-command,
the terminal type of exec -t, the command and start of each background
exec, the end of a long job's log."""
import os
import signal
import subprocess

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
