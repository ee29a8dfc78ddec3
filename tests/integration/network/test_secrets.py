# SPDX-License-Identifier: Apache-2.0
"""Secrets the sandbox never sees: sandbox.create's `secrets` gives the
sandbox a placeholder in its env (NSBOX_SECRET_NAME), and nsbox-egress puts
the value into requests to the secret's hosts only, in one place of them
(the secret's header, or the Authorization header the sandbox wrote the
placeholder in), and masks it in what comes back over HTTPS. The upstream is
upstream.py's test-made namespace, whose servers log every request's
headers; a value found anywhere else (the sandbox's env, /proc, files,
another host, sandbox.info, nsboxd's and the proxy's log) fails the test."""
import json
import os
import secrets as random_secrets
import sys
import textwrap
import time

import pytest

import upstream as U
from conftest import REPO
from nsbox_client import RpcError
from test_egress_restore import live_restore_services
from test_network import ALLOWED_ONLY, NETLIB, info_stats, landed, net, net_daemon, net_exec, sbs, up  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.serial, pytest.mark.xdist_group("host-network")]


@pytest.fixture(scope="module")
def netd(up):
    """nsboxd whose proxy trusts the upstream's test CA (egress_ca_file) to verify it."""
    import tempfile
    d = net_daemon(tempfile.mkdtemp(prefix="nsbox-secrets-"), 1690000000, egress_ca_file=up.ca_pem)
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def value():
    return "sv-" + random_secrets.token_hex(20)


def make(sbs, **secrets):
    return sbs.create(ALLOWED_ONLY, secrets=secrets)


def request(path, host, *headers):
    head = "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n" % (
        path, host, "".join(h + "\r\n" for h in headers))
    return head


def test_a_secret_reaches_its_host_and_never_the_sandbox(netd, sbs, up):
    api, token = value(), value()
    sid = make(sbs, API_KEY={"value": api, "hosts": ["Allowed.test"], "header": "X-Api-Key: {value}"},
               TOKEN={"value": token, "hosts": ["allowed.test"]})
    mark = up.mark()
    v = net(netd, sid, r"""
        import glob, subprocess
        env = dict(os.environ)
        api, token = env["NSBOX_SECRET_API_KEY"], env["NSBOX_SECRET_TOKEN"]
        req = ("GET /s HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: token %s\r\n"
               "X-Api-Key: mine\r\nConnection: close\r\n\r\n" % token)
        r = http('allowed.test', raw=req.encode())
        in_path = http('allowed.test', raw=req.replace("GET /s ", "GET /s?t=%s " % token).encode())
        seen = []
        for p in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):
            try:
                seen.append(open(p, 'rb').read().decode(errors='replace'))
            except OSError:
                pass
        out = subprocess.run(['env'], capture_output=True, text=True).stdout
        verdict(api=api, token=token, r=r, in_path=in_path, procs="\n".join(seen), env=out)
    """)
    assert v["api"].startswith("nsbox-secret-") and v["token"].startswith("nsbox-secret-")
    assert v["api"] != v["token"]
    for where in (v["procs"], v["env"]):
        assert api not in where and token not in where
    assert "NSBOX_SECRET_API_KEY=" + v["api"] in v["env"]
    assert v["r"].get("status") == 200, v["r"]
    # The placeholder in the path (where a host could echo it back) is refused, not made the value.
    assert v["in_path"].get("status") == 403 and token not in v["in_path"]["raw"], v["in_path"]
    hits = landed(up, mark, local=U.ALLOWED)
    assert len(hits) == 1, hits
    headers = hits[0]["headers"]
    # The secret's header replaces the sandbox's own; the placeholder in Authorization becomes the value.
    assert headers["X-Api-Key"] == api
    assert headers["Authorization"] == "token " + token
    assert hits[0]["path"] == "/s"
    # This upstream echoes what it saw, the values too: they come back masked (each byte a '*').
    assert api not in v["r"]["raw"] and token not in v["r"]["raw"], v["r"]
    assert v["r"]["json"]["headers"]["Authorization"] == "token " + "*" * len(token), v["r"]
    assert v["r"]["json"]["headers"]["X-Api-Key"] == "*" * len(api), v["r"]
    info = netd.call("sandbox.info", sandbox_id=sid)
    assert sorted(info["secrets"]) == ["API_KEY", "TOKEN"]
    assert api not in json.dumps(info) and token not in json.dumps(info)
    listing = json.dumps(netd.call("sandbox.list"))
    assert api not in listing and token not in listing
    log = netd.read_log()
    assert api not in log and token not in log
    # The sandbox's files (the value given in halves, so the exec's argv in the log never holds it whole).
    for secret in (api, token):
        half = len(secret) // 2
        files = netd.call("sandbox.exec", sandbox_id=sid, user="root", timeout_seconds=60,
                          argv=["sh", "-c", 'grep -rlsF -e "$1$2" / --exclude-dir=proc --exclude-dir=sys '
                                '--exclude-dir=dev; true', "sh", secret[:half], secret[half:]])
        assert files["stdout"] == "", files


def test_a_placeholder_to_another_host_is_refused_and_logged(netd, sbs, up):
    secret = value()
    sid = make(sbs, TOKEN={"value": secret, "hosts": ["allowed.test"], "header": "X-Api-Key: {value}"})
    mark = up.mark()
    r = net_exec(netd, sid, r"""
        token = os.environ["NSBOX_SECRET_TOKEN"]
        verdict(other=http('index.test', raw=(
                    "GET /leak HTTP/1.1\r\nHost: index.test\r\nX-Token: %s\r\nConnection: close\r\n\r\n"
                    % token).encode()),
                plain=http('index.test', path='/plain', host='index.test'))
    """)
    v = r["verdict"]
    assert v["other"].get("status") == 403, v["other"]
    assert "nsbox: network policy refused index.test" in v["other"]["body"]
    assert "index.test:80" in r.get("network_refused", []), r
    # Another host gets neither the placeholder's request nor the secret's header.
    assert v["plain"].get("status") == 200, v["plain"]
    hits = landed(up, mark)
    assert [h["path"] for h in hits] == ["/plain"], hits
    assert "X-Api-Key" not in hits[0]["headers"]
    log = netd.read_log()
    assert "placeholder of secret TOKEN" in log
    assert secret not in log


