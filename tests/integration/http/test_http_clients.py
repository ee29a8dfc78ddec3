# SPDX-License-Identifier: Apache-2.0
"""nsbox-http as the clients nobody on this project wrote meet it: antwort's Go client for
POST /execute {code} (Content-Type only, no Authorization) and kubernetes-sigs/agent-sandbox's
Python SDK (requests with urllib3's Retry: a POST is sent again on a read timeout; router headers;
server_port 8888; multipart uploads of any size). Both are reproduced here request for request
with the standard library, as their sources send them; each case is what the client's own
reference server (antwort's sandbox-server, agent-sandbox's python-runtime and sandboxd) answers."""
import base64
import binascii
import hashlib
import http.client
import json
import os
import socket
import subprocess
import time
import urllib.parse

import pytest

from conftest import ASAN, BUILD
from nsbox_client import as_uid
from test_http import TOKEN_A, UID_A, Front


# --- the clients -------------------------------------------------------------------

def antwort_execute(port, request, timeout=120):
    """antwort's SandboxClient.Execute: json.Marshal of SandboxRequest (timeout_seconds always
    sent, 0 when unset), Content-Type only, a 120 s overall timeout; (status, decoded body)."""
    body = {"code": request["code"], "timeout_seconds": request.get("timeout_seconds", 0)}
    for key in ("requirements", "files"):
        if request.get(key):
            body[key] = request[key]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/execute", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        data = resp.read()
    finally:
        c.close()
    return resp.status, json.loads(data) if data else None


class SdkGaveUp(Exception):
    pass


class AgentSandboxSdk:
    """The transport of k8s_agent_sandbox's SandboxConnector.send_request: requests.Session with
    HTTPAdapter(max_retries=Retry(total=5, backoff_factor=0.5, status_forcelist=[500, 502, 503,
    504], allowed_methods=["GET", "POST", "PUT", "DELETE"])). A read timeout or a status of the
    list is retried on a new connection after urllib3's backoff (0, 1, 2, 4, 8 s); router mode
    (Direct, Gateway, tunnel) adds X-Sandbox-ID/-Namespace/-Port (server_port, 8888) and
    X-Sandbox-Timeout (the request's timeout); in-cluster mode adds none."""

    TOTAL, BACKOFF, STATUSES = 5, 0.5, {500, 502, 503, 504}

    def __init__(self, port, router=True, token=None):
        self.port, self.router, self.token = port, router, token
        self.attempts = 0

    def send(self, method, endpoint, body=None, headers=None, timeout=60):
        h = dict(headers or {})
        if self.router:
            h.update({"X-Sandbox-ID": "sb-test", "X-Sandbox-Namespace": "default", "X-Sandbox-Port": "8888",
                      "X-Sandbox-Timeout": str(timeout)})
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        errors = 0
        while True:
            self.attempts += 1
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                c.request(method, "/" + endpoint.lstrip("/"), body=body, headers=h)
                resp = c.getresponse()
                data = resp.read()
                if resp.status not in self.STATUSES:
                    return resp.status, resp, data
            except (socket.timeout, TimeoutError):
                pass
            finally:
                c.close()
            errors += 1
            if errors > self.TOTAL:
                raise SdkGaveUp("%d attempts" % self.attempts)
            time.sleep(0 if errors <= 1 else self.BACKOFF * 2 ** (errors - 1))

    def run(self, command, timeout=60):
        """CommandExecutor.run: POST execute {command} -> ExecutionResult."""
        status, _, data = self.send("POST", "execute", json.dumps({"command": command}).encode(),
                                    {"Content-Type": "application/json"}, timeout)
        assert status == 200, (status, data)
        return json.loads(data)

    def write(self, path, content, timeout=60):
        """Filesystem.write: a multipart part "file" whose filename is the path, as requests
        encodes it (random hex boundary, no Content-Type for the part)."""
        boundary = binascii.hexlify(os.urandom(16)).decode()
        body = (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n"
                 % (boundary, path)).encode() + content + ("\r\n--%s--\r\n" % boundary).encode())
        return self.send("POST", "upload", body, {"Content-Type": "multipart/form-data; boundary=" + boundary},
                         timeout)

    def list(self, path):
        status, _, data = self.send("GET", "list/" + urllib.parse.quote(path, safe=""))
        return status, json.loads(data)


