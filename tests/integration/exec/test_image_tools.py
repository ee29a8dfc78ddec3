# SPDX-License-Identifier: Apache-2.0
"""The tools an agent reaches for first are in the python image, and each
works in a sandbox as the sandbox user: pytest, make, git, vi, nano, less,
curl (with CA certificates), zip and unzip."""
import pytest

pytestmark = [pytest.mark.core]


def sh(daemon, sandbox, command):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command=command, timeout_seconds=120)
    assert r["exit_code"] == 0, (command, r["stdout"], r["stderr"])
    return r["stdout"]


def test_pytest_runs_a_test_file(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/test_it.py",
                content="def test_sum():\n    assert sum([1, 2]) == 3\n")
    assert "1 passed" in sh(daemon, sandbox, "pytest -q test_it.py && python3 -m pytest --version")


def test_make_builds_a_target(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/Makefile",
                content="out.txt:\n\techo built > out.txt\n")
    sh(daemon, sandbox, "make")
    assert sh(daemon, sandbox, "cat out.txt") == "built\n"


def test_git_commits_and_logs(daemon, sandbox):
    out = sh(daemon, sandbox, "git init -q repo && cd repo && echo a > a && git add a && "
                              "git -c user.name=agent -c user.email=a@b commit -qm first && git log --format=%s")
    assert out == "first\n"


def test_editors_and_a_pager_edit_and_show_a_file(daemon, sandbox):
    # vi (vim-tiny) in ex mode, nano and less, without a terminal.
    sh(daemon, sandbox, "printf 'one\\n' > f.txt && vi -e -s -c '%s/one/two/' -c 'wq' f.txt")
    assert sh(daemon, sandbox, "less -F f.txt") == "two\n"
    assert sh(daemon, sandbox, "nano --version").startswith(" GNU nano")


def test_curl_and_ca_certificates(daemon, sandbox):
    assert sh(daemon, sandbox, "curl --version").startswith("curl ")
    assert sh(daemon, sandbox, "curl -s file:///etc/hostname") == "sandbox\n"
    sh(daemon, sandbox, "test -s /etc/ssl/certs/ca-certificates.crt")


def test_zip_and_unzip_round_trip(daemon, sandbox):
    out = sh(daemon, sandbox, "echo data > d.txt && zip -q d.zip d.txt && rm d.txt && unzip -q d.zip && cat d.txt")
    assert out == "data\n"



def test_a_login_shell_sets_debians_path_without_running_a_tool(daemon, sandbox):
    """E2B's SDKs run every command as `bash -l -c CMD`: /etc/profile asked `id -u`
    and root's ~/.profile ran `mesg n`, two forks and execs that were half of
    such a command's time. A login shell sets the same PATH without them: the
    sandbox's pids go up by one per fork, so the first child of the command
    line is the login shell's pid plus one."""
    want = {"sandbox": "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games",
            "root": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    for user, path in want.items():
        r = daemon.call("sandbox.exec", sandbox_id=sandbox, user=user, timeout_seconds=60,
                        argv=["/bin/bash", "-l", "-c", 'echo $PATH; echo $$; /bin/sh -c "echo \\$\\$"; true'])
        assert r["exit_code"] == 0, r
        printed, shell, child = r["stdout"].split("\n")[:3]
        assert printed == path, (user, r)
        assert int(child) - int(shell) == 1, (user, "the login shell forked %d times before its command"
                                              % (int(child) - int(shell) - 1))
    # a shell that does not know EUID still asks id, and gets the same PATH
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["/bin/sh", "-l", "-c", "echo $PATH"], user="root")
    assert r["stdout"] == want["root"] + "\n", r
