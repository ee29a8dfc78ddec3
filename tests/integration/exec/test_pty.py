# SPDX-License-Identifier: Apache-2.0
"""sandbox.exec with tty: true: a pseudo-terminal of the sandbox's own devpts,
the exec its session leader with it as controlling terminal; exec.resize;
nsbox exec -it through a real terminal."""
import base64
import fcntl
import os
import pty
import select
import struct
import termios
import time

import pytest

from conftest import BUILD, Daemon  # noqa: F401
from nsbox_client import RpcError

pytestmark = [pytest.mark.core]


def tty_exec(daemon, sandbox, command, **kw):
    return daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["/bin/bash", "-c", command], tty=True,
                       background=True, **kw)["exec_id"]


def output(daemon, exec_id):
    return daemon.call("exec.output", exec_id=exec_id, encoding="base64")["stdout"]


def wait_output(daemon, exec_id, text, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        out = output(daemon, exec_id)
        if text in out:
            return out
        assert time.monotonic() < deadline, "no %r in the output: %r" % (text, out)
        time.sleep(0.05)


def wait_end(daemon, exec_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        st = daemon.call("exec.status", exec_id=exec_id)
        if not st["running"]:
            return st
        assert time.monotonic() < deadline, "the exec did not end: %r" % st
        time.sleep(0.05)


def send(daemon, exec_id, data):
    return daemon.call("exec.stdin", exec_id=exec_id, data=base64.b64encode(data).decode(), encoding="base64")


def test_a_tty_exec_sees_a_terminal_of_the_requested_size(daemon, sandbox):
    ex = tty_exec(daemon, sandbox, "test -t 0 && test -t 1 && test -t 2 && echo ALL-TTY; stty size; "
                  "ps -o stat= -p $$; exit 4", rows=33, cols=101)
    st = wait_end(daemon, ex)
    assert st["exit_code"] == 4, st
    assert "ALL-TTY" in st["stdout"] and "33 101" in st["stdout"], st
    # A session leader ("s") in the foreground group ("+") of its terminal.
    stat = st["stdout"].split("33 101")[1].split()[0]
    assert "s" in stat and "+" in stat, st["stdout"]
    assert st["stderr"] == "", st  # one stream


def test_exec_resize_changes_the_size_and_sends_sigwinch(daemon, sandbox):
    ex = tty_exec(daemon, sandbox, 'trap \'stty size; exit 7\' WINCH; echo RE""ADY; '
                  'while :; do sleep 0.05; done')
    wait_output(daemon, ex, "READY")
    r = daemon.call("exec.resize", exec_id=ex, rows=40, cols=120)
    assert (r["rows"], r["cols"]) == (40, 120)
    st = wait_end(daemon, ex)
    assert st["exit_code"] == 7 and "40 120" in st["stdout"], st


def test_ctrl_c_interrupts_the_foreground_command_and_bash_survives(daemon, sandbox):
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["/bin/bash", "--norc", "-i"], tty=True,
                     background=True)["exec_id"]
    send(daemon, ex, b"echo ST''ARTED; sleep 100\n")
    wait_output(daemon, ex, "STARTED")
    time.sleep(0.3)
    send(daemon, ex, b"\x03")
    send(daemon, ex, b"echo after-$?\n")
    wait_output(daemon, ex, "after-130")
    send(daemon, ex, b"python3 -c 'print(\"LO\"\"OP\"); exec(\"while True: pass\")'\n")
    wait_output(daemon, ex, "LOOP")
    time.sleep(0.3)
    send(daemon, ex, b"\x03")
    send(daemon, ex, b"echo py-$?\n")
    wait_output(daemon, ex, "py-130")
    send(daemon, ex, b"exit 3\n")
    st = wait_end(daemon, ex)
    assert st["exit_code"] == 3, st


def test_tty_needs_stream_or_background_and_resize_needs_a_tty(daemon, sandbox):
    try:
        daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["true"], tty=True)
        assert False, "a tty exec without stream or background was accepted"
    except RpcError as e:
        assert e.kind == "invalid_params" and "stream" in str(e), e
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["sleep", "30"], background=True)["exec_id"]
    try:
        daemon.call("exec.resize", exec_id=ex, rows=10, cols=10)
        assert False, "exec.resize of an exec without a terminal was accepted"
    except RpcError as e:
        assert e.kind == "invalid_params" and "terminal" in str(e), e
    daemon.call("exec.kill", exec_id=ex)


def test_many_tty_execs_do_not_use_up_the_sandbox_ptys(daemon, sandbox):
    # Each ended exec gives its pty back (the sandbox's devpts has max=).
    for i in range(70):
        ex = tty_exec(daemon, sandbox, "true")
        assert wait_end(daemon, ex)["exit_code"] == 0


def test_cli_exec_it_runs_through_a_real_terminal(daemon, sandbox):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(os.path.join(BUILD, "nsbox"), ["nsbox", "--socket", daemon.socket, "exec", "-it", sandbox,
                                                "/bin/bash", "--norc"])
    out = [b""]

    def read_until(text, timeout=30, resend=None):
        deadline = time.monotonic() + timeout
        next_send = 0
        while text not in out[0]:
            assert time.monotonic() < deadline, "no %r in %r" % (text, out[0])
            if resend is not None and time.monotonic() > next_send:
                os.write(fd, resend)
                next_send = time.monotonic() + 1
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    return
                if not chunk:
                    return
                out[0] += chunk

    os.write(fd, b"echo R''EADY\n")
    read_until(b"READY")
    # Our terminal's size changes: the CLI gets SIGWINCH and passes the size on.
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 132, 0, 0))
    read_until(b"50 132", resend=b"stty size\n")
    os.write(fd, b"echo h''i; exit 3\n")
    read_until(b"\0never", timeout=60)  # to EOF
    _, status = os.waitpid(pid, 0)
    # The terminal is as the CLI found it: no longer raw.
    lflag = termios.tcgetattr(fd)[3]
    os.close(fd)
    assert lflag & termios.ICANON and lflag & termios.ECHO, lflag
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3, (status, out[0])
    assert b"hi" in out[0], out[0]


def test_cli_exec_it_without_a_terminal_says_so(daemon, sandbox):
    r = daemon.cli("exec", "-it", sandbox, "true", input=b"")
    assert r.returncode == 125, r
    assert b"the input device is not a TTY" in r.stderr, r.stderr
