# SPDX-License-Identifier: Apache-2.0
"""Resource limits: one sandbox's abuse never hurts the host, the daemon or
another sandbox. Real cgroups (v1 on a hybrid host, v2 where delegated), real
OOM kills, real fork bombs; after every test no cgroup directory is left."""
import os
import shutil
import subprocess
import tempfile
import threading
import time

import pytest
from conftest import BUILD, IMAGE_DIR, Daemon

# serial: cgroups left behind are looked for host-wide; CPU shares and OOM are measured
pytestmark = [pytest.mark.serial]

MiB = 1 << 20
SHM = 64 * MiB  # a sandbox's /dev/shm (runtime/sandbox_limits.h)
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")


def cgroup_parent_name(state_dir):
    """nsboxd's per-daemon cgroup dir: nsbox-<FNV-1a of the state dir>."""
    h = 2166136261
    for b in state_dir.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return "nsbox-%08x" % h


def mounts():
    """{controller or "": mount point}, as nsboxd finds them."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            fstype, _source, opts = post.split()[:3]
            mroot, mpoint = pre.split()[3:5]
            if fstype == "cgroup2":
                found.setdefault("", (mpoint, mroot))
            elif fstype == "cgroup":
                for o in opts.split(","):
                    found.setdefault(o, (mpoint, mroot))
    return found


def own_paths(pid):
    paths = {}
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f:
            num, ctrls, path = line.rstrip("\n").split(":", 2)
            if num == "0" and ctrls == "":
                paths[""] = path
            for c in ctrls.split(","):
                if c:
                    paths[c] = path
    return paths


def cgroup_dirs(daemon, mode):
    """The parent dirs of this daemon's sandbox cgroups, one per hierarchy."""
    m = mounts()
    name = cgroup_parent_name(daemon.state)
    if mode == "v2":
        mpoint, mroot = m[""]
        own = own_paths(daemon.proc.pid)[""]
        # nsboxd moved itself into nsboxd-<hash> inside the cgroup it was started in
        own = os.path.dirname(own) if os.path.basename(own).startswith("nsboxd-") else own
        keys = [("", own)]
    else:
        own = own_paths(daemon.proc.pid)
        keys = [(c, own[c]) for c in V1_CONTROLLERS if c in m and c in own]
    dirs = {}
    for key, path in keys:
        mpoint, mroot = m[key]
        rel = path[len(mroot):] if mroot != "/" and path.startswith(mroot) else path
        dirs[key or "unified"] = os.path.join(mpoint, rel.lstrip("/"), name)
    return dirs


def subdirs(path):
    try:
        return sorted(e.name for e in os.scandir(path) if e.is_dir())
    except FileNotFoundError:
        return []


# No warm pool: its hidden sandboxes would blur the exact cgroup accounting.
NO_WARM_POOL = ("--warm-pool", "0")


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(extra_args=NO_WARM_POOL)
    yield d
    dirs = cgroup_dirs(d, d.call("server.info")["cgroup"])
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-4000:])
    assert all(not os.path.exists(p) for p in dirs.values()), "nsboxd left %s behind" % dirs


@pytest.fixture(scope="module")
def mode(daemon):
    return daemon.call("server.info")["cgroup"]


@pytest.fixture(autouse=True)
def no_cgroup_left_behind(daemon, mode):
    """Every sandbox of a test is removed by then: no cgroup dir may remain
    (once the kernel has ended their processes, which a remove's answer
    does not wait for)."""
    yield
    live = {s["sandbox_id"] for s in daemon.call("sandbox.list", include_inactive=True)["sandboxes"]}

    def left_behind():
        return {parent: [d for d in subdirs(parent) if d not in live]
                for parent in cgroup_dirs(daemon, mode).values() if [d for d in subdirs(parent) if d not in live]}
    deadline = time.monotonic() + 10
    while left_behind():
        assert time.monotonic() < deadline, "cgroup dirs left behind: %s" % left_behind()
        time.sleep(0.02)


