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
