# SPDX-License-Identifier: Apache-2.0
"""nsbox-http, the HTTP front of nsboxd: tokens as owners (auth.act_as), nsbox's
own API with NDJSON/SSE streams, the seed's /execute and /health, the
agent-sandbox runtime contract, TLS, and bad clients."""
import base64
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

from conftest import BUILD, Daemon
from nsbox_client import Client, RpcError, as_uid
from test_python import make_wheel

TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
TOKEN_C = "token-c-0123456789abcdef"  # stored as its sha256
UID_A, UID_B, UID_C = 41001, 41002, 41003


class Front:
    """nsbox-http on a free loopback port, in front of `daemon`."""

    def __init__(self, daemon, *args, tokens=True, scheme="http", via_cli=False, uid=None):
        self.dir = tempfile.mkdtemp(prefix="nsbox-http-test-")
        os.chmod(self.dir, 0o755)
        self.scheme = scheme
        if via_cli:
            argv = [os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "serve", "--http", "127.0.0.1:0", *args]
        else:
            argv = [os.path.join(BUILD, "nsbox-http"), "--http", "127.0.0.1:0", "--socket", daemon.socket, *args]
        if tokens:
            path = os.path.join(self.dir, "tokens")
            with open(path, "w") as f:
                f.write("# test owners\n%d %s\n\n%d %s\n%d sha256:%s\n" % (
                    UID_A, TOKEN_A, UID_B, TOKEN_B, UID_C, hashlib.sha256(TOKEN_C.encode()).hexdigest()))
            os.chmod(path, 0o600)
            argv += ["--tokens", path]
        self.log_path = os.path.join(self.dir, "http.log")
        self.log = open(self.log_path, "wb")
        def drop():
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=drop, cwd="/")
        deadline = time.monotonic() + 20
        while True:
            m = re.search(r"port (\d+)", self.read_log())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("nsbox-http did not start:\n" + self.read_log())
            time.sleep(0.02)

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def connection(self, timeout=300):
        if self.scheme == "https":
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.context)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, token=TOKEN_A, headers=None, raw=False):
        """(status, headers, parsed JSON or bytes)"""
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = self.connection()
        try:
            c.request(method, path, body=body, headers=h)
            resp = c.getresponse()
            data = resp.read()
        finally:
            c.close()
        if not raw and resp.getheader("Content-Type", "").startswith("application/json") and data:
            data = json.loads(data)
        return resp.status, resp, data

    def rpc(self, method, token=TOKEN_A, **params):
        status, _, body = self.request("POST", "/v1/rpc/" + method, params, token=token)
        assert status == 200, (status, body)
        return body

    def stop(self):
        self.proc.terminate()
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        # a sanitizer build reports and may carry on: a report fails the stop as a crash would
        log = self.read_log()
        if rc == 0 and ("runtime error:" in log or "AddressSanitizer" in log or "LeakSanitizer" in log):
            print(log[-6000:])
            rc = 99
        return rc


@pytest.fixture(scope="module")
def front(daemon):
    os.chmod(daemon.socket, 0o666)  # for as_uid's clients; in production: membership of group nsbox
    f = Front(daemon, "--execute-sandbox", json.dumps({"env": {"PIP_FIND_LINKS": "/workspace/wheels",
                                                                "PIP_NO_INDEX": "1"}}))
    yield f
    assert f.proc.poll() is None, "nsbox-http died:\n" + f.read_log()
    assert f.stop() == 0


def error_kind(body):
    return body["error"]["kind"]


# --- auth -------------------------------------------------------------------

def test_no_token_and_bad_token_are_401_with_www_authenticate(front):
    for token in (None, "not-a-token-at-all-xxxxxxxx", TOKEN_A + "x", ""):
        status, resp, body = front.request("GET", "/list/", token=token)
        assert status == 401, (token, status, body)
        assert resp.getheader("WWW-Authenticate", "").startswith("Bearer")
        assert error_kind(body) == "unauthorized"
    status, _, body = front.request("POST", "/v1/rpc/sandbox.list", {}, token=None)
    assert status == 401


