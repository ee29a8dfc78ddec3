# SPDX-License-Identifier: Apache-2.0
"""Any port of a sandbox through nsbox-http, as E2B's SDKs name it: the
unmodified SDKs build https://PORT-SANDBOXID.DOMAIN from the `domain` that
nsbox-http (--e2b-domain, TLS with a test-made wildcard certificate) answers
at create; sandbox.getHost(8000) reaches a python http.server started with
commands.run, and @e2b/desktop's stream.getUrl() reaches noVNC's page and its
WebSocket to x11vnc. Refused: another key's sandbox, an unknown sandbox, a
Host that names no port, a port where nothing listens."""
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time

import pytest

from conftest import IMAGE_DIR, Daemon, until
from e2b_front import KEY_A, KEY_B, UID_A, UID_B
from test_e2b_sdk import run_suite, sdk_dir  # noqa: F401 (fixture)
from test_http import Front
from upstream import run

# serial: the sandboxes have network (a veth each, counted by network/'s tests)
pytestmark = [pytest.mark.serial, pytest.mark.xdist_group("host-network")]

DOMAIN = "nsbox.localhost"


@pytest.fixture(scope="module")
def netd():
    tmp = tempfile.mkdtemp(prefix="nsbox-e2b-ports-")
    os.chmod(tmp, 0o755)
    path = os.path.join(tmp, "nsboxd.json")
    with open(path, "w") as f:
        json.dump({"network_policies": {"inbound-only": {"allow": []}}, "allow_client_network_policies": 1, "warm_pool": 0}, f)
    d = Daemon(extra_args=["--config", path, "--uid-pool-base", "1690000000", "--uid-pool-ranges", "16"])
    yield d
    rc = d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tokens(netd):
    """The tokens file of the two E2B keys (owners UID_A and UID_B)."""
    os.chmod(netd.socket, 0o666)  # for auth.act_as's uids
    tmp = tempfile.mkdtemp(prefix="nsbox-e2b-keys-")
    path = os.path.join(tmp, "tokens")
    with open(path, "w") as f:
        f.write("%d %s\n%d %s\n" % (UID_A, KEY_A, UID_B, KEY_B))
    os.chmod(path, 0o600)
    yield path
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_front(netd, tokens):
    """nsbox-http over TLS with a *.nsbox.localhost certificate and --e2b-domain."""
    tmp = tempfile.mkdtemp(prefix="nsbox-e2b-tls-")
    cert, key = (os.path.join(tmp, n) for n in ("cert.pem", "key.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=" + DOMAIN, "-addext",
                    "subjectAltName=DNS:*.%s,DNS:%s,IP:127.0.0.1" % (DOMAIN, DOMAIN),
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    port = free_port()
    f = Front(netd, "--tokens", tokens, "--tls-cert", cert, "--tls-key", key, "--http", "127.0.0.1:%d" % port,
              "--e2b-domain", "%s:%d" % (DOMAIN, port), tokens=False, scheme="https")
    f.port, f.cert, f.domain = port, cert, "%s:%d" % (DOMAIN, port)
    f.context = ssl.create_default_context(cafile=cert)
    yield f
    rc = f.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    assert rc == 0, f.read_log()[-4000:]


def scenario(front, sdk_dir, name, timeout=240):
    url = "https://127.0.0.1:%d" % front.port
    return run_suite(front, sdk_dir, name, timeout, E2B_API_URL=url, E2B_SANDBOX_URL=url,
                     NODE_EXTRA_CA_CERTS=front.cert, E2B_TEST_CONNECT="127.0.0.1:%d" % front.port)


def host_request(front, host, path="/", headers=None, method="GET", sni=None):
    """(status, body) of a request with this Host (and SNI: the Host's name unless given), sent to nsbox-http."""
    head = "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (method, path, host)
    head += "".join("%s: %s\r\n" % kv for kv in (headers or {}).items()) + "\r\n"
    raw = socket.create_connection(("127.0.0.1", front.port), timeout=60)
    with front.context.wrap_socket(raw, server_hostname=sni or host.split(":")[0]) as s:
        s.sendall(head.encode())
        r = http.client.HTTPResponse(s)
        r.begin()
        return r.status, r.read()


def create(front, key, network=True):
    body = {"templateID": "base"}
    if network:
        body["network"] = {"denyOut": ["0.0.0.0/0"]}
    c = front.connection()
    try:
        c.request("POST", "/sandboxes", body=json.dumps(body),
                  headers={"X-API-KEY": key, "Content-Type": "application/json"})
        r = c.getresponse()
        data = json.loads(r.read())
    finally:
        c.close()
    assert r.status == 201, data
    return data


def kill(front, key, sandbox_id):
    c = front.connection()
    try:
        c.request("DELETE", "/sandboxes/" + sandbox_id, headers={"X-API-KEY": key})
        c.getresponse().read()
    finally:
        c.close()


def test_get_host_reaches_a_server_started_in_the_sandbox(tls_front, sdk_dir):
    r = scenario(tls_front, sdk_dir, "getHost")
    assert r["host"] == "8000-%s.%s" % (r["sandboxId"], tls_front.domain)  # the SDK's, from our `domain`
    assert r["hostAfterConnect"] == r["host"]
    assert r["hello"] == "hello through getHost\n"
    assert r["byHeaders"] == "hello through getHost\n"
    assert r["listing"] == 200 and r["missing"] == 404  # the server's own answers, passed on
    assert r["withoutToken"] == 401
    assert r["closedPort"]["status"] == 502 and "nothing answers" in r["closedPort"]["body"], r["closedPort"]
    assert r["otherKeyToken"] == 401  # another sandbox's token opens that sandbox only
    assert r["afterKill"] == 404


def test_desktop_stream_url_serves_novnc_and_its_websocket_reaches_x11vnc(tls_front, sdk_dir):
    # the image's x11vnc and websockify keep `x11vnc -bg`'s server running (docs/e2b.md)
    assert os.path.exists(os.path.join(IMAGE_DIR, "desktop", "rootfs", "usr", "local", "bin", "websockify")), (
        "no desktop image, or one from before its websockify, in %s: make image IMAGE=desktop" % IMAGE_DIR)
    r = scenario(tls_front, sdk_dir, "desktopStream")
    assert r["streamUrl"].startswith("https://6080-%s.%s/vnc.html?" % (r["sandboxId"], tls_front.domain)), r
    assert r["page"] is True
    assert r["websocket"]["status"] == 101
    assert r["greeting"] in ("RFB 003.008", "RFB 003.007", "RFB 003.003")


def test_another_keys_sandbox_an_unknown_sandbox_and_a_malformed_host_are_refused(tls_front):
    a = create(tls_front, KEY_A)
    b = create(tls_front, KEY_B)
    try:
        assert a["domain"] == tls_front.domain
        host_b = "8000-%s.%s" % (b["sandboxID"], tls_front.domain)
        # A's token on B's sandbox's port: the token opens A's sandbox only
        status, body = host_request(tls_front, host_b, headers={"E2B-Traffic-Access-Token": a["trafficAccessToken"]})
        assert status == 401, body
        # A's key through E2B's headers: B's sandbox is not A's
        status, body = host_request(tls_front, "127.0.0.1:%d" % tls_front.port, headers={
            "E2b-Sandbox-Id": b["sandboxID"], "E2b-Sandbox-Port": "8000",
            "X-Access-Token": a["trafficAccessToken"]})
        assert status == 401, body
        # a volume's token (VolumeAndToken's, for E2B's volume content API) opens no sandbox of its owner
        c = tls_front.connection()
        c.request("POST", "/volumes", body=json.dumps({"name": "portsvol"}),
                  headers={"X-API-KEY": KEY_A, "Content-Type": "application/json"})
        r = c.getresponse()
        volume = json.loads(r.read())
        c.close()
        assert r.status in (200, 201) and volume.get("token"), volume
        status, body = host_request(tls_front, "8000-%s.%s" % (a["sandboxID"], tls_front.domain),
                                    "/volumecontent/%s/file?path=/x" % volume["volumeID"],
                                    headers={"Authorization": "Bearer " + volume["token"]})
        assert status == 401, body
        # an unknown sandbox with a token made for that id by A's key: not found
        unknown = "0123abcd"
        status, body = host_request(tls_front, "8000-%s.%s" % (unknown, tls_front.domain),
                                    headers={"X-API-KEY": KEY_A})
        assert status == 401, body  # no token for it: refused before anything is looked up
        for host in ("%s" % tls_front.domain.replace(DOMAIN, "x." + DOMAIN),   # no port
                     "abc-%s.%s" % (a["sandboxID"], tls_front.domain),          # not a port
                     "0-%s.%s" % (a["sandboxID"], tls_front.domain),            # port 0
                     "99999-%s.%s" % (a["sandboxID"], tls_front.domain),        # past 65535
                     "8000-.%s" % tls_front.domain,                             # no id
                     "8000-a.b.%s" % tls_front.domain):                         # a dotted id
            status, body = host_request(tls_front, host, sni="x." + DOMAIN)
            assert status == 400 and b"PORT-SANDBOXID" in body, (host, status, body)
        # a bad E2b-Sandbox-Port
        status, body = host_request(tls_front, "127.0.0.1:%d" % tls_front.port, headers={
            "E2b-Sandbox-Id": a["sandboxID"], "E2b-Sandbox-Port": "80x",
            "X-Access-Token": a["trafficAccessToken"]})
        assert status == 400 and b"not a port" in body, body
        # a closed port: a clear 502, never a hang
        status, body = host_request(tls_front, "8123-%s.%s" % (a["sandboxID"], tls_front.domain),
                                    headers={"E2B-Traffic-Access-Token": a["trafficAccessToken"]})
        assert status == 502 and b"nothing answers" in body, body
    finally:
        kill(tls_front, KEY_A, a["sandboxID"])
        kill(tls_front, KEY_B, b["sandboxID"])
        c = tls_front.connection()
        c.request("DELETE", "/volumes/portsvol", headers={"X-API-KEY": KEY_A})
        c.getresponse().read()
        c.close()
    # a removed sandbox: its token still matches its id, the sandbox is not found
    status, body = host_request(tls_front, "8000-%s.%s" % (a["sandboxID"], tls_front.domain),
                                headers={"E2B-Traffic-Access-Token": a["trafficAccessToken"]})
    assert status == 404 and b"not found" in body, body


def test_a_sandbox_without_network_says_so(tls_front):
    a = create(tls_front, KEY_A, network=False)
    try:
        status, body = host_request(tls_front, "8000-%s.%s" % (a["sandboxID"], tls_front.domain),
                                    headers={"E2B-Traffic-Access-Token": a["trafficAccessToken"]})
        assert status == 502 and b"has no network" in body, body
    finally:
        kill(tls_front, KEY_A, a["sandboxID"])


# A server for the sandbox: GET /ws answers 101 and then echoes what comes; other paths are files.
ECHO_SERVER = r"""
import http.server
class H(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/ws":
            return super().do_GET()
        self.send_response(101)
        self.send_header("Upgrade", "echo")
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        while True:
            data = self.connection.recv(65536)
            if not data:
                return
            self.connection.sendall(data)
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
"""


def start_echo_server(netd, sandbox_id, as_uid=None):
    netd.call("sandbox.exec", sandbox_id=sandbox_id, background=True,
              command="mkdir -p /tmp/www && echo from-sandbox > /tmp/www/hi.txt && cat > /tmp/echo.py <<'EOF'\n%s\nEOF\n"
                      "cd /tmp/www && exec python3 /tmp/echo.py" % ECHO_SERVER)


def open_upgrade(port, host, headers, tls_context=None):
    """A connection that asked to upgrade: (socket, status line, what came after the head)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    if tls_context is not None:
        s = tls_context.wrap_socket(s, server_hostname=host.split(":")[0])
    head = "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n" % host
    s.sendall((head + "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        more = s.recv(65536)
        if not more:
            break
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    return s, head.split(b"\r\n")[0].decode(), rest


def echo(s, payload):
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        more = s.recv(65536)
        if not more:
            break
        got += more
    return got


def test_upgraded_connections_are_relayed_outlive_the_header_timeout_and_count_against_their_key(netd, tokens):
    """A WebSocket holds one of its key's --max-per-token while it is open and is not cut by
    --header-timeout (1 s here), which cuts a connection that sends no request."""
    f = Front(netd, "--tokens", tokens, "--max-per-token", "3", "--header-timeout", "1", tokens=False)
    a = None
    try:
        c = f.connection()
        c.request("POST", "/sandboxes", body=json.dumps({"network": {"denyOut": ["0.0.0.0/0"]}}),
                  headers={"X-API-KEY": KEY_A, "Content-Type": "application/json"})
        a = json.loads(c.getresponse().read())
        c.close()
        start_echo_server(netd, a["sandboxID"])
        names = {"E2b-Sandbox-Id": a["sandboxID"], "E2b-Sandbox-Port": "8000", "X-Access-Token": a["envdAccessToken"]}
        host = "127.0.0.1:%d" % f.port

        def opened():
            s, status, rest = open_upgrade(f.port, host, names)
            if " 101 " in status + " ":
                return s, rest
            s.close()
            return None
        first, rest = until("the echo server", opened)
        assert rest == b""
        assert echo(first, b"one") == b"one"
        second, _ = opened()
        # the third: its request and the two relays make the key's 3 (--max-per-token)
        third, status, _ = open_upgrade(f.port, host, names)
        third.close()
        assert " 429 " in status + " ", status
        # past --header-timeout: an idle connection without a request is cut, the relays are not
        idle = socket.create_connection(("127.0.0.1", f.port), timeout=30)
        assert idle.recv(1) == b""  # cut by the watchdog after 1 s
        idle.close()
        assert echo(first, b"x" * 200000) == b"x" * 200000
        assert echo(second, b"two") == b"two"
        first.close()
        # its relay ends, and with it its count: a new one is let in
        third = until("the first relay's end", opened)[0]
        assert echo(third, b"three") == b"three"
        third.close()
        # nsbox-http stops with a WebSocket open: it ends the relay (SIGTERM, not the kill after 30 s)
        assert f.stop() == 0, f.read_log()[-4000:]
        assert second.recv(1) == b""
        second.close()
    finally:
        if f.proc.poll() is None:
            f.stop()
        if a is not None:
            netd.call("sandbox.remove", sandbox_id=a["sandboxID"], force=True)


def test_without_tokens_a_pages_own_origin_reaches_its_sandbox_port_and_no_other(netd, tokens):
    """On loopback without --tokens a program of this host is served; a browser's request
    carries an Origin, which is served only for a sandbox's port whose Host it is (noVNC's
    page opening its WebSocket), never for nsbox-http's API or another Host."""
    port = free_port()
    domain = "%s:%d" % (DOMAIN, port)
    f = Front(netd, "--http", "127.0.0.1:%d" % port, "--e2b-domain", domain, tokens=False, uid=UID_A)
    f.port = port
    try:
        c = f.connection()
        c.request("POST", "/sandboxes", body=json.dumps({"network": {"denyOut": ["0.0.0.0/0"]}}),
                  headers={"X-API-KEY": "e2b_00", "Content-Type": "application/json"})
        a = json.loads(c.getresponse().read())
        c.close()
        assert a["domain"] == domain
        start_echo_server(netd, a["sandboxID"])
        host = "8000-%s.%s" % (a["sandboxID"], domain)

        def get(headers, path="/hi.txt"):
            c = f.connection()
            try:
                c.putrequest("GET", path, skip_host=True)
                for k, v in headers.items():
                    c.putheader(k, v)
                c.endheaders()
                r = c.getresponse()
                return r.status, r.read()
            finally:
                c.close()
        assert until("the server", lambda: get({"Host": host}) == (200, b"from-sandbox\n"))
        assert get({"Host": host, "Origin": "http://" + host}) == (200, b"from-sandbox\n")
        assert get({"Host": host, "Sec-Fetch-Site": "same-origin"}) == (200, b"from-sandbox\n")
        assert get({"Host": host, "Sec-Fetch-Site": "none"}) == (200, b"from-sandbox\n")  # typed by the user
        status, body = get({"Host": host, "Origin": "http://evil.example"})
        assert status == 403 and b"Origin" in body, body
        # another site's <img> sends no Origin; another sandbox's page is the same site
        for site in ("cross-site", "same-site"):
            status, body = get({"Host": host, "Sec-Fetch-Site": site})
            assert status == 403, (site, body)
        other = "8000-%s.%s" % (a["sandboxID"], domain.replace(DOMAIN, "x." + DOMAIN))
        status, body = get({"Host": host, "Origin": "http://" + other})
        assert status == 403, body
        status, body = get({"Host": "8000-0123abcd.%s" % domain})
        assert status == 404 and b"sandbox 0123abcd not found" in body, body  # an unknown sandbox
        # the page's own requests (a same-origin GET carries no Origin) may not name, in E2B's
        # headers, another sandbox or another port than its Host: here another sandbox's envd
        c = f.connection()
        c.request("POST", "/sandboxes", body=json.dumps({}),
                  headers={"X-API-KEY": "e2b_00", "Content-Type": "application/json"})
        b = json.loads(c.getresponse().read())
        c.close()
        netd.call("sandbox.exec", sandbox_id=b["sandboxID"], command="echo secret of b > /tmp/b.txt")
        same_origin = {"Host": host, "Sec-Fetch-Site": "same-origin"}
        for names in ({"E2b-Sandbox-Id": b["sandboxID"], "E2b-Sandbox-Port": "49983"},
                      {"E2b-Sandbox-Id": a["sandboxID"], "E2b-Sandbox-Port": "49983"},
                      {"E2b-Sandbox-Id": a["sandboxID"]},  # envd's port
                      {"E2b-Sandbox-Port": "49983"}):
            status, body = get(dict(same_origin, **names), "/files?path=/tmp/b.txt")
            assert status == 400 and b"the Host names" in body, (names, status, body)
        # repeating what the Host names is no harm (E2B's SDKs send them)
        names = {"E2b-Sandbox-Id": a["sandboxID"], "E2b-Sandbox-Port": "8000"}
        assert get(dict(same_origin, **names)) == (200, b"from-sandbox\n")
        c = f.connection()
        c.request("DELETE", "/sandboxes/" + b["sandboxID"], headers={"X-API-KEY": "e2b_00"})
        c.getresponse().read()
        c.close()
        # nsbox-http's own API from a page on the sandbox's origin: refused as before
        c = f.connection()
        c.request("POST", "/v1/rpc", body=json.dumps({"method": "sandbox.list", "params": {}}),
                  headers={"Origin": "http://" + host, "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == 403
        s, status, _ = open_upgrade(port, host, {"Origin": "http://" + host})
        assert " 101 " in status + " ", status
        assert echo(s, b"ws") == b"ws"
        s.close()
        c = f.connection()
        c.request("DELETE", "/sandboxes/" + a["sandboxID"], headers={"X-API-KEY": "e2b_00"})
        c.getresponse().read()
        c.close()
    finally:
        assert f.stop() == 0, f.read_log()[-4000:]


# A server that answers what no HTTP server should: by the path it is asked for.
HOSTILE_SERVER = r"""
import socket, threading, time
ANSWERS = {
    b"/nul": b"HTTP/1.0 200 OK\r\nX-A: a\0b\r\n\r\nbody",
    b"/nocolon": b"HTTP/1.0 200 OK\r\nno colon here\r\n\r\nbody",
    b"/notstatus": b"SSH-2.0-OpenSSH\r\n\r\n",
    b"/huge": b"HTTP/1.0 200 OK\r\nX-Big: " + b"x" * (100 << 10) + b"\r\n\r\n",
    b"/cut": b"HTTP/1.0 200 OK\r\nX-A: b",
    b"/switch": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
    b"/fine": b"HTTP/1.0 200 OK\r\nX-Fine: yes\r\n\r\nfine",
}
def serve(c):
    data = b""
    while b"\r\n\r\n" not in data:
        more = c.recv(65536)
        if not more:
            break
        data += more
    path = data.split(b" ")[1] if b" " in data else b""
    if path == b"/slow":
        # a head in two parts, the second after nsbox-http's first second of waiting
        c.sendall(b"HTTP/1.0 200 OK\r\n")
        time.sleep(1.5)
        c.sendall(b"X-Slow: yes\r\n\r\nslow")
        c.close()
        return
    c.sendall(ANSWERS.get(path, b"HTTP/1.0 404 Not Found\r\n\r\n"))
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8002))
s.listen(16)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],)).start()
"""


def test_a_server_in_the_sandbox_that_answers_no_http_or_is_paused_is_a_502(netd, tls_front):
    a = create(tls_front, KEY_A)
    try:
        netd.call("sandbox.exec", sandbox_id=a["sandboxID"], background=True,
                  command="cat > /tmp/hostile.py <<'EOF'\n%s\nEOF\nexec python3 /tmp/hostile.py" % HOSTILE_SERVER)
        host = "8002-%s.%s" % (a["sandboxID"], tls_front.domain)
        token = {"E2B-Traffic-Access-Token": a["trafficAccessToken"]}
        assert until("the server", lambda: host_request(tls_front, host, "/fine", token) == (200, b"fine"))
        for path in ("/nul", "/nocolon", "/notstatus", "/huge", "/cut", "/switch"):
            status, body = host_request(tls_front, host, path, token)
            assert status == 502, (path, status, body)
            assert b"port 8002 of sandbox " + a["sandboxID"].encode() in body, (path, body)
        # nsbox-http serves on
        assert host_request(tls_front, host, "/fine", token) == (200, b"fine")
        # a server slow to finish its head (past the second after which nsbox-http asks whether
        # the sandbox is paused) is read on from where its head stopped
        assert host_request(tls_front, host, "/slow", token) == (200, b"slow")
        # a paused sandbox: said at once, not held until --timeout
        netd.call("sandbox.pause", sandbox_id=a["sandboxID"], force=True)
        status, body = host_request(tls_front, host, "/fine", token)
        assert status == 502 and b"paused" in body, body
    finally:
        kill(tls_front, KEY_A, a["sandboxID"])


# A client of a relay in a network namespace of the test's: it opens the upgrade, says its
# status, and then echoes each line of its stdin through the relay.
NS_CLIENT = r"""
import socket, ssl, sys, time
addr, port, headers, cafile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
deadline = time.monotonic() + 60
while True:  # until the echo server answers and the key has a slot
    s = socket.create_connection((addr, port), timeout=30)
    if cafile:
        s = ssl.create_default_context(cafile=cafile).wrap_socket(s, server_hostname=addr)
    s.sendall(("GET /ws HTTP/1.1\r\nHost: %s:%d\r\nConnection: Upgrade\r\nUpgrade: echo\r\n%s\r\n"
               % (addr, port, headers)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        more = s.recv(65536)
        if not more:
            break
        data += more
    status = data.split(b"\r\n")[0].decode()
    if " 101 " in status or time.monotonic() > deadline:
        break
    s.close()
    time.sleep(0.1)
print(status, flush=True)
for line in sys.stdin:  # each line through the relay and back
    s.sendall(line.encode())
    got = b""
    while len(got) < len(line):
        more = s.recv(65536)
        if not more:
            sys.exit("the relay closed")
        got += more
    print(got.decode(), end="", flush=True)
"""


class ClientNamespace:
    """A network namespace of the test's, joined to the host's by a veth pair on a /30 of
    10.213.0.0/16 that no interface has: `host_addr` on the host's end, `addr` on its own."""

    def __init__(self):
        import secrets
        tag = secrets.token_hex(3)
        self.netns, self.host_if, self.peer_if = "nsbox-ka-" + tag, "tka" + tag, "tkap" + tag
        self.made = False
        for _ in range(64):
            net = "10.213.%d." % secrets.randbelow(256)
            if not run("ip", "-o", "addr", "show", "to", net + "0/30").stdout.strip():
                break
        self.host_addr, self.addr = net + "1", net + "2"

    def start(self):
        try:
            run("ip", "netns", "add", self.netns)
            self.made = True
            run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if)
            run("ip", "link", "set", self.peer_if, "netns", self.netns)
            run("ip", "addr", "add", self.host_addr + "/30", "dev", self.host_if)
            run("ip", "link", "set", self.host_if, "up")
            run("ip", "addr", "add", self.addr + "/30", "dev", self.peer_if, netns=self.netns)
            run("ip", "link", "set", self.peer_if, "up", netns=self.netns)
        except BaseException:
            self.stop()
            raise
        return self

    def cut(self):
        """Nothing in or out of the namespace from now: no FIN, no RST, no answer to a probe."""
        p = subprocess.run(["ip", "netns", "exec", self.netns, "nft", "-f", "-"], capture_output=True,
                           input=b"table inet cut {\n"
                                 b"  chain in { type filter hook input priority 0; policy drop; }\n"
                                 b"  chain out { type filter hook output priority 0; policy drop; }\n"
                                 b"}\n")
        assert p.returncode == 0, p.stderr

    def stop(self):
        if self.made:
            run("ip", "netns", "del", self.netns, check=False)
        run("ip", "link", "del", self.host_if, check=False)  # gone with its peer, unless half made


def make_certificate(directory, *addresses):
    """(cert.pem, key.pem) of a self-signed certificate for these IP addresses."""
    cert, key = (os.path.join(directory, n) for n in ("cert.pem", "key.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=nsbox-test", "-addext",
                    "subjectAltName=" + ",".join("IP:" + a for a in addresses),
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    os.chmod(key, 0o644)
    return cert, key


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_relay_whose_client_vanished_without_a_close_is_let_go_and_frees_its_slot(netd, tokens, scheme):
    """A WebSocket's client in a namespace whose network is then cut (no FIN, no RST): TCP
    keepalive (--keepalive-seconds 1: silent 1 s, then 6 probes 1 s apart) finds it gone, the
    relay ends, says why, and its --max-per-token slot comes back; while it answered, a quiet
    relay was kept. --max-per-token 2: a relay and the request of the next upgrade."""
    ns = ClientNamespace().start()
    tmp = tempfile.mkdtemp(prefix="nsbox-e2b-keepalive-")
    client = f = a = None
    try:
        tls = []
        cert = ""
        if scheme == "https":
            cert, key = make_certificate(tmp, "127.0.0.1", ns.host_addr)
            tls = ["--tls-cert", cert, "--tls-key", key]
        f = Front(netd, "--tokens", tokens, "--http", ns.host_addr + ":0", "--max-per-token", "2",
                  "--keepalive-seconds", "1", *tls, tokens=False, scheme=scheme)
        context = ssl.create_default_context(cafile=cert) if cert else None
        f.context = context
        ns_port = int(until("the namespace's address", lambda: re.search(
            r"listening on %s:0 port (\d+)" % re.escape(ns.host_addr), f.read_log())).group(1))
        a = create(f, KEY_A)
        start_echo_server(netd, a["sandboxID"])
        names = {"E2b-Sandbox-Id": a["sandboxID"], "E2b-Sandbox-Port": "8000", "X-Access-Token": a["envdAccessToken"]}
        host = "127.0.0.1:%d" % f.port

        def upgrade():
            """A relay's socket, or None when the upgrade was refused."""
            s, status, _ = open_upgrade(f.port, host, names, context)
            if " 101 " in status + " ":
                return s
            s.close()
            assert " 429 " in status + " ", status
            return None
        client = subprocess.Popen(
            ["ip", "netns", "exec", ns.netns, "/usr/bin/python3", "-c", NS_CLIENT, ns.host_addr, str(ns_port),
             "".join("%s: %s\r\n" % kv for kv in names.items()), cert],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        status = client.stdout.readline()
        assert b" 101 " in status, status

        def through_the_relay(line):
            client.stdin.write(line)
            client.stdin.flush()
            return client.stdout.readline()
        assert through_the_relay(b"alive\n") == b"alive\n"
        # quiet for longer than a dead peer is given (1 s + 6 x 1 s), answering the probes: kept
        time.sleep(9)
        assert through_the_relay(b"quiet but alive\n") == b"quiet but alive\n"
        # the relay holds its slot: another upgrade of the key is refused
        assert upgrade() is None
        ns.cut()
        # the client is gone without a word; its relay is let go and its slot comes back
        s = until("the vanished client's relay to be let go", upgrade, seconds=90)
        assert echo(s, b"live") == b"live"
        s.close()
        assert re.search(r"WebSocket to port 8000 of sandbox %s \(uid %d\) closed: its client stopped answering"
                         % (a["sandboxID"], UID_A), f.read_log()), f.read_log()[-3000:]
    finally:
        try:
            if client is not None:
                client.kill()
                client.wait()
            if a is not None:
                netd.call("sandbox.remove", sandbox_id=a["sandboxID"], force=True)
            if f is not None:
                rc = f.stop()
                assert rc == 0, f.read_log()[-4000:]
        finally:
            ns.stop()
            shutil.rmtree(tmp, ignore_errors=True)
