# SPDX-License-Identifier: Apache-2.0
"""The runtime under attack: no sandbox code can take an exec's processes
out of supervision (its supervisor out of the OOM killer's and the sandbox's
reach, orphans of a dead supervisor killed), drain a host-wide kernel pool
(ptys, aio, per-process limits), or read what identifies the host."""
import ctypes
import json
import os
import platform
import shutil
import signal
import time

import pytest
from conftest import PRELUDE, REPO, Daemon, attack

pytestmark = [pytest.mark.nested,
              pytest.mark.skipif(platform.machine() != "x86_64",
                                 reason="the probes use x86_64 syscall numbers")]

USERS = ["sandbox", "root"]


def _has_capability(bit):
    with open("/proc/self/status") as f:
        eff = next(line for line in f if line.startswith("CapEff:"))
    return bool(int(eff.split()[1], 16) & (1 << bit))


HOST_HAS_SYS_RESOURCE = _has_capability(24)  # nsboxd inherits ours
# An exec's processes are 1000 above the init and the supervisors (runtime/supervisor.c).
EXEC_OOM_SCORE = "0" if HOST_HAS_SYS_RESOURCE else "1000"
DOCKER_PROFILE = os.path.join(REPO, "..", "shared", "compat", "docker-default-seccomp.json")
if not os.path.exists(DOCKER_PROFILE):
    DOCKER_PROFILE = "/work/shared/compat/docker-default-seccomp.json"

def sh(daemon, sb, command, user="sandbox", **kw):
    return daemon.call("sandbox.exec", sandbox_id=sb, command=command, user=user, **kw)


@pytest.fixture(scope="module")
def daemon(daemon_readable_tmp):
    profiles = daemon_readable_tmp / "seccomp"
    profiles.mkdir()
    shutil.copy(os.path.join(REPO, "seccomp-profiles", "default.json"), profiles / "default.json")
    shutil.copy(DOCKER_PROFILE, profiles / "docker.json")
    d = Daemon(extra_args=["--seccomp-dir", str(profiles)])
    yield d
    assert d.stop() == 0, d.final_log[-4000:]


@pytest.fixture(scope="module")
def shared(daemon):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    yield sb
    daemon.call("sandbox.remove", sandbox_id=sb, force=True)


def host_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in f if ":" in line)}


