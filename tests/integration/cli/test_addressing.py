# SPDX-License-Identifier: Apache-2.0
"""Addressing as docker does it: a unique prefix of a sandbox id
names the sandbox (only among the caller's own sandboxes), session names
work in the CLI wherever an id does, labels, `ls -q` and `ls --format`."""
import json
import os

import pytest
from nsbox_client import RpcError, as_uid

pytestmark = [pytest.mark.core]


def create(daemon, **params):
    return daemon.call("sandbox.create", **params)["sandbox_id"]


def remove(daemon, sandbox_id):
    try:
        daemon.call("sandbox.remove", sandbox_id=sandbox_id, force=True)
    except RpcError:
        pass


def test_a_unique_id_prefix_names_the_sandbox_in_every_method(daemon, sandbox):
    prefix = sandbox[:8]
    assert daemon.call("sandbox.info", sandbox_id=prefix)["sandbox_id"] == sandbox
    r = daemon.call("sandbox.exec", sandbox_id=prefix, command="echo hi")
    assert r["stdout"] == "hi\n"
    daemon.call("fs.write", sandbox_id=prefix, path="p.txt", content="x")
    assert daemon.call("fs.read", sandbox_id=sandbox, path="p.txt")["content"] == "x"


def test_a_prefix_shorter_than_four_characters_is_not_found(daemon, sandbox):
    with pytest.raises(RpcError) as e:
        daemon.call("sandbox.info", sandbox_id=sandbox[:3])
    assert e.value.kind == "not_found"


@pytest.fixture
def open_socket(daemon):
    os.chmod(daemon.socket, 0o666)  # in production: membership of group nsbox


@pytest.mark.hostroot("clients of distinct host uids: clients outside nsboxd's user namespace are one owner")
def test_another_uid_cannot_resolve_roots_sandbox_by_prefix(daemon, sandbox, open_socket):
    prefix = sandbox[:8]
    out = as_uid(1000, daemon.socket, [
        ["sandbox.info", {"sandbox_id": prefix}],
        ["sandbox.exec", {"sandbox_id": prefix, "command": "id"}],
        ["fs.read", {"sandbox_id": prefix, "path": "/etc/hostname"}],
        ["sandbox.remove", {"sandbox_id": prefix, "force": True}],
        ["sandbox.info", {"sandbox_id": "zzzz" + prefix}],
    ])
    # Exactly what a missing id gets: nothing tells uid 1000 the sandbox exists.
    assert out[-1]["error"]["message"] == "no sandbox zzzz" + prefix
    for reply in out[:-1]:
        assert "result" not in reply, reply
        assert reply["error"]["data"]["kind"] == "not_found"
        assert reply["error"]["message"] == "no sandbox " + prefix
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "running"


def test_uid_1000_resolves_its_own_sandbox_by_prefix(daemon, open_socket):
    out = as_uid(1000, daemon.socket, [["sandbox.create", {}]])
    mine = out[0]["result"]["sandbox_id"]
    try:
        out = as_uid(1000, daemon.socket, [["sandbox.info", {"sandbox_id": mine[:6]}]])
        assert out[0]["result"]["sandbox_id"] == mine
    finally:
        remove(daemon, mine)


def test_a_unique_exec_id_prefix_names_a_background_exec(daemon, sandbox):
    job = daemon.call("sandbox.exec", sandbox_id=sandbox, command="sleep 30", background=True)["exec_id"]
    try:
        status = daemon.call("exec.status", exec_id=job[:6])
        assert status["exec_id"] == job and status["running"] is True
    finally:
        daemon.call("exec.kill", exec_id=job[:6], signal=9)


@pytest.mark.hostroot("clients of distinct host uids: clients outside nsboxd's user namespace are one owner")
def test_another_uid_cannot_resolve_roots_exec_by_prefix(daemon, sandbox, open_socket):
    job = daemon.call("sandbox.exec", sandbox_id=sandbox, command="sleep 30", background=True)["exec_id"]
    try:
        out = as_uid(1000, daemon.socket, [["exec.status", {"exec_id": job[:8]}],
                                           ["exec.kill", {"exec_id": job[:8]}]])
        for reply in out:
            assert reply["error"]["data"]["kind"] == "not_found", reply
            assert reply["error"]["message"] == "no exec " + job[:8]
        assert daemon.call("exec.status", exec_id=job)["running"] is True
    finally:
        daemon.call("exec.kill", exec_id=job, signal=9)


def _daemon_log_lines(tmp_path, journal_stream):
    """First lines nsboxd writes to a stderr file, with JOURNAL_STREAM as given
    (a callable of the file's stat, or None to leave it unset)."""
    import re
    import signal
    import subprocess
    import time
    from conftest import BUILD, IMAGE_DIR
    log_path = tmp_path / "log"
    with open(log_path, "wb") as log:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_") and k != "JOURNAL_STREAM"}
        if journal_stream is not None:
            env["JOURNAL_STREAM"] = journal_stream(os.fstat(log.fileno()))
        proc = subprocess.Popen([os.path.join(BUILD, "nsboxd"), "--socket", str(tmp_path / "s"), "--state-dir",
                                 str(tmp_path / "state"), "--image-dir", IMAGE_DIR, "--warm-pool", "0"],
                                stdout=log, stderr=log, env=env)
        try:
            deadline = time.monotonic() + 20
            while os.path.getsize(log_path) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    lines = log_path.read_text().splitlines()
    assert lines
    return lines, re


