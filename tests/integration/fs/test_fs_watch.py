# SPDX-License-Identifier: Apache-2.0
"""fs.watch: a sandbox directory watched with inotify, its changes streamed as
fs.event notifications until the client leaves or the sandbox ends; bounded per
sandbox; resolved inside the sandbox's root, so a symlink to / never watches the
host."""
import os
import socket
import tempfile
import time

import pytest

from nsbox_client import Client, RpcError


def watch(daemon, sandbox_id, path, recursive=False):
    """A client with a watch open (its fs.watching seen), and the request id."""
    c = Client(daemon.socket)
    rid = c.request("fs.watch", {"sandbox_id": sandbox_id, "path": path, "recursive": recursive})
    while True:
        msg = c.read_message()
        if msg.get("method") == "fs.watching":
            return c, rid, msg["params"]
        assert "error" not in msg, msg
        assert "id" not in msg, msg
        c.notifications.append(msg)


def events_until(c, want, timeout=20):
    """fs.event params read until want(all so far) holds."""
    seen = []
    c.sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while not want(seen):
        assert time.monotonic() < deadline, seen
        msg = c.read_message()
        assert msg.get("method") == "fs.event", msg
        seen.append(msg["params"])
    return seen


def run(daemon, sandbox_id, command):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox_id, command=command)
    assert r["exit_code"] == 0, r
    return r


def test_watch_streams_create_write_rename_remove(daemon, sandbox):
    run(daemon, sandbox, "mkdir -p /workspace/w")
    c, rid, hello = watch(daemon, sandbox, "/workspace/w")
    with c:
        assert hello["path"] == "/workspace/w" and hello["directories"] == 1
        run(daemon, sandbox, "echo hi > /workspace/w/a; mv /workspace/w/a /workspace/w/b; chmod 600 /workspace/w/b;"
                             " rm /workspace/w/b")
        seen = events_until(c, lambda s: any(e["type"] == "remove" for e in s))
        kinds = [(e["type"], e["name"]) for e in seen]
        assert ("create", "a") in kinds
        assert ("write", "a") in kinds
        assert ("rename", "a") in kinds and ("create", "b") in kinds
        assert ("chmod", "b") in kinds
        assert kinds[-1] == ("remove", "b")
        assert all(e["path"] == "/workspace/w/" + e["name"] and e["sandbox_id"] == sandbox for e in seen)


def test_a_file_written_through_the_api_is_a_write_of_its_own_name(daemon, sandbox):
    """fs.write puts a whole file in place through a temporary name (a write cut
    short keeps the old file): watchers see the file created and written under
    its own name, never the temporary one."""
    run(daemon, sandbox, "mkdir -p /workspace/api; echo old > /workspace/api/old.txt")
    c, rid, hello = watch(daemon, sandbox, "/workspace/api")
    with c:
        daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/api/old.txt", content="replaced")
        daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/api/new.txt", content="new")
        run(daemon, sandbox, "touch /workspace/api/end")
        seen = events_until(c, lambda s: any(e["name"] == "end" for e in s))
        kinds = [(e["type"], e["name"]) for e in seen]
        for name in ("old.txt", "new.txt"):
            assert kinds.index(("create", name)) < kinds.index(("write", name)), kinds
        assert not any(name.startswith(".nsbox-") for _, name in kinds), kinds


def test_recursive_watch_follows_new_directories(daemon, sandbox):
    run(daemon, sandbox, "mkdir -p /workspace/r/old")
    c, rid, hello = watch(daemon, sandbox, "/workspace/r", recursive=True)
    with c:
        assert hello["directories"] == 2
        run(daemon, sandbox, "touch /workspace/r/old/x")
        events_until(c, lambda s: any(e["name"] == "old/x" for e in s))
        run(daemon, sandbox, "mkdir /workspace/r/new")
        events_until(c, lambda s: any(e["name"] == "new" and e["is_dir"] for e in s))
        # The new directory is watched once its create event is out.
        run(daemon, sandbox, "touch /workspace/r/new/y")
        events_until(c, lambda s: any(e["name"] == "new/y" for e in s))


def test_watch_ends_when_the_client_leaves_and_the_sandbox_serves_on(daemon, sandbox):
    run(daemon, sandbox, "mkdir -p /workspace/l")
    for _ in range(20):  # more than the per-sandbox bound: each one left is released
        c, _, _ = watch(daemon, sandbox, "/workspace/l")
        c.close()
    # the releases happened (the bound is not used up)
    c, _, _ = watch(daemon, sandbox, "/workspace/l")
    c.close()
    run(daemon, sandbox, "touch /workspace/l/still-fine")


