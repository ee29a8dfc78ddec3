# SPDX-License-Identifier: Apache-2.0
"""nsbox exec/sh/run as agents use them: byte-exact output and
standard input, the output cap said on stderr, background execs (exec -d,
ps, logs, kill), Ctrl-C passed on as SIGINT, docker's short flags, and the
messages of commands that cannot start."""
import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import tarfile
import threading
import time

import pytest
from conftest import BUILD, ok, one_line_error

pytestmark = [pytest.mark.core]

NSBOX = os.path.join(BUILD, "nsbox")


def wait_for(predicate, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


# --- binary-safe output and input ----------------------------------------------


def test_binary_bytes_pass_through_cat_exactly(daemon, sandbox):
    data = bytes(range(256)) * 64
    r = ok(daemon.cli("exec", "-i", sandbox, "--", "cat", input=data))
    assert r.stdout == data
    # Through sh too, and on stderr.
    r = ok(daemon.cli("sh", "-i", sandbox, "cat >&2", input=data))
    assert r.stderr == data and r.stdout == b""


def test_text_stdin_with_nul_bytes_is_exact(daemon, sandbox):
    data = "a\0b\nünï\0\n".encode() * 100
    assert ok(daemon.cli("exec", "-i", sandbox, "--", "cat", input=data)).stdout == data


def test_tar_made_inside_extracts_on_the_host(daemon, sandbox, tmp_path):
    ok(daemon.cli("sh", sandbox, "mkdir d && head -c 200000 /dev/urandom > d/rand.bin && echo hi > d/t.txt"))
    want = ok(daemon.cli("sh", sandbox, "sha256sum d/rand.bin")).stdout.split()[0].decode()
    r = ok(daemon.cli("exec", sandbox, "--", "tar", "c", "-C", "/workspace", "d"))
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        tar.extractall(tmp_path)
    assert hashlib.sha256((tmp_path / "d" / "rand.bin").read_bytes()).hexdigest() == want
    assert (tmp_path / "d" / "t.txt").read_bytes() == b"hi\n"


def test_tar_piped_in_extracts_inside(daemon, sandbox):
    payload = bytes(range(256)) * 4000 + os.urandom(100000)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("in/blob.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    ok(daemon.cli("exec", "-i", sandbox, "--", "tar", "x", "-C", "/workspace", input=buf.getvalue()))
    got = ok(daemon.cli("exec", sandbox, "--", "sha256sum", "in/blob.bin")).stdout.split()[0].decode()
    assert got == hashlib.sha256(payload).hexdigest()
    # The input file the CLI went through is gone.
    assert ok(daemon.cli("sh", sandbox, "ls -A /tmp | grep -c nsbox-stdin || true")).stdout.strip() == b"0"


# --- the output cap ---------------------------------------------------------------


def test_streamed_output_is_not_cut_at_1_mib(daemon, sandbox):
    r = ok(daemon.cli("sh", sandbox, "head -c 3000000 /dev/zero | tr '\\0' a"))
    assert len(r.stdout) == 3000000 and b"truncated" not in r.stderr


def test_truncated_output_is_said_on_stderr_with_the_way_to_raise_it(daemon, sandbox):
    r = ok(daemon.cli("exec", "--max-output", "1000", sandbox, "--", "head", "-c", "5000", "/dev/zero"))
    assert len(r.stdout) == 1000
    assert b"nsbox: output truncated at 1000 bytes (4000 more bytes dropped); raise it with --max-output BYTES" in r.stderr
    r = ok(daemon.cli("--json", "exec", sandbox, "--", "head", "-c", "2000000", "/dev/zero"))
    assert json.loads(r.stdout)["truncated"] is True
    assert b"nsbox: output truncated at 1 MiB (951424 more bytes dropped); raise it with --max-output BYTES" in r.stderr


# --- background execs ---------------------------------------------------------


def test_detached_exec_ps_logs_and_kill(daemon, sandbox):
    exec_id = ok(daemon.cli("exec", "-d", sandbox, "--", "sh", "-c", "echo start; echo err >&2; sleep 100")
                 ).stdout.decode().strip()
    assert len(exec_id) >= 8 and "\n" not in exec_id
    ps = ok(daemon.cli("ps", sandbox)).stdout.decode()
    assert exec_id in ps and "running" in ps
    assert ok(daemon.cli("ps", "-q", sandbox)).stdout.decode().split() == [exec_id]
    logs = wait_for(lambda: (lambda r: r if r.stdout == b"start\n" else None)(
        ok(daemon.cli("logs", sandbox, exec_id))), what="start in the logs")
    assert logs.stderr == b"err\n"
    assert ok(daemon.cli("kill", "-s", "TERM", sandbox, exec_id)).stdout.decode().strip() == exec_id
    wait_for(lambda: exec_id + "  ended" in ok(daemon.cli("ps", sandbox)).stdout.decode(), what="ended in ps")
    listed = json.loads(ok(daemon.cli("--json", "ps", sandbox)).stdout)["execs"]
    assert [e["running"] for e in listed if e["exec_id"] == exec_id] == [False]


def test_logs_follow_prints_until_the_exec_ends(daemon, sandbox):
    exec_id = ok(daemon.cli("sh", "-d", sandbox, "for i in 1 2 3; do echo $i; sleep 0.5; done; printf '\\377'")
                 ).stdout.decode().strip()
    r = ok(daemon.cli("logs", "-f", sandbox, exec_id, timeout=60))
    assert r.stdout == b"1\n2\n3\n\xff"


def test_detached_exec_honours_an_explicit_timeout(daemon, sandbox):
    exec_id = ok(daemon.cli("exec", "-d", "--timeout", "1", sandbox, "--", "sleep", "100")).stdout.decode().strip()
    status = wait_for(lambda: (lambda s: s if not s["running"] else None)(
        daemon.call("exec.status", exec_id=exec_id)), what="the exec to time out")
    assert status["timed_out"] is True


class Recorder:
    """A relay between the CLI and the daemon that keeps the requests the CLI sent."""

    def __init__(self, daemon, path):
        self.requests = []
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.daemon_socket = daemon.socket
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.daemon_socket)
            threading.Thread(target=self.pump, args=(conn, upstream, True), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, conn, False), daemon=True).start()

    def pump(self, src, dst, record):
        buf = b""
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                dst.close()
                return
            if record:
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.requests.append(json.loads(line))
            dst.sendall(data)


