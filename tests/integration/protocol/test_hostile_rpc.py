# SPDX-License-Identifier: Apache-2.0
"""nsboxd's client-facing robustness: every valid request is
answered with its own id, logs cannot be forged, connections are bounded per
uid and in time, output memory is bounded globally, large requests do not
stall the loop, SIGTERM refuses new work, and one state dir has one daemon.
A connect flood by one uid does not keep root out, and clients wait out a
full listen queue for a bounded time.

Every test drives the real daemon over its real socket.
"""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import BUILD, IMAGE_DIR, REPO, Daemon  # noqa: E402
from nsbox_client import Raw  # noqa: E402

# serial: connect floods and timed limits
pytestmark = [pytest.mark.serial]

INVALID_REQUEST, INVALID_PARAMS, APP = -32600, -32602, -32000


def server_info(path, timeout=30):
    with Raw(path, timeout) as c:
        return c.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"}, timeout)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-4000:])


# --- valid JSON keeps its id --------------------------------------------------

# Each line is valid JSON (RFC 8259) that jansson cannot hold as is.
HARD_LINES = [
    (b'{"jsonrpc":"2.0","id":101,"method":"server.info","params":{"x":"a\\u0000b"}}', INVALID_PARAMS, "params.x"),
    (b'{"jsonrpc":"2.0","id":102,"method":"server.info","params":{"a":1,"a":2}}', INVALID_REQUEST, "duplicate"),
    (b'{"jsonrpc":"2.0","id":103,"method":"server.info","params":{"n":1e400}}', INVALID_REQUEST, "out of range"),
    (b'{"jsonrpc":"2.0","id":104,"method":"server.info","params":{"n":123456789012345678901234567890}}',
     INVALID_REQUEST, "out of range"),
    (b'{"jsonrpc":"2.0","id":105,"method":"server.info\\u0000.x"}', INVALID_REQUEST, "NUL"),
    (b'{"jsonrpc":"2.0","id":"s6","method":"sandbox.exec","params":{"env":{"A\\u0000B":"x"}}}',
     INVALID_PARAMS, "NUL"),
    (b'{"jsonrpc":"2.0","method":"server.info","id":107,"method":"server.info"}', INVALID_REQUEST, "duplicate"),
]


def test_an_id_that_cannot_be_held_is_answered_with_null_not_0(daemon):
    """An id no 64-bit integer or double holds is no id: the error reply
    carries null, never 0 (an id the client may be waiting on for another
    request)."""
    with Raw(daemon.socket) as c:
        c.send(b'{"jsonrpc":"2.0","id":0,"method":"server.info"}\n')
        assert c.reply()["id"] == 0
        for bad in (b'1e400', b'-123456789012345678901234567890'):
            c.send(b'{"jsonrpc":"2.0","id":' + bad + b',"method":"server.info"}\n')
            r = c.reply()
            assert r["id"] is None and r["error"]["code"] == INVALID_REQUEST, r


def test_pipelined_valid_json_is_answered_with_each_own_id(daemon):
    ids = [json.loads(line.replace(b"\\u0000", b"").replace(b"1e400", b"1")
                      .replace(b"123456789012345678901234567890", b"1"))["id"] for line, _, _ in HARD_LINES]
    with Raw(daemon.socket) as c:
        # All at once, then a normal request: a client that pipelines waits
        # for each id, so every one must come back, in order.
        c.send(b"".join(line + b"\n" for line, _, _ in HARD_LINES) +
               b'{"jsonrpc":"2.0","id":"last","method":"server.info"}\n')
        for (line, code, says), want_id in zip(HARD_LINES, ids):
            r = c.reply()
            assert r["id"] == want_id, (line, r)
            assert r["error"]["code"] == code, (line, r)
            assert says in r["error"]["message"], (line, r)
        last = c.reply()
        assert last["id"] == "last" and "result" in last


def test_text_that_is_not_json_still_gets_a_null_id(daemon):
    with Raw(daemon.socket) as c:
        for bad in (b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"n":1e400}', b'{"id":1,"id":2,',
                    b'[1e400,]'):
            r = c.call(bad + b"\n")
            assert r["id"] is None and r["error"]["code"] == -32700, (bad, r)


# --- logs cannot be forged, and a client cannot flood them -------------------------

