# SPDX-License-Identifier: Apache-2.0
"""What the CLI shows of a sandbox's life and owner: `ls` has OWNER and
EXPIRES, `info` the expiry as sandbox.info gives it, `ls -a` the sandboxes removed lately and why, a call to a removed
one says when and why it went, and root's session names take its own
sandbox first or say how to pick another user's."""
import json
import os
import re
from datetime import datetime

import pytest
from nsbox_client import RpcError, as_uid


def create(daemon, **params):
    return daemon.call("sandbox.create", **params)["sandbox_id"]


def remove(daemon, sandbox_id):
    try:
        daemon.call("sandbox.remove", sandbox_id=sandbox_id, force=True)
    except RpcError:
        pass


def ls_line(daemon, sandbox_id, *flags):
    p = daemon.cli("ls", *flags)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    lines = [line for line in out.splitlines() if line.startswith(sandbox_id)]
    assert lines, out
    return out.splitlines()[0], lines[0], out


def test_ls_shows_the_owner_and_when_the_sandbox_is_paused_or_removed(daemon):
    if "pause" not in daemon.call("server.info")["features"]:
        pytest.skip("this host's cgroups have no freezer")
    sid = create(daemon, idle_timeout_seconds=600)
    try:
        header, line, _ = ls_line(daemon, sid)
        assert "OWNER" in header and "EXPIRES" in header
        assert re.search(r"\broot\s", line), line
        assert re.search(r"paused in (9|10)m\b", line), line
        daemon.call("sandbox.pause", sandbox_id=sid)
        _, line, _ = ls_line(daemon, sid)
        assert re.search(r"paused, removed in 2[34]h\b", line), line
    finally:
        remove(daemon, sid)


def info_expiry(daemon, sandbox_id, *flags):
    p = daemon.cli(*flags, "info", sandbox_id)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["expires"]


def instant(timestamp):
    return datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ")


def test_info_shows_when_and_why_the_sandbox_is_paused_or_removed_as_the_rpc_says(daemon):
    if "pause" not in daemon.call("server.info")["features"]:
        pytest.skip("this host's cgroups have no freezer")
    sid = create(daemon, idle_timeout_seconds=600)
    try:
        for paused, action, why in ((False, "pause", "idle for "), (True, "remove", "paused for ")):
            if paused:
                daemon.call("sandbox.pause", sandbox_id=sid)
            before = daemon.call("sandbox.info", sandbox_id=sid)["expires"]
            assert before["action"] == action and why in before["reason"], before
            shown = {"human": info_expiry(daemon, sid), "--json": info_expiry(daemon, sid, "--json")}
            after = daemon.call("sandbox.info", sandbox_id=sid)["expires"]
            for form, exp in shown.items():
                assert (exp["action"], exp["reason"]) == (action, before["reason"]), (form, exp, before)
                # The same instant: counted down between the two RPC calls, the
                # wall-clock time it falls at the same but for rounding.
                assert after["in_seconds"] <= exp["in_seconds"] <= before["in_seconds"], (form, exp, before)
                assert abs((instant(exp["at"]) - instant(before["at"])).total_seconds()) < 1, (form, exp, before)
    finally:
        remove(daemon, sid)


def test_ls_all_lists_the_removed_ones_and_a_call_to_one_says_why(daemon):
    sid = create(daemon, session_id="short-lived")
    daemon.call("sandbox.remove", sandbox_id=sid)
    _, line, out = ls_line(daemon, sid, "-a")
    assert "REMOVED" in out and "short-lived" in line and "asked by uid 0" in line, out
    p = daemon.cli("exec", sid, "true")
    err = p.stderr.decode()
    assert p.returncode != 0 and "was removed at" in err and "asked by uid 0" in err, err
    # By its session name too (no live sandbox has it).
    p = daemon.cli("exec", "short-lived", "true")
    assert p.returncode != 0 and "was removed at" in p.stderr.decode(), p.stderr


@pytest.fixture
def open_socket(daemon):
    os.chmod(daemon.socket, 0o666)  # in production: membership of group nsbox


@pytest.mark.hostroot("clients of distinct host uids: clients outside nsboxd's user namespace are one owner")
def test_roots_exec_by_session_name_takes_its_own_or_says_how_to_pick(daemon, open_socket):
    theirs = {}
    for uid in (1000, 1001):
        out = as_uid(uid, daemon.socket, [["sandbox.create", {"session_id": "shared"}]])
        theirs[uid] = out[0]["result"]["sandbox_id"]
    mine = None
    try:
        _, line, _ = ls_line(daemon, theirs[1000])
        assert re.search(r"\s(1000|\w+)\s", line)
        p = daemon.cli("exec", "shared", "true")
        err = p.stderr.decode()
        assert p.returncode != 0 and "1000:shared" in err and "1001:shared" in err and "UID:NAME" in err, err
        p = daemon.cli("exec", "1001:shared", "--", "sh", "-c", "echo picked > /workspace/which")
        assert p.returncode == 0, p.stderr
        assert daemon.call("fs.read", sandbox_id=theirs[1001], path="which")["content"] == "picked\n"
        # NAME:NAME, the user's name from /etc/passwd (the static CLI reads it without NSS).
        name = next((line.split(":")[0] for line in open("/etc/passwd") if line.split(":")[2:3] == ["1000"]), None)
        if name is not None:
            p = daemon.cli("exec", name + ":shared", "--", "sh", "-c", "echo by-name > /workspace/which")
            assert p.returncode == 0, p.stderr
            assert daemon.call("fs.read", sandbox_id=theirs[1000], path="which")["content"] == "by-name\n"
        # With a sandbox of its own of that name, root's comes first.
        mine = create(daemon, session_id="shared")
        p = daemon.cli("exec", "shared", "--", "sh", "-c", "echo root > /workspace/which")
        assert p.returncode == 0, p.stderr
        assert daemon.call("fs.read", sandbox_id=mine, path="which")["content"] == "root\n"
    finally:
        for sid in [*theirs.values(), mine]:
            if sid:
                remove(daemon, sid)
