# SPDX-License-Identifier: Apache-2.0
"""Live restore: with live_restore on, sandboxes outlive nsboxd (kill -9, SIGTERM)
and the next nsboxd adopts them under the same ids; what it cannot trust (a
forged or stale record, a reused pid, a dir outside the state dir) it does not
adopt, and nothing is left or doubled."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest
from nsbox_client import RpcError
from test_service import POOL_RANGES, Service, cgroups_named, mounts_under, wait_until

# A pool of its own: the census below counts only this test's sandboxes.
POOL_BASE = 1_700_000_000
LIVE = ["--live-restore", "1", "--warm-pool", "0"]


def pool_processes():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/uid_map" % entry) as f:
                fields = f.read().split()
        except OSError:
            continue
        if len(fields) >= 3 and POOL_BASE <= int(fields[1]) < POOL_BASE + POOL_RANGES * 65664:
            found.append(int(entry))
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def inits():
    """Live sandbox inits of this test's pool (PID 1 of their namespace): pid -> its host uid base."""
    found = {}
    for pid in pool_processes():
        try:
            with open("/proc/%d/status" % pid) as f:
                nspid = [line for line in f if line.startswith("NSpid:")][0].split()
            if nspid[-1] == "1" and alive(pid):
                with open("/proc/%d/uid_map" % pid) as f:
                    found[pid] = int(f.read().split()[1])
        except (OSError, IndexError):
            continue
    return found


def assert_nothing_left(svc, ids):
    assert wait_until(lambda: [p for p in pool_processes() if alive(p)] == []), \
        "sandbox processes left: %s" % pool_processes()
    assert mounts_under(svc.state) == []
    sandboxes = os.path.join(svc.state, "sandboxes")
    assert not os.path.isdir(sandboxes) or os.listdir(sandboxes) == []
    assert cgroups_named(ids) == []


STARTED = []


@pytest.fixture
def root():
    d = tempfile.mkdtemp(prefix="nsbox-restore-")
    os.chmod(d, 0o755)
    yield d
    # A failed test leaves sandboxes that outlive their nsboxd by design: a
    # daemon without live restore on the same state dir removes them.
    for svc in STARTED:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.kill9()
    STARTED.clear()
    if [p for p in pool_processes() if alive(p)] or os.path.isdir(os.path.join(d, "state", "sandboxes")):
        sweeper = Service(d, extra_args=["--warm-pool", "0"], pool_base=POOL_BASE)
        sweeper.start()
        sweeper.terminate()
    subprocess.run(["rm", "-rf", d])


def service(root, *extra):
    svc = Service(root, extra_args=LIVE + list(extra), pool_base=POOL_BASE)
    STARTED.append(svc)
    return svc


def live_sandbox(root):
    """A started nsboxd with live restore on, and a sandbox of it: (the service, the sandbox's id)."""
    svc = service(root)
    svc.start()
    return svc, svc.call("sandbox.create")["sandbox_id"]


def remove_and_stop(svc, sb, force=False):
    """Removes the sandbox, stops nsboxd cleanly and checks that nothing is left of either."""
    svc.call("sandbox.remove", sandbox_id=sb, force=force)
    assert svc.terminate() == 0
    assert_nothing_left(svc, [sb])