def test_a_redirect_to_another_host_does_not_take_the_secret_along(netd, sbs, up):
    secret = value()
    sid = make(sbs, TOKEN={"value": secret, "hosts": ["allowed.test"]})
    mark = up.mark()
    v = net(netd, sid, r"""
        import urllib.request, urllib.error
        token = os.environ["NSBOX_SECRET_TOKEN"]
        req = urllib.request.Request("http://allowed.test/redirect?http://index.test/landed",
                                     headers={"Authorization": "token " + token})
        try:
            urllib.request.urlopen(req, timeout=20)
            verdict(status=200)
        except urllib.error.HTTPError as e:
            verdict(status=e.code, body=e.read().decode(errors='replace'))
    """)
    assert v["status"] == 403 and "refused index.test" in v["body"], v
    hits = landed(up, mark)
    assert [(h["local"], h["path"]) for h in hits] == [(U.ALLOWED, "/redirect?http://index.test/landed")], hits
    assert hits[0]["headers"]["Authorization"] == "token " + secret


@pytest.mark.parametrize("secrets,why", [
    ("x", "secrets must be an object"),
    ({"1BAD": {"value": "v", "hosts": ["a.test"]}}, "secret names"),
    ({"A": "v"}, "secrets.A must be an object"),
    ({"A": {"value": "", "hosts": ["a.test"]}}, "secrets.A.value"),
    ({"A": {"value": "v\r\nX: y", "hosts": ["a.test"]}}, "secrets.A.value"),
    ({"A": {"value": "v", "hosts": []}}, "secrets.A.hosts"),
    ({"A": {"value": "v", "hosts": ["10.0.0.1"]}}, "secrets.A.hosts[0]"),
    ({"A": {"value": "v", "hosts": ["a b"]}}, "secrets.A.hosts[0]"),
    ({"A": {"value": "v", "hosts": ["a.test"], "header": "Authorization Bearer {value}"}}, "secrets.A.header"),
    ({"A": {"value": "v", "hosts": ["a.test"], "header": "X: {value} {value}"}}, "secrets.A.header"),
    ({"A": {"value": "v", "hosts": ["a.test"], "header": "X: v\r\nY: {value}"}}, "secrets.A.header"),
    ({"A": {"value": "v", "hosts": ["a.test"], "other": 1}}, "unknown field"),
])
def test_bad_secrets_are_clean_errors(netd, secrets, why):
    with pytest.raises(RpcError) as e:
        netd.call("sandbox.create", network=ALLOWED_ONLY, secrets=secrets)
    assert why in str(e.value), e.value
    assert "v\r\n" not in str(e.value)


def test_a_client_env_may_not_shadow_a_placeholder(netd):
    with pytest.raises(RpcError) as e:
        netd.call("sandbox.create", network=ALLOWED_ONLY, env={"NSBOX_SECRET_A": "x"},
                  secrets={"A": {"value": "v", "hosts": ["a.test"]}})
    assert "env.NSBOX_SECRET_A" in str(e.value)


def test_cli_secret_file_and_stdin_never_on_argv(netd, sbs, up, tmp_path):
    from_file, from_stdin = value(), value()
    path = tmp_path / "token"
    path.write_text(from_file + "\n")
    r = netd.cli("create", "--network", ALLOWED_ONLY, "--secret-file", "FILE=%s@allowed.test" % path,
                 "--secret-file", "STDIN=-@allowed.test,index.test",
                 "--secret-header", "STDIN=X-Stdin: Bearer {value}", input=from_stdin.encode())
    assert r.returncode == 0, r
    sid = r.stdout.decode().strip()
    sbs.ids.append(sid)
    info = netd.call("sandbox.info", sandbox_id=sid)
    assert sorted(info["secrets"]) == ["FILE", "STDIN"]
    mark = up.mark()
    v = net(netd, sid, r"""
        verdict(r=http('allowed.test', raw=("GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: %s\r\n"
                                            "Connection: close\r\n\r\n" % os.environ["NSBOX_SECRET_FILE"]).encode()))
    """)
    assert v["r"].get("status") == 200, v
    (hit,) = landed(up, mark)
    assert hit["headers"]["Authorization"] == from_file
    assert hit["headers"]["X-Stdin"] == "Bearer " + from_stdin
    # --secret NAME=VALUE@HOSTS: the value may hold '@', the hosts follow the last one.
    r = netd.cli("create", "--network", ALLOWED_ONLY, "--secret", "ARGV=a@b@allowed.test")
    assert r.returncode == 0, r
    sbs.ids.append(r.stdout.decode().strip())
    for bad in ("NOHOSTS=value", "=v@h.test", "X=v@"):
        r = netd.cli("create", "--secret", bad)
        assert r.returncode == 125 and b"--secret NAME=VALUE@HOST" in r.stderr, r
    r = netd.cli("create", "--network", ALLOWED_ONLY, "--secret-file", "X=%s@h.test" % (tmp_path / "none"))
    assert r.returncode == 125 and b"--secret-file: open" in r.stderr, r


def test_sdk_create_with_secrets(netd, up):
    sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
    from nsbox import Sandbox
    secret = value()
    mark = up.mark()
    with Sandbox.create(socket=netd.socket, network=ALLOWED_ONLY,
                        secrets={"KEY": {"value": secret, "hosts": ["allowed.test"], "header": "X-Key: {value}"}}) as sb:
        r = sb.commands.run(["python3", "-c", "import urllib.request;"
                             "urllib.request.urlopen('http://allowed.test/sdk', timeout=20).read();"
                             "import os; print(os.environ['NSBOX_SECRET_KEY'])"])
        assert r.exit_code == 0, r
        assert r.stdout.startswith("nsbox-secret-") and secret not in r.stdout
    (hit,) = landed(up, mark)
    assert hit["path"] == "/sdk" and hit["headers"]["X-Key"] == secret



HTTPS_CLIENTS = r"""
import ssl, subprocess, urllib.request, urllib.error
def https_default(url, headers):
    # The default context: the system's bundle (where nsboxd put the sandbox's CA), SSL_CERT_FILE.
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=20) as r:
            return {"status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode(errors="replace")}
    except (OSError, ssl.SSLError) as e:
        return {"error": str(e)}
"""