@pytest.fixture
def make_sandbox(daemon):
    created = []

    def make(**limits):
        sb = daemon.call("sandbox.create", limits=limits)["sandbox_id"]
        created.append(sb)
        return sb

    yield make
    for sb in created:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


def run(daemon, sb, command, timeout=60, **kw):
    with daemon.client(timeout=timeout + 60) as c:
        return c.call("sandbox.exec", sandbox_id=sb, command=command, timeout_seconds=timeout, **kw)


def stats(daemon, sb):
    return daemon.call("sandbox.info", sandbox_id=sb)["stats"]


# Right after an exec a sandbox runs its init and the slot for its next exec:
# a supervisor and the child it made ahead, which waits for the request (and
# retires after seconds without one, runtime/supervisor.c).
IDLE_PIDS = 3


def wait_for_pids(daemon, sb, want, timeout=5):
    """pids.current once it has held still for a moment: it counts zombies
    until they are reaped, and the slot for the next exec starts (two
    processes) while the last exec's supervisor is still ending its tree."""
    deadline = time.monotonic() + timeout
    steady = 0
    while time.monotonic() < deadline:
        steady = steady + 1 if stats(daemon, sb)["pids"] == want else 0
        if steady == 4:
            break
        time.sleep(0.05)
    return stats(daemon, sb)["pids"]


def test_server_info_says_which_cgroup_mode_limits_are_enforced_with(daemon, mode):
    info = daemon.call("server.info")
    unified_has_memory = False
    if "" in mounts():
        mpoint, _ = mounts()[""]
        try:
            with open(os.path.join(mpoint, "cgroup.controllers")) as f:
                unified_has_memory = "memory" in f.read().split()
        except FileNotFoundError:
            pass
    assert info["cgroup"] == ("v2" if unified_has_memory else "v1")
    assert "limits-not-enforced" not in info["features"]
    dirs = cgroup_dirs(daemon, mode)
    assert dirs and all(os.path.isdir(d) for d in dirs.values()), dirs


def test_sandbox_cgroup_carries_the_requested_limits(daemon, mode, make_sandbox):
    sb = make_sandbox(memory_bytes=100 * MiB, pids=77, cpus=0.5)
    dirs = {k: os.path.join(v, sb) for k, v in cgroup_dirs(daemon, mode).items()}

    def read(key, name):
        with open(os.path.join(dirs[key], name)) as f:
            return f.read().strip()

    # the memory cgroup holds the processes' memory_bytes and the files kept
    # in RAM: the disk (a tmpfs of disk_bytes, 512 MiB by default) and /dev/shm
    ram = 100 * MiB + 512 * MiB + SHM
    if mode == "v2":
        assert read("unified", "memory.max") == str(ram)
        assert read("unified", "pids.max") == "77"
        assert read("unified", "cpu.max") == "50000 100000"
        if os.path.exists(os.path.join(dirs["unified"], "memory.swap.max")):
            assert read("unified", "memory.swap.max") == "0"
    else:
        assert read("memory", "memory.limit_in_bytes") == str(ram)
        if os.path.exists(os.path.join(dirs["memory"], "memory.memsw.limit_in_bytes")):
            assert read("memory", "memory.memsw.limit_in_bytes") == str(ram)
        assert read("pids", "pids.max") == "77"
        assert read("cpu", "cpu.cfs_quota_us") == "50000"
        assert read("cpu", "cpu.cfs_period_us") == "100000"
    # the init itself is inside (v2: in the sandbox's init leaf)
    key = "unified" if mode == "v2" else "memory"
    assert read(key, ("init/" if mode == "v2" else "") + "cgroup.procs").split()


