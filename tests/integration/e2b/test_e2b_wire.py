# SPDX-License-Identifier: Apache-2.0
"""E2B's wire as the Python SDK (e2b, e2b-code-interpreter) speaks it, replayed
byte for byte with http.client (the Python SDK cannot be installed here): its
control-plane REST, envd's Connect calls (JSON codec, enveloped streams), its
multipart upload, the polling watcher of the synchronous SDK and the code
interpreter. Then hostile clients: bad envelopes, huge lengths, unknown
methods, wrong keys and tokens, a client that leaves mid-stream."""
import base64
import http.client
import json
import socket
import struct
import time

import pytest

from conftest import ASAN
from e2b_front import KEY_A, KEY_B, UID_A, front  # noqa: F401 (fixture)
from nsbox_client import as_uid

USER = "Basic " + base64.b64encode(b"user:").decode()  # what the SDK sends for its default user


def call(front, method, path, body=None, headers=None, raw=False):
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    c = http.client.HTTPConnection("127.0.0.1", front.port, timeout=120)
    try:
        c.request(method, path, body=body, headers=h)
        resp = c.getresponse()
        data = resp.read()
    finally:
        c.close()
    if not raw and data and resp.getheader("Content-Type", "").startswith("application/json"):
        data = json.loads(data)
    return resp.status, resp, data


def envelope(message, flags=0):
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def envelopes(data):
    out = []
    while data:
        flags, n = struct.unpack(">BI", data[:5])
        out.append((flags, json.loads(data[5:5 + n])))
        data = data[5 + n:]
    return out


class Sbx:
    """A sandbox made as the Python SDK makes one, and its envd headers."""

    def __init__(self, front, key=KEY_A):
        status, _, body = call(front, "POST", "/sandboxes", {
            "templateID": "base", "timeout": 300, "autoPause": False, "secure": True,
            "allow_internet_access": True, "metadata": {"sdk": "python"}, "envVars": {"FROM": "py"}},
            headers={"X-API-KEY": key, "User-Agent": "e2b-python-sdk/2.46.0"})
        assert status == 201, body
        assert tuple(int(x) for x in body["envdVersion"].split(".")) >= (0, 1, 0)
        self.front, self.key, self.id = front, key, body["sandboxID"]
        self.token = body["envdAccessToken"]

    def headers(self, port=49983, **more):
        h = {"E2b-Sandbox-Id": self.id, "E2b-Sandbox-Port": str(port), "X-Access-Token": self.token,
             "Authorization": USER}
        h.update(more)
        return h

    def unary(self, service_method, message):
        return call(self.front, "POST", "/" + service_method, message,
                    headers=self.headers(**{"Connect-Protocol-Version": "1"}))

    def stream(self, service_method, message):
        status, resp, data = call(self.front, "POST", "/" + service_method, envelope(message),
                                  headers=self.headers(**{"Content-Type": "application/connect+json",
                                                          "Connect-Protocol-Version": "1",
                                                          "Keepalive-Ping-Interval": "50"}), raw=True)
        assert status == 200, data
        assert resp.getheader("Content-Type") == "application/connect+json"
        return envelopes(data)

    def kill(self):
        call(self.front, "DELETE", "/sandboxes/" + self.id, headers={"X-API-KEY": self.key})


@pytest.fixture
def sbx(front):
    s = Sbx(front)
    yield s
    s.kill()


def test_python_sdk_control_plane(front, sbx):
    status, _, detail = call(front, "GET", "/sandboxes/" + sbx.id, headers={"X-API-KEY": KEY_A})
    assert status == 200
    for field in ("templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB",
                  "diskSizeMB", "envdVersion", "state"):
        assert field in detail, field
    assert detail["metadata"] == {"sdk": "python"} and detail["state"] == "running"
    status, _, listed = call(front, "GET", "/v2/sandboxes?metadata=sdk%3Dpython&state=running&limit=10",
                             headers={"X-API-KEY": KEY_A})
    assert status == 200 and [s["sandboxID"] for s in listed] == [sbx.id]
    assert call(front, "POST", "/sandboxes/%s/timeout" % sbx.id, {"timeout": 600},
                headers={"X-API-KEY": KEY_A})[0] == 204
    status, _, connected = call(front, "POST", "/sandboxes/%s/connect" % sbx.id, {"timeout": 600},
                                headers={"X-API-KEY": KEY_A})
    assert status == 200 and connected["envdAccessToken"] == sbx.token
    status, _, metrics = call(front, "GET", "/sandboxes/%s/metrics" % sbx.id, headers={"X-API-KEY": KEY_A})
    assert status == 200 and metrics[0]["memTotal"] > 0
    # what nsbox does not serve is a clean 501 the SDK raises
    status, _, body = call(front, "POST", "/v3/templates", {}, headers={"X-API-KEY": KEY_A})
    assert status in (404, 501)
    status, _, body = call(front, "GET", "/templates", headers={"X-API-KEY": KEY_A})
    assert status == 501 and "not implemented" in body["message"]


