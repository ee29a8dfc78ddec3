# SPDX-License-Identifier: Apache-2.0
"""What nsboxd shows of itself: sandbox.stats and nsbox stats (memory, cpu,
processes, disk), server.metrics and nsbox metrics in the Prometheus text
format, events.subscribe and nsbox events; each user sees their own only."""
import json
import os
import select
import subprocess
import time

import pytest

from conftest import BUILD, Daemon, ok
from nsbox_client import RpcError, as_uid

OTHER_UID = 4242


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    os.chmod(d.socket, 0o666)  # in production: membership of group nsbox
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def sh(daemon, sid, command):
    r = daemon.call("sandbox.exec", sandbox_id=sid, command=command, timeout_seconds=60)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def drop_to(uid):
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


def test_stats_show_disk_memory_and_processes_of_ones_own_sandboxes(daemon):
    sid = daemon.call("sandbox.create", session_id="stats-owner")["sandbox_id"]
    before = daemon.call("sandbox.stats", sandbox_id=sid)["sandboxes"][0]
    sh(daemon, sid, "head -c 20000000 /dev/urandom > /workspace/big")
    after = daemon.call("sandbox.stats", sandbox_id=sid)["sandboxes"][0]
    assert after["sandbox_id"] == sid and after["session_id"] == "stats-owner"
    assert after["disk_bytes"] - before["disk_bytes"] >= 20000000, (before, after)
    info = daemon.call("sandbox.info", sandbox_id=sid)
    assert after["disk_limit_bytes"] == info["limits"]["disk_bytes"]
    assert after["memory_limit_bytes"] == info["limits"]["memory_bytes"]
    assert info["stats"]["disk_bytes"] >= 20000000 and info["stats"]["disk_inodes"] >= 1
    assert after["pids"] >= 1 and after["memory_bytes"] > 0
    assert sid in [s["sandbox_id"] for s in daemon.call("sandbox.stats")["sandboxes"]]
    # Another user sees neither the sandbox nor its numbers.
    replies = as_uid(OTHER_UID, daemon.socket, [["sandbox.stats", {}], ["sandbox.stats", {"sandbox_id": sid}]])
    assert replies[0]["result"]["sandboxes"] == [], replies
    assert replies[1]["error"]["data"]["kind"] == "not_found", replies
    daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_nsbox_stats_prints_a_table(daemon):
    sid = daemon.call("sandbox.create")["sandbox_id"]
    sh(daemon, sid, "head -c 3000000 /dev/zero > f")
    out = ok(daemon.cli("stats", "--no-stream")).stdout.decode().splitlines()
    assert out[0].split()[:3] == ["SANDBOX", "SESSION", "CPU"], out
    row = [line for line in out if line.startswith(sid[:12])]
    assert len(row) == 1 and "MiB" in row[0], out
    one = json.loads(ok(daemon.cli("--json", "stats", "--no-stream", sid)).stdout)
    assert [s["sandbox_id"] for s in one["sandboxes"]] == [sid]
    assert "no sandbox" in daemon.cli("stats", "--no-stream", "ffffffff").stderr.decode()
    daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def parse_metrics(text):
    from prometheus_client.parser import text_string_to_metric_families
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def test_metrics_are_prometheus_text_with_requests_latencies_and_each_sandbox(daemon):
    sid = daemon.call("sandbox.create", session_id='odd "name"\\x')["sandbox_id"]
    sh(daemon, sid, "true")
    with pytest.raises(RpcError):
        daemon.call("sandbox.info", sandbox_id="ffffffff")
    text = ok(daemon.cli("metrics")).stdout.decode()
    m = parse_metrics(text)
    ok_creates = [v for labels, v in m["nsbox_requests_total"]
                  if labels == {"method": "sandbox.create", "outcome": "ok"}]
    assert ok_creates and ok_creates[0] >= 1, m["nsbox_requests_total"]
    assert any(labels == {"method": "sandbox.info", "outcome": "not_found"} and v >= 1
               for labels, v in m["nsbox_requests_total"])
    counts = [v for labels, v in m["nsbox_request_duration_seconds_count"] if labels["method"] == "sandbox.exec"]
    assert counts and counts[0] >= 1
    assert any(labels.get("type") == "exec.ended" for labels, _ in m["nsbox_events_total"])
    # Removals count by the kind of their reason, not its numbers.
    reasons = {labels["reason"] for labels, _ in m["nsbox_events_total"] if labels["type"] == "sandbox.removed"}
    assert reasons <= {"asked by uid"} and reasons, reasons
    mine = [(labels, v) for labels, v in m["nsbox_sandbox_disk_limit_bytes"] if labels["sandbox_id"] == sid]
    assert len(mine) == 1 and mine[0][0]["session_id"] == 'odd "name"\\x' and mine[0][1] > 0, mine
    assert [v for labels, v in m["nsbox_sandboxes"] if labels == {"state": "running"}][0] >= 1
    # Another user: their own sandboxes' lines, nothing of the daemon's or of root's sandboxes.
    p = subprocess.run([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "metrics"],
                       preexec_fn=drop_to(OTHER_UID), capture_output=True, timeout=60, cwd="/")
    assert p.returncode == 0, p.stderr
    theirs = parse_metrics(p.stdout.decode())
    assert "nsbox_requests_total" not in theirs and sid not in p.stdout.decode(), p.stdout
    daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def read_events(proc, until, timeout=30):
    """Lines of `nsbox --json events` until one satisfies `until`."""
    events, buf = [], b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "no such event within %ss; got %s" % (timeout, events)
        r, _, _ = select.select([proc.stdout], [], [], left)
        if not r:
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        assert chunk, "nsbox events ended: %s" % proc.stderr.read().decode()
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            events.append(json.loads(line))
            if until(events[-1]):
                return events