def run(svc, sb, command):
    r = svc.call("sandbox.exec", sandbox_id=sb, command=command)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def test_kill_9_leaves_sandboxes_running_and_the_next_nsboxd_adopts_them(root):
    svc = service(root)
    svc.start()
    a = svc.call("sandbox.create", session_id="work")
    b = svc.call("sandbox.create", labels={"team": "x"})["sandbox_id"]
    run(svc, a["sandbox_id"], "echo kept > /workspace/note")
    run(svc, b, "mkdir -p /tmp/d && echo b > /tmp/d/f")
    before = inits()
    assert len(before) == 2, before
    info_before = svc.call("sandbox.info", sandbox_id=b)

    svc.kill9()
    assert all(alive(p) for p in before), "a sandbox died with nsboxd"
    svc.start()
    assert "adopted (live restore)" in svc.log()
    listed = {s["sandbox_id"]: s for s in svc.call("sandbox.list")["sandboxes"]}
    assert set(listed) == {a["sandbox_id"], b}
    assert all(s["state"] == "running" for s in listed.values())
    info_after = svc.call("sandbox.info", sandbox_id=b)
    for key in ("created_at", "image", "limits", "labels", "owner", "network"):
        assert info_after[key] == info_before[key], key
    # the same processes, the same files; the session still names its sandbox
    assert inits() == before
    assert run(svc, a["sandbox_id"], "cat /workspace/note") == "kept\n"
    assert run(svc, b, "cat /tmp/d/f") == "b\n"
    again = svc.call("sandbox.create", session_id="work")
    assert again["sandbox_id"] == a["sandbox_id"] and again["existing"] is True
    # its writable layer, kept by its init, is there to snapshot and fork
    snap = svc.call("sandbox.snapshot", sandbox_id=a["sandbox_id"])["snapshot_id"]
    fork = svc.call("sandbox.create", from_snapshot=snap)["sandbox_id"]
    assert run(svc, fork, "cat /workspace/note") == "kept\n"
    svc.call("sandbox.remove", sandbox_id=fork)

    # a new sandbox gets a uid range of its own, not one of the adopted ones
    c = svc.call("sandbox.create")["sandbox_id"]
    now = inits()
    assert len(now) == 3 and len(set(now.values())) == 3, now

    # adopted twice: an adopted sandbox outlives its second nsboxd too
    svc.kill9()
    svc.start()
    assert {s["sandbox_id"] for s in svc.call("sandbox.list")["sandboxes"]} == {a["sandbox_id"], b, c}
    assert inits() == now
    assert run(svc, c, "echo fine") == "fine\n"

    for sb in (a["sandbox_id"], b, c):
        assert svc.call("sandbox.remove", sandbox_id=sb)["removed"] is True
    assert svc.terminate() == 0
    assert_nothing_left(svc, [a["sandbox_id"], b, c, fork])


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def helpers():
    """The long-lived processes of a session: the python driver and the shell's bash."""
    found = {}
    for pid in pool_processes():
        line = cmdline(pid)
        if alive(pid) and ("driver" in line and line.startswith("python3")):
            found.setdefault("python", []).append(pid)
        elif alive(pid) and line.startswith("bash --noediting"):
            found.setdefault("bash", []).append(pid)
    return found


def read_all_output(svc, sb, exec_id):
    """Every kept byte of both streams, following exec.output's offsets; and the dropped counts."""
    out, dropped, since = {"stdout": "", "stderr": ""}, {"stdout": 0, "stderr": 0}, {"stdout": 0, "stderr": 0}
    while True:
        r = svc.call("exec.output", sandbox_id=sb, exec_id=exec_id, since=since)
        for name in out:
            out[name] += r[name]
            dropped[name] += r["dropped"][name]
        since = r["next"]
        if not r["more"]:
            return out, dropped


JOB = ("for i in $(seq 0 59); do echo line $i; sleep 0.05; done; echo done >&2; touch /tmp/job-done; "
       "exit 3")


def test_kill_9_during_a_session_keeps_variables_the_job_its_output_and_the_shell_cwd(root):
    svc, sb = live_sandbox(root)
    assert svc.call("python.run", sandbox_id=sb, code="x = 41", stateful=True)["status"] == "ok"
    svc.call("shell.create", sandbox_id=sb, name="dev")
    r = svc.call("shell.run", sandbox_id=sb, session="dev", command="mkdir -p /tmp/proj && cd /tmp/proj && V=7")
    assert r["exit_code"] == 0, r
    job = svc.call("sandbox.exec", sandbox_id=sb, command=JOB, background=True)["exec_id"]
    assert wait_until(lambda: "line 3\n" in svc.call("exec.output", sandbox_id=sb, exec_id=job)["stdout"],
                      timeout=120)
    (init,) = inits()
    kept = helpers()
    assert len(kept.get("python", [])) == 1 and len(kept.get("bash", [])) == 1, kept

    svc.kill9()
    # the job runs on and ends while no nsboxd is there: its output waits for the next one
    done = "/proc/%d/root/tmp/job-done" % init
    assert wait_until(lambda: os.path.exists(done), timeout=120), "the job did not go on without nsboxd"
    svc.start()

    status = svc.call("exec.status", sandbox_id=sb, exec_id=job)
    assert status["status"] == "exited" and status["exit_code"] == 3, status
    out, dropped = read_all_output(svc, sb, job)
    assert out["stdout"] == "".join("line %d\n" % i for i in range(60))
    assert out["stderr"] == "done\n" and dropped == {"stdout": 0, "stderr": 0}
    assert any(e["exec_id"] == job for e in svc.call("exec.list", sandbox_id=sb)["execs"])

    r = svc.call("python.run", sandbox_id=sb, code="x += 1\nprint(x)", stateful=True)
    assert r["stdout"] == "42\n", r
    r = svc.call("shell.run", sandbox_id=sb, session="dev", command="pwd; echo $V")
    assert r["stdout"] == "/tmp/proj\n7\n", r
    # the same processes, none doubled
    assert list(inits()) == [init]
    assert helpers() == kept

    remove_and_stop(svc, sb)


