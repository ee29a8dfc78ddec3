# SPDX-License-Identifier: Apache-2.0
"""The record of removed sandboxes: it outlives a restart of nsboxd (with and
without live restore, after kill -9 too), a torn or hostile file under the state
dir is ignored with a log line, an exec of a removed sandbox is answered gone as
its sandbox is, and a session's call that arrives while its sandbox is still
stopping hears that it is a new sandbox."""
import json
import os
import socket
import tempfile
import threading
import time

import pytest
from nsbox_client import as_uid
from test_idle_lifetime import error_of
from test_service import Service, end_services, wait_until

# A uid pool of its own: other tests' daemons may run beside this one.
POOL_BASE = 1_800_000_000
RECORD = "removed-sandboxes.json"


def kind_of(fn):
    return error_of(fn)["data"]["kind"]


@pytest.fixture
def root():
    d = tempfile.mkdtemp(prefix="nsbox-removals-")
    os.chmod(d, 0o755)
    started = []

    def make(*extra):
        svc = Service(d, extra_args=["--warm-pool", "0", *extra], pool_base=POOL_BASE)
        started.append(svc)
        return svc
    yield d, make
    # What a killed daemon (or live restore) left is removed by one without it.
    end_services(d, started, POOL_BASE)


def removed_ids(svc):
    return [r["sandbox_id"] for r in svc.call("sandbox.list", include_inactive=True)["removed"]]


def test_removed_sandboxes_and_their_execs_are_gone_after_a_restart_not_unknown(root):
    d, make = root
    svc = make()
    svc.start()
    kept = svc.call("sandbox.create", session_id="keeper")["sandbox_id"]
    running = svc.call("sandbox.exec", sandbox_id=kept, command="sleep 300", background=True,
                       timeout_seconds=600)["exec_id"]
    done = svc.call("sandbox.exec", sandbox_id=kept, command="echo hi", background=True)["exec_id"]
    assert wait_until(lambda: not svc.call("exec.status", exec_id=done)["running"])
    svc.call("sandbox.remove", sandbox_id=kept, force=True)
    stopped = svc.call("sandbox.create")["sandbox_id"]  # removed by nsboxd's stop
    assert svc.terminate() == 0

    svc.start()
    e = error_of(lambda: svc.call("sandbox.info", sandbox_id=kept))
    assert e["data"]["kind"] == "gone" and "asked by uid 0" in e["message"], e
    assert e["data"]["session_id"] == "keeper"
    e = error_of(lambda: svc.call("sandbox.exec", sandbox_id=stopped, command="true"))
    assert e["data"]["kind"] == "gone" and "nsboxd is stopping" in e["message"], e
    assert removed_ids(svc)[:2] == [stopped, kept]
    # Its execs, by full id and by prefix, are gone with it.
    for method, params in [("exec.status", {}), ("exec.output", {}), ("exec.kill", {}),
                           ("exec.stdin", {"data": "x"})]:
        for ref in (running, done[:8]):
            e = error_of(lambda: svc.call(method, exec_id=ref, **params))
            assert e["data"]["kind"] == "gone", (method, ref, e)
            assert "ended with its sandbox" in e["message"] and "asked by uid 0" in e["message"], e
            assert e["data"]["sandbox_id"] == kept
    assert kind_of(lambda: svc.call("exec.status", exec_id="0" * 36)) == "not_found"
    # The session's next sandbox says the last one went, once, after the restart too.
    again = svc.call("sandbox.create", session_id="keeper")
    assert again["recreated"] is True and again["previous"]["sandbox_id"] == kept, again
    assert "recreated" not in svc.call("sandbox.create", session_id="keeper")

    # A removal is saved within a moment of it, and a kill -9 after that keeps it as well.
    svc.call("sandbox.remove", sandbox_id=again["sandbox_id"])
    assert wait_until(lambda: again["sandbox_id"] in open(os.path.join(d, "state", RECORD)).read())
    svc.kill9()
    svc.start()
    assert kind_of(lambda: svc.call("sandbox.info", sandbox_id=again["sandbox_id"])) == "gone"
    assert svc.terminate() == 0


def test_a_sandbox_that_a_crashed_nsboxd_left_is_gone_after_the_next_start_says_why(root):
    d, make = root
    svc = make()
    svc.start()
    left = svc.call("sandbox.create", session_id="crash")["sandbox_id"]
    svc.kill9()
    svc.start()
    e = error_of(lambda: svc.call("sandbox.info", sandbox_id=left))
    assert e["data"]["kind"] == "gone" and "nsboxd stopped without removing it" in e["message"], e
    again = svc.call("sandbox.create", session_id="crash")
    assert again["recreated"] is True and again["previous"]["sandbox_id"] == left, again
    assert svc.terminate() == 0