def test_https_to_a_secrets_host_is_intercepted_with_the_sandboxs_ca(netd, sbs, up):
    secret = value()
    sid = make(sbs, TOKEN={"value": secret, "hosts": ["allowed.test"], "header": "Authorization: Bearer {value}"})
    mark = up.mark()
    v = net(netd, sid, HTTPS_CLIENTS + textwrap.dedent(r"""
        token = os.environ["NSBOX_SECRET_TOKEN"]
        verdict(a=https_default("https://allowed.test/tls", {"Authorization": "Bearer " + token}),
                other=https_default("https://index.test/leak", {"X-Token": token}),
                env={k: os.environ.get(k) for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")},
                ca=open("/etc/nsbox/secrets-ca.pem").read(),
                bundle_ends=open("/etc/ssl/certs/ca-certificates.crt").read()[-3000:])
    """))
    assert v["a"].get("status") == 200, v
    hits = landed(up, mark)
    a = [h for h in hits if h["local"] == U.ALLOWED]
    assert len(a) == 1 and a[0]["proto"] == "https" and a[0]["sni"] == "allowed.test", hits
    assert a[0]["headers"]["Authorization"] == "Bearer " + secret and a[0]["path"] == "/tls"
    # The upstream echoes the request, the value too: the sandbox gets it masked, as long as it was.
    assert secret not in v["a"]["body"] and '"Bearer %s"' % ("*" * len(secret)) in v["a"]["body"], v["a"]
    # index.test has no secret: its TLS is end to end (the upstream's own certificate, which the
    # sandbox's default bundle does not trust), and the placeholder never becomes the value there.
    assert "error" in v["other"] and "CERTIFICATE_VERIFY_FAILED" in v["other"]["error"], v["other"]
    assert all(secret not in json.dumps(h) for h in hits if h["local"] != U.ALLOWED), hits
    assert v["env"] == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
                        "REQUESTS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
                        "NODE_EXTRA_CA_CERTS": "/etc/nsbox/secrets-ca.pem"}
    assert "PRIVATE KEY" not in v["ca"] and v["ca"].strip() in v["bundle_ends"]
    # The CA is the sandbox's own: another sandbox gets another one.
    sid2 = make(sbs, TOKEN={"value": value(), "hosts": ["allowed.test"]})
    ca2 = netd.call("sandbox.exec", sandbox_id=sid2, argv=["cat", "/etc/nsbox/secrets-ca.pem"])["stdout"]
    assert ca2.startswith("-----BEGIN CERTIFICATE-----") and ca2 != v["ca"]
    # No file of the sandbox holds a private key.
    keys = netd.call("sandbox.exec", sandbox_id=sid, user="root", timeout_seconds=60,
                     argv=["sh", "-c", "grep -rlsF 'PRIVATE KEY' / --exclude-dir=proc --exclude-dir=sys "
                           "--exclude-dir=dev --exclude-dir=usr; true"])
    assert keys["stdout"] == "", keys
    assert secret not in netd.read_log()


def test_https_placeholder_of_another_hosts_secret_is_refused_inside_tls(netd, sbs, up):
    mine, theirs = value(), value()
    sid = make(sbs, MINE={"value": mine, "hosts": ["allowed.test"]},
               THEIRS={"value": theirs, "hosts": ["index.test"]})
    mark = up.mark()
    v = net(netd, sid, HTTPS_CLIENTS + textwrap.dedent(r"""
        verdict(r=https_default("https://allowed.test/x", {"X-Token": os.environ["NSBOX_SECRET_THEIRS"]}))
    """))
    assert v["r"].get("status") == 403 and "refused allowed.test" in v["r"]["body"], v
    assert landed(up, mark, local=U.ALLOWED) == []
    log = netd.read_log()
    assert "placeholder of secret THEIRS" in log and theirs not in log and mine not in log


def test_a_placeholder_in_a_request_body_to_another_host_is_refused(netd, sbs, up):
    """Not only the head: a placeholder in the body of a request to a host
    not of its secret is refused before the request reaches the host, over
    plain HTTP and inside an intercepted TLS connection, and logged."""
    mine, theirs = value(), value()
    sid = make(sbs, MINE={"value": mine, "hosts": ["allowed.test"]},
               THEIRS={"value": theirs, "hosts": ["index.test"]})
    mark = up.mark()
    r = net_exec(netd, sid, HTTPS_CLIENTS + textwrap.dedent(r"""
        from http.client import HTTPSConnection
        mine = os.environ["NSBOX_SECRET_MINE"]
        body = ("x" * 3000 + "token=" + mine).encode()
        plain = http('index.test', raw=(
            "POST /plain-body HTTP/1.1\r\nHost: index.test\r\nContent-Length: %d\r\n"
            "Connection: close\r\n\r\n" % len(body)).encode() + body)
        tls = HTTPSConnection("allowed.test", timeout=20)
        tls.request("POST", "/tls-body", body=("k=" + os.environ["NSBOX_SECRET_THEIRS"]).encode())
        resp = tls.getresponse()
        verdict(plain=plain, tls={"status": resp.status, "body": resp.read().decode(errors="replace")})
    """))
    v = r["verdict"]
    assert v["plain"].get("status") == 403 and "refused index.test" in v["plain"]["body"], v["plain"]
    assert v["tls"]["status"] == 403 and "refused allowed.test" in v["tls"]["body"], v["tls"]
    assert "index.test:80" in r.get("network_refused", []), r
    # Neither request reached its host, head or body.
    assert landed(up, mark) == [], landed(up, mark)
    log = netd.read_log()
    assert "placeholder of secret MINE" in log and "placeholder of secret THEIRS" in log
    assert mine not in log and theirs not in log


def test_a_placeholder_split_by_a_chunked_bodys_framing_is_refused(netd, sbs, up):
    """A chunked body whose placeholder is cut in two by the chunk framing
    (a chunk-size line between its halves) is refused all the same, over
    plain HTTP and inside intercepted TLS: the chunks' data is searched as
    the one stream the host decodes."""
    token = value()
    sid = make(sbs, TOKEN={"value": token, "hosts": ["allowed.test"]})
    mark = up.mark()
    r = net_exec(netd, sid, RAW_TLS + textwrap.dedent(r"""
        token = os.environ["NSBOX_SECRET_TOKEN"]
        half = len(token) // 2
        first, second = "k=" + token[:half], token[half:] + "&end=1"
        raw = ("POST /chunked HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n"
               "Connection: close\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
               % (len(first), first, len(second), second)).encode()
        verdict(http=http("allowed.test", raw=raw), https=over_tls(raw))
    """), timeout=120)
    v = r["verdict"]
    for proto in ("http", "https"):
        assert v[proto].get("status") == 403 and "refused allowed.test" in v[proto]["body"], (proto, v)
    assert [h for h in landed(up, mark) if h["path"] == "/chunked"] == [], landed(up, mark)
    assert "allowed.test:80" in r.get("network_refused", []), r
    log = netd.read_log()
    assert log.count("placeholder of secret TOKEN outside its header (Authorization)") >= 2, log[-3000:]
    assert token not in log


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_keep_alive_connection_gets_the_secret_in_each_request(netd, sbs, up, scheme):
    """HTTP/1.1 keep-alive over an intercepted TLS connection, and over plain
    HTTP on port 80: every request on it is rewritten (the value put in), not
    only the first; the secrets' use counts in the sandbox's egress stats."""
    secret = value()
    sid = make(sbs, TOKEN={"value": secret, "hosts": ["allowed.test"], "header": "Authorization: Bearer {value}"})
    mark = up.mark()
    v = net(netd, sid, r"""
        from http.client import HTTPConnection, HTTPSConnection
        token = os.environ["NSBOX_SECRET_TOKEN"]
        conn = (HTTPSConnection if "SCHEME" == "https" else HTTPConnection)("allowed.test", timeout=20)
        out, socks = [], []
        for i in range(3):
            try:
                conn.request("GET", "/keep-%d" % i, headers={"Authorization": "Bearer " + token})
                r = conn.getresponse()
                out.append({"status": r.status, "body": r.read().decode(errors="replace")})
                socks.append(id(conn.sock))
            except Exception as e:
                out.append({"error": "%s: %s" % (type(e).__name__, e)})
                break
        verdict(out=out, one_connection=len(set(socks)) == 1 and conn.sock is not None)
    """.replace("SCHEME", scheme))
    assert [o.get("status") for o in v["out"]] == [200, 200, 200], v
    assert v["one_connection"], v
    hits = landed(up, mark, local=U.ALLOWED)
    assert [h["path"] for h in hits] == ["/keep-%d" % i for i in range(3)], hits
    for h in hits:
        assert h["headers"]["Authorization"] == "Bearer " + secret, h
    assert all(secret not in o["body"] for o in v["out"]), v
    # The proxy kept one connection upstream too.
    assert [h["request_on_connection"] for h in hits] == [1, 2, 3], hits
    _, stats = info_stats(netd, sid, lambda s: s.get("secrets_injected", 0) >= 3)
    assert stats.get("secrets_injected") == 3, stats


