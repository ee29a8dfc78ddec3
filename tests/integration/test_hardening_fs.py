"""Hardening of fs.*: no path a client sends and no tree the sandbox makes can
crash nsboxd or stall its single event loop (issue 15)."""
import random
import threading
import time

import pytest
from nsbox_client import RpcError


def sh(daemon, sandbox, command, **kw):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command=command, **kw)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def alive(daemon):
    assert daemon.proc.poll() is None, "nsboxd died:\n" + daemon.read_log()[-4000:]
    assert daemon.call("server.info")


def call_or_error(daemon, method, **params):
    """A result or a clear JSON-RPC error with a kind; never a dropped connection."""
    try:
        return daemon.call(method, **params), None
    except RpcError as e:
        assert e.kind, e.error
        assert e.error.get("message"), e.error
        return None, e


@pytest.mark.parametrize("method", ["fs.mkdir", "fs.write"])
def test_fs_path_with_1000_missing_components_is_refused_not_a_crash(daemon, sandbox, method):
    path = "/".join(["a"] * 1000)  # ~2 KB: within PATH_MAX, too deep to walk
    params = {"sandbox_id": sandbox, "path": path}
    if method == "fs.mkdir":
        params["parents"] = True
    else:
        params["content"] = "x"
    _, e = call_or_error(daemon, method, **params)
    alive(daemon)
    assert e is not None and e.kind == "invalid_params", e
    assert "components" in str(e)
    # the sandbox is still there and serves
    assert sh(daemon, sandbox, "echo ok") == "ok\n"


def test_fs_mkdir_parents_within_the_component_cap_creates_every_level(daemon, sandbox):
    path = "/".join(["d"] * 200)
    r = daemon.call("fs.mkdir", sandbox_id=sandbox, path=path, parents=True)
    assert r["created"] is True
    st = daemon.call("fs.stat", sandbox_id=sandbox, path=path)
    assert st["type"] == "dir" and st["uid"] == 1000
    r = daemon.call("fs.write", sandbox_id=sandbox, path="/".join(["e"] * 200) + "/f", content="hi")
    assert r["bytes_written"] == 2
    assert daemon.call("fs.read", sandbox_id=sandbox, path="/".join(["e"] * 200) + "/f")["content"] == "hi"
