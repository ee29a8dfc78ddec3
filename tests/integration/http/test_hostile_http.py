# SPDX-License-Identifier: Apache-2.0
"""nsbox-http against hostile or stalled HTTP clients: they must not hold the
front's connections past its --timeout, nor reach another token's things."""
import hashlib
import json
import os
import socket
import subprocess
import time

import pytest

from conftest import ASAN, BUILD, Daemon
from test_http import TOKEN_A, TOKEN_B, Front


def threads_of(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def test_a_stream_whose_client_stops_reading_is_closed_after_the_idle_timeout(daemon):
    """A streamed call's connection is exempt from --timeout only while nsboxd is quiet; a client
    that stops taking the output is idle like any other and is closed (before: held forever, one
    of --max-connections and an nsboxd connection of its owner gone per stalled client)."""
    os.chmod(daemon.socket, 0o666)
    f = Front(daemon, "--timeout", "2")
    try:
        idle_threads = threads_of(f.proc.pid)
        body = json.dumps({"command": "head -c 30000000 /dev/zero | tr '\\0' a; sleep 600",
                           "stream": True, "timeout_seconds": 900, "max_output_bytes": 64 << 20}).encode()
        sb = f.rpc("sandbox.create")["sandbox_id"]
        body = json.dumps({"sandbox_id": sb, **json.loads(body)}).encode()
        s = socket.create_connection(("127.0.0.1", f.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"POST /v1/rpc/sandbox.exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert s.recv(1)  # the stream started; from now on this client reads nothing
        deadline = time.monotonic() + 60
        while threads_of(f.proc.pid) > idle_threads and time.monotonic() < deadline:
            time.sleep(0.5)
        held = threads_of(f.proc.pid) > idle_threads
        s.close()
        f.rpc("sandbox.remove", sandbox_id=sb, force=True)
        assert not held, "the stalled client's connection is still served after 60 s (--timeout 2)"
    finally:
        assert f.stop() == 0


def test_a_stream_quiet_for_longer_than_the_idle_timeout_still_ends_with_its_result(daemon):
    """The other side of the one above: a command that prints nothing for longer than --timeout is
    a quiet stream, not an idle client."""
    os.chmod(daemon.socket, 0o666)
    f = Front(daemon, "--timeout", "2")
    try:
        sb = f.rpc("sandbox.create")["sandbox_id"]
        status, _, body = f.request("POST", "/v1/rpc/sandbox.exec", {
            "sandbox_id": sb, "command": "echo a; sleep 6; echo b", "stream": True}, raw=True)
        lines = [json.loads(l) for l in body.decode().splitlines() if l]
        assert status == 200 and lines[-1]["result"]["exit_code"] == 0, body
        assert "".join(l["params"].get("data", "") for l in lines if l.get("method") == "exec.output") == "a\nb\n"
        f.rpc("sandbox.remove", sandbox_id=sb, force=True)
    finally:
        assert f.stop() == 0


def test_a_token_over_nsboxds_connections_per_uid_gets_429_limit_reached_not_503():
    """auth.act_as refuses a token's connection past max_connections_per_uid with limit_reached:
    the HTTP answer is that error's 429 (retry later), not 503 "nsboxd unavailable"."""
    d = Daemon(extra_args=["--max-connections-per-uid", "1"])
    f = None
    try:
        os.chmod(d.socket, 0o666)
        f = Front(d)
        sb = f.rpc("sandbox.create")["sandbox_id"]
        # one streamed call holds the token's one nsboxd connection while it runs
        c = f.connection()
        c.request("POST", "/v1/rpc/sandbox.exec", body=json.dumps(
            {"sandbox_id": sb, "command": "echo go; sleep 30", "stream": True}),
            headers={"Authorization": "Bearer " + TOKEN_A, "Content-Type": "application/json"})
        resp = c.getresponse()
        assert resp.status == 200 and resp.fp.readline()  # started
        status, r2, body = f.request("POST", "/v1/rpc/sandbox.list", {})
        assert status == 429 and body["error"]["kind"] == "limit_reached", (status, body)
        assert r2.getheader("Retry-After")
        # another token is not held back by it
        assert f.request("POST", "/v1/rpc/sandbox.list", {}, token=TOKEN_B)[0] == 200
        c.close()
    finally:
        if f is not None:
            assert f.stop() == 0
        assert d.stop() == 0


def test_a_tokens_file_owned_by_another_user_is_refused(daemon, tmp_path):
    """Whoever can write the tokens file mints owners: a file of another user (mode 600, so
    writable by that user alone) would let that user become any owner. Refused at start and on
    SIGHUP, like a group- or world-writable one."""
    path = tmp_path / "tokens"
    path.write_text("41001 %s\n" % TOKEN_A)
    os.chmod(path, 0o600)
    os.chown(path, 41001, 41001)
    p = subprocess.run([os.path.join(BUILD, "nsbox-http"), "--http", "127.0.0.1:0", "--socket", daemon.socket,
                        "--tokens", str(path)], capture_output=True, timeout=30)
    assert p.returncode != 0 and b"owned by uid 41001" in p.stderr, p.stderr


def peak_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([l for l in f if l.startswith("VmHWM")][0].split()[1])


def test_a_download_streams_the_whole_file_in_bounded_memory(daemon):
    """GET /download and /v1/files of a 70 MB file: every byte (before: cut at fs.read's 64 MiB with
    a 200), and nsbox-http holds a chunk at a time, not the file as base64, JSON and bytes at once
    (before: its peak RSS grew by about 4 times the file, so a few parallel downloads of one token
    could get the front OOM-killed for everyone)."""
    os.chmod(daemon.socket, 0o666)
    f = Front(daemon)
    try:
        status, _, out = f.request("POST", "/execute", {
            "command": "head -c 70000000 /dev/urandom > /workspace/big && sha256sum /workspace/big"})
        assert status == 200 and out["exit_code"] == 0, out
        digest = out["stdout"].split()[0]
        before = peak_rss_kb(f.proc.pid)
        for path in ("/download/big", "/v1/files/big"):
            status, _, data = f.request("GET", path, raw=True)
            assert status == 200 and len(data) == 70000000, (path, status, len(data))
            assert hashlib.sha256(data).hexdigest() == digest
        grown_mb = (peak_rss_kb(f.proc.pid) - before) / 1024
        # ASan's allocator keeps freed buffers in quarantine (256 MB by default)
        assert grown_mb < (60 + 256 if ASAN else 60), "nsbox-http's peak RSS grew by %d MB for a 70 MB download" % grown_mb
        # a small file and a missing one keep their answers
        f.request("PUT", "/v1/files/small", body=b"hello")
        assert f.request("GET", "/download/small", raw=True)[2] == b"hello"
        assert f.request("GET", "/download/missing")[0] == 404
    finally:
        assert f.stop() == 0


def test_without_tokens_a_web_page_cannot_drive_the_loopback_front(daemon):
    """Without --tokens nothing authenticates a request but its reaching the loopback port, and a
    browser reaches it for any web page: a cross-site POST (a "simple" request, no preflight) or a
    DNS-rebound name would run commands as the user. Such requests carry an Origin or a Host that
    is not a loopback address: refused (403). Programs (curl, the SDKs) send neither."""
    os.chmod(daemon.socket, 0o666)
    f = Front(daemon, tokens=False, uid=41001)
    try:
        status, _, listed = f.request("POST", "/v1/rpc/sandbox.list", {}, token=None)
        assert status == 200
        assert f.request("GET", "/health", token=None, headers={"Host": "localhost:%d" % f.port})[0] == 200
        for headers in ({"Origin": "https://evil.example"},
                        {"Origin": "null"},
                        {"Host": "rebound.evil.example:%d" % f.port},
                        {"Host": "rebound.evil.example"}):
            status, _, body = f.request("POST", "/v1/rpc/sandbox.create", b"{}", token=None,
                                        headers={"Content-Type": "text/plain", **headers})
            assert status == 403 and body["error"]["kind"] == "permission_denied", (headers, status, body)
        assert f.request("POST", "/v1/rpc/sandbox.list", {}, token=None)[2]["count"] == listed["count"]
    finally:
        assert f.stop() == 0


def test_an_upload_cut_short_leaves_the_file_it_would_replace_whole():
    """PUT /v1/files and POST /upload go to the sandbox in 4 MiB pieces: a file of more than one is
    written beside its destination and renamed over it once whole, so an upload whose client goes
    mid-way, or that the sandbox's disk cannot hold, leaves the old file as it was and nothing else
    (before: the pieces written so far were the file)."""
    d = Daemon(extra_args=["--disk-bytes", "16M"])
    f = None
    try:
        os.chmod(d.socket, 0o666)
        f = Front(d)
        assert f.request("PUT", "/v1/files/keep.txt", body=b"old")[0] == 200
        sb = f.rpc("sandbox.create", session_id="http-default")["sandbox_id"]

        def names():
            return sorted(e["name"] for e in f.rpc("fs.list", sandbox_id=sb, path="/workspace")["entries"])

        def content():
            return f.request("GET", "/v1/files/keep.txt", raw=True)[2]

        # The client goes after 6 of its 10 MiB: a first piece went to the sandbox.
        s = socket.create_connection(("127.0.0.1", f.port))
        s.sendall(b"PUT /v1/files/keep.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN_A.encode() +
                  b"\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n" % (10 << 20))
        s.sendall(os.urandom(6 << 20))
        deadline = time.monotonic() + 60
        while names() == ["keep.txt"] and content() == b"old" and time.monotonic() < deadline:
            time.sleep(0.1)
        s.close()
        deadline = time.monotonic() + 60
        while names() != ["keep.txt"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert content() == b"old" and names() == ["keep.txt"], names()

        # More than the disk holds: refused, the old file whole, nothing left beside it.
        boundary = "cutshort"
        body = (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"keep.txt\"\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n" % boundary).encode() + os.urandom(20 << 20) +
                ("\r\n--%s--\r\n" % boundary).encode())
        status, _, out = f.request("POST", "/upload", body,
                                   headers={"Content-Type": "multipart/form-data; boundary=" + boundary})
        assert status >= 400, (status, out)
        assert content() == b"old" and names() == ["keep.txt"], names()

        # One that fits, in pieces, replaces it whole.
        fits = os.urandom(9 << 20)
        assert f.request("PUT", "/v1/files/keep.txt", body=fits)[0] == 200
        assert content() == fits and names() == ["keep.txt"], names()
    finally:
        if f is not None:
            assert f.stop() == 0
        assert d.stop() == 0