def test_memory_bomb_is_oom_killed_and_reported_while_the_daemon_lives(daemon, make_sandbox):
    sb = make_sandbox(memory_bytes=64 * MiB)
    r = run(daemon, sb, "exec python3 -c 'x = []\nwhile True: x.append(bytearray(8 << 20))'")
    assert r["oom_killed"] is True, r
    assert r["signal"] == 9 and r["exit_code"] is None, r
    s = stats(daemon, sb)
    assert s["oom_kills"] >= 1
    # the memory cgroup holds the processes' 64 MiB and the files in RAM
    budgets = daemon.call("sandbox.info", sandbox_id=sb)["budgets"]
    assert budgets["cgroup_memory_bytes"] == 64 * MiB + 512 * MiB + SHM
    assert s["memory_peak_bytes"] is not None and s["memory_peak_bytes"] <= budgets["cgroup_memory_bytes"]
    # the daemon and the sandbox live on; the next exec is not blamed
    assert daemon.call("server.info")["version"]
    r = run(daemon, sb, "echo alive")
    assert r["stdout"] == "alive\n" and r["oom_killed"] is False


def fill(daemon, sb, path, user="sandbox"):
    """Write zeros to path until it fails: the exec's result and the errno."""
    return run(daemon, sb, "python3 -c \"\n"
               "import errno\n"
               "try:\n"
               "    with open('%s', 'wb') as f:\n"
               "        while True: f.write(bytes(1 << 20)); f.flush()\n"
               "except OSError as e:\n"
               "    print(errno.errorcode[e.errno])\n\"" % path, user=user)


@pytest.mark.core  # nested and rootless daemons keep the disk in RAM too
def test_a_full_disk_with_default_limits_is_enospc_never_an_oom_kill(daemon, make_sandbox):
    # The default limits: 512 MiB of memory, a 512 MiB disk.
    sb = make_sandbox()
    assert run(daemon, sb, "echo kept > /workspace/kept")["exit_code"] == 0
    r = run(daemon, sb, "head -c 600M /dev/zero > /workspace/big")
    assert r["exit_code"] == 1 and r["signal"] is None and r["oom_killed"] is False, r
    assert "No space left on device" in r["stderr"], r
    # /dev/shm, a tmpfs of its own, fills up the same way, disk full or not
    r = fill(daemon, sb, "/dev/shm/big")
    assert r["stdout"] == "ENOSPC\n" and r["oom_killed"] is False, r
    # a full disk leaves the processes their whole memory_bytes
    r = run(daemon, sb, "python3 -c 'x = bytearray(400 << 20); print(len(x) >> 20)'")
    assert r["stdout"] == "400\n" and r["oom_killed"] is False, r
    # the sandbox and its files are as they were
    r = run(daemon, sb, "cat /workspace/kept; stat -c %s /workspace/big; df -k /workspace | tail -1")
    assert r["exit_code"] == 0 and r["stdout"].startswith("kept\n"), r
    assert int(r["stdout"].split()[1]) > 500 * MiB, r
    info = daemon.call("sandbox.info", sandbox_id=sb)
    assert info["state"] == "running" and info["stats"]["oom_kills"] == 0, info
    budgets = info["budgets"]
    assert budgets["memory_bytes"] == 512 * MiB and budgets["disk_bytes"] == 512 * MiB, budgets
    assert budgets["disk_backing"] == "tmpfs" and budgets["shm_bytes"] == SHM, budgets
    assert budgets["cgroup_memory_bytes"] == 1024 * MiB + SHM, budgets
    assert budgets["disk_used_bytes"] > 500 * MiB, budgets
    assert budgets["disk_used_bytes"] <= budgets["disk_bytes"], budgets


