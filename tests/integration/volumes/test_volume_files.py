# SPDX-License-Identifier: Apache-2.0
"""A volume's files without a sandbox (volume.fs.*): read and written by
nsboxd under the volume's root, never following a symlink a sandbox left
there, as the sandbox user's files, within the volume's size, for the
volume's owner (or root) only; driven over nsboxd's real socket."""
import base64
import hashlib
import os
import shutil
import tempfile

import pytest

from conftest import Daemon
from nsbox_client import RpcError, as_uid

pytestmark = pytest.mark.hostroot("volumes are loop-mounted ext4 images")

OTHER_UID = 64124


@pytest.fixture(scope="module")
def daemon():
    state_dir = tempfile.mkdtemp(prefix="nsbox-test-volume-files-")
    d = Daemon(extra_args=["--state-dir", state_dir])
    os.chmod(d.socket, 0o666)  # in production: membership of group nsbox
    yield d
    rc = d.stop()
    shutil.rmtree(state_dir, ignore_errors=True)
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


@pytest.fixture
def volume(daemon, request):
    name = request.node.name.replace("test_", "")[:40].strip("_").replace("[", "-").replace("]", "")
    daemon.call("volume.create", name=name, size="16M")
    yield name
    daemon.call("volume.remove", name=name)


def sh(daemon, sid, command, code=0):
    r = daemon.call("sandbox.exec", sandbox_id=sid, command=command, user="sandbox", timeout_seconds=60)
    if code is not None:
        assert r["exit_code"] == code, (r["exit_code"], r["stdout"], r["stderr"])
    return r


def error_of(fn, *a, **kw):
    with pytest.raises(RpcError) as e:
        fn(*a, **kw)
    return e.value


def test_files_written_without_a_sandbox_are_the_sandbox_users_and_back(daemon, volume):
    vcall = lambda method, **kw: daemon.call("volume.fs." + method, volume=volume, **kw)  # noqa: E731
    vcall("write", path="/notes/from-rpc.txt", content="written by volume.fs.write\n")
    vcall("mkdir", path="made/deeper", parents=True)
    st = vcall("stat", path="/notes/from-rpc.txt")
    assert (st["type"], st["uid"], st["gid"], st["mode"]) == ("file", 1000, 1000, 0o644), st
    sid = daemon.call("sandbox.create", mounts=[{"volume": volume, "path": "/data"}])["sandbox_id"]
    try:
        out = sh(daemon, sid, "cat /data/notes/from-rpc.txt; stat -c '%U %G %a' /data/notes/from-rpc.txt "
                 "/data/notes /data/made/deeper; echo from the sandbox > /data/notes/from-sb.txt")
        assert out["stdout"] == ("written by volume.fs.write\nsandbox sandbox 644\nsandbox sandbox 755\n"
                                 "sandbox sandbox 755\n"), out
        # Read while the sandbox has it mounted: one file system, seen at once.
        assert vcall("read", path="notes/from-sb.txt")["content"] == "from the sandbox\n"
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)
    listing = vcall("list", path="/notes")
    assert [(e["name"], e["type"], e["uid"]) for e in listing["entries"]] == [
        ("from-rpc.txt", "file", 1000), ("from-sb.txt", "file", 1000)], listing
    assert sorted(e["name"] for e in vcall("list")["entries"]) == ["lost+found", "made", "notes"]
    vcall("chmod", path="notes/from-sb.txt", mode=0o600)
    vcall("rename", **{"from": "notes/from-sb.txt", "to": "/moved.txt"})
    assert vcall("stat", path="moved.txt")["mode"] == 0o600
    vcall("remove", path="/notes", recursive=True)
    assert error_of(vcall, "stat", path="/notes").kind == "not_found"
    # Read back after nothing holds the volume: the writes reached its disk.
    assert vcall("read", path="/moved.txt")["content"] == "from the sandbox\n"


