# SPDX-License-Identifier: Apache-2.0
"""Named volumes: ext4 file systems with a size each, owned by their uid,
kept under the state dir across sandboxes and nsboxd restarts, mounted
idmapped into the sandboxes that ask (volume.create/list/remove, sandbox.create
mounts[].volume), driven over nsboxd's real socket."""
import os
import shutil
import subprocess
import tempfile
import threading

import pytest

from conftest import BUILD, IMAGE_DIR, Daemon
from nsbox_client import RpcError, as_uid

pytestmark = pytest.mark.hostroot("volumes are loop-mounted ext4 images, idmapped per sandbox")

OTHER_UID = 64123


@pytest.fixture(scope="module")
def state_dir():
    d = tempfile.mkdtemp(prefix="nsbox-test-volumes-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start(state_dir):
    # Volumes are sparse: what a non-root uid's add up to is bounded (96 MiB here).
    d = Daemon(extra_args=["--state-dir", state_dir], env={"NSBOX_VOLUME_BYTES_PER_UID": str(96 << 20)})
    os.chmod(d.socket, 0o666)  # in production: membership of group nsbox
    return d


@pytest.fixture(scope="module")
def daemon(state_dir):
    d = start(state_dir)
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def sh(daemon, sid, command, user="sandbox", code=0):
    r = daemon.call("sandbox.exec", sandbox_id=sid, command=command, user=user, timeout_seconds=60)
    if code is not None:
        assert r["exit_code"] == code, (r["exit_code"], r["stdout"], r["stderr"])
    return r


def create(daemon, **params):
    return daemon.call("sandbox.create", **params)["sandbox_id"]


def remove(daemon, *ids):
    for sid in ids:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def error_of(fn, *a, **kw):
    with pytest.raises(RpcError) as e:
        fn(*a, **kw)
    return e.value


def test_a_volume_outlives_its_sandbox_and_a_restart_of_nsboxd(state_dir):
    d = start(state_dir)
    try:
        v = d.call("volume.create", name="keep", size="64M")
        assert v["name"] == "keep" and v["size_bytes"] == 64 << 20
        sid = create(d, mounts=[{"volume": "keep", "path": "/data"}])
        sh(d, sid, "echo written by the first > /data/note && mkdir /data/dir")
        remove(d, sid)
    finally:
        assert d.stop() == 0, d.final_log[-4000:]
    d = start(state_dir)
    try:
        assert [x["name"] for x in d.call("volume.list")["volumes"]] == ["keep"]
        sid = create(d, mounts=[{"volume": "keep", "path": "/workspace/keep", "read_only": True}])
        out = sh(d, sid, "cat /workspace/keep/note; stat -c '%u %U' /workspace/keep/dir")
        assert out["stdout"] == "written by the first\n1000 sandbox\n"
        # Read-only as asked: the sandbox's root cannot write either.
        r = sh(d, sid, "echo x > /workspace/keep/other", user="root", code=None)
        assert r["exit_code"] != 0 and "Read-only file system" in r["stderr"], r
        remove(d, sid)
        d.call("volume.remove", name="keep")
        assert d.call("volume.list")["volumes"] == []
    finally:
        assert d.stop() == 0, d.final_log[-4000:]


def test_two_sandboxes_share_a_volume_each_with_its_own_ids(daemon):
    daemon.call("volume.create", name="shared", size=32 << 20)
    a = create(daemon, mounts=[{"volume": "shared", "path": "/data"}])
    b = create(daemon, mounts=[{"volume": "shared", "path": "/data"}])
    try:
        sh(daemon, a, "echo from a > /data/a")
        out = sh(daemon, b, "cat /data/a; stat -c %U /data/a; echo from b > /data/b")
        assert out["stdout"] == "from a\nsandbox\n"
        assert sh(daemon, a, "cat /data/b")["stdout"] == "from b\n"
        e = error_of(daemon.call, "volume.remove", name="shared")
        assert e.kind == "busy", e.error
        assert daemon.call("volume.list")["volumes"][0]["in_use"] == 2
        assert daemon.call("sandbox.info", sandbox_id=a)["mounts"] == [
            {"volume": "shared", "path": "/data", "read_only": False}]
    finally:
        remove(daemon, a, b)
    daemon.call("volume.remove", name="shared")


def test_a_full_volume_is_enospc(daemon):
    daemon.call("volume.create", name="small", size="16M")
    sid = create(daemon, mounts=[{"volume": "small", "path": "/data"}])
    try:
        r = sh(daemon, sid, "dd if=/dev/zero of=/data/big bs=1M count=64", code=None)
        assert r["exit_code"] != 0 and "No space left on device" in r["stderr"], r
        size = int(sh(daemon, sid, "stat -c %s /data/big")["stdout"])
        assert size < 16 << 20
    finally:
        remove(daemon, sid)
    daemon.call("volume.remove", name="small")


def test_another_uids_volume_is_not_found(daemon):
    daemon.call("volume.create", name="mine", size="16M")
    try:
        out = as_uid(OTHER_UID, daemon.socket, [
            ["volume.list", {}],
            ["volume.remove", {"name": "mine"}],
            ["sandbox.create", {"mounts": [{"volume": "mine", "path": "/data"}]}],
        ])
        assert out[0]["result"]["volumes"] == []
        assert out[1]["error"]["data"]["kind"] == "not_found", out[1]
        assert out[2]["error"]["data"]["kind"] == "not_found", out[2]
        # Its own volume of the same name is its own.
        out = as_uid(OTHER_UID, daemon.socket, [["volume.create", {"name": "mine", "size": "16M"}],
                                                ["volume.remove", {"name": "mine"}]])
        assert out[0]["result"]["owner"] == OTHER_UID and out[1]["result"]["removed"], out
    finally:
        daemon.call("volume.remove", name="mine")


def test_creates_of_one_name_at_once_make_one_volume(daemon):
    """mkfs.ext4 runs beside nsboxd's loop: creates of the same name while it
    runs are told the volume exists, never given a half-made one."""
    results = []

    def make():
        try:
            results.append(daemon.call("volume.create", name="once", size="256M")["name"])
        except RpcError as e:
            results.append(e.kind)
    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["exists"] * 5 + ["once"], results
    assert [v["name"] for v in daemon.call("volume.list")["volumes"]] == ["once"]
    daemon.call("volume.remove", name="once")


def test_a_uids_volumes_are_bounded_together(daemon):
    out = as_uid(OTHER_UID, daemon.socket, [
        ["volume.create", {"name": "a", "size": "64M"}],
        ["volume.create", {"name": "b", "size": "64M"}],
        ["volume.create", {"name": "c", "size": "32M"}],
        ["volume.remove", {"name": "a"}],
        ["volume.remove", {"name": "c"}],
    ])
    assert out[0]["result"]["size_bytes"] == 64 << 20, out[0]
    assert out[1]["error"]["data"]["kind"] == "limit_reached", out[1]
    assert "volume_bytes_per_uid" in out[1]["error"]["message"], out[1]
    assert out[2]["result"]["size_bytes"] == 32 << 20, out[2]
    assert all("result" in o for o in out[3:]), out


@pytest.mark.parametrize("params, says", [
    ({"name": "../x", "size": "16M"}, "name must be"),
    ({"name": "x"}, "size must be"),
    ({"name": "x", "size": "1K"}, "size must be"),
    ({"name": "x", "size": "16M", "extra": 1}, "unknown field"),
])
def test_volume_create_refuses_bad_input(daemon, params, says):
    e = error_of(daemon.call, "volume.create", **params)
    assert says in str(e), e.error


@pytest.mark.parametrize("mount, says", [
    ({"volume": "v", "path": "/proc/x"}, "under /proc"),
    ({"volume": "v", "path": "/dev"}, "under /proc"),
    ({"volume": "v", "path": "/"}, "must be an absolute path"),
    ({"volume": "v", "path": "/workspace/../etc"}, "must be an absolute path"),
    ({"volume": "v", "path": "relative"}, "must be an absolute path"),
    ({"volume": "v", "host_path": "/tmp", "path": "/x"}, "one of volume or host_path"),
    ({"path": "/x"}, "one of volume or host_path"),
    ({"volume": "v", "path": "/x", "read_only": "yes"}, "read_only must be a boolean"),
    ({"volume": "v", "path": "/x", "mode": 1}, "unknown field \"mode\" in mounts[0]"),
])
def test_mount_paths_are_checked(daemon, mount, says):
    e = error_of(daemon.call, "sandbox.create", mounts=[mount])
    assert e.kind == "invalid_params" and says in str(e), e.error


def test_a_missing_volume_is_not_found_at_create(daemon):
    e = error_of(daemon.call, "sandbox.create", mounts=[{"volume": "nope", "path": "/data"}])
    assert e.kind == "not_found" and "nope" in str(e), e.error


def test_cli_volume_commands_and_create_v(daemon):
    r = daemon.cli("volume", "create", "clivol", "--size", "16M")
    assert r.returncode == 0, r.stderr
    r = daemon.cli("volume", "ls")
    assert r.returncode == 0 and "clivol" in r.stdout.decode(), r
    r = daemon.cli("create", "-v", "clivol:/data")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().split()[0]
    try:
        r = daemon.cli("exec", sid, "--", "sh", "-c", "echo hi > /data/f && cat /data/f")
        assert r.returncode == 0 and r.stdout == b"hi\n", r
        r = daemon.cli("volume", "rm", "clivol")
        assert r.returncode != 0 and b"is mounted in 1 live sandbox" in r.stderr, r
    finally:
        remove(daemon, sid)
    r = daemon.cli("volume", "rm", "clivol")
    assert r.returncode == 0, r.stderr


def test_the_file_api_sees_a_volume_as_the_sandbox_does(daemon):
    """fs.* (and nsbox cp, built on it) reaches a sandbox's volume at its
    mount point: what the sandbox wrote there is read, what fs.* writes is
    the sandbox user's and seen by the sandbox; not the empty directory of
    the writable layer under the mount."""
    daemon.call("volume.create", name="files", size="16M")
    sid = create(daemon, mounts=[{"volume": "files", "path": "/data"}])
    try:
        sh(daemon, sid, "echo from the sandbox > /data/in.txt && mkdir /data/sub")
        call = lambda method, **kw: daemon.call(method, sandbox_id=sid, **kw)  # noqa: E731
        assert call("fs.read", path="/data/in.txt")["content"] == "from the sandbox\n"
        names = sorted(e["name"] for e in call("fs.list", path="/data")["entries"])
        assert names == ["in.txt", "lost+found", "sub"], names
        call("fs.write", path="/data/sub/deep/out.txt", content="from fs.write")
        call("fs.mkdir", path="/data/made")
        call("fs.symlink", target="out.txt", path="/data/sub/deep/link")
        call("fs.rename", **{"from": "/data/in.txt", "to": "/data/moved.txt"})
        call("fs.chmod", path="/data/moved.txt", mode=0o600)
        # A write over a file there goes through a temporary file and a rename on the volume too,
        # keeping the file's owner and mode.
        call("fs.write", path="/data/moved.txt", content="replaced\n")
        assert call("fs.read", path="/data/moved.txt")["content"] == "replaced\n"
        call("fs.write", path="/data/moved.txt", content="from the sandbox\n")
        assert call("fs.stat", path="/data/sub/deep/out.txt")["size"] == len("from fs.write")
        out = sh(daemon, sid, "cat /data/sub/deep/link; stat -c '%U %a %n' /data/sub/deep/out.txt "
                 "/data/sub/deep /data/made /data/moved.txt; ls /data")["stdout"]
        assert out == ("from fs.writesandbox 644 /data/sub/deep/out.txt\nsandbox 755 /data/sub/deep\n"
                       "sandbox 755 /data/made\nsandbox 600 /data/moved.txt\n"
                       "lost+found\nmade\nmoved.txt\nsub\n"), out
        call("fs.remove", path="/data/sub", recursive=True)
        assert sh(daemon, sid, "ls /data")["stdout"] == "lost+found\nmade\nmoved.txt\n"
        # Under the mount, the writable layer got nothing.
        e = error_of(call, "fs.remove", path="/data", recursive=True)
        assert "mount point" in str(e), e.error

        # nsbox cp, both ways.
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "up.txt")
            with open(src, "w") as f:
                f.write("copied up\n")
            r = daemon.cli("cp", src, sid + ":/data/up.txt")
            assert r.returncode == 0, r.stderr
            assert sh(daemon, sid, "cat /data/up.txt; stat -c %U /data/up.txt")["stdout"] == \
                "copied up\nsandbox\n"
            r = daemon.cli("cp", sid + ":/data/moved.txt", os.path.join(tmp, "down.txt"))
            assert r.returncode == 0, r.stderr
            assert open(os.path.join(tmp, "down.txt")).read() == "from the sandbox\n"
    finally:
        remove(daemon, sid)
    daemon.call("volume.remove", name="files")