def test_each_token_owns_its_sandboxes_like_a_peercred_uid(front, daemon):
    a = front.rpc("sandbox.create")["sandbox_id"]
    try:
        # nsboxd records the token's uid as the owner
        assert any(s["sandbox_id"] == a for s in as_uid(UID_A, daemon.socket, [["sandbox.list", {}]])[0]["result"]
                   ["sandboxes"])
        for ident in (a, a[:8], a[:13]):
            status, _, body = front.request("POST", "/v1/rpc/sandbox.info", {"sandbox_id": ident}, token=TOKEN_B)
            assert status == 404 and error_kind(body) == "not_found", (ident, body)
            status, _, body = front.request("POST", "/v1/rpc/sandbox.exec",
                                            {"sandbox_id": ident, "command": "id"}, token=TOKEN_B)
            assert status == 404, body
        # the same answer as for an id that does not exist
        missing = "00000000-0000-4000-8000-000000000000"
        s1, _, b1 = front.request("POST", "/v1/rpc/sandbox.info", {"sandbox_id": a}, token=TOKEN_B)
        s2, _, b2 = front.request("POST", "/v1/rpc/sandbox.info", {"sandbox_id": missing}, token=TOKEN_B)
        assert (s1, error_kind(b1)) == (s2, error_kind(b2))
        listed = front.rpc("sandbox.list", token=TOKEN_B)["sandboxes"]
        assert a not in [s["sandbox_id"] for s in listed]
        status, _, body = front.request("POST", "/v1/rpc/sandbox.remove", {"sandbox_id": a, "force": True},
                                        token=TOKEN_C)  # the sha256: entry authenticates too
        assert status == 404
        assert front.rpc("sandbox.info", sandbox_id=a[:8])["sandbox_id"] == a
    finally:
        front.rpc("sandbox.remove", sandbox_id=a, force=True)


def test_act_as_is_refused_to_a_non_root_client(daemon, front):
    out = as_uid(UID_A, daemon.socket, [["auth.act_as", {"uid": UID_B}], ["sandbox.list", {}]])
    assert out[0]["error"]["data"]["kind"] == "permission_denied"


def test_act_as_once_per_connection_and_never_root(daemon):
    with daemon.client() as c:
        with pytest.raises(RpcError) as e:
            c.call("auth.act_as", uid=0)
        assert e.value.kind == "invalid_params"
        assert c.call("auth.act_as", uid=UID_A) == {"uid": UID_A}
        with pytest.raises(RpcError) as e:
            c.call("auth.act_as", uid=UID_B)
        assert e.value.kind == "permission_denied"
        with pytest.raises(RpcError) as e:
            c.call("auth.act_as", uid=0)
        assert e.value.kind == "permission_denied"


def test_act_as_counts_in_max_connections_per_uid():
    d = Daemon(extra_args=["--max-connections-per-uid", "2"])
    try:
        clients = [d.client() for _ in range(3)]
        assert clients[0].call("auth.act_as", uid=UID_A) == {"uid": UID_A}
        assert clients[1].call("auth.act_as", uid=UID_A) == {"uid": UID_A}
        with pytest.raises(RpcError) as e:
            clients[2].call("auth.act_as", uid=UID_A)
        assert e.value.kind == "limit_reached"
        for c in clients:
            c.close()
    finally:
        assert d.stop() == 0


def test_exec_audit_line_names_the_acting_root(front, daemon):
    sb = front.rpc("sandbox.create")["sandbox_id"]
    try:
        front.rpc("sandbox.exec", sandbox_id=sb, argv=["true"])
        deadline = time.monotonic() + 30
        while "uid=%d via act_as by uid 0" % UID_A not in daemon.read_log():
            assert time.monotonic() < deadline, daemon.read_log()[-3000:]
            time.sleep(0.1)
    finally:
        front.rpc("sandbox.remove", sandbox_id=sb, force=True)


# --- nsbox's API --------------------------------------------------------------