def test_no_path_leads_out_of_the_volume(daemon, volume):
    """'..', absolute paths and symlinks a sandbox planted (to /etc, up the
    tree, to a file outside) all stay in the volume or are refused."""
    sid = daemon.call("sandbox.create", mounts=[{"volume": volume, "path": "/data"}])["sandbox_id"]
    try:
        sh(daemon, sid, "ln -s /etc /data/etc && ln -s ../../../../../.. /data/up && "
           "ln -s /etc/passwd /data/passwd && mkdir /data/dir && ln -s /etc /data/dir/etc")
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)
    vcall = lambda method, **kw: daemon.call("volume.fs." + method, volume=volume, **kw)  # noqa: E731
    with open("/etc/hostname", "rb") as f:
        hostname = f.read()
    for path in ["../../../../etc/hostname", "/../etc/hostname", "dir/../../etc/hostname"]:
        e = error_of(vcall, "read", path=path)
        assert e.kind == "invalid_params" and "outside volume" in str(e), (path, e.error)
    # An absolute path is the volume's, not the host's.
    assert error_of(vcall, "read", path="/usr/lib/os-release").kind == "not_found"
    for path in ["etc/hostname", "/up/etc/hostname", "passwd", "dir/etc/hostname"]:
        e = error_of(vcall, "read", path=path)
        assert e.kind == "invalid_params" and "symlink" in str(e), (path, e.error)
    for method, kw in [("write", {"content": "x"}), ("mkdir", {}), ("chmod", {"mode": 0o777}),
                       ("list", {}), ("remove", {"recursive": True})]:
        e = error_of(vcall, method, path="etc/hostname", **kw)
        assert e.kind in ("invalid_params", "not_found"), (method, e.error)
    # A final symlink is described, never followed; one may be removed itself.
    st = vcall("stat", path="/etc")
    assert (st["type"], st["target"]) == ("symlink", "/etc"), st
    e = error_of(vcall, "write", path="passwd", content="owned\n")
    assert e.kind == "invalid_params", e.error
    vcall("remove", path="/etc")
    with open("/etc/hostname", "rb") as f:
        assert f.read() == hostname
    assert os.path.isdir("/etc") and os.path.exists("/etc/passwd")


def test_another_uids_volume_is_not_found_and_root_may_name_its_owner(daemon, volume):
    daemon.call("volume.fs.write", volume=volume, path="/secret", content="root's\n")
    out = as_uid(OTHER_UID, daemon.socket, [
        ["volume.fs.read", {"volume": volume, "path": "/secret"}],
        ["volume.fs.list", {"volume": volume}],
        ["volume.fs.write", {"volume": volume, "path": "/x", "content": "x"}],
        ["volume.fs.read", {"volume": volume, "path": "/secret", "owner": 0}],
        ["volume.create", {"name": "theirs", "size": "16M"}],
        ["volume.fs.write", {"volume": "theirs", "path": "/mine", "content": "theirs\n"}],
    ])
    for reply in out[:4]:
        assert reply["error"]["data"]["kind"] == "not_found", reply
        assert "root's" not in str(reply)
    assert out[5]["result"]["bytes_written"] == 7, out[5]
    try:
        # Root names another owner's volume by its owner.
        assert daemon.call("volume.fs.read", volume="theirs", owner=OTHER_UID,
                           path="/mine")["content"] == "theirs\n"
        assert error_of(daemon.call, "volume.fs.read", volume="theirs", path="/mine").kind == "not_found"
    finally:
        as_uid(OTHER_UID, daemon.socket, [["volume.remove", {"name": "theirs"}]])


def test_a_write_over_the_volumes_size_is_refused_and_leaves_nothing(daemon, volume):
    content = base64.b64encode(os.urandom(24 << 20)).decode()
    e = error_of(daemon.call, "volume.fs.write", volume=volume, path="/big", content=content,
                 encoding="base64")
    assert e.kind == "limit_reached", e.error
    assert "no space left on volume %s" % volume in str(e) and "16 MiB" in str(e), str(e)
    names = [x["name"] for x in daemon.call("volume.fs.list", volume=volume)["entries"]]
    assert names == ["lost+found"], names
    # The space came back: a file that fits is written.
    daemon.call("volume.fs.write", volume=volume, path="/fits", content="x" * (4 << 20))


def test_a_large_file_is_written_and_read_whole(daemon, volume):
    data = os.urandom(9 << 20)
    r = daemon.call("volume.fs.write", volume=volume, path="/large.bin",
                    content=base64.b64encode(data).decode(), encoding="base64")
    assert r["bytes_written"] == len(data)
    back = daemon.call("volume.fs.read", volume=volume, path="/large.bin", encoding="base64",
                       max_bytes=64 << 20)
    assert back["size"] == len(data) and not back["truncated"]
    assert hashlib.sha256(base64.b64decode(back["content"])).hexdigest() == hashlib.sha256(data).hexdigest()


