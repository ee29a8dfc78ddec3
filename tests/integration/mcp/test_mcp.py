# SPDX-License-Identifier: Apache-2.0
"""nsbox mcp as agent hosts use it: the official MCP SDK client
(@modelcontextprotocol/sdk, Client + StdioClientTransport) spawns
`nsbox --socket SOCK mcp` against this module's own nsboxd and runs one named
scenario of tests/mcp/client.mjs per test; a few protocol edges are driven
with raw JSON lines."""
import base64
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import BUILD, REPO, Daemon

TOOLS = {
    # name: (required, optional); every sandbox tool takes session_id or sandbox_id (test_mcp_family.py)
    "create_sandbox": ([], ["session_id", "memory_mb", "timeout", "from_snapshot", "mounts", "image", "network"]),
    "list_sandboxes": ([], ["include_inactive"]),
    "remove_sandbox": ([], ["session_id", "sandbox_id", "force"]),
    "pause_sandbox": ([], ["session_id", "sandbox_id", "force"]),
    "resume_sandbox": ([], ["session_id", "sandbox_id"]),
    "snapshot_sandbox": ([], ["session_id", "sandbox_id", "name"]),
    "list_snapshots": ([], []),
    "remove_snapshot": (["snapshot_id"], []),
    "run_code": (["code"], ["session_id", "sandbox_id", "network", "stateful", "dependencies", "timeout"]),
    "execute_python_code": (["code"], ["session_id", "sandbox_id", "timeout"]),
    "install_package": (["package"], ["session_id", "sandbox_id"]),
    "python_execute": (["code"], ["session_id", "sandbox_id", "dependencies", "timeout", "network"]),
    "shell_execute": (["command"], ["session_id", "sandbox_id", "timeout", "network"]),
    "sandbox_fs_list": (["path"], ["session_id", "sandbox_id", "network"]),
    "sandbox_fs_read": (["path"], ["session_id", "sandbox_id", "network", "encoding", "offset", "max_bytes"]),
    "sandbox_fs_write": (["path", "content"], ["session_id", "sandbox_id", "network", "encoding"]),
    "expose_port": (["port"], ["session_id", "sandbox_id"]),
    "shell_start": (["command"], ["session_id", "sandbox_id", "cwd", "network"]),
    "shell_output": (["job_id"], ["session_id", "sandbox_id", "since"]),
    "shell_kill": (["job_id"], ["session_id", "sandbox_id", "signal"]),
    "shell_session_run": (["command"], ["session_id", "sandbox_id", "network", "session_name", "blocking", "cwd",
                                        "timeout"]),
    "shell_session_check": ([], ["session_id", "sandbox_id", "session_name", "since"]),
    "shell_session_list": ([], ["session_id", "sandbox_id"]),
    "shell_session_close": ([], ["session_id", "sandbox_id", "session_name"]),
    "desktop_start": ([], ["session_id", "sandbox_id", "width", "height"]),
    "desktop_screenshot": ([], ["session_id", "sandbox_id"]),
    "desktop_click": ([], ["session_id", "sandbox_id", "x", "y", "button", "double"]),
    "desktop_type": (["text"], ["session_id", "sandbox_id"]),
    "desktop_key": (["keys"], ["session_id", "sandbox_id"]),
    "desktop_move": (["x", "y"], ["session_id", "sandbox_id"]),
    "desktop_scroll": (["direction"], ["session_id", "sandbox_id", "amount", "x", "y"]),
    "browser_screenshot": ([], ["session_id", "sandbox_id", "url", "full_page", "width", "height", "timeout"]),
    "browser_navigate": (["url"], ["session_id", "sandbox_id", "timeout"]),
}


@pytest.fixture(scope="module")
def sdk_dir():
    """The SDK, installed by `make mcp-sdk` into the cache dir (once)."""
    node = shutil.which("node") or "/usr/bin/node"
    assert os.path.exists(node), "node is missing (make deps-test installs nodejs and npm)"
    subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "mcp-sdk"], check=True, timeout=600)
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "mcp-sdk-dir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert os.path.isdir(os.path.join(out, "node_modules", "@modelcontextprotocol", "sdk")), out
    return out


