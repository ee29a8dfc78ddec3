# SPDX-License-Identifier: Apache-2.0
"""fs.rename, fs.symlink and fs.chmod: done by nsboxd's own safe
path walk, so `nsbox cp` runs no process in the sandbox. nsboxd is host
root: every path attack checks that a host canary is never reached."""
import os
import shutil
import tempfile
import uuid

import pytest
from nsbox_client import RpcError

pytestmark = [pytest.mark.nested]


def sh(daemon, sandbox, command):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command=command)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def fs_error(daemon, method, **params):
    with pytest.raises(RpcError) as e:
        daemon.call(method, **params)
    return e.value


def invalid(e):
    """invalid_params, or the request parser's own -32602 (a NUL byte)."""
    return e.kind == "invalid_params" or e.error.get("code") == -32602


@pytest.fixture
def canary():
    d = tempfile.mkdtemp(prefix="nsbox-canary-")
    os.chmod(d, 0o755)
    path = os.path.join(d, "x")
    text = "host canary %s\n" % uuid.uuid4()
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)
    before = os.stat(path)

    class Canary:
        dir = d
        file = path

        def assert_untouched(self):
            with open(path) as f:
                assert f.read() == text
            now = os.stat(path)
            assert (now.st_mtime_ns, now.st_ino, now.st_mode, now.st_uid) == \
                (before.st_mtime_ns, before.st_ino, before.st_mode, before.st_uid)
            assert sorted(os.listdir(d)) == ["x"]

    yield Canary()
    shutil.rmtree(d, ignore_errors=True)


def test_rename_moves_a_file_and_refuses_to_replace_unless_asked(daemon, sandbox):
    sh(daemon, sandbox, "echo one > a && echo two > b && mkdir d")
    r = daemon.call("fs.rename", sandbox_id=sandbox, **{"from": "a", "to": "d/a2"})
    assert r == {"from": "/workspace/a", "to": "/workspace/d/a2"}
    assert sh(daemon, sandbox, "cat d/a2; ls") == "one\nb\nd\n"
    e = fs_error(daemon, "fs.rename", sandbox_id=sandbox, **{"from": "b", "to": "d/a2"})
    assert e.kind == "invalid_params" and "already exists" in str(e) and "overwrite" in str(e)
    daemon.call("fs.rename", sandbox_id=sandbox, overwrite=True, **{"from": "b", "to": "d/a2"})
    assert sh(daemon, sandbox, "cat d/a2; ls") == "two\nd\n"


def test_rename_of_a_directory_made_in_the_sandbox(daemon, sandbox):
    sh(daemon, sandbox, "mkdir -p t/u && echo x > t/u/f")
    daemon.call("fs.rename", sandbox_id=sandbox, **{"from": "/workspace/t", "to": "/tmp/t2"})
    assert sh(daemon, sandbox, "cat /tmp/t2/u/f") == "x\n"
    e = fs_error(daemon, "fs.rename", sandbox_id=sandbox, **{"from": "/tmp/t2", "to": "/tmp/t2/u/in"})
    assert e.kind == "invalid_params" and "into itself" in str(e)


def test_rename_of_a_symlink_moves_the_link_not_its_target(daemon, sandbox):
    sh(daemon, sandbox, "echo t > target && ln -s target link")
    daemon.call("fs.rename", sandbox_id=sandbox, **{"from": "link", "to": "link2"})
    assert sh(daemon, sandbox, "readlink link2; cat target; ls") == "target\nt\nlink2\ntarget\n"


def test_rename_never_leaves_the_sandbox(daemon, sandbox, canary):
    # Symlinks to the canary's host path and ".." chains resolve in the
    # sandbox's root, where that path does not exist.
    sh(daemon, sandbox, "echo inside > f && ln -s %s hostdir && ln -s %s hostfile" % (canary.dir, canary.file))
    for frm, to in [("hostdir/x", "stolen"), ("f", "hostdir/x"), ("f", "../" * 20 + canary.file.lstrip("/")),
                    ("../" * 20 + canary.file.lstrip("/"), "stolen")]:
        e = fs_error(daemon, "fs.rename", sandbox_id=sandbox, overwrite=True, **{"from": frm, "to": to})
        assert e.kind == "not_found", (frm, to, e)
    # Onto a final symlink: the link is replaced, its host-path target is not.
    daemon.call("fs.rename", sandbox_id=sandbox, overwrite=True, **{"from": "f", "to": "hostfile"})
    assert sh(daemon, sandbox, "cat hostfile") == "inside\n"
    canary.assert_untouched()


def test_rename_refuses_mount_points_and_the_root(daemon, sandbox):
    for frm in ["/proc", "/", "/workspace/.."]:
        e = fs_error(daemon, "fs.rename", sandbox_id=sandbox, **{"from": frm, "to": "/workspace/x"})
        assert e.kind == "invalid_params", (frm, e)
    assert "ls" in sh(daemon, sandbox, "ls /proc/self/exe -l >/dev/null && echo ls")