@pytest.fixture(scope="module")
def front(daemon):
    os.chmod(daemon.socket, 0o666)
    f = Front(daemon)
    yield f
    assert f.proc.poll() is None, "nsbox-http died:\n" + f.read_log()
    assert f.stop() == 0


@pytest.fixture(scope="module")
def open_front(daemon):
    """As in an agent-sandbox pod: any address, no tokens, on 8080's and 8888's stand-ins."""
    f = Front(daemon, "--http", "0.0.0.0:0", "--insecure-no-auth-behind-network-policy", tokens=False)
    yield f
    assert f.proc.poll() is None, "nsbox-http died:\n" + f.read_log()
    assert f.stop() == 0


def wait_for_no_execs(front):
    deadline = time.monotonic() + 60
    while front.request("GET", "/health")[2]["load"]["running_execs"] != 0:
        assert time.monotonic() < deadline, "execs still running"
        time.sleep(0.1)


# --- the mode behind a network policy, probes, --help ---------------------------------

def test_no_auth_mode_behind_a_network_policy_serves_tokenless_clients_on_any_address(open_front):
    log = open_front.read_log()
    assert "WARNING: NO AUTHENTICATION" in log and "0.0.0.0" in log, log
    # antwort's client: no Authorization, a Host that is the pod's address
    status, body = antwort_execute(open_front.port, {"code": "print(6*7)"})
    assert status == 200 and body["stdout"] == "42\n", body
    sdk = AgentSandboxSdk(open_front.port)
    assert sdk.run("echo via the router") == {"stdout": "via the router\n", "stderr": "", "exit_code": 0}
    status, _, body = open_front.request("GET", "/list/", token=None, headers={"Host": "10.4.0.17:8888"})
    assert status == 200 and isinstance(body, list)


def test_no_auth_mode_is_taken_only_by_its_full_name_and_not_with_tokens(daemon, tmp_path):
    nsbox_http = os.path.join(BUILD, "nsbox-http")
    for args in (["--insecure-no-auth"], ["--insecure"]):
        p = subprocess.run([nsbox_http, "--http", "0.0.0.0:0", "--socket", daemon.socket, *args],
                           capture_output=True, timeout=30)
        assert p.returncode == 2 and b"in full" in p.stderr, p.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text("41001 %s\n" % TOKEN_A)
    tokens.chmod(0o600)
    p = subprocess.run([nsbox_http, "--http", "0.0.0.0:0", "--socket", daemon.socket, "--tokens", str(tokens),
                        "--insecure-no-auth-behind-network-policy"], capture_output=True, timeout=30)
    assert p.returncode == 2 and b"exclude each other" in p.stderr, p.stderr
    # without it, as root and on any address: refused, and the refusal names the mode
    p = subprocess.run([nsbox_http, "--http", "0.0.0.0:0", "--socket", daemon.socket],
                       capture_output=True, timeout=30)
    assert p.returncode == 2 and b"--insecure-no-auth-behind-network-policy" in p.stderr, p.stderr


@pytest.mark.parametrize("path", ["/health", "/v1/health", "/", "/healthz"])
def test_health_probes_answer_without_a_token_and_tell_nothing(front, path):
    for token in (None, "not-a-token-at-all-xxxxxxxx"):
        status, _, body = front.request("GET", path, token=token, headers={"Host": "10.4.0.17:8080"})
        assert status == 200 and body == {"status": "ok"}, (token, status, body)


def test_health_with_a_token_still_has_the_load(front):
    status, _, body = front.request("GET", "/health")
    assert status == 200 and "load" in body and body["capacity"] >= 1


def test_probes_of_a_loopback_front_from_a_pod_address_are_answered(daemon):
    f = Front(daemon, tokens=False, uid=41001)
    try:
        status, _, body = f.request("GET", "/v1/health", token=None, headers={"Host": "10.4.0.17:8888"})
        assert status == 200 and body == {"status": "ok"}, body
        # the rest stays refused to a name that is not loopback
        assert f.request("GET", "/list/", token=None, headers={"Host": "10.4.0.17:8888"})[0] == 403
    finally:
        assert f.stop() == 0