def test_rpc_errors_map_to_http_statuses(front):
    status, _, body = front.request("POST", "/v1/rpc/sandbox.create", {"memory_mb": "lots"})
    assert status == 400 and error_kind(body) == "invalid_params"
    status, _, body = front.request("POST", "/v1/rpc/no.such_method", {})
    assert status == 404
    status, _, body = front.request("POST", "/v1/rpc/auth.act_as", {"uid": 1})
    assert status == 404  # not exposed: a token cannot become another owner
    # A sandbox removed lately is Gone, saying when and why; to its owner only.
    sid = front.rpc("sandbox.create")["sandbox_id"]
    front.rpc("sandbox.remove", sandbox_id=sid)
    status, _, body = front.request("POST", "/v1/rpc/sandbox.info", {"sandbox_id": sid})
    assert status == 410 and error_kind(body) == "gone" and "was removed at" in body["error"]["message"], body
    status, _, body = front.request("POST", "/v1/rpc/sandbox.info", {"sandbox_id": sid}, token=TOKEN_B)
    assert status == 404 and error_kind(body) == "not_found", body
    status, _, body = front.request("POST", "/v1/rpc/sandbox.list", b"{not json")
    assert status == 400 and error_kind(body) == "invalid_params"
    status, _, body = front.request("POST", "/v1/rpc/sandbox.list", b"[1]")
    assert status == 400
    status, _, body = front.request("GET", "/no/such/endpoint")
    assert status == 404
    # a JSON-RPC request as the body gets a JSON-RPC response
    status, _, body = front.request("POST", "/v1/rpc", {"jsonrpc": "2.0", "id": 7, "method": "server.info"})
    assert status == 200 and body["id"] == 7 and "max_sandboxes" in body["result"]


def read_ndjson_line(resp):
    line = resp.readline()
    assert line, "stream ended"
    return json.loads(line)


def test_streamed_exec_arrives_as_ndjson_while_the_command_runs(front):
    sb = front.rpc("sandbox.create")["sandbox_id"]
    try:
        c = front.connection()
        c.request("POST", "/v1/rpc/sandbox.exec", body=json.dumps({
            "sandbox_id": sb, "stream": True,
            "command": "echo first; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo second"}),
            headers={"Authorization": "Bearer " + TOKEN_A})
        resp = c.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "application/x-ndjson"
        # the first line comes while the command still waits for /workspace/go
        seen = []
        while True:
            msg = read_ndjson_line(resp)
            seen.append(msg)
            if msg.get("method") == "exec.output":
                assert msg["params"]["data"] == "first\n"
                break
        front.rpc("fs.write", sandbox_id=sb, path="/workspace/go", content="")
        rest = []
        while True:
            msg = read_ndjson_line(resp)
            rest.append(msg)
            if "result" in msg or "error" in msg:
                break
        assert [m["params"]["data"] for m in rest if m.get("method") == "exec.output"] == ["second\n"]
        assert rest[-1]["result"]["exit_code"] == 0
        c.close()
    finally:
        front.rpc("sandbox.remove", sandbox_id=sb, force=True)


def test_streamed_call_as_server_sent_events(front):
    status, resp, body = front.request("POST", "/v1/rpc/python.run",
                                       {"session_id": "sse", "code": "print('hi')", "stream": True},
                                       headers={"Accept": "text/event-stream"}, raw=True)
    assert status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    events = [dict(line.split(": ", 1) for line in block.split("\n")) for block in
              body.decode().strip().split("\n\n")]
    assert {"event": "exec.output"}.items() <= events[0].items() or any(e["event"] == "exec.output"
                                                                        for e in events)
    assert events[-1]["event"] == "result"
    assert json.loads(events[-1]["data"])["status"] == "ok"
    sid = json.loads(events[-1]["data"])["sandbox_id"]
    front.rpc("sandbox.remove", sandbox_id=sid, force=True)


def test_streamed_call_that_fails_at_once_has_the_errors_status(front):
    status, _, body = front.request("POST", "/v1/rpc/sandbox.exec",
                                    {"sandbox_id": "00000000-0000-4000-8000-000000000000", "command": "true",
                                     "stream": True})
    assert status == 404 and error_kind(body) == "not_found"


def test_client_leaving_mid_stream_ends_the_exec(front):
    sb = front.rpc("sandbox.create")["sandbox_id"]
    try:
        c = front.connection()
        c.request("POST", "/v1/rpc/sandbox.exec", body=json.dumps({
            "sandbox_id": sb, "stream": True, "command": "echo started; sleep 600"}),
            headers={"Authorization": "Bearer " + TOKEN_A})
        resp = c.getresponse()
        while read_ndjson_line(resp).get("method") != "exec.output":
            pass
        assert front.rpc("sandbox.info", sandbox_id=sb)["running_execs"] == 1
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        deadline = time.monotonic() + 60
        while front.rpc("sandbox.info", sandbox_id=sb)["running_execs"] != 0:
            assert time.monotonic() < deadline, "the exec outlived its HTTP client"
            time.sleep(0.1)
    finally:
        front.rpc("sandbox.remove", sandbox_id=sb, force=True)


