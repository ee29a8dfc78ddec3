# SPDX-License-Identifier: Apache-2.0
"""What nsboxd offers the HTTP front so that it does not work around it, seen
through the front: binary files in /execute, a non-empty directory's DELETE, a lean load call, /health,
long file paths, symlinks, audit lines. (python.run's binary files are in
python/test_python_files.py, fs errors' data.errno in fs/test_fs_errno.py.)"""
import base64
import hashlib
import json
import os
import time

import pytest

from nsbox_client import RpcError
from test_http import UID_A, Front


BINARY = bytes(range(256)) * 3 + b"\xff\xfe\x00\x80 not utf-8 \xc3\x28"


@pytest.fixture(scope="module")
def front(daemon):
    os.chmod(daemon.socket, 0o666)
    f = Front(daemon)
    yield f
    assert f.proc.poll() is None, "nsbox-http died:\n" + f.read_log()
    assert f.stop() == 0


def test_seed_execute_writes_binary_files_byte_exact(front):
    code = ("import hashlib\nd = open('in/data.bin', 'rb').read()\n"
            "print(len(d), hashlib.sha256(d).hexdigest())\nopen('output/out.bin', 'wb').write(d[::-1])")
    status, _, body = front.request("POST", "/execute", {
        "code": code, "files": {"in/data.bin": base64.b64encode(BINARY).decode(), "empty.bin": ""}})
    assert status == 200 and body["status"] == "success", body
    assert body["stdout"] == "%d %s\n" % (len(BINARY), hashlib.sha256(BINARY).hexdigest())
    assert base64.b64decode(body["files_produced"]["out.bin"]) == BINARY[::-1]


def test_http_delete_of_a_non_empty_directory_is_409_busy_and_recursive_removes_it(front):
    assert front.request("PUT", "/v1/files/mend-dir/sub/a.bin", b"\x00\xff")[0] == 200
    status, _, body = front.request("DELETE", "/v1/files/mend-dir")
    assert status == 409 and body["error"]["kind"] == "busy" and "not empty" in body["error"]["message"], body
    assert front.request("DELETE", "/v1/files/mend-dir?recursive=true")[0] == 200
    assert front.request("HEAD", "/v1/files/mend-dir")[0] == 404


# --- server.load: the load without the images list ---------------------------

LOAD_FIELDS = {"version", "cgroup", "sandboxes", "max_sandboxes", "running_execs", "loadavg", "cpus",
               "memory_committed_bytes", "memory_commit_limit_bytes", "sandboxes_ending"}


def test_server_load_answers_the_load_fields_and_not_the_images(daemon, sandbox):
    load = daemon.call("server.load")
    info = daemon.call("server.info")
    assert set(load) == LOAD_FIELDS, load
    assert "images" not in load and "images" in info
    for key in LOAD_FIELDS - {"loadavg", "running_execs", "sandboxes_ending"}:
        assert load[key] == info[key], key
    assert load["sandboxes"] >= 1 and len(load["loadavg"]) == 3 and load["cpus"] >= 1
    with pytest.raises(RpcError) as e:
        daemon.call("server.load", fields="all")
    assert e.value.kind == "invalid_params"


def test_server_load_counts_removed_sandboxes_until_their_teardown_is_over(daemon):
    """A remove answers before the kernel has ended the sandbox; until then
    it is one of sandboxes_ending (what a benchmark waits for, so that one
    round's teardown is not timed in the next), and none is left after."""
    ids = [daemon.call("sandbox.create")["sandbox_id"] for _ in range(4)]
    for sid in ids:
        # 150 processes each: the kernel's ending of a sandbox then takes
        # milliseconds, far longer than the server.load asked right after.
        daemon.call("sandbox.exec", sandbox_id=sid, background=True,
                    command="for i in $(seq 150); do sleep 600 & done; wait")
    for sid in ids:
        deadline = time.monotonic() + 30
        while daemon.call("sandbox.exec", sandbox_id=sid, command="pgrep -c sleep")["stdout"].strip() != "150":
            assert time.monotonic() < deadline, "the sleeps did not all start"
            time.sleep(0.05)
    assert daemon.call("server.load")["sandboxes_ending"] == 0
    seen = []
    for sid in ids:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)
        seen.append(daemon.call("server.load")["sandboxes_ending"])
    assert all(0 <= n <= len(ids) for n in seen) and max(seen) >= 1, seen
    deadline = time.monotonic() + 30
    while daemon.call("server.load")["sandboxes_ending"] != 0:
        assert time.monotonic() < deadline, "removed sandboxes still ending after 30 s"
        time.sleep(0.01)