def test_oom_kills_on_a_full_disk_take_the_exec_never_the_sandbox(daemon, make_sandbox):
    sb = make_sandbox(memory_bytes=64 * MiB, disk_bytes=64 * MiB)
    assert run(daemon, sb, "echo kept > /workspace/kept")["exit_code"] == 0
    assert fill(daemon, sb, "/workspace/big")["stdout"] == "ENOSPC\n"
    for _ in range(3):
        r = run(daemon, sb, "exec python3 -c 'x = []\nwhile True: x.append(bytearray(8 << 20))'")
        assert r["oom_killed"] is True and r["signal"] == 9, r
        assert r["error"].startswith("killed: out of memory (memory limit 64 MiB;"), r
        r = run(daemon, sb, "cat /workspace/kept")
        assert r["stdout"] == "kept\n" and r["oom_killed"] is False and "error" not in r, r
    # a shell that outlives its killed child ends as it chooses: no error of its own
    r = run(daemon, sb, "python3 -c 'x = []\nwhile True: x.append(bytearray(8 << 20))'; echo after $?")
    assert r["exit_code"] == 0 and r["stdout"] == "after 137\n" and r["oom_killed"] is True, r
    assert "error" not in r, r
    assert daemon.call("sandbox.info", sandbox_id=sb)["stats"]["oom_kills"] >= 4
    assert "sandbox %s: removed" % sb not in daemon.read_log()


def test_the_cli_says_an_exec_was_killed_for_want_of_memory(daemon, make_sandbox):
    sb = make_sandbox(memory_bytes=64 * MiB, disk_bytes=16 * MiB)
    r = daemon.cli("exec", sb, "--", "python3", "-c", "x = []\nwhile True: x.append(bytearray(8 << 20))")
    assert r.returncode == 137, r
    err = r.stderr.decode()
    assert "nsbox: killed: out of memory (memory limit 64 MiB;" in err, r
    assert "at most 96 MiB" in err, r  # 64 MiB + the 16 MiB disk + a /dev/shm of 16 MiB


@pytest.mark.core
def test_exec_processes_are_the_oom_killers_choice_before_the_init_and_supervisors(daemon, make_sandbox):
    sb = make_sandbox()
    # the supervisor raises its exec's score just after the execve: polled for
    r = run(daemon, sb, "for i in $(seq 200); do "
            "[ $(cat /proc/$$/oom_score_adj) -gt $(cat /proc/1/oom_score_adj) ] && break; sleep 0.01; done; "
            "cat /proc/$$/oom_score_adj /proc/1/oom_score_adj /proc/$PPID/oom_score_adj")
    own, init, supervisor = (int(v) for v in r["stdout"].split())
    assert init == supervisor and own == min(init + 1000, 1000), r


def test_modest_memory_use_is_not_oom_killed(daemon, make_sandbox):
    sb = make_sandbox(memory_bytes=128 * MiB)
    r = run(daemon, sb, "python3 -c 'x = bytearray(32 << 20); print(len(x))'")
    assert r["exit_code"] == 0 and r["oom_killed"] is False, r
    assert stats(daemon, sb)["oom_kills"] == 0


def test_fork_bomb_stops_at_pids_and_another_sandbox_stays_prompt(daemon, make_sandbox):
    bomb = make_sandbox(pids=64, cpus=0.5)
    other = make_sandbox()
    result = {}

    def detonate():
        # every process forks forever, retrying when fork fails
        result["bomb"] = run(daemon, bomb, "exec python3 -c '\n"
                             "import os, time\n"
                             "while True:\n"
                             "    try: os.fork()\n"
                             "    except OSError: time.sleep(0.01)'", timeout=8)

    t = threading.Thread(target=detonate)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while stats(daemon, bomb)["pids"] < 60 and time.monotonic() < deadline:
            time.sleep(0.1)
        peak = stats(daemon, bomb)["pids"]
        assert 60 <= peak <= 64, peak
        durations = []
        for i in range(20):
            start = time.monotonic()
            r = run(daemon, other, "echo %d" % i)
            durations.append(time.monotonic() - start)
            assert r["stdout"] == "%d\n" % i
        assert stats(daemon, bomb)["pids"] <= 64
    finally:
        t.join()
    assert max(durations) < 2.0 and sum(durations) < 10.0, durations
    assert result["bomb"]["timed_out"] is True
    # the timeout killed the whole bomb: only the init is left once it reaped them
    assert wait_for_pids(daemon, bomb, IDLE_PIDS) == IDLE_PIDS