def test_bodies_over_10_mib_are_413(front):
    # a Content-Length over the limit is answered at once, before the body
    c = front.connection()
    c.putrequest("POST", "/execute")
    c.putheader("Authorization", "Bearer " + TOKEN_A)
    c.putheader("Content-Length", str(10 * 1024 * 1024 + 1))
    c.endheaders()
    try:
        c.send(b"x" * (10 * 1024 * 1024 + 1))
    except OSError:
        pass  # nsbox-http answered and closed without reading it
    resp = c.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["error"]["kind"] == "invalid_params"
    c.close()
    # chunked, no length told up front: refused as it arrives
    c = front.connection()
    c.putrequest("POST", "/execute")
    c.putheader("Authorization", "Bearer " + TOKEN_A)
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    chunk = b"y" * (1 << 20)
    try:
        for _ in range(12):
            c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        c.send(b"0\r\n\r\n")
    except OSError:
        pass
    assert c.getresponse().status == 413
    c.close()
    status, _, _ = front.request("GET", "/health")
    assert status == 200


# --- the seed's contract --------------------------------------------------------

def b64(data):
    return base64.b64encode(data).decode()


def test_seed_execute_with_files_and_produced_files_and_a_figure(front):
    csv = b"a,b\n1,2\n3,4\n"
    code = ("import pandas as pd, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "df = pd.read_csv('data/in.csv')\nprint(int(df.b.sum()))\n"
            "import os\ndf.to_csv(os.path.join(os.environ['OUTPUT_DIR'], 'out.csv'), index=False)\n"
            "plt.plot(df.a, df.b)\nplt.savefig('output/plot.png')\n")
    status, _, body = front.request("POST", "/execute", {"code": code, "timeout_seconds": 120,
                                                         "files": {"data/in.csv": b64(csv)}})
    assert status == 200, body
    assert body["status"] == "success" and body["exit_code"] == 0, body
    assert body["stdout"] == "6\n" and isinstance(body["execution_time_ms"], int)
    produced = body["files_produced"]
    assert base64.b64decode(produced["out.csv"]) == csv
    assert base64.b64decode(produced["plot.png"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "data/in.csv" not in produced


def test_seed_execute_error_status_and_exit_code(front):
    status, _, body = front.request("POST", "/execute", {"code": "import sys\nprint('x')\nsys.exit(3)"})
    assert status == 200 and body["status"] == "error" and body["exit_code"] == 3 and body["stdout"] == "x\n"
    status, _, body = front.request("POST", "/execute", {"code": "raise ValueError('boom')"})
    assert body["status"] == "error" and "ValueError: boom" in body["stderr"]


def test_seed_execute_installs_requirements_from_an_offline_index(front):
    filename, data = make_wheel("nsbox_httppkg", "2.0.1", "ANSWER = 'from the wheel'\n")
    status, _, body = front.request("POST", "/execute", {
        "code": "import nsbox_httppkg\nprint(nsbox_httppkg.ANSWER)", "requirements": ["nsbox_httppkg==2.0.1"],
        "files": {"wheels/" + filename: b64(data)}, "timeout_seconds": 120})
    assert status == 200 and body["status"] == "success", body
    assert body["stdout"] == "from the wheel\n"


def test_seed_execute_runs_each_call_in_a_fresh_sandbox_removed_after(front):
    before = len(front.rpc("sandbox.list")["sandboxes"])
    _, _, body = front.request("POST", "/execute", {"code": "open('/workspace/left.txt','w').write('x')\n"
                                                            "open('/tmp/left.txt','w').write('x')"})
    assert body["status"] == "success"
    _, _, body = front.request("POST", "/execute", {
        "code": "import os\nprint(os.path.exists('/workspace/left.txt'), os.path.exists('/tmp/left.txt'))"})
    assert body["stdout"] == "False False\n"
    assert len(front.rpc("sandbox.list")["sandboxes"]) == before


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"code": 5}', b'{"code": ""}', b'{"code": "1", "files": []}',
    b'{"code": "1", "files": {"a.txt": "***not base64***"}}', b'{"code": "1", "files": {"a.txt": 7}}',
    b'{"code": "1", "files": {"../escape.txt": "eA=="}}', b'{"code": "1", "files": {"/etc/x": "eA=="}}',
    b'{"code": "1", "files": {"a/../../b": "eA=="}}', b'{"code": "1", "requirements": "numpy"}',
    b'{"code": "1", "timeout_seconds": "soon"}', b'{"code": "1", "extra": 1}', b'{}',
])
def test_seed_execute_bad_input_is_400(front, body):
    status, _, answer = front.request("POST", "/execute", body)
    assert status == 400, answer
    assert error_kind(answer) == "invalid_params"


