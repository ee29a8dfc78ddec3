"""nsboxd's client-facing robustness (issue 15): every valid request is
answered with its own id, logs cannot be forged, connections are bounded per
uid and in time, output memory is bounded globally, large requests do not
stall the loop, SIGTERM refuses new work, and one state dir has one daemon.

Every test drives the real daemon over its real socket.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import BUILD, IMAGE_DIR, Daemon  # noqa: E402

INVALID_REQUEST, INVALID_PARAMS, APP = -32600, -32602, -32000


class Raw:
    """A client that sends exactly the bytes it is given."""

    def __init__(self, path, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def line(self, timeout=30):
        """The next line, or None when the daemon closed the connection."""
        self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def reply(self, timeout=30):
        line = self.line(timeout)
        assert line is not None, "nsboxd closed the connection instead of replying"
        return json.loads(line)

    def call(self, payload, timeout=30):
        self.send(payload if isinstance(payload, bytes) else (json.dumps(payload) + "\n").encode())
        return self.reply(timeout)


def server_info(path, timeout=30):
    with Raw(path, timeout) as c:
        return c.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"}, timeout)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-4000:])


# --- valid JSON keeps its id --------------------------------------------------

# Each line is valid JSON (RFC 8259) that jansson cannot hold as is.
HARD_LINES = [
    (b'{"jsonrpc":"2.0","id":101,"method":"server.info","params":{"x":"a\\u0000b"}}', INVALID_PARAMS, "params.x"),
    (b'{"jsonrpc":"2.0","id":102,"method":"server.info","params":{"a":1,"a":2}}', INVALID_REQUEST, "duplicate"),
    (b'{"jsonrpc":"2.0","id":103,"method":"server.info","params":{"n":1e400}}', INVALID_REQUEST, "out of range"),
    (b'{"jsonrpc":"2.0","id":104,"method":"server.info","params":{"n":123456789012345678901234567890}}',
     INVALID_REQUEST, "out of range"),
    (b'{"jsonrpc":"2.0","id":105,"method":"server.info\\u0000.x"}', INVALID_REQUEST, "NUL"),
    (b'{"jsonrpc":"2.0","id":"s6","method":"sandbox.exec","params":{"env":{"A\\u0000B":"x"}}}',
     INVALID_PARAMS, "NUL"),
    (b'{"jsonrpc":"2.0","method":"server.info","id":107,"method":"server.info"}', INVALID_REQUEST, "duplicate"),
]


def test_pipelined_valid_json_is_answered_with_each_own_id(daemon):
    ids = [json.loads(line.replace(b"\\u0000", b"").replace(b"1e400", b"1")
                      .replace(b"123456789012345678901234567890", b"1"))["id"] for line, _, _ in HARD_LINES]
    with Raw(daemon.socket) as c:
        # All at once, then a normal request: a client that pipelines waits
        # for each id, so every one must come back, in order.
        c.send(b"".join(line + b"\n" for line, _, _ in HARD_LINES) +
               b'{"jsonrpc":"2.0","id":"last","method":"server.info"}\n')
        for (line, code, says), want_id in zip(HARD_LINES, ids):
            r = c.reply()
            assert r["id"] == want_id, (line, r)
            assert r["error"]["code"] == code, (line, r)
            assert says in r["error"]["message"], (line, r)
        last = c.reply()
        assert last["id"] == "last" and "result" in last


def test_text_that_is_not_json_still_gets_a_null_id(daemon):
    with Raw(daemon.socket) as c:
        for bad in (b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"n":1e400}', b'{"id":1,"id":2,',
                    b'[1e400,]'):
            r = c.call(bad + b"\n")
            assert r["id"] is None and r["error"]["code"] == -32700, (bad, r)


# --- logs cannot be forged, and a client cannot flood them -------------------------

def test_client_text_cannot_forge_a_log_line(daemon):
    forged = "x\n<3>error: FORGED by a client\r\x1b[2J\u2028<3>error: FORGED again"
    with Raw(daemon.socket) as c:
        r = c.call({"jsonrpc": "2.0", "id": 1, "method": forged})
        assert r["error"]["code"] == -32601
    time.sleep(0.2)
    lines = daemon.read_log().splitlines()
    assert not any(l.startswith("<3>error: FORGED") for l in lines), lines[-5:]
    assert any("x\\x0a<3>error: FORGED by a client\\x0d\\x1b[2J\\u{2028}" in l for l in lines), lines[-5:]


def test_refused_connects_are_logged_at_a_bounded_rate():
    d = Daemon(extra_args=["--max-connections", "1"])
    try:
        with Raw(d.socket) as held:
            assert "result" in held.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
            for _ in range(200):
                with Raw(d.socket) as extra:
                    assert extra.reply(timeout=5)["error"]["data"]["kind"] == "limit_reached"
            refused = [l for l in d.read_log().splitlines() if "refused" in l]
            assert 1 <= len(refused) <= 30, len(refused)
            time.sleep(1.5)  # the bucket refills: the next line says what was dropped
            with Raw(d.socket) as extra:
                extra.reply(timeout=5)
            time.sleep(0.2)
            assert any("lines suppressed" in l for l in d.read_log().splitlines())
    finally:
        assert d.stop() == 0


# --- connections per uid and in time ------------------------------------------------

NOBODY = 65534

CONNECT_AS = r"""
import os, socket, sys
path, uid, gid, carrier_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.setgroups([gid]); os.setgid(gid); os.setuid(uid)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
carrier = socket.socket(fileno=carrier_fd)
socket.send_fds(carrier, [b"x"], [s.fileno()])
"""


def connect_as(path, uid):
    """A connection whose peer credentials (SO_PEERCRED, taken at connect)
    are uid's: a child connects as uid and hands the socket over."""
    gid = os.stat(path).st_gid  # the socket's group may connect
    ours, theirs = socket.socketpair()
    ours.settimeout(30)
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", CONNECT_AS, path, str(uid), str(gid), str(theirs.fileno())],
                           pass_fds=[theirs.fileno()], cwd="/", capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    finally:
        ours.close()
        theirs.close()
    c = Raw.__new__(Raw)
    c.sock = socket.socket(fileno=fds[0])
    c.sock.settimeout(30)
    c.buf = b""
    return c