def scenario(daemon, sdk_dir, name, timeout=240):
    env = dict(os.environ, MCP_SDK_DIR=sdk_dir, NSBOX_BIN=os.path.join(BUILD, "nsbox"),
               NSBOX_SOCKET=daemon.socket)
    p = subprocess.run(["node", os.path.join(REPO, "tests", "mcp", "client.mjs"), name], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, "client.mjs %s failed (%d):\n%s\n%s" % (name, p.returncode, p.stdout, p.stderr)
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert "exception" not in report, report["exception"] + "\nnsbox mcp stderr:\n" + report["server_stderr"]
    # Closing stdin ends the server by itself (the SDK would SIGTERM it after 2 s).
    assert report["server_exit"] == {"code": 0, "signal": None}, report["server_stderr"]
    return report


# --- through the official SDK client ---------------------------------------------------


def test_sdk_client_initializes_with_the_latest_protocol(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "initialize")
    assert r["protocolVersion"] == "2025-11-25"
    assert r["serverVersion"]["name"] == "nsbox"
    assert "tools" in r["capabilities"]
    assert "session_id" in r["instructions"]
    assert r["ping"] == {}
    assert r["server_stderr"] == ""


def test_tools_are_the_spec_table_with_schemas(daemon, sdk_dir):
    tools = scenario(daemon, sdk_dir, "list_tools")["tools"]
    assert [t["name"] for t in tools] == list(TOOLS)
    for t in tools:
        required, optional = TOOLS[t["name"]]
        schema = t["inputSchema"]
        assert schema["type"] == "object"
        assert sorted(schema.get("required", [])) == sorted(required), t["name"]
        assert sorted(schema["properties"]) == sorted(required + optional), t["name"]
        assert len(t["description"]) > 60, t["name"]
        for arg, prop in schema["properties"].items():
            assert prop.get("type") and len(prop.get("description", "")) > 10, (t["name"], arg)


def test_create_run_traceback_list_remove(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "sandbox_lifecycle")
    create = r["create"]
    assert not create["isError"] and create["json"]["limits"]["memory_bytes"] == 256 << 20
    assert create["json"]["idle_timeout_seconds"] == 600
    sid = r["sandbox_id"]

    assert not r["python"]["isError"]
    assert r["python"]["json"]["status"] == "ok"
    assert r["python"]["json"]["stdout"] == "42\n"

    tb = r["traceback"]
    assert tb["isError"] is True
    assert tb["json"]["status"] == "error"
    assert "Traceback (most recent call last)" in tb["json"]["stderr"]
    assert "ZeroDivisionError" in tb["json"]["stderr"]

    assert sid in [s["sandbox_id"] for s in r["listed"]["json"]["sandboxes"]]
    assert r["remove"]["json"] == {"sandbox_id": sid, "removed": True}
    assert sid not in [s["sandbox_id"] for s in r["listed_after"]["json"]["sandboxes"]]
    # A daemon refusal is a tool error the model can read, not a protocol error.
    assert r["remove_again"]["isError"] is True
    assert r["remove_again"]["json"]["kind"] == "gone"  # removed lately: says when and why
    with pytest.raises(Exception):
        daemon.call("sandbox.info", sandbox_id=sid)


def test_session_tools_share_one_sandbox_and_its_files(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "session_state")
    assert not r["write"]["isError"] and r["write"]["json"]["bytes_written"] == len("from fs_write\n")
    assert r["shell"]["json"]["stdout"] == "from fs_write\n/workspace\n"
    assert not r["shell"]["isError"]
    assert r["python"]["json"]["stdout"] == "from fs_write\nfrom shell\n"
    names = {e["name"] for e in r["list"]["json"]["entries"]}
    assert {"notes.txt", "py.txt"} <= names
    assert r["read"]["json"]["content"] == "from python\n"
    assert r["shell_failure"]["isError"] is True and r["shell_failure"]["json"]["exit_code"] == 3
    assert len(r["session_sandboxes"]) == 1


def test_matplotlib_plot_comes_back_as_a_png_image_block(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "plot")
    assert not r["isError"], r["json"]
    assert r["types"] == ["text", "image"]
    assert r["hasStructuredContent"] is False
    (image,) = r["images"]
    assert image["mimeType"] == "image/png"
    assert image["magic"] == "89504e470d0a1a0a"  # \x89PNG\r\n\x1a\n
    assert image["bytes"] > 1000
    # The text keeps the JSON result but not the base64 a second time.
    assert r["textLength"] < image["bytes"]
    assert r["json"]["stdout"] == "plotted\n"


def test_unknown_tool_is_a_jsonrpc_error_and_the_server_carries_on(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "unknown_tool")
    assert r["threw"] and r["isMcpError"]
    assert r["code"] == -32602
    assert "no_such_tool" in r["message"]
    assert r["after"] == {}


def test_progress_notifications_carry_output_and_elapsed_time(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "progress")
    messages = [p.get("message") for p in r["shell"]]
    assert messages == ["line1\n", "line2\n", "line3\n"]
    # Forwarded as they happen, not at the end.
    assert r["shell"][1]["at"] - r["shell"][0]["at"] > 400
    for seq in (r["shell"], r["python"]):
        values = [p["progress"] for p in seq]
        assert all(b > a for a, b in zip(values, values[1:])), values
    # The streamed output still makes up the final result.
    assert r["shellResult"]["json"]["stdout"] == "line1\nline2\nline3\n"
    # A silent 2.6 s run still reports, about once a second.
    ticks = [p["progress"] for p in r["python"]]
    assert 2 <= len(ticks) <= 5, ticks
    assert all(b - a >= 0.9 for a, b in zip(ticks, ticks[1:])), ticks
    assert r["pythonResult"]["json"]["stdout"] == "slept\n"


def test_cancel_kills_the_running_command(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "cancel")
    assert r["running_before"] == "1"
    assert r["rejected"] is True
    assert r["running_after"] == "0"
    assert r["ping"] == {}


def test_sdk_remove_right_after_a_cancelled_call_is_not_busy(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "cancel_remove")
    assert [a["tool"] for a in r["attempts"]] == ["shell_execute", "run_code"]
    for a in r["attempts"]:
        assert a["started"] is True, a
        assert a["rejected"] is True, a
        # remove_sandbox without force, sent right after the SDK's notifications/cancelled
        assert a["remove"]["isError"] is False, a["remove"]
        assert a["sandbox_id"] and a["sandbox_id"] not in live_sandbox_ids(daemon)


def test_sdk_default_sessions_sandbox_goes_when_the_client_closes(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "default_session")
    assert r["run"]["isError"] is False, r["run"]
    sandbox_id = r["run"]["json"]["sandbox_id"]
    assert sandbox_id in r["listed"]
    # The SDK's close ended nsbox mcp (scenario() checked its exit): its default session's sandbox goes with it.
    deadline = time.monotonic() + 30
    while sandbox_id in live_sandbox_ids(daemon):
        assert time.monotonic() < deadline, "the default session's sandbox outlived nsbox mcp"
        time.sleep(0.05)


def test_calls_run_concurrently_and_ping_is_answered_meanwhile(daemon, sdk_dir):
    r = scenario(daemon, sdk_dir, "concurrency")
    assert r["outputs"] == ["done\n", "done\n"]
    assert r["ping_ms"] < 500
    assert r["total_ms"] < 5000, r  # two 3 s commands side by side, not one after the other


@pytest.fixture(scope="module")
def net_daemon(tmp_path_factory):
    """An nsboxd with the network policy "allowed"; its proxy is /bin/true (no traffic answered)."""
    config = tmp_path_factory.mktemp("mcp-net") / "nsboxd.json"
    config.write_text(json.dumps({"network_policies": {"allowed": {"allow": ["allowed.test"]}}, "warm_pool": 0}))
    d = Daemon(extra_args=["--config", str(config), "--egress-path", "/bin/true"])
    yield d
    assert d.stop() == 0, d.final_log[-4000:]


def test_network_argument_and_expose_port_tool(net_daemon, sdk_dir):
    r = scenario(net_daemon, sdk_dir, "network")
    assert not r["create"]["isError"] and r["create"]["json"]["network"] == "allowed"
    expose = r["expose"]["json"]
    assert not r["expose"]["isError"] and expose["port"] == 8000
    assert expose["url"] == "http://127.0.0.1:%d/" % expose["host_port"]
    assert r["expose_again"]["json"]["url"] == expose["url"]
    assert r["bad_port"]["isError"] and "port" in r["bad_port"]["json"]["error"]
    assert r["unknown"]["isError"] and r["unknown"]["json"]["kind"] == "invalid_params"
    assert 'unknown network policy "nope"' in r["unknown"]["json"]["error"]
    # A session's sandbox: no network, then the network a later call asks for, kept when not said again.
    assert r["shell_none"]["json"]["stdout"].split() == ["lo"]
    assert r["shell_net"]["json"]["stdout"].split() == ["eth0", "lo"]
    assert r["shell_same"]["json"]["stdout"].split() == ["eth0", "lo"]
    assert r["session_networks"] == ["allowed"]
    assert r["no_network_expose"]["isError"] and "no network" in r["no_network_expose"]["json"]["error"]


@pytest.fixture(scope="module")
def expose_daemon(tmp_path_factory):
    """An nsboxd with the network policy "allowed" and its real egress proxy, which carries exposed ports."""
    config = tmp_path_factory.mktemp("mcp-expose") / "nsboxd.json"
    config.write_text(json.dumps({"network_policies": {"allowed": {"allow": ["allowed.test"]}}, "warm_pool": 0}))
    d = Daemon(extra_args=["--config", str(config)])
    yield d
    assert d.stop() == 0, d.final_log[-4000:]


def test_background_server_started_with_shell_start_is_reachable_through_expose_port(expose_daemon, sdk_dir):
    env = dict(os.environ, MCP_SDK_DIR=sdk_dir, NSBOX_BIN=os.path.join(BUILD, "nsbox"),
               NSBOX_SOCKET=expose_daemon.socket)
    p = subprocess.Popen(["node", os.path.join(REPO, "tests", "mcp", "client.mjs"), "background_server"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(p.stdout.readline() or "{}")
        assert "url" in first, p.communicate(timeout=60)
        # The server lives on after the shell_start call returned: the host reaches it.
        with urllib.request.urlopen(first["url"] + "index.html", timeout=30) as response:
            body = response.read().decode()
        p.stdin.write("go\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert "exception" not in r, r["exception"] + "\n" + r["server_stderr"]
    assert body == "hello-from-sandbox\n"

    start = r["start"]
    assert not start["isError"] and start["json"]["job_id"] and start["json"]["sandbox_id"]
    assert "shell_output" in start["json"]["note"]
    out = r["output"]["json"]
    assert out["running"] is True and out["exit_code"] is None and out["more"] is False
    assert "Serving HTTP on 0.0.0.0 port 8000" in out["stdout"]
    assert out["next"]["stdout"] == len(out["stdout"].encode())
    assert r["expose"]["json"]["port"] == 8000
    # Only what came after `since`: the request's log line.
    after = r["after_fetch"]["json"]
    assert "Serving HTTP" not in after["stdout"]
    assert "GET /index.html" in after["stderr"]
    # Another session does not see the job.
    assert r["other_session"]["isError"] and r["other_session"]["json"]["kind"] == "not_found"
    assert not r["kill"]["isError"] and r["kill"]["json"]["running"] is False
    gone = r["after_kill"]["json"]
    assert gone["running"] is False and gone["exit_code"] is None and "signal" in gone["note"]
    assert r["bad_signal"]["isError"] and "must be one of KILL, TERM, INT, HUP" in r["bad_signal"]["json"]["error"]
    assert r["unknown_job"]["isError"] and "no job nope" in r["unknown_job"]["json"]["error"]
    failed = r["failed"]["json"]
    assert (failed["running"], failed["exit_code"], failed["stdout"], failed["stderr"]) == (False, 4, "out\n", "err\n")
    # 40000 bytes of output: 16384 + 16384 + 7232, each part from the last one's next.
    assert [(b["length"], b["next"]["stdout"], b["more"]) for b in r["big"]] == [
        (16384, 16384, True), (16384, 32768, True), (7232, 40000, False)]
    assert "16384 bytes" in r["big"][0]["note"]


def test_descriptions_say_no_network_only_with_its_exception(daemon, sdk_dir):
    tools = scenario(daemon, sdk_dir, "list_tools")["tools"]
    create = next(t for t in tools if t["name"] == "create_sandbox")
    assert "no network unless created with a network policy" in create["description"]
    for t in tools:
        if "network" in t["inputSchema"]["properties"]:
            assert "network policies" in t["inputSchema"]["properties"]["network"]["description"]
    assert "expose_port" in [t["name"] for t in tools]


# --- raw protocol edges -------------------------------------------------------------------


class McpProcess:
    def __init__(self, socket, *args):
        self.proc = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", socket, "mcp", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = queue.Queue()
        self.raw = []
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 100

    def _read(self):
        for line in self.proc.stdout:
            self.raw.append(line)
            self.lines.put(json.loads(line))  # fails the reader (and so the test) on a non-JSON line
        self.lines.put(None)

    def send(self, obj):
        data = obj if isinstance(obj, bytes) else (json.dumps(obj) + "\n").encode()
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, timeout=30):
        return self.lines.get(timeout=timeout)

    def request(self, method, params=None, timeout=60):
        self.next_id += 1
        rid = self.next_id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        deadline = time.monotonic() + timeout
        while True:
            m = self.recv(timeout=max(0.1, deadline - time.monotonic()))
            if m is not None and m.get("id") == rid:
                return m

    def close(self, timeout=10):
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=timeout)
        return rc, self.proc.stderr.read().decode()


@pytest.fixture
def mcp(daemon):
    m = McpProcess(daemon.socket)
    yield m
    if m.proc.poll() is None:
        m.proc.kill()
        m.proc.wait()


def init_params(version):
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


@pytest.mark.parametrize("asked, answered", [("2024-11-05", "2024-11-05"), ("2025-03-26", "2025-03-26"),
                                             ("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"),
                                             ("2023-01-01", "2025-11-25")])
def test_protocol_version_is_echoed_when_supported_else_the_latest(mcp, asked, answered):
    r = mcp.request("initialize", init_params(asked))
    assert r["result"]["protocolVersion"] == answered
    rc, _ = mcp.close()
    assert rc == 0


def test_malformed_lines_and_unknown_methods_do_not_stop_the_server(mcp):
    mcp.request("initialize", init_params("2025-06-18"))
    mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    mcp.send(b"this is not json\n")
    assert mcp.recv()["error"]["code"] == -32700
    mcp.send(b"[1, 2]\n")
    assert mcp.recv()["error"]["code"] == -32600
    mcp.send(b'{"jsonrpc":"2.0","id":"x","method":"ping","params":"no"}\n')
    assert mcp.recv() == {"jsonrpc": "2.0", "id": "x",
                          "error": {"code": -32602, "message": 'invalid params: "params" must be an object'}}
    r = mcp.request("resources/list", {})
    assert r["error"]["code"] == -32601
    assert mcp.request("ping")["result"] == {}
    rc, stderr = mcp.close()
    assert rc == 0
    # stdout held only the protocol: compact JSON, one object per line.
    for line in mcp.raw:
        assert line.endswith(b"\n") and b"\n" not in line[:-1] and b'", "' not in line


def test_eof_on_stdin_exits_cleanly_at_once(mcp):
    start = time.monotonic()
    rc, stderr = mcp.close()
    assert rc == 0
    assert time.monotonic() - start < 2


def remove_session(daemon, session):
    for s in daemon.call("sandbox.list")["sandboxes"]:
        if s["session_id"] == session:
            daemon.call("sandbox.remove", sandbox_id=s["sandbox_id"], force=True)


def test_eof_still_answers_calls_already_running(daemon, mcp):
    mcp.request("initialize", init_params("2025-11-25"))
    mcp.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": "shell_execute", "arguments": {"session_id": "raw-eof", "command": "sleep 1; echo ok"}}})
    rc, _ = mcp.close(timeout=60)
    assert rc == 0
    answers = [m for m in list(mcp.lines.queue) if m and m.get("id") == 1]
    assert len(answers) == 1 and json.loads(answers[0]["result"]["content"][0]["text"])["stdout"] == "ok\n"
    remove_session(daemon, "raw-eof")


def test_cancelled_request_gets_no_response_and_its_process_dies(daemon, mcp):
    mcp.request("initialize", init_params("2025-11-25"))
    session = "raw-cancel"
    r = mcp.request("tools/call", {"name": "shell_execute",
                                   "arguments": {"session_id": session, "command": "true"}})
    assert r["result"]["isError"] is False
    sandbox_id = daemon.call("sandbox.create", session_id=session)["sandbox_id"]
    mcp.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
              "params": {"name": "shell_execute",
                         "arguments": {"session_id": session, "command": "sleep 250 & sleep 251; wait"}}})

    def count():
        out = daemon.call("sandbox.exec", sandbox_id=sandbox_id, command="ps -eo args")["stdout"]
        return sum(1 for line in out.splitlines() if line.startswith("sleep 25"))

    deadline = time.monotonic() + 20
    while count() < 2:
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    mcp.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "test"}})
    deadline = time.monotonic() + 10
    while count() > 0:
        assert time.monotonic() < deadline, "the cancelled command is still running"
        time.sleep(0.05)
    assert mcp.request("ping")["result"] == {}
    time.sleep(0.5)
    assert all(m is None or m.get("id") != 7 for m in list(mcp.lines.queue))
    rc, stderr = mcp.close()
    assert rc == 0, stderr
    daemon.call("sandbox.remove", sandbox_id=sandbox_id, force=True)


