"""Hardening of execs and python.run (issue 15): nsboxd's memory stays bounded
whatever clients and sandbox code do with output, per-uid exec quota, execs
whose supervisor dies, stateful calls that time out, and the idle reaper."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest
from conftest import Daemon

MB = 1 << 20


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def host_pids_with_cmdline(prefix):
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if cmd.startswith(prefix):
            found.append(int(p))
    return found


def parent_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def small_daemon():
    """A daemon whose output budget is small, so that its bound shows."""
    d = Daemon(extra_args=["--max-buffer-bytes", str(64 * MB)])
    yield d
    assert d.stop() == 0, d.final_log[-4000:]


# --- 1. nsboxd's memory: back-pressure and the output budget ----------------------


def test_a_streaming_exec_waits_for_a_client_that_does_not_read(small_daemon):
    d = small_daemon
    sb = d.call("sandbox.create")["sandbox_id"]
    base = rss_bytes(d.proc.pid)
    c = d.client(timeout=300)
    # 600 MB of output of which 256 MiB (the most max_output_bytes allows) are sent.
    rid = c.request("sandbox.exec", {"sandbox_id": sb, "stream": True, "timeout_seconds": 600,
                                     "max_output_bytes": 256 * MB,
                                     "command": "head -c 600000000 /dev/zero | tr '\\0' x; echo done >&2"})
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peak = base
    for _ in range(40):  # 10 s of a client that reads nothing
        time.sleep(0.25)
        peak = max(peak, rss_bytes(d.proc.pid))
    assert peak - base < 100 * MB, "nsboxd grew by %d MB" % ((peak - base) // MB)
    # Another client is served meanwhile.
    assert d.call("server.info")
    # Once the client reads, the output goes on and the exec finishes.
    got = {"stdout": 0, "stderr": ""}
    while True:
        msg = c.read_message()
        if msg.get("method") == "exec.output":
            p = msg["params"]
            if p["stream"] == "stdout":
                got["stdout"] += len(p["data"])
            else:
                got["stderr"] += p["data"]
            continue
        assert msg["id"] == rid
        result = msg["result"]
        break
    c.close()
    assert result["exit_code"] == 0, result
    assert result["truncated"] is True
    assert got["stdout"] + len(got["stderr"]) == 256 * MB


def test_background_execs_keep_at_most_their_share_of_output(small_daemon):
    d = small_daemon
    sb = d.call("sandbox.create")["sandbox_id"]
    base = rss_bytes(d.proc.pid)
    ids = [d.call("sandbox.exec", sandbox_id=sb, background=True, timeout_seconds=600,
                  max_output_bytes=256 * MB,
                  command="head -c 500000000 /dev/zero | tr '\\0' y")["exec_id"] for _ in range(3)]
    peak = base
    deadline = time.monotonic() + 300
    for ex in ids:
        while d.call("exec.status", exec_id=ex)["running"]:
            peak = max(peak, rss_bytes(d.proc.pid))
            assert time.monotonic() < deadline
            time.sleep(0.2)
    peak = max(peak, rss_bytes(d.proc.pid))
    # The budget is 64 MiB: the three together keep no more than that.
    assert peak - base < 120 * MB, "nsboxd grew by %d MB" % ((peak - base) // MB)
    kept = 0
    for ex in ids:
        st = d.call("exec.status", exec_id=ex)
        assert st["exit_code"] == 0 and st["truncated"] is True, st
        out = d.call("exec.output", exec_id=ex, since=None)
        assert out["truncated"] is True and out["running"] is False
        kept += out["next"]["stdout"]
        assert set(out["stdout"]) <= {"y"}
    assert 0 < kept <= 64 * MB


def test_a_python_run_with_many_large_images_has_a_bounded_reply(small_daemon):
    d = small_daemon
    code = ("import numpy as np, matplotlib.pyplot as plt\n"
            "rng = np.random.default_rng(1)\n"
            "for i in range(50):\n"
            "    fig = plt.figure(figsize=(8, 8), dpi=100)\n"
            "    fig.figimage(rng.integers(0, 255, (800, 800, 3), dtype=np.uint8))\n")
    with d.client(timeout=300) as c:
        rid = c.request("python.run", {"session_id": "images", "code": code, "timeout_seconds": 300})
        line = c.file.readline()
    assert len(line) < 40 * MB, "a reply of %d MB" % (len(line) // MB)
    r = json.loads(line)["result"]
    assert r["status"] == "ok", r["stderr"]
    images = [o for o in r["outputs"] if o["type"] == "image"]
    assert 0 < len(images) < 50
    assert r["images_left_out"] == 50 - len(images)
    assert "left out" in r["note"]


# --- 3. an exec whose supervisor is killed from the host ------------------------


def test_an_exec_whose_supervisor_was_killed_is_reported_killed(daemon, sandbox):
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, background=True,
                     command="sleep 7777; echo clean")["exec_id"]
    deadline = time.monotonic() + 30
    while True:
        sleepers = [p for p in host_pids_with_cmdline(b"sleep\x007777\x00")]
        if sleepers:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    shell = parent_of(sleepers[0])
    supervisor = parent_of(shell)
    with open("/proc/%d/cmdline" % supervisor, "rb") as f:
        assert f.read().startswith(b"nsbox-init")
    os.kill(supervisor, signal.SIGKILL)
    while daemon.call("exec.status", exec_id=ex)["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    st = daemon.call("exec.status", exec_id=ex)
    assert st["exit_code"] is None and st["signal"] == signal.SIGKILL, st
    assert "supervisor died" in st["error"]
    # The sandbox goes on serving execs.
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="echo ok")
    assert r["stdout"] == "ok\n"