def test_one_uid_cannot_take_every_connection():
    d = Daemon(extra_args=["--max-connections-per-uid", "2"])
    try:
        held = [connect_as(d.socket, NOBODY) for _ in range(2)]
        for i, c in enumerate(held):
            assert c.call({"jsonrpc": "2.0", "id": i, "method": "server.info"})["id"] == i
        extra = connect_as(d.socket, NOBODY)
        r = extra.reply(timeout=5)
        assert r["error"]["data"]["kind"] == "limit_reached" and "uid 65534" in r["error"]["message"], r
        assert extra.line(timeout=5) is None
        extra.close()
        # Other users, and root (the operator), still get in.
        assert "result" in server_info(d.socket)
        other = connect_as(d.socket, NOBODY - 1)
        assert "result" in other.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
        other.close()
        # A slot freed is a slot taken again.
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:
            again = connect_as(d.socket, NOBODY)
            r = again.call({"jsonrpc": "2.0", "id": 9, "method": "server.info"})
            again.close()
            if "result" in r or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert "result" in r, r
        for c in held:
            c.close()
    finally:
        assert d.stop() == 0


def test_idle_connections_are_closed_and_busy_ones_are_not():
    d = Daemon(extra_args=["--client-idle-timeout-seconds", "2"])
    try:
        idle = Raw(d.socket)
        assert "result" in idle.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
        talker = Raw(d.socket)
        start = time.monotonic()
        # The talker sends something every half second for 5 s: never idle that long.
        while time.monotonic() - start < 5:
            assert "result" in talker.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
            time.sleep(0.5)
        assert idle.line(timeout=10) is None, "an idle connection was kept past the timeout"
        assert "result" in talker.call({"jsonrpc": "2.0", "id": 2, "method": "server.info"})
        idle.close()
        talker.close()
    finally:
        assert d.stop() == 0


def test_a_request_line_must_complete_in_time():
    d = Daemon(extra_args=["--request-timeout-seconds", "2"])
    try:
        with Raw(d.socket) as slow:
            slow.send(b'{"jsonrpc":"2.0","id":1,')
            start = time.monotonic()
            r = slow.reply(timeout=15)
            assert r["id"] is None and r["error"]["code"] == INVALID_REQUEST, r
            assert "request_timeout_seconds" in r["error"]["message"]
            assert slow.line(timeout=10) is None
            assert time.monotonic() - start >= 1.5
        # Complete lines are not on that clock, however long the connection lives.
        with Raw(d.socket) as c:
            for i in range(4):
                assert c.call({"jsonrpc": "2.0", "id": i, "method": "server.info"})["id"] == i
                time.sleep(1)
    finally:
        assert d.stop() == 0