# Every fd of every process the sandbox's root can see: none is nsboxd's end of a
# control socket or an exec's record (they are the init's, which nothing may open).
PEEK = r"""
import os, json
seen, closed = [], []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        closed.append(int(pid))
        continue
    for fd in fds:
        try:
            seen.append(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
        except OSError:
            pass
print(json.dumps({"seen": seen, "closed": closed}))
"""


def test_the_sandbox_cannot_reach_what_its_init_keeps(root):
    svc, sb = live_sandbox(root)
    svc.call("sandbox.exec", sandbox_id=sb, command="sleep 300", background=True)
    assert svc.call("python.run", sandbox_id=sb, code="y = 1", stateful=True)["status"] == "ok"
    r = svc.call("sandbox.exec", sandbox_id=sb, argv=["python3", "-c", PEEK], user="root")
    assert r["exit_code"] == 0, r
    found = json.loads(r["stdout"])
    assert 1 in found["closed"], found  # the init's fds: not even root of the sandbox lists them
    assert not [link for link in found["seen"] if "nsbox-exec" in link], found
    svc.kill9()
    svc.start()
    r = svc.call("sandbox.exec", sandbox_id=sb, argv=["python3", "-c", PEEK], user="root")
    found = json.loads(r["stdout"])
    assert 1 in found["closed"] and not [link for link in found["seen"] if "nsbox-exec" in link], found
    remove_and_stop(svc, sb, force=True)


def test_a_flooding_job_keeps_its_head_and_tail_across_a_restart(root):
    svc, sb = live_sandbox(root)
    # 20000 numbered lines (about 110 KB) against 8 KiB of kept output: a head, a tail, a gap
    job = svc.call("sandbox.exec", sandbox_id=sb, background=True, max_output_bytes=8192,
                   command="i=0; while [ $i -lt 20000 ]; do echo $i; i=$((i+1)); "
                           "[ $i = 10000 ] && sleep 1; done")["exec_id"]
    assert wait_until(lambda: svc.call("exec.output", sandbox_id=sb, exec_id=job)["truncated"], timeout=120)
    svc.kill9()
    svc.start()
    assert wait_until(lambda: svc.call("exec.status", sandbox_id=sb, exec_id=job)["status"] == "exited",
                      timeout=120)
    out, dropped = read_all_output(svc, sb, job)
    lines = out["stdout"].splitlines()
    assert lines[:3] == ["0", "1", "2"]
    assert lines[-1] == "19999"
    assert dropped["stdout"] > 0
    # what is kept is whole: the head counts up from 0, the tail counts up to the end
    head = [int(x) for x in out["stdout"][:out["stdout"].index("\n", 100)].splitlines()]
    assert head == list(range(len(head)))
    tail = [int(x) for x in out["stdout"][-4000:].splitlines()[1:]]
    assert tail == list(range(tail[0], 20000))
    remove_and_stop(svc, sb)


SERVER = ("import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
          "s.bind(('0.0.0.0',8000));s.listen(16);print('listening',flush=True)\n"
          "while True:\n c,a=s.accept();c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: 6\\r\\n\\r\\nhello\\n');c.close()\n")


def fetch(url):
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read()
    except OSError:
        return None