def test_seed_execute_at_capacity_is_429_and_health_says_so():
    d = Daemon(extra_args=["--max-sandboxes", "1"])
    f = Front(d)
    try:
        status, _, health = f.request("GET", "/health")
        assert status == 200 and health["capacity"] == 1 and health["free"] == 1
        sb = f.rpc("sandbox.create", token=TOKEN_B)["sandbox_id"]
        status, _, health = f.request("GET", "/health")
        assert health["sandboxes"] == 1 and health["free"] == 0
        status, resp, body = f.request("POST", "/execute", {"code": "print(1)"})
        assert status == 429 and error_kind(body) == "limit_reached"
        assert resp.getheader("Retry-After") is not None
        f.rpc("sandbox.remove", sandbox_id=sb, force=True, token=TOKEN_B)
        status, _, body = f.request("POST", "/execute", {"code": "print(1)"})
        assert status == 200 and body["stdout"] == "1\n"
    finally:
        assert f.stop() == 0
        assert d.stop() == 0


def test_health(front):
    status, _, body = front.request("GET", "/health")
    assert status == 200
    assert body["status"] == "ok" and body["capacity"] >= 1 and body["free"] <= body["capacity"]
    assert "sandboxes" in body


def test_health_reports_the_load():
    d = Daemon()
    f = Front(d)
    try:
        _, _, health = f.request("GET", "/health")
        load = health["load"]
        assert load["running_execs"] == 0 and load["cpus"] == os.cpu_count()
        assert len(load["loadavg"]) == 3 and all(x >= 0 for x in load["loadavg"])
        assert 0 <= load["memory_committed_bytes"] <= load["memory_commit_limit_bytes"]
        sb = f.rpc("sandbox.create")["sandbox_id"]
        execs = [f.rpc("sandbox.exec", sandbox_id=sb, argv=["sleep", "600"], background=True)["exec_id"]
                 for _ in range(2)]
        _, _, health = f.request("GET", "/health")
        assert health["load"]["running_execs"] == 2
        info = f.rpc("server.info")
        assert health["load"]["memory_committed_bytes"] == info["memory_committed_bytes"] > 0
        for e in execs:
            f.rpc("exec.kill", exec_id=e, signal=9)
        deadline = time.monotonic() + 30
        while f.request("GET", "/health")[2]["load"]["running_execs"] != 0:
            assert time.monotonic() < deadline, "the killed execs are still counted"
            time.sleep(0.05)
    finally:
        assert f.stop() == 0
        assert d.stop() == 0


# --- the agent-sandbox runtime contract ------------------------------------------

def multipart(filename, content, boundary="nsboxtestboundary"):
    return (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n" % (boundary, filename)).encode() + content +
            ("\r\n--%s--\r\n" % boundary).encode(),
            {"Content-Type": "multipart/form-data; boundary=" + boundary})