def test_python_sdk_process_start_and_end(front, sbx):
    events = sbx.stream("process.Process/Start", {
        "process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo $FROM; echo e >&2; exit 4"], "envs": {}},
        "stdin": False})
    assert events[0] == (0, {"event": {"start": {"pid": events[0][1]["event"]["start"]["pid"]}}})
    data = [e["event"]["data"] for f, e in events if f == 0 and "data" in e["event"]]
    assert base64.b64decode("".join(d["stdout"] for d in data if "stdout" in d)) == b"py\n"
    assert base64.b64decode("".join(d["stderr"] for d in data if "stderr" in d)) == b"e\n"
    end = [e["event"]["end"] for f, e in events if f == 0 and "end" in e["event"]]
    assert end == [{"exitCode": 4, "exited": True, "status": "exit status 4"}]
    assert events[-1] == (2, {})


def test_python_sdk_files_multipart_and_filesystem(front, sbx):
    boundary = "e2bpython"
    body = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/workspace/a.txt\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\nfirst\r\n"
            "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/workspace/sub/b.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n\x00\x01\r\n--%s--\r\n") % (boundary, boundary, boundary)
    status, _, written = call(front, "POST", "/files?username=user", body.encode("latin-1"),
                              headers=sbx.headers(**{"Content-Type": "multipart/form-data; boundary=" + boundary}))
    assert status == 200, written
    assert [w["path"] for w in written] == ["/workspace/a.txt", "/workspace/sub/b.bin"]
    status, _, data = call(front, "GET", "/files?path=%2Fworkspace%2Fsub%2Fb.bin&username=user",
                           headers=sbx.headers(), raw=True)
    assert status == 200 and data == b"\x00\x01"
    status, _, listed = sbx.unary("filesystem.Filesystem/ListDir", {"path": "/workspace", "depth": 2})
    assert status == 200
    by_path = {e["path"]: e for e in listed["entries"]}
    assert by_path["/workspace/a.txt"]["type"] == "FILE_TYPE_FILE" and by_path["/workspace/a.txt"]["size"] == "5"
    assert by_path["/workspace/sub"]["type"] == "FILE_TYPE_DIRECTORY"
    assert "/workspace/sub/b.bin" in by_path
    status, _, err = sbx.unary("filesystem.Filesystem/Stat", {"path": "/workspace/missing"})
    assert status == 404 and err["code"] == "not_found"
    status, _, err = sbx.unary("filesystem.Filesystem/MakeDir", {"path": "/workspace/sub"})
    assert status == 409 and err["code"] == "already_exists"


