# SPDX-License-Identifier: Apache-2.0
"""Live restore of the egress proxy: with live_restore on, nsbox-egress and its
namespace outlive nsboxd (kill -9, SIGTERM), and the next nsboxd adopts them, so that a
download open through the proxy at the stop completes intact; DNS, new
connections, exposed ports, secrets and stats carry on; a proxy that cannot
be adopted (another protocol) is ended and a fresh one started; one no nsboxd
takes over ends itself after the grace; nothing is left or doubled."""
import contextlib
import json
import os
import subprocess
import tempfile

import pytest

import upstream as U
from test_network import ALLOWED_ONLY, POLICIES, info_stats, net, proxy_pids, up  # noqa: F401 (fixtures)
from test_live_restore import alive
from test_service import Service, end_services, wait_until

pytestmark = [pytest.mark.serial, pytest.mark.xdist_group("host-network")]

POOL_BASE = 1_730_000_000
BODY = 8_000_000  # far more than the socket buffers between the server and the sandbox hold

# In the sandbox, in the background: a download from the upstream through the
# proxy that reads its first bytes, says so, then waits for /tmp/go before it
# reads the rest: the connection is open, mid-body, across the restart.
DOWNLOAD = r"""
import json, os, socket, time
s = socket.create_connection(("allowed.test", 80), timeout=120)
s.sendall(b"GET /big/%d HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
data = b""
while b"\r\n\r\n" not in data or len(data) < 65536:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
open("/tmp/started", "w").close()
while not os.path.exists("/tmp/go"):
    time.sleep(0.05)
while True:
    chunk = s.recv(1 << 20)
    if not chunk:
        break
    data += chunk
head, _, body = data.partition(b"\r\n\r\n")
result = {"status": head.split(b" ")[1].decode(), "length": len(body), "intact": body == b"x" * len(body)}
# then, through the adopted proxy: a name lookup, a new connection, HTTPS with the secret put in
import ssl, urllib.request
result["addr"] = socket.gethostbyname("index.test")
with urllib.request.urlopen("http://allowed.test/after", timeout=30) as r:
    result["plain"] = r.status
with urllib.request.urlopen("https://allowed.test/secret", context=ssl.create_default_context(), timeout=30) as r:
    result["secret"] = r.status
print(json.dumps(result))
""" % BODY


@contextlib.contextmanager
def live_restore_services(up, pool_base, prefix):
    """Starts of nsboxd with live restore on, all on one state dir: service(*extra) makes one.
    At the end, what is left running is killed and a start without live restore removes
    what outlived it."""
    root = tempfile.mkdtemp(prefix=prefix)
    os.chmod(root, 0o755)
    config = os.path.join(root, "nsboxd.json")
    with open(config, "w") as f:
        json.dump({"network_policies": POLICIES, "egress_dns_servers": U.DNS, "egress_ca_file": up.ca_pem}, f)
    started = []

    def service(*extra):
        svc = Service(root, extra_args=["--config", config, "--live-restore", "1", "--warm-pool", "0"] +
                      list(extra), pool_base=pool_base)
        started.append(svc)
        return svc
    yield service
    # What outlived it by design: a start without live restore removes it (proxy included).
    end_services(root, started, pool_base, ["--config", config])


@pytest.fixture
def live(up):
    with live_restore_services(up, POOL_BASE, "nsbox-egress-restore-") as service:
        yield service


def proxy_pid(svc):
    with open(os.path.join(svc.state, "egress.json")) as f:
        return json.load(f)["pid"]


def egress_netns(pid):
    """The proxy's egress namespace (its factory thread's, once it entered it): its inode and a path
    to enter it."""
    host = os.stat("/proc/self/ns/net").st_ino
    found = []

    def entered():
        for tid in os.listdir("/proc/%d/task" % pid):
            path = "/proc/%d/task/%s/ns/net" % (pid, tid)
            if os.stat(path).st_ino != host:
                found[:] = [os.stat(path).st_ino, path]
                return True
        return False
    assert wait_until(entered, timeout=20), "proxy %d is in no egress namespace" % pid
    return found