def test_help_names_every_option_and_the_start_up_lines_say_the_mode_and_files(daemon, front):
    p = subprocess.run([os.path.join(BUILD, "nsbox-http"), "--help"], capture_output=True, timeout=30)
    assert p.returncode == 0
    for option in ("--http", "--tokens", "--insecure-no-auth-behind-network-policy", "--tls-cert", "--tls-key",
                   "--socket", "--max-connections", "--max-per-token", "--max-per-address", "--auth-reserve",
                   "--timeout", "--header-timeout", "--keepalive-seconds", "--execute-sandbox", "--help"):
        assert option.encode() in p.stdout, option
    log = front.read_log()
    assert "127.0.0.1:0 port %d (http)" % front.port in log, log
    assert "bearer tokens from %s" % os.path.join(front.dir, "tokens") in log, log
    assert "nsboxd at %s" % daemon.socket in log and "probes without a token" in log, log
    assert "idle connections closed after 120 s" in log and "64 requests a token at once" in log, log
    assert "a WebSocket's peer that stops answering let go within 120 s (TCP keepalive after 60 s" in log, log


# --- antwort: OUTPUT_DIR, files_produced, timeouts ----------------------------------------

def test_antwort_code_writes_its_files_to_output_dir_and_gets_only_those_back(open_front):
    front = open_front
    code = ("import os, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "out = os.environ['OUTPUT_DIR']\nprint(out)\n"
            "open(os.path.join(out, 'result.txt'), 'w').write('done')\n"
            "os.makedirs(os.path.join(out, 'sub'))\nopen(os.path.join(out, 'sub', 'deep.txt'), 'w').write('x')\n"
            "open('scratch.txt', 'w').write('not returned')\n"
            "plt.plot([1, 2], [3, 4])\nplt.savefig(os.path.join(out, 'chart.png'))\n")
    status, body = antwort_execute(front.port, {"code": code, "timeout_seconds": 120})
    assert status == 200 and body["status"] == "success", body
    assert body["stdout"] == "/workspace/output\n"
    produced = body["files_produced"]
    assert sorted(produced) == ["chart.png", "result.txt"], sorted(produced)
    assert base64.b64decode(produced["result.txt"]) == b"done"
    assert base64.b64decode(produced["chart.png"]).startswith(b"\x89PNG\r\n\x1a\n")
    # nothing in OUTPUT_DIR: no files_produced, as antwort's server omits it
    status, body = antwort_execute(front.port, {"code": "open('elsewhere.txt', 'w').write('x')"})
    assert status == 200 and "files_produced" not in body, body


def test_antwort_timeout_says_so_in_stderr_status_and_exit_code(open_front):
    front = open_front
    status, body = antwort_execute(front.port, {"code": "import time\nprint('started', flush=True)\n"
                                                        "time.sleep(120)", "timeout_seconds": 1})
    assert status == 200, body
    assert body["status"] == "error" and body["exit_code"] == -1 and body["timed_out"] is True, body
    assert body["stderr"] == "execution timed out after 1 seconds", body
    assert body["stdout"] == "started\n"


def test_antwort_default_timeout_is_its_servers_30_seconds(open_front):
    """antwort's client sends timeout_seconds 0 when its provider sets none; its server then
    allows 30 s, and says so as for any timeout."""
    status, body = antwort_execute(open_front.port, {"code": "import time\ntime.sleep(600)"})
    assert status == 200 and body["timed_out"] is True, body
    assert body["stderr"] == "execution timed out after 30 seconds", body


# --- agent-sandbox: timeouts, retries, output, paths, metadata, uploads ---------------------

def test_agent_sandbox_x_sandbox_timeout_bounds_the_command_and_stderr_says_it(front):
    """The SDK in router mode sends X-Sandbox-Timeout: its own read timeout. The command is
    ended a second before it, so that the answer arrives while the client still waits."""
    sdk = AgentSandboxSdk(front.port, token=TOKEN_A)
    body = sdk.run("echo before; sleep 30", timeout=5)
    assert body["stdout"] == "before\n" and body["exit_code"] == 1, body
    assert body["stderr"] == "execution timed out after 4 seconds\n", body