def test_an_exec_refused_at_the_pids_limit_says_why_and_what_to_do(daemon, make_sandbox):
    """fork's EAGAIN alone reads "Resource temporarily unavailable": an
    exec that cannot start because its sandbox holds as many processes as
    its --pids says so, with the way out."""
    sb = make_sandbox(pids=32)
    bomb = run(daemon, sb, "exec python3 -c '\n"
               "import os, time\n"
               "while True:\n"
               "    try: os.fork()\n"
               "    except OSError: time.sleep(0.001)'", timeout=120, background=True)
    deadline = time.monotonic() + 60
    while True:
        r = run(daemon, sb, "true")
        if r["exit_code"] != 0:
            break
        assert time.monotonic() < deadline, "every exec started beside the fork bomb"
        time.sleep(0.5)
    assert "cannot run the command" in r["stderr"], r
    assert "Resource temporarily unavailable (the sandbox is at its limit of 32 processes: end some, " \
        "nsbox ps %s and nsbox kill, or create it with a larger --pids)" % sb in r["stderr"], r["stderr"]
    daemon.call("exec.kill", sandbox_id=sb, exec_id=bomb["exec_id"], signal=9)
    # Once the bomb is gone (its slot may be left unmade: the next exec makes it), an exec starts.
    deadline = time.monotonic() + 30
    while stats(daemon, sb)["pids"] > IDLE_PIDS:
        assert time.monotonic() < deadline, stats(daemon, sb)
        time.sleep(0.05)
    assert run(daemon, sb, "echo back")["stdout"] == "back\n"


def test_cpu_spinner_at_half_a_cpu_gets_about_half_a_core(daemon, make_sandbox):
    sb = make_sandbox(cpus=0.5)
    before = stats(daemon, sb)["cpu_usage_us"]
    # two spinners: unlimited they would take two cores
    r = run(daemon, sb, "timeout 3 sh -c 'while :; do :; done' & timeout 3 sh -c 'while :; do :; done'; wait")
    used = (stats(daemon, sb)["cpu_usage_us"] - before) / 1e6
    wall = r["duration_ms"] / 1000
    assert 2.5 < wall < 6, r
    assert 0.3 < used / wall < 0.7, (used, wall)


def test_writing_past_disk_bytes_fails_with_enospc_inside(daemon, make_sandbox):
    sb = make_sandbox(disk_bytes=16 * MiB, memory_bytes=256 * MiB)
    for path, user in (("/workspace/big", "sandbox"), ("/tmp/big", "sandbox"), ("/var/big", "root")):
        r = run(daemon, sb, "python3 -c \"\n"
                "import errno\n"
                "try:\n"
                "    with open('%s', 'wb') as f:\n"
                "        for _ in range(64): f.write(bytes(1 << 20)); f.flush()\n"
                "except OSError as e:\n"
                "    print(errno.errorcode[e.errno])\n\"" % path, user=user)
        assert r["stdout"] == "ENOSPC\n", (path, r)
        run(daemon, sb, "rm -f " + path, user=user)
    r = run(daemon, sb, "df -k /workspace | tail -1")
    assert int(r["stdout"].split()[1]) <= 16 * 1024
    # /dev/shm, RAM beside the disk, is no larger than the disk
    r = run(daemon, sb, "df -k /dev/shm | tail -1")
    assert int(r["stdout"].split()[1]) == 16 * 1024, r
    assert daemon.call("sandbox.info", sandbox_id=sb)["budgets"]["shm_bytes"] == 16 * MiB
    # the sandbox's state dir on the host holds nothing of it
    total = 0
    for root, _dirs, files in os.walk(os.path.join(daemon.state, "sandboxes", sb)):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    assert total < MiB


def test_fd_exhaustion_stays_inside(daemon, make_sandbox):
    sb = make_sandbox()
    other = make_sandbox()
    r = run(daemon, sb, "python3 -c \"\n"
            "import os\n"
            "fds = []\n"
            "try:\n"
            "    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\n"
            "except OSError as e:\n"
            "    print(e.strerror, len(fds) > 100)\n\"")
    assert r["stdout"] == "Too many open files True\n", r
    assert run(daemon, other, "echo fine")["stdout"] == "fine\n"
    assert run(daemon, sb, "echo fine")["stdout"] == "fine\n"
    assert daemon.call("server.info")["version"]