def host_pid_of(marker):
    """Host pid of the process whose command line contains marker."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    if marker.encode() in f.read():
                        return int(entry)
            except OSError:
                pass
    return None


def alive(pid):
    try:
        return host_status(pid)["State"][0] != "Z"
    except OSError:
        return False


# ---- the supervisors and the init are out of the sandbox's reach ----------

@pytest.mark.parametrize("user", USERS)
@pytest.mark.hostroot("oom-protection: lowering oom_score_adj needs CAP_SYS_RESOURCE on the host (server.info userns.unavailable)")
def test_no_exec_can_change_the_oom_score_of_a_supervisor_or_the_init(daemon, shared, user):
    # Keep a second exec running, so that there is another exec's supervisor
    # (and the waiting slot's) to attack besides our own.
    other = sh(daemon, shared, "sleep 600", background=True)["exec_id"]
    try:
        v = attack(daemon, shared, """
            own = os.getppid()
            targets = sorted({1, own} | {int(p) for p in open("/proc/1/task/1/children").read().split()})
            out = {}
            for pid in targets:
                for name, value in (("oom_score_adj", "1000"), ("oom_adj", "15")):
                    path = "/proc/%d/%s" % (pid, name)
                    try:
                        with open(path, "w") as f:
                            f.write(value)
                        out[path] = "written"
                    except OSError as e:
                        out[path] = errno.errorcode[e.errno]
            verdict(out=out, own=own, targets=targets,
                    adj={p: open("/proc/%d/oom_score_adj" % p).read().strip() for p in targets},
                    self_adj=open("/proc/self/oom_score_adj").read().strip())
        """, user=user)
    finally:
        daemon.call("exec.kill", exec_id=other)
    assert len(v["targets"]) >= 3, v  # the init, our supervisor, another one
    assert all(result != "written" for result in v["out"].values()), v
    # Every supervisor and the init stay where the OOM killer never picks
    # them, where nsboxd may put them there (root without CAP_SYS_RESOURCE,
    # as on some VMs, may not lower an oom_score_adj: then where they were).
    assert set(v["adj"].values()) == {"-1000" if HOST_HAS_SYS_RESOURCE else "0"}, v
    # The exec itself is the OOM killer's choice before them: an ordinary
    # process (0) where they are at -1000, else 1000.
    assert v["self_adj"] == EXEC_OOM_SCORE, v


@pytest.mark.parametrize("user", USERS)
@pytest.mark.hostroot("oom-protection: lowering oom_score_adj needs CAP_SYS_RESOURCE on the host (server.info userns.unavailable)")
def test_exec_processes_cannot_lower_their_oom_score(daemon, shared, user):
    # Protection of the supervisor must not leak into the exec: its
    # processes, and what they fork at once, start above it and stay at or
    # above 0.
    v = attack(daemon, shared, """
        pid = os.fork()
        if pid == 0:
            os._exit(0 if open("/proc/self/oom_score_adj").read().strip() == "%s" else 1)
        _, status = os.waitpid(pid, 0)
        def lower():
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("-1000")
        verdict(child_as_exec=os.WEXITSTATUS(status) == 0, lower=err(lower),
                adj=open("/proc/self/oom_score_adj").read().strip())
    """ % EXEC_OOM_SCORE, user=user)
    assert v["child_as_exec"] is True, v
    assert v["lower"] in ("EACCES", "EPERM"), v
    assert v["adj"] == EXEC_OOM_SCORE, v


# ---- orphans of a dead supervisor die --------------------------------------

@pytest.mark.hostroot("finds the sandbox's supervisor by the sandbox's own host uid range; without host root sandboxes share one")
def test_killing_a_supervisor_from_the_host_kills_its_exec_processes(daemon, sandbox):
    marker = "3600.%d" % os.getpid()
    # The sleeper is double-forked and in its own session: only its
    # supervisor (the subreaper) would have ended it.
    script = "(setsid sh -c 'trap \"\" HUP TERM; exec sleep %s' &) ; exec sleep 3601" % marker
    eid = sh(daemon, sandbox, script, background=True, timeout_seconds=3600)["exec_id"]
    deadline = time.monotonic() + 10
    sleeper = None
    while sleeper is None:
        assert time.monotonic() < deadline, "the sleeper did not start"
        time.sleep(0.05)
        sleeper = host_pid_of(marker)
    # Its supervisor: the ancestor whose parent is the sandbox init (a
    # child of nsboxd).
    chain, pid = [], sleeper
    while pid > 1:
        chain.append(pid)
        pid = int(host_status(pid)["PPid"])
        if pid == daemon.proc.pid:
            break
    assert pid == daemon.proc.pid and len(chain) >= 3, chain
    supervisor = chain[-2]
    with open("/proc/%d/uid_map" % supervisor) as f:
        base = int(f.read().split()[1])
    assert int(host_status(supervisor)["Uid"].split()[0]) - base == 65533, host_status(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive(sleeper):
        assert time.monotonic() < deadline, "the exec's sleeper outlived its supervisor"
        time.sleep(0.05)
    # The manager hears of it, and the sandbox goes on serving.
    deadline = time.monotonic() + 10
    while daemon.call("exec.status", exec_id=eid)["running"]:
        assert time.monotonic() < deadline, "the exec is still reported running"
        time.sleep(0.05)
    r = sh(daemon, sandbox, "echo still serving")
    assert r["stdout"] == "still serving\n" and r["exit_code"] == 0, r


@pytest.fixture
def sandbox(daemon):
    sb = daemon.call("sandbox.create")["sandbox_id"]
    yield sb
    try:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)
    except Exception:
        pass


# ---- host-wide kernel pools -------------------------------------------------

OPEN_PTYS = """
fds, error = [], None
while len(fds) < 1000:
    try:
        fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        error = errno.errorcode[e.errno]
        break