def test_agent_sandbox_command_without_x_sandbox_timeout_gets_the_reference_300_seconds(front, daemon):
    """In-cluster mode sends no X-Sandbox-Timeout and run() no timeout in its body: the command
    gets the reference runtime's 300 s (SANDBOX_EXEC_TIMEOUT_SECONDS), not nsboxd's default nor
    antwort's 30 s; nsboxd's audit line of the exec says the timeout it was given."""
    marker = "default-timeout-" + binascii.hexlify(os.urandom(4)).decode()
    body = AgentSandboxSdk(front.port, router=False, token=TOKEN_A).run("echo " + marker)
    assert body["stdout"] == marker + "\n" and body["exit_code"] == 0, body
    deadline = time.monotonic() + 30
    while True:
        lines = [ln for ln in daemon.read_log().splitlines() if "audit: exec" in ln and marker in ln]
        if lines:
            break
        assert time.monotonic() < deadline, "no audit line of the exec"
        time.sleep(0.1)
    assert len(lines) == 1 and " timeout_s=300 " in lines[0], lines


def test_agent_sandbox_sdk_retrying_a_timed_out_post_does_not_leave_the_command_running(front):
    """The SDK (in-cluster: no router headers) waits 1 s, gives up, and sends the POST again, six
    times in all. A command whose client went is killed, so none of the six reaches its end."""
    run = AgentSandboxSdk(front.port, router=False, token=TOKEN_A)
    assert run.run("rm -f retried-runs.txt")["exit_code"] == 0
    sdk = AgentSandboxSdk(front.port, router=False, token=TOKEN_A)
    with pytest.raises(SdkGaveUp):
        sdk.run("sleep 4; echo ran >> retried-runs.txt", timeout=1)
    assert sdk.attempts == 6
    wait_for_no_execs(front)
    body = run.run("cat retried-runs.txt 2>/dev/null | wc -l")
    assert body["stdout"].strip() == "0", "the retried command ran to its end %s times" % body["stdout"].strip()


def test_agent_sandbox_execute_keeps_output_past_1_mib(front):
    sdk = AgentSandboxSdk(front.port, token=TOKEN_A)
    body = sdk.run("head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2")
    assert body["exit_code"] == 0 and len(body["stdout"]) == 3000000 and set(body["stdout"]) == {"a"}
    assert body["stderr"] == "done\n"


def test_agent_sandbox_paths_are_under_the_base_directory_as_the_reference_runtime_has_them(front):
    sdk = AgentSandboxSdk(front.port, token=TOKEN_A)
    assert sdk.run("mkdir -p basetest && echo x > basetest-marker.txt")["exit_code"] == 0
    status, entries = sdk.list("/")
    assert status == 200 and "basetest-marker.txt" in [e["name"] for e in entries], entries
    assert "etc" not in [e["name"] for e in entries]
    status, _, data = sdk.send("GET", "exists/" + urllib.parse.quote("/basetest-marker.txt", safe=""))
    # the reference runtime's answer: the path as asked, and whether it exists
    assert json.loads(data) == {"path": "/basetest-marker.txt", "exists": True}
    # an absolute path is the base's, not the sandbox root's
    status, _, data = sdk.send("GET", "download/" + urllib.parse.quote("/etc/hostname", safe=""))
    assert status == 404 and json.loads(data) == {"message": "File not found"}
    # leaving the base is denied, as the reference runtime denies it
    status, _, data = sdk.send("GET", "download/" + urllib.parse.quote("../etc/passwd", safe=""))
    assert status == 403 and json.loads(data) == {"message": "Access denied"}
    status, _, _ = sdk.send("GET", "v1/files/" + urllib.parse.quote("../../etc/passwd", safe=""))
    assert status == 403
    status, _, data = sdk.send("GET", "v1/files/" + urllib.parse.quote("/", safe=""))
    assert status == 200 and "basetest-marker.txt" in [e["name"] for e in json.loads(data)["entries"]]