def test_plain_http_keep_alive_judges_each_request(netd, sbs, up):
    """On a kept-alive plain HTTP connection to a secret's host, a later
    request is judged as the first: its placeholder outside its place is
    refused (403, never reaching the host), and another Host is 421."""
    secret = value()
    sid = make(sbs, TOKEN={"value": secret, "hosts": ["allowed.test"]})
    mark = up.mark()
    v = net(netd, sid, r"""
        from http.client import HTTPConnection
        token = os.environ["NSBOX_SECRET_TOKEN"]
        def two(second_path, second_headers):
            conn = HTTPConnection("allowed.test", timeout=20)
            out = []
            for path, headers in (("/first", {"Authorization": "token " + token}), (second_path, second_headers)):
                conn.request("GET", path, headers=headers)
                r = conn.getresponse()
                out.append([r.status, r.read().decode(errors="replace")])
            return out
        verdict(in_path=two("/second?t=" + token, {}), other_host=two("/third", {"Host": "index.test"}))
    """)
    assert [o[0] for o in v["in_path"]] == [200, 403] and "refused allowed.test" in v["in_path"][1][1], v
    assert [o[0] for o in v["other_host"]] == [200, 421], v
    hits = landed(up, mark)
    assert [h["path"] for h in hits] == ["/first", "/first"], hits
    assert all(h["headers"]["Authorization"] == "token " + secret for h in hits), hits
    log = netd.read_log()
    assert "network policy refused allowed.test:80 (carries the placeholder of secret TOKEN outside its header" in log
    assert secret not in log


def test_https_through_the_explicit_proxy_is_intercepted_too(netd, sbs, up):
    """A client with HTTPS_PROXY=http://gateway:3128 (CONNECT) gets the secret in as a transparent one does."""
    secret = value()
    sid = make(sbs, TOKEN={"value": secret, "hosts": ["allowed.test"], "header": "X-T: {value}"})
    mark = up.mark()
    v = net(netd, sid, HTTPS_CLIENTS + textwrap.dedent(r"""
        proxy = "http://%s:3128" % gateway()
        urllib.request.install_opener(urllib.request.build_opener(urllib.request.ProxyHandler({"https": proxy})))
        verdict(r=https_default("https://allowed.test/via-connect", {}))
    """))
    assert v["r"].get("status") == 200, v
    (hit,) = landed(up, mark)
    assert hit["path"] == "/via-connect" and hit["headers"]["X-T"] == secret


def test_https_upstream_certificate_is_verified(up):
    """Without the test CA the proxy cannot verify the upstream: the sandbox gets a 502 saying so,
    never a connection the proxy did not verify."""
    import tempfile
    d = net_daemon(tempfile.mkdtemp(prefix="nsbox-secrets-"), 1691000000)
    try:
        sid = d.call("sandbox.create", network=ALLOWED_ONLY,
                     secrets={"T": {"value": value(), "hosts": ["allowed.test"]}})["sandbox_id"]
        mark = up.mark()
        v = net(d, sid, HTTPS_CLIENTS + textwrap.dedent(r"""
            verdict(r=https_default("https://allowed.test/unverified", {}))
        """))
        assert v["r"].get("status") == 502 and "certificate" in v["r"]["body"], v
        assert [h["path"] for h in landed(up, mark) if h.get("path")] == []
    finally:
        d.stop()


def test_no_value_or_ca_key_in_the_state_dir_or_a_snapshot(netd, sbs, up):
    """nsboxd's files (sandbox records, snapshots) never hold a value or a CA key; a sandbox
    made from a snapshot of one with secrets has none."""
    secret = value()
    sid = make(sbs, TOKEN={"value": secret, "hosts": ["allowed.test"]})
    netd.call("sandbox.exec", sandbox_id=sid, argv=["sh", "-c", "echo $NSBOX_SECRET_TOKEN > /workspace/p"])
    snap = netd.call("sandbox.snapshot", sandbox_id=sid, remove_when_unused=True)
    fork = sbs.create(ALLOWED_ONLY, from_snapshot=snap["snapshot_id"])
    info = netd.call("sandbox.info", sandbox_id=fork)
    assert "secrets" not in info
    r = netd.call("sandbox.exec", sandbox_id=fork, argv=["sh", "-c", "cat /workspace/p; env"])
    assert "NSBOX_SECRET_TOKEN=" not in r["stdout"] and secret not in r["stdout"]
    found = []
    for root, _dirs, files in os.walk(netd.state):
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if secret.encode() in data or b"PRIVATE KEY" in data:
                found.append(path)
    assert found == []