def test_client_text_cannot_forge_a_log_line(daemon):
    forged = "x\n<3>error: FORGED by a client\r\x1b[2J\u2028<3>error: FORGED again"
    with Raw(daemon.socket) as c:
        r = c.call({"jsonrpc": "2.0", "id": 1, "method": forged})
        assert r["error"]["code"] == -32601
    time.sleep(0.2)
    lines = daemon.read_log().splitlines()
    assert not any(l.startswith("<3>error: FORGED") for l in lines), lines[-5:]
    assert any("x\\x0a<3>error: FORGED by a client\\x0d\\x1b[2J\\u{2028}" in l for l in lines), lines[-5:]


def test_refused_connects_are_logged_at_a_bounded_rate():
    d = Daemon(extra_args=["--max-connections", "1"])
    try:
        with Raw(d.socket) as held:
            assert "result" in held.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
            for _ in range(200):
                with Raw(d.socket) as extra:
                    assert extra.reply(timeout=5)["error"]["data"]["kind"] == "limit_reached"
            refused = [l for l in d.read_log().splitlines() if "refused" in l]
            assert 1 <= len(refused) <= 30, len(refused)
            time.sleep(1.5)  # the bucket refills: the next line says what was dropped
            with Raw(d.socket) as extra:
                extra.reply(timeout=5)
            time.sleep(0.2)
            assert any("lines suppressed" in l for l in d.read_log().splitlines())
    finally:
        assert d.stop() == 0


# --- connections per uid and in time ------------------------------------------------

NOBODY = 65534

CONNECT_AS = r"""
import os, socket, sys
path, uid, gid, carrier_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.setgroups([gid]); os.setgid(gid); os.setuid(uid)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
carrier = socket.socket(fileno=carrier_fd)
socket.send_fds(carrier, [b"x"], [s.fileno()])
"""


def connect_as(path, uid):
    """A connection whose peer credentials (SO_PEERCRED, taken at connect)
    are uid's: a child connects as uid and hands the socket over."""
    gid = os.stat(path).st_gid  # the socket's group may connect
    ours, theirs = socket.socketpair()
    ours.settimeout(30)
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", CONNECT_AS, path, str(uid), str(gid), str(theirs.fileno())],
                           pass_fds=[theirs.fileno()], cwd="/", capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    finally:
        ours.close()
        theirs.close()
    c = Raw.__new__(Raw)
    c.sock = socket.socket(fileno=fds[0])
    c.sock.settimeout(30)
    c.buf = b""
    return c


def test_one_uid_cannot_take_every_connection():
    d = Daemon(extra_args=["--max-connections-per-uid", "2"])
    try:
        held = [connect_as(d.socket, NOBODY) for _ in range(2)]
        for i, c in enumerate(held):
            assert c.call({"jsonrpc": "2.0", "id": i, "method": "server.info"})["id"] == i
        extra = connect_as(d.socket, NOBODY)
        r = extra.reply(timeout=5)
        assert r["error"]["data"]["kind"] == "limit_reached" and "uid 65534" in r["error"]["message"], r
        assert extra.line(timeout=5) is None
        extra.close()
        # Other users, and root (the operator), still get in.
        assert "result" in server_info(d.socket)
        other = connect_as(d.socket, NOBODY - 1)
        assert "result" in other.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
        other.close()
        # A slot freed is a slot taken again.
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:
            again = connect_as(d.socket, NOBODY)
            r = again.call({"jsonrpc": "2.0", "id": 9, "method": "server.info"})
            again.close()
            if "result" in r or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert "result" in r, r
        for c in held:
            c.close()
    finally:
        assert d.stop() == 0


# --- connect floods: before accept ------------------------------------

FLOOD = r"""
import collections, json, os, signal, socket, sys, time
path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.setgroups([gid]); os.setgid(gid); os.setuid(uid)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
held = collections.deque()
connects = full = 0
print("flooding", flush=True)
end = time.monotonic() + 60  # a bound should the test die without stopping us
while not stop and time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
    except BlockingIOError:
        full += 1
        s.close()
        continue
    connects += 1
    # Half closed at once, half held a while (past the uid's connection quota,
    # so nsboxd refuses some as it accepts them).
    if connects % 2:
        s.close()
    else:
        held.append(s)
        if len(held) > 64:
            held.popleft().close()
print(json.dumps({"connects": connects, "queue_full": full}), flush=True)
"""


