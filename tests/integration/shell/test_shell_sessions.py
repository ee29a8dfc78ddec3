# SPDX-License-Identifier: Apache-2.0
"""shell.create/run/check/terminate/list: a named bash per session that keeps
its cwd, variables and functions between commands, against the real daemon."""
import time

import pytest
from nsbox_client import RpcError

pytestmark = [pytest.mark.core]


def err(fn, *a, **kw):
    with pytest.raises(RpcError) as e:
        fn(*a, **kw)
    return e.value


def run(daemon, sb, session, command, **kw):
    return daemon.call("shell.run", sandbox_id=sb, session=session, command=command, **kw)


def wait_done(daemon, sb, session, deadline_s=60):
    end = time.monotonic() + deadline_s
    while True:
        r = daemon.call("shell.check", sandbox_id=sb, session=session)
        if not r["running"] or time.monotonic() > end:
            return r
        time.sleep(0.05)


def test_shell_keeps_cwd_env_and_functions_between_commands(daemon, sandbox):
    s = daemon.call("shell.create", sandbox_id=sandbox, name="main")
    assert s["session"] == "main"
    assert run(daemon, sandbox, "main", "cd /tmp")["cwd"] == "/tmp"
    r = run(daemon, sandbox, "main", "pwd")
    assert (r["stdout"], r["exit_code"], r["cwd"]) == ("/tmp\n", 0, "/tmp")
    run(daemon, sandbox, "main", "export GREETING=hello; greet() { echo \"$GREETING $1\"; }; plain=7")
    r = run(daemon, sandbox, "main", "greet world; echo $plain; sh -c 'echo child sees $GREETING'")
    assert r["stdout"] == "hello world\n7\nchild sees hello\n"
    r = run(daemon, sandbox, "main", "echo oops >&2; exit_code_of() { return 3; }; exit_code_of")
    assert (r["stdout"], r["stderr"], r["exit_code"]) == ("", "oops\n", 3)
    assert run(daemon, sandbox, "main", "echo $?")["stdout"] == "3\n"
    # Quotes, newlines and shell syntax in the command are the command's.
    r = run(daemon, sandbox, "main", "cat <<'EOF'\na 'b' \"c\" $d \\e !f\nEOF\nprintf 'no newline'")
    assert r["stdout"] == "a 'b' \"c\" $d \\e !f\nno newline"
    # A command cannot read the shell's input (our next lines).
    r = run(daemon, sandbox, "main", "cat; echo read-nothing")
    assert r["stdout"] == "read-nothing\n"
    # cwd for one run: a cd kept like a typed one.
    assert run(daemon, sandbox, "main", "pwd", cwd="/usr")["stdout"] == "/usr\n"
    assert run(daemon, sandbox, "main", "pwd")["stdout"] == "/usr\n"


def test_create_with_cwd_and_env(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="e", cwd="/tmp", env={"FOO": "bar"})
    r = run(daemon, sandbox, "e", "echo $FOO; pwd")
    assert r["stdout"] == "bar\n/tmp\n"


def test_non_blocking_run_and_check_polling(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="bg")
    r = run(daemon, sandbox, "bg", "echo first; sleep 1; echo second >&2; sleep 1; echo third; exit_status() { return 4; }; exit_status",
            blocking=False)
    assert r["running"] is True and r["command_id"]
    seen_partial = False
    end = time.monotonic() + 60
    while True:
        c = daemon.call("shell.check", sandbox_id=sandbox, session="bg")
        assert c["command_id"] == r["command_id"]
        if c["running"]:
            assert c["exit_code"] is None
            seen_partial = seen_partial or c["stdout"] == "first\n"
        else:
            break
        assert time.monotonic() < end
        time.sleep(0.05)
    assert seen_partial, "output so far was not visible while the command ran"
    assert (c["stdout"], c["stderr"], c["exit_code"]) == ("first\nthird\n", "second\n", 4)
    # since: only what came after an earlier check
    c2 = daemon.call("shell.check", sandbox_id=sandbox, session="bg", since={"stdout": 6, "stderr": 0})
    assert c2["stdout"] == "third\n" and c2["next"] == {"stdout": 12, "stderr": 7}


def test_timeout_interrupts_the_command_and_keeps_the_shell(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="t")
    run(daemon, sandbox, "t", "cd /tmp; KEEP=yes")
    r = run(daemon, sandbox, "t", "echo before; sleep 600; echo not-reached", timeout_seconds=1)
    assert r["timed_out"] is True
    assert r["exit_code"] == 130
    assert r["stdout"] == "before\n"
    r = run(daemon, sandbox, "t", "pwd; echo $KEEP")
    assert (r["stdout"], r["timed_out"]) == ("/tmp\nyes\n", False)


def test_command_ignoring_sigint_is_stopped_by_sigterm_and_the_shell_lives(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="ti")
    run(daemon, sandbox, "ti", "cd /etc")
    r = run(daemon, sandbox, "ti", "sh -c 'trap \"\" INT; sleep 600'", timeout_seconds=1)
    assert r["timed_out"] is True and r["exit_code"] != 0
    assert run(daemon, sandbox, "ti", "pwd")["stdout"] == "/etc\n"