def test_a_network_sandbox_gets_its_address_and_exposed_port_back(root):
    config = os.path.join(root, "nsboxd.json")
    with open(config, "w") as f:
        json.dump({"network_policies": {"closed": {"allow": ["allowed.test"]}}}, f)
    svc = service(root, "--config", config)
    svc.start()
    sb = svc.call("sandbox.create", network="closed")["sandbox_id"]
    server = svc.call("sandbox.exec", sandbox_id=sb, argv=["python3", "-c", SERVER], background=True)["exec_id"]
    assert wait_until(lambda: "listening" in svc.call("exec.output", sandbox_id=sb, exec_id=server)["stdout"],
                      timeout=60)
    exposed = svc.call("sandbox.expose", sandbox_id=sb, port=8000)
    assert fetch(exposed["url"]) == b"hello\n"
    before = svc.call("sandbox.info", sandbox_id=sb)["egress"]

    svc.kill9()
    svc.start()
    assert "network closed given back (live restore)" in svc.log()
    after = svc.call("sandbox.info", sandbox_id=sb)["egress"]
    assert after["address"] == before["address"] and after["exposed"] == before["exposed"], (before, after)
    # the same server, kept across the restart, answers on the same host port
    assert wait_until(lambda: fetch(exposed["url"]) == b"hello\n", timeout=30)
    assert svc.call("exec.status", sandbox_id=sb, exec_id=server)["status"] == "running"
    remove_and_stop(svc, sb, force=True)
    assert fetch(exposed["url"]) is None


def pause(svc, sb):
    """sandbox.pause, again if the host's freezer was too slow (a loaded machine, cgroup v1)."""
    for _ in range(5):
        try:
            return svc.call("sandbox.pause", sandbox_id=sb, force=True)
        except RpcError as e:
            if "did not freeze" not in str(e):
                raise
    raise AssertionError("sandbox %s never froze" % sb)


def same_second(a, b):
    from datetime import datetime
    parse = lambda t: datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
    return abs((parse(a) - parse(b)).total_seconds()) < 1


def test_a_pause_and_the_idle_timer_carry_on_across_restarts(root):
    svc = service(root)
    svc.start()
    paused = svc.call("sandbox.create", idle_timeout_seconds=3600)["sandbox_id"]
    idle = svc.call("sandbox.create", idle_timeout_seconds=3600)["sandbox_id"]
    svc.call("sandbox.exec", sandbox_id=paused, background=True,
             command="while true; do date +%s%N > /tmp/tick; sleep 0.05; done")
    pause(svc, paused)
    before = svc.call("sandbox.info", sandbox_id=paused)
    assert before["state"] == "paused", before

    svc.kill9()
    svc.start()
    after = svc.call("sandbox.info", sandbox_id=paused)
    assert after["state"] == "paused" and after["paused_at"] == before["paused_at"], (before, after)
    # paused_timeout counts from the first pause (to the second: nsboxd shows wall-clock
    # times from its monotonic clock, and the two drift apart by some ms)
    assert same_second(after["expires"]["at"], before["expires"]["at"]), (before, after)
    (init,) = [pid for pid in inits() if os.path.exists("/proc/%d/root/tmp/tick" % pid)]
    with open("/proc/%d/root/tmp/tick" % init) as f:
        frozen_at = f.read()
    svc.call("sandbox.resume", sandbox_id=paused)

    def ticking():
        with open("/proc/%d/root/tmp/tick" % init) as f:
            return f.read() != frozen_at
    assert wait_until(ticking), "the job did not run on after the resume"

    # a clean stop keeps the idle timer's start for the next nsboxd: a restart
    # over a second after its last activity does not move its deadline
    expires = svc.call("sandbox.info", sandbox_id=idle)["expires"]
    last_active = time.time()
    assert wait_until(lambda: time.time() > last_active + 1.5)
    assert svc.terminate() == 0
    svc.start()
    assert same_second(svc.call("sandbox.info", sandbox_id=idle)["expires"]["at"], expires["at"])
    svc.call("sandbox.remove", sandbox_id=paused, force=True)
    svc.call("sandbox.remove", sandbox_id=idle)
    assert svc.terminate() == 0
    assert_nothing_left(svc, [paused, idle])