def test_events_stream_the_lifecycle_to_its_owner_only(daemon):
    nsbox = os.path.join(BUILD, "nsbox")
    mine = subprocess.Popen([nsbox, "--socket", daemon.socket, "--json", "events"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    theirs = subprocess.Popen([nsbox, "--socket", daemon.socket, "--json", "events"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, preexec_fn=drop_to(OTHER_UID), cwd="/")
    try:
        for p in (mine, theirs):  # both streams are open
            read_events(p, lambda e: e["type"] == "events.subscribed")
        other = as_uid(OTHER_UID, daemon.socket, [["sandbox.create", {}]])[0]["result"]["sandbox_id"]
        seen = read_events(theirs, lambda e: e["type"] == "sandbox.created" and e["sandbox_id"] == other)
        assert "owner" not in seen[-1]
        sid = daemon.call("sandbox.create")["sandbox_id"]
        r = daemon.call("sandbox.exec", sandbox_id=sid, command="exit 3")
        assert r["exit_code"] == 3
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)
        events = read_events(mine, lambda e: e["type"] == "sandbox.removed" and e["sandbox_id"] == sid)
        about = [(e["type"], e.get("exit_code")) for e in events if e["sandbox_id"] == sid]
        assert about == [("sandbox.created", None), ("exec.started", None), ("exec.ended", 3),
                         ("sandbox.removed", None)], events
        assert all(e["owner"] == 0 for e in events if e["sandbox_id"] == sid)
        assert events[-1]["reason"] == "asked by uid 0 (force)", events[-1]
        # Root sees the other user's sandbox go; the other user never saw root's.
        as_uid(OTHER_UID, daemon.socket, [["sandbox.remove", {"sandbox_id": other, "force": True}]])
        read_events(mine, lambda e: e["type"] == "sandbox.removed" and e["sandbox_id"] == other)
        seen += read_events(theirs, lambda e: e["type"] == "sandbox.removed" and e["sandbox_id"] == other)
        assert sid not in [e["sandbox_id"] for e in seen], seen
    finally:
        for p in (mine, theirs):
            p.terminate()
            p.wait(timeout=30)


def test_events_of_a_missing_sandbox_are_not_found(daemon):
    p = daemon.cli("events", "ffffffff")
    assert p.returncode != 0 and "no sandbox" in p.stderr.decode(), p
