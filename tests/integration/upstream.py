# SPDX-License-Identifier: Apache-2.0
"""A test-made "upstream internet" for the network egress tests.

A network namespace `nsbox-up-<random>` joined to the host's by one veth:
203.0.113.1/24 on the host side, 203.0.113.2/24 on the upstream side, plus
the addresses the tests aim at, every one of them INSIDE that namespace:

  203.0.113.10  allowed.test      203.0.113.20  denied.test
  203.0.113.30  index.test        203.0.113.53  DNS (dnsmasq)
  198.51.100.10 net.test (routed through the veth)
  169.254.169.254 meta.test, 10.1.2.3 private.test: "leak sinks". The host
  routes these two /32s into the namespace while the fixture lives, so a
  request the proxy should have refused lands here (and is counted) instead
  of leaving the machine.

Servers, all bound to 0.0.0.0 in the namespace (so every address above
answers): HTTP on 80 and 8080, HTTPS on 443 (a CA made here with the openssl
CLI; its certificate is `ca_pem`), a PEP 503 index under /simple/ serving a
wheel built here (nsbox_nettest 1.0), a UDP echo on 9999. Each HTTP(S)
answer is JSON saying which Host, SNI, local address, port and headers it saw
(/redirect?URL answers a 302 to URL; /reflect... answers a 301 whose head
echoes the request as servers do: Location the path and query,
Access-Control-Allow-Origin the Origin, X-Seen-NAME each header); each
request and datagram is also appended to hits.jsonl, which `hits()` reads,
so a test can prove where a request landed, or that it never arrived.
ICMP echo requests received are counted by the namespace's /proc/net/snmp.

The same file is the server program: `python3 upstream.py serve DIR`, run
inside the namespace by the fixture.
"""
import base64
import fcntl
import hashlib
import io
import json
import os
import secrets
import socket
import struct
import subprocess
import sys
import threading
import time
import zipfile

HOST_ADDR = "203.0.113.1"
PEER_ADDR = "203.0.113.2"
ALLOWED = "203.0.113.10"
DENIED = "203.0.113.20"
INDEX = "203.0.113.30"
DNS = "203.0.113.53"
NET = "198.51.100.10"
META = "169.254.169.254"
PRIVATE = "10.1.2.3"
UDP_ECHO_PORT = 9999
WHEEL_NAME = "nsbox_nettest"
WHEEL_VERSION = "1.0"
NAMES = {"allowed.test": ALLOWED, "denied.test": DENIED, "index.test": INDEX, "net.test": NET,
         "meta.test": META, "private.test": PRIVATE, "host.test": HOST_ADDR, "loop.test": "127.0.0.1"}
LOCK = "/run/lock/nsbox-upstream.lock"


def run(*argv, check=True, netns=None):
    if netns is not None:
        argv = ("ip", "netns", "exec", netns) + argv
    p = subprocess.run(argv, capture_output=True, timeout=60)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(argv), p.stderr.decode(errors="replace").strip()))
    return p


# --- what the fixture builds ------------------------------------------------------