def start_flood(path, uid, processes=4):
    gid = os.stat(path).st_gid  # the socket's group may connect
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", FLOOD, path, str(uid), str(gid)], cwd="/",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(processes)]
    for p in procs:
        assert p.stdout.readline().strip() == "flooding", p.stderr.read()
    return procs


def stop_flood(procs):
    stats = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        stats.append(out.strip() or err.strip())
    return stats


def operator_socket(path):
    return os.path.join(os.path.dirname(path), "operator", os.path.basename(path))


def socket_root_uses(path):
    """What root's clients connect to: the operator socket where there is one."""
    return operator_socket(path) if os.path.exists(operator_socket(path)) else path


def one_nonblocking_connect(path):
    """A Raw client from one non-blocking connect (no retry), or None on EAGAIN."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
    except BlockingIOError:
        s.close()
        return None
    s.settimeout(30)
    c = Raw.__new__(Raw)
    c.sock, c.buf = s, b""
    return c


def sdk_list(path):
    return subprocess.run(["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import nsbox; "
                           "print(len(nsbox.Sandbox.list(socket=sys.argv[2])))",
                           os.path.join(REPO, "sdk", "python"), path],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.hostroot("the flood runs as uid 65534 and root's own socket is for host root")
def test_a_connect_flood_by_one_uid_does_not_keep_root_out():
    d = Daemon()
    flood = []
    try:
        flood = start_flood(d.socket, NOBODY)
        failures = []
        for i in range(30):
            c = one_nonblocking_connect(socket_root_uses(d.socket))
            if c is None:
                failures.append((i, "connect: EAGAIN (listen queue full)"))
                continue
            with c:
                r = c.call({"jsonrpc": "2.0", "id": i, "method": "sandbox.list", "params": {}})
            if "result" not in r:
                failures.append((i, r))
            if i % 10 == 0:  # the CLI and the SDK pick root's socket themselves
                cli = d.cli("list", timeout=60)
                if cli.returncode != 0:
                    failures.append((i, "nsbox list: " + cli.stderr.decode(errors="replace")))
                sdk = sdk_list(d.socket)
                if sdk.returncode != 0:
                    failures.append((i, "Sandbox.list: " + sdk.stderr[-500:]))
        still_flooding = all(p.poll() is None for p in flood)
        stats = stop_flood(flood)
        flood = []
        assert still_flooding, stats
        assert not failures, "root's connects under a flood by uid %d (%s): %s" % (NOBODY, stats, failures)
        # The flood is over and nsboxd serves as before; its connections are gone.
        assert "result" in server_info(d.socket)
    finally:
        stop_flood(flood)
        assert d.stop() == 0


CONNECT_FAILS_AS = r"""
import os, socket, sys
path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.setgroups([gid]); os.setgid(gid); os.setuid(uid)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(path)
except OSError as e:
    print(e.errno)
else:
    print("connected")
"""


@pytest.mark.hostroot("the operator socket is host root's, and the other uid is a host uid")
def test_the_operator_socket_is_root_only(daemon):
    path = operator_socket(daemon.socket)
    dir_st, sock_st = os.lstat(os.path.dirname(path)), os.lstat(path)
    assert dir_st.st_uid == 0 and (dir_st.st_mode & 0o7777) == 0o700, oct(dir_st.st_mode)
    assert sock_st.st_uid == 0 and (sock_st.st_mode & 0o777) == 0o600, oct(sock_st.st_mode)
    with Raw(path) as c:
        assert "result" in c.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
    # Even in the shared socket's group, another uid cannot connect to it.
    gid = os.stat(daemon.socket).st_gid
    p = subprocess.run(["/usr/bin/python3", "-c", CONNECT_FAILS_AS, path, str(NOBODY), str(gid)], cwd="/",
                       capture_output=True, text=True, timeout=30)
    assert p.stdout.strip() == str(13), (p.stdout, p.stderr)  # EACCES


def full_listener(path):
    """A listening socket whose queue is full: the next non-blocking connect is EAGAIN."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(0)
    queued = []
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            return srv, queued
        queued.append(s)