verdict(opened=len(fds), error=error)
"""


def test_ptys_are_capped_per_sandbox_and_another_sandbox_still_gets_one(daemon, sandbox):
    # One sandbox holds as many ptys as it can get (a background exec keeps
    # them open); another one still gets its own.
    holder = sh(daemon, sandbox, "python3 -c '%s' ; sleep 600" % (PRELUDE + OPEN_PTYS).replace("'", "'\"'\"'"),
                background=True, timeout_seconds=600)["exec_id"]
    deadline = time.monotonic() + 30
    while True:
        out = daemon.call("exec.output", exec_id=holder)["stdout"]
        if out.strip():
            break
        assert time.monotonic() < deadline, "the pty holder printed nothing"
        time.sleep(0.1)
    held = json.loads(out.strip().splitlines()[-1])
    other = daemon.call("sandbox.create")["sandbox_id"]
    try:
        v = attack(daemon, other, """
            fd = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
            verdict(ok=True)
        """)
    finally:
        daemon.call("exec.kill", exec_id=holder)
        daemon.call("sandbox.remove", sandbox_id=other, force=True)
    assert held == {"opened": 64, "error": "ENOSPC"}, held
    assert v == {"ok": True}


IO_SETUP = """
ctx = ctypes.c_ulong(0)
r, e = sc(206, 128, ctypes.byref(ctx))  # io_setup
if r == 0:
    sc(207, ctx.value)  # io_destroy
params = (ctypes.c_uint8 * 120)()
r2, e2 = sc(425, 8, ctypes.byref(params))  # io_uring_setup
if r2 >= 0:
    os.close(r2)
verdict(io_setup=e if r != 0 else "ok", io_uring_setup=e2 if r2 < 0 else "ok")
"""


@pytest.mark.parametrize("profile", ["default", "docker"])
@pytest.mark.parametrize("user", USERS)
def test_no_profile_lets_a_sandbox_reserve_host_aio_events(daemon, profile, user):
    sb = daemon.call("sandbox.create", seccomp_profile=profile)["sandbox_id"]
    try:
        v = attack(daemon, sb, IO_SETUP, user=user)
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)
    assert v["io_setup"] in ("ENOSYS", "EPERM"), v
    assert v["io_uring_setup"] in ("ENOSYS", "EPERM"), v
    # The host's own io_setup is untouched.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ctx = ctypes.c_ulong(0)
    assert libc.syscall(ctypes.c_long(206), ctypes.c_long(128), ctypes.byref(ctx)) == 0, ctypes.get_errno()
    libc.syscall(ctypes.c_long(207), ctypes.c_ulong(ctx.value))


OPEN_INOTIFY = """
fds, error = [], None
while len(fds) < 1000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        error = errno.errorcode[ctypes.get_errno()]
        break
    fds.append(fd)
verdict(opened=len(fds), error=error)
"""


def host_inotify_instances_of_root_left():
    """How many more inotify instances host root can open now (up to 64)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fds = []
    try:
        while len(fds) < 64:
            fd = libc.inotify_init1(0)
            if fd < 0:
                break
            fds.append(fd)
        return len(fds)
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.parametrize("user", USERS)
def test_inotify_instances_are_capped_per_sandbox_and_host_root_keeps_its_own(daemon, user):
    # Every sandbox's user namespace is owned by host root, so at the host's
    # level the kernel charges what sandboxes take of inotify to root: before
    # the cap, three sandboxes holding all they could get left root (systemd,
    # the host's daemons) with none (EMFILE).
    holders, sandboxes = [], []
    try:
        for _ in range(3):
            sb = daemon.call("sandbox.create")["sandbox_id"]
            sandboxes.append(sb)
            script = (PRELUDE + OPEN_INOTIFY).replace("'", "'\"'\"'")
            holders.append(sh(daemon, sb, "python3 -c '%s' ; sleep 600" % script, user=user, background=True,
                              timeout_seconds=600)["exec_id"])
        held = []
        for exec_id in holders:
            deadline = time.monotonic() + 30
            while not daemon.call("exec.output", exec_id=exec_id)["stdout"].strip():
                assert time.monotonic() < deadline, "the inotify holder printed nothing"
                time.sleep(0.1)
            held.append(json.loads(daemon.call("exec.output", exec_id=exec_id)["stdout"].strip().splitlines()[-1]))
        root_left = host_inotify_instances_of_root_left()
    finally:
        for exec_id in holders:
            daemon.call("exec.kill", exec_id=exec_id)
        for sb in sandboxes:
            daemon.call("sandbox.remove", sandbox_id=sb, force=True)
    assert held == [{"opened": 16, "error": "EMFILE"}] * 3, held
    assert root_left == 64, "host root could open only %d inotify instances" % root_left
    with open("/proc/sys/fs/inotify/max_user_instances") as f:
        assert int(f.read()) >= 128 + 64 * 16  # room for the default 64 sandboxes' caps