def test_update_replaces_the_secrets_of_a_live_sandbox(netd, sbs, up):
    first, second, other = value(), value(), value()
    sid = make(sbs, A={"value": first, "hosts": ["allowed.test"]})
    env = lambda: dict(l.split("=", 1) for l in netd.call(  # noqa: E731
        "sandbox.exec", sandbox_id=sid, argv=["env"])["stdout"].splitlines() if "=" in l)
    placeholder_a = env()["NSBOX_SECRET_A"]

    def sent(name, header="Authorization"):
        mark = up.mark()
        v = net(netd, sid, "verdict(r=http('allowed.test', raw=%r.encode()))"
                % request("/", "allowed.test", "Authorization: " + name))
        assert v["r"].get("status") == 200, v
        return landed(up, mark)[0]["headers"][header]

    assert sent(placeholder_a) == first
    info = netd.call("sandbox.update", sandbox_id=sid,
                     secrets={"A": {"value": second, "hosts": ["allowed.test"]},
                              "B": {"value": other, "hosts": ["allowed.test"], "header": "X-B: {value}"}})
    assert sorted(info["secrets"]) == ["A", "B"] and second not in json.dumps(info)
    now = env()
    # A kept its placeholder (running processes keep working), with the new value behind it.
    assert now["NSBOX_SECRET_A"] == placeholder_a and now["NSBOX_SECRET_B"].startswith("nsbox-secret-")
    assert sent(placeholder_a) == second
    assert sent("x", header="X-B") == other
    # None left: the placeholders are plain strings again, the env no longer has them.
    info = netd.call("sandbox.update", sandbox_id=sid, secrets=None)
    assert "secrets" not in info
    assert not [k for k in env() if k.startswith("NSBOX_SECRET_")]
    assert sent(placeholder_a) == placeholder_a
    with pytest.raises(RpcError) as e:
        netd.call("sandbox.update", sandbox_id=sid, secrets={"A": {"value": "v"}})
    assert "secrets.A.hosts" in str(e.value)
    log = netd.read_log()
    assert first not in log and second not in log and other not in log


def test_update_gives_secrets_to_a_sandbox_without_network_then_with(netd, sbs, up):
    secret = value()
    sid = sbs.create()
    netd.call("sandbox.update", sandbox_id=sid, secrets={"T": {"value": secret, "hosts": ["allowed.test"],
                                                               "header": "X-T: {value}"}})
    netd.call("sandbox.update", sandbox_id=sid, network=ALLOWED_ONLY)
    mark = up.mark()
    v = net(netd, sid, HTTPS_CLIENTS + textwrap.dedent(r"""
        verdict(r=https_default("https://allowed.test/late", {}))
    """))
    assert v["r"].get("status") == 200, v
    (hit,) = landed(up, mark)
    assert hit["headers"]["X-T"] == secret


def test_cli_update_replaces_and_removes_secrets(netd, sbs, up, tmp_path):
    secret = value()
    sid = make(sbs, A={"value": value(), "hosts": ["allowed.test"]})
    path = tmp_path / "b"
    path.write_text(secret)
    r = netd.cli("--json", "update", "--secret-file", "B=%s@allowed.test" % path,
                 "--secret-header", "B=X-B: {value}", sid)
    assert r.returncode == 0, r
    assert json.loads(r.stdout)["secrets"] == ["B"]
    mark = up.mark()
    v = net(netd, sid, "verdict(r=http('allowed.test', host='allowed.test', path='/cli-update'))")
    assert v["r"].get("status") == 200, v
    (hit,) = landed(up, mark)
    assert hit["headers"]["X-B"] == secret
    r = netd.cli("--json", "update", "--no-secrets", sid)
    assert r.returncode == 0 and "secrets" not in json.loads(r.stdout), r
    r = netd.cli("update", "--no-secrets", "--secret", "C=v@allowed.test", sid)
    assert r.returncode == 125 and b"--no-secrets or secrets" in r.stderr, r


# Raw requests over the sandbox's TLS to a secret's host (its CA is in the default bundle).
RAW_TLS = r"""
import ssl
def head(path, headers, method="GET", body=b""):
    lines = "".join(h + "\r\n" for h in headers)
    if body:
        lines += "Content-Length: %d\r\n" % len(body)
    return ("%s %s HTTP/1.1\r\nHost: allowed.test\r\n%sConnection: close\r\n\r\n"
            % (method, path, lines)).encode() + body
def over_tls(raw):
    ctx = ssl.create_default_context()
    try:
        s = ctx.wrap_socket(socket.create_connection(("allowed.test", 443), timeout=20),
                            server_hostname="allowed.test")
    except (OSError, ssl.SSLError) as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    with s:
        s.sendall(raw)
        return _parse(*_read_all(s))
"""


def test_a_placeholder_outside_its_place_is_refused_even_to_its_own_host(netd, sbs, up):
    """Hosts echo URLs and headers back (a 301's Location keeps the query,
    Access-Control-Allow-Origin repeats Origin, a 404 page quotes the path):
    a placeholder anywhere but its one place (the secret's header, or
    Authorization for a secret without one) is refused, to the secret's own
    host too, over plain HTTP and HTTPS, and logged; the request never
    reaches the host, so nothing can echo the value back."""
    token, key = value(), value()
    sid = make(sbs, TOKEN={"value": token, "hosts": ["allowed.test"]},
               KEY={"value": key, "hosts": ["allowed.test"], "header": "X-Api-Key: {value}"})
    mark = up.mark()
    r = net_exec(netd, sid, RAW_TLS + textwrap.dedent(r"""
        token, key = os.environ["NSBOX_SECRET_TOKEN"], os.environ["NSBOX_SECRET_KEY"]
        tries = {
            "path": head("/reflect/v1/" + token, []),
            "query": head("/reflect?key=" + token, []),
            "origin": head("/reflect", ["Origin: " + token]),
            "other_header": head("/reflect", ["X-Token: tok " + token]),
            "absolute_form": None,
            "header_secret_in_authorization": head("/reflect", ["Authorization: Bearer " + key]),
            "header_secret_in_origin": head("/reflect", ["Origin: " + key]),
            "body": head("/reflect", [], "POST", ("k=" + token).encode()),
        }
        out = {}
        for name, raw in tries.items():
            if raw is None:  # the explicit proxy's absolute-form request
                absolute = ("GET http://allowed.test/reflect/%s HTTP/1.1\r\nHost: allowed.test\r\n"
                            "Connection: close\r\n\r\n" % token).encode()
                out[name] = {"http": http(gateway(), port=3128, raw=absolute)}
                continue
            out[name] = {"http": http("allowed.test", raw=raw), "https": over_tls(raw)}
        verdict(out=out)
    """), timeout=120)
    out = r["verdict"]["out"]
    for name, by in out.items():
        for proto, got in by.items():
            assert got.get("status") == 403 and "refused allowed.test" in got["body"], (name, proto, got)
            assert token not in got["raw"] and key not in got["raw"], (name, proto)
    assert landed(up, mark) == [], landed(up, mark)
    assert "allowed.test:80" in r.get("network_refused", []), r
    log = netd.read_log()
    assert "placeholder of secret TOKEN outside its header (Authorization)" in log
    assert "placeholder of secret KEY outside its header (X-Api-Key)" in log
    assert token not in log and key not in log