def test_the_file_api_honours_a_read_only_volume_and_no_other_mount(daemon):
    daemon.call("volume.create", name="rofiles", size="16M")
    writer = create(daemon, mounts=[{"volume": "rofiles", "path": "/data"}])
    sh(daemon, writer, "echo kept > /data/f.txt")
    remove(daemon, writer)
    sid = create(daemon, mounts=[{"volume": "rofiles", "path": "/data", "read_only": True}])
    try:
        call = lambda method, **kw: daemon.call(method, sandbox_id=sid, **kw)  # noqa: E731
        assert call("fs.read", path="/data/f.txt")["content"] == "kept\n"
        for method, params in [("fs.write", {"path": "/data/g.txt", "content": "x"}),
                               ("fs.write", {"path": "/data/f.txt", "content": "x"}),
                               ("fs.mkdir", {"path": "/data/dir"}),
                               ("fs.remove", {"path": "/data/f.txt"}),
                               ("fs.chmod", {"path": "/data/f.txt", "mode": 0o600})]:
            e = error_of(call, method, **params)
            assert e.kind == "permission_denied" and "read-only" in str(e).lower(), (method, e.error)
        assert sh(daemon, sid, "ls /data; cat /data/f.txt")["stdout"] == "f.txt\nlost+found\nkept\n"
        # The sandbox's /proc stays out of reach, through a path that passes the volume too.
        e = error_of(call, "fs.read", path="/data/../proc/1/status")
        assert e.kind == "invalid_params" and "/proc" in str(e), e.error
    finally:
        remove(daemon, sid)
    daemon.call("volume.remove", name="rofiles")