def test_second_run_while_one_runs_is_busy(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="b")
    r = run(daemon, sandbox, "b", "sleep 2; echo done", blocking=False)
    e = err(run, daemon, sandbox, "b", "echo no")
    assert e.kind == "busy"
    c = wait_done(daemon, sandbox, "b")
    assert c["command_id"] == r["command_id"] and c["stdout"] == "done\n"
    assert run(daemon, sandbox, "b", "echo yes")["stdout"] == "yes\n"


def test_terminate_and_list(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="a")
    auto = daemon.call("shell.create", sandbox_id=sandbox)["session"]
    assert auto and auto != "a"
    run(daemon, sandbox, "a", "cd /tmp")
    listed = daemon.call("shell.list", sandbox_id=sandbox)["sessions"]
    assert sorted(s["session"] for s in listed) == sorted(["a", auto])
    assert [s["cwd"] for s in listed if s["session"] == "a"] == ["/tmp"]
    assert err(daemon.call, "shell.create", sandbox_id=sandbox, name="a").kind == "exists"
    run(daemon, sandbox, "a", "sleep 600", blocking=False)
    assert daemon.call("shell.terminate", sandbox_id=sandbox, session="a")["terminated"] is True
    assert err(run, daemon, sandbox, "a", "true").kind == "not_found"
    assert [s["session"] for s in daemon.call("shell.list", sandbox_id=sandbox)["sessions"]] == [auto]
    # The name is free again; the new shell starts afresh.
    daemon.call("shell.create", sandbox_id=sandbox, name="a")
    assert run(daemon, sandbox, "a", "pwd")["stdout"] == "/workspace\n"
    # The shell's processes are gone: nothing sleeps 600 any more.
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="ps -eo args | grep -c '^sleep 600' || true")
    assert r["stdout"].strip() == "0"


def test_exit_ends_the_session(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="x")
    r = run(daemon, sandbox, "x", "echo bye; exit 5")
    assert r["exit_code"] == 5 and r["shell_exited"] is True and r["stdout"] == "bye\n"
    assert err(daemon.call, "shell.check", sandbox_id=sandbox, session="x").kind == "not_found"


def test_sessions_go_with_their_sandbox(daemon):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    daemon.call("shell.create", sandbox_id=sb, name="s")
    with daemon.client() as c:
        rid = c.request("shell.run", {"sandbox_id": sb, "session": "s", "command": "sleep 600"})
        time.sleep(0.3)
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)
        reply = c.response(rid)
    assert reply["error"]["data"]["kind"] == "unavailable"
    assert err(daemon.call, "shell.list", sandbox_id=sb).kind == "gone"  # removed, and says so
    assert err(daemon.call, "shell.check", sandbox_id=sb, session="s").kind == "gone"


def test_idle_reaper_spares_a_sandbox_while_a_session_command_runs():
    from conftest import Daemon
    d = Daemon()
    try:
        sb = d.call("sandbox.create", idle_timeout_seconds=2)["sandbox_id"]
        d.call("shell.create", sandbox_id=sb, name="r")
        r = d.call("shell.run", sandbox_id=sb, session="r", command="sleep 5; echo survived", timeout_seconds=60)
        assert r["stdout"] == "survived\n"
    finally:
        assert d.stop() == 0


def test_bad_params_are_clean_errors(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="ok")
    cases = [
        ("shell.create", {"sandbox_id": sandbox, "name": "../x"}, "invalid_params"),
        ("shell.create", {"sandbox_id": sandbox, "name": ""}, "invalid_params"),
        ("shell.create", {"sandbox_id": sandbox, "name": "a" * 65}, "invalid_params"),
        ("shell.create", {"sandbox_id": sandbox, "name": 3}, "invalid_params"),
        ("shell.create", {"sandbox_id": sandbox, "cwd": 5}, "invalid_params"),
        ("shell.create", {"sandbox_id": sandbox, "bogus": 1}, "invalid_params"),
        ("shell.create", {"sandbox_id": "no-such-sandbox"}, "not_found"),
        ("shell.run", {"sandbox_id": sandbox, "session": "nope", "command": "true"}, "not_found"),
        ("shell.run", {"sandbox_id": sandbox, "session": "a b", "command": "true"}, "invalid_params"),
        ("shell.run", {"sandbox_id": sandbox, "session": "ok", "command": ""}, "invalid_params"),
        ("shell.run", {"sandbox_id": sandbox, "session": "ok", "command": "true", "timeout_seconds": 0},
         "invalid_params"),
        ("shell.run", {"sandbox_id": sandbox, "session": "ok", "command": "true", "blocking": "no"},
         "invalid_params"),
        ("shell.check", {"sandbox_id": sandbox, "session": "nope"}, "not_found"),
        ("shell.check", {"sandbox_id": sandbox, "session": "ok", "since": 3}, "invalid_params"),
        ("shell.terminate", {"sandbox_id": sandbox, "session": "nope"}, "not_found"),
        ("shell.terminate", {"sandbox_id": sandbox}, "invalid_params"),
        ("shell.list", {"sandbox_id": 7}, "invalid_params"),
    ]
    for method, params, kind in cases:
        e = err(daemon.call, method, **params)
        assert e.kind == kind, (method, params, e.error)
    # NUL is refused before the method sees it (the rpc layer), as -32602 too.
    assert err(run, daemon, sandbox, "ok", "a\u0000b").code == -32602
    # The session still works after all that.
    assert run(daemon, sandbox, "ok", "echo fine")["stdout"] == "fine\n"