def test_agent_sandbox_runtime_contract(front):
    status, _, body = front.request("POST", "/execute", {"command": "echo hello; echo oops >&2; exit 4"})
    assert status == 200 and body == {"stdout": "hello\n", "stderr": "oops\n", "exit_code": 4}
    # one default sandbox per token, kept between calls
    front.request("POST", "/execute", {"command": "echo kept > state.txt"})
    _, _, body = front.request("POST", "/execute", {"command": "cat state.txt; pwd"})
    assert body["stdout"] == "kept\n/workspace\n"
    _, _, body = front.request("POST", "/execute", {"command": "cat state.txt"}, token=TOKEN_B)
    assert body["exit_code"] != 0

    # the runtime's stateful kernel: the default sandbox's persistent interpreter
    status, _, body = front.request("POST", "/execute_command_stateful", {"code": "x = 20\nprint('set')"})
    assert status == 200 and body == {"stdout": "set\n", "stderr": "", "exit_code": 0}, body
    _, _, body = front.request("POST", "/execute_command_stateful", {"code": "x * 2 + 2", "language": "python"})
    assert body["stdout"] == "42" and body["exit_code"] == 0, body
    _, _, body = front.request("POST", "/execute_command_stateful", {"code": "1/0", "timeout": 30})
    assert body["exit_code"] == 1 and "ZeroDivisionError" in body["stderr"]
    assert front.request("POST", "/execute_command_stateful", {"code": "1", "language": "ruby"})[0] == 400

    payload = bytes(range(256)) * 10
    data, headers = multipart("sub/dir/blob.bin", payload)
    status, _, body = front.request("POST", "/upload", data, headers=headers)
    assert status == 200 and "uploaded successfully" in body["message"], body
    status, resp, body = front.request("GET", "/download/sub/dir/blob.bin", raw=True)
    assert status == 200 and body == payload
    # the SDK quotes the whole path (urllib.parse.quote(path, safe=''))
    status, resp, body = front.request("GET", "/download/sub%2Fdir%2Fblob.bin", raw=True)
    assert status == 200 and body == payload
    status, _, body = front.request("GET", "/download/sub/dir/missing.bin")
    assert status == 404 and body == {"message": "File not found"}
    status, _, body = front.request("GET", "/list/sub/dir")
    assert status == 200 and [(e["name"], e["size"], e["type"]) for e in body] == [("blob.bin", 2560, "file")]
    assert isinstance(body[0]["mod_time"], float) and body[0]["mod_time"] > 1.6e9
    _, _, body = front.request("GET", "/list/sub")
    assert body[0]["type"] == "directory"
    assert front.request("GET", "/exists/sub/dir/blob.bin")[2] == {"path": "sub/dir/blob.bin", "exists": True}
    assert front.request("GET", "/exists/sub/nope")[2] == {"path": "sub/nope", "exists": False}
    # the token's files are its own
    assert front.request("GET", "/exists/sub/dir/blob.bin", token=TOKEN_B)[2]["exists"] is False

    # bad uploads
    status, _, _ = front.request("POST", "/upload", b"plain body", headers={"Content-Type": "text/plain"})
    assert status == 400
    # out of the base directory: denied, as the reference runtime denies it
    data, headers = multipart("../../etc/evil", b"x")
    assert front.request("POST", "/upload", data, headers=headers) [0:3:2] == (403, {"message": "Access denied"})


def test_agent_sandbox_v1_files(front):
    status, _, body = front.request("PUT", "/v1/files/v1dir/a.txt", b"alpha",
                                    headers={"Content-Type": "application/octet-stream"})
    assert status == 200, body
    status, _, body = front.request("GET", "/v1/files/v1dir/a.txt", raw=True)
    assert status == 200 and body == b"alpha"
    status, _, body = front.request("GET", "/v1/files/v1dir")
    assert status == 200
    (entry,) = body["entries"]
    assert entry["name"] == "a.txt" and entry["size"] == 5 and entry["type"] == "file"
    assert entry["mode"] == "0644" and entry["modified_at"].endswith("Z")
    assert front.request("HEAD", "/v1/files/v1dir/a.txt")[0] == 200
    assert front.request("HEAD", "/v1/files/v1dir/none.txt")[0] == 404
    assert front.request("DELETE", "/v1/files/v1dir")[0] == 409
    assert front.request("DELETE", "/v1/files/v1dir?recursive=true")[0] == 200
    assert front.request("HEAD", "/v1/files/v1dir/a.txt")[0] == 404
    status, _, body = front.request("GET", "/v1/health")
    assert status == 200 and body["status"] == "ok"


# --- TLS, startup refusals ---------------------------------------------------------

