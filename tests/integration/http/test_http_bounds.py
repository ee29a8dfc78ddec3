# SPDX-License-Identifier: Apache-2.0
"""What a peer without a token can hold of nsbox-http: a deadline for a
request's headers with a valid token (--header-timeout), connections per client address
(--max-per-address), and a share of the connections kept from peers that have not yet
sent a valid token (--auth-reserve). Every peer here is a loopback address."""
import http.client
import socket
import threading
import time

from test_http import TOKEN_A, Front

# Headers that never end: one byte of them is sent at a time.
DRIP = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"a" * 4000


class SourcedConnection(http.client.HTTPConnection):
    """An HTTP connection from a given loopback address."""

    def __init__(self, port, source, timeout):
        super().__init__("127.0.0.1", port, timeout=timeout, source_address=(source, 0))


def request_with_token(front, source="127.0.0.1", timeout=30):
    """The status of GET /health with a valid token on a new connection (an exception if none)."""
    c = SourcedConnection(front.port, source, timeout)
    try:
        c.request("GET", "/health", headers={"Authorization": "Bearer " + TOKEN_A, "Connection": "close"})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def closed_by_peer(s):
    """True once nsbox-http has closed (or reset) s, a non-blocking socket."""
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def open_held(front, source, n, first=b"G"):
    """n connections from source that sent the start of a request and no more."""
    held = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", front.port), timeout=30, source_address=(source, 0))
        try:
            s.sendall(first)
        except OSError:
            pass  # refused or closed at once: seen by closed_by_peer
        s.setblocking(False)
        held.append(s)
    return held


class Dripper:
    """Sends the next byte of DRIP on every connection still open, every 1.5 s, until
    all are closed or `limit` seconds have passed (then it stops by itself)."""

    def __init__(self, sockets, limit=120):
        self.sockets = sockets
        self.sent = [1] * len(sockets)
        self.open = list(range(len(sockets)))
        self.limit = limit
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def open_count(self):
        with self.lock:
            return len(self.open)

    def run(self):
        end = time.monotonic() + self.limit
        while time.monotonic() < end:
            still = []
            for i in self.open:
                s = self.sockets[i]
                if closed_by_peer(s):
                    continue
                try:
                    s.sendall(DRIP[self.sent[i]:self.sent[i] + 1])
                    self.sent[i] += 1
                except OSError:
                    continue
                still.append(i)
            with self.lock:
                self.open = still
            if not still:
                return
            time.sleep(1.5)

    def close(self):
        self.limit = 0
        self.thread.join(timeout=30)
        for s in self.sockets:
            s.close()


def test_dripping_unauthenticated_connections_neither_lock_out_a_token_nor_outlive_the_header_deadline(daemon):
    # 300 connections without a token from six addresses (50 each, under the default
    # --max-per-address of 64) send one header byte each every 1.5 s: more than the 256
    # --max-connections. A token holder is answered every time meanwhile, and every
    # dripping connection is closed (by the deadline, or to admit a newer one).
    f = Front(daemon, "--header-timeout", "10")
    dripper = None
    try:
        sockets = []
        for k in range(6):
            sockets += open_held(f, "127.0.1.%d" % (k + 1), 50)
        dripper = Dripper(sockets)
        statuses = [request_with_token(f) for _ in range(15)]
        held_meanwhile = dripper.open_count()
        assert statuses == [200] * 15, statuses
        assert held_meanwhile > 0, "the dripping connections were gone before the requests: the test proves nothing"
        deadline = time.monotonic() + 120
        while dripper.open_count() > 0:
            assert time.monotonic() < deadline, "%d dripping connections still open" % dripper.open_count()
            time.sleep(0.5)
        log = f.read_log()
        assert "within --header-timeout" in log, log[-3000:]
        assert request_with_token(f) == 200
        assert f.proc.poll() is None, f.read_log()
    finally:
        if dripper is not None:
            dripper.close()
        assert f.stop() == 0


def test_one_address_holds_at_most_max_per_address_connections(daemon):
    f = Front(daemon, "--max-per-address", "4", "--header-timeout", "300")
    try:
        held = open_held(f, "127.0.0.3", 4)
        # its fifth is refused at accept, even with a valid token ...
        refused = False
        try:
            refused = request_with_token(f, source="127.0.0.3") != 200
        except (OSError, http.client.HTTPException):
            refused = True
        assert refused, "a fifth connection of one address was served"
        # ... while another address is served
        assert request_with_token(f, source="127.0.0.4") == 200
        assert all(not closed_by_peer(s) for s in held)
        # and once one of the four goes, the address is served again
        held.pop().close()
        deadline = time.monotonic() + 60
        while True:
            try:
                if request_with_token(f, source="127.0.0.3") == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass  # the closed one not yet noticed
            assert time.monotonic() < deadline, "not served after one of its connections went"
            time.sleep(0.1)
        assert "--max-per-address" in f.read_log()
        for s in held:
            s.close()
    finally:
        assert f.stop() == 0


def test_unauthenticated_connections_leave_the_reserve_and_a_token_is_served(daemon):
    # 8 connections, 2 of them out of reach of peers without a token: 10 held without
    # one (from one address, under its limit) leave room for a token holder's, which
    # closes the oldest of them to get in.
    f = Front(daemon, "--max-connections", "8", "--auth-reserve", "2", "--max-per-address", "100",
              "--header-timeout", "300")
    try:
        held = open_held(f, "127.0.0.5", 10)
        for _ in range(5):
            assert request_with_token(f) == 200
        assert "--auth-reserve" in f.read_log()
        # the held ones never hold more than 8 - 2
        deadline = time.monotonic() + 60
        while sum(not closed_by_peer(s) for s in held) > 6:
            assert time.monotonic() < deadline, "more than 6 unauthenticated connections stay open"
            time.sleep(0.1)
        for s in held:
            s.close()
    finally:
        assert f.stop() == 0


def test_a_kept_alive_connection_has_the_header_deadline_from_its_last_request(daemon):
    # After a request with a token, the connection's next request is dripped: it is
    # closed by the deadline, counted from the end of the first request.
    f = Front(daemon, "--header-timeout", "3")
    try:
        c = f.connection(timeout=30)
        c.request("GET", "/health", headers={"Authorization": "Bearer " + TOKEN_A})
        r = c.getresponse()
        r.read()
        assert r.status == 200 and not r.will_close
        s = c.sock
        s.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 60
        while not closed_by_peer(s):
            assert time.monotonic() < deadline, "a dripped second request kept the connection open"
            try:
                s.send(DRIP[sent:sent + 1])
                sent += 1
            except OSError:
                break
            time.sleep(0.5)
        c.close()
        assert "within --header-timeout" in f.read_log()
    finally:
        assert f.stop() == 0
