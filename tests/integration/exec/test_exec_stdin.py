# SPDX-License-Identifier: Apache-2.0
"""exec.stdin: feeding a running exec's standard input (stdin_stream), with a
bounded queue in nsboxd; background execs without a default timeout; the
audit line of every exec."""
import base64
import json
import os
import socket
import threading
import time

import pytest

from conftest import ASAN
from nsbox_client import RpcError, as_uid

pytestmark = [pytest.mark.core]


def b64(data):
    return base64.b64encode(data).decode()


def wait_end(daemon, exec_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        st = daemon.call("exec.status", exec_id=exec_id)
        if not st["running"]:
            return st
        assert time.monotonic() < deadline, "the exec did not end: %r" % st
        time.sleep(0.05)


HEX_OF_STDIN = "import sys; sys.stdout.write(sys.stdin.buffer.read().hex())"


def test_streamed_stdin_reaches_the_command_byte_for_byte(daemon, sandbox):
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["python3", "-c", HEX_OF_STDIN], background=True,
                     stdin_stream=True)["exec_id"]
    pieces = [b"\x00\xff\xfe\r\n", "héllo\n".encode(), os.urandom(300000), b"\x1b[0m end"]
    for p in pieces[:3]:
        r = daemon.call("exec.stdin", exec_id=ex, data=b64(p), encoding="base64")
        assert r["exec_id"] == ex
    daemon.call("exec.stdin", exec_id=ex, data=pieces[3].decode())  # utf-8 text as it is
    daemon.call("exec.stdin", exec_id=ex, eof=True)
    st = wait_end(daemon, ex)
    assert st["exit_code"] == 0, st
    assert st["stdout"] == b"".join(pieces).hex()


def test_streamed_stdin_works_with_stream_true(daemon, sandbox):
    with daemon.client() as c, daemon.client() as feeder:
        rid = c.request("sandbox.exec", {"sandbox_id": sandbox, "argv": ["python3", "-c", HEX_OF_STDIN],
                                         "stream": True, "stdin_stream": True})
        msg = c.read_message()
        assert msg.get("method") == "exec.started", msg
        ex = msg["params"]["exec_id"]
        feeder.call("exec.stdin", exec_id=ex, data=b64(b"\x01\x02"), encoding="base64")
        feeder.call("exec.stdin", exec_id=ex, data=b64(b"\x03"), encoding="base64", eof=True)
        result = c.response(rid)["result"]
        out = "".join(n["params"]["data"] for n in c.notifications if n["method"] == "exec.output")
        assert result["exit_code"] == 0 and out == "010203", (result, out)


@pytest.mark.hostroot("clients of distinct host uids: clients outside nsboxd's user namespace are one owner")
def test_only_the_owner_of_the_exec_may_feed_it(daemon):
    uid = 4242
    # The sandbox and its exec belong to root here; another uid sees no such exec.
    sb = daemon.call("sandbox.create")["sandbox_id"]
    ex = daemon.call("sandbox.exec", sandbox_id=sb, argv=["cat"], background=True, stdin_stream=True)["exec_id"]
    os.chmod(daemon.dir, 0o755)
    os.chmod(daemon.socket, 0o777)
    replies = as_uid(uid, daemon.socket, [("exec.stdin", {"exec_id": ex, "data": "hi"})])
    assert replies[0]["error"]["data"]["kind"] == "not_found", replies
    daemon.call("exec.stdin", exec_id=ex, data="mine", eof=True)
    st = wait_end(daemon, ex)
    assert st["stdout"] == "mine", st


def test_stdin_of_an_ended_exec_is_a_clear_error(daemon, sandbox):
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["true"], background=True,
                     stdin_stream=True)["exec_id"]
    wait_end(daemon, ex)
    try:
        daemon.call("exec.stdin", exec_id=ex, data="late")
        assert False, "exec.stdin to an ended exec was accepted"
    except RpcError as e:
        assert e.kind == "unavailable" and "ended" in str(e), e
    plain = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["sleep", "30"], background=True)["exec_id"]
    try:
        daemon.call("exec.stdin", exec_id=plain, data="x")
        assert False, "exec.stdin to an exec without stdin_stream was accepted"
    except RpcError as e:
        assert e.kind == "invalid_params" and "stdin_stream" in str(e), e
    daemon.call("exec.kill", exec_id=plain)


def rss(daemon):
    with open("/proc/%d/status" % daemon.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024


def test_a_huge_stdin_to_a_command_that_does_not_read_keeps_nsboxd_memory_bounded(daemon, sandbox):
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["sleep", "600"], background=True,
                     stdin_stream=True)["exec_id"]
    before = rss(daemon)
    chunk = b64(os.urandom(1 << 20))
    line = lambda i: (json.dumps({"jsonrpc": "2.0", "id": i, "method": "exec.stdin",
                                  "params": {"exec_id": ex, "data": chunk, "encoding": "base64"}}) + "\n").encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(daemon.socket)
    peak = [0]
    done = threading.Event()

    def sender():
        try:
            for i in range(200):  # 200 MB offered, pipelined without waiting
                sock.sendall(line(i))
                peak[0] = max(peak[0], rss(daemon))
        finally:
            done.set()
    t = threading.Thread(target=sender, daemon=True)
    t.start()
    replies = {}
    buf = b""
    sock.settimeout(120)
    while len(replies) < 199:  # one call waits for room that never comes
        data = sock.recv(1 << 16)
        assert data, "nsboxd closed the connection"
        buf += data
        while b"\n" in buf:
            msg, buf = buf.split(b"\n", 1)
            m = json.loads(msg)
            replies[m["id"]] = m
        peak[0] = max(peak[0], rss(daemon))
    t.join(60)
    kinds = [r.get("error", {}).get("data", {}).get("kind", "ok") for r in replies.values()]
    assert kinds.count("ok") <= 2 and kinds.count("busy") >= 197, kinds
    print("nsboxd RSS %d MB before, peak %d MB while 200 MB were offered" % (before >> 20, peak[0] >> 20))
    # Under ASan freed memory sits in its quarantine (256 MB) before reuse.
    assert peak[0] - before < (400 if ASAN else 64) << 20, "nsboxd grew by %d MB" % ((peak[0] - before) >> 20)
    sock.close()  # the waiting call's client goes first, then its exec
    time.sleep(0.2)
    daemon.call("exec.kill", exec_id=ex)
    assert daemon.call("server.info")["version"]


