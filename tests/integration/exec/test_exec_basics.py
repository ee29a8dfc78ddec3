# SPDX-License-Identifier: Apache-2.0
"""The basics end to end: a real daemon, a real sandbox, real Python inside."""
import os
import time

import pytest
from nsbox_client import RpcError


def test_server_info_reports_version_and_images(daemon):
    info = daemon.call("server.info")
    assert info["version"]
    assert info["kernel"] == os.uname().release
    assert any(img["name"] == "python" for img in info["images"])


def test_python_prints_42_in_a_sandbox(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["python3", "-c", "print(6*7)"])
    assert r["exit_code"] == 0
    assert r["stdout"] == "42\n"
    assert r["stderr"] == ""
    assert r["signal"] is None
    assert r["timed_out"] is False


def test_exit_code_and_stderr_come_back(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox,
                    argv=["python3", "-c", "import sys; sys.stderr.write('oops'); sys.exit(3)"])
    assert r["exit_code"] == 3
    assert r["stderr"] == "oops"
    assert r["stdout"] == ""


def test_command_runs_under_sh_in_workspace(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="pwd; id -un; echo $HOME")
    assert r["stdout"].split() == ["/workspace", "sandbox", "/workspace"]


def test_uncaught_python_exception_gives_traceback(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["python3", "-c", "1/0"])
    assert r["exit_code"] == 1
    assert "ZeroDivisionError" in r["stderr"]


def test_missing_command_is_exit_127(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["no-such-command"])
    assert r["exit_code"] == 127
    assert "no-such-command" in r["stderr"]


def test_killed_by_signal_has_null_exit_code(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="kill -9 $$")
    assert r["exit_code"] is None
    assert r["signal"] == 9


def test_timeout_kills_and_says_so(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["sleep", "30"], timeout_seconds=1)
    assert r["timed_out"] is True
    assert r["duration_ms"] < 10000


def test_files_persist_between_execs_of_one_sandbox(daemon, sandbox):
    daemon.call("sandbox.exec", sandbox_id=sandbox, command="echo kept > /workspace/f")
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["cat", "/workspace/f"])
    assert r["stdout"] == "kept\n"


def test_list_shows_and_remove_removes(daemon):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    ids = [s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]]
    assert sb in ids
    assert daemon.call("sandbox.remove", sandbox_id=sb) == {"sandbox_id": sb, "removed": True}
    ids = [s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]]
    assert sb not in ids
    with pytest.raises(RpcError) as e:
        daemon.call("sandbox.exec", sandbox_id=sb, argv=["true"])
    assert e.value.kind == "gone" and "was removed at" in str(e.value)
    # Its dir goes once the kernel has ended its processes, after the answer.
    deadline = time.monotonic() + 10
    while os.path.exists(os.path.join(daemon.state, "sandboxes", sb)):
        assert time.monotonic() < deadline, "the removed sandbox's dir stayed"
        time.sleep(0.02)


def test_unknown_sandbox_is_not_found(daemon):
    with pytest.raises(RpcError) as e:
        daemon.call("sandbox.exec", sandbox_id="../../etc", argv=["true"])
    assert e.value.kind == "not_found"


def test_cli_run_exec_ls_rm(daemon):
    r = daemon.cli("run", "--", "python3", "-c", "print(6*7)")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"42\n"
    r = daemon.cli("create")
    assert r.returncode == 0, r.stderr
    sb = r.stdout.decode().strip()
    r = daemon.cli("exec", sb, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (r.returncode, r.stdout, r.stderr) == (7, b"out\n", b"err\n")
    assert sb.encode() in daemon.cli("ls").stdout
    assert daemon.cli("rm", sb).returncode == 0
    r = daemon.cli("exec", sb, "--", "true")
    assert r.returncode == 125
    assert b"was removed at" in r.stderr  # not a typo: it says when and why


def test_warm_pool_hands_over_fresh_sandboxes(daemon):
    """A create with the default policy takes a pre-created sandbox; each is
    used once and never shows in lists before it is handed over."""
    assert daemon.call("sandbox.list")["count"] == 0 or all(
        s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"])
    seen = set()
    for _ in range(4):
        sb = daemon.call("sandbox.create")["sandbox_id"]
        assert sb not in seen
        seen.add(sb)
        r = daemon.call("sandbox.exec", sandbox_id=sb, command="ls -A /workspace; echo --; ls -A /tmp; echo m > /tmp/m")
        assert r["stdout"] == "--\n.matplotlib\n"  # nothing but the image's font cache: nobody used it before
        daemon.call("sandbox.remove", sandbox_id=sb)
    listed = {s["sandbox_id"] for s in daemon.call("sandbox.list", include_inactive=True)["sandboxes"]}
    assert not (listed & seen)
    # a non-default policy is never served from the pool, and still works
    sb = daemon.call("sandbox.create", limits={"memory_bytes": 256 << 20})
    assert sb["limits"]["memory_bytes"] == 256 << 20
    daemon.call("sandbox.remove", sandbox_id=sb["sandbox_id"])
