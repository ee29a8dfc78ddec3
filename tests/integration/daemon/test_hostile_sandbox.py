# SPDX-License-Identifier: Apache-2.0
"""What one client may take (per-uid sandbox quota,
operator ceilings on limits, the host's memory commit, env/label sizes), and
hundreds of sandboxes on one daemon."""
import os
import signal
import threading
import time

import pytest
from conftest import Daemon, host_inits
from nsbox_client import RpcError, as_uid

# serial: 300 sandboxes and the host's memory commit
pytestmark = [pytest.mark.serial]

APP = -32000
INVALID_PARAMS = -32602
SMALL = {"memory_bytes": 32 << 20, "pids": 32, "disk_bytes": 8 << 20}

def app_error(reply, kind):
    assert "error" in reply, reply
    assert reply["error"]["code"] == APP and reply["error"]["data"]["kind"] == kind, reply
    return reply["error"]["message"]


@pytest.fixture
def small_daemon():
    d = Daemon(extra_args=["--warm-pool", "0", "--max-sandboxes", "10", "--max-sandboxes-per-uid", "2"])
    os.chmod(d.socket, 0o666)  # in production: membership of group nsbox
    yield d
    assert d.stop() == 0


def test_one_uid_cannot_take_every_sandbox(small_daemon):
    d = small_daemon
    create = ["sandbox.create", {"limits": SMALL}]
    out = as_uid(65534, d.socket, [create, create, create, ["sandbox.list", {}]])
    mine = [r["result"]["sandbox_id"] for r in out[:2]]
    message = app_error(out[2], "limit_reached")
    assert "max_sandboxes_per_uid" in message and "2" in message
    assert out[3]["result"]["count"] == 2
    # Others are not disturbed: another uid, and root (the operator, exempt).
    other = as_uid(65533, d.socket, [create])
    assert "sandbox_id" in other[0]["result"], other
    root = [d.call("sandbox.create", limits=SMALL)["sandbox_id"] for _ in range(3)]
    assert len(set(root)) == 3
    # A sandbox removed gives its owner room again.
    out = as_uid(65534, d.socket, [["sandbox.remove", {"sandbox_id": mine[0], "force": True}], create])
    assert out[0]["result"]["removed"] is True and "sandbox_id" in out[1]["result"], out


def test_limits_above_the_operator_ceilings_are_invalid_params():
    d = Daemon(extra_args=["--warm-pool", "0", "--max-memory-bytes", str(1 << 30), "--max-disk-bytes",
                           str(1 << 30), "--max-pids", "1024", "--max-cpus", "1"])
    try:
        asks = [({"memory_bytes": 1 << 40}, "max_memory_bytes"), ({"disk_bytes": 1 << 40}, "max_disk_bytes"),
                ({"pids": 65536}, "max_pids"), ({"cpus": 1.5}, "max_cpus")]
        for limits, key in asks:
            with pytest.raises(RpcError) as e:
                d.call("sandbox.create", limits=limits)
            assert e.value.code == INVALID_PARAMS and e.value.kind == "invalid_params", limits
            assert key in str(e.value), str(e.value)
        at_ceiling = {"memory_bytes": 1 << 30, "disk_bytes": 1 << 30, "pids": 1024, "cpus": 1}
        sid = d.call("sandbox.create", limits=at_ceiling)["sandbox_id"]
        d.call("sandbox.remove", sandbox_id=sid, force=True)
        assert d.call("server.info")["sandboxes"] == 0
    finally:
        assert d.stop() == 0


def test_the_default_ceilings_refuse_a_terabyte():
    d = Daemon(extra_args=["--warm-pool", "0"])
    try:
        for limits in ({"memory_bytes": 1 << 40}, {"disk_bytes": 1 << 40}, {"pids": 65536}):
            with pytest.raises(RpcError) as e:
                d.call("sandbox.create", limits=limits)
            assert e.value.kind == "invalid_params", limits
    finally:
        assert d.stop() == 0


def test_a_config_whose_defaults_exceed_its_ceilings_is_refused():
    with pytest.raises(RuntimeError, match="max_memory_bytes"):
        Daemon(extra_args=["--max-memory-bytes", str(256 << 20)])  # default memory is 512 MiB
    with pytest.raises(RuntimeError, match="max_pids"):
        Daemon(extra_args=["--pids", "8192"])  # default max_pids is 4096


def test_memory_commit_bounds_the_sum_of_live_memory_limits():
    # A sandbox holds in RAM its processes' memory_bytes, its disk (a tmpfs of
    # disk_bytes) and its /dev/shm (64 MiB, at most disk_bytes): the commit
    # counts all three.
    mib = 1 << 20
    d = Daemon(extra_args=["--warm-pool", "1", "--memory-bytes", str(64 * mib), "--disk-bytes", str(16 * mib),
                           "--memory-commit-bytes", str(320 * mib), "--max-sandboxes", "16"])
    pooled, big_ram = (64 + 16 + 16) * mib, (128 + 16 + 16) * mib
    try:
        assert "memory_commit_bytes" in d.read_log()  # 16 x 96 MiB do not fit: said at startup
        big = {"memory_bytes": 128 * mib}
        first = d.call("sandbox.create", limits=big)["sandbox_id"]
        info = d.call("server.info")
        # The warm pool's sandbox counts: it holds its 96 MiB.
        assert info["memory_commit_limit_bytes"] == 320 * mib
        assert info["memory_committed_bytes"] == pooled + big_ram
        # A client's sandbox comes first: the pooled one gives its share back.
        second = d.call("sandbox.create", limits=big)["sandbox_id"]
        assert d.call("server.info")["memory_committed_bytes"] == 2 * big_ram == 320 * mib
        # Nothing is left to give way: refused, whatever the size.
        for limits in (big, {"memory_bytes": 16 * mib}):
            with pytest.raises(RpcError) as e:
                d.call("sandbox.create", limits=limits)
            assert e.value.kind == "limit_reached" and "memory_commit_bytes" in str(e.value)
            # In sizes a person reads, with what the sandbox holds in RAM, and what to do about it.
            assert "hold 320 MiB of the 320 MiB" in str(e.value) and str(e.value).endswith(
                "nsbox create --memory, --disk)"), e.value
        d.call("sandbox.remove", sandbox_id=first, force=True)
        assert d.call("server.info")["memory_committed_bytes"] <= pooled + big_ram
        third = d.call("sandbox.create", limits=big)["sandbox_id"]
        for sid in (second, third):
            d.call("sandbox.remove", sandbox_id=sid, force=True)
    finally:
        assert d.stop() == 0


