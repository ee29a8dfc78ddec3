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