def test_an_echoing_host_never_gives_a_value_back(netd, sbs, up):
    """Defence in depth: what the secret's host answers is relayed with each
    value masked, over HTTPS and plain HTTP alike: in the head as the
    placeholder again and in the body as many '*' (its length kept). The
    upstream's /reflect echoes every header it got, the values too, in its
    answer's head and body."""
    token, key = value(), value()
    sid = make(sbs, TOKEN={"value": token, "hosts": ["allowed.test"]},
               KEY={"value": key, "hosts": ["allowed.test"], "header": "X-Api-Key: {value}"})
    mark = up.mark()
    v = net(netd, sid, RAW_TLS + textwrap.dedent(r"""
        token = os.environ["NSBOX_SECRET_TOKEN"]
        raw = head("/reflect/ok", ["Authorization: token " + token, "Origin: https://example.test"])
        verdict(r=over_tls(raw), plain=http("allowed.test", raw=raw), token=token, key=os.environ["NSBOX_SECRET_KEY"])
    """))
    hits = landed(up, mark, local=U.ALLOWED)
    assert sorted(h["proto"] for h in hits) == ["http", "https"], hits
    for hit in hits:
        assert hit["headers"]["Authorization"] == "token " + token and hit["headers"]["X-Api-Key"] == key, hit
    for got in (v["r"], v["plain"]):
        assert got.get("status") == 301, got
        assert token not in got["raw"] and key not in got["raw"], got["raw"]
        assert token not in got["body"] and key not in got["body"], got["body"]
        assert "X-Seen-Authorization: token " + v["token"] in got["raw"], got["raw"]
        assert "X-Seen-X-Api-Key: " + v["key"] in got["raw"], got["raw"]
        assert got["json"]["headers"]["Authorization"] == "token " + "*" * len(token), got["json"]
        assert got["json"]["headers"]["X-Api-Key"] == "*" * len(key), got["json"]


# In the sandbox: TLS connections to allowed.test (a secret's host) opened and stalled after
# their ClientHello, TRIES of them; how many an interception thread holds (its ServerHello came)
# and how many were refused go to /tmp/held.json; held until /tmp/release exists.
HOLD_INTERCEPTED = r"""
import ssl, time
def client_hello(name):
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()
hello = client_hello("allowed.test")
socks, refused = [], 0
for i in range(TRIES):
    try:
        s = socket.create_connection(("allowed.test", 443), timeout=20)
        s.sendall(hello)
        first = s.recv(1)
    except OSError:
        s, first = None, b""
    if first == b"\x16":  # a ServerHello: an interception thread has it, stalled
        socks.append(s)
    else:  # refused: closed at once, as a client would
        refused += 1
        if s is not None:
            s.close()
held = len(socks)
with open("/tmp/held.json", "w") as f:
    json.dump({"held": held, "refused": refused}, f)
deadline = time.monotonic() + 120
while not os.path.exists("/tmp/release") and time.monotonic() < deadline:
    time.sleep(0.1)
verdict(held=held, refused=refused)
"""


def test_one_sandbox_holding_its_intercepted_connections_leaves_the_others_theirs(netd, sbs, up):
    """A sandbox that opens many TLS connections to its secret's host and
    stalls them gets its share of the interception threads
    (INTERCEPT_PER_SANDBOX, 32), the rest refused and logged: another
    sandbox's secret requests still go through meanwhile."""
    import threading
    greedy = make(sbs, T={"value": value(), "hosts": ["allowed.test"]})
    other_secret = value()
    other = make(sbs, T={"value": other_secret, "hosts": ["allowed.test"], "header": "X-T: {value}"})
    result = {}

    def hold():
        try:
            result["r"] = net_exec(netd, greedy, "TRIES = 300\n" + HOLD_INTERCEPTED, timeout=180)
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            result["error"] = e

    t = threading.Thread(target=hold)
    t.start()
    try:
        deadline = time.monotonic() + 120
        held = None
        while held is None and time.monotonic() < deadline and t.is_alive():
            r = netd.call("sandbox.exec", sandbox_id=greedy, argv=["cat", "/tmp/held.json"])
            held = json.loads(r["stdout"]) if r["exit_code"] == 0 and r["stdout"] else None
            if held is None:
                time.sleep(0.2)
        assert held is not None, result
        mark = up.mark()
        v = net(netd, other, HTTPS_CLIENTS + textwrap.dedent(r"""
            verdict(r=https_default("https://allowed.test/other-sandbox", {}))
        """))
    finally:
        netd.call("sandbox.exec", sandbox_id=greedy, argv=["touch", "/tmp/release"])
        t.join(timeout=200)
    assert v["r"].get("status") == 200, (v, held)
    (hit,) = landed(up, mark, local=U.ALLOWED)
    assert hit["path"] == "/other-sandbox" and hit["headers"]["X-T"] == other_secret
    assert held == {"held": 32, "refused": 268}, held
    assert "too many intercepted connections of this sandbox" in netd.read_log()


def test_busy_sandboxes_cannot_fill_the_interception_threads_another_needs(netd, sbs, up):
    """Eight sandboxes each open up to 40 TLS connections to their secret's host
    and stall them: the first six get their 32 each, then the last 64 of the
    256 threads are kept for sandboxes holding fewer than 4, so the seventh and
    eighth get 4, and a ninth sandbox's secret request still goes through."""
    greedy = [make(sbs, T={"value": value(), "hosts": ["allowed.test"]}) for _ in range(8)]
    other_secret = value()
    other = make(sbs, T={"value": other_secret, "hosts": ["allowed.test"], "header": "X-T: {value}"})
    from conftest import PRELUDE
    from test_service import wait_until
    held = []
    try:
        for sid in greedy:  # one after the other: which one gets what is then known
            netd.call("sandbox.exec", sandbox_id=sid, background=True,
                      argv=["python3", "-c", PRELUDE + NETLIB + "TRIES = 40\n" + HOLD_INTERCEPTED])

            def counts(sid=sid):
                r = netd.call("sandbox.exec", sandbox_id=sid, argv=["cat", "/tmp/held.json"])
                return json.loads(r["stdout"]) if r["exit_code"] == 0 and r["stdout"] else None
            assert wait_until(lambda: counts() is not None, timeout=120)
            held.append(counts()["held"])
        mark = up.mark()
        v = net(netd, other, HTTPS_CLIENTS + textwrap.dedent(r"""
            verdict(r=https_default("https://allowed.test/ninth-sandbox", {}))
        """))
    finally:
        for sid in greedy:
            netd.call("sandbox.exec", sandbox_id=sid, argv=["touch", "/tmp/release"])
    assert v["r"].get("status") == 200, (v, held)
    (hit,) = landed(up, mark, local=U.ALLOWED)
    assert hit["path"] == "/ninth-sandbox" and hit["headers"]["X-T"] == other_secret
    assert held == [32] * 6 + [4, 4], held
    assert "too many intercepted connections of this sandbox (the rest are kept for other sandboxes)" in \
        netd.read_log()


