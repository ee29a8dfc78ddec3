"""A small JSON-RPC client of nsboxd for the tests: one JSON object per line
over the daemon's real unix socket."""
import itertools
import json
import socket


class RpcError(Exception):
    def __init__(self, error):
        super().__init__(error.get("message"))
        self.error = error
        self.code = error.get("code")
        self.kind = (error.get("data") or {}).get("kind")


class Client:
    def __init__(self, path, timeout=120):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
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
