# SPDX-License-Identifier: Apache-2.0
"""fs.*: the file API of nsboxd, against a real daemon and real sandboxes.

nsboxd runs as host root, so every test of the path attacks plants a host
canary that resolution escaping the sandbox would read or write, and checks
that it never is."""
import base64
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
import uuid

import pytest
from nsbox_client import RpcError

pytestmark = [pytest.mark.core]


def sh(daemon, sandbox, command, **kw):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command=command, **kw)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def fs_error(daemon, method, **params):
    with pytest.raises(RpcError) as e:
        daemon.call(method, **params)
    return e.value


def fs_exists(daemon, sandbox, path):
    try:
        daemon.call("fs.stat", sandbox_id=sandbox, path=path)
        return True
    except RpcError:
        return False


def wait_for(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def canary():
    """A host directory with a file only the host has: resolution that left
    the sandbox would read or overwrite it."""
    d = tempfile.mkdtemp(prefix="nsbox-canary-")
    os.chmod(d, 0o755)
    content = "host canary %s\n" % uuid.uuid4()
    path = os.path.join(d, "x")
    with open(path, "w") as f:
        f.write(content)
    os.chmod(path, 0o644)
    before = os.stat(path)

    class Canary:
        dir = d
        file = path
        text = content

        def assert_untouched(self):
            with open(path) as f:
                assert f.read() == content
            now = os.stat(path)
            assert (now.st_mtime_ns, now.st_size, now.st_ino, now.st_mode) == \
                (before.st_mtime_ns, before.st_size, before.st_ino, before.st_mode)
            assert sorted(os.listdir(d)) == ["x"]

    yield Canary()
    shutil.rmtree(d, ignore_errors=True)


# ---- round trips, modes, owners ----

def test_text_round_trip_and_relative_path_lands_in_workspace(daemon, sandbox):
    text = "héllo wörld ✓ 🐍\nline 2\n"
    r = daemon.call("fs.write", sandbox_id=sandbox, path="notes.txt", content=text)
    assert r["bytes_written"] == len(text.encode())
    r = daemon.call("fs.read", sandbox_id=sandbox, path="/workspace/notes.txt")
    assert r == {"content": text, "encoding": "utf-8", "size": len(text.encode()), "truncated": False}
    assert sh(daemon, sandbox, "cat /workspace/notes.txt") == text


def test_base64_round_trip_of_all_256_byte_values(daemon, sandbox):
    data = bytes(range(256)) * 4
    daemon.call("fs.write", sandbox_id=sandbox, path="/tmp/bin", content=base64.b64encode(data).decode(),
                encoding="base64")
    r = daemon.call("fs.read", sandbox_id=sandbox, path="/tmp/bin", encoding="base64")
    assert r["encoding"] == "base64"
    assert base64.b64decode(r["content"]) == data
    assert r["size"] == len(data)
    assert sh(daemon, sandbox, "sha256sum /tmp/bin").split()[0] == hashlib.sha256(data).hexdigest()


def test_invalid_utf8_reads_back_with_replacement_characters(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="bad", content=base64.b64encode(b"ok\xff\xfeok").decode(),
                encoding="base64")
    r = daemon.call("fs.read", sandbox_id=sandbox, path="bad")
    assert r["content"] == "ok\ufffd\ufffdok"


def test_max_bytes_truncates_and_says_so(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="big", content="a" * 1000)
    r = daemon.call("fs.read", sandbox_id=sandbox, path="big", max_bytes=10)
    assert r["content"] == "a" * 10
    assert r["truncated"] is True
    assert r["size"] == 1000
    r = daemon.call("fs.read", sandbox_id=sandbox, path="big", max_bytes=1000)
    assert r["truncated"] is False


def test_append_adds_to_the_end(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="log", content="one\n")
    daemon.call("fs.write", sandbox_id=sandbox, path="log", content="two\n", append=True)
    assert daemon.call("fs.read", sandbox_id=sandbox, path="log")["content"] == "one\ntwo\n"
    daemon.call("fs.write", sandbox_id=sandbox, path="log", content="three\n")
    assert daemon.call("fs.read", sandbox_id=sandbox, path="log")["content"] == "three\n"


def test_mode_is_kept_and_setuid_setgid_are_stripped(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="plain", content="x", mode=0o755)
    daemon.call("fs.write", sandbox_id=sandbox, path="suid", content="x", mode=0o6755)
    daemon.call("fs.write", sandbox_id=sandbox, path="default", content="x")
    assert daemon.call("fs.stat", sandbox_id=sandbox, path="plain")["mode"] == 0o755
    assert daemon.call("fs.stat", sandbox_id=sandbox, path="suid")["mode"] == 0o755
    assert sh(daemon, sandbox, "stat -c %a plain suid default").split() == ["755", "755", "644"]
    # A setuid bit the sandbox set itself does not survive a write either.
    sh(daemon, sandbox, "chmod 4755 default && stat -c %a default")
    daemon.call("fs.write", sandbox_id=sandbox, path="default", content="y")
    assert sh(daemon, sandbox, "stat -c %a default").strip() == "755"


def test_written_files_and_dirs_belong_to_the_sandbox_user(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="/tmp/deep/er/file", content="x")
    daemon.call("fs.mkdir", sandbox_id=sandbox, path="m/n", parents=True)
    out = sh(daemon, sandbox, "stat -c %u:%g /tmp/deep /tmp/deep/er /tmp/deep/er/file m m/n")
    assert out.split() == ["1000:1000"] * 5
    st = daemon.call("fs.stat", sandbox_id=sandbox, path="/tmp/deep/er/file")
    assert (st["uid"], st["gid"]) == (1000, 1000)
    # The sandbox user can change and remove what was written for it.
    sh(daemon, sandbox, "echo more >> /tmp/deep/er/file && rm -r /tmp/deep m")


def test_overwrite_keeps_the_owner_of_an_existing_file(daemon, sandbox):
    sh(daemon, sandbox, "echo root > /tmp/rootfile", user="root")
    daemon.call("fs.write", sandbox_id=sandbox, path="/tmp/rootfile", content="new\n")
    assert sh(daemon, sandbox, "stat -c %u:%g /tmp/rootfile; cat /tmp/rootfile") == "0:0\nnew\n"


# ---- list, stat, mkdir, remove ----

def test_list_is_sorted_and_does_not_follow_symlinks(daemon, sandbox):
    sh(daemon, sandbox, "mkdir zdir && echo hi > b.txt && ln -s / a-link && mkfifo c-fifo && "
                        "touch -d 2020-01-02T03:04:05Z b.txt")
    r = daemon.call("fs.list", sandbox_id=sandbox, path="/workspace")
    entries = {e["name"]: e for e in r["entries"]}
    assert [e["name"] for e in r["entries"]] == ["a-link", "b.txt", "c-fifo", "zdir"]
    assert entries["a-link"]["type"] == "symlink"
    assert entries["b.txt"]["type"] == "file"
    assert entries["b.txt"]["size"] == 3
    assert entries["b.txt"]["mode"] == 0o644
    assert entries["b.txt"]["mtime"] == "2020-01-02T03:04:05.000Z"
    assert entries["c-fifo"]["type"] == "other"
    assert entries["zdir"]["type"] == "dir"
    # The default path is /workspace; a relative path is under it.
    assert daemon.call("fs.list", sandbox_id=sandbox)["entries"] == r["entries"]
    assert daemon.call("fs.list", sandbox_id=sandbox, path="zdir")["entries"] == []


def test_stat_describes_a_symlink_without_following_it(daemon, sandbox):
    sh(daemon, sandbox, "ln -s /etc/passwd pw")
    st = daemon.call("fs.stat", sandbox_id=sandbox, path="pw")
    assert st["type"] == "symlink"
    assert st["target"] == "/etc/passwd"
    assert st["path"] == "/workspace/pw"
    st = daemon.call("fs.stat", sandbox_id=sandbox, path="/etc/passwd")
    assert st["type"] == "file" and st["uid"] == 0
    assert daemon.call("fs.stat", sandbox_id=sandbox, path="/")["type"] == "dir"
    assert fs_error(daemon, "fs.stat", sandbox_id=sandbox, path="nope").kind == "not_found"


def test_mkdir_with_and_without_parents(daemon, sandbox):
    e = fs_error(daemon, "fs.mkdir", sandbox_id=sandbox, path="p/q/r")
    assert e.kind == "not_found"
    assert daemon.call("fs.mkdir", sandbox_id=sandbox, path="p/q/r", parents=True)["created"] is True
    assert daemon.call("fs.mkdir", sandbox_id=sandbox, path="p/q/r", parents=True)["created"] is False
    assert fs_error(daemon, "fs.mkdir", sandbox_id=sandbox, path="p/q/r").kind == "invalid_params"
    assert daemon.call("fs.mkdir", sandbox_id=sandbox, path="single")["created"] is True
    assert sh(daemon, sandbox, "stat -c '%a %F' p/q/r single").splitlines() == ["755 directory"] * 2


def test_remove_file_dir_and_tree(daemon, sandbox):
    sh(daemon, sandbox, "mkdir -p t/a/b/c && touch t/a/f t/a/b/c/g && mkfifo t/fifo && ln -s / t/root-link && "
                        "mkdir keep && touch keep/k && ln -s ../keep t/keep-link && touch single && mkdir empty")
    daemon.call("fs.remove", sandbox_id=sandbox, path="single")
    daemon.call("fs.remove", sandbox_id=sandbox, path="empty")
    e = fs_error(daemon, "fs.remove", sandbox_id=sandbox, path="t")
    assert e.kind == "invalid_params" and "recursive" in str(e)
    daemon.call("fs.remove", sandbox_id=sandbox, path="t", recursive=True)
    # Symlinks in the tree were removed, never followed.
    assert sh(daemon, sandbox, "ls -A; ls keep").split() == ["keep", "k"]
    assert sh(daemon, sandbox, "ls / | wc -l").strip() != "0"
    assert fs_error(daemon, "fs.remove", sandbox_id=sandbox, path="t").kind == "not_found"


def test_removing_a_symlink_removes_the_link_not_its_target(daemon, sandbox):
    sh(daemon, sandbox, "mkdir target && touch target/f && ln -s target link && ln -s / rootlink")
    daemon.call("fs.remove", sandbox_id=sandbox, path="link", recursive=True)
    daemon.call("fs.remove", sandbox_id=sandbox, path="rootlink", recursive=True)
    assert sh(daemon, sandbox, "ls -A; ls target").split() == ["target", "f"]
    assert "etc" in sh(daemon, sandbox, "ls /")


def test_the_root_and_mount_points_are_not_removed(daemon, sandbox):
    for path in ["/", "/proc", "/dev", "/workspace/.."]:
        e = fs_error(daemon, "fs.remove", sandbox_id=sandbox, path=path, recursive=True)
        assert e.kind == "invalid_params", path
    assert sh(daemon, sandbox, "cat /proc/self/comm; ls /dev/null")


# ---- what is refused ----

def test_fifo_is_refused_without_blocking_the_daemon(daemon, sandbox):
    sh(daemon, sandbox, "mkfifo /workspace/fifo && ln -s fifo fifo-link")
    for method, params in [("fs.read", {"path": "fifo"}), ("fs.read", {"path": "fifo-link"}),
                           ("fs.write", {"path": "fifo", "content": "x"}),
                           ("fs.write", {"path": "fifo", "content": "x", "append": True})]:
        start = time.monotonic()
        e = fs_error(daemon, method, sandbox_id=sandbox, **params)
        assert time.monotonic() - start < 2
        assert e.kind == "invalid_params"
        assert "FIFO" in str(e)
    assert daemon.call("server.info")["version"]
    assert sh(daemon, sandbox, "echo alive") == "alive\n"


def test_directory_is_not_read_or_written_as_a_file(daemon, sandbox):
    assert fs_error(daemon, "fs.read", sandbox_id=sandbox, path="/etc").kind == "invalid_params"
    assert fs_error(daemon, "fs.write", sandbox_id=sandbox, path="/tmp", content="x").kind == "invalid_params"
    assert fs_error(daemon, "fs.write", sandbox_id=sandbox, path="newdir/", content="x").kind == "invalid_params"


@pytest.mark.parametrize("path", ["/proc/sys/kernel/core_pattern", "/proc/self/status", "/proc/1/environ",
                                  "/sys/kernel/uevent_helper", "/dev/null", "/dev/shm/x", "/proc/../proc/version"])
def test_proc_dev_and_sys_are_out_of_reach(daemon, sandbox, path):
    with open("/proc/sys/kernel/core_pattern") as f:
        host_core_pattern = f.read()
    e = fs_error(daemon, "fs.read", sandbox_id=sandbox, path=path)
    assert e.kind == "invalid_params"
    assert "/proc, /dev and /sys" in str(e)
    e = fs_error(daemon, "fs.write", sandbox_id=sandbox, path=path, content="|/bin/false\n")
    assert e.kind == "invalid_params"
    assert fs_error(daemon, "fs.list", sandbox_id=sandbox, path=os.path.dirname(path)).kind == "invalid_params"
    with open("/proc/sys/kernel/core_pattern") as f:
        assert f.read() == host_core_pattern


def test_symlinks_to_host_paths_stay_in_the_sandbox(daemon, sandbox, canary):
    sh(daemon, sandbox, "ln -s %s dirlink && ln -s %s filelink && ln -s / evil" % (canary.dir, canary.file))
    through_dir = ["dirlink/x", "evil" + canary.file, "/workspace/evil/workspace/evil" + canary.file]
    for path in through_dir + ["filelink"]:
        e = fs_error(daemon, "fs.read", sandbox_id=sandbox, path=path)
        assert e.kind == "not_found", path
        assert canary.text not in str(e)
    for path in through_dir:
        assert fs_error(daemon, "fs.stat", sandbox_id=sandbox, path=path).kind == "not_found", path
        assert fs_error(daemon, "fs.remove", sandbox_id=sandbox, path=path, recursive=True).kind == "not_found"
        assert fs_error(daemon, "fs.mkdir", sandbox_id=sandbox, path=path).kind == "not_found", path
    for path in ["dirlink", "evil" + canary.dir]:
        assert fs_error(daemon, "fs.list", sandbox_id=sandbox, path=path).kind == "not_found", path
    # stat describes the link itself, whose text is the sandbox's own data.
    st = daemon.call("fs.stat", sandbox_id=sandbox, path="filelink")
    assert st["type"] == "symlink" and st["target"] == canary.file
    # A final symlink is never followed by write.
    e = fs_error(daemon, "fs.write", sandbox_id=sandbox, path="filelink", content="pwned")
    assert e.kind == "invalid_params" and "symlink" in str(e)
    canary.assert_untouched()

    # Writing through a directory link lands at the same path inside the sandbox.
    for i, path in enumerate(["evil" + canary.file, "/workspace/evil/workspace/evil" + canary.file, "dirlink/x"]):
        daemon.call("fs.write", sandbox_id=sandbox, path=path, content="inside %d\n" % i)
        assert sh(daemon, sandbox, "cat %s" % canary.file) == "inside %d\n" % i
        canary.assert_untouched()
    for path in through_dir + ["filelink"]:
        assert daemon.call("fs.read", sandbox_id=sandbox, path=path)["content"] == "inside 2\n", path
    listing = daemon.call("fs.list", sandbox_id=sandbox, path="dirlink")["entries"]
    assert [(e["name"], e["size"]) for e in listing] == [("x", 9)]
    daemon.call("fs.remove", sandbox_id=sandbox, path="dirlink/x")
    assert sh(daemon, sandbox, "ls -A %s" % canary.dir) == ""
    # Removing the links removes the links.
    daemon.call("fs.remove", sandbox_id=sandbox, path="filelink")
    daemon.call("fs.remove", sandbox_id=sandbox, path="dirlink", recursive=True)
    assert sh(daemon, sandbox, "ls -A") == "evil\n"
    canary.assert_untouched()


def test_dotdot_chains_stop_at_the_sandbox_root(daemon, sandbox, canary):
    inside = sh(daemon, sandbox, "cat /etc/hostname")
    for path in ["../../../../../../../etc/hostname", "/../../../etc/hostname",
                 "/workspace/../../../../etc/../etc/hostname"]:
        assert daemon.call("fs.read", sandbox_id=sandbox, path=path)["content"] == inside
    chain = "../" * 20 + canary.file.lstrip("/")
    assert fs_error(daemon, "fs.read", sandbox_id=sandbox, path=chain).kind == "not_found"
    assert fs_error(daemon, "fs.list", sandbox_id=sandbox, path="../" * 20 + canary.dir).kind == "not_found"
    # A symlink with a .. chain resolves in the sandbox too.
    sh(daemon, sandbox, "ln -s ../../../../../../..%s up" % canary.dir)
    assert fs_error(daemon, "fs.read", sandbox_id=sandbox, path="up/x").kind == "not_found"
    # A write through the chain creates the path inside the sandbox.
    daemon.call("fs.write", sandbox_id=sandbox, path=chain, content="inside\n")
    assert sh(daemon, sandbox, "cat %s" % canary.file) == "inside\n"
    assert daemon.call("fs.read", sandbox_id=sandbox, path="up/x")["content"] == "inside\n"
    canary.assert_untouched()


@pytest.mark.parametrize("prefix", ["/proc/self/root", "/proc/1/root", "/proc/thread-self/root",
                                    "/proc/self/cwd/../../..", "/dev/fd/../root"])
def test_proc_magic_links_are_refused(daemon, sandbox, canary, prefix):
    path = prefix + canary.file
    for method, extra in [("fs.read", {}), ("fs.stat", {}), ("fs.write", {"content": "pwned"}),
                          ("fs.remove", {}), ("fs.mkdir", {"parents": True})]:
        e = fs_error(daemon, method, sandbox_id=sandbox, path=path, **extra)
        assert e.kind in ("invalid_params", "not_found"), (method, str(e))
        assert canary.text not in str(e)
    sh(daemon, sandbox, "ln -s /proc/self/root magic")
    e = fs_error(daemon, "fs.read", sandbox_id=sandbox, path="magic" + canary.file)
    assert e.kind == "invalid_params"
    canary.assert_untouched()


def test_rename_exchange_race_never_reaches_the_host(daemon, sandbox, canary):
    """The sandbox swaps /workspace/d (a real directory) and /workspace/s (a
    symlink to the canary's absolute host path) with renameat2(RENAME_EXCHANGE)
    as fast as it can, while the daemon reads and writes d/x thousands of times."""
    sh(daemon, sandbox, "mkdir d && echo inside > d/x && ln -s %s s" % canary.dir)
    swapper = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE, SYS_renameat2 = -100, 2, 316
open("/workspace/started", "w").close()
n, end = 0, time.time() + 60
while not os.path.exists("/workspace/stop") and time.time() < end:
    for _ in range(200):
        if libc.syscall(SYS_renameat2, AT_FDCWD, b"/workspace/d", AT_FDCWD, b"/workspace/s", RENAME_EXCHANGE):
            raise OSError(ctypes.get_errno(), "renameat2")
        n += 1
print(n)
"""
    result = {}

    def run_swapper():
        with daemon.client() as c:
            result["exec"] = c.call("sandbox.exec", sandbox_id=sandbox, argv=["python3", "-c", swapper],
                                    timeout_seconds=90)

    thread = threading.Thread(target=run_swapper)
    thread.start()
    try:
        wait_for(lambda: fs_exists(daemon, sandbox, "started"), "the swapper did not start")
        counts = {"read_ok": 0, "write_ok": 0, "errors": 0}
        last_written = None
        with daemon.client() as c:
            for i in range(3000):
                try:
                    r = c.call("fs.read", sandbox_id=sandbox, path="d/x")
                    assert canary.text not in r["content"]
                    assert r["content"] == "inside\n" or r["content"].startswith("race ")
                    counts["read_ok"] += 1
                except RpcError as e:
                    assert e.kind in ("not_found", "busy"), str(e)
                    assert canary.text not in str(e)
                    counts["errors"] += 1
                content = "race %d\n" % i
                try:
                    c.call("fs.write", sandbox_id=sandbox, path="d/x", content=content)
                    last_written = content
                    counts["write_ok"] += 1
                except RpcError as e:
                    assert e.kind in ("not_found", "busy"), str(e)
                    counts["errors"] += 1
        canary.assert_untouched()
    finally:
        daemon.call("fs.write", sandbox_id=sandbox, path="stop", content="")
        thread.join(120)
    swaps = int(result["exec"]["stdout"])
    assert result["exec"]["exit_code"] == 0, result["exec"]
    assert swaps > 1000, "the race did not run: %d swaps" % swaps
    # Both outcomes happened: the race was real.
    assert counts["write_ok"] > 0 and counts["errors"] > 0, counts
    canary.assert_untouched()
    # What was written through d/x is in the real directory (now named d or
    # s) and nowhere else: nothing was created at the canary path inside.
    real = sh(daemon, sandbox, "if [ -L d ]; then echo s; else echo d; fi").strip()
    assert sh(daemon, sandbox, "cat %s/x" % real) == last_written
    sh(daemon, sandbox, "test ! -e %s && test ! -e /tmp/x && ls -A %s | grep -qx x" % (canary.dir, real))


# ---- limits and bad input ----

def test_full_disk_is_reported_as_a_limit(daemon):
    sb = daemon.call("sandbox.create", limits={"disk_bytes": 2 << 20})["sandbox_id"]
    try:
        data = base64.b64encode(os.urandom(4 << 20)).decode()
        e = fs_error(daemon, "fs.write", sandbox_id=sb, path="huge", content=data, encoding="base64")
        assert e.kind == "limit_reached"
        assert "no space left in the sandbox (its disk is 2 MiB: nsbox create --disk" in str(e), str(e)
        # The half-written file is gone and its space is back.
        assert fs_error(daemon, "fs.stat", sandbox_id=sb, path="huge").kind == "not_found"
        assert daemon.call("fs.write", sandbox_id=sb, path="small", content="ok")["bytes_written"] == 2
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


@pytest.mark.parametrize("method,params,kind", [
    ("fs.read", {"path": "x", "bogus": 1}, "unknown field"),
    ("fs.read", {"path": 5}, "path must be a string"),
    ("fs.read", {"path": ""}, "empty"),
    ("fs.read", {"path": "a" * 5000}, "longer"),
    ("fs.read", {"path": "x", "max_bytes": -1}, "max_bytes"),
    ("fs.read", {"path": "x", "max_bytes": 65 << 20}, "max_bytes"),
    ("fs.read", {"path": "x", "encoding": "latin-1"}, "encoding"),
    ("fs.read", {}, "path is required"),
    ("fs.write", {"path": "x"}, "content"),
    ("fs.write", {"path": "x", "content": "!!!", "encoding": "base64"}, "base64"),
    ("fs.write", {"path": "x", "content": "", "mode": "0755"}, "mode"),
    ("fs.write", {"path": "x", "content": "", "mode": 0o10000}, "mode"),
    ("fs.write", {"path": "x", "content": "", "append": "yes"}, "append"),
    ("fs.remove", {"path": "x", "recursive": 1}, "recursive"),
    ("fs.mkdir", {"path": "x", "parents": "true"}, "parents"),
    ("fs.list", {"path": "x", "recursive": True}, "unknown field"),
    ("fs.stat", {"path": "x", "follow": True}, "unknown field"),
])
def test_malformed_params_are_invalid_params(daemon, sandbox, method, params, kind):
    e = fs_error(daemon, method, sandbox_id=sandbox, **params)
    assert e.code == -32602
    assert e.kind == "invalid_params"
    assert kind in str(e)


def test_path_with_nul_is_refused(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="a", content="x")
    with daemon.client() as c:
        c.request("fs.read", {"sandbox_id": sandbox, "path": "a\u0000b"})
        error = c.read_message()["error"]
    # jansson refuses NUL in strings at parse time; fs.* would refuse it too.
    assert error["code"] in (-32700, -32602)
    assert daemon.call("fs.read", sandbox_id=sandbox, path="a")["content"] == "x"


def test_unknown_sandbox_is_not_found(daemon):
    e = fs_error(daemon, "fs.read", sandbox_id=str(uuid.uuid4()), path="x")
    assert e.kind == "not_found"


def test_a_write_cut_short_by_a_full_disk_leaves_the_file_it_would_replace_whole(daemon):
    sid = daemon.call("sandbox.create", limits={"disk_bytes": "8M"})["sandbox_id"]
    try:
        daemon.call("fs.write", sandbox_id=sid, path="keep", content="old content", mode=0o640)
        big = base64.b64encode(os.urandom(12 << 20)).decode()
        e = fs_error(daemon, "fs.write", sandbox_id=sid, path="keep", content=big, encoding="base64")
        assert "space" in str(e) or "disk" in str(e), e
        assert daemon.call("fs.read", sandbox_id=sid, path="keep")["content"] == "old content"
        names = [x["name"] for x in daemon.call("fs.list", sandbox_id=sid, path="/workspace")["entries"]]
        assert names == ["keep"], names
        # The space of the write that failed is back: a write that fits goes in, whole, keeping the mode.
        fits = os.urandom(5 << 20)
        daemon.call("fs.write", sandbox_id=sid, path="keep", content=base64.b64encode(fits).decode(),
                    encoding="base64")
        assert sh(daemon, sid, "sha256sum < keep; stat -c %a keep") == \
            "%s  -\n640\n" % hashlib.sha256(fits).hexdigest()
        names = [x["name"] for x in daemon.call("fs.list", sandbox_id=sid, path="/workspace")["entries"]]
        assert names == ["keep"], names
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


INOTIFY_WATCHER = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
IN_MODIFY, IN_CREATE, IN_MOVED_TO = 0x2, 0x100, 0x80
assert libc.inotify_add_watch(fd, b"/workspace", IN_MODIFY | IN_CREATE | IN_MOVED_TO) >= 0
open("/workspace/.watching", "w").close()
with open("/tmp/events", "w") as log:
    while True:
        buf = os.read(fd, 65536)
        off = 0
        while off < len(buf):
            wd, mask, cookie, n = struct.unpack_from("iIII", buf, off)
            name = buf[off + 16:off + 16 + n].rstrip(b"\0").decode()
            off += 16 + n
            kind = {IN_MODIFY: "modify", IN_CREATE: "create", IN_MOVED_TO: "moved_to"}.get(mask & 0x182, hex(mask))
            log.write("%s %s\n" % (kind, name))
            log.flush()
            if name == "stop":
                sys.exit(0)
"""


def test_a_file_being_written_has_no_name_until_it_is_whole(daemon, sandbox):
    """fs.write writes an unnamed file (O_TMPFILE) and names it only to
    rename it into place: a kill of nsboxd mid-write can leave no temporary
    file behind. Seen from inside, no named file takes the data."""
    daemon.call("fs.write", sandbox_id=sandbox, path="/tmp/watch.py", content=INOTIFY_WATCHER)
    daemon.call("sandbox.exec", sandbox_id=sandbox, command="python3 /tmp/watch.py", background=True)
    wait_for(lambda: fs_exists(daemon, sandbox, "/workspace/.watching"), "the watcher did not start")
    data = os.urandom(2 << 20)
    for _ in range(2):  # a new file, then one replaced
        daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/data",
                    content=base64.b64encode(data).decode(), encoding="base64")
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/stop", content="")
    wait_for(lambda: "moved_to stop" in sh(daemon, sandbox, "cat /tmp/events"), "the watcher saw no stop")
    events = sh(daemon, sandbox, "cat /tmp/events").splitlines()
    # The kernel names an unnamed file "#INODE" in its events.
    named = [e for e in events if e.startswith("modify .nsbox-write-")]
    assert named == [], events
    assert events.count("moved_to data") == 2, events
    assert sh(daemon, sandbox, "sha256sum < /workspace/data") == "%s  -\n" % hashlib.sha256(data).hexdigest()