def veths(ns_path):
    out = subprocess.run(["nsenter", "--net=" + ns_path, "ip", "-o", "link", "show"], capture_output=True,
                         text=True, check=True).stdout
    return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ": nsb" in line)


def proxy_left_by_a_kill9(svc):
    """Starts svc with a sandbox on the network and kills it (kill -9): the sandbox's id and the
    proxy it left running."""
    svc.start()
    sid = svc.call("sandbox.create", network=ALLOWED_ONLY)["sandbox_id"]
    [pid] = proxy_pids(svc)
    svc.kill9()
    return sid, pid


def status(svc, sid, exec_id):
    return svc.call("exec.status", sandbox_id=sid, exec_id=exec_id)["status"]


@pytest.mark.parametrize("stop", ["kill9", "terminate"])
def test_a_download_open_through_the_proxy_completes_across_a_restart(live, up, stop):
    """Across a kill -9 of nsboxd, and a SIGTERM with live restore."""
    svc = live()
    svc.start()
    token = "tv-" + os.urandom(16).hex()
    sid = svc.call("sandbox.create", network=ALLOWED_ONLY,
                   secrets={"TOKEN": {"value": token, "hosts": ["allowed.test"],
                                      "header": "Authorization: Bearer {value}"}})["sandbox_id"]
    job = svc.call("sandbox.exec", sandbox_id=sid, argv=["python3", "-c", DOWNLOAD], background=True)["exec_id"]
    assert wait_until(lambda: svc.call("sandbox.exec", sandbox_id=sid,
                                       argv=["test", "-e", "/tmp/started"])["exit_code"] == 0, timeout=60), \
        svc.call("exec.output", sandbox_id=sid, exec_id=job)
    _info, before = info_stats(svc, sid, lambda s: s.get("connections", 0) >= 1)
    [pid] = proxy_pids(svc)
    ns, ns_path = egress_netns(pid)
    assert ns is not None and len(veths(ns_path)) == 1

    if stop == "kill9":
        svc.kill9()
    else:
        assert svc.terminate() == 0
        assert "egress: proxy %d left running for the next nsboxd" % pid in svc.log()
    svc.start()
    # stats carry on from where they were
    after = svc.call("sandbox.info", sandbox_id=sid)["egress"]["stats"]
    mark = up.mark()
    svc.call("fs.write", sandbox_id=sid, path="/tmp/go", content="")
    assert wait_until(lambda: status(svc, sid, job) != "running", timeout=120), \
        (svc.call("exec.output", sandbox_id=sid, exec_id=job), svc.log()[-3000:])
    out = svc.call("exec.output", sandbox_id=sid, exec_id=job)
    lines = out["stdout"].strip().splitlines()
    assert lines, "the download did not complete: %s" % out["stderr"][-2000:]
    result = json.loads(lines[-1])
    # intact, and DNS, new connections and the secret (HTTPS through the same CA) work after the adoption
    assert result == {"status": "200", "length": BODY, "intact": True, "addr": U.INDEX, "plain": 200,
                      "secret": 200}, (result, out["stderr"][-2000:])
    assert "proxy %d of the previous nsboxd adopted with 1 sandbox(es)" % pid in svc.log(), svc.log()[-3000:]
    # the same proxy and namespace: no second proxy, no second namespace, one veth
    assert proxy_pid(svc) == pid and alive(pid)
    assert proxy_pids(svc) == []
    assert egress_netns(pid)[0] == ns and len(veths(ns_path)) == 1
    assert after["connections"] >= before["connections"] and after["bytes_in"] >= before["bytes_in"], \
        (before, after)
    hits = [h for h in up.hits_since(mark) if h.get("path") == "/secret"]
    assert len(hits) == 1 and hits[0]["headers"]["Authorization"] == "Bearer " + token, hits
    assert wait_until(lambda: svc.call("sandbox.info", sandbox_id=sid)["egress"]["stats"]["connections"] >
                      after["connections"], timeout=20)

    svc.call("sandbox.remove", sandbox_id=sid, force=True)
    assert wait_until(lambda: veths(ns_path) == [], timeout=20)
    assert svc.terminate() == 0
    # no sandbox left to serve: the proxy ends with nsboxd, its record with it
    assert wait_until(lambda: not alive(pid), timeout=20)
    assert not os.path.exists(os.path.join(svc.state, "egress.json"))