def make_wheel(name, version, module_source):
    """A minimal pure-Python wheel (no network: pip cannot build one here)."""
    dist = "%s-%s.dist-info" % (name, version)
    files = {
        "%s/__init__.py" % name: module_source,
        dist + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: nsbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += "%s,sha256=%s,%d\n" % (path, digest, len(text.encode()))
    files[dist + "/RECORD"] = record + dist + "/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return "%s-%s-py3-none-any.whl" % (name, version), buf.getvalue()


def make_index(root):
    """/simple/ (PEP 503) and /packages/ with the test wheel."""
    filename, data = make_wheel(WHEEL_NAME, WHEEL_VERSION, "ANSWER = 'from the test index'\n")
    os.makedirs(os.path.join(root, "packages"))
    with open(os.path.join(root, "packages", filename), "wb") as f:
        f.write(data)
    sha = hashlib.sha256(data).hexdigest()
    project = WHEEL_NAME.replace("_", "-")
    os.makedirs(os.path.join(root, "simple", project))
    with open(os.path.join(root, "simple", "index.html"), "w") as f:
        f.write('<!DOCTYPE html><html><body><a href="/simple/%s/">%s</a></body></html>\n' % (project, project))
    with open(os.path.join(root, "simple", project, "index.html"), "w") as f:
        f.write('<!DOCTYPE html><html><body><a href="/packages/%s#sha256=%s">%s</a></body></html>\n' %
                (filename, sha, filename))
    return filename


def make_certs(d):
    """A test CA and a server certificate for every test name and address."""
    def ossl(*args):
        run("openssl", *args)
    ca_key, ca_pem = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
    key, csr, pem = os.path.join(d, "server.key"), os.path.join(d, "server.csr"), os.path.join(d, "server.pem")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ossl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=nsbox test CA", "-keyout", ca_key, "-out", ca_pem,
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    ossl("req", "-new", *ec, "-subj", "/CN=allowed.test", "-keyout", key, "-out", csr)
    ext = os.path.join(d, "server.ext")
    sans = ["DNS:%s" % n for n in NAMES] + ["IP:%s" % a for a in (ALLOWED, DENIED, INDEX, NET)]
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" % ",".join(sans))
    ossl("x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
         "-extfile", ext, "-out", pem)
    return ca_pem, pem, key


def dns_query(name, server=DNS, qtype=1, timeout=2.0):
    """(rcode, [IPv4 addresses]) of one A query, from this process's netns."""
    qid = secrets.randbelow(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(q, (server, 53))
        while True:
            data = s.recv(4096)
            if struct.unpack(">H", data[:2])[0] == qid:
                break
    return parse_dns_answer(data)


def parse_dns_answer(data):
    flags, qd, an = struct.unpack(">HHH", data[2:8])
    off = 12

    def skip_name(off):
        while True:
            n = data[off]
            if n == 0:
                return off + 1
            if n & 0xC0 == 0xC0:
                return off + 2
            off += 1 + n
    for _ in range(qd):
        off = skip_name(off) + 4
    addrs = []
    for _ in range(an):
        off = skip_name(off)
        rtype, _, _, rdlen = struct.unpack(">HHIH", data[off:off + 10])
        off += 10
        if rtype == 1 and rdlen == 4:
            addrs.append(socket.inet_ntoa(data[off:off + 4]))
        off += rdlen
    return flags & 0xF, addrs


def icmp_ping(addr, count=3, timeout=1.0):
    """Echo requests to addr over a raw socket (else a ping socket); the number
    of replies, or -1 when no ICMP socket can be opened at all."""
    try:
        s, ip_header = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), 20
    except PermissionError:
        try:
            s, ip_header = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP), 0
        except OSError:
            return -1
    s.settimeout(timeout)
    got = 0
    with s:
        for seq in range(count):
            hdr = struct.pack(">BBHHH", 8, 0, 0, 0x4e53, seq) + b"nsboxping"
            padded = hdr + b"\0" * (len(hdr) % 2)
            csum = sum(struct.unpack(">%dH" % (len(padded) // 2), padded))
            csum = (csum >> 16) + (csum & 0xFFFF)
            csum = ~(csum + (csum >> 16)) & 0xFFFF
            try:
                s.sendto(hdr[:2] + struct.pack(">H", csum) + hdr[4:], (addr, 0))
            except OSError:
                continue
            try:
                while True:
                    data, peer = s.recvfrom(1024)
                    if peer[0] == addr and data[ip_header] == 0:
                        got += 1
                        break
            except socket.timeout:
                pass
    return got


class Upstream:
    """Build with start(), tear down with stop() (idempotent; also on a failed start)."""

    def __init__(self):
        tag = secrets.token_hex(3)
        self.netns = "nsbox-up-" + tag
        self.host_if = "tup" + tag  # never "nsb*": that prefix is nsboxd's
        self.peer_if = "tupp" + tag
        self.dir = None
        self.procs = []
        self.server = None
        self.routes = []
        self.lock = None

    # Two test runs at once would both want 203.0.113.1: the second waits.
    def _lock(self):
        os.makedirs(os.path.dirname(LOCK), exist_ok=True)
        self.lock = open(LOCK, "w")
        deadline = time.monotonic() + 900
        while True:
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError("another test run holds %s for 15 minutes" % LOCK)
                time.sleep(0.5)

    @staticmethod
    def _clean_stale():
        """Leftovers of a run that was killed (we hold the lock: nobody else's)."""
        for line in run("ip", "netns", "list", check=False).stdout.decode().splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("nsbox-up-"):
                run("ip", "netns", "del", name, check=False)
        for line in run("ip", "-o", "link", "show", check=False).stdout.decode().splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith("tup"):
                run("ip", "link", "del", name, check=False)
        for dst in (META + "/32", PRIVATE + "/32", "198.51.100.0/24"):
            out = run("ip", "route", "show", dst, check=False).stdout.decode()
            if "via " + PEER_ADDR in out:
                run("ip", "route", "del", dst, check=False)

    def start(self):
        import tempfile
        self._lock()
        try:
            self._clean_stale()
            self.dir = tempfile.mkdtemp(prefix="nsbox-upstream-")
            os.chmod(self.dir, 0o755)
            self.wheel = make_index(self.dir)
            self.ca_pem, _, _ = make_certs(self.dir)
            with open(self.ca_pem) as f:
                self.ca_text = f.read()
            ns = self.netns
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if)
            run("ip", "link", "set", self.peer_if, "netns", ns)
            run("ip", "addr", "add", HOST_ADDR + "/24", "dev", self.host_if)
            run("ip", "link", "set", self.host_if, "up")
            run("ip", "link", "set", "lo", "up", netns=ns)
            run("ip", "addr", "add", PEER_ADDR + "/24", "dev", self.peer_if, netns=ns)
            for a in (ALLOWED, DENIED, INDEX, DNS):
                run("ip", "addr", "add", a + "/32", "dev", self.peer_if, netns=ns)
            for a in (NET, META, PRIVATE):
                run("ip", "addr", "add", a + "/32", "dev", "lo", netns=ns)
            run("ip", "link", "set", self.peer_if, "up", netns=ns)
            run("ip", "route", "add", "default", "via", HOST_ADDR, netns=ns)
            for dst in (META + "/32", PRIVATE + "/32", "198.51.100.0/24"):
                run("ip", "route", "add", dst, "via", PEER_ADDR, "dev", self.host_if)
                self.routes.append(dst)
            # No reverse-path surprises for the sinks' answers.
            run("sysctl", "-qw", "net.ipv4.conf.%s.rp_filter=0" % self.host_if, check=False)
            self._start_servers()
            self._start_dnsmasq()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_servers(self):
        ready = os.path.join(self.dir, "ready")
        log = open(os.path.join(self.dir, "servers.log"), "wb")
        self.server = subprocess.Popen(["ip", "netns", "exec", self.netns, sys.executable or "/usr/bin/python3",
                                        os.path.abspath(__file__), "serve", self.dir],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(self.server)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if self.server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("upstream servers did not start:\n" + self._read("servers.log"))
            time.sleep(0.02)

    def _start_dnsmasq(self):
        args = ["dnsmasq", "--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces",
                "--listen-address=" + DNS, "--port=53", "--user=root", "--group=root",
                "--pid-file=" + os.path.join(self.dir, "dnsmasq.pid"), "--log-queries",
                "--log-facility=" + os.path.join(self.dir, "dnsmasq.log"), "--local-ttl=60"]
        args += ["--address=/%s/%s" % (n, a) for n, a in NAMES.items()]
        p = subprocess.Popen(["ip", "netns", "exec", self.netns] + args, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "dnsmasq.err"), "wb"))
        self.procs.append(p)
        deadline = time.monotonic() + 60
        while True:  # ready when it answers
            try:
                if dns_query("allowed.test", timeout=0.5) == (0, [ALLOWED]):
                    return
            except OSError:
                pass
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dnsmasq did not answer:\n" + self._read("dnsmasq.err"))

    def _read(self, name):
        try:
            with open(os.path.join(self.dir, name), "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        for dst in self.routes:
            run("ip", "route", "del", dst, check=False)
        self.routes = []
        run("ip", "link", "del", self.host_if, check=False)  # takes its peer along
        run("ip", "netns", "del", self.netns, check=False)
        if self.dir:
            import shutil
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    # --- what tests read ---

    def hits(self):
        """Every request/datagram the upstream servers saw, oldest first."""
        out = []
        for line in self._read("hits.jsonl").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def mark(self):
        return len(self.hits())

    def hits_since(self, mark):
        return self.hits()[mark:]

    def snmp(self, proto, field):
        """A counter of the upstream namespace's /proc/net/snmp (e.g. Icmp InEchos)."""
        with open("/proc/%d/net/snmp" % self.server.pid) as f:
            lines = [line.split() for line in f if line.startswith(proto + ":")]
        return int(lines[1][lines[0].index(field)])

    def ping(self, addr, count=3):
        """ICMP echo requests from this process's netns (raw socket); replies seen."""
        return icmp_ping(addr, count)

    def dns_log(self):
        return self._read("dnsmasq.log")


# --- the server program (inside the namespace) -----------------------------------


def serve(d):
    import http.server
    import socketserver
    import ssl

    hits_lock = threading.Lock()
    hits = open(os.path.join(d, "hits.jsonl"), "a")

    def record(**kw):
        kw["time"] = time.time()
        with hits_lock:
            hits.write(json.dumps(kw) + "\n")
            hits.flush()

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "server.pem"), os.path.join(d, "server.key"))

    def on_sni(sslsock, name, _ctx):
        sslsock.nsbox_sni = name
    ctx.sni_callback = on_sni

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a second request on one connection is possible
        timeout = 30

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.requests = getattr(self, "requests", 0) + 1
            local = self.connection.getsockname()
            seen = {"proto": "https" if self.server.tls else "http", "host": self.headers.get("Host"),
                    "sni": getattr(self.connection, "nsbox_sni", None), "local": local[0], "port": local[1],
                    "peer": self.client_address[0], "path": self.path, "method": self.command,
                    "request_on_connection": self.requests, "headers": dict(self.headers.items())}
            record(**seen)
            path = self.path.split("?")[0]
            if path == "/redirect":  # /redirect?URL: a 302 to URL
                self.send_response(302)
                self.send_header("Location", self.path.split("?", 1)[1])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path.startswith("/reflect"):
                body = (json.dumps(seen) + "\n").encode()
                self.send_response(301)
                self.send_header("Location", self.path)
                if self.headers.get("Origin"):
                    self.send_header("Access-Control-Allow-Origin", self.headers["Origin"])
                for k, v in self.headers.items():
                    self.send_header("X-Seen-" + k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            if path.startswith("/simple") or path.startswith("/packages/"):
                return self.file(path)
            if path.startswith("/big/"):
                body = b"x" * int(path[5:])
                return self.reply(200, body, "application/octet-stream")
            self.reply(200, (json.dumps(seen) + "\n").encode(), "application/json")

        do_POST = do_HEAD = do_PUT = do_GET

        def file(self, path):
            full = os.path.normpath(os.path.join(d, path.lstrip("/")))
            if not full.startswith(d + "/"):
                return self.reply(404, b"no\n", "text/plain")
            if os.path.isdir(full):
                full = os.path.join(full, "index.html")
            try:
                with open(full, "rb") as f:
                    body = f.read()
            except OSError:
                return self.reply(404, b"not found\n", "text/plain")
            self.reply(200, body, "text/html" if full.endswith(".html") else "application/octet-stream")

        def reply(self, code, body, ctype):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 128

        def __init__(self, port, tls):
            self.tls = tls
            super().__init__(("0.0.0.0", port), Handler)

        def finish_request(self, request, client_address):
            if self.tls:  # the handshake in the connection's thread, never in accept
                request.settimeout(30)
                try:
                    request = ctx.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError) as e:
                    local = request.getsockname()
                    record(proto="tls-failed", local=local[0], port=local[1], peer=client_address[0],
                           error=str(e))
                    return
            super().finish_request(request, client_address)

    servers = [Server(80, False), Server(8080, False), Server(443, True)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", UDP_ECHO_PORT))
    udp.setsockopt(socket.SOL_IP, 8, 1)  # IP_PKTINFO: which address it was sent to

    def echo():
        while True:
            data, anc, _, peer = udp.recvmsg(65536, 1024)
            local = None
            for level, kind, cdata in anc:
                if level == socket.SOL_IP and kind == 8:
                    local = socket.inet_ntoa(cdata[8:12])
            record(proto="udp", local=local, port=UDP_ECHO_PORT, peer=peer[0], size=len(data))
            # answered from the address it was sent to (struct in_pktinfo: ifindex, spec_dst, addr)
            pktinfo = struct.pack("=I4s4s", 0, socket.inet_aton(local or "0.0.0.0"), b"\0" * 4)
            udp.sendmsg([data], [(socket.SOL_IP, 8, pktinfo)], 0, peer)
    threading.Thread(target=echo, daemon=True).start()

    with open(os.path.join(d, "ready"), "w") as f:
        f.write("ok\n")
    threading.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "check":
        # Manual check of the fixture alone, from the host netns.
        import ssl
        import urllib.request
        u = Upstream().start()
        try:
            print("dns", dns_query("allowed.test"), dns_query("denied.test"), dns_query("nothing.test"))
            print("http", urllib.request.urlopen("http://%s/x" % ALLOWED, timeout=10).read())
            ctx = ssl.create_default_context(cafile=u.ca_pem)
            print("https", urllib.request.urlopen("https://%s/" % ALLOWED, timeout=10, context=ctx).read())
            print("hits", u.hits())
        finally:
            u.stop()
    else:
        sys.exit("usage: upstream.py serve DIR | check")