@pytest.mark.parametrize("user", USERS)
def test_per_process_limits_inside_are_bounded(daemon, shared, user):
    r = sh(daemon, shared, "cat /proc/self/limits", user=user)
    limits = {}
    for line in r["stdout"].splitlines()[1:]:
        name = line[:26].strip()
        soft, hard = line[26:].split()[:2]
        limits[name] = (soft, hard)
    assert limits["Max open files"] == ("1024", "1024"), limits
    assert limits["Max core file size"] == ("0", "0"), limits
    assert limits["Max locked memory"] == (str(8 << 20), str(8 << 20)), limits
    assert limits["Max pending signals"] == ("4096", "4096"), limits
    assert limits["Max msgqueue size"] == ("819200", "819200"), limits


# ---- what identifies the host is masked ------------------------------------

MASKED_FILES = ["/proc/cmdline", "/sys/kernel/vmcoreinfo", "/sys/kernel/notes", "/proc/config.gz",
                "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
                "/proc/kallsyms", "/proc/sys/kernel/random/boot_id", "/sys/kernel/uevent_seqnum"]
MASKED_DIRS = ["/proc/acpi", "/proc/asound", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
               "/sys/devices/virtual/dmi"]
READ_ONLY = ["/proc/sysrq-trigger", "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches"]


def host_read(path):
    try:
        with open(path, "rb") as f:
            return f.read(65536)
    except OSError:
        return None


@pytest.mark.parametrize("user", USERS)
def test_host_identifying_files_are_masked(daemon, shared, user):
    v = attack(daemon, shared, """
        files, dirs, writes = {}, {}, {}
        for p in %r:
            try:
                with open(p, "rb") as f:
                    files[p] = f.read(65536).hex()
            except OSError as e:
                files[p] = errno.errorcode[e.errno]
        for p in %r:
            try:
                dirs[p] = os.listdir(p)
            except OSError as e:
                dirs[p] = errno.errorcode[e.errno]
        for p in %r:
            def w():
                with open(p, "w") as f:
                    f.write("1")
            writes[p] = err(w)
        verdict(files=files, dirs=dirs, writes=writes)
    """ % (MASKED_FILES, MASKED_DIRS, READ_ONLY), user=user)
    for path, got in v["files"].items():
        host = host_read(path)
        # Empty (bound to /dev/null) or unreadable, never the host's content.
        assert got == "" or got in ("ENOENT", "EACCES", "EPERM"), (path, got)
        if host:
            assert got != host.hex(), path
    for path, got in v["dirs"].items():
        assert got == [] or got == "ENOENT", (path, got)
    for path, got in v["writes"].items():
        assert got in ("EROFS", "EACCES", "EPERM", "ENOENT"), (path, got)
    assert host_read("/proc/cmdline"), "the host's /proc/cmdline is readable on the host"