def test_detached_exec_asks_the_longest_timeout_unless_told(daemon, sandbox, tmp_path):
    rec = Recorder(daemon, str(tmp_path / "relay.sock"))
    cli = [NSBOX, "--socket", rec.path]
    exec_id = ok(subprocess.run(cli + ["exec", "-d", sandbox, "--", "sleep", "100"], capture_output=True,
                                timeout=60)).stdout.decode().strip()
    ok(subprocess.run(cli + ["exec", "-d", "--timeout", "7", sandbox, "--", "true"], capture_output=True,
                      timeout=60))
    execs = [r["params"] for r in rec.requests if r.get("method") == "sandbox.exec"]
    assert execs[0]["background"] is True and execs[0]["timeout_seconds"] == 24 * 3600
    assert execs[1]["timeout_seconds"] == 7
    assert daemon.call("exec.status", exec_id=exec_id)["running"] is True


# --- Ctrl-C -----------------------------------------------------------------


def sleeps_in(daemon, sandbox):
    """How many sleep processes run in the sandbox."""
    r = ok(daemon.cli("sh", sandbox, "cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$' || true"))
    return int(r.stdout)


def test_ctrl_c_is_passed_on_as_sigint_first(daemon, sandbox):
    proc = subprocess.Popen([NSBOX, "--socket", daemon.socket, "sh", sandbox,
                             'trap "echo got INT; exit 3" INT; echo ready; sleep 100'], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    # The shell runs its trap once its foreground command ends: SIGINT ends
    # sleep, if sleep has started.
    wait_for(lambda: sleeps_in(daemon, sandbox) == 1, what="sleep to run")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 3
    assert proc.stdout.read() == b"got INT\n"


def test_ctrl_c_reaches_a_command_that_printed_nothing(daemon, sandbox):
    proc = subprocess.Popen([NSBOX, "--socket", daemon.socket, "sh", sandbox,
                             'trap "echo got INT; exit 3" INT; sleep 100'], stdout=subprocess.PIPE)
    wait_for(lambda: sleeps_in(daemon, sandbox) == 1, what="sleep to run")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 3
    assert proc.stdout.read() == b"got INT\n"


def test_a_second_ctrl_c_kills(daemon, sandbox):
    proc = subprocess.Popen([NSBOX, "--socket", daemon.socket, "sh", sandbox,
                             'trap "echo got INT" INT; echo ready; while :; do sleep 1; done'],
                            stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline() == b"got INT\n"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    wait_for(lambda: daemon.call("sandbox.info", sandbox_id=sandbox)["running_execs"] == 0,
             what="the exec to end")


# --- flags and messages -------------------------------------------------------


def test_a_command_that_cannot_start_says_why(daemon, sandbox):
    r = daemon.cli("exec", sandbox, "--", "/no/such/program")
    assert r.returncode == 127 and b"nsbox: cannot run the command" in r.stderr, r
    r = daemon.cli("exec", sandbox, "--", "/etc/passwd")
    assert r.returncode == 126 and b"nsbox: cannot run the command" in r.stderr, r


def test_relative_cwd_is_under_workspace(daemon, sandbox):
    ok(daemon.cli("exec", sandbox, "--", "mkdir", "-p", "sub/dir"))
    assert ok(daemon.cli("exec", "--cwd", "sub", sandbox, "--", "pwd")).stdout == b"/workspace/sub\n"
    assert ok(daemon.cli("sh", "-w", "sub/dir", sandbox, "pwd")).stdout == b"/workspace/sub/dir\n"


def test_docker_short_flags(daemon, sandbox):
    r = ok(daemon.cli("exec", "-e", "A=1", "-u", "root", "-w", "/tmp", sandbox, "--", "sh", "-c",
                      'echo "$A $(id -u) $(pwd)"'))
    assert r.stdout == b"1 0 /tmp\n"
    assert "not a TTY" in one_line_error(daemon.cli("exec", "-it", sandbox, "--", "bash"))


def test_errors_with_json_are_json(daemon):
    for args in (["exec", "no-such-sandbox", "--", "true"], ["ps", "no-such-sandbox"],
                 ["logs", "x", "no-such-exec"], ["kill", "x", "no-such-exec"]):
        r = daemon.cli("--json", *args)
        assert r.returncode == 125, (args, r)
        error = json.loads(r.stdout)["error"]
        assert error["kind"] == "not_found" and error["message"], (args, error)


def test_help_states_the_defaults(daemon):
    text = ok(daemon.cli("exec", "--help")).stdout.decode()
    for words in ("30 s", "300 s", "1 MiB", "256 MiB", "-d, --detach", "relative DIR"):
        assert words in text, words
    for command in ("ps", "logs", "kill"):
        assert ok(daemon.cli(command, "--help")).stdout.decode().startswith("usage: nsbox " + command)