def test_no_progress_without_a_progress_token(mcp):
    mcp.request("initialize", init_params("2025-11-25"))
    r = mcp.request("tools/call", {"name": "shell_execute",
                                   "arguments": {"session_id": "raw-noprogress", "command": "echo a; sleep 1.5"}})
    assert json.loads(r["result"]["content"][0]["text"])["stdout"] == "a\n"
    assert not [m for m in list(mcp.lines.queue) if m and m.get("method") == "notifications/progress"]
    r = mcp.request("tools/call", {"name": "list_sandboxes", "arguments": {}})
    for s in json.loads(r["result"]["content"][0]["text"])["sandboxes"]:
        if s["session_id"] == "raw-noprogress":
            mcp.request("tools/call", {"name": "remove_sandbox", "arguments": {"sandbox_id": s["sandbox_id"],
                                                                               "force": True}})
    assert mcp.close()[0] == 0


def test_bad_package_name_is_refused_by_the_daemon_as_a_tool_error(daemon, sandbox, mcp):
    mcp.request("initialize", init_params("2025-11-25"))
    r = mcp.request("tools/call", {"name": "install_package",
                                   "arguments": {"sandbox_id": sandbox, "package": "--index-url=http://evil/"}})
    assert r["result"]["isError"] is True
    shown = json.loads(r["result"]["content"][0]["text"])
    assert shown["method"] == "package.install"
    assert shown["kind"] == "invalid_params"