def test_a_volume_stays_mounted_and_secrets_are_carried_over_only_as_kept(root):
    config = os.path.join(root, "nsboxd.json")
    with open(config, "w") as f:
        json.dump({"network_policies": {"closed": {"allow": ["allowed.test"]}}}, f)
    svc = service(root, "--config", config)
    svc.start()
    svc.call("volume.create", name="data", size="16M")
    with_volume = svc.call("sandbox.create", mounts=[{"volume": "data", "path": "/data"}])["sandbox_id"]
    run(svc, with_volume, "echo on-the-volume > /data/f")
    with_secret = svc.call("sandbox.create", network="closed",
                           secrets={"TOKEN": {"value": "s3cr3t", "hosts": ["allowed.test"]}})["sandbox_id"]
    # A record that says it has secrets, of a sandbox whose init keeps none.
    forged = svc.call("sandbox.create")["sandbox_id"]
    for sb in (with_volume, with_secret):  # no record holds a secret's value
        assert "s3cr3t" not in open(os.path.join(svc.state, "sandboxes", sb, "sandbox.json")).read()
    svc.kill9()
    path = os.path.join(svc.state, "sandboxes", forged, "sandbox.json")
    with open(path) as f:
        record = json.load(f)
    record["policy"]["has_secrets"] = True
    write_record(os.path.dirname(path), record)
    svc.start()
    assert run(svc, with_volume, "cat /data/f") == "on-the-volume\n"
    assert svc.call("sandbox.info", sandbox_id=with_volume)["mounts"][0]["volume"] == "data"
    with pytest.raises(RpcError):  # still in use by the adopted sandbox
        svc.call("volume.remove", name="data")
    # its init kept the secrets: adopted with them
    assert svc.call("sandbox.info", sandbox_id=with_secret)["secrets"] == ["TOKEN"]
    # none kept where its record says there are: not adopted, and the log says why
    assert "sandbox %s: not adopted: take its kept secrets from its init" % forged in svc.log()
    assert sorted(s["sandbox_id"] for s in svc.call("sandbox.list")["sandboxes"]) == sorted([with_volume, with_secret])
    svc.call("sandbox.remove", sandbox_id=with_volume)
    svc.call("sandbox.remove", sandbox_id=with_secret)
    svc.call("volume.remove", name="data")
    assert svc.terminate() == 0
    assert_nothing_left(svc, [with_volume, with_secret, forged])


def test_sigterm_with_live_restore_keeps_sandboxes_for_the_next_nsboxd(root):
    # the config file's switch: "live_restore": true
    config = os.path.join(root, "nsboxd.json")
    with open(config, "w") as f:
        json.dump({"live_restore": True}, f)
    svc = Service(root, extra_args=["--config", config, "--warm-pool", "0"], pool_base=POOL_BASE)
    STARTED.append(svc)
    svc.start()
    assert "live-restore" in svc.call("server.info")["features"]
    sb = svc.call("sandbox.create")["sandbox_id"]
    run(svc, sb, "echo 1 > /workspace/x")
    before = inits()
    assert svc.terminate() == 0
    assert "left running for the next nsboxd" in svc.log()
    assert inits() == before
    svc.start()
    assert run(svc, sb, "cat /workspace/x") == "1\n"
    remove_and_stop(svc, sb)


def test_a_sandbox_no_nsboxd_adopts_ends_itself_after_the_grace(root):
    svc = service(root, "--live-restore-grace-seconds", "1")
    svc.start()
    sb = svc.call("sandbox.create")["sandbox_id"]
    before = inits()
    assert len(before) == 1
    svc.kill9()
    assert wait_until(lambda: inits() == {}, timeout=30), "the orphaned sandbox did not end: %s" % inits()
    svc.start()
    assert svc.call("sandbox.list")["count"] == 0
    assert "not adopted" in svc.log()
    assert svc.terminate() == 0
    assert_nothing_left(svc, [sb])


def test_without_live_restore_a_restart_still_removes_what_was_left(root):
    svc = Service(root, extra_args=["--warm-pool", "0"], pool_base=POOL_BASE)
    STARTED.append(svc)
    svc.start()
    assert "live-restore" not in svc.call("server.info")["features"]
    sb = svc.call("sandbox.create")["sandbox_id"]
    svc.kill9()
    svc.start()
    assert svc.call("sandbox.list")["count"] == 0
    assert "left by a previous run" in svc.log()
    assert svc.terminate() == 0
    assert_nothing_left(svc, [sb])


