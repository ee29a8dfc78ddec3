# SPDX-License-Identifier: Apache-2.0
"""nsboxd as a service: sd_notify, clean SIGTERM, crash recovery after kill -9
at random moments, and a corrupted state dir."""
import errno
import glob
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest
from conftest import BUILD, IMAGE_DIR
from nsbox_client import Client, RpcError

# A uid pool of its own, so that counting leftovers never sees the sandboxes
# of other daemons running on this machine at the same time.
POOL_BASE = 1_500_000_000
POOL_RANGES = 64


class Service:
    def __init__(self, root, env=None, extra_args=(), build=None, pool_base=None):
        self.root = root
        self.extra_args = list(extra_args)
        self.build = build or BUILD
        self.pool_base = pool_base or POOL_BASE
        self.socket = os.path.join(root, "nsbox.sock")
        self.state = os.path.join(root, "state")
        self.log_path = os.path.join(root, "nsboxd.log")
        self.env = env or {}
        self.proc = None

    def start(self, wait=True):
        log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NSBOX_", "NOTIFY_SOCKET", "WATCHDOG"))}
        env.update(self.env)
        self.proc = subprocess.Popen(
            [os.path.join(self.build, "nsboxd"), "--socket", self.socket, "--state-dir", self.state, "--image-dir",
             IMAGE_DIR, "--log-level", "debug", "--uid-pool-base", str(self.pool_base), "--uid-pool-ranges",
             str(POOL_RANGES), "--allow-degraded", "1", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        if wait:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with Client(self.socket, timeout=5) as c:
                        c.call("server.info")
                    return
                except OSError:
                    if self.proc.poll() is not None:
                        raise RuntimeError("nsboxd exited:\n" + self.log())
                    if time.monotonic() > deadline:
                        raise RuntimeError("nsboxd did not start:\n" + self.log())
                    time.sleep(0.02)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def call(self, method, **params):
        with Client(self.socket, timeout=60) as c:
            return c.call(method, **params)

    def terminate(self, timeout=30):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill9(self):
        self.proc.kill()
        self.proc.wait()


def pool_processes():
    """Host pids whose user namespace maps onto this test's uid pool."""
    found = []
    for path in glob.glob("/proc/[0-9]*/uid_map"):
        try:
            with open(path) as f:
                fields = f.read().split()
        except OSError:
            continue
        if len(fields) >= 3 and POOL_BASE <= int(fields[1]) < POOL_BASE + POOL_RANGES * 65664:  # ranges 65536 + 128 apart
            found.append(int(path.split("/")[2]))
    return found


def mounts_under(path):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if path in line]


def cgroups_named(ids):
    hits = []
    for base in glob.glob("/sys/fs/cgroup/*") + ["/sys/fs/cgroup"]:
        for dirpath, dirnames, _ in os.walk(base):
            for d in dirnames:
                if any(i in d for i in ids):
                    hits.append(os.path.join(dirpath, d))
    return hits


def end_services(root, started, pool_base, extra_args=()):
    """Kill what still runs of the nsboxds `started` on root; then one
    without live restore removes what they left by design (sandboxes that
    outlive their nsboxd, an egress proxy) and root goes."""
    for svc in started:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.kill9()
    sweeper = Service(root, extra_args=[*extra_args, "--warm-pool", "0"], pool_base=pool_base)
    sweeper.start()
    sweeper.terminate()
    subprocess.run(["rm", "-rf", root])


def wait_until(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def assert_nothing_left(svc, ids):
    assert wait_until(lambda: pool_processes() == []), "sandbox processes left: %s" % pool_processes()
    assert mounts_under(svc.state) == []
    sandboxes = os.path.join(svc.state, "sandboxes")
    assert not os.path.isdir(sandboxes) or os.listdir(sandboxes) == []
    assert cgroups_named(ids) == []


@pytest.fixture
def root():
    d = tempfile.mkdtemp(prefix="nsbox-svc-")
    os.chmod(d, 0o755)
    yield d
    subprocess.run(["rm", "-rf", d])


def test_ready_status_and_stopping_reach_notify_socket(root):
    addr = os.path.join(root, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(addr)
    sock.settimeout(30)
    svc = Service(root, env={"NOTIFY_SOCKET": addr})
    svc.start(wait=False)
    messages = []
    while not any("READY=1" in m for m in messages):
        messages.append(sock.recv(4096).decode())
    # READY only once the socket accepts
    assert svc.call("server.info")["version"]
    while not any("STATUS=" in m for m in messages):
        messages.append(sock.recv(4096).decode())
    assert svc.terminate() == 0
    while not any("STOPPING=1" in m for m in messages):
        messages.append(sock.recv(4096).decode())
    sock.close()


def test_sigterm_with_live_sandboxes_and_background_execs_leaves_nothing(root):
    svc = Service(root)
    svc.start()
    ids = []
    for _ in range(3):
        sb = svc.call("sandbox.create")["sandbox_id"]
        ids.append(sb)
        svc.call("sandbox.exec", sandbox_id=sb, command="sleep 300 & setsid sleep 300 & sleep 300",
                 background=True, timeout_seconds=600)
        svc.call("python.run", sandbox_id=sb, code="x = 1", stateful=True)
    # a client waiting on a long exec gets a final answer, not a hang
    result = {}

    def waiter():
        try:
            result["r"] = svc.call("sandbox.exec", sandbox_id=ids[0], argv=["sleep", "300"])
        except Exception as e:  # noqa: BLE001
            result["e"] = e

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.5)
    assert pool_processes() != []
    started = time.monotonic()
    assert svc.terminate() == 0
    assert time.monotonic() - started < 20
    t.join(10)
    assert not t.is_alive()
    assert "r" in result and result["r"]["exit_code"] is None, result
    assert not os.path.exists(svc.socket)
    assert_nothing_left(svc, ids)


def test_sighup_reloads_without_touching_sandboxes(root):
    svc = Service(root)
    svc.start()
    sb = svc.call("sandbox.create")["sandbox_id"]
    svc.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "configuration reloaded" in svc.log())
    assert svc.call("sandbox.exec", sandbox_id=sb, argv=["true"])["exit_code"] == 0
    assert svc.terminate() == 0


def activity(svc, stop):
    """Creates, execs, background execs and removes until told to stop."""
    while not stop.is_set():
        try:
            with Client(svc.socket, timeout=10) as c:
                sb = c.call("sandbox.create")["sandbox_id"]
                c.call("sandbox.exec", sandbox_id=sb, command="sleep 100 &", background=True)
                c.call("sandbox.exec", sandbox_id=sb, argv=["python3", "-c", "print(1)"])
                if random.random() < 0.5:
                    c.call("sandbox.remove", sandbox_id=sb, force=True)
        except Exception:  # noqa: BLE001 - the daemon is killed under us on purpose
            time.sleep(0.01)


@pytest.mark.slow  # about 15 s
def test_kill_9_at_random_moments_leaves_nothing_unowned(root):
    svc = Service(root)
    rng = random.Random(1234)
    for round_ in range(20):
        svc.start()
        stop = threading.Event()
        workers = [threading.Thread(target=activity, args=(svc, stop)) for _ in range(2)]
        for w in workers:
            w.start()
        time.sleep(rng.uniform(0.05, 1.5))
        svc.kill9()
        stop.set()
        for w in workers:
            w.join(30)
    # The next start cleans up whatever the last crash left; then a clean stop.
    svc.start()
    assert svc.call("sandbox.list", include_inactive=True)["count"] == 0
    assert svc.terminate() == 0
    assert_nothing_left(svc, [])
    assert "left by a previous run" in svc.log()


def test_corrupted_state_is_quarantined_and_start_succeeds(root):
    svc = Service(root)
    bad = os.path.join(svc.state, "sandboxes", "0b1d6e61-2f1e-4c4b-9a55-3f2b3b0d2c11")
    os.makedirs(bad)
    with open(os.path.join(bad, "sandbox.json"), "w") as f:
        f.write('{"sandbox_id": "0b1d6e61-2f1e-4c4b-9a55-3f2b3b0d2c11", "pid": ')  # truncated
    truncated_empty = os.path.join(svc.state, "sandboxes", "5c3a4e51-1111-4c4b-9a55-3f2b3b0d2c11")
    os.makedirs(truncated_empty)
    open(os.path.join(truncated_empty, "sandbox.json"), "w").close()
    svc.start()
    assert svc.call("sandbox.create")["state"] == "running"
    assert "quarantine" in svc.log()
    assert os.listdir(os.path.join(svc.state, "quarantine"))
    assert svc.terminate() == 0


def mount_of(path):
    """(mount point, fs type, source) of the mount path is on, from our mountinfo."""
    best = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point, rest = fields[4], line.split(" - ")[1].split()
            if (path == point or path.startswith(point.rstrip("/") + "/")) and (best is None or len(point) >= len(best[0])):
                best = (point, rest[0], rest[1])
    return best


def needs_state_dir_off_tmpfs(root):
    if mount_of(root)[1] == "tmpfs":
        pytest.skip("the state dir is on a tmpfs already: nsboxd mounts none of its own")


def test_sandbox_records_and_mount_points_live_on_a_tmpfs_of_nsboxd(root):
    """Runtime state: nothing of a create lands on the state dir's disk (on
    ext4 without a journal each new inode there cost a scan past every inode
    freed in the last minutes). The tmpfs outlives a crash, not a clean stop."""
    needs_state_dir_off_tmpfs(root)
    svc = Service(root)
    svc.start()
    try:
        sb = svc.call("sandbox.create")["sandbox_id"]
        sandboxes = os.path.join(svc.state, "sandboxes")
        assert mount_of(sandboxes) == (sandboxes, "tmpfs", "nsbox-sandboxes")
        assert mount_of(os.path.join(sandboxes, sb, "sandbox.json"))[0] == sandboxes
        svc.kill9()
        assert os.path.exists(os.path.join(sandboxes, sb, "sandbox.json"))  # for the next start to find
        svc.start()
        assert "left by a previous run" in svc.log()
    finally:
        rc = svc.terminate()
    assert rc == 0
    assert_nothing_left(svc, [sb])
    assert mount_of(sandboxes)[1] != "tmpfs"


def test_an_unreadable_record_on_the_tmpfs_is_quarantined_to_the_state_dir(root):
    needs_state_dir_off_tmpfs(root)
    svc = Service(root)
    svc.start()
    try:
        sb = svc.call("sandbox.create")["sandbox_id"]
        record = os.path.join(svc.state, "sandboxes", sb, "sandbox.json")
        assert mount_of(record)[1] == "tmpfs"  # so the move crosses file systems
        svc.kill9()
        with open(record, "w") as f:
            f.write('{"sandbox_id": "%s", "pid": ' % sb)  # torn
        svc.start()
        assert svc.call("sandbox.create")["state"] == "running"
        kept = os.listdir(os.path.join(svc.state, "quarantine"))
        assert len(kept) == 1 and kept[0].startswith(sb), kept
        with open(os.path.join(svc.state, "quarantine", kept[0], "sandbox.json")) as f:
            assert f.read() == '{"sandbox_id": "%s", "pid": ' % sb
        assert not os.path.exists(os.path.join(svc.state, "sandboxes", sb))
    finally:
        rc = svc.terminate()
    assert rc == 0
    # The torn record's init had no pid to trust: the start removed the
    # sandbox's cgroups, and killed it with them.
    assert_nothing_left(svc, [sb])


def test_a_start_that_fails_leaves_no_mount(root):
    needs_state_dir_off_tmpfs(root)
    open_dir = os.path.join(root, "open")
    os.mkdir(open_dir)
    os.chmod(open_dir, 0o777)
    svc = Service(root)
    svc.socket = os.path.join(open_dir, "nsbox.sock")
    with pytest.raises(RuntimeError, match="writable by root only"):
        svc.start()
    assert mounts_under(svc.state) == []


def test_socket_activation_serves_on_the_socket_systemd_passes(root):
    """nsboxd.socket: systemd binds the socket and hands it over (LISTEN_FDS);
    nsboxd serves on it and leaves the socket file to systemd."""
    sock = os.path.join(root, "activated.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NSBOX_", "LISTEN_", "NOTIFY_SOCKET"))}
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", sock, os.path.join(BUILD, "nsboxd"), "--socket",
         os.path.join(root, "unused.sock"), "--state-dir", os.path.join(root, "state"), "--image-dir", IMAGE_DIR,
         "--uid-pool-base", str(POOL_BASE), "--uid-pool-ranges", str(POOL_RANGES), "--warm-pool", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: os.path.exists(sock))
        with Client(sock, timeout=30) as c:  # the first connection starts nsboxd
            assert c.call("server.info")["version"]
            sb = c.call("sandbox.create")["sandbox_id"]
            assert c.call("sandbox.exec", sandbox_id=sb, argv=["echo", "hi"])["stdout"] == "hi\n"
        assert not os.path.exists(os.path.join(root, "unused.sock"))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    assert os.path.exists(sock)  # systemd's, not nsboxd's to remove