def test_a_request_head_dripped_into_an_intercepted_connection_is_cut_off(netd, sbs):
    """Each read has its timeout, but one byte a little under it would keep
    an interception thread forever: the TLS handshake and the request head
    have one deadline (30 s) for all of them."""
    sid = make(sbs, T={"value": value(), "hosts": ["allowed.test"]})
    v = net(netd, sid, r"""
        import ssl, time
        s = ssl.create_default_context().wrap_socket(socket.create_connection(("allowed.test", 443), timeout=20),
                                                     server_hostname="allowed.test")
        head = b"GET /drip HTTP/1.1\r\nHost: allowed.test\r\nX-Pad: " + b"x" * 40 + b"\r\n\r\n"
        sent, closed, start = 0, False, time.monotonic()
        s.settimeout(5)
        while sent < len(head) - 1 and time.monotonic() - start < 100:
            try:
                s.send(head[sent:sent + 1])
                sent += 1
                closed = s.recv(1) == b""
            except socket.timeout:
                continue  # nothing from the proxy in 5 s: the next byte
            except OSError:
                closed = True
            if closed:
                break
        verdict(closed=closed, sent=sent, of=len(head))
    """, timeout=150)
    assert v["closed"] and v["sent"] < v["of"] - 1, v


# --- live restore: the secrets outlive nsboxd, kept by the sandbox's init -------------------

RESTORE_POOL_BASE = 1_720_000_000


def files_holding(top, *needles):
    found = []
    for root, _dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if any(n.encode() in data for n in needles):
                found.append(path)
    return found


def kept_by_init(svc, sid):
    """The host's view of what the sandbox's init keeps at its secrets fd (runtime/proto.h)."""
    with open(os.path.join(svc.state, "sandboxes", sid, "sandbox.json")) as f:
        pid = json.load(f)["pid"]
    path = "/proc/%d/fd/13" % pid
    # the init takes the memfd when it next runs: nsboxd answered before that
    from test_service import wait_until
    wait_until(lambda: os.path.exists(path), timeout=10)
    with open(path, "rb") as f:
        return os.readlink(path), f.read()


@pytest.fixture
def live(up):
    """nsboxd with live restore on (kill -9 and start again on the same state dir)."""
    with live_restore_services(up, RESTORE_POOL_BASE, "nsbox-secrets-restore-") as service:
        yield service()


# As root of the sandbox: its init's fds (where the secrets' memfd is kept)
# can be neither listed, opened, nor taken with pidfd_getfd; no process the
# sandbox sees holds that memfd.
INIT_FDS = r"""
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return e.errno
opened = {n: attempt(lambda n=n: open("/proc/1/fd/%d" % n, "rb").read(1)) for n in range(0, 32)}
listed = attempt(lambda: os.listdir("/proc/1/fd"))
pidfd = os.pidfd_open(1)
taken = {}
for n in range(0, 32):
    fd = libc.syscall(438, pidfd, n, 0)  # pidfd_getfd
    taken[n] = "ok" if fd >= 0 else ctypes.get_errno()
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen += [os.readlink("/proc/%s/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%s/fd" % pid)]
        except OSError:
            pass
verdict(opened=opened, listed=listed, taken=taken, seen=seen, uid=os.getuid())
"""


def test_secrets_the_init_reads_only_after_a_restart_are_still_adopted(live, up):
    """The secrets of a sandbox.update wait in its init's control socket until
    the init runs: an init stopped at that moment (a loaded host) takes them
    only after nsboxd was killed and started again, and is adopted with them."""
    import signal
    import threading
    first = value()
    live.start()
    sid = live.call("sandbox.create", network=ALLOWED_ONLY)["sandbox_id"]
    with open(os.path.join(live.state, "sandboxes", sid, "sandbox.json")) as f:
        pid = json.load(f)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        live.call("sandbox.update", sandbox_id=sid,
                  secrets={"TOKEN": {"value": first, "hosts": ["allowed.test"]}})
        assert not os.path.exists("/proc/%d/fd/13" % pid)  # not taken yet: the init is stopped
        live.kill9()
        waker = threading.Timer(0.5, os.kill, (pid, signal.SIGCONT))
        waker.start()
        live.start()
        waker.join()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert "sandbox %s: adopted (live restore)" % sid in live.log(), live.log()[-3000:]
    assert live.call("sandbox.info", sandbox_id=sid)["secrets"] == ["TOKEN"]
    assert first.encode() in kept_by_init(live, sid)[1]