def test_sync_python_sdk_polling_watcher(front, sbx):
    status, _, made = sbx.unary("filesystem.Filesystem/CreateWatcher", {"path": "/workspace", "recursive": False})
    assert status == 200, made
    wid = made["watcherId"]
    call(front, "POST", "/files?path=/workspace/w.txt", b"x",
         headers=sbx.headers(**{"Content-Type": "application/octet-stream"}))
    seen = []
    deadline = time.monotonic() + 20
    while not any(e["name"] == "w.txt" and e["type"] == "EVENT_TYPE_CREATE" for e in seen):
        assert time.monotonic() < deadline, seen
        status, _, got = sbx.unary("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        assert status == 200
        seen += got["events"]
    assert sbx.unary("filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})[0] == 200
    status, _, err = sbx.unary("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert status == 404 and err["code"] == "not_found"


def test_python_code_interpreter_execute(front, sbx):
    h = sbx.headers(port=49999)
    del h["Authorization"]
    h["E2B-Traffic-Access-Token"] = sbx.token
    status, _, body = call(front, "POST", "/execute", {"code": "a = 20\na + 22", "context_id": None,
                                                       "language": None, "env_vars": None}, headers=h, raw=True)
    assert status == 200
    lines = [json.loads(l) for l in body.decode().splitlines()]
    assert {"type": "result", "text": "42", "is_main_result": True} in lines
    assert lines[-1] == {"type": "end_of_execution"}
    status, _, body = call(front, "POST", "/execute", {"code": "1", "context_id": "x", "language": "python"},
                           headers=h)
    assert status == 400
    status, _, body = call(front, "POST", "/execute", {"code": "1", "context_id": "nope"}, headers=h)
    assert status == 404


def interpreter_headers(sbx):
    h = sbx.headers(port=49999)
    del h["Authorization"]
    h["E2B-Traffic-Access-Token"] = sbx.token
    return h


def execute(front, sbx, code, **more):
    status, _, body = call(front, "POST", "/execute", dict({"code": code}, **more), headers=interpreter_headers(sbx),
                           raw=True)
    assert status == 200, body
    return [json.loads(l) for l in body.decode().splitlines()]


def main_result(lines):
    return [l["text"] for l in lines if l["type"] == "result" and l.get("is_main_result")]


def test_execute_streams_output_while_the_cell_runs(front, sbx):
    """A cell's print reaches the client while the cell still runs: here the
    cell waits for a file that the test writes only once it has read that
    line, so a front that answers at the cell's end sees the wait time out."""
    code = ("import os, sys, time\nprint('first')\nprint('err-first', file=sys.stderr)\n"
            "for _ in range(600):\n    if os.path.exists('/workspace/go'):\n        break\n    time.sleep(0.05)\n"
            "print('saw-go' if os.path.exists('/workspace/go') else 'no-go')\n'done'")
    body = json.dumps({"code": code, "context_id": None, "language": None, "env_vars": None}).encode()
    c = http.client.HTTPConnection("127.0.0.1", front.port, timeout=120)
    try:
        c.request("POST", "/execute", body=body, headers=dict(interpreter_headers(sbx),
                                                               **{"Content-Type": "application/json"}))
        resp = c.getresponse()
        assert resp.status == 200
        seen = []
        while not {"first\n", "err-first\n"} <= {l.get("text") for l in seen}:
            line = resp.readline()
            assert line, seen
            seen.append(json.loads(line))
        assert {"type": "end_of_execution"} not in seen
        status, _, _ = call(front, "POST", "/files?path=/workspace/go", b"x",
                            headers=sbx.headers(**{"Content-Type": "application/octet-stream"}))
        assert status == 200
        seen += [json.loads(l) for l in resp.read().decode().splitlines()]
    finally:
        c.close()
    assert [l["text"] for l in seen if l["type"] == "stdout"] == ["first\n", "saw-go\n"]
    assert [l["text"] for l in seen if l["type"] == "stderr"] == ["err-first\n"]
    assert main_result(seen) == ["'done'"]
    assert seen[-1] == {"type": "end_of_execution"}
    # an error's traceback is the error's, not a line of stderr
    lines = execute(front, sbx, "import sys\nprint('before', file=sys.stderr)\n1 / 0")
    assert [l["text"] for l in lines if l["type"] == "stderr"] == ["before\n"]
    error = [l for l in lines if l["type"] == "error"]
    assert [(e["name"], e["value"]) for e in error] == [("ZeroDivisionError", "division by zero")]
    assert "Traceback" in error[0]["traceback"] and "__nsbox" not in error[0]["traceback"]


def test_a_figure_shown_mid_cell_is_a_result_before_the_cell_ends(front, sbx):
    code = ("import os, time\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
            "for _ in range(600):\n    if os.path.exists('/workspace/go-figure'):\n        break\n    time.sleep(0.05)\n"
            "print('saw-go' if os.path.exists('/workspace/go-figure') else 'no-go')")
    c = http.client.HTTPConnection("127.0.0.1", front.port, timeout=120)
    try:
        c.request("POST", "/execute", body=json.dumps({"code": code}).encode(),
                  headers=dict(interpreter_headers(sbx), **{"Content-Type": "application/json"}))
        resp = c.getresponse()
        seen = []
        while not seen or seen[-1]["type"] != "result":
            line = resp.readline()
            assert line, seen
            seen.append(json.loads(line))
        assert base64.b64decode(seen[-1]["png"]).startswith(b"\x89PNG") and seen[-1]["is_main_result"] is False
        call(front, "POST", "/files?path=/workspace/go-figure", b"x",
             headers=sbx.headers(**{"Content-Type": "application/octet-stream"}))
        seen += [json.loads(l) for l in resp.read().decode().splitlines()]
    finally:
        c.close()
    assert [l["text"] for l in seen if l["type"] == "stdout"] == ["saw-go\n"]
    assert len([l for l in seen if l["type"] == "result"]) == 1  # not again at the end


def test_a_client_leaving_mid_cell_interrupts_it_and_the_variables_stay(front, sbx):
    s = socket.create_connection(("127.0.0.1", front.port), timeout=60)
    body = json.dumps({"code": "import time\nkept = 7\nprint('looping')\nwhile True:\n    time.sleep(0.05)"})
    head = "".join("%s: %s\r\n" % kv for kv in dict(interpreter_headers(sbx), **{
        "Content-Type": "application/json", "Content-Length": str(len(body))}).items())
    s.sendall(("POST /execute HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n%s" % (head, body)).encode())
    got = b""
    while b"looping" not in got:
        more = s.recv(4096)
        assert more, got
        got += more
    s.close()  # gone while the cell loops
    # the next cell runs (the loop was interrupted), with the variables made before
    assert main_result(execute(front, sbx, "kept")) == ["7"]


def test_env_vars_apply_to_their_cell_only(front, sbx):
    code = ("import os, subprocess\n(os.environ.get('CELL_VAR'), "
            "subprocess.run(['sh', '-c', 'echo $CELL_VAR'], capture_output=True, text=True).stdout)")
    assert main_result(execute(front, sbx, code, env_vars={"CELL_VAR": "set"})) == ["('set', 'set\\n')"]
    assert main_result(execute(front, sbx, code)) == ["(None, '\\n')"]
    for bad in ({"A": 1}, "A=1", {"A=B": "x"}, {"": "x"}):
        status, _, body = call(front, "POST", "/execute", {"code": "1", "env_vars": bad},
                               headers=interpreter_headers(sbx))
        assert status == 400, (bad, body)
    assert main_result(execute(front, sbx, "1 + 1")) == ["2"]  # and the interpreter serves on


def test_contexts_have_their_own_variables_and_cwd_and_are_capped(front, sbx):
    h = interpreter_headers(sbx)
    status, _, ctx = call(front, "POST", "/contexts", {"cwd": "/tmp", "language": "python"}, headers=h)
    assert status == 200 and ctx["cwd"] == "/tmp"
    execute(front, sbx, "import os\nv = 1\nos.chdir('/tmp')", context_id=ctx["id"])
    assert main_result(execute(front, sbx, "import os\n('v' in globals(), os.getcwd())")) == \
        ["(False, '/workspace')"]
    assert main_result(execute(front, sbx, "v, os.getcwd()", context_id=ctx["id"])) == ["(1, '/tmp')"]
    execute(front, sbx, "os.chdir('/')", context_id=ctx["id"])
    assert main_result(execute(front, sbx, "os.getcwd()", context_id=ctx["id"])) == ["'/'"]
    assert main_result(execute(front, sbx, "os.getcwd()")) == ["'/workspace'"]
    # restart: its variables go, its cwd is the one it was made with
    assert call(front, "POST", "/contexts/%s/restart" % ctx["id"], headers=h)[0] == 204
    assert main_result(execute(front, sbx, "import os\n('v' in globals(), os.getcwd())", context_id=ctx["id"])) == \
        ["(False, '/tmp')"]
    # a cwd that does not exist makes no context
    status, _, body = call(front, "POST", "/contexts", {"cwd": "/nonexistent"}, headers=h)
    assert status == 400 and "/nonexistent" in json.dumps(body)
    # at most 32 contexts per sandbox, then a clear 429
    made = [ctx["id"]]
    while True:
        status, _, body = call(front, "POST", "/contexts", {}, headers=h)
        if status != 200:
            break
        made.append(body["id"])
        assert len(made) <= 32
    assert status == 429 and "32 code contexts" in json.dumps(body)
    assert len(made) == 32
    listed = [c["id"] for c in call(front, "GET", "/contexts", headers=h)[2]]
    assert set(made) <= set(listed) and "default" in listed
    assert call(front, "DELETE", "/contexts/%s" % made[0], headers=h)[0] == 204
    assert made[0] not in [c["id"] for c in call(front, "GET", "/contexts", headers=h)[2]]
    assert call(front, "POST", "/execute", {"code": "1", "context_id": made[0]}, headers=h)[0] == 404
    assert call(front, "POST", "/contexts", {}, headers=h)[0] == 200  # room again


# --- hostile clients ---------------------------------------------------------------------


def raw_stream(front, sbx, data, content_type="application/connect+json", path="/process.Process/Start"):
    status, resp, body = call(front, "POST", path, data, headers=sbx.headers(**{"Content-Type": content_type}),
                              raw=True)
    return status, body


def test_bad_envelopes_and_lengths_are_refused(front, sbx):
    huge = struct.pack(">BI", 0, 0xFFFFFFFF) + b"{}"
    for data in [b"", b"\x00\x00", huge, struct.pack(">BI", 0, 3) + b"{}", struct.pack(">BI", 1, 2) + b"{}",
                 struct.pack(">BI", 0, 5) + b"nope!", struct.pack(">BI", 0, 2) + b"[]",
                 envelope({"process": {"cmd": ""}}), envelope({"process": {"cmd": "x", "args": [1]}}),
                 envelope({"process": {"cmd": "x", "envs": {"A": 1}}}), envelope({"process": "x"})]:
        status, body = raw_stream(front, sbx, data)
        assert status == 200, body
        (flags, end), = envelopes(body)
        assert flags == 2 and end["error"]["code"] == "invalid_argument", (data, end)
    # a Content-Length past the bound is 413, never read
    c = http.client.HTTPConnection("127.0.0.1", front.port, timeout=30)
    c.putrequest("POST", "/process.Process/Start")
    for k, v in sbx.headers(**{"Content-Type": "application/connect+json", "Content-Length": str(1 << 40)}).items():
        c.putheader(k, v)
    c.endheaders()
    assert c.getresponse().status == 413
    c.close()


def test_unknown_methods_and_paths(front, sbx):
    status, _, err = sbx.unary("process.Process/Nope", {})
    assert status == 501 and err["code"] == "unimplemented"
    status, _, err = sbx.unary("filesystem.Filesystem/Nope", {})
    assert status == 501 and err["code"] == "unimplemented"
    status, _, err = sbx.unary("process.Process/StreamInput", {})
    assert status == 501
    status, _, err = sbx.unary("other.Service/Call", {})
    assert status == 501
    status, _, err = sbx.unary("process.Process/SendSignal", {"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"})
    assert status == 404
    status, _, err = call(front, "GET", "/", headers=sbx.headers(port=8080))
    assert status == 502
    status, _, err = call(front, "GET", "/health", headers=dict(sbx.headers(), **{"E2b-Sandbox-Id": "../x"}))
    assert status in (400, 401)
    status, _, err = sbx.unary("process.Process/List", "not an object")
    assert status == 400 and err["code"] == "invalid_argument"


def test_keys_and_tokens(front, sbx):
    assert call(front, "GET", "/v2/sandboxes")[0] == 401
    assert call(front, "GET", "/v2/sandboxes", headers={"X-API-KEY": "e2b_" + "0" * 40})[0] == 401
    status, _, body = call(front, "GET", "/sandboxes/" + sbx.id, headers={"X-API-KEY": KEY_B})
    assert status == 404
    assert call(front, "DELETE", "/sandboxes/" + sbx.id, headers={"X-API-KEY": KEY_B})[0] == 404
    # envd wants this sandbox's token: none, a wrong one, another sandbox's, or the API key are refused
    h = sbx.headers()
    for token in [None, "0" * 64, KEY_A]:
        bad = dict(h)
        if token is None:
            del bad["X-Access-Token"]
        else:
            bad["X-Access-Token"] = token
        assert call(front, "GET", "/health", headers=bad)[0] == 401
    other = Sbx(front)
    try:
        assert call(front, "GET", "/health", headers=dict(other.headers(), **{"X-Access-Token": sbx.token}))[0] == 401
        assert call(front, "GET", "/health", headers=other.headers())[0] == 204
    finally:
        other.kill()
    # B's token for its own sandbox does not open A's
    theirs = Sbx(front, key=KEY_B)
    try:
        assert call(front, "GET", "/health", headers=dict(theirs.headers(), **{"E2b-Sandbox-Id": sbx.id}))[0] == 401
    finally:
        theirs.kill()


def test_a_client_leaving_mid_stream_leaves_the_process_running(front, sbx):
    s = socket.create_connection(("127.0.0.1", front.port), timeout=30)
    body = envelope({"process": {"cmd": "/bin/bash", "args": ["-c", "sleep 1; echo done > /workspace/survived"]}})
    head = "".join("%s: %s\r\n" % kv for kv in sbx.headers(**{"Content-Type": "application/connect+json",
                                                               "Content-Length": str(len(body))}).items())
    s.sendall(("POST /process.Process/Start HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % head).encode() + body)
    got = b""
    while b"start" not in got:
        got += s.recv(4096)
    s.close()  # gone before the command ends
    deadline = time.monotonic() + 30
    while True:
        status, _, data = call(front, "GET", "/files?path=/workspace/survived", headers=sbx.headers(), raw=True)
        if status == 200:
            break
        assert time.monotonic() < deadline, "the command died with its stream"
        time.sleep(0.05)
    assert data == b"done\n"
    # and nsbox-http serves on
    assert call(front, "GET", "/health", headers=sbx.headers())[0] == 204


def requests_of(daemon, method):
    text = daemon.call("server.metrics")["text"]
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith('nsbox_requests_total{method="%s"' % method))


def test_a_quiet_command_stream_waits_in_nsboxd_instead_of_polling_it(daemon, front, sbx):
    """A command's stream asks nsboxd for its output with exec.output's wait_ms,
    answered when output comes or the command ends: a command quiet for a second
    costs a few calls, not a poll every millisecond (the front's share of every
    commands.run was the wait for the next poll)."""
    before = requests_of(daemon, "exec.output")
    events = sbx.stream("process.Process/Start", {
        "process": {"cmd": "/bin/sh", "args": ["-c", "sleep 1; echo late; sleep 1; exit 3"]}})
    calls = requests_of(daemon, "exec.output") - before
    out = b"".join(base64.b64decode(e["event"]["data"]["stdout"]) for f, e in events
                   if f == 0 and "data" in e["event"])
    assert out == b"late\n"
    assert [e["event"]["end"] for f, e in events if f == 0 and "end" in e["event"]] == [
        {"exitCode": 3, "exited": True, "status": "exit status 3"}]
    assert calls <= 6, calls


def test_commands_reuse_their_owners_nsboxd_connection(daemon, front, sbx):
    """One command after another reuse an idle nsboxd connection of their owner's
    (connect and auth.act_as were a tenth of the front's time per command); one
    whose client left mid-stream is not reused, and nsbox-http serves on."""
    before = requests_of(daemon, "auth.act_as")
    for i in range(10):
        events = sbx.stream("process.Process/Start", {"process": {"cmd": "/bin/sh", "args": ["-c", "exit %d" % i]}})
        assert [e["event"]["end"]["exitCode"] for f, e in events if f == 0 and "end" in e["event"]] == [i]
    assert requests_of(daemon, "auth.act_as") - before <= 5
    s = socket.create_connection(("127.0.0.1", front.port), timeout=30)
    body = envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 600"]}})
    head = "".join("%s: %s\r\n" % kv for kv in sbx.headers(**{"Content-Type": "application/connect+json",
                                                               "Content-Length": str(len(body))}).items())
    s.sendall(("POST /process.Process/Start HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % head).encode() + body)
    got = b""
    while b"start" not in got:
        got += s.recv(4096)
    s.close()
    for i in range(3):
        events = sbx.stream("process.Process/Start", {"process": {"cmd": "/bin/sh", "args": ["-c", "echo %d" % i]}})
        out = b"".join(base64.b64decode(e["event"]["data"]["stdout"]) for f, e in events
                       if f == 0 and "data" in e["event"])
        assert out == b"%d\n" % i


def test_watch_streams_left_by_their_clients_are_released(front, sbx):
    """More WatchDir streams than a sandbox may hold at once, each left by its
    client after its start: every one is released, so a new watch still opens."""
    body = envelope({"path": "/workspace", "recursive": False})
    head = "".join("%s: %s\r\n" % kv for kv in sbx.headers(**{"Content-Type": "application/connect+json",
                                                               "Content-Length": str(len(body))}).items())
    for _ in range(24):
        s = socket.create_connection(("127.0.0.1", front.port), timeout=30)
        s.sendall(("POST /filesystem.Filesystem/WatchDir HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % head).encode() + body)
        got = b""
        while b"start" not in got:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        s.close()
    deadline = time.monotonic() + 30
    while True:
        status, _, made = sbx.unary("filesystem.Filesystem/CreateWatcher", {"path": "/workspace"})
        if status == 200:
            break
        assert made["code"] == "resource_exhausted", made
        assert time.monotonic() < deadline, "watches of departed clients were never released"
        time.sleep(0.05)
    assert sbx.unary("filesystem.Filesystem/RemoveWatcher", {"watcherId": made["watcherId"]})[0] == 200


def test_basic_auth_names_the_os_user(front, sbx):
    """envd's Authorization: Basic USER: picks the user: root is the sandbox's root,
    any other the sandbox user."""
    def uid_as(user):
        h = sbx.headers(**{"Content-Type": "application/connect+json",
                           "Authorization": "Basic " + base64.b64encode(user + b":").decode()})
        status, _, body = call(front, "POST", "/process.Process/Start",
                               envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "id -u"]}}), headers=h, raw=True)
        assert status == 200
        out = [e["event"]["data"]["stdout"] for f, e in envelopes(body) if f == 0 and "data" in e["event"]]
        return base64.b64decode("".join(out)).decode().strip()
    assert uid_as(b"root") == "0"
    assert uid_as(b"user") == "1000"
    assert uid_as(b"\xff" * 300) == "1000"


def test_large_output_streams_whole_and_once(front, sbx):
    events = sbx.stream("process.Process/Start", {
        "process": {"cmd": "/bin/sh", "args": ["-c", "head -c 3000000 /dev/zero | tr -c x x; exit 7"]}})
    out = b"".join(base64.b64decode(e["event"]["data"]["stdout"]) for f, e in events
                   if f == 0 and "data" in e["event"])
    assert out == b"x" * 3000000
    assert [e["event"]["end"]["exitCode"] for f, e in events if f == 0 and "end" in e["event"]] == [7]


def test_timeout_removes_or_with_auto_pause_pauses(front):
    """E2B's timeout ends an unused sandbox: removed (404), or paused with autoPause."""
    made = {}
    for auto_pause in (False, True):
        status, _, body = call(front, "POST", "/sandboxes", {"templateID": "base", "timeout": 1, "autoPause": auto_pause},
                               headers={"X-API-KEY": KEY_A})
        assert status == 201, body
        made[auto_pause] = body["sandboxID"]
    deadline = time.monotonic() + 60
    while True:
        gone = call(front, "GET", "/sandboxes/" + made[False], headers={"X-API-KEY": KEY_A})[0] == 404
        status, _, detail = call(front, "GET", "/sandboxes/" + made[True], headers={"X-API-KEY": KEY_A})
        if gone and status == 200 and detail["state"] == "paused":
            break
        assert time.monotonic() < deadline, (gone, status, detail)
        time.sleep(0.1)
    call(front, "DELETE", "/sandboxes/" + made[True], headers={"X-API-KEY": KEY_A})


# --- bounds: what one client may make nsbox-http hold ---------------------------------------


def start_left_running(front, sbx, process, tag=None):
    """Start a command, read its start event, and leave its stream open: the
    socket is returned (the command runs on whether or not it is closed)."""
    message = {"process": process}
    if tag is not None:
        message["tag"] = tag
    body = envelope(message)
    head = "".join("%s: %s\r\n" % kv for kv in sbx.headers(**{"Content-Type": "application/connect+json",
                                                               "Content-Length": str(len(body))}).items())
    s = socket.create_connection(("127.0.0.1", front.port), timeout=30)
    s.sendall(("POST /process.Process/Start HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % head).encode() + body)
    got = b""
    while b"start" not in got:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    return s


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_tags_are_short_names_and_what_a_command_leaves_behind_is_bounded(front, sbx):
    """A tag past 256 bytes is refused with a clear error (each Start's tag and
    config stayed in nsbox-http, up to a 4 MiB message each); a 256-byte tag
    names its command; a long config is kept as its cmd alone; nsbox-http's
    memory stays bounded through 40 Starts that each carry 4 MB."""
    status, body = raw_stream(front, sbx, envelope({"process": {"cmd": "true"}, "tag": "t" * 257}))
    (flags, end), *rest = envelopes(body)
    assert flags == 2 and end["error"]["code"] == "invalid_argument" and "256" in end["error"]["message"], end
    tag = "n" * 256
    s = start_left_running(front, sbx, {"cmd": "/bin/sleep", "args": ["600"] + ["0" * 1000] * 1000}, tag=tag)
    try:
        status, _, listed = sbx.unary("process.Process/List", {})
        assert status == 200
        mine = [p for p in listed["processes"] if p.get("tag") == tag]
        assert len(mine) == 1 and mine[0]["config"] == {"cmd": "/bin/sleep", "args": []}, mine
        assert sbx.unary("process.Process/SendSignal", {"process": {"tag": tag}, "signal": "SIGNAL_SIGKILL"})[0] == 200
    finally:
        s.close()
    before = rss_kib(front.proc.pid)
    for i in range(40):
        raw_stream(front, sbx, envelope({"process": {"cmd": "true"}, "tag": "%d" % i + "x" * 4000000}))
        raw_stream(front, sbx, envelope({"process": {"cmd": "true", "envs": {"BIG": "y" * 4000000}}}))
    after = rss_kib(front.proc.pid)
    print("nsbox-http VmRSS: %d KiB before, %d KiB after 80 Starts of 4 MB each" % (before, after))
    # ASan's allocator keeps freed buffers in quarantine (256 MB by default)
    assert after - before < (64 + 256 if ASAN else 64) * 1024, (before, after)


def churn(n, work, workers=4):
    """work(i) for i in range(n), on a few threads at once."""
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for result in pool.map(work, range(n)):
            assert result, result


def test_another_keys_contexts_never_evict_yours(front, sbx):
    """B makes and removes more code contexts in its own sandbox than nsbox-http
    held for everyone together: A's context still runs (the table was global,
    and B's churn pushed A's context out: 404)."""
    h = interpreter_headers(sbx)
    status, _, ctx = call(front, "POST", "/contexts", {}, headers=h)
    assert status == 200
    execute(front, sbx, "kept = 'still here'", context_id=ctx["id"])
    theirs = Sbx(front, key=KEY_B)
    try:
        th = interpreter_headers(theirs)

        def make_and_remove(i):
            status, _, made = call(front, "POST", "/contexts", {}, headers=th)
            assert status == 200, made
            return call(front, "DELETE", "/contexts/%s" % made["id"], headers=th)[0] == 204
        churn(1100, make_and_remove)
    finally:
        theirs.kill()
    assert main_result(execute(front, sbx, "kept", context_id=ctx["id"])) == ["'still here'"]


def test_another_keys_commands_never_evict_yours(front, sbx):
    """B starts more commands in its own sandbox than nsbox-http remembered for
    everyone together: A's command, by pid and by tag, still answers
    SendInput, Connect, List and SendSignal."""
    s = start_left_running(front, sbx, {"cmd": "/bin/cat"}, tag="kept")
    s.close()
    status, _, listed = sbx.unary("process.Process/List", {})
    pid = next(p["pid"] for p in listed["processes"] if p.get("tag") == "kept")
    theirs = Sbx(front, key=KEY_B)
    try:
        def start_true(i):
            status, body = raw_stream(front, theirs, envelope({"process": {"cmd": "true"}}))
            return status == 200 and envelopes(body)[-1] == (2, {})
        churn(4200, start_true)
    finally:
        theirs.kill()
    status, _, err = sbx.unary("process.Process/SendInput", {"process": {"pid": pid},
                                                             "input": {"stdin": base64.b64encode(b"hi\n").decode()}})
    assert status == 200, err
    status, _, listed = sbx.unary("process.Process/List", {})
    assert [p["pid"] for p in listed["processes"] if p.get("tag") == "kept"] == [pid]
    assert sbx.unary("process.Process/CloseStdin", {"process": {"tag": "kept"}})[0] == 200
    events = sbx.stream("process.Process/Connect", {"process": {"tag": "kept"}})
    assert [e["event"]["end"]["exitCode"] for f, e in events if f == 0 and "end" in e["event"]] == [0], events


def test_a_watch_stream_lives_on_through_bytes_its_client_sends(front, sbx):
    """Bytes a client sends on its WatchDir connection (a pipelined request) are
    no leaving: the stream still brings the next event (the front watched the
    socket for any byte and ended the stream as "client left")."""
    body = envelope({"path": "/workspace", "recursive": False})
    head = "".join("%s: %s\r\n" % kv for kv in sbx.headers(**{"Content-Type": "application/connect+json",
                                                               "Content-Length": str(len(body))}).items())
    s = socket.create_connection(("127.0.0.1", front.port), timeout=30)
    try:
        s.sendall(("POST /filesystem.Filesystem/WatchDir HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % head).encode()
                  + body)
        got = b""
        while b"start" not in got:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert call(front, "POST", "/files?path=/workspace/after-bytes.txt", b"x",
                    headers=sbx.headers(**{"Content-Type": "application/octet-stream"}))[0] == 200
        while b"after-bytes.txt" not in got:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
    finally:
        s.close()


def test_concurrent_create_watchers_never_pass_the_owners_bound(front):
    """Many CreateWatcher calls of one owner at once (more than its 64, over
    sandboxes that hold 16 each): no more than 64 are made (the count was taken
    under the lock and the watcher listed after it)."""
    import concurrent.futures
    boxes = [Sbx(front, key=KEY_B) for _ in range(6)]
    made = []
    try:
        def create(i):
            return boxes[i % len(boxes)], boxes[i % len(boxes)].unary(
                "filesystem.Filesystem/CreateWatcher", {"path": "/workspace"})
        # 56 at a time: nsbox-http takes 64 connections of one address (a 65th is cut)
        with concurrent.futures.ThreadPoolExecutor(56) as pool:
            answers = list(pool.map(create, range(96)))
        for box, (status, _, body) in answers:
            if status == 200:
                made.append((box, body["watcherId"]))
            else:
                assert body["code"] in ("resource_exhausted", "unavailable"), body
        assert len(made) <= 64, len(made)
    finally:
        for box, wid in made:
            box.unary("filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
        for box in boxes:
            box.kill()


def test_a_fork_that_makes_no_sandbox_leaves_no_snapshot(front):
    """A fork whose creates all fail (here: its owner is at its sandbox limit)
    removes the snapshot it made for them (it stayed, counted against the
    owner's snapshots, until nsboxd restarted)."""
    boxes = []
    try:
        while True:
            status, _, body = call(front, "POST", "/sandboxes", {"templateID": "base", "timeout": 300},
                                   headers={"X-API-KEY": KEY_B})
            if status != 201:
                break
            boxes.append(body["sandboxID"])
            assert len(boxes) <= 64
        assert status == 429, body
        status, _, forks = call(front, "POST", "/sandboxes/%s/fork" % boxes[0], {"count": 2},
                                headers={"X-API-KEY": KEY_B})
        assert status == 200 and len(forks) == 2 and all("error" in f for f in forks), forks
        status, _, snaps = call(front, "GET", "/snapshots?sandboxID=" + boxes[0], headers={"X-API-KEY": KEY_B})
        assert status == 200 and snaps == [], snaps
    finally:
        for b in boxes:
            call(front, "DELETE", "/sandboxes/" + b, headers={"X-API-KEY": KEY_B})


def test_characters_outside_the_bmp_reach_a_context_whole(front, sbx):
    """An emoji in a cell of a context of its own, printed and as the result:
    UTF-8 both ways, never surrogate halves."""
    status, _, ctx = call(front, "POST", "/contexts", {}, headers=interpreter_headers(sbx))
    assert status == 200
    lines = execute(front, sbx, "s = '\U0001F600 ok'\nprint(s)\ns", context_id=ctx["id"])
    assert [l for l in lines if l["type"] == "error"] == [], lines
    assert "".join(l["text"] for l in lines if l["type"] == "stdout") == "\U0001F600 ok\n"
    assert main_result(lines) == ["'\U0001F600 ok'"]


def test_volume_content_refuses_hostile_requests(daemon, front):
    """/volumecontent/{id}/...: without the volume's token, with another
    volume's, with bad parameters, a body past the bound or a write past the
    volume's size, each answered as E2B's volume API answers (a JSON
    {code, message}), never with another owner's files."""
    key = {"X-API-KEY": KEY_A}
    names = ["wire-vc-a", "wire-vc-b"]
    tokens = []
    for name in names:
        status, _, body = call(front, "POST", "/volumes", {"name": name}, headers=key)
        assert status == 201 and len(body["token"]) == 64, body
        tokens.append(body["token"])
    bearer = {"Authorization": "Bearer " + tokens[0]}
    try:
        url = "/volumecontent/wire-vc-a"
        status, _, body = call(front, "PUT", url + "/file?path=/f.txt", b"content", headers=bearer)
        assert status == 201 and body["size"] == 7 and body["type"] == "file", body
        for headers in [{}, {"Authorization": "Bearer " + tokens[1]}, {"Authorization": "Bearer " + "0" * 64},
                        {"Authorization": "Bearer " + tokens[0] + "x"}]:
            status, _, body = call(front, "GET", url + "/file?path=/f.txt", headers=headers)
            assert status == 401, (headers, status, body)
        # The other key's own volume of the same name is empty: its key reaches only it.
        status, _, body = call(front, "POST", "/volumes", {"name": "wire-vc-a"}, headers={"X-API-KEY": KEY_B})
        assert status == 201, body
        try:
            status, _, body = call(front, "GET", url + "/file?path=/f.txt",
                                   headers={"Authorization": "Bearer " + body["token"]})
            assert status == 404 and body["code"] == "not_found", body
        finally:
            call(front, "DELETE", "/volumes/wire-vc-a", headers={"X-API-KEY": KEY_B})
        # The owner's key serves too.
        status, _, data = call(front, "GET", url + "/file?path=f.txt", headers=key, raw=True)
        assert status == 200 and data == b"content"
        for method, path, body, want in [
                ("GET", url + "/file", None, 400),
                ("GET", url + "/file?path=", None, 400),
                ("GET", url + "/dir?path=/&depth=x", None, 400),
                ("GET", url + "/dir?path=/&depth=33", None, 400),
                ("GET", url + "/nothing?path=/", None, 404),
                ("POST", url + "/file?path=/f.txt", b"", 405),
                ("PATCH", url + "/path?path=/f.txt", b"not json", 400),
                ("PATCH", url + "/path?path=/f.txt", b'{"mode": "rwx"}', 400),
                ("PATCH", url + "/path?path=/f.txt", b'{"mode": 4095}', 400),
                ("PUT", url + "/file?path=/g.txt&uid=0", b"x", 400),
                ("PUT", url + "/file?path=/g.txt&mode=-1", b"x", 400),
                ("GET", url + "/file?path=/../../etc/hostname", None, 400),
                ("DELETE", url + "/path?path=/", None, 400),
                ("POST", url + "/dir?path=/f.txt", None, 409),
                ("GET", url + "/path?path=/missing", None, 404)]:
            status, _, answer = call(front, method, path, body, headers=bearer)
            assert status == want, (method, path, status, answer)
            assert isinstance(answer, dict) and isinstance(answer.get("code"), str) and answer["message"], answer
        # Past nsbox-http's body bound: 413 before nsboxd sees it.
        with socket.create_connection(("127.0.0.1", front.port), timeout=60) as s:
            s.sendall(("PUT %s/file?path=/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                       "Content-Length: %d\r\n\r\n" % (url, tokens[0], 11 << 20)).encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 413")
        # A volume too small for the file (16 MiB, made over nsboxd: E2B's are 1 GiB): out of
        # storage, not a rate limit, and nothing left behind.
        out = as_uid(UID_A, daemon.socket, [["volume.create", {"name": "wire-vc-small", "size": "16M"}]])
        assert out[0]["result"]["name"] == "wire-vc-small", out
        names.append("wire-vc-small")
        small = "/volumecontent/wire-vc-small/file?path=/fill"
        status, _, answer = call(front, "PUT", small + "1", b"y" * (9 << 20), headers=key)
        assert status == 201, answer
        status, _, answer = call(front, "PUT", small + "2", b"y" * (9 << 20), headers=key)
        assert status == 507 and answer["code"] == "limit_reached", (status, answer)
        assert "no space left on volume wire-vc-small (its size is 16 MiB)" in answer["message"], answer
        status, _, listing = call(front, "GET", "/volumecontent/wire-vc-small/dir?path=/", headers=key)
        assert sorted(e["path"] for e in listing) == ["/fill1", "/lost+found"], listing
    finally:
        for name in names:
            call(front, "DELETE", "/volumes/" + name, headers=key)