def test_the_file_api_still_sees_a_volume_after_a_live_restore():
    """The mounts fs.* may reach are kept in the sandbox's record: the nsboxd
    that adopts a sandbox after a kill -9 reaches its volume too."""
    state = tempfile.mkdtemp(prefix="nsbox-test-volumes-restore-")
    live = ["--state-dir", state, "--live-restore", "1", "--warm-pool", "0"]
    d = Daemon(extra_args=live)
    try:
        d.call("volume.create", name="kept", size="16M")
        sid = create(d, mounts=[{"volume": "kept", "path": "/data"}])
        sh(d, sid, "echo before the restart > /data/f")
        d.proc.kill()
        d.proc.wait()
        d.stop()
        d = Daemon(extra_args=live)
        adopted = [line for line in d.read_log().splitlines() if sid in line or "live restore" in line]
        assert any(s["sandbox_id"] == sid for s in d.call("sandbox.list")["sandboxes"]), adopted
        assert d.call("fs.read", sandbox_id=sid, path="/data/f")["content"] == "before the restart\n"
        d.call("fs.write", sandbox_id=sid, path="/data/g", content="after")
        assert sh(d, sid, "cat /data/g")["stdout"] == "after"
        remove(d, sid)
        d.call("volume.remove", name="kept")
    finally:
        d.stop()
        shutil.rmtree(state, ignore_errors=True)