def test_the_record_outlives_a_live_restore_beside_the_sandboxes_it_adopts(root):
    d, make = root
    svc = make("--live-restore", "1")
    svc.start()
    if "live-restore" not in svc.call("server.info")["features"]:
        pytest.skip("live restore is off on this host")
    adopted = svc.call("sandbox.create")["sandbox_id"]
    gone = svc.call("sandbox.create", session_id="lr")["sandbox_id"]
    ex = svc.call("sandbox.exec", sandbox_id=gone, command="sleep 300", background=True,
                  timeout_seconds=600)["exec_id"]
    svc.call("sandbox.remove", sandbox_id=gone, force=True)
    assert svc.terminate() == 0
    svc.start()
    assert svc.call("sandbox.exec", sandbox_id=adopted, command="echo here")["stdout"] == "here\n"
    e = error_of(lambda: svc.call("sandbox.info", sandbox_id=gone))
    assert e["data"]["kind"] == "gone" and "asked by uid 0" in e["message"], e
    assert kind_of(lambda: svc.call("exec.status", exec_id=ex)) == "gone"
    assert removed_ids(svc) == [gone]
    svc.call("sandbox.remove", sandbox_id=adopted)
    assert svc.terminate() == 0


def hostile_record(d, entries):
    os.makedirs(os.path.join(d, "state"), exist_ok=True)
    with open(os.path.join(d, "state", RECORD), "w") as f:
        json.dump({"version": 1, "removals": entries}, f)


def entry(i, owner=0, **over):
    e = {"sandbox_id": "%08x-0000-4000-8000-000000000000" % i, "owner": owner, "session_id": "",
         "reason": "asked by uid %d" % owner, "removed_at_ms": int(time.time() * 1000) - 1000,
         "recreated": False, "exec_ids": []}
    e.update(over)
    return e


@pytest.mark.parametrize("content", [b"{\"version\": 1, \"removals\": [{\"sandbox_id\"", b"\x00" * 64,
                                     b"[]", b"{\"removals\": 7}", b""],
                         ids=["torn", "nul-bytes", "a-list", "no-list", "empty"])
def test_a_torn_record_is_ignored_with_a_log_line(root, content):
    d, make = root
    os.makedirs(os.path.join(d, "state"), exist_ok=True)
    with open(os.path.join(d, "state", RECORD), "wb") as f:
        f.write(content)
    svc = make()
    svc.start()
    assert "the record of removed sandboxes" in svc.log() and "was ignored" in svc.log()
    assert removed_ids(svc) == []
    sid = svc.call("sandbox.create")["sandbox_id"]
    svc.call("sandbox.remove", sandbox_id=sid)
    assert removed_ids(svc) == [sid]
    assert svc.terminate() == 0


def test_a_hostile_record_is_read_within_the_bounds_and_its_bad_entries_ignored(root):
    d, make = root
    now = int(time.time() * 1000)
    good = entry(1, owner=0, session_id="s", reason="idle for 5 min (idle_timeout_seconds)",
                 exec_ids=["%08x-1111-4000-8000-000000000000" % k for k in range(100)] + [7, "../x"])
    bad = [entry(2, owner=-1), entry(3, owner=2 ** 40), entry(4, sandbox_id="../../etc/passwd"),
           entry(5, reason="r" * 100000), entry(6, session_id="s" * 10000), entry(7, removed_at_ms="soon"),
           entry(8, exec_ids="all"), entry(9, recreated="yes"), 17, None, [],
           entry(1)]  # a second entry for the same id
    old = entry(11, removed_at_ms=now - 8 * 24 * 3600 * 1000)  # aged out: dropped
    future = entry(12, removed_at_ms=now + 10 ** 12)  # a clock set back: taken as just now
    flood = [entry(0x1000 + k, owner=5000) for k in range(400)]
    hostile_record(d, [good, old, future] + bad + flood)
    svc = make()
    svc.start()
    assert "entries were ignored" in svc.log()
    e = error_of(lambda: svc.call("sandbox.info", sandbox_id=good["sandbox_id"]))
    assert e["data"]["kind"] == "gone" and "idle for 5 min" in e["message"], e
    # Its first 32 exec ids are kept, the rest (and what is not an id) not.
    assert kind_of(lambda: svc.call("exec.status", exec_id=good["exec_ids"][0])) == "gone"
    assert kind_of(lambda: svc.call("exec.status", exec_id=good["exec_ids"][40])) == "not_found"
    assert kind_of(lambda: svc.call("sandbox.info", sandbox_id=old["sandbox_id"])) == "not_found"
    assert kind_of(lambda: svc.call("sandbox.info", sandbox_id=future["sandbox_id"])) == "gone"
    removed = svc.call("sandbox.list", include_inactive=True)["removed"]
    assert len([r for r in removed if r["owner"] == 5000]) == 32
    assert len(removed) == 34, [r["sandbox_id"] for r in removed]
    # The file is rewritten within the bounds.
    assert wait_until(lambda: len(json.load(open(os.path.join(d, "state", RECORD)))["removals"]) == 34)
    assert svc.terminate() == 0