def test_masked_dirs_are_one_read_only_filesystem_that_nothing_can_fill(daemon, shared):
    """Every superblock a sandbox mounts costs the kernel a shrinker, whose
    arrays in every memory cgroup grow with the host's count of both: the
    masks are one empty tmpfs shown at each masked directory. Being one, a
    write that got into one mask would show in all: none gets in."""
    v = attack(daemon, shared, """
        mounts = {}
        for line in open("/proc/self/mountinfo"):
            f = line.split()
            mounts[f[4]] = (f[2], f[f.index("-") + 1])
        dirs = [p for p in %r + ["/sys/kernel/debug", "/sys/kernel/tracing", "/sys/kernel/security",
                                 "/sys/fs/bpf", "/proc/driver"] if p in mounts]
        writes = {}
        for p in dirs:
            writes[p + "/x"] = err(lambda: open(p + "/x", "w").write("x"))
            writes[p + "/d"] = err(lambda: os.mkdir(p + "/d"))
        verdict(devices=sorted(set(mounts[p][0] for p in dirs)), types=sorted(set(mounts[p][1] for p in dirs)),
                count=len(dirs), writes=writes, entries={p: os.listdir(p) for p in dirs})
    """ % MASKED_DIRS, user="root")
    assert v["count"] >= 2, v  # this host has at least /sys/firmware and /sys/kernel/debug
    assert v["devices"] and len(v["devices"]) == 1, v
    assert v["types"] == ["tmpfs"], v
    for path, got in v["writes"].items():
        assert got in ("EROFS", "EACCES", "EPERM"), (path, got)
    assert all(entries == [] for entries in v["entries"].values()), v


HOLD_FILES = r'''
import os, sys, time
for k in range(int(sys.argv[1])):
    if os.fork() == 0:
        for i in range(int(sys.argv[2])):
            os.open("/dev/null", os.O_RDONLY)
        time.sleep(120)
        os._exit(0)
print("holding", flush=True)
time.sleep(120)
'''


def memory_held(daemon, processes, files_each):
    """The sandbox's charged memory growth while `processes` each hold `files_each` open files."""
    sb = daemon.call("sandbox.create", limits={"memory_bytes": 1 << 30, "pids": 256})["sandbox_id"]
    try:
        base = daemon.call("sandbox.info", sandbox_id=sb)["stats"]["memory_bytes"]
        ex = daemon.call("sandbox.exec", sandbox_id=sb, argv=["python3", "-c", HOLD_FILES, str(processes),
                                                              str(files_each)],
                         background=True, timeout_seconds=120)["exec_id"]
        deadline = time.monotonic() + 60
        while daemon.call("sandbox.info", sandbox_id=sb)["stats"]["pids"] < processes + 4:
            assert time.monotonic() < deadline, "the holders did not start"
            time.sleep(0.2)
        time.sleep(2)  # the last opens
        held = daemon.call("sandbox.info", sandbox_id=sb)["stats"]["memory_bytes"] - base
        daemon.call("exec.kill", exec_id=ex)
        return held
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


@pytest.mark.serial  # holds thousands of open files: the host file table is everyone's
@pytest.mark.hostroot("cgroup limits and stats: nsboxd in a user namespace has no cgroup it may write here (server.info limits_reason)")
def test_the_host_file_table_has_room_for_every_sandbox_and_files_cost_their_memory(daemon):
    # A sandbox may hold its pids limit times 1024 open files (262144 with the
    # defaults, a tenth of this host's fs.file-max before nsboxd started): a
    # few of them could leave the host's other users with ENFILE. nsboxd
    # makes room for max_sandboxes of the largest (max_pids), and what they
    # open is charged to their memory limit, which bounds it too.
    info = daemon.call("server.info")
    with open("/proc/sys/fs/file-max") as f:
        file_max = int(f.read())
    assert file_max >= info["max_sandboxes"] * 4096 * 1024, file_max
    without = memory_held(daemon, 50, 0)
    with_files = memory_held(daemon, 50, 1000)
    # 50000 struct files: well over 100 bytes each (about 240 measured here).
    assert with_files - without >= 50000 * 100, (without, with_files)