CLIENTS = {
    "cli": lambda path: [os.path.join(BUILD, "nsbox"), "--socket", path, "list"],
    "sdk": lambda path: ["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import nsbox; "
                         "print(nsbox.Sandbox.list(socket=sys.argv[2]))", os.path.join(REPO, "sdk", "python"), path],
    "sdk-aio": lambda path: ["/usr/bin/python3", "-c", "import asyncio, sys; sys.path.insert(0, sys.argv[1]); "
                             "from nsbox.aio import AsyncSandbox; "
                             "print(asyncio.run(AsyncSandbox.list(socket=sys.argv[2])))",
                             os.path.join(REPO, "sdk", "python"), path],
}


def waiting_to_connect(proc):
    """True once proc has tried: it exited, or one of its threads waits in connect."""
    if proc.poll() is not None:
        return True
    try:
        for task in os.listdir("/proc/%d/task" % proc.pid):
            with open("/proc/%d/task/%s/wchan" % (proc.pid, task)) as f:
                if f.read() == "unix_wait_for_peer":
                    return True
    except OSError:
        return proc.poll() is not None
    return False


@contextlib.contextmanager
def clients_at_a_full_queue(path):
    """Every client of CLIENTS started against a listener whose queue is
    full; all ended and closed afterwards."""
    srv, queued = full_listener(path)
    procs = {name: subprocess.Popen(argv(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, argv in CLIENTS.items()}
    try:
        yield srv, queued, procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        srv.close()
        for s in queued:
            s.close()


def test_clients_wait_out_a_full_listen_queue(tmp_path):
    with clients_at_a_full_queue(str(tmp_path / "nsbox.sock")) as (srv, queued, procs):
        clients_get_in_once_there_is_room(srv, queued, procs)


def clients_get_in_once_there_is_room(srv, queued, procs):
    done = threading.Event()
    server = None
    try:
        # Each client has met the full queue before there is room.
        deadline = time.monotonic() + 30
        while not all(waiting_to_connect(p) for p in procs.values()) and time.monotonic() < deadline:
            time.sleep(0.01)

        def serve():
            for _ in queued:
                srv.accept()[0].close()
            srv.settimeout(0.2)
            while not done.is_set():
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    continue
                with conn:
                    conn.settimeout(30)
                    req = json.loads(conn.makefile("rb").readline())
                    conn.sendall(json.dumps({"jsonrpc": "2.0", "id": req["id"],
                                             "result": {"sandboxes": [], "count": 0}}).encode() + b"\n")
        server = threading.Thread(target=serve)
        server.start()
        results = {name: (p.wait(timeout=60), p.stderr.read()) for name, p in procs.items()}
        assert all(rc == 0 for rc, _ in results.values()), results
    finally:
        done.set()
        if server is not None:
            server.join()


def test_clients_give_up_on_a_listen_queue_that_stays_full_with_a_clear_error(tmp_path):
    with clients_at_a_full_queue(str(tmp_path / "nsbox.sock")) as (srv, queued, procs):
        results = {}
        for name, p in procs.items():
            try:
                _, err = p.communicate(timeout=60)  # a hang, not a slow answer, fails this
            except subprocess.TimeoutExpired:
                err = "still waiting to connect after 60 s"
            results[name] = (p.returncode, err)
        for name, (rc, err) in results.items():
            assert rc not in (0, None) and "listen queue stayed full" in err, (name, rc, err)


def test_idle_connections_are_closed_and_busy_ones_are_not():
    d = Daemon(extra_args=["--client-idle-timeout-seconds", "2"])
    try:
        idle = Raw(d.socket)
        assert "result" in idle.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
        talker = Raw(d.socket)
        start = time.monotonic()
        # The talker sends something every half second for 5 s: never idle that long.
        while time.monotonic() - start < 5:
            assert "result" in talker.call({"jsonrpc": "2.0", "id": 1, "method": "server.info"})
            time.sleep(0.5)
        assert idle.line(timeout=10) is None, "an idle connection was kept past the timeout"
        assert "result" in talker.call({"jsonrpc": "2.0", "id": 2, "method": "server.info"})
        idle.close()
        talker.close()
    finally:
        assert d.stop() == 0


def test_a_request_line_must_complete_in_time():
    d = Daemon(extra_args=["--request-timeout-seconds", "2"])
    try:
        with Raw(d.socket) as slow:
            slow.send(b'{"jsonrpc":"2.0","id":1,')
            start = time.monotonic()
            r = slow.reply(timeout=15)
            assert r["id"] is None and r["error"]["code"] == INVALID_REQUEST, r
            assert "request_timeout_seconds" in r["error"]["message"]
            assert slow.line(timeout=10) is None
            assert time.monotonic() - start >= 1.5
        # Complete lines are not on that clock, however long the connection lives.
        with Raw(d.socket) as c:
            for i in range(4):
                assert c.call({"jsonrpc": "2.0", "id": i, "method": "server.info"})["id"] == i
                time.sleep(1)
    finally:
        assert d.stop() == 0


# --- output memory is bounded for all clients together ----------------------------

def test_clients_that_do_not_read_are_dropped_and_a_reading_one_is_not():
    d = Daemon(extra_args=["--max-buffer-bytes", str(8 << 20)])
    try:
        sb = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.exec", sandbox_id=sb, command="head -c 1000000 /dev/zero | tr '\\0' a > /workspace/big")
        read = lambda i: ({"jsonrpc": "2.0", "id": i, "method": "fs.read",
                           "params": {"sandbox_id": sb, "path": "/workspace/big"}})
        sleepers = [Raw(d.socket) for _ in range(2)]
        for s in sleepers:
            # Far more replies than the budget holds, never read.
            s.send(b"".join((json.dumps(read(i)) + "\n").encode() for i in range(40)))
        reader = Raw(d.socket)
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < 12:
            r = reader.call(read(n), timeout=30)
            assert r["id"] == n and len(r["result"]["content"]) == 1000000, r.get("error")
            n += 1
        log = d.read_log()
        assert log.count("does not read its output") >= 2, log[-3000:]
        for s in sleepers:
            s.sock.settimeout(10)
            got = 0
            while True:  # what was in the socket buffers, then the end
                try:
                    chunk = s.sock.recv(1 << 20)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    break
                got += len(chunk)
            assert got < 40 * 1000000
            s.close()
        reader.close()
    finally:
        assert d.stop() == 0


# --- large requests are parsed off the loop ----------------------------------------

def test_large_requests_do_not_stall_other_clients(daemon):
    junk = b"a" * (60 << 20)
    big = [b'{"jsonrpc":"2.0","id":%d,"method":"server.info","params":{"unknown_field":"' % i + junk + b'"}}\n'
           for i in range(4)]
    done = threading.Event()
    answers = []

    def hammer():
        with Raw(daemon.socket, timeout=120) as c:
            for line in big:
                c.send(line)
            for _ in big:
                answers.append(c.reply(timeout=120))
        done.set()

    t = threading.Thread(target=hammer)
    t.start()
    worst = 0.0
    with Raw(daemon.socket) as c:
        i = 0
        while not done.is_set():
            t0 = time.monotonic()
            assert "result" in c.call({"jsonrpc": "2.0", "id": i, "method": "server.info"})
            worst = max(worst, time.monotonic() - t0)
            i += 1
            time.sleep(0.02)
    t.join()
    assert [a["id"] for a in answers] == [0, 1, 2, 3]
    assert all(a["error"]["code"] == INVALID_PARAMS for a in answers)
    print("worst server.info latency while 4 x 60 MB requests were parsed: %.3f s" % worst)
    assert worst < 0.5, "server.info took %.2f s while 60 MB requests were parsed" % worst


def test_a_large_request_then_half_close_is_still_answered(daemon):
    with Raw(daemon.socket, timeout=60) as c:
        c.send(b'{"jsonrpc":"2.0","id":"big","method":"server.info","params":{"x":"' + b"a" * (8 << 20) + b'"}}')  # no final newline
        c.sock.shutdown(socket.SHUT_WR)
        r = c.reply(timeout=60)
        assert r["id"] == "big" and r["error"]["code"] == INVALID_PARAMS, r
        assert c.line(timeout=10) is None


# --- SIGTERM -------------------------------------------------------------------------

def leftover_cgroups(state_dir):
    # manager/cgroup.c names the parent nsbox-<FNV-1a of the state dir>.
    h = 2166136261
    for b in state_dir.encode():
        h = ((h ^ b) * 16777619) & 0xffffffff
    name = "nsbox-%08x" % h
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if os.path.basename(root) == name:
            found += [os.path.join(root, x) for x in dirs]
            dirs[:] = []
    return found


def test_after_sigterm_new_requests_are_refused_and_nothing_is_left():
    d = Daemon()
    state = d.state
    answers = []
    stop = threading.Event()

    def hammer():
        with Raw(d.socket, timeout=60) as c:
            i = 0
            while not stop.is_set():
                try:
                    c.send((json.dumps({"jsonrpc": "2.0", "id": i, "method": "sandbox.create"}) + "\n").encode())
                    line = c.line(timeout=60)
                except OSError:
                    break
                if line is None:
                    break
                answers.append(json.loads(line))
                i += 1

    t = threading.Thread(target=hammer)
    t.start()
    while len(answers) < 5:
        time.sleep(0.05)
    d.proc.send_signal(signal.SIGTERM)
    rc = d.proc.wait(timeout=60)
    stop.set()
    t.join(timeout=60)
    log = d.read_log()
    sandboxes_left = os.listdir(os.path.join(state, "sandboxes"))
    cgroups_left = leftover_cgroups(state)
    d.stop()
    kinds = [(a.get("error") or {}).get("data", {}).get("kind", "created" if "result" in a else "?")
             for a in answers]
    first = kinds.index("unavailable") if "unavailable" in kinds else None
    assert first is not None, kinds
    assert all(k == "unavailable" for k in kinds[first:]), kinds
    assert "shutting down" in answers[first]["error"]["message"]
    assert answers[first]["error"]["code"] == APP
    assert sandboxes_left == [] and cgroups_left == [], (sandboxes_left, cgroups_left)
    assert rc == 0, log[-3000:]


def test_exit_is_non_zero_when_a_sandbox_is_left_behind():
    # A sandbox frozen by the operator (freezer cgroup) cannot take its
    # SIGKILL: it outlives the shutdown grace, and nsboxd must say so.
    freezer = "/sys/fs/cgroup/freezer"
    if not os.path.exists(os.path.join(freezer, "cgroup.procs")):
        pytest.skip("no v1 freezer hierarchy")
    d = Daemon(extra_args=["--warm-pool", "0"])
    frozen = os.path.join(freezer, "nsbox-test-frozen-%d" % os.getpid())
    os.mkdir(frozen)
    try:
        sb = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.exec", sandbox_id=sb, command="true")
        pids = subprocess.run(["pgrep", "-P", str(d.proc.pid)], capture_output=True, text=True).stdout.split()
        tree = set(pids)
        for pid in pids:
            tree |= set(subprocess.run(["pgrep", "-P", pid], capture_output=True, text=True).stdout.split())
        for pid in tree:
            with open(os.path.join(frozen, "cgroup.procs"), "w") as f:
                f.write(pid)
        with open(os.path.join(frozen, "freezer.state"), "w") as f:
            f.write("FROZEN")
        d.proc.send_signal(signal.SIGTERM)
        rc = d.proc.wait(timeout=60)
        assert rc != 0
        assert "left behind" in d.read_log()
    finally:
        with open(os.path.join(frozen, "freezer.state"), "w") as f:
            f.write("THAWED")
        time.sleep(0.5)
        d.stop()
        for _ in range(50):
            try:
                os.rmdir(frozen)
                break
            except OSError:
                time.sleep(0.1)


# --- one daemon per state dir ----------------------------------------------------------

def test_a_second_daemon_on_the_same_state_dir_refuses_to_start(daemon):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    other_socket = os.path.join(daemon.dir, "second.sock")
    p = subprocess.run([os.path.join(BUILD, "nsboxd"), "--socket", other_socket, "--state-dir", daemon.state,
                        "--image-dir", IMAGE_DIR], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "in use by another nsboxd (pid %d)" % daemon.proc.pid in p.stderr, p.stderr
    assert not os.path.exists(other_socket)
    r = daemon.call("sandbox.exec", sandbox_id=sb, command="echo alive")
    assert r["stdout"] == "alive\n"
    daemon.call("sandbox.remove", sandbox_id=sb)