def test_bad_arguments_are_tool_errors(mcp):
    mcp.request("initialize", init_params("2025-11-25"))
    r = mcp.request("tools/call", {"name": "python_execute", "arguments": {"session_id": "x"}})
    assert r["result"]["isError"] is True
    assert 'missing required argument \\"code\\"' in r["result"]["content"][0]["text"]


def test_unreachable_daemon_is_a_tool_error_not_a_crash(tmp_path):
    m = McpProcess(str(tmp_path / "nothing.sock"))
    try:
        assert m.request("initialize", init_params("2025-11-25"))["result"]["serverInfo"]["name"] == "nsbox"
        r = m.request("tools/call", {"name": "list_sandboxes", "arguments": {}})
        assert r["result"]["isError"] is True
        assert "nsboxd is not reachable" in r["result"]["content"][0]["text"]
        assert m.close()[0] == 0
    finally:
        if m.proc.poll() is None:
            m.proc.kill()


def test_remove_right_after_a_cancelled_call_is_not_busy(daemon, mcp):
    mcp.request("initialize", init_params("2025-11-25"))
    session = "raw-cancel-remove"
    for attempt in range(3):
        r = mcp.request("tools/call", {"name": "shell_execute",
                                       "arguments": {"session_id": session, "command": "true"}})
        assert r["result"]["isError"] is False, r
        sandbox_id = daemon.call("sandbox.create", session_id=session)["sandbox_id"]
        call_id = 50 + attempt
        call = (("shell_execute", {"command": "sleep 300"}) if attempt % 2 == 0 else
                ("run_code", {"code": "import time\ntime.sleep(300)", "stateful": False}))
        mcp.send({"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                  "params": {"name": call[0], "arguments": dict(call[1], session_id=session)}})
        deadline = time.monotonic() + 20
        while not [s for s in daemon.call("sandbox.list")["sandboxes"]
                   if s["sandbox_id"] == sandbox_id and s["running_execs"] > 0]:
            assert time.monotonic() < deadline, "the call never started"
            time.sleep(0.05)
        mcp.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": call_id, "reason": "test"}})
        # At once, without force: the cancelled call keeps nothing busy.
        r = mcp.request("tools/call", {"name": "remove_sandbox", "arguments": {"sandbox_id": sandbox_id}})
        assert r["result"]["isError"] is False, r["result"]["content"][0]["text"]
        assert sandbox_id not in [s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]]
    assert mcp.close()[0] == 0


def live_sandbox_ids(daemon):
    return [s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]]


