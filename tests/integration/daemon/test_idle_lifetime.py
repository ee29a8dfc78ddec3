# SPDX-License-Identifier: Apache-2.0
"""An idle sandbox's life: paused (not removed) by default and resumed with
its state, its expiry shown, a removed one answered with when and why, its
session remade and saying so, and none of it shown to another user."""
import os
import re
import time

import pytest

from conftest import Daemon
from nsbox_client import RpcError, as_uid


def wait_until(pred, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def error_of(fn):
    try:
        fn()
    except RpcError as e:
        return e.error
    raise AssertionError("no error")


def state_of(d, sid):
    for sb in d.call("sandbox.list")["sandboxes"]:
        if sb["sandbox_id"] == sid:
            return sb["state"]
    return None


def needs_freezer(d):
    if "pause" not in d.call("server.info")["features"]:
        pytest.skip("this host's cgroups have no freezer")


@pytest.fixture
def short_idle():
    """Idle after 2 s (paused, the default action), removed after 2 s paused."""
    d = Daemon(extra_args=["--idle-timeout-seconds", "2", "--paused-timeout-seconds", "2"])
    os.chmod(d.socket, 0o666)  # in production: membership of group nsbox
    yield d
    assert d.stop() == 0, d.final_log[-4000:]


def test_an_idle_sandbox_is_paused_not_removed_and_resumes_with_its_variables_and_shells():
    d = Daemon(extra_args=["--idle-timeout-seconds", "2"])
    try:
        needs_freezer(d)
        r = d.call("python.run", session_id="thinker", stateful=True, code="x = 41")
        assert r["status"] == "ok", r
        sid = r["sandbox_id"]
        d.call("shell.create", sandbox_id=sid, name="work", cwd="/workspace")
        assert d.call("shell.run", sandbox_id=sid, session="work", command="export V=7; cd /tmp")["exit_code"] == 0
        assert wait_until(lambda: state_of(d, sid) == "paused"), d.read_log()[-3000:]
        # The next call resumes it: the interpreter's variables and the shell's are there.
        r = d.call("python.run", session_id="thinker", stateful=True, code="x + 1")
        assert r["status"] == "ok" and r["result"] == "42" and r["sandbox_id"] == sid, r
        assert "recreated" not in r
        out = d.call("shell.run", sandbox_id=sid, session="work", command='echo "$V $PWD"')
        assert out["stdout"] == "7 /tmp\n", out
        assert state_of(d, sid) == "running"
    finally:
        assert d.stop() == 0, d.final_log[-4000:]


def test_info_and_list_say_when_and_why_a_sandbox_will_be_paused_or_removed():
    d = Daemon()
    try:
        needs_freezer(d)
        sid = d.call("sandbox.create", idle_timeout_seconds=600)["sandbox_id"]
        info = d.call("sandbox.info", sandbox_id=sid)
        assert info["owner"] == 0 and info["idle_action"] == "pause"
        assert info["paused_timeout_seconds"] == 24 * 3600
        exp = info["expires"]
        assert exp["action"] == "pause" and 0 < exp["in_seconds"] <= 600 and "idle" in exp["reason"], exp
        assert re.match(r"\d{4}-\d\d-\d\dT", exp["at"]) and info["last_active"]
        listed = [s for s in d.call("sandbox.list")["sandboxes"] if s["sandbox_id"] == sid][0]
        assert listed["expires"]["action"] == "pause"
        # Paused, it is removed after its paused timeout, chosen per sandbox.
        other = d.call("sandbox.create", idle_action="remove", paused_timeout_seconds=60)["sandbox_id"]
        assert d.call("sandbox.info", sandbox_id=other)["expires"]["action"] == "remove"
        d.call("sandbox.pause", sandbox_id=other)
        exp = d.call("sandbox.info", sandbox_id=other)["expires"]
        assert exp["action"] == "remove" and 0 < exp["in_seconds"] <= 60 and "paused" in exp["reason"], exp
        # Bad values are refused, clearly.
        e = error_of(lambda: d.call("sandbox.create", idle_action="hibernate"))
        assert "idle_action" in e["message"]
    finally:
        assert d.stop() == 0, d.final_log[-4000:]


def test_a_removed_sandbox_is_answered_gone_with_when_and_why(short_idle):
    d = short_idle
    needs_freezer(d)
    sid = d.call("sandbox.create", session_id="gone-one")["sandbox_id"]
    assert wait_until(lambda: state_of(d, sid) is None), d.read_log()[-3000:]
    for method, params in [("sandbox.exec", {"command": "true"}), ("sandbox.info", {}),
                           ("python.run", {"code": "1"}), ("shell.run", {"session": "a", "command": "true"})]:
        e = error_of(lambda: d.call(method, sandbox_id=sid, **params))
        assert e["data"]["kind"] == "gone", (method, e)
        assert "was removed at" in e["message"] and "paused for 2 s" in e["message"], e
        assert e["data"]["sandbox_id"] == sid and e["data"]["session_id"] == "gone-one"
    # ... by a prefix of its id too, and a removal asked for says who asked.
    asked = d.call("sandbox.create")["sandbox_id"]
    d.call("sandbox.remove", sandbox_id=asked)
    e = error_of(lambda: d.call("sandbox.info", sandbox_id=asked[:8]))
    assert e["data"]["kind"] == "gone" and "asked by uid 0" in e["message"], e
    # A typo is still not found.
    assert error_of(lambda: d.call("sandbox.info", sandbox_id="nosuchbox"))["data"]["kind"] == "not_found"
    # ls -a lists them with the reason.
    removed = d.call("sandbox.list", include_inactive=True)["removed"]
    assert [r["sandbox_id"] for r in removed][:2] == [asked, sid]
    assert "paused for 2 s" in removed[1]["reason"]


@pytest.mark.hostroot("clients of distinct host uids: clients outside nsboxd's user namespace are one owner")
def test_another_user_learns_nothing_of_a_removed_sandbox(short_idle):
    d = short_idle
    sid = d.call("sandbox.create")["sandbox_id"]
    d.call("sandbox.remove", sandbox_id=sid)
    out = as_uid(1000, d.socket, [["sandbox.info", {"sandbox_id": sid}],
                                  ["sandbox.list", {"include_inactive": True}],
                                  ["sandbox.create", {}]])
    assert out[0]["error"]["data"]["kind"] == "not_found" and "removed" not in out[0]["error"]["message"]
    assert out[1]["result"]["removed"] == []
    theirs = out[2]["result"]["sandbox_id"]
    out = as_uid(1000, d.socket, [["sandbox.remove", {"sandbox_id": theirs}],
                                  ["sandbox.info", {"sandbox_id": theirs}]])
    assert out[1]["error"]["data"]["kind"] == "gone", out
    out = as_uid(1001, d.socket, [["sandbox.info", {"sandbox_id": theirs}]])
    assert out[0]["error"]["data"]["kind"] == "not_found", out


def test_a_session_whose_sandbox_was_removed_is_made_again_and_says_its_files_are_gone(short_idle):
    d = short_idle
    needs_freezer(d)
    r = d.call("python.run", session_id="agent", code="open('/workspace/notes', 'w').write('x')")
    first = r["sandbox_id"]
    # Reaped: out of the list and its removal recorded (a sandbox still stopping is the first only).
    assert wait_until(lambda: state_of(d, first) is None and first in [
        x["sandbox_id"] for x in d.call("sandbox.list", include_inactive=True)["removed"]]), d.read_log()[-3000:]
    r = d.call("python.run", session_id="agent", code="import os; print(os.path.exists('/workspace/notes'))")
    assert r["stdout"] == "False\n" and r["sandbox_id"] != first
    assert r["recreated"] is True and "paused for 2 s" in r["reason"], r
    assert r["previous"]["sandbox_id"] == first and "files are gone" in r["previous"]["message"], r
    # Once: the next call finds the new one as usual.
    again = d.call("python.run", session_id="agent", code="print(1)")
    assert "recreated" not in again and again["sandbox_id"] == r["sandbox_id"]
    # sandbox.create of the session says it too.
    d.call("sandbox.remove", sandbox_id=r["sandbox_id"])
    c = d.call("sandbox.create", session_id="agent")
    assert c["recreated"] is True and c["previous"]["sandbox_id"] == r["sandbox_id"]
    assert "asked by uid 0" in c["reason"]
