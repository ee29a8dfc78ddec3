# SPDX-License-Identifier: Apache-2.0
"""The nsbox CLI's network surface against a real nsboxd with an operator
network policy: create/run --network, info's egress block, port (expose and
--remove), update --network, clear 125 errors for bad names and refused client
policies, and the network_refused lines of exec/python/pip. The proxy is
/bin/true here (no traffic is answered): these tests are about the CLI and the
RPCs it makes, not about what the policy lets through."""
import json
import os
import re
import socket
import subprocess
import tempfile
import threading

import pytest
from conftest import BUILD, Daemon, ok, one_line_error

# serial: network namespaces and veths
pytestmark = [pytest.mark.serial, pytest.mark.xdist_group("host-network")]

NSBOX = os.path.join(BUILD, "nsbox")
URL = re.compile(r"^http://127\.0\.0\.1:(\d+)/$")


def start_daemon(config):
    fd, path = tempfile.mkstemp(prefix="nsbox-net-config-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    try:
        return Daemon(extra_args=["--config", path, "--egress-path", "/bin/true"])
    finally:
        os.unlink(path)  # read at start


@pytest.fixture(scope="module")
def net_daemon():
    d = start_daemon({"network_policies": {"allowed": {"allow": ["allowed.test"]}}, "warm_pool": 0})
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


@pytest.fixture
def net_sandbox(net_daemon):
    r = ok(net_daemon.cli("create", "--network", "allowed"))
    sid = r.stdout.decode().strip()
    yield sid
    net_daemon.cli("rm", "-f", sid)


def info(daemon, sid):
    return json.loads(ok(daemon.cli("info", sid, "--json")).stdout)


def connects(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return True
    except ConnectionRefusedError:
        return False


# --- create, run, info ---------------------------------------------------------


def test_create_with_network_gets_an_egress_address_shown_by_info(net_daemon, net_sandbox):
    got = info(net_daemon, net_sandbox)
    assert got["network"] == "allowed"
    egress = got["egress"]
    assert re.match(r"^10\.250\.\d+\.\d+$", egress["address"]), egress
    assert egress["exposed"] == []
    assert set(egress["stats"]) >= {"bytes_in", "bytes_out", "connections", "refused", "dns_queries"}
    # The human form shows the same block.
    human = ok(net_daemon.cli("info", net_sandbox)).stdout.decode()
    assert '"egress"' in human and egress["address"] in human
    # The sandbox really has its interface, up (operstate may lag by the kernel's link watch).
    r = ok(net_daemon.cli("exec", net_sandbox, "--", "cat", "/sys/class/net/eth0/flags"))
    assert int(r.stdout.decode(), 16) & 0x1


def test_create_json_and_ls_carry_the_network_name(net_daemon):
    created = json.loads(ok(net_daemon.cli("create", "--network", "allowed", "--json")).stdout)
    try:
        assert created["network"] == "allowed"
        listed = json.loads(ok(net_daemon.cli("ls", "--json")).stdout)["sandboxes"]
        assert [s["network"] for s in listed if s["sandbox_id"] == created["sandbox_id"]] == ["allowed"]
    finally:
        net_daemon.cli("rm", "-f", created["sandbox_id"])


def test_run_with_network_has_eth0_and_without_has_only_lo(net_daemon):
    r = ok(net_daemon.cli("run", "--network", "allowed", "--", "ls", "/sys/class/net"))
    assert r.stdout.decode().split() == ["eth0", "lo"]
    r = ok(net_daemon.cli("run", "--", "ls", "/sys/class/net"))
    assert r.stdout.decode().split() == ["lo"]


# --- port ------------------------------------------------------------------------


def test_port_prints_a_localhost_url_and_remove_unexposes_it(net_daemon, net_sandbox):
    r = ok(net_daemon.cli("port", net_sandbox, "8000"))
    url = r.stdout.decode().strip()
    m = URL.match(url)
    assert m, url
    host_port = int(m.group(1))
    assert connects(host_port)
    assert info(net_daemon, net_sandbox)["egress"]["exposed"] == [{"port": 8000, "host_port": host_port}]
    # The same port again: the same URL; --json gives the whole result.
    again = json.loads(ok(net_daemon.cli("port", net_sandbox, "8000", "--json")).stdout)
    assert again == {"sandbox_id": net_sandbox, "host": "127.0.0.1", "host_port": host_port, "port": 8000,
                     "url": url}

    r = ok(net_daemon.cli("port", "--remove", net_sandbox, "8000"))
    assert r.stdout == b""
    assert info(net_daemon, net_sandbox)["egress"]["exposed"] == []
    assert not connects(host_port)
    assert "not exposed" in one_line_error(net_daemon.cli("port", "--remove", net_sandbox, "8000"))


def test_port_refuses_bad_ports_and_sandboxes_without_network(net_daemon, net_sandbox):
    for bad in ("0", "65536", "http", "-1", ""):
        assert "bad port" in one_line_error(net_daemon.cli("port", net_sandbox, bad))
    one_line_error(net_daemon.cli("port", net_sandbox))
    plain = ok(net_daemon.cli("create")).stdout.decode().strip()
    try:
        assert "has no network" in one_line_error(net_daemon.cli("port", plain, "8000"))
    finally:
        net_daemon.cli("rm", "-f", plain)
    assert "no sandbox" in one_line_error(net_daemon.cli("port", "no-such-sandbox", "8000"))


# --- update ----------------------------------------------------------------------


def test_update_network_none_removes_the_egress_block_and_a_name_brings_it_back(net_daemon, net_sandbox):
    ok(net_daemon.cli("port", net_sandbox, "8000"))
    r = ok(net_daemon.cli("update", "--network", "none", net_sandbox))
    shown = json.loads(r.stdout)  # the sandbox's details, as nsbox info prints them
    assert shown["network"] == "none" and "egress" not in shown
    got = info(net_daemon, net_sandbox)
    assert got["network"] == "none" and "egress" not in got
    r = ok(net_daemon.cli("exec", net_sandbox, "--", "ls", "/sys/class/net"))
    assert r.stdout.decode().split() == ["lo"]

    shown = json.loads(ok(net_daemon.cli("update", "--network", "allowed", net_sandbox, "--json")).stdout)
    assert shown["network"] == "allowed" and shown["egress"]["exposed"] == []
    assert info(net_daemon, net_sandbox)["egress"]["address"] == shown["egress"]["address"]


def test_update_without_a_change_is_a_usage_error(net_daemon, net_sandbox):
    assert "usage: nsbox update" in one_line_error(net_daemon.cli("update", net_sandbox))
    one_line_error(net_daemon.cli("update", "--network", "none"))
    assert "once" in one_line_error(net_daemon.cli("update", "--network", "none", "--network", "allowed",
                                                   net_sandbox))


# --- errors ------------------------------------------------------------------------


def test_unknown_network_name_is_a_clear_125_error(net_daemon, net_sandbox):
    for args in (["create", "--network", "nope"], ["run", "--network", "nope", "--", "true"],
                 ["update", "--network", "nope", net_sandbox]):
        line = one_line_error(net_daemon.cli(*args))
        assert line == 'nsbox: unknown network policy "nope"', (args, line)
    assert info(net_daemon, net_sandbox)["network"] == "allowed"  # the failed update changed nothing
    assert "policy name" in one_line_error(net_daemon.cli("create", "--network", ""))
    # No sandbox was left behind by the refusals.
    listed = json.loads(ok(net_daemon.cli("ls", "--json")).stdout)["sandboxes"]
    assert [s["sandbox_id"] for s in listed] == [net_sandbox]


def test_client_policy_is_refused_when_the_daemon_does_not_allow_it(net_daemon, tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"allow": ["example.org"]}))
    line = one_line_error(net_daemon.cli("create", "--network-policy", str(policy)))
    assert "allow_client_network_policies is 0" in line, line
    line = one_line_error(net_daemon.cli("create", "--network-policy", "-", input=policy.read_bytes()))
    assert "allow_client_network_policies is 0" in line, line
    # Malformed policies never reach the daemon.
    assert "not JSON" in one_line_error(net_daemon.cli("create", "--network-policy", "-", input=b"{allow"))
    assert "JSON object" in one_line_error(net_daemon.cli("create", "--network-policy", "-",
                                                          input=b'["example.org"]'))
    assert "open" in one_line_error(net_daemon.cli("create", "--network-policy", str(tmp_path / "none.json")))
    assert "once" in one_line_error(net_daemon.cli("create", "--network", "allowed", "--network-policy",
                                                   str(policy)))