def test_rename_bad_params_are_invalid_params(daemon, sandbox):
    for params, text in [({"to": "x"}, "from is required"), ({"from": "x"}, "to is required"),
                         ({"from": 5, "to": "x"}, "from must be a string"),
                         ({"from": "a\u0000b", "to": "x"}, "from"),
                         ({"from": "a", "to": "x", "overwrite": "yes"}, "overwrite"),
                         ({"from": "a", "to": "x", "bogus": 1}, "bogus")]:
        e = fs_error(daemon, "fs.rename", sandbox_id=sandbox, **params)
        assert invalid(e) and text in str(e), (params, e)
    assert fs_error(daemon, "fs.rename", sandbox_id=sandbox, **{"from": "nope", "to": "x"}).kind == "not_found"


def test_symlink_stores_the_target_as_given_owned_by_the_sandbox_user(daemon, sandbox, canary):
    r = daemon.call("fs.symlink", sandbox_id=sandbox, target=canary.file, path="l")
    assert r == {"path": "/workspace/l", "target": canary.file}
    st = daemon.call("fs.stat", sandbox_id=sandbox, path="l")
    assert st["type"] == "symlink" and st["target"] == canary.file and st["uid"] == 1000
    # Read through, the link resolves in the sandbox's root: not the canary.
    assert fs_error(daemon, "fs.read", sandbox_id=sandbox, path="l").kind == "not_found"
    daemon.call("fs.symlink", sandbox_id=sandbox, target="../etc/hostname", path="/workspace/rel")
    assert daemon.call("fs.read", sandbox_id=sandbox, path="rel")["content"] == \
        daemon.call("fs.read", sandbox_id=sandbox, path="/etc/hostname")["content"]
    canary.assert_untouched()


def test_symlink_path_is_resolved_inside_the_sandbox(daemon, sandbox, canary):
    sh(daemon, sandbox, "ln -s %s hostdir && ln -s / up" % canary.dir)
    e = fs_error(daemon, "fs.symlink", sandbox_id=sandbox, target="/x", path="hostdir/evil")
    assert e.kind == "not_found"
    # Through a link to "/", the new link lands in the sandbox's /tmp.
    daemon.call("fs.symlink", sandbox_id=sandbox, target="/etc", path="up/tmp/etc-link")
    assert sh(daemon, sandbox, "readlink /tmp/etc-link") == "/etc\n"
    canary.assert_untouched()


def test_symlink_exists_is_refused_unless_overwrite_and_never_replaces_a_directory(daemon, sandbox):
    sh(daemon, sandbox, "echo f > f && mkdir d")
    e = fs_error(daemon, "fs.symlink", sandbox_id=sandbox, target="t", path="f")
    assert e.kind == "invalid_params" and "already exists" in str(e)
    daemon.call("fs.symlink", sandbox_id=sandbox, target="t", path="f", overwrite=True)
    assert sh(daemon, sandbox, "readlink f") == "t\n"
    e = fs_error(daemon, "fs.symlink", sandbox_id=sandbox, target="t", path="d", overwrite=True)
    assert e.kind == "invalid_params" and "directory" in str(e)
    for params in [{"target": "", "path": "x"}, {"target": "a\u0000b", "path": "x"}, {"target": 1, "path": "x"},
                   {"target": "t"}, {"target": "t", "path": "x/"}, {"target": "t", "path": "/"}]:
        assert invalid(fs_error(daemon, "fs.symlink", sandbox_id=sandbox, **params)), params


def test_chmod_sets_permission_bits_and_refuses_setuid(daemon, sandbox, canary):
    sh(daemon, sandbox, "mkdir d && echo f > f && ln -s %s hostfile" % canary.file)
    daemon.call("fs.chmod", sandbox_id=sandbox, path="d", mode=0o700)
    daemon.call("fs.chmod", sandbox_id=sandbox, path="f", mode=0o1640)
    assert sh(daemon, sandbox, "stat -c %a d f") == "700\n1640\n"
    for mode in [0o4755, 0o2755, -1, 0o10000, "755", 1.5]:
        e = fs_error(daemon, "fs.chmod", sandbox_id=sandbox, path="f", mode=mode)
        assert e.kind == "invalid_params", mode
    assert fs_error(daemon, "fs.chmod", sandbox_id=sandbox, path="hostfile", mode=0o777).kind == "not_found"
    assert fs_error(daemon, "fs.chmod", sandbox_id=sandbox, path="/dev/null", mode=0o777).kind == "invalid_params"
    canary.assert_untouched()


def test_cp_of_a_tree_with_links_and_modes_runs_no_process_in_the_sandbox(daemon, sandbox, tmp_path):
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("data\n")
    os.symlink("sub/f", src / "link")
    os.chmod(src / "sub", 0o700)
    started = "sandbox %s: exec " % sandbox
    before = daemon.read_log().count(started)
    r = daemon.cli("cp", str(src), "%s:/workspace/tree" % sandbox)
    assert r.returncode == 0, r.stderr
    assert daemon.read_log().count(started) == before
    assert sh(daemon, sandbox, "readlink tree/link; stat -c '%a %U' tree/sub; cat tree/link; ls -A") == \
        "sub/f\n700 sandbox\ndata\ntree\n"