def test_log_lines_have_utc_millisecond_timestamps_outside_the_journal(tmp_path):
    lines, re = _daemon_log_lines(tmp_path, None)
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (error|warn|info|debug): ")
    assert all(stamp.match(l) for l in lines), lines[:3]


def test_log_lines_keep_the_priority_prefix_for_the_journal(tmp_path):
    lines, re = _daemon_log_lines(tmp_path, lambda st: "%d:%d" % (st.st_dev, st.st_ino))
    assert all(re.match(r"^<[3467]>(error|warn|info|debug): ", l) for l in lines), lines[:3]


def test_an_inherited_journal_stream_of_another_file_still_gets_timestamps(tmp_path):
    lines, re = _daemon_log_lines(tmp_path, lambda st: "%d:%d" % (st.st_dev, st.st_ino + 1))
    assert all(re.match(r"^\d{4}-\d\d-\d\dT[0-9:.]+Z ", l) for l in lines), lines[:3]


# --- the CLI -----------------------------------------------------------------

def cli_ok(daemon, *args, input=None):
    r = daemon.cli(*args, input=input)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


def cli_fails(daemon, *args):
    r = daemon.cli(*args)
    assert r.returncode == 125, (args, r.stdout, r.stderr)
    return r.stderr.decode()


@pytest.fixture
def named(daemon):
    """A sandbox with a session name and labels, made by the CLI."""
    name = "addr-%s" % os.urandom(3).hex()
    sid = cli_ok(daemon, "create", "--session", name, "--label", "team=ml", "--label", "tier=gpu").strip()
    yield sid, name
    remove(daemon, sid)


def test_cli_takes_a_session_name_wherever_it_takes_an_id(daemon, named, tmp_path):
    sid, name = named
    assert cli_ok(daemon, "exec", name, "--", "echo", "by-name") == "by-name\n"
    assert json.loads(cli_ok(daemon, "info", name))["sandbox_id"] == sid
    (tmp_path / "f").write_text("copied\n")
    cli_ok(daemon, "cp", str(tmp_path / "f"), "%s:/workspace/f" % name)
    assert cli_ok(daemon, "exec", sid[:6], "--", "cat", "f") == "copied\n"
    cli_ok(daemon, "rm", "-f", name)
    assert daemon.call("sandbox.list")["sandboxes"] == [s for s in daemon.call("sandbox.list")["sandboxes"]
                                                        if s["sandbox_id"] != sid]
    assert "was removed at" in cli_fails(daemon, "info", name)  # not found, and why


def test_cli_takes_an_id_prefix(daemon, sandbox):
    assert json.loads(cli_ok(daemon, "info", sandbox[:5]))["sandbox_id"] == sandbox
    assert cli_ok(daemon, "exec", sandbox[:5], "--", "echo", "p") == "p\n"


def test_ls_shows_labels_and_filters_by_them(daemon, named, sandbox):
    sid, name = named
    table = cli_ok(daemon, "ls")
    line = [l for l in table.splitlines() if l.startswith(sid)][0]
    assert "team=ml,tier=gpu" in line and name in line
    assert "LABELS" in table.splitlines()[0]
    assert cli_ok(daemon, "ls", "-q", "--filter", "label=team=ml").split() == [sid]
    assert cli_ok(daemon, "ls", "-q", "-f", "label=tier").split() == [sid]
    assert cli_ok(daemon, "ls", "-q", "-f", "label=team=other") == ""
    assert cli_ok(daemon, "ls", "-q", "-f", "label=team=ml", "-f", "session=" + name).split() == [sid]
    assert cli_ok(daemon, "ls", "-q", "-f", "id=" + sandbox[:6]).split() == [sandbox]
    listed = json.loads(cli_ok(daemon, "ls", "--json", "-f", "label=team=ml"))
    assert [s["sandbox_id"] for s in listed["sandboxes"]] == [sid] and listed["count"] == 1
    assert "bad --filter" in cli_fails(daemon, "ls", "-f", "name=x")
    assert "bad --label" in cli_fails(daemon, "create", "--label", "=v")


def test_ls_quiet_prints_ids_only(daemon, named, sandbox):
    ids = cli_ok(daemon, "ls", "-q").split()
    assert named[0] in ids and sandbox in ids
    assert all(len(i) == 36 for i in ids)


def test_ls_format_expands_docker_fields_and_refuses_unknown_ones(daemon, named):
    sid, name = named
    out = cli_ok(daemon, "ls", "-f", "id=" + sid, "--format",
                 '{{.ID}}\\t{{.Image}} {{.Status}} {{.Label "team"}} {{.Label "none"}}|{{.Session}}')
    assert out == "%s\tpython running ml |%s\n" % (sid, name)
    row = json.loads(cli_ok(daemon, "ls", "-f", "id=" + sid, "--format", "{{json .}}"))
    assert row["sandbox_id"] == sid and row["labels"] == {"team": "ml", "tier": "gpu"}
    assert json.loads(cli_ok(daemon, "ls", "-f", "id=" + sid, "--format", "{{json .Labels}}")) == \
        {"team": "ml", "tier": "gpu"}
    for bad in ["{{.Nope}}", "{{.ID", "{{.Label team}}", "table {{.ID}}"]:
        err = cli_fails(daemon, "ls", "-f", "id=" + sid, "--format", bad)
        assert "--format" in err, (bad, err)


def test_nsboxd_help_spells_the_config_file_keys():
    import subprocess
    from conftest import BUILD
    r = subprocess.run([os.path.join(BUILD, "nsboxd"), "--help"], capture_output=True)
    assert r.returncode == 0
    assert '"max_sandboxes"' in r.stdout.decode()