def test_exec_timeout_kills_setsid_daemon_through_the_cgroup(daemon, make_sandbox):
    sb = make_sandbox()
    r = run(daemon, sb, "setsid sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 < /dev/null & sleep 1000",
            timeout=1)
    assert r["timed_out"] is True
    assert wait_for_pids(daemon, sb, IDLE_PIDS) == IDLE_PIDS
    assert "sleep" not in run(daemon, sb, "ps -eo comm")["stdout"]


def test_finished_exec_leaves_no_daemonized_process_behind(daemon, make_sandbox):
    sb = make_sandbox()
    r = run(daemon, sb, "setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo started")
    assert r["stdout"] == "started\n"
    assert wait_for_pids(daemon, sb, IDLE_PIDS) == IDLE_PIDS


def test_stats_report_usage(daemon, make_sandbox):
    sb = make_sandbox(memory_bytes=256 * MiB)
    run(daemon, sb, "python3 -c 'x = bytearray(64 << 20); import time; time.sleep(0.2)'")
    s = stats(daemon, sb)
    assert s["memory_peak_bytes"] >= 64 * MiB
    assert 0 < s["memory_bytes"] <= s["memory_peak_bytes"]
    assert s["cpu_usage_us"] > 0
    assert wait_for_pids(daemon, sb, IDLE_PIDS) == IDLE_PIDS  # the next slot starts after the answer
    assert s["oom_kills"] == 0


def test_removed_sandbox_leaves_no_cgroup(daemon, mode):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    dirs = cgroup_dirs(daemon, mode)
    assert all(sb in subdirs(p) for p in dirs.values())
    run(daemon, sb, "sleep 1000 &")
    daemon.call("sandbox.remove", sandbox_id=sb, force=True)
    deadline = time.monotonic() + 10
    while any(sb in subdirs(p) for p in dirs.values()):
        assert time.monotonic() < deadline, [p for p in dirs.values() if sb in subdirs(p)]
        time.sleep(0.02)


# --- daemons of their own ----------------------------------------------------

def start_daemon_without_memory_controller(*extra):
    """nsboxd in a mount namespace where the memory hierarchy is not mounted:
    a host whose limits cannot be applied."""
    d = tempfile.mkdtemp(prefix="nsbox-test-")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "s")
    m = mounts()
    unmount = [mp for key, (mp, _) in m.items() if key == "memory"]
    if mode_of_host() == "v2":
        pytest.skip("needs a v1 memory hierarchy to hide")
    script = "".join("umount -l %s && " % mp for mp in unmount) + 'exec "$@"'
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                             os.path.join(BUILD, "nsboxd"), "--socket", sock, "--state-dir",
                             os.path.join(d, "state"), "--image-dir", IMAGE_DIR, *NO_WARM_POOL, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    return d, sock, proc


def mode_of_host():
    m = mounts()
    if "" in m:
        try:
            with open(os.path.join(m[""][0], "cgroup.controllers")) as f:
                if "memory" in f.read().split():
                    return "v2"
        except FileNotFoundError:
            pass
    return "v1"


