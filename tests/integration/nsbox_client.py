# SPDX-License-Identifier: Apache-2.0
"""A small JSON-RPC client of nsboxd for the tests: one JSON object per line
over the daemon's real unix socket."""
import errno
import itertools
import json
import os
import select
import socket
import struct
import subprocess
import time


class RpcError(Exception):
    def __init__(self, error):
        super().__init__(error.get("message"))
        self.error = error
        self.code = error.get("code")
        self.kind = (error.get("data") or {}).get("kind")


def connect(path, timeout, budget=2.0):
    """A socket connected to exactly path (no operator socket), with timeout.
    A full listen queue (EAGAIN) is waited out for at most `budget` seconds,
    as the SDK does: blocking connects bounded by SO_SNDTIMEO (with a timeout
    set first, Python's connect is non-blocking and fails at once)."""
    deadline = time.monotonic() + budget
    pause = 0.025
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        wait = max(0.001, min(0.5, deadline - time.monotonic()))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(wait), int(wait % 1 * 1e6)))
        try:
            s.connect(path)
        except OSError as e:
            s.close()
            if e.errno not in (errno.EAGAIN, errno.EINTR) or time.monotonic() >= deadline:
                raise
            time.sleep(min(pause, max(0, deadline - time.monotonic())))
            pause *= 2
            continue
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 0))
        s.settimeout(timeout)
        return s


class Client:
    def __init__(self, path, timeout=120):
        self.sock = connect(path, timeout)
        self.file = self.sock.makefile("rwb")
        self.ids = itertools.count(1)
        self.notifications = []

    def close(self):
        self.file.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data: bytes):
        self.file.write(data)
        self.file.flush()

    def read_message(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("nsboxd closed the connection")
        return json.loads(line)

    def request(self, method, params=None, id=None):
        rid = next(self.ids) if id is None else id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_raw((json.dumps(msg) + "\n").encode())
        return rid

    def response(self, rid):
        while True:
            msg = self.read_message()
            if "id" not in msg:
                self.notifications.append(msg)
                continue
            # A request that could not be parsed is answered with id null.
            if msg["id"] == rid or (msg["id"] is None and "error" in msg):
                return msg

    def call(self, method, **params):
        msg = self.response(self.request(method, params))
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]


class Raw:
    """A client that sends exactly the bytes it is given."""

    def __init__(self, path, timeout=30):
        self.sock = connect(path, timeout)
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

    def nothing_within(self, seconds):
        r, _, _ = select.select([self.sock], [], [], seconds)
        return not r and b"\n" not in self.buf


UID_CLIENT = r"""
import json, socket, sys
path, requests = sys.argv[1], json.loads(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(120)
s.connect(path)
f = s.makefile("rwb")
out = []
for i, (method, params) in enumerate(requests):
    f.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
    f.flush()
    out.append(json.loads(f.readline()))
print(json.dumps(out))
"""


def as_uid(uid, socket_path, requests):
    """Replies to `requests` sent over one connection by a process of `uid`."""
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    p = subprocess.run(["/usr/bin/python3", "-c", UID_CLIENT, socket_path, json.dumps(requests)],
                       preexec_fn=drop, cwd="/", capture_output=True, timeout=300)
    if p.returncode != 0:
        raise OSError(p.stderr.decode(errors="replace"))
    return json.loads(p.stdout)