def test_a_full_disk_leaves_no_temporary_sandbox_record(root):
    """ENOSPC while a sandbox record is written (a warm-pool sandbox handed to
    its owner, or a new one) leaves no .sandbox.json.tmp behind, and creates
    work again once there is room."""
    needs_state_dir_off_tmpfs(root)
    svc = Service(root)
    svc.start()
    sandboxes = os.path.join(svc.state, "sandboxes")
    filler = os.path.join(sandboxes, "filler")
    try:
        deadline = time.monotonic() + 30
        while not glob.glob(os.path.join(sandboxes, "*", "sandbox.json")):  # the warm pool's
            assert time.monotonic() < deadline, svc.log()
            time.sleep(0.05)
        st = os.statvfs(sandboxes)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        subprocess.run(["mount", "-o", "remount,size=%d" % (used + (256 << 10)), sandboxes], check=True)
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"x" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
        answers = []
        for _ in range(3):
            try:
                answers.append(svc.call("sandbox.create")["state"])
            except RpcError as e:
                answers.append(str(e))
        assert glob.glob(os.path.join(sandboxes, "*", ".sandbox.json.tmp")) == [], answers
        assert any("No space left" in a for a in answers), answers  # a new one says why it failed
        os.unlink(filler)
        assert svc.call("sandbox.create")["state"] == "running"
    finally:
        if os.path.exists(filler):
            os.unlink(filler)
        rc = svc.terminate()
    assert rc == 0
