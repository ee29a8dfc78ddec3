# SPDX-License-Identifier: Apache-2.0
"""Live restore for `nsboxd --rootless`: a keeper process holds the user and
mount namespaces of the first nsboxd with live restore, the next one joins
them and adopts the sandboxes the previous one left running (kill -9, or a
SIGTERM that keeps them); a stale or foreign keeper record is never joined;
without live restore no keeper is left; and the keeper ends once no sandbox
is left to keep."""
import json
import os
import signal
import subprocess
import tempfile

import pytest

from conftest import BUILD, IMAGE_DIR
from nsbox_client import Client
import rootless_launch
from test_live_restore import alive
from test_service import wait_until as service_wait_until

pytestmark = [pytest.mark.serial,
              pytest.mark.skipif(os.geteuid() != 0, reason="adds a user and an /etc/subuid range: needs root")]

NSBOXD = os.path.join(BUILD, "nsboxd")
RECORD = "rootless-keeper.json"


def wait_until(predicate, timeout=60):
    """test_service's wait, with the longer default a rootless start needs."""
    return service_wait_until(predicate, timeout=timeout)


def keepers():
    """pid -> owner uid of every process named nsboxd-keeper."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/comm" % entry) as f:
                    if f.read().strip() == "nsboxd-keeper" and alive(int(entry)):
                        found[int(entry)] = os.stat("/proc/" + entry).st_uid
            except OSError:
                pass
    return found


def user_ns(pid):
    return os.stat("/proc/%d/ns/user" % pid).st_ino


class Rootless:
    """`nsboxd --rootless` of the test user, started again and again on one state dir."""

    def __init__(self, root, live=True, grace=300):
        self.dir = root
        self.socket = os.path.join(root, "nsbox.sock")
        self.state = os.path.join(root, "state")
        self.log_path = os.path.join(root, "nsboxd.log")
        args = [NSBOXD, "--socket", self.socket, "--state-dir", self.state, "--image-dir", IMAGE_DIR,
                "--log-level", "debug", "--warm-pool", "0", "--live-restore", "1" if live else "0",
                "--live-restore-grace-seconds", str(grace)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
        self.argv, self.env, self.kw, self.cleanup = rootless_launch.wrap("rootless", root, args, env)
        self.proc = None

    def set_live(self, live):
        self.argv[self.argv.index("--live-restore") + 1] = "1" if live else "0"

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, **self.kw)

        def serving():
            try:
                with Client(self.socket, timeout=5) as c:
                    c.call("server.info")
                return True
            except OSError:
                assert self.proc.poll() is None, "nsboxd exited at start:\n" + self.log()
                return False
        assert wait_until(serving), "nsboxd did not start serving:\n" + self.log()

    def call(self, method, **params):
        with Client(self.socket, timeout=120) as c:
            return c.call(method, **params)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def record(self):
        with open(os.path.join(self.state, RECORD)) as f:
            return json.load(f)


@pytest.fixture
def root():
    d = tempfile.mkdtemp(prefix="nsbox-rlr-")
    os.chmod(d, 0o755)
    before = set(keepers())
    made = []
    yield d, made
    for svc in made:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.kill9()
    # what a failed test left: the test user's processes (its sandboxes, a keeper)
    for pid in user_processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for svc in made:
        svc.cleanup()
    subprocess.run(["rm", "-rf", d])
    assert set(keepers()) <= before


def user_processes():
    """Processes of the test user or of its subordinate ids."""
    uid = rootless_launch.ensure_rootless_user().pw_uid
    sub = range(rootless_launch.ROOTLESS_SUB, rootless_launch.ROOTLESS_SUB + rootless_launch.IDS)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                owner = os.stat("/proc/" + entry).st_uid
            except OSError:
                continue
            if owner == uid or owner in sub:
                found.append(int(entry))
    return found


@pytest.fixture(scope="module", autouse=True)
def rootless_user():
    yield
    rootless_launch.remove_rootless_user()


def daemon(root, **kw):
    d, made = root
    svc = Rootless(d, **kw)
    made.append(svc)
    return svc


JOB = "for i in $(seq 0 39); do echo line $i; sleep 0.05; done; touch /tmp/job-done; exit 3"


def test_kill_9_and_a_kept_sigterm_of_rootless_nsboxd_adopt_the_sandboxes_through_the_keeper(root):
    svc = daemon(root)
    svc.start()
    assert svc.call("server.info")["userns"] is not None
    sb = svc.call("sandbox.create")["sandbox_id"]
    assert svc.call("python.run", sandbox_id=sb, code="x = 41", stateful=True)["status"] == "ok"
    job = svc.call("sandbox.exec", sandbox_id=sb, command=JOB, background=True)["exec_id"]
    assert wait_until(lambda: "line 3\n" in svc.call("exec.output", sandbox_id=sb, exec_id=job)["stdout"])
    ns = user_ns(svc.proc.pid)

    svc.kill9()
    svc.start()
    assert "not adopted" not in svc.log() and "adopted (live restore)" in svc.log(), svc.log()[-4000:]
    assert user_ns(svc.proc.pid) == ns, "the next nsboxd did not join the keeper's user namespace"
    listed = [s["sandbox_id"] for s in svc.call("sandbox.list")["sandboxes"]]
    assert listed == [sb]
    assert wait_until(lambda: svc.call("exec.status", sandbox_id=sb, exec_id=job)["status"] == "exited")
    status = svc.call("exec.status", sandbox_id=sb, exec_id=job)
    assert status["exit_code"] == 3, status
    out = svc.call("exec.output", sandbox_id=sb, exec_id=job)["stdout"]
    assert out.endswith("line 39\n") and "line 0\n" in out
    r = svc.call("python.run", sandbox_id=sb, code="x += 1\nprint(x)", stateful=True)
    assert r["stdout"] == "42\n", r
    # one keeper, named by its record, in the namespaces both nsboxds ran in
    (keeper,) = keepers()
    assert svc.record()["pid"] == keeper and user_ns(keeper) == ns

    # a clean stop with live restore keeps it too; one keeper all along
    assert svc.terminate() == 0
    assert list(keepers()) == [keeper]
    svc.start()
    assert user_ns(svc.proc.pid) == ns
    r = svc.call("python.run", sandbox_id=sb, code="x += 1\nprint(x)", stateful=True)
    assert r["stdout"] == "43\n", r

    # nothing kept: the keeper ends with the last nsboxd, its record with it
    svc.call("sandbox.remove", sandbox_id=sb)
    assert svc.terminate() == 0
    assert wait_until(lambda: not alive(keeper) and user_processes() == []), user_processes()
    assert keepers() == {}
    assert not os.path.exists(os.path.join(svc.state, RECORD))


def test_a_stale_or_foreign_keeper_record_is_not_joined(root):
    svc = daemon(root)
    svc.start()
    (keeper,) = keepers()
    ns = user_ns(keeper)
    assert svc.terminate() == 0  # no sandbox: the keeper ends
    assert wait_until(lambda: not alive(keeper))

    # a record naming a process of the user that is no keeper (its namespaces
    # are the host's), then one naming a process of another user (root: this test)
    uid = rootless_launch.ensure_rootless_user().pw_uid
    impostor = subprocess.Popen(["sleep", "300"], user=uid)
    try:
        for pid in (impostor.pid, os.getpid()):
            with open("/proc/%d/stat" % pid) as f:
                start = int(f.read().rsplit(")", 1)[1].split()[19])
            record = {"pid": pid, "start_time": start, "user_ns": user_ns(pid),
                      "mnt_ns": os.stat("/proc/%d/ns/mnt" % pid).st_ino}
            path = os.path.join(svc.state, RECORD)
            with open(path, "w") as f:
                json.dump(record, f)
            os.chown(path, uid, uid)
            svc.start()
            assert "not joining the keeper" in svc.log()
            assert user_ns(svc.proc.pid) not in (ns, user_ns(pid))
            assert alive(impostor.pid)
            (fresh,) = keepers()
            assert svc.record()["pid"] == fresh and user_ns(fresh) == user_ns(svc.proc.pid)
            assert svc.terminate() == 0
            assert wait_until(lambda: not alive(fresh))
    finally:
        impostor.kill()
        impostor.wait()


def test_without_live_restore_no_keeper_is_left(root):
    svc = daemon(root, live=False)
    svc.start()
    sb = svc.call("sandbox.create")["sandbox_id"]
    assert keepers() == {}
    svc.kill9()
    assert keepers() == {}
    assert not os.path.exists(os.path.join(svc.state, RECORD))
    svc.start()
    assert [s["sandbox_id"] for s in svc.call("sandbox.list")["sandboxes"]] == []
    assert svc.terminate() == 0
    assert keepers() == {}
    del sb


def test_the_keeper_ends_after_the_grace_when_no_nsboxd_comes_back(root):
    svc = daemon(root, grace=4)
    svc.start()
    svc.call("sandbox.create")
    (keeper,) = keepers()
    svc.kill9()
    # the sandbox ends itself after the grace, and so does the keeper: nothing of the user is left
    assert wait_until(lambda: not alive(keeper) and user_processes() == [], timeout=120), user_processes()
    assert not os.path.exists(os.path.join(svc.state, RECORD))


def test_a_later_nsboxd_without_live_restore_joins_the_keeper_to_clean_up_and_ends_it(root):
    svc = daemon(root)
    svc.start()
    sb = svc.call("sandbox.create")["sandbox_id"]
    ns = user_ns(svc.proc.pid)
    (keeper,) = keepers()
    svc.kill9()
    svc.set_live(False)
    svc.start()
    assert user_ns(svc.proc.pid) == ns
    assert svc.call("sandbox.list")["sandboxes"] == []
    assert "sandbox %s" % sb in svc.log()
    assert svc.terminate() == 0
    assert wait_until(lambda: not alive(keeper) and user_processes() == []), user_processes()
    assert not os.path.exists(os.path.join(svc.state, RECORD))