def forged_record(sandbox_id, pid):
    with open("/proc/%d/stat" % pid) as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    return {"version": 1, "sandbox_id": sandbox_id, "owner": 0, "session_id": None, "pid": pid,
            "pid_start_time": start, "host_uid_base": POOL_BASE, "created_at_ms": 0, "image": "python",
            "live_restore": True, "pooled": False, "snapshot_id": "",
            "policy": {"image": "python", "seccomp_profile": "default", "network": "none",
                       "limits": {"memory_bytes": 1 << 28, "pids": 64, "cpus": 1.0, "disk_bytes": 1 << 26},
                       "idle_action": "remove"}}


def write_record(dir_path, record):
    os.makedirs(dir_path, exist_ok=True)
    with open(os.path.join(dir_path, "sandbox.json"), "w") as f:
        json.dump(record, f)


def test_forged_stale_and_outside_records_are_not_adopted(root):
    svc = service(root)
    sandboxes = os.path.join(svc.state, "sandboxes")
    # an unrelated process of the host, named with its true start time
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        reused = str(uuid.uuid4())
        write_record(os.path.join(sandboxes, reused), forged_record(reused, bystander.pid))
        # a record that names another dir than its own
        other = str(uuid.uuid4())
        write_record(os.path.join(sandboxes, other), forged_record("../../../etc", bystander.pid))
        # a sandbox dir that is a symlink to a dir outside the state dir
        outside = os.path.join(root, "outside")
        linked = str(uuid.uuid4())
        write_record(outside, forged_record(linked, bystander.pid))
        os.symlink(outside, os.path.join(sandboxes, linked))
        # a stale record: its init is long gone
        stale = str(uuid.uuid4())
        dead = subprocess.Popen(["true"])
        record = forged_record(stale, dead.pid)
        dead.wait()
        write_record(os.path.join(sandboxes, stale), record)

        svc.start()
        assert svc.call("sandbox.list")["count"] == 0
        log = svc.log()
        assert "sandbox %s: not adopted: the process its record names is not in the sandbox's cgroup" % reused in log
        assert "sandbox %s: not adopted: its init is gone" % stale in log
        assert "sandbox %s: not adopted" % linked in log
        # nothing of theirs was killed or removed: the bystander lives, the outside dir stays
        assert bystander.poll() is None and alive(bystander.pid)
        assert os.path.exists(os.path.join(outside, "sandbox.json"))
        # the start goes on: sandboxes work
        sb = svc.call("sandbox.create")["sandbox_id"]
        assert run(svc, sb, "echo ok") == "ok\n"
        svc.call("sandbox.remove", sandbox_id=sb)
        assert svc.terminate() == 0
    finally:
        bystander.kill()
        bystander.wait()


SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@pytest.fixture(scope="module")
def other_build():
    """nsboxd and nsbox-init of this source built apart with another version
    string, as an older or newer release would be."""
    out = tempfile.mkdtemp(prefix="nsbox-other-build-")
    build = os.path.join(out, "build")
    # CFLAGS from the environment: the Makefile adds its own to it
    env = dict(os.environ, CFLAGS="-O0 -DNSBOX_VERSION='\"0.0.9-other\"'")
    r = subprocess.run(["make", "-C", SOURCE, "-j2", "BUILD=" + build, os.path.join(build, "nsboxd"),
                        os.path.join(build, "nsbox-init")], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    yield build
    shutil.rmtree(out, ignore_errors=True)


def test_an_upgrade_adopts_the_sandboxes_of_the_other_build(root, other_build):
    seccomp = ["--seccomp-dir", os.path.join(SOURCE, "seccomp-profiles")]
    old = Service(root, extra_args=LIVE + seccomp, build=other_build, pool_base=POOL_BASE)
    STARTED.append(old)
    old.start()
    assert old.call("server.info")["version"] == "0.0.9-other"
    sb = old.call("sandbox.create", session_id="upgrade")["sandbox_id"]
    run(old, sb, "echo from-the-old-one > /workspace/f")
    before = inits()
    assert old.terminate() == 0  # the upgrade: stop the old one, start the new one

    new = service(root)
    new.start()
    assert new.call("server.info")["version"] != "0.0.9-other"
    assert inits() == before
    assert run(new, sb, "cat /workspace/f") == "from-the-old-one\n"
    assert new.call("sandbox.create", session_id="upgrade")["sandbox_id"] == sb
    new.call("sandbox.remove", sandbox_id=sb)
    assert new.terminate() == 0
    assert_nothing_left(new, [sb])