def test_client_policy_is_accepted_when_the_daemon_allows_it(tmp_path):
    d = start_daemon({"allow_client_network_policies": 1, "warm_pool": 0})
    try:
        policy = tmp_path / "policy.json"
        policy.write_text(json.dumps({"allow": ["example.org", "*.example.org"], "deny": []}))
        sid = ok(d.cli("create", "--network-policy", str(policy))).stdout.decode().strip()
        got = info(d, sid)
        assert got["network"] == "custom" and "address" in got["egress"]
        shown = json.loads(ok(d.cli("update", "--network-policy", "-", sid,
                                    input=b'{"allow": ["example.com"]}')).stdout)
        assert shown["network"] == "custom" and "egress" in shown
        ok(d.cli("rm", "-f", sid))
    finally:
        assert d.stop() == 0, d.final_log[-4000:]


def test_network_without_policies_in_the_daemon_is_a_clear_error(daemon):
    line = one_line_error(daemon.cli("create", "--network", "allowed"))
    assert "no network policies" in line, line


def test_help_of_update_and_port(net_daemon):
    for command in ("update", "port"):
        r = ok(subprocess.run([NSBOX, command, "--help"], capture_output=True, timeout=30))
        assert r.stdout.decode().startswith("usage: nsbox %s" % command)
    r = ok(subprocess.run([NSBOX, "create", "--help"], capture_output=True, timeout=30)).stdout.decode()
    assert "--network NAME" in r and "--network-policy" in r
    r = ok(subprocess.run([NSBOX, "--help"], capture_output=True, timeout=30)).stdout.decode()
    assert "nsbox update" in r and "nsbox port" in r