def test_a_proxy_of_another_protocol_is_ended_and_a_fresh_one_started(live, up):
    svc = live()
    sid, pid = proxy_left_by_a_kill9(svc)
    path = os.path.join(svc.state, "egress.json")
    assert os.path.exists(path), "no record of the proxy %d for the next nsboxd" % pid
    with open(path) as f:
        record = json.load(f)
    record["protocol"] = 999
    with open(path, "w") as f:
        json.dump(record, f)
    svc.start()
    assert "the proxy %d a previous nsboxd left is ended (it speaks another protocol: another build)" % pid \
        in svc.log(), svc.log()[-3000:]
    assert wait_until(lambda: not alive(pid), timeout=20)
    fresh = proxy_pids(svc)
    assert len(fresh) == 1 and proxy_pid(svc) == fresh[0]
    assert "sandbox %s: network allowed given back (live restore)" % sid in svc.log()
    v = net(svc, sid, "verdict(r=http('allowed.test', path='/fresh').get('status'))")
    assert v == {"r": 200}, v
    assert len(veths(egress_netns(fresh[0])[1])) == 1
    svc.call("sandbox.remove", sandbox_id=sid, force=True)
    assert svc.terminate() == 0


def test_a_proxy_no_nsboxd_takes_over_ends_itself_after_the_grace(live, up):
    svc = live("--live-restore-grace-seconds", "2")
    _sid, pid = proxy_left_by_a_kill9(svc)
    assert wait_until(lambda: "no nsboxd took the proxy over in 2 s: ending" in svc.log(), timeout=30), \
        svc.log()[-3000:]
    assert wait_until(lambda: not alive(pid), timeout=20)
    assert "nsboxd is gone: waiting 2 s for the next one (live restore)" in svc.log()


def test_a_next_nsboxd_without_live_restore_ends_the_proxy_left(live, up):
    svc = live()
    sid, pid = proxy_left_by_a_kill9(svc)
    plain = Service(os.path.dirname(svc.state), extra_args=svc.extra_args[:2] + ["--warm-pool", "0"],
                    pool_base=POOL_BASE)
    plain.start()
    try:
        assert "the proxy %d a previous nsboxd left is ended (live_restore is off); a new one is started" % pid \
            in plain.log(), plain.log()[-3000:]
        assert not alive(pid)
        assert plain.call("sandbox.list")["count"] == 0, sid
        [fresh] = proxy_pids(plain)
        assert veths(egress_netns(fresh)[1]) == []
        assert plain.terminate() == 0
        assert wait_until(lambda: not alive(fresh), timeout=20)
    finally:
        if plain.proc.poll() is None:
            plain.kill9()


def test_a_next_nsboxd_that_gives_no_network_ends_the_proxy_left(live, up):
    svc = live()
    _sid, pid = proxy_left_by_a_kill9(svc)
    root = os.path.dirname(svc.state)
    bare = os.path.join(root, "bare.json")
    with open(bare, "w") as f:
        json.dump({}, f)
    no_network = Service(root, extra_args=["--config", bare, "--live-restore", "1", "--warm-pool", "0"],
                         pool_base=POOL_BASE)
    no_network.start()
    try:
        assert "the proxy %d a previous nsboxd left is ended (this nsboxd gives sandboxes no network)" % pid \
            in no_network.log(), no_network.log()[-3000:]
        assert not alive(pid) and proxy_pids(no_network) == []
    finally:
        no_network.kill9()