def test_live_restore_keeps_a_sandboxs_secrets_and_its_ca(live, up):
    first, second, third = value(), value(), value()
    header = "Authorization: Bearer {value}"
    live.start()
    sid = live.call("sandbox.create", network=ALLOWED_ONLY,
                    secrets={"TOKEN": {"value": first, "hosts": ["allowed.test"], "header": header}})["sandbox_id"]
    ca = live.call("sandbox.exec", sandbox_id=sid, argv=["cat", "/etc/nsbox/secrets-ca.pem"])["stdout"]
    assert ca.startswith("-----BEGIN CERTIFICATE-----")
    # Replaced before the restart: the new value is the one kept.
    live.call("sandbox.update", sandbox_id=sid,
              secrets={"TOKEN": {"value": second, "hosts": ["allowed.test"], "header": header}})
    live.call("sandbox.exec", sandbox_id=sid, argv=["sh", "-c", "echo $NSBOX_SECRET_TOKEN > /workspace/p"])
    snap = live.call("sandbox.snapshot", sandbox_id=sid)["snapshot_id"]
    assert os.listdir(os.path.join(live.state, "snapshots", snap))
    assert files_holding(live.state, first, second, "PRIVATE KEY") == []

    def check(expected):
        mark = up.mark()
        v = net(live, sid, HTTPS_CLIENTS + textwrap.dedent(r"""
            token = os.environ["NSBOX_SECRET_TOKEN"]
            verdict(a=https_default("https://allowed.test/after-restart", {}),
                    other=http('index.test', raw=(
                        "GET /leak HTTP/1.1\r\nHost: index.test\r\nX-Token: %s\r\nConnection: close\r\n\r\n"
                        % token).encode()),
                    ca=open("/etc/nsbox/secrets-ca.pem").read())
        """))
        # HTTPS through the same CA, which the sandbox still trusts; the value kept is the one sent.
        assert v["a"].get("status") == 200, v
        assert v["ca"] == ca
        hits = landed(up, mark)
        a = [h for h in hits if h["local"] == U.ALLOWED]
        assert len(a) == 1 and a[0]["proto"] == "https", hits
        assert a[0]["headers"]["Authorization"] == "Bearer " + expected
        # The placeholder to another host is still refused.
        assert v["other"].get("status") == 403, v["other"]
        assert [h for h in hits if h["path"] == "/leak"] == [], hits

    live.kill9()
    live.start()
    assert "sandbox %s: adopted (live restore)" % sid in live.log(), live.log()[-3000:]
    assert [s["sandbox_id"] for s in live.call("sandbox.list")["sandboxes"]] == [sid]
    assert live.call("sandbox.info", sandbox_id=sid)["secrets"] == ["TOKEN"]
    check(second)
    # Replaced by the nsboxd that adopted it: kept in place, and carried over the next restart too.
    live.call("sandbox.update", sandbox_id=sid,
              secrets={"TOKEN": {"value": third, "hosts": ["allowed.test"], "header": header}})
    live.kill9()
    live.start()
    assert live.log().count("sandbox %s: adopted (live restore)" % sid) == 2
    check(third)
    link, kept = kept_by_init(live, sid)
    assert link.startswith("/memfd:nsbox-keep") and third.encode() in kept and second.encode() not in kept
    v = net(live, sid, INIT_FDS, user="root")
    assert v["uid"] == 0
    assert v["listed"] != "ok" and all(r != "ok" for r in v["opened"].values()), v
    assert all(r != "ok" for r in v["taken"].values()), v
    assert not [link for link in v["seen"] if "memfd:" in link], v["seen"]
    log = live.log()
    assert files_holding(live.state, first, second, third, "PRIVATE KEY") == []
    for secret in (first, second, third):
        assert secret not in log
    live.call("sandbox.remove", sandbox_id=sid, force=True)
    live.call("snapshot.remove", snapshot_id=snap)
    assert live.terminate() == 0


def test_secrets_given_to_a_sandbox_from_the_warm_pool_are_kept_too(live, up):
    from test_service import wait_until
    live.extra_args += ["--warm-pool", "1"]
    live.start()
    assert wait_until(lambda: "created for uid" in live.log(), timeout=60)
    secret = value()
    sid = live.call("sandbox.create", network=ALLOWED_ONLY,
                    secrets={"TOKEN": {"value": secret, "hosts": ["allowed.test"]}})["sandbox_id"]
    assert "sandbox %s: handed from the warm pool" % sid in live.log()
    live.kill9()
    live.start()
    assert "sandbox %s: adopted (live restore)" % sid in live.log(), live.log()[-3000:]
    mark = up.mark()
    v = net(live, sid, r"""
        verdict(r=http('allowed.test', raw=("GET /pooled HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: %s\r\n"
                                            "Connection: close\r\n\r\n" % os.environ["NSBOX_SECRET_TOKEN"]).encode()))
    """)
    assert v["r"].get("status") == 200, v
    (hit,) = landed(up, mark, local=U.ALLOWED)
    assert hit["headers"]["Authorization"] == secret
    live.call("sandbox.remove", sandbox_id=sid, force=True)
    assert live.terminate() == 0


def test_a_sandbox_whose_kept_secrets_are_bad_is_not_adopted(live):
    """What its init holds is rewritten from the host (as host root could): the next nsboxd
    checks it as a client's input, and removes the sandbox with the log line why."""
    from test_service import wait_until
    live.start()

    def with_token(field, text):
        def change(kept):
            doc = json.loads(kept)
            doc["secrets"]["TOKEN"][field] = text
            return json.dumps(doc).encode()
        return change

    def with_ca_cert(kept):
        doc = json.loads(kept)
        doc["ca"]["cert"] = "not a certificate"
        return json.dumps(doc).encode()

    cases = {
        "its kept secrets are not what nsboxd writes": lambda kept: b"{not json",
        "its kept secrets CA is not one nsboxd makes": with_ca_cert,
        "its kept secrets are over 1048576 bytes": lambda kept: b" " * ((1 << 20) + 1),
        "secrets.TOKEN.value must be": with_token("value", "v\r\nX: y"),
        "secrets.TOKEN.placeholder is not one nsboxd makes": with_token("placeholder", "nsbox-secret-" + "g" * 32),
        "its kept secrets are not the ones its record names": with_token("placeholder", "nsbox-secret-" + "0" * 32),
        "its secrets were not kept": lambda kept: b"",
    }
    made = {}
    for why, change in cases.items():
        sid = live.call("sandbox.create", network=ALLOWED_ONLY,
                        secrets={"TOKEN": {"value": value(), "hosts": ["allowed.test"]}})["sandbox_id"]
        made[sid] = why
    live.kill9()
    pids = []
    for sid, why in made.items():
        with open(os.path.join(live.state, "sandboxes", sid, "sandbox.json")) as f:
            pid = json.load(f)["pid"]
        pids.append(pid)
        path = "/proc/%d/fd/13" % pid
        with open(path, "rb") as f:
            kept = f.read()
        fd = os.open(path, os.O_RDWR | os.O_TRUNC)
        os.write(fd, cases[why](kept))
        os.close(fd)
    live.start()
    log = live.log()
    for sid, why in made.items():
        assert "sandbox %s: not adopted: %s" % (sid, why) in log, (why, log[-4000:])
    assert live.call("sandbox.list")["sandboxes"] == []
    assert wait_until(lambda: not [p for p in pids if os.path.exists("/proc/%d" % p)], timeout=30)
    assert live.terminate() == 0


def test_removed_secrets_are_not_kept_and_the_sandbox_is_adopted_without_them(live, up):
    live.start()
    secret = value()
    sid = live.call("sandbox.create", network=ALLOWED_ONLY,
                    secrets={"TOKEN": {"value": secret, "hosts": ["allowed.test"]}})["sandbox_id"]
    assert secret.encode() in kept_by_init(live, sid)[1]
    live.call("sandbox.update", sandbox_id=sid, secrets=None)
    assert kept_by_init(live, sid)[1] == b""
    live.kill9()
    live.start()
    assert "sandbox %s: adopted (live restore)" % sid in live.log(), live.log()[-3000:]
    assert "secrets" not in live.call("sandbox.info", sandbox_id=sid)
    mark = up.mark()
    v = net(live, sid, r"""
        verdict(r=http('allowed.test', raw=b"GET /none HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"))
    """)
    assert v["r"].get("status") == 200, v
    assert [h for h in landed(up, mark) if secret in json.dumps(h)] == []
    live.call("sandbox.remove", sandbox_id=sid, force=True)
    assert live.terminate() == 0