def test_env_and_labels_are_bounded_in_bytes(daemon):
    cases = [{"env": {"BIG": "x" * (20 << 20)}},                       # the 20 MiB
             {"labels": {"k%d" % i: "v" * (60 << 10) for i in range(5)}},  # 300 KiB in small values
             {"env": {"K" * 2048: "v"}}]
    for params in cases:
        with pytest.raises(RpcError) as e:
            daemon.call("sandbox.create", **params)
        assert e.value.code == INVALID_PARAMS and e.value.kind == "invalid_params"
        assert "bytes" in str(e.value)
    assert daemon.call("server.info")["sandboxes"] == 0


def test_300_sandboxes_on_one_daemon_then_an_exec_in_the_last():
    """About 200 live sandboxes was where every create failed."""
    n = 300
    d = Daemon(extra_args=["--warm-pool", "0", "--max-sandboxes", str(n + 10), "--uid-pool-base", "1700000000",
                           "--uid-pool-ranges", str(n + 20), "--log-level", "info"])
    ids, errors = [], []
    lock = threading.Lock()

    def creator(count):
        with d.client(timeout=300) as c:
            for _ in range(count):
                try:
                    sid = c.call("sandbox.create", limits=SMALL)["sandbox_id"]
                    with lock:
                        ids.append(sid)
                except RpcError as e:
                    with lock:
                        errors.append(str(e))

    try:
        threads = [threading.Thread(target=creator, args=(n // 4,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and len(ids) == n, (len(ids), errors[:3])
        assert d.call("server.info")["sandboxes"] == n
        r = d.call("sandbox.exec", sandbox_id=ids[-1], argv=["sh", "-c", "echo ok; ls /proc | grep -c '^[0-9]'"])
        assert r["exit_code"] == 0 and r["stdout"].split()[0] == "ok", r
        with d.client(timeout=300) as c:
            for sid in ids:
                c.call("sandbox.remove", sandbox_id=sid, force=True)
        assert d.call("server.info")["sandboxes"] == 0
    finally:
        assert d.stop() == 0


def test_a_timeout_under_one_second_is_refused_by_every_method(daemon, sandbox):
    """timeout_seconds is from 1 to 86400 wherever it is taken (one parser):
    0.0001 was accepted and silently made 1 s; a fraction above 1 is rounded
    up, never down."""
    daemon.call("shell.create", sandbox_id=sandbox, name="t")
    calls = [("sandbox.exec", {"sandbox_id": sandbox, "command": "true"}),
             ("python.run", {"sandbox_id": sandbox, "code": "pass"}),
             ("shell.run", {"sandbox_id": sandbox, "session": "t", "command": "true"})]
    for method, params in calls:
        for bad in (0.0001, 0, -1, 86401, "5", True):
            with daemon.client() as c:
                reply = c.response(c.request(method, dict(params, timeout_seconds=bad)))
            assert reply["error"]["code"] == INVALID_PARAMS, (method, bad, reply)
            assert "timeout_seconds (--timeout) must be a number of seconds from 1 to 86400" in reply["error"]["message"], reply
        with daemon.client() as c:
            reply = c.response(c.request(method, dict(params, timeout_seconds=1.5)))
        assert "error" not in reply, (method, reply)
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="sleep 1.2; echo done", timeout_seconds=1.1)
    assert r["stdout"] == "done\n" and not r["timed_out"], r  # 1.1 is 2 s, not 1


def test_a_create_whose_client_left_is_removed_at_once():
    """A client that drops its connection before the create's reply never
    learns the id: the sandbox goes as soon as it is made, not at the idle
    reap. A session's sandbox stays (the session finds it again)."""
    d = Daemon(extra_args=["--warm-pool", "0"])
    try:
        with d.client() as c:
            c.request("sandbox.create", {})
        with d.client() as c:
            c.request("sandbox.create", {"session_id": "kept"})
        deadline = time.monotonic() + 60
        while "its client left before learning its id" not in d.read_log():
            assert time.monotonic() < deadline, d.read_log()[-3000:]
            time.sleep(0.05)
        while True:
            listed = d.call("sandbox.list")["sandboxes"]
            if len(listed) == 1:
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.05)
        assert listed[0]["session_id"] == "kept", listed
    finally:
        assert d.stop() == 0


def test_an_init_killed_from_outside_is_logged():
    d = Daemon(extra_args=["--warm-pool", "0"])
    try:
        sb = d.call("sandbox.create")["sandbox_id"]
        inits = host_inits(d)
        assert len(inits) == 1, inits
        os.kill(inits[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while "sandbox %s: removed: its init was killed by signal 9 (Killed) from outside" % sb not in d.read_log():
            assert time.monotonic() < deadline, d.read_log()[-3000:]
            time.sleep(0.05)
    finally:
        assert d.stop() == 0