def test_health_and_healthz_answer_as_before(front, daemon):
    status, _, health = front.request("GET", "/health")
    assert status == 200, health
    assert set(health) == {"status", "capacity", "sandboxes", "free", "version", "cgroup", "message", "load"}
    assert set(health["load"]) == {"running_execs", "loadavg", "cpus", "memory_committed_bytes",
                                   "memory_commit_limit_bytes"}
    info = daemon.call("server.info")
    assert health["capacity"] == info["max_sandboxes"] and health["version"] == info["version"]
    assert health["cgroup"] == info["cgroup"] and health["load"]["cpus"] == info["cpus"]
    status, _, body = front.request("GET", "/healthz", token=None)
    assert status == 200 and body == {"status": "ok"}


def test_seed_execute_takes_a_long_file_path_as_fs_write_does(front):
    """/execute's paths go up to 4096 bytes (the front's check, and fs.write's): python.run, which
    now writes them, takes as long."""
    path = "/".join(["d" * 200] * 10) + "/f.txt"  # 2016 bytes
    status, _, body = front.request("POST", "/execute", {
        "code": "print(open(%r).read())" % path, "files": {path: base64.b64encode(b"deep").decode()}})
    assert status == 200 and body["stdout"] == "deep\n", body


# --- a symlink's target decides what /list, /download and /v1/files do -------------

def test_agent_sandbox_paths_that_are_symlinks_act_as_their_targets(front):
    status, _, body = front.request("POST", "/execute", {"command": (
        "mkdir -p real && echo inside > real/f.txt && ln -s real dirlink && ln -s real/f.txt filelink"
        " && ln -s nowhere dangling")})
    assert status == 200 and body["exit_code"] == 0, body
    status, _, body = front.request("GET", "/list/dirlink")
    assert status == 200 and [e["name"] for e in body] == ["f.txt"], body
    status, _, body = front.request("GET", "/v1/files/dirlink")
    assert status == 200 and [e["name"] for e in body["entries"]] == ["f.txt"], body
    status, _, body = front.request("GET", "/download/filelink", raw=True)
    assert status == 200 and body == b"inside\n"
    status, _, body = front.request("GET", "/v1/files/filelink", raw=True)
    assert status == 200 and body == b"inside\n"
    status, _, body = front.request("GET", "/list/filelink")
    assert status == 404 and body == {"message": "Path is not a directory"}, body
    assert front.request("GET", "/list/dangling")[0] == 404
    status, _, body = front.request("GET", "/exists/dangling")
    assert status == 200 and body == {"path": "dangling", "exists": True}


# --- audit lines of the execs a request starts name the acting front ---------------

def test_python_run_and_package_install_execs_are_audited_as_acted_for(front, daemon):
    sb = front.rpc("sandbox.create")["sandbox_id"]
    try:
        r = front.rpc("python.run", sandbox_id=sb, code="print(7)", stateful=False)
        assert r["stdout"] == "7\n", r
        front.rpc("package.install", sandbox_id=sb, packages=["nothing-here-x"], index_url="")
        deadline = time.monotonic() + 30
        while True:
            lines = [ln for ln in daemon.read_log().splitlines() if "audit: exec" in ln and sb in ln]
            run = [ln for ln in lines if "script.py" in ln]
            pip = [ln for ln in lines if "nothing-here-x" in ln]
            if run and pip:
                break
            assert time.monotonic() < deadline, lines
            time.sleep(0.1)
        want = "uid=%d via act_as by uid 0" % UID_A
        assert want in run[0] and want in pip[0], (run, pip)
    finally:
        front.rpc("sandbox.remove", sandbox_id=sb, force=True)