def test_paths_are_as_long_as_the_kernel_takes_them_and_no_longer(daemon, volume):
    """A path reaches the kernel from the root, without its "/": 4095 bytes at
    most. A volume's relative path is from its root and takes those 4095
    bytes (it was given a "/" in a buffer of its own first, and refused past
    4095); one longer, or a sandbox's relative path that /workspace/ makes
    longer, is refused with that said, not failed by the kernel with a message
    cut short."""
    rel = "/".join(["d" * 240] * 16) + "/" + "f" * 239
    assert len(rel) == 4095
    sid = daemon.call("sandbox.create")["sandbox_id"]
    try:
        inner = rel[len("workspace/"):]
        daemon.call("fs.write", sandbox_id=sid, path=inner, content="deep\n")
        assert daemon.call("fs.read", sandbox_id=sid, path="/workspace/" + inner)["content"] == "deep\n"
        e = error_of(daemon.call, "fs.write", sandbox_id=sid, path=inner + "f", content="x")
        assert e.kind == "invalid_params", e.error
        assert "longer than 4096 bytes from the root (a relative path is from /workspace)" in str(e), e.error
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)
    daemon.call("volume.fs.write", volume=volume, path=rel, content="deep\n")
    assert daemon.call("volume.fs.read", volume=volume, path="/" + rel)["content"] == "deep\n"
    assert daemon.call("volume.fs.read", volume=volume, path=rel)["content"] == "deep\n"
    e = error_of(daemon.call, "volume.fs.read", volume=volume, path=rel + "f")
    assert e.kind == "invalid_params" and "longer than 4096 bytes from the root" in str(e), e.error


@pytest.mark.parametrize("params,says", [
    ({"path": "/x"}, "volume must be"),
    ({"volume": 7, "path": "/x"}, "volume must be"),
    ({"volume": "v", "path": "/x", "owner": "root"}, "owner must be"),
    ({"volume": "v", "path": "/x", "sandbox_id": "abc"}, "sandbox_id"),
    ({"volume": "no-such-volume", "path": "/x"}, "no volume"),
    ({"volume": "../../etc", "path": "/x"}, "no volume"),
])
def test_volume_fs_refuses_bad_input(daemon, params, says):
    e = error_of(daemon.call, "volume.fs.read", **params)
    assert says in str(e), e.error


def test_cli_volume_ls_lists_a_volumes_files(daemon, volume):
    daemon.call("volume.fs.write", volume=volume, path="/sub/a.txt", content="abc")
    daemon.call("volume.fs.mkdir", volume=volume, path="/sub/dir")
    r = daemon.cli("volume", "ls", volume + ":/sub")
    assert r.returncode == 0, r.stderr
    lines = [line.split() for line in r.stdout.decode().splitlines()]
    assert [(x[0], x[-2], x[-1]) for x in lines] == [("file", "0644", "a.txt"), ("dir", "0755", "dir/")], lines
    r = daemon.cli("volume", "ls", volume)
    assert r.returncode == 0 and "sub/" in r.stdout.decode(), r
    r = daemon.cli("volume", "ls", volume + ":/missing")
    assert r.returncode != 0 and b"no such file or directory" in r.stderr, r
    r = daemon.cli("volume", "ls", "no-such-volume")
    assert r.returncode != 0 and b"no volume" in r.stderr, r


def test_a_directory_swapped_for_a_symlink_during_the_calls_never_leads_out(daemon, volume):
    """A sandbox swaps a directory of the volume with a symlink to /etc (and
    to the top of the tree) as fast as it can while volume.fs.* writes,
    makes and reads through it: each call lands in the volume or is
    refused; nothing reaches the host's /etc."""
    canary = "nsbox-volfs-race-%d" % os.getpid()
    sid = daemon.call("sandbox.create", mounts=[{"volume": volume, "path": "/data"}])["sandbox_id"]
    try:
        sh(daemon, sid, "mkdir -p /data/d /data/real")
        daemon.call("sandbox.exec", sandbox_id=sid, user="sandbox", background=True, timeout_seconds=600,
                    command="cd /data && while :; do mv d real2 2>/dev/null; ln -sfn /etc d; rm -f d; "
                            "ln -sfn ../../../../.. d; rm -f d; mv real2 d 2>/dev/null; done")
        vcall = lambda method, **kw: daemon.call("volume.fs." + method, volume=volume, **kw)  # noqa: E731
        outcomes = set()
        for i in range(300):
            for method, kw in [("write", {"path": "/d/%s" % canary, "content": "x"}),
                               ("mkdir", {"path": "/d/%s.dir/sub" % canary, "parents": True}),
                               ("read", {"path": "/d/passwd"}),
                               ("chmod", {"path": "/d", "mode": 0o777})]:
                try:
                    vcall(method, **kw)
                    outcomes.add("done")
                except RpcError as e:
                    assert e.kind in ("invalid_params", "not_found"), (method, e.error)
                    outcomes.add(e.kind)
        assert "done" in outcomes, outcomes
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)
    assert not os.path.exists("/etc/" + canary) and not os.path.exists("/etc/%s.dir" % canary)
    assert not os.path.exists("/" + canary) and not os.path.exists("/%s.dir" % canary)
    assert os.stat("/etc").st_mode & 0o777 == 0o755