def test_watch_ends_when_the_sandbox_is_removed(daemon):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    c, rid, _ = watch(daemon, sb, "/workspace")
    with c:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)
        c.sock.settimeout(30)
        msg = c.response(rid)
        # its files went first (the directory is gone) or the sandbox did
        assert msg["result"]["ended"] in ("the directory is gone", "the sandbox is gone")


def test_watches_per_sandbox_are_bounded(daemon, sandbox):
    open_ = [watch(daemon, sandbox, "/workspace")[0] for _ in range(16)]
    try:
        with Client(daemon.socket) as c:
            with pytest.raises(RpcError) as e:
                c.call("fs.watch", sandbox_id=sandbox, path="/workspace")
            assert e.value.error["data"]["kind"] == "limit_reached"
    finally:
        for c in open_:
            c.close()


def test_recursive_watch_bounds_its_directories(daemon, sandbox):
    run(daemon, sandbox, "mkdir -p /workspace/many && cd /workspace/many && for i in $(seq 1100); do mkdir d$i; done")
    c, rid, hello = watch(daemon, sandbox, "/workspace/many", recursive=True)
    with c:
        assert hello["directories"] == 1024
        # the overflow was said before fs.watching, as the first notification
        overflow = [n["params"] for n in c.notifications if n["method"] == "fs.event"]
        assert overflow and overflow[0]["type"] == "overflow" and overflow[0]["max_directories"] == 1024
        # the bound is the sandbox's: no other watch of it gets a directory more
        with Client(daemon.socket) as other:
            with pytest.raises(RpcError) as e:
                other.call("fs.watch", sandbox_id=sandbox, path="/workspace")
            assert e.value.error["data"]["kind"] == "limit_reached"
    # released with the stream that held them
    deadline = time.monotonic() + 20
    while True:
        try:
            c, _, _ = watch(daemon, sandbox, "/workspace")
            c.close()
            break
        except AssertionError:
            assert time.monotonic() < deadline, "the directories of a closed watch were never released"
            time.sleep(0.05)


def test_bad_watch_requests_are_refused(daemon, sandbox):
    run(daemon, sandbox, "echo x > /workspace/file")
    with Client(daemon.socket) as c:
        for params, kind in [({"path": "/workspace/file"}, "invalid_params"),
                             ({"path": "/workspace/nope"}, "not_found"),
                             ({"path": 7}, "invalid_params"),
                             ({"path": "/workspace", "recursive": "yes"}, "invalid_params"),
                             ({"path": "/workspace", "extra": 1}, "invalid_params")]:
            with pytest.raises(RpcError) as e:
                c.call("fs.watch", sandbox_id=sandbox, **params)
            assert e.value.error["data"]["kind"] == kind, (params, e.value.error)
        with pytest.raises(RpcError) as e:
            c.call("fs.watch", sandbox_id="nope", path="/workspace")
        assert e.value.error["data"]["kind"] == "not_found"


def test_symlink_to_root_never_watches_the_host(daemon, sandbox):
    """A symlink to / inside the sandbox resolves to the sandbox's own root."""
    host_dir = tempfile.mkdtemp(prefix="nsbox-watch-host-", dir="/tmp")
    name = os.path.basename(host_dir)
    run(daemon, sandbox, "ln -s / /workspace/hostroot && mkdir -p /tmp/%s" % name)
    # the final symlink itself is no directory to watch
    with Client(daemon.socket) as c:
        with pytest.raises(RpcError) as e:
            c.call("fs.watch", sandbox_id=sandbox, path="/workspace/hostroot")
        assert e.value.error["data"]["kind"] == "invalid_params"
    # through it, the sandbox's /tmp/NAME is watched, never the host's
    c, rid, hello = watch(daemon, sandbox, "/workspace/hostroot/tmp/" + name)
    with c:
        assert hello["path"] == "/workspace/hostroot/tmp/" + name
        with open(os.path.join(host_dir, "on-the-host"), "w") as f:
            f.write("x")
        run(daemon, sandbox, "touch /tmp/%s/in-the-sandbox" % name)
        seen = events_until(c, lambda s: any(e["name"] == "in-the-sandbox" for e in s))
        assert all(e["name"] != "on-the-host" for e in seen)
    os.unlink(os.path.join(host_dir, "on-the-host"))
    os.rmdir(host_dir)