@pytest.mark.parametrize("end", ["eof", "SIGTERM", "SIGHUP"])
def test_the_default_sessions_sandbox_goes_when_the_server_ends(daemon, mcp, end):
    mcp.request("initialize", init_params("2025-11-25"))
    r = mcp.request("tools/call", {"name": "run_code", "arguments": {"code": "x = 1"}})
    assert r["result"]["isError"] is False, r
    sandbox_id = json.loads(r["result"]["content"][0]["text"])["sandbox_id"]
    named = mcp.request("tools/call", {"name": "shell_execute",
                                       "arguments": {"session_id": "raw-kept", "command": "true"}})
    assert named["result"]["isError"] is False, named
    kept = daemon.call("sandbox.create", session_id="raw-kept")["sandbox_id"]
    assert sandbox_id in live_sandbox_ids(daemon)
    if end == "eof":
        mcp.proc.stdin.close()
    else:
        mcp.proc.send_signal(getattr(signal, end))
    assert mcp.proc.wait(timeout=30) == 0, mcp.proc.stderr.read()
    ids = live_sandbox_ids(daemon)
    assert sandbox_id not in ids
    assert kept in ids  # a session the agent named is kept
    daemon.call("sandbox.remove", sandbox_id=kept, force=True)


def test_a_default_session_named_with_session_is_kept(daemon):
    m = McpProcess(daemon.socket, "--session", "raw-named-default")
    m.request("initialize", init_params("2025-11-25"))
    r = m.request("tools/call", {"name": "run_code", "arguments": {"code": "y = 6 * 7", "stateful": True}})
    sandbox_id = json.loads(r["result"]["content"][0]["text"])["sandbox_id"]
    assert m.close()[0] == 0
    assert sandbox_id in live_sandbox_ids(daemon)
    assert daemon.call("sandbox.create", session_id="raw-named-default")["sandbox_id"] == sandbox_id
    daemon.call("sandbox.remove", sandbox_id=sandbox_id, force=True)