def test_tls(daemon, tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    f = Front(daemon, "--tls-cert", cert, "--tls-key", key, scheme="https")
    f.context = ssl.create_default_context(cafile=cert)
    try:
        status, _, body = f.request("GET", "/health")
        assert status == 200 and body["status"] == "ok"
        _, _, body = f.request("POST", "/execute", {"command": "echo over tls"})
        assert body["stdout"] == "over tls\n"
        # plain HTTP to the TLS port gets no answer
        c = http.client.HTTPConnection("127.0.0.1", f.port, timeout=30)
        with pytest.raises((OSError, http.client.HTTPException)):
            c.request("GET", "/health")
            c.getresponse().read()
    finally:
        assert f.stop() == 0


def test_without_tokens_only_loopback_and_never_root(daemon, front):
    p = subprocess.run([os.path.join(BUILD, "nsbox-http"), "--http", "0.0.0.0:0", "--socket", daemon.socket],
                       capture_output=True, timeout=30)
    assert p.returncode != 0 and b"loopback" in p.stderr
    # as root, every local user reaching the port would be root to nsboxd
    p = subprocess.run([os.path.join(BUILD, "nsbox-http"), "--http", "127.0.0.1:0", "--socket", daemon.socket],
                       capture_output=True, timeout=30)
    assert p.returncode != 0 and b"root" in p.stderr
    # as a user, its clients are that user
    f = Front(daemon, tokens=False, uid=UID_A)
    try:
        sb = front.rpc("sandbox.create")["sandbox_id"]  # TOKEN_A's: uid UID_A
        try:
            status, _, body = f.request("POST", "/v1/rpc/sandbox.info", {"sandbox_id": sb}, token=None)
            assert status == 200 and body["sandbox_id"] == sb
            status, _, body = front.request("POST", "/v1/rpc/sandbox.info", {"sandbox_id": sb}, token=TOKEN_B)
            assert status == 404
        finally:
            front.rpc("sandbox.remove", sandbox_id=sb, force=True)
    finally:
        assert f.stop() == 0


def test_sighup_reloads_the_tokens_file(daemon):
    f = Front(daemon)
    try:
        path = os.path.join(f.dir, "tokens")
        with open(path, "w") as out:
            out.write("%d %s\n" % (UID_B, "a-brand-new-token-0123456789"))
        f.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while f.request("GET", "/list/", token="a-brand-new-token-0123456789")[0] != 200:
            assert time.monotonic() < deadline, f.read_log()
            time.sleep(0.05)
        assert f.request("GET", "/list/", token=TOKEN_A)[0] == 401
        # a file it refuses leaves the tokens as they were
        with open(path, "w") as out:
            out.write("0 %s\n" % TOKEN_A)
        f.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "the tokens stay as they were" not in f.read_log():
            assert time.monotonic() < deadline, f.read_log()
            time.sleep(0.05)
        assert f.request("GET", "/list/", token="a-brand-new-token-0123456789")[0] == 200
        assert f.request("GET", "/list/", token=TOKEN_A)[0] == 401
    finally:
        assert f.stop() == 0


def test_nsbox_serve_runs_the_http_front(daemon):
    f = Front(daemon, via_cli=True)
    try:
        assert f.request("GET", "/list/")[0] == 200
        assert f.request("GET", "/list/", token=TOKEN_B + "x")[0] == 401
    finally:
        assert f.stop() == 0


def test_tokens_file_refusals(daemon, tmp_path):
    cases = {"0 " + TOKEN_A: "uid", "5 short": "at least", "abc " + TOKEN_A: "uid",
             "5 sha256:zz": "hex", "# nothing\n": "no token", "5 %s\n6 %s" % (TOKEN_A, TOKEN_A): "twice"}
    for text, why in cases.items():
        path = tmp_path / "tokens"
        path.write_text(text + "\n")
        os.chmod(path, 0o600)
        p = subprocess.run([os.path.join(BUILD, "nsbox-http"), "--http", "127.0.0.1:0", "--socket", daemon.socket,
                            "--tokens", str(path)], capture_output=True, timeout=30)
        assert p.returncode != 0 and why.encode() in p.stderr, (text, p.stderr)
    path.write_text("5 %s\n" % TOKEN_A)
    os.chmod(path, 0o622)
    p = subprocess.run([os.path.join(BUILD, "nsbox-http"), "--http", "127.0.0.1:0", "--socket", daemon.socket,
                        "--tokens", str(path)], capture_output=True, timeout=30)
    assert p.returncode != 0 and b"writable" in p.stderr


# --- bad clients ----------------------------------------------------------------

def test_garbage_huge_and_slow_requests_never_crash_nor_disturb_others(front):
    def raw(data, read=True):
        s = socket.create_connection(("127.0.0.1", front.port), timeout=30)
        try:
            s.sendall(data)
            return s.recv(4096) if read else s
        except OSError:
            return b""
        finally:
            if read:
                s.close()

    slow = [raw(b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"co", read=False)
            for _ in range(5)]
    slow.append(raw(b"GET /hea", read=False))
    garbage = [b"\x00\xff" * 5000, b"GET / HTTP/9.9\r\n\r\n", b"NOT-A-METHOD /x HTTP/1.1\r\n\r\n",
               b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Long: " + b"a" * 200000 + b"\r\n\r\n",
               b"POST /execute HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n",
               b"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
               b"GET /download/%00%2e%2e HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
               b"\r\n\r\n",
               b"GET /list/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"\xff" * 3000 + b"\r\n\r\n"]
    errors = []

    def other_client():
        try:
            for _ in range(5):
                status, _, body = front.request("GET", "/health")
                assert status == 200, body
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=other_client)
    t.start()
    for g in garbage:
        answer = raw(g)
        assert not answer.startswith(b"HTTP/1.1 200"), (g[:60], answer[:200])
    t.join(timeout=300)
    assert not errors, errors
    for s in slow:
        s.close()
    assert front.proc.poll() is None, front.read_log()
    status, _, _ = front.request("GET", "/health")
    assert status == 200


def test_connection_limit_and_idle_timeout(daemon):
    # (--header-timeout, which also closes a kept-alive connection between requests,
    # is put out of the way: this is about --max-connections and --timeout)
    f = Front(daemon, "--max-connections", "3", "--timeout", "10", "--header-timeout", "1000")
    try:
        # three kept-alive connections of a token holder (connections without a valid
        # token never take all of --max-connections: see test_http_bounds.py)
        held = []
        for _ in range(3):
            c = f.connection(timeout=60)
            c.request("GET", "/health", headers={"Authorization": "Bearer " + TOKEN_A})
            r = c.getresponse()
            r.read()
            assert r.status == 200 and not r.will_close
            held.append(c.sock)
        # a fourth is not served while three are held (refused, or left waiting)...
        extra = socket.create_connection(("127.0.0.1", f.port), timeout=60)
        request = (b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                   b"\r\nConnection: close\r\n\r\n")
        try:
            extra.sendall(request)
            extra.settimeout(1.5)
            answer = extra.recv(4096)
        except (socket.timeout, ConnectionError):
            answer = b""
        assert answer == b"", "a connection over --max-connections was served"
        extra.close()
        # ... and one is, once one of them goes
        held.pop().close()
        deadline = time.monotonic() + 30
        while True:
            try:
                if f.request("GET", "/health")[0] == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass  # the closed one not yet noticed
            assert time.monotonic() < deadline, "not served after a held connection went"
            time.sleep(0.1)
        # an idle connection is closed after --timeout
        for s in held:
            assert s.recv(4096) == b""
            s.close()
        assert f.request("GET", "/health")[0] == 200
    finally:
        assert f.stop() == 0


def test_one_token_cannot_hold_every_connection(daemon):
    # Two of token A's requests wait on a command; its third is 429 at once, and
    # token B is still served. Once A's requests end, A is served again.
    f = Front(daemon, "--max-connections", "8", "--max-per-token", "2")
    gate = "/workspace/gate"
    try:
        sb = f.rpc("sandbox.create")["sandbox_id"]
        results = []

        def wait_on_gate():
            results.append(f.request("POST", "/v1/rpc/sandbox.exec",
                                     {"sandbox_id": sb, "timeout_seconds": 120,
                                      "argv": ["sh", "-c", "touch /workspace/started-$$; "
                                               "while [ ! -e %s ]; do sleep 0.05; done" % gate]}))
        threads = [threading.Thread(target=wait_on_gate) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        # (nsboxd's root client reaches every owner's sandbox)
        def started():
            return [e for e in daemon.call("fs.list", sandbox_id=sb, path="/workspace")["entries"]
                    if e["name"].startswith("started-")]
        while len(started()) < 2:
            assert time.monotonic() < deadline, "the two waiting execs did not start"
            time.sleep(0.05)
        status, resp, body = f.request("GET", "/health")
        assert status == 429 and error_kind(body) == "limit_reached", (status, body)
        assert "--max-per-token" in body["error"]["message"] and resp.getheader("Retry-After")
        assert f.request("GET", "/health", token=TOKEN_B)[0] == 200
        daemon.call("sandbox.exec", sandbox_id=sb, argv=["touch", gate])
        for t in threads:
            t.join(timeout=60)
        assert [r[0] for r in results] == [200, 200]
        assert f.request("GET", "/health")[0] == 200
    finally:
        assert f.stop() == 0