@pytest.mark.slow  # waits out the 30 s default
def test_a_background_exec_without_a_timeout_outlives_the_default_30_s(daemon, sandbox):
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, command="sleep 35; echo survived",
                     background=True)["exec_id"]
    st = wait_end(daemon, ex, timeout=120)
    assert st["exit_code"] == 0 and not st["timed_out"] and st["stdout"] == "survived\n", st
    log = daemon.read_log()
    assert "audit: exec %s started" % ex in log and "audit: exec %s sandbox=" % ex in log, log[-2000:]


def client_uid(daemon):
    """The uid nsboxd sees this (host root) client as: 0, or under a launcher,
    from outside its user namespace, the kernel's overflow uid."""
    if not daemon.launcher:
        return 0
    with open("/proc/sys/kernel/overflowuid") as f:
        return int(f.read())


def test_every_exec_leaves_an_audit_line_with_control_characters_escaped(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["sh", "-c", "exit 6", "evil\n<3>forged\x1b[2J"],
                    cwd="/tmp")
    ex = r["exec_id"]
    deadline = time.monotonic() + 10
    while True:
        lines = [l for l in daemon.read_log().splitlines() if "audit: exec " + ex in l]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == 1, daemon.read_log()[-3000:]
    line = lines[0]
    assert "uid=%d" % client_uid(daemon) in line and "sandbox=" + sandbox in line and 'cwd="/tmp"' in line, line
    assert "user=sandbox" in line and "exit=6" in line and "duration_ms=" in line, line
    assert '"evil\\n<3>forged\\u001b[2j"' in line.lower(), line
    assert "\x1b" not in daemon.read_log()
    # A burst of execs drops none of their lines (the "ended" lines are rate-limited).
    with daemon.client() as c:
        ids = [c.call("sandbox.exec", sandbox_id=sandbox, argv=["/bin/true"])["exec_id"] for _ in range(150)]
    deadline = time.monotonic() + 10
    while True:
        log = daemon.read_log()
        missing = [i for i in ids if "audit: exec " + i not in log]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not missing, "%d of 150 audit lines missing" % len(missing)


def test_cli_exec_i_streams_input_while_the_command_runs(daemon, sandbox):
    # Before, the CLI read its standard input to the end before starting the command.
    import select
    import subprocess
    from conftest import BUILD
    p = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "exec", "-i", sandbox, "--",
                          "python3", "-u", "-c", "import sys\nfor l in sys.stdin.buffer: sys.stdout.buffer.write(l[::-1])"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        p.stdin.write(b"\xff\x00abc\n")
        p.stdin.flush()
        got = b""
        while len(got) < 6:
            r, _, _ = select.select([p.stdout], [], [], 30)
            assert r, "no output while the input is still open: %r" % got
            got += os.read(p.stdout.fileno(), 100)
        assert got == b"\ncba\x00\xff"
        p.stdin.write(b"last")
        p.stdin.close()
        assert p.stdout.read() == b"tsal" and p.wait(60) == 0
    finally:
        p.kill()
        p.wait()


def _cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_command_that_closes_its_streamed_stdin_does_not_spin_nsboxd(daemon, sandbox):
    # The write end of a pipe whose reader closed is always "ready" (EPOLLERR)
    # in epoll, even with no events asked for: nsboxd must let it go, not
    # wake up for it in a loop while the command runs on.
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, command="exec 0<&-; sleep 3; echo done",
                     background=True, stdin_stream=True)["exec_id"]
    time.sleep(0.3)
    before = _cpu_seconds(daemon.proc.pid)
    time.sleep(2)
    used = _cpu_seconds(daemon.proc.pid) - before
    st = wait_end(daemon, ex)
    assert st["stdout"] == "done\n"
    assert used < 0.5, "nsboxd used %.2f s of CPU in 2 s while the exec slept" % used
    try:
        daemon.call("exec.stdin", exec_id=ex, data="late")
    except RpcError as e:
        assert e.kind in ("unavailable", "invalid_params"), e


def test_processes_left_in_the_background_are_said_to_end_with_the_exec(daemon, sandbox):
    # `nohup cmd &` in an exec ends with it (SPEC: every process of an exec
    # dies with it): the result and the CLI say so instead of losing it silently.
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="nohup sleep 100 >/dev/null 2>&1 & echo started")
    assert r["stdout"] == "started\n" and r["background_killed"] == 1, r
    assert "background_killed" not in daemon.call("sandbox.exec", sandbox_id=sandbox, command="echo plain")
    r = daemon.cli("sh", sandbox, "nohup sleep 100 >/dev/null 2>&1 & sleep 100 >/dev/null 2>&1 &")
    assert r.returncode == 0
    assert b"nsbox: 2 processes the command left running in the background ended with it" in r.stderr, r.stderr
    left = daemon.call("sandbox.exec", sandbox_id=sandbox, command="ps -eo args | grep -c '^sleep 100' || true")
    assert left["stdout"].strip() == "0", left
