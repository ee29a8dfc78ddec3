# SPDX-License-Identifier: Apache-2.0
"""Fixtures that start the real nsboxd on a private socket and state dir."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

# The tests live in one directory per area (exec/, fs/, http/, ...); the
# helpers they share (this file, nsbox_client.py, upstream.py, the launchers)
# stay here. Every area directory is on sys.path too, so that a test module
# may import another's helpers (test_http's Front, test_python's make_wheel)
# whichever file pytest collects first; module basenames are unique.
INTEGRATION = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, INTEGRATION)
for _area in sorted(os.listdir(INTEGRATION)):
    if os.path.isdir(os.path.join(INTEGRATION, _area)) and not _area.startswith(("_", ".")):
        sys.path.append(os.path.join(INTEGRATION, _area))
from nsbox_client import Client  # noqa: E402

REPO = os.path.abspath(os.path.join(INTEGRATION, "..", ".."))
BUILD = os.environ.get("NSBOX_BUILD", os.path.join(REPO, "build"))
IMAGE_DIR = os.environ.get("NSBOX_IMAGE_DIR", "/var/lib/nsbox/images")
# The sanitizer build (make asan) runs the same tests; memory bounds allow for its shadow memory.
ASAN = os.path.basename(BUILD.rstrip("/")) == "build-asan"


# Without host root (NSBOX_TEST_LAUNCHER=nested|rootless, rootless_launch.py)
# the same tests run against a daemon in a user namespace. A test whose
# claim needs host root by design (per-sandbox host uid ranges, a root-owned
# socket, clients told apart by uid, ...) says so with
# @pytest.mark.hostroot("why"): it is skipped under a launcher and runs as
# ever without one, so the marker hides nothing from a host-root run.
LAUNCHER = os.environ.get("NSBOX_TEST_LAUNCHER")


# Markers say which runs a test belongs to (see the Makefile and userns.mk):
#   core     the integration core: `make check`, and the nested and rootless
#            runs of make test-integration-userns
#   nested   run under the nested launcher as well as the core (the Kubernetes
#            case); the rootless run keeps to the core
#   slow     left out of `make check` (still in `make test`)
#   serial   counts or loads host-wide things (shared uid pools and their
#            range locks, the host's links and network namespaces, the
#            host's memory commit and file table) or measures latency, CPU or
#            timeouts: make test-integration runs these after the others, never
#            beside them, in two streams of one test at a time: those in
#            xdist_group("host-network") (they make or count links and
#            namespaces of the host: network/, cli_network, deploy) and the rest
#            (group "host", given here)
#   hostroot the claim needs host root (below)
def pytest_configure(config):
    config.addinivalue_line("markers", "hostroot(reason): the test's claim needs nsboxd to run as host root; "
                            "skipped under NSBOX_TEST_LAUNCHER")
    config.addinivalue_line("markers", "core: the integration core (make check; the nested and rootless runs)")
    config.addinivalue_line("markers", "nested: also run under the nested launcher (make test-integration-userns)")
    config.addinivalue_line("markers", "slow: left out of make check")
    config.addinivalue_line("markers", "serial: counts host-wide things or measures time: never run beside "
                            "the other tests (make test-integration runs it in a pass of its own)")


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("serial") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("host"))
        for mark in item.iter_markers("hostroot"):
            if len(mark.args) != 1 or not mark.args[0]:
                raise pytest.UsageError("%s: @pytest.mark.hostroot needs its reason" % item.nodeid)
        mark = item.get_closest_marker("hostroot")
        if LAUNCHER and mark is not None:
            item.add_marker(pytest.mark.skip(reason="needs host root (%s): %s" % (LAUNCHER, mark.args[0])))


@pytest.fixture(scope="session", autouse=True)
def rootless_user_removed_at_the_end():
    """The rootless launcher's test user and subuid range go after the run
    (session teardown: after every module's daemon has stopped)."""
    yield
    if LAUNCHER == "rootless":
        import rootless_launch
        rootless_launch.remove_rootless_user()


class Daemon:
    def __init__(self, extra_args=(), env=None, launcher=None, start_timeout=20):
        self.dir = tempfile.mkdtemp(prefix="nsbox-test-")
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "nsbox.sock")
        self.state = os.path.join(self.dir, "state")
        self.log_path = os.path.join(self.dir, "nsboxd.log")
        self.log = open(self.log_path, "wb")
        args = [os.path.join(BUILD, "nsboxd"), "--socket", self.socket, "--state-dir", self.state,
                "--image-dir", IMAGE_DIR, "--log-level", "debug", *extra_args]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
        full_env.update(env or {})
        popen_kw, self.launch_cleanup = {}, None
        self.launcher = launcher or os.environ.get("NSBOX_TEST_LAUNCHER")
        if self.launcher:  # without host root: rootless_launch.py
            import rootless_launch
            args, full_env, popen_kw, self.launch_cleanup = rootless_launch.wrap(
                self.launcher, self.dir, args, full_env)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=full_env, **popen_kw)
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                with Client(self.socket, timeout=5) as c:
                    c.call("server.info")
                break
            except OSError:
                if self.proc.poll() is not None:
                    self.abort_launch()
                    raise RuntimeError("nsboxd exited at start:\n" + self.read_log())
                if time.monotonic() > deadline:
                    self.abort_launch()
                    raise RuntimeError("nsboxd did not start serving:\n" + self.read_log())
                time.sleep(0.02)

    def abort_launch(self):
        """A daemon that failed to start goes, with what it made (a launcher's mounts
        too); the log stays. Left running, it went on making warm-pool sandboxes in
        its uid pool, which a later test using the same pool counted as its own."""
        if self.proc.poll() is None:
            self.proc.terminate()  # nsboxd removes its sandboxes on SIGTERM
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.launch_cleanup is not None:
            self.launch_cleanup()
            self.launch_cleanup = None

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def client(self, timeout=120):
        return Client(self.socket, timeout=timeout)

    def call(self, method, **params):
        with self.client() as c:
            return c.call(method, **params)

    def cli(self, *args, input=None, timeout=120):
        return subprocess.run([os.path.join(BUILD, "nsbox"), "--socket", self.socket, *args],
                              input=input, capture_output=True, timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        rc = self.proc.returncode
        self.final_log = self.read_log()  # includes what a sanitizer printed at exit
        if self.launch_cleanup is not None:
            self.launch_cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)
        # UBSan reports and carries on: under the sanitizer build, a report
        # fails the stop as a crash would.
        reports = [line for line in self.final_log.splitlines()
                   if "runtime error:" in line or "ERROR: AddressSanitizer" in line or "LeakSanitizer" in line]
        if ASAN and rc == 0 and reports:
            self.final_log += "\nsanitizer reports:\n" + "\n".join(reports[:20])
            rc = 99
        return rc


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


