# SPDX-License-Identifier: Apache-2.0
"""What nsboxd shows of itself: sandbox.stats and nsbox stats (memory, cpu,
processes, disk), server.metrics and nsbox metrics in the Prometheus text
format, events.subscribe and nsbox events; each user sees their own only."""
import json
import os
import pty
import re
import select
import signal
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


CLEAR = b"\x1b[H\x1b[J"
SIZE = re.compile(r"(\d+(?:\.\d)?) (bytes?|KiB|MiB|GiB|TiB) / \d+(?:\.\d)? (?:bytes?|KiB|MiB|GiB|TiB)")


def disk_of(row):
    """The DISK USAGE of a row of nsbox stats, in bytes (MEM USAGE is the row's first "X / Y")."""
    sizes = SIZE.findall(row)
    assert len(sizes) == 2, row
    number, unit = sizes[1]
    return float(number) * {"byte": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
                            "TiB": 1 << 40}[unit]


def test_nsbox_stats_refreshes_on_a_terminal_until_interrupted(daemon):
    """Without --no-stream, on a terminal, nsbox stats redraws its table every second (each
    frame starts by clearing the screen) with what the sandbox uses now, until Ctrl-C."""
    sid = daemon.call("sandbox.create")["sandbox_id"]
    master, slave = pty.openpty()
    proc = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "stats", sid],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    buf = b""

    def next_frames(seen, until, timeout=60):
        """The sandbox's row in each complete frame (a clear, the table, and the next clear)
        on the terminal, once more than `seen` and `until` holds for the latest one's disk."""
        nonlocal buf
        deadline = time.monotonic() + timeout
        while True:
            frames = [f.replace(b"\r", b"").decode() for f in buf.split(CLEAR)[1:-1]]
            rows = [[line for line in f.split("\n") if line.startswith(sid[:12])] for f in frames]
            assert all(len(r) == 1 for r in rows), frames
            rows = [r[0] for r in rows]
            if len(rows) > seen and until(disk_of(rows[-1])):
                assert all(f.split("\n")[0].split()[:2] == ["SANDBOX", "SESSION"] for f in frames), frames
                return rows
            left = deadline - time.monotonic()
            assert left > 0, "no such frame within %ss; got %r" % (timeout, buf[-3000:])
            r, _, _ = select.select([master], [], [], left)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the terminal's other side is closed
                    chunk = b""
                assert chunk, "nsbox stats ended: %s" % proc.stderr.read().decode()
                buf += chunk

    try:
        first = next_frames(0, lambda disk: True)
        before = disk_of(first[-1])
        sh(daemon, sid, "head -c 30000000 /dev/urandom > /workspace/grown")
        later = next_frames(len(first), lambda disk: disk >= before + 25 * (1 << 20))
        assert len(later) >= 2, later
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
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


def requests_total(m, method, outcome):
    return sum(v for labels, v in m["nsbox_requests_total"] if labels == {"method": method, "outcome": outcome})


def test_metrics_give_each_sandboxs_memory_and_disk_and_count_refusals_by_outcome(daemon):
    """nsbox_sandbox_{memory,disk}_bytes of a sandbox that holds 96 MiB and wrote 30 MB to
    /workspace, their limits (the sandbox's own), and each refused request counted once under
    its method and its error's kind."""
    sid = daemon.call("sandbox.create", session_id="metrics-use")["sandbox_id"]

    def mine(name, text=None):
        m = parse_metrics(text or daemon.call("server.metrics")["text"])
        values = [v for labels, v in m.get(name, []) if labels.get("sandbox_id") == sid]
        assert len(values) == 1, (name, m.get(name))
        return values[0]

    disk_before = mine("nsbox_sandbox_disk_bytes")
    sh(daemon, sid, "head -c 30000000 /dev/urandom > /workspace/thirty-mb")
    daemon.call("sandbox.exec", sandbox_id=sid, background=True, argv=[
        "python3", "-c", "import time\nheld = b'x' * (96 << 20)\ntime.sleep(600)"])
    deadline = time.monotonic() + 60
    while mine("nsbox_sandbox_memory_bytes") < 96 << 20:
        assert time.monotonic() < deadline, daemon.call("sandbox.stats", sandbox_id=sid)
        time.sleep(0.1)
    text = daemon.call("server.metrics")["text"]
    limits = daemon.call("sandbox.info", sandbox_id=sid)["limits"]
    disk = mine("nsbox_sandbox_disk_bytes", text)
    # The file's bytes, not the memory's: the two are separate budgets.
    assert 30000000 <= disk - disk_before < 30000000 + (4 << 20), (disk_before, disk)
    assert mine("nsbox_sandbox_disk_limit_bytes", text) == limits["disk_bytes"]
    assert 96 << 20 <= mine("nsbox_sandbox_memory_bytes", text) < limits["memory_bytes"]
    assert mine("nsbox_sandbox_memory_limit_bytes", text) == limits["memory_bytes"]

    refusals = [("sandbox.create", "invalid_params"), ("sandbox.exec", "not_found"),
                ("auth.act_as", "permission_denied")]
    before = parse_metrics(daemon.call("server.metrics")["text"])
    with pytest.raises(RpcError) as over:  # over the largest memory limit there is
        daemon.call("sandbox.create", limits={"memory_bytes": "2T"})
    assert over.value.kind == "invalid_params", over.value
    # Another user's call on root's sandbox, and a non-root client's act_as.
    replies = as_uid(OTHER_UID, daemon.socket, [["sandbox.exec", {"sandbox_id": sid, "command": "true"}],
                                                ["auth.act_as", {"uid": 1}]])
    assert [r["error"]["data"]["kind"] for r in replies] == ["not_found", "permission_denied"], replies
    after = parse_metrics(daemon.call("server.metrics")["text"])
    counted = [requests_total(after, *r) - requests_total(before, *r) for r in refusals]
    assert counted == [1, 1, 1], list(zip(refusals, counted))
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