def test_agent_sandbox_v1_metadata_has_the_sandbox_environment_without_credentials(daemon):
    env = dict(os.environ, SANDBOX_ID="sb-4711", SANDBOX_WORKSPACE="/workspace", SANDBOX_API_TOKEN="secret",
               SANDBOX_PRIVATE_KEY="secret")
    p = subprocess.Popen([os.path.join(BUILD, "nsbox-http"), "--http", "127.0.0.1:0", "--socket", daemon.socket,
                          "--insecure-no-auth-behind-network-policy"], env=env, stderr=subprocess.PIPE)
    try:
        line = b""
        while b"port" not in line:
            line = p.stderr.readline()
            assert line, "nsbox-http did not start"
        port = int(line.split(b"port ")[1].split()[0])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/metadata")
        resp = c.getresponse()
        assert resp.status == 200
        assert json.loads(resp.read()) == {"env": {"SANDBOX_ID": "sb-4711", "SANDBOX_WORKSPACE": "/workspace"}}
    finally:
        p.terminate()
        assert p.wait(timeout=30) == 0


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_agent_sandbox_uploads_stream_past_10_mib_in_bounded_memory(front):
    sdk = AgentSandboxSdk(front.port, token=TOKEN_A)
    content = os.urandom(1 << 20) * 40  # 40 MiB
    before = vm_hwm_kib(front.proc.pid)
    status, _, data = sdk.write("big/upload.bin", content, timeout=300)
    assert status == 200 and json.loads(data) == {"message": "File 'big/upload.bin' uploaded successfully."}
    status, _, data = sdk.send("PUT", "v1/files/big/put.bin", content[:12 << 20],
                               {"Content-Type": "application/octet-stream"}, timeout=300)
    assert status == 200, data
    grown = vm_hwm_kib(front.proc.pid) - before
    print("nsbox-http's peak resident memory grew by %d KiB for a 40 MiB upload and a 12 MiB PUT" % grown)
    body = sdk.run("sha256sum big/upload.bin big/put.bin")
    sums = [line.split()[0] for line in body["stdout"].splitlines()]
    assert sums == [hashlib.sha256(content).hexdigest(), hashlib.sha256(content[:12 << 20]).hexdigest()], body
    # a 4 MiB chunk, its base64 and its JSON at a time, never the whole file (under ASan freed
    # memory sits in its 256 MB quarantine before reuse)
    assert grown < (400 if ASAN else 32) << 10, "nsbox-http grew by %d KiB for a 40 MiB upload" % grown


def test_an_upload_whose_nsbox_http_is_killed_mid_way_leaves_no_temporary_file(daemon):
    """kill -9 of nsbox-http while a chunked PUT /v1/files is half sent: nsbox-http cannot clean
    up, but nsboxd removes the temporary file the upload's connection wrote once that connection
    closes, and the file it would have replaced stays whole (before: the temporary file stayed in
    the sandbox for good)."""
    os.chmod(daemon.socket, 0o666)
    f = Front(daemon)
    sdk = AgentSandboxSdk(f.port, token=TOKEN_A)
    s = None
    try:
        sdk.run("mkdir -p up && printf old > up/big.bin")
        sid = next(sb["sandbox_id"] for sb in as_uid(UID_A, daemon.socket, [["sandbox.list", {}]])[0]["result"]
                   ["sandboxes"] if sb.get("session_id") == "http-default")

        def upload_dir():
            return [e["name"] for e in daemon.call("fs.list", sandbox_id=sid, path="/workspace/up")["entries"]]

        s = socket.create_connection(("127.0.0.1", f.port))
        s.sendall(("PUT /v1/files/up/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                   % TOKEN_A).encode())
        piece = os.urandom(1 << 20)
        for _ in range(6):  # more than one 4 MiB piece: the first goes to a temporary file
            s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        deadline = time.monotonic() + 60
        while not any(n.startswith(".nsbox-upload-") for n in upload_dir()):
            assert time.monotonic() < deadline, "no temporary file appeared: %s" % upload_dir()
            time.sleep(0.05)
        f.proc.kill()  # mid-upload: the body's end never comes
        f.proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while upload_dir() != ["big.bin"]:
            assert time.monotonic() < deadline, "the killed upload's temporary file stayed: %s" % upload_dir()
            time.sleep(0.05)
        r = daemon.call("sandbox.exec", sandbox_id=sid, argv=["cat", "/workspace/up/big.bin"])
        assert r["stdout"] == "old", r
    finally:
        if s is not None:
            s.close()
        f.stop()