@pytest.fixture(scope="module")
def daemon_readable_tmp():
    """A dir for test data nsboxd reads (a seccomp dir, a config): pytest's own
    tmp dirs are host root's and 0700, which nsboxd without host root
    (NSBOX_TEST_LAUNCHER) cannot enter."""
    d = tempfile.mkdtemp(prefix="nsbox-test-data-")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def sandbox(daemon):
    """A fresh sandbox, removed afterwards."""
    sb = daemon.call("sandbox.create")
    yield sb["sandbox_id"]
    try:
        daemon.call("sandbox.remove", sandbox_id=sb["sandbox_id"], force=True)
    except Exception:
        pass


def daemon_pid(daemon):
    """nsboxd's host pid: the process started, or under the nested launcher
    (NSBOX_TEST_LAUNCHER) the nsboxd it started in a pid namespace."""
    if daemon.launcher != "nested":
        return daemon.proc.pid
    import rootless_launch
    return rootless_launch.nsboxd_pid(os.path.join(BUILD, "nsboxd"), daemon.socket)


def host_inits(daemon):
    """Host pids of this daemon's sandbox inits: children of nsboxd running
    from the sealed memfd."""
    inits = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.readlink("/proc/%s/exe" % entry)
            with open("/proc/%s/status" % entry) as f:
                status = f.read()
        except OSError:
            continue
        ppid = int(status.split("PPid:")[1].split()[0])
        if exe.startswith("/memfd:nsbox-init") and ppid == daemon_pid(daemon):
            inits.append(int(entry))
    return inits


# Shared by every attack script: raw syscalls and a JSON verdict.
PRELUDE = r'''
import ctypes, errno, json, os, signal, socket, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def arg(a):
    if isinstance(a, int):
        return ctypes.c_long(a)
    if isinstance(a, str):
        return ctypes.c_char_p(a.encode())
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    return a

def sc(nr, *args):
    """Raw syscall: (return value, errno name or None)."""
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    e = ctypes.get_errno()
    return r, (errno.errorcode.get(e, str(e)) if r == -1 else None)

def err(fn, *a, **kw):
    """Run fn; None on success, else the errno name."""
    try:
        fn(*a, **kw)
        return None
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def verdict(**kw):
    sys.stdout.flush()
    print(json.dumps(kw), flush=True)
'''


def attack(daemon, sandbox_id, code, user="sandbox", timeout=60, check_exit=True, **kw):
    """Run `code` (after PRELUDE) with python3 in the sandbox; return its verdict."""
    script = PRELUDE + textwrap.dedent(code)
    r = daemon.call("sandbox.exec", sandbox_id=sandbox_id, argv=["python3", "-c", script],
                    user=user, timeout_seconds=timeout, **kw)
    if check_exit:
        assert r["exit_code"] == 0, "attack script failed: %r" % r
    lines = r["stdout"].strip().splitlines()
    assert lines, "attack script printed no verdict: %r" % r
    return json.loads(lines[-1])


# The CLI's results (subprocess.CompletedProcess of nsbox).
def ok(r):
    assert r.returncode == 0, "rc=%d stdout=%r stderr=%r" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def one_line_error(r):
    assert r.returncode == 125, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsbox: "), r.stderr
    return lines[0]


# A sandbox directory's names, and a wait for them to be as a test wants.
def until(what, fn, seconds=30, step=0.05):
    """Poll fn (every `step` s) until it returns something true, and return
    that; fail after `seconds`, saying what it waited for."""
    deadline = time.monotonic() + seconds
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(step)


def host_children(pid):
    """Host pids of pid's children (of each of its threads); none for a process that is gone."""
    kids = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def dir_names(daemon, sid, path="/workspace"):
    return sorted(e["name"] for e in daemon.call("fs.list", sandbox_id=sid, path=path)["entries"])


def wait_for_dir(daemon, sid, done, what, path="/workspace", seconds=60):
    """Poll the directory until done(names) holds; fail after `seconds`, saying what it waited for."""
    deadline = time.monotonic() + seconds
    while True:
        now = dir_names(daemon, sid, path)
        if done(now):
            return now
        assert time.monotonic() < deadline, "%s; the directory holds %s" % (what, now)
        time.sleep(0.05)