def test_mcp_create_sandbox_mounts_a_volume(daemon):
    from test_mcp import McpProcess, init_params
    daemon.call("volume.create", name="mcpvol", size="16M")
    m = McpProcess(daemon.socket)
    try:
        m.request("initialize", init_params("2025-11-25"))
        r = m.request("tools/call", {"name": "create_sandbox", "arguments": {
            "session_id": "mcp-volume", "mounts": [{"volume": "mcpvol", "path": "/workspace/v"}]}})
        assert r["result"].get("isError") is not True, r
        r = m.request("tools/call", {"name": "shell_execute", "arguments": {
            "session_id": "mcp-volume", "command": "echo via mcp > /workspace/v/f && stat -c %U /workspace/v/f"}})
        assert "sandbox" in r["result"]["content"][0]["text"], r
        assert m.close()[0] == 0
    finally:
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()
        for s in daemon.call("sandbox.list")["sandboxes"]:
            if s["session_id"] == "mcp-volume":
                remove(daemon, s["sandbox_id"])
    sid = create(daemon, mounts=[{"volume": "mcpvol", "path": "/v"}])
    assert sh(daemon, sid, "cat /v/f")["stdout"] == "via mcp\n"
    remove(daemon, sid)
    daemon.call("volume.remove", name="mcpvol")


def test_a_snapshot_holds_the_sandbox_layer_never_its_volume(daemon):
    daemon.call("volume.create", name="snapvol", size="16M")
    sid = create(daemon, mounts=[{"volume": "snapvol", "path": "/workspace/v"}])
    try:
        sh(daemon, sid, "echo on the volume > /workspace/v/f && echo in the layer > /workspace/g")
        snap = daemon.call("sandbox.snapshot", sandbox_id=sid)["snapshot_id"]
        fork = create(daemon, from_snapshot=snap)
        try:
            out = sh(daemon, fork, "cat /workspace/g; ls -A /workspace/v")["stdout"]
            assert out == "in the layer\n", out
        finally:
            remove(daemon, fork)
        daemon.call("snapshot.remove", snapshot_id=snap)
    finally:
        remove(daemon, sid)
    daemon.call("volume.remove", name="snapvol")