# --- network_refused, from a stand-in nsboxd -----------------------------------------


class FakeDaemon:
    """Answers each request with the canned result for its method: the proxy that
    would make real refusals is not part of this slice."""

    def __init__(self, path, results):
        self.results = results
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as f:
                for line in f:
                    msg = json.loads(line)
                    if msg["method"] in self.results:
                        reply = {"result": self.results[msg["method"]]}
                    else:  # e.g. the CLI's sandbox.list for session names: as nsboxd answers a method it lacks
                        reply = {"error": {"code": -32601, "message": "method not found"}}
                    f.write((json.dumps(dict(reply, jsonrpc="2.0", id=msg["id"])) + "\n").encode())
                    f.flush()


def test_network_refused_is_printed_on_stderr_once(tmp_path):
    path = str(tmp_path / "fake.sock")
    refused = ["pypi.org:443", "203.0.113.9:22"]
    FakeDaemon(path, {
        "sandbox.exec": {"exit_code": 1, "stdout": "", "stderr": "", "network_refused": refused},
        # python.run and package.install already put the lines into stderr.
        "python.run": {"status": "error", "exit_code": 1, "stdout": "", "stderr":
                       "boom\nnsbox: network policy refused pypi.org:443\n", "network_refused": refused[:1]},
        "package.install": {"exit_code": 1, "stdout": "", "stderr": "pip failed\n"
                            "nsbox: network policy refused pypi.org:443\n"
                            "nsbox: network policy refused 203.0.113.9:22\n", "network_refused": refused},
    })

    def cli(*args):
        return subprocess.run([NSBOX, "--socket", path, *args], capture_output=True, timeout=30)

    want = "nsbox: network policy refused pypi.org:443\nnsbox: network policy refused 203.0.113.9:22\n"
    for args in (["exec", "sb", "--", "curl", "https://pypi.org"], ["sh", "sb", "curl https://pypi.org"]):
        r = cli(*args)
        assert r.returncode == 1 and r.stderr.decode() == want, (args, r.stderr)
    r = cli("python", "sb", "-c", "import urllib")
    assert r.returncode == 1
    assert r.stderr.decode() == "boom\nnsbox: network policy refused pypi.org:443\n"
    r = cli("pip", "sb", "requests")
    assert r.returncode == 1 and r.stderr.decode() == "pip failed\n" + want
    # --json: the result carries them; nothing extra on stderr.
    r = cli("exec", "--json", "sb", "--", "true")
    assert json.loads(r.stdout)["network_refused"] == refused and r.stderr == b""


def test_network_refused_names_cannot_send_terminal_controls(tmp_path):
    path = str(tmp_path / "fake.sock")
    FakeDaemon(path, {"sandbox.exec": {"exit_code": 0, "network_refused": ["evil\x1b]0;pwned\x07.test:80"]}})
    r = subprocess.run([NSBOX, "--socket", path, "exec", "sb", "--", "true"], capture_output=True, timeout=30)
    assert r.returncode == 0
    assert r.stderr == b"nsbox: network policy refused evil?]0;pwned?.test:80\n"