def test_output_is_bounded_and_truncation_reported(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="o")
    r = run(daemon, sandbox, "o", "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo tail >&2; echo end")
    assert r["truncated"] is True
    assert len(r["stdout"]) + len(r["stderr"]) == 1 << 20
    assert r["exit_code"] == 0
    r = run(daemon, sandbox, "o", "seq 1 1000", max_output_bytes=10)
    assert (r["stdout"], r["truncated"]) == ("1\n2\n3\n4\n5\n", True)
    r = run(daemon, sandbox, "o", "echo small")
    assert (r["stdout"], r["truncated"]) == ("small\n", False)


def test_output_that_looks_like_the_end_marker_does_not_break_commands(daemon, sandbox):
    daemon.call("shell.create", sandbox_id=sandbox, name="m")
    fake = "printf '\\036NSBOXEND 0123456789abcdef0123456789abcdef 0 /fake\\0'"
    r = run(daemon, sandbox, "m", fake + "; printf '\\036NSBOXEND \\036\\036NSB'; echo; " + fake + " >&2; echo real")
    assert r["exit_code"] == 0 and r["cwd"] == "/workspace"
    assert r["stdout"].endswith("real\n") and "\x1eNSBOXEND \x1e\x1eNSB" in r["stdout"]
    assert "/fake" in r["stdout"] and "/fake" in r["stderr"]
    # A record of another command (here, the set-up line's variable is
    # overwritten with garbage): this command and the next are whole.
    r = run(daemon, sandbox, "m", "echo next")
    assert (r["stdout"], r["stderr"], r["exit_code"]) == ("next\n", "", 0)


def test_many_sessions_in_one_sandbox_are_bounded(daemon, sandbox):
    names = ["n%d" % i for i in range(16)]
    for n in names:
        daemon.call("shell.create", sandbox_id=sandbox, name=n)
        run(daemon, sandbox, n, "cd /tmp && mkdir -p %s && cd %s" % (n, n))
    assert err(daemon.call, "shell.create", sandbox_id=sandbox, name="one-more").kind == "limit_reached"
    for n in names:
        assert run(daemon, sandbox, n, "pwd")["stdout"] == "/tmp/%s\n" % n
    daemon.call("shell.terminate", sandbox_id=sandbox, session="n0")
    daemon.call("shell.create", sandbox_id=sandbox, name="one-more")


def test_cli_shell_lines_run_ls_rm(daemon, sandbox):
    r = daemon.cli("shell", sandbox, "work", input=b"cd /tmp\nexport A=42\necho $A $(pwd)\nfalse\n")
    assert r.stdout == b"42 /tmp\n" and r.returncode == 1, r.stderr
    r = daemon.cli("shell", "run", sandbox, "work", "--", "echo", "$A", "&&", "pwd")
    assert (r.stdout, r.returncode) == (b"42\n/tmp\n", 0), r.stderr
    r = daemon.cli("shell", "run", "--timeout", "1", sandbox, "work", "--", "sleep 60")
    assert r.returncode == 124 and b"timed out" in r.stderr
    r = daemon.cli("shell", "ls", sandbox)
    assert b"work" in r.stdout and r.returncode == 0
    assert daemon.cli("shell", "rm", sandbox, "work").returncode == 0
    r = daemon.cli("shell", "check", sandbox, "work")
    assert r.returncode == 125 and b"no shell session work" in r.stderr


@pytest.mark.parametrize("delay", [0, 0.002, 0.02])
def test_a_blocking_run_whose_client_leaves_at_once_is_interrupted_and_the_shell_lives(daemon, sandbox, delay):
    # The client may go before bash has even read the command line: the
    # interrupt must wait for the command to start, not cost the session.
    daemon.call("shell.create", sandbox_id=sandbox, name="gone")
    run(daemon, sandbox, "gone", "cd /tmp; KEEP=yes")
    for _ in range(10):
        with daemon.client() as c:
            c.request("shell.run", {"sandbox_id": sandbox, "session": "gone", "command": "sleep 300",
                                    "timeout_seconds": 600})
            time.sleep(delay)
        r = wait_done(daemon, sandbox, "gone", deadline_s=30)
        assert r["running"] is False, "the command was not interrupted"
        assert "shell_exited" not in r, r
        r = run(daemon, sandbox, "gone", "pwd; echo $KEEP")
        assert r["stdout"] == "/tmp\nyes\n", r
