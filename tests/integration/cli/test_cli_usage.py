# SPDX-License-Identifier: Apache-2.0
"""How the CLI is called and what it and nsboxd say to a person: every command's --help
(walked from `nsbox --help`), `nsbox version`, global options after the command name, nsbox's
options kept out of the sandbox's command line, sizes with units in the JSON-RPC params, and
messages that name the CLI's flags, human sizes, a missing sandbox and the socket's group."""
import json
import os
import re
import subprocess
import time

import pytest
from conftest import BUILD, ok, one_line_error
from nsbox_client import RpcError

pytestmark = [pytest.mark.core]

NSBOX = os.path.join(BUILD, "nsbox")
VERSION = re.search(r'NSBOX_VERSION "([^"]+)"',
                    open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "common", "version.h")).read()
                    ).group(1)


def help_invocations():
    """Every `nsbox WORD [SUB]` that `nsbox --help` shows, as argument lists."""
    out = ok(subprocess.run([NSBOX, "--help"], capture_output=True, timeout=30)).stdout.decode()
    synopses = "\n".join(line for line in out.splitlines() if line.startswith("  nsbox "))
    seen = []
    for words in re.findall(r"nsbox ((?:[a-z]+)(?: (?:ls|rm|run|check|import))?)\b", synopses):
        args = words.split()
        if args not in seen:
            seen.append(args)
    return seen


def test_help_lists_subcommands_and_version():
    calls = [" ".join(a) for a in help_invocations()]
    for expected in ("image ls", "image rm", "image import", "snapshot ls", "snapshot rm", "shell run",
                     "shell ls", "version"):
        assert expected in calls, calls


def test_every_command_and_subcommand_shown_by_help_answers_help_without_a_daemon():
    """`--help` after any command or subcommand prints its usage and exits 0, never touching
    nsboxd (`snapshot rm --help` used to ask nsboxd to remove a snapshot named --help)."""
    failures = []
    for args in help_invocations():
        for flag in ("--help", "-h"):
            r = subprocess.run([NSBOX, "--socket", "/nonexistent/nsbox.sock", *args, flag], capture_output=True,
                               timeout=30, stdin=subprocess.DEVNULL)
            text = r.stdout.decode()
            if r.returncode != 0 or "usage:" not in text or r.stderr:
                failures.append("nsbox %s %s: rc=%d stdout=%r stderr=%r" % (" ".join(args), flag, r.returncode,
                                                                           text[:120], r.stderr[:200]))
    assert not failures, "\n".join(failures)


def test_version_prints_the_cli_and_nsboxd(daemon):
    for args in (["version"], ["--version"]):
        r = ok(daemon.cli(*args))
        assert r.stdout.decode().splitlines() == ["nsbox " + VERSION, "nsboxd " + VERSION], r.stdout
    both = json.loads(ok(daemon.cli("--json", "version")).stdout)
    assert both == {"client": {"version": VERSION}, "server": {"version": VERSION}}


def test_version_without_a_daemon_prints_the_cli_and_says_why():
    r = subprocess.run([NSBOX, "--socket", "/nonexistent/nsbox.sock", "version"], capture_output=True, timeout=30)
    assert r.returncode == 125 and r.stdout.decode() == "nsbox %s\n" % VERSION, r
    assert "/nonexistent/nsbox.sock" in r.stderr.decode() and "systemctl start nsboxd" in r.stderr.decode(), r


def test_global_options_work_after_the_command_name(daemon, sandbox):
    nsbox = os.path.join(BUILD, "nsbox")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
    env["NSBOX_SOCKET"] = "/nonexistent/nsbox.sock"  # only the flag can find the daemon
    for args in (["ls", "-q", "--socket", daemon.socket], ["ls", "--socket=" + daemon.socket, "-q"],
                 ["info", sandbox, "--socket", daemon.socket, "--json"]):
        r = subprocess.run([nsbox, *args], capture_output=True, timeout=60, env=env)
        assert r.returncode == 0 and sandbox in r.stdout.decode(), (args, r)
    # After "--" they are the sandbox command's.
    r = subprocess.run([nsbox, "--socket", daemon.socket, "exec", sandbox, "--", "echo", "--socket", "x"],
                       capture_output=True, timeout=60, env=env)
    assert ok(r).stdout == b"--socket x\n"
    one_line_error(subprocess.run([nsbox, "ls", "--socket"], capture_output=True, timeout=60, env=env))


def test_shell_run_refuses_an_option_after_its_operands(daemon, sandbox):
    """`shell run ID NAME -d -- CMD` ran "-d -- CMD" in bash; nsbox's options go before ID."""
    line = one_line_error(daemon.cli("shell", "run", sandbox, "work", "-d", "--", "echo", "hi"))
    assert "-d" in line and "before ID" in line, line
    ran = ok(daemon.cli("shell", "run", "-d", sandbox, "work", "--", "echo", "hi"))
    assert ran.stdout.strip(), ran  # the command id, detached
    deadline = time.monotonic() + 60
    while True:
        check = daemon.cli("shell", "check", sandbox, "work")
        if b"still running" not in check.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert ok(check).stdout == b"hi\n", check


# --- sizes --------------------------------------------------------------------