def test_a_record_that_is_not_a_regular_file_is_not_read(root):
    d, make = root
    os.makedirs(os.path.join(d, "state"), exist_ok=True)
    path = os.path.join(d, "state", RECORD)
    os.mkfifo(path)  # a reader that opened it would wait forever
    svc = make()
    svc.start()
    assert "was ignored" in svc.log()
    assert svc.terminate() == 0
    os.unlink(path)
    os.symlink("/etc/passwd", path)
    svc.start()
    assert svc.log().count("was ignored") == 2
    sid = svc.call("sandbox.create")["sandbox_id"]
    svc.call("sandbox.remove", sandbox_id=sid)
    assert svc.terminate() == 0
    # Saved as a file of its own, the link replaced, never followed.
    assert not os.path.islink(path) and open("/etc/passwd").read().startswith("root:")


@pytest.mark.hostroot("clients of distinct host uids: clients outside nsboxd's user namespace are one owner")
def test_another_user_learns_nothing_of_a_removed_sandboxs_exec(root):
    d, make = root
    svc = make()
    svc.start()
    os.chmod(svc.socket, 0o666)
    out = as_uid(1000, svc.socket, [["sandbox.create", {}]])
    sid = out[0]["result"]["sandbox_id"]
    out = as_uid(1000, svc.socket, [["sandbox.exec", {"sandbox_id": sid, "command": "sleep 300",
                                                      "background": True}],
                                    ["sandbox.remove", {"sandbox_id": sid, "force": True}]])
    ex = out[0]["result"]["exec_id"]
    out = as_uid(1000, svc.socket, [["exec.status", {"exec_id": ex}]])
    assert out[0]["error"]["data"]["kind"] == "gone", out
    out = as_uid(1001, svc.socket, [["exec.status", {"exec_id": ex}], ["exec.kill", {"exec_id": ex[:8]}]])
    assert [o["error"]["data"]["kind"] for o in out] == ["not_found", "not_found"], out
    assert "removed" not in out[0]["error"]["message"]
    assert svc.terminate() == 0


def send_raw(sock_path, method, params):
    """Send a request and return the connection, its reply unread."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}) + "\n").encode())
    return s


def test_a_session_call_while_its_sandbox_is_still_stopping_hears_it_is_new(root):
    d, make = root
    svc = make()
    svc.start()
    sid = svc.call("sandbox.create", session_id="slow")["sandbox_id"]
    # Many processes holding memory: its init's end waits for all of them, so
    # the sandbox stays "stopping" for a while after the removal starts.
    svc.call("sandbox.exec", sandbox_id=sid, background=True, timeout_seconds=600, command=(
        "for i in $(seq 60); do python3 -c 'import time; b = bytearray(4 << 20); time.sleep(600)' & done; "
        "wait"))
    assert wait_until(lambda: svc.call("sandbox.exec", sandbox_id=sid,
                                       command="pgrep -c python3")["stdout"].strip() == "60")
    conn = send_raw(svc.socket, "sandbox.remove", {"sandbox_id": sid, "force": True})
    try:
        def stopping():
            for sb in svc.call("sandbox.list", include_inactive=True)["sandboxes"]:
                if sb["sandbox_id"] == sid:
                    return sb["state"] == "stopping"
            return True  # already gone: the call below comes later still
        assert wait_until(stopping, timeout=30)
        r = svc.call("sandbox.create", session_id="slow")
        assert r["sandbox_id"] != sid
        assert r.get("recreated") is True and r["previous"]["sandbox_id"] == sid, r
        assert "asked by uid 0" in r["reason"]
    finally:
        conn.close()
    assert svc.terminate() == 0