def test_create_is_refused_rather_than_unlimited_when_limits_cannot_apply():
    d, sock, proc = start_daemon_without_memory_controller()
    try:
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode != 0
        assert b"memory" in out and b"allow_degraded" in out, out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_allow_degraded_runs_unlimited_and_says_so():
    from nsbox_client import Client
    d, sock, proc = start_daemon_without_memory_controller("--allow-degraded", "1")
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with Client(sock) as c:
            info = c.call("server.info")
            assert "limits-not-enforced" in info["features"]
            sb = c.call("sandbox.create")["sandbox_id"]
            r = c.call("sandbox.exec", sandbox_id=sb, command="echo ok")
            assert r["stdout"] == "ok\n"
            assert c.call("sandbox.info", sandbox_id=sb)["stats"]["memory_bytes"] is None
            c.call("sandbox.remove", sandbox_id=sb, force=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(d, ignore_errors=True)


def test_a_second_daemon_never_touches_the_first_ones_cgroups(daemon, mode, make_sandbox):
    sb = make_sandbox()
    other = Daemon(extra_args=NO_WARM_POOL)
    try:
        assert cgroup_parent_name(other.state) != cgroup_parent_name(daemon.state)
        sb2 = other.call("sandbox.create")["sandbox_id"]
        other.call("sandbox.remove", sandbox_id=sb2, force=True)
    finally:
        assert other.stop() == 0
    assert run(daemon, sb, "echo still")["stdout"] == "still\n"
    assert all(sb in subdirs(p) for p in cgroup_dirs(daemon, mode).values())


def test_a_daemon_whose_empty_parent_was_reaped_recreates_it(daemon, mode):
    # a new daemon removes the empty nsbox-* dirs of daemons that were SIGKILLed;
    # a live one with no sandbox at that moment must not mind
    other = Daemon(extra_args=NO_WARM_POOL)
    assert other.stop() == 0
    assert all(not os.path.exists(p) for p in cgroup_dirs(daemon, mode).values())
    sb = daemon.call("sandbox.create", limits={"pids": 50})["sandbox_id"]
    try:
        assert run(daemon, sb, "echo back")["stdout"] == "back\n"
        assert all(sb in subdirs(p) for p in cgroup_dirs(daemon, mode).values())
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


def test_stale_cgroups_of_a_crashed_daemon_are_killed_and_removed():
    d = Daemon(extra_args=NO_WARM_POOL)
    sb = d.call("sandbox.create")["sandbox_id"]
    d.call("sandbox.exec", sandbox_id=sb, command="sleep 1000 >/dev/null 2>&1 &")
    mode = d.call("server.info")["cgroup"]
    dirs = cgroup_dirs(d, mode)
    d.proc.kill()  # a crash: nothing cleaned up
    d.proc.wait()
    assert all(sb in subdirs(p) for p in dirs.values())
    # The init exits when its manager goes away, taking the sandbox with it;
    # a process that outlived its daemon is what a restart must kill.
    straggler = subprocess.Popen(["sleep", "1000"])
    for parent in dirs.values():
        with open(os.path.join(parent, sb, "init" if mode == "v2" else "", "cgroup.procs"), "w") as f:
            f.write(str(straggler.pid))
    state = d.state
    d.log.close()
    # a restart on the same state dir finds them and cleans up
    restarted = subprocess.Popen([os.path.join(BUILD, "nsboxd"), "--socket", os.path.join(d.dir, "s2"),
                                  "--state-dir", state, "--image-dir", IMAGE_DIR, *NO_WARM_POOL],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(d.dir, "s2")):
            assert restarted.poll() is None, restarted.stdout.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert all(sb not in subdirs(p) for p in dirs.values())
        assert straggler.wait(timeout=5) == -9
    finally:
        straggler.kill()
        restarted.terminate()
        out, _ = restarted.communicate(timeout=30)
        shutil.rmtree(d.dir, ignore_errors=True)
    assert restarted.returncode == 0, out
    assert all(not os.path.exists(p) for p in dirs.values()), dirs


def test_python_run_out_of_memory_says_so(daemon, make_sandbox):
    sb = make_sandbox(memory_bytes=64 * MiB)
    r = daemon.call("python.run", sandbox_id=sb, code="x = []\nwhile True: x.append(bytearray(8 << 20))")
    assert r["status"] == "error" and r["oom_killed"] is True, r
    assert "ran out of memory" in r["stderr"] and "64 MiB" in r["stderr"], r
    r = daemon.call("python.run", sandbox_id=sb, code="print('fine')")
    assert r["status"] == "ok" and r["oom_killed"] is False and "memory" not in r["stderr"], r