def test_sizes_in_params_take_units(daemon):
    sb = daemon.call("sandbox.create", limits={"memory_bytes": "512M", "disk_bytes": "1.5GiB"})
    try:
        assert sb["limits"]["memory_bytes"] == 512 << 20 and sb["limits"]["disk_bytes"] == 3 << 29, sb
        r = daemon.call("sandbox.exec", sandbox_id=sb["sandbox_id"], argv=["head", "-c", "5000", "/dev/zero"],
                        max_output_bytes="1K")
        assert r["truncated"] and len(r["stdout"]) == 1024, r
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb["sandbox_id"], force=True)
    for bad in ("lots", "-1M", "1X", 1.5, True):
        with pytest.raises(RpcError) as e:
            daemon.call("sandbox.create", limits={"memory_bytes": bad})
        assert e.value.kind == "invalid_params" and "limits.memory_bytes" in str(e.value), e.value
        assert "512M" in str(e.value), e.value  # says what a size looks like


def test_limits_out_of_range_are_said_in_human_sizes_with_the_cli_option(daemon):
    line = one_line_error(daemon.cli("create", "--memory", "1T"))
    assert re.search(r"memory 1 TiB is over this host's limit of [0-9.]+ [KMGT]iB", line), line
    assert "--memory" in line and "1099511627776" not in line, line
    line = one_line_error(daemon.cli("create", "--memory", "8M"))
    assert "8 MiB" in line and "16 MiB" in line and "--memory" in line and "8388608" not in line, line


def test_refusals_of_options_name_the_cli_option(daemon, sandbox):
    for args, words in ((["create", "--pids", "100000"], "nsbox create --pids"),
                        (["create", "--idle-timeout", "99999999"], "nsbox create --idle-timeout"),
                        (["exec", "--timeout", "100000", sandbox, "--", "true"], "--timeout"),
                        (["create", "--image", "nosuchimage"], "nsbox images")):
        line = one_line_error(daemon.cli(*args))
        assert words in line, (args, line)


def test_bad_create_options_say_what_they_take(daemon):
    for args, words in ((["--pids", "many"], "a number of processes"), (["--cpus", "x"], "a number of CPUs"),
                        (["--idle-timeout", "soon"], "seconds"), (["--memory", "lots"], "512M")):
        line = one_line_error(daemon.cli("create", *args))
        assert words in line, (args, line)


def test_create_of_an_existing_session_with_other_options_says_they_are_not_applied(daemon):
    first = ok(daemon.cli("create", "--session", "usage-s"))
    try:
        again = ok(daemon.cli("create", "--session", "usage-s"))
        assert again.stdout == first.stdout and again.stderr == b"", again
        bigger = ok(daemon.cli("create", "--session", "usage-s", "--memory", "1G"))
        assert bigger.stdout == first.stdout, bigger
        assert b"already has this sandbox" in bigger.stderr and b"nsbox rm" in bigger.stderr, bigger
    finally:
        daemon.cli("rm", "-f", first.stdout.decode().strip())


def test_remove_while_busy_names_the_cli_flag(daemon, sandbox):
    job = ok(daemon.cli("exec", "-d", sandbox, "--", "sleep", "60")).stdout.decode().strip()
    assert job
    line = one_line_error(daemon.cli("rm", sandbox))
    assert "nsbox rm --force" in line and "use force" not in line, line
    line = one_line_error(daemon.cli("pause", sandbox))
    assert "nsbox pause --force" in line and "use force" not in line, line


def test_cp_to_or_from_a_missing_sandbox_says_the_sandbox_is_missing(daemon, tmp_path):
    src = tmp_path / "f"
    src.write_text("x")
    for args in ([str(src), "deadbeef:/workspace/f"], [str(src), "deadbeef:f"],
                 ["deadbeef:/workspace/f", str(tmp_path / "out")]):
        line = one_line_error(daemon.cli("cp", *args))
        assert "no sandbox deadbeef" in line and "/workspace" not in line, (args, line)


def test_cp_into_a_missing_directory_says_how_to_make_it(daemon, sandbox, tmp_path):
    src = tmp_path / "pkg.whl"
    src.write_text("x")
    line = one_line_error(daemon.cli("cp", str(src), sandbox + ":/workspace/wheels/"))
    assert "No such directory" in line and "mkdir -p /workspace/wheels/" in line, line


@pytest.mark.hostroot("runs the CLI as another uid than the socket's owner")
def test_socket_permission_error_says_which_group_to_join(daemon):
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", NSBOX, "--socket", daemon.socket]
    st = os.stat(daemon.socket)
    try:
        os.chown(daemon.socket, 0, 0)
        line = one_line_error(subprocess.run([*as_nobody, "ls"], capture_output=True, timeout=60))
        assert "permission denied on " + daemon.socket in line and "groupadd nsbox" in line, line
        assert "usermod -aG nsbox" in line, line
        os.chown(daemon.socket, 0, 1)  # the operator's group, whatever its name (not the caller's)
        line = one_line_error(subprocess.run([*as_nobody, "ls"], capture_output=True, timeout=60))
        group = subprocess.run(["getent", "group", "1"], capture_output=True, text=True).stdout.split(":")[0]
        assert "permission denied on " + daemon.socket in line and ("usermod -aG %s" % group) in line, line
    finally:
        os.chown(daemon.socket, st.st_uid, st.st_gid)


def test_nsboxd_sizes_take_units_in_flags_and_config(daemon_readable_tmp):
    from conftest import Daemon
    config = daemon_readable_tmp / "nsboxd.json"
    config.write_text(json.dumps({"disk_bytes": "48M"}))
    d = Daemon(extra_args=["--warm-pool", "0", "--memory-bytes", "64M", "--config", str(config)])
    try:
        limits = d.call("sandbox.create")["limits"]
        assert limits["memory_bytes"] == 64 << 20 and limits["disk_bytes"] == 48 << 20, limits
    finally:
        assert d.stop() == 0
    with pytest.raises(RuntimeError, match=r"memory_bytes must be a size from 0 to 1 TiB"):
        Daemon(extra_args=["--memory-bytes", "lots"])
