# SPDX-License-Identifier: Apache-2.0
"""Stateless python.run through the sandbox's Python fork server:
served calls find the image's heavy modules imported, keep no state between
calls, and keep every promise of the plain path (ids, seccomp, timeout and
kill of the whole tree, exit codes, files, images)."""
import base64
import json
import os
import signal
import socket
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import Daemon, host_children, host_inits, until  # noqa: E402
from test_python import PNG_MAGIC, make_wheel  # noqa: E402

# Printed by a call: whether the fork server served it, its server's pid,
# and which of the server's templates that is (the light one is a child of
# the heavy one). PROBE names pandas and matplotlib in an import (never
# run): the heavy template serves it, with them imported already.
LIGHT_PROBE = r'''
import json, os, sys
def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""
def _ppid(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])
_grand = _ppid(os.getppid())
_server = _grand if "forkserver.py" in _cmdline(_grand) else None
print(json.dumps({"preloaded": "pandas" in sys.modules and "matplotlib.pyplot" in sys.modules,
                  "server": _server,
                  "template": _server and ("light" if "forkserver.py" in _cmdline(_ppid(_server)) else "heavy")}))
'''
# An import never run: the heavy template serves the code it ends (a
# client of the server itself talks to that one).
HEAVY = "if False:\n    import pandas, matplotlib.pyplot\n"
PROBE = LIGHT_PROBE + HEAVY


def run(daemon, **params):
    return daemon.call("python.run", **params)


def probe(daemon, sandbox_id, code=PROBE):
    r = run(daemon, sandbox_id=sandbox_id, code=code)
    assert r["status"] == "ok", r
    return json.loads(r["stdout"].strip().splitlines()[-1])


def wait_served(daemon, sandbox_id, deadline_s=90):
    """The first call starts the server and takes the plain path; calls are
    served once its imports are done. Returns the server's pid."""
    deadline = time.monotonic() + deadline_s
    while True:
        p = probe(daemon, sandbox_id)
        if p["server"] is not None:
            assert p["preloaded"] and p["template"] == "heavy", p
            return p["server"]
        assert time.monotonic() < deadline, "no stateless call was served by a fork server"
        time.sleep(0.3)


def processes_with(daemon, sandbox_id, marker):
    # "[m]arker": the pattern does not match the grep's own command line.
    pattern = "[%s]%s" % (marker[0], marker[1:].replace(".", "[.]"))
    r = daemon.call("sandbox.exec", sandbox_id=sandbox_id, user="root",
                    argv=["sh", "-c", "grep -l -a -- '%s' /proc/[0-9]*/cmdline 2>/dev/null || true" % pattern])
    return [line for line in r["stdout"].splitlines() if "/self/" not in line and line.strip()]


def wait_gone(daemon, sandbox_id, marker, deadline_s=20):
    deadline = time.monotonic() + deadline_s
    while processes_with(daemon, sandbox_id, marker):
        assert time.monotonic() < deadline, "processes of %s are still running" % marker
        time.sleep(0.2)


def forkservers(daemon, sandbox_id):
    return processes_with(daemon, sandbox_id, "forkserver.py")


# A daemonized (setsid, double-forked) child that outlives its parent; the
# call prints "alive" once it runs.
DAEMONIZE = r'''
import os, time
MARKER = "%s"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("python3", ["python3", "-c", "import time; time.sleep(1000)", MARKER])
    os._exit(0)
os.wait()
def _alive():
    for pid in os.listdir("/proc"):
        try:
            if MARKER.encode() in open("/proc/%%s/cmdline" %% pid, "rb").read():
                return True
        except OSError:
            pass
for _ in range(200):
    if _alive():
        print("alive", flush=True)
        break
    time.sleep(0.05)
'''


def test_stateless_calls_are_served_with_the_preload_and_no_state_between_them(daemon, sandbox):
    server = wait_served(daemon, sandbox)
    r = run(daemon, sandbox_id=sandbox, code=(
        "import builtins, os, sys, http.server\n"
        "builtins.leaked = 1\n"
        "os.environ['NSBOX_LEAK'] = '1'\n"
        "os.chdir('/tmp')\n"
        "import numpy; print(numpy.random.randint(1 << 30))\n"))
    assert r["status"] == "ok", r
    first_random = r["stdout"]
    r = run(daemon, sandbox_id=sandbox, code=(
        "import builtins, os, sys, numpy\n"
        "print(hasattr(builtins, 'leaked'), 'http.server' in sys.modules, 'NSBOX_LEAK' in os.environ,\n"
        "      os.getcwd())\n"
        "print(numpy.random.randint(1 << 30))\n"))
    assert r["status"] == "ok", r
    lines = r["stdout"].splitlines()
    assert lines[0] == "False False False /workspace", r
    assert lines[1] + "\n" != first_random  # numpy is reseeded in each call
    assert probe(daemon, sandbox)["server"] == server  # the same server served them all


def test_calls_back_to_back_each_get_a_fresh_process_from_the_reapers_kept(daemon, sandbox):
    """Calls one right after another find the spare they would take still
    forking its next process: they wait for it, not make a new reaper (that
    reaper then one too many, torn down: two forks and two teardowns more of
    the sandbox's CPU per call). Each call is still a process of its own."""
    server = wait_served(daemon, sandbox)
    calls = []
    for _ in range(100):
        r = run(daemon, sandbox_id=sandbox, code=PROBE + "print(os.getpid(), os.getppid())")
        assert r["status"] == "ok", r
        lines = r["stdout"].strip().splitlines()
        assert json.loads(lines[0])["server"] == server, r
        calls.append(tuple(int(x) for x in lines[1].split()))
    assert len({pid for pid, _ in calls}) == len(calls), calls
    # The two spares serve them all; a little room for a reaper that a
    # loaded host kept from its next fork for longer than a call waits.
    reapers = {reaper for _, reaper in calls}
    assert len(reapers) <= 3, calls


def test_served_call_has_the_ids_seccomp_and_caps_of_a_normal_exec(daemon, sandbox):
    wait_served(daemon, sandbox)
    fields = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
              "Seccomp", "Seccomp_filters")

    def pick(text):
        return {line.split(":")[0]: line.split(":", 1)[1].split() for line in text.splitlines()
                if line.split(":")[0] in fields}

    r = run(daemon, sandbox_id=sandbox, code=PROBE + "print(open('/proc/self/status').read())")
    assert json.loads(r["stdout"].splitlines()[0])["server"] is not None
    served = pick(r["stdout"])
    plain = pick(daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["cat", "/proc/self/status"])["stdout"])
    assert set(served) == set(fields) and served == plain


def test_timeout_of_a_served_call_kills_its_whole_tree(daemon, sandbox):
    wait_served(daemon, sandbox)
    marker = "nsbox-fs-timeout-marker"
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=3,
            code=PROBE + DAEMONIZE % marker + "time.sleep(1000)\n")
    assert r["status"] == "timeout", r
    assert json.loads(r["stdout"].splitlines()[0])["server"] is not None
    assert "alive" in r["stdout"], r
    wait_gone(daemon, sandbox, marker)
    assert run(daemon, sandbox_id=sandbox, code="print(2)")["stdout"] == "2\n"


def test_client_leaving_a_served_call_kills_its_tree(daemon, sandbox):
    wait_served(daemon, sandbox)
    marker = "nsbox-fs-gone-marker"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(daemon.socket)
    request = {"jsonrpc": "2.0", "id": 1, "method": "python.run",
               "params": {"sandbox_id": sandbox, "timeout_seconds": 600,
                          "code": DAEMONIZE % marker + "time.sleep(1000)\n"}}
    conn.sendall(json.dumps(request).encode() + b"\n")
    deadline = time.monotonic() + 30
    while not processes_with(daemon, sandbox, marker):
        assert time.monotonic() < deadline, "the call never started its child"
        time.sleep(0.2)
    conn.close()  # python.run's client is gone: its exec (the attach client) is killed
    wait_gone(daemon, sandbox, marker)


# The call (served by the light template) kills its reaper, the server (the
# heavy template), or the light template: the two templates end together.
@pytest.mark.parametrize("victim", ["reaper", "server", "light"])
def test_call_that_kills_its_reaper_or_the_server_leaves_nothing_behind(daemon, sandbox, victim):
    server = wait_served(daemon, sandbox)
    marker = "nsbox-fs-kill-%s-marker" % victim
    target = {"reaper": "os.getppid()", "server": str(server),
              "light": "int(open('/proc/%d/stat' % os.getppid()).read().rsplit(')', 1)[1].split()[1])"}[victim]
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=60,
            code=DAEMONIZE % marker + "import signal\nos.kill(%s, signal.SIGKILL)\ntime.sleep(1000)\n" % target)
    assert r["status"] == "error" and r["exit_code"] is None, r
    assert "alive" in r["stdout"], r
    wait_gone(daemon, sandbox, marker)
    r = run(daemon, sandbox_id=sandbox, code="print(3)")
    assert r["status"] == "ok" and r["stdout"] == "3\n", r
    # A new server takes over where the old one was killed (nsboxd starts
    # one once the old one's exec has ended: with the light template, the
    # heavy one ends too).
    assert wait_served(daemon, sandbox) != (server if victim != "reaper" else None)


def test_exit_codes_signals_and_tracebacks_of_served_calls(daemon, sandbox):
    wait_served(daemon, sandbox)
    r = run(daemon, sandbox_id=sandbox, code=PROBE + "import sys; sys.exit(3)")
    assert json.loads(r["stdout"])["server"] is not None
    assert r["status"] == "error" and r["exit_code"] == 3, r
    r = run(daemon, sandbox_id=sandbox, code="import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert r["status"] == "error" and r["exit_code"] is None, r
    r = run(daemon, sandbox_id=sandbox, code="def f():\n    raise ValueError('bad value')\nf()")
    assert r["status"] == "error" and r["exit_code"] == 1
    assert "ValueError: bad value" in r["stderr"] and "script.py" in r["stderr"], r
    assert "forkserver" not in r["stderr"] and "nsbox_runtime" not in r["stderr"], r


def test_served_call_returns_files_produced_and_images(daemon, sandbox):
    wait_served(daemon, sandbox)
    r = run(daemon, sandbox_id=sandbox, files={"in.txt": "abc"}, code=PROBE + (
        "import matplotlib.pyplot as plt\n"
        "open('out.txt', 'w').write(open('in.txt').read() * 2)\n"
        "plt.plot([1, 2, 3]); plt.show()\n"
        "plt.figure(); plt.plot([3, 2])\n"))
    assert r["status"] == "ok", r
    assert json.loads(r["stdout"])["server"] is not None
    assert r["files_produced"]["/workspace/out.txt"] == 6
    images = [o["image"] for o in r["outputs"] if o["type"] == "image"]
    assert len(images) == 2, r
    assert all(base64.b64decode(i["data"]).startswith(PNG_MAGIC) for i in images)


# (code, the template that serves it, what it prints): the light template
# takes a call whose imports (its own and those of the /workspace modules it
# imports) it has loaded already; every other goes to the heavy one.
ROUTES = [
    ("print(1)", "light", "1"),
    ("import math, json; print(math.factorial(5), json.dumps([1]))", "light", "120 [1]"),
    ("import plainmod; print(plainmod.VALUE)", "light", "[2]"),
    ("from os import path; from json import decoder; print(path.basename('/a/b'), decoder.__name__)", "light",
     "b json.decoder"),
    ("import numpy; print(numpy.arange(3).sum())", "heavy", "3"),
    ("import pkgheavy; print(len(pkgheavy.frame()))", "heavy", "2"),
    ("from pkgheavy import inner; print(len(inner.frame()))", "heavy", "2"),
    ("def later():\n    import matplotlib.pyplot\nprint(4)", "heavy", "4"),
    ("import statistics; print(statistics.mean([1, 3]))", "heavy", "2"),
    # Imports the scan cannot see run in the light template: they work.
    ("import importlib; np = importlib.import_module('numpy'); print(np.arange(4).sum())", "light", "6"),
    ("exec('import pandas'); print(len(pandas.DataFrame({'a': [1]})))", "light", "1"),
    # A FIFO where a module would be: the light template does not wait on it.
    ("print(9)\nif False:\n    import fifomod\n", "heavy", "9"),
]


def test_calls_go_to_the_light_template_unless_their_imports_need_the_heavy_one(daemon, sandbox):
    """A call forked from the light template (no numpy, pandas, matplotlib
    loaded) costs the sandbox a fraction of the CPU of one forked from the
    heavy one. Calls that import the heavy modules, directly or through a
    module of /workspace, still find them imported already; an import no
    scan sees (importlib, exec) still works. Each call is a fresh process."""
    heavy = wait_served(daemon, sandbox)
    daemon.call("fs.mkdir", sandbox_id=sandbox, path="/workspace/pkgheavy")
    for path, content in (("plainmod.py", "import json\nVALUE = json.dumps([2])\n"),
                          ("pkgheavy/__init__.py", "from .inner import frame\n"),
                          ("pkgheavy/inner.py", "import pandas\n\ndef frame():\n"
                                                "    return pandas.DataFrame({'a': [1, 2]})\n")):
        daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/" + path, content=content)
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["mkfifo", "/workspace/fifomod.py"])
    assert r["exit_code"] == 0, r
    pids = []
    for code, template, out in ROUTES:
        for params in ({}, {"script_name": "tool.py"}):  # sys.path[0]: the script's dir, or the cwd
            r = run(daemon, sandbox_id=sandbox, timeout_seconds=30, code=LIGHT_PROBE + code + "\nprint(os.getpid())",
                    **params)
            assert r["status"] == "ok", (code, r)
            lines = r["stdout"].splitlines()
            p = json.loads(lines[0])
            assert (p["template"], lines[1]) == (template, out), (code, r)
            # The heavy template's calls find its modules imported before their code runs.
            assert p["preloaded"] == (template == "heavy") and (p["server"] == heavy) == (template == "heavy"), p
            pids.append(int(lines[2]))
    assert len(set(pids)) == len(pids), pids
    # The figures of a call in the light template are captured as in the heavy one.
    r = run(daemon, sandbox_id=sandbox, code=LIGHT_PROBE + (
        "import importlib\nplt = importlib.import_module('matplotlib.pyplot')\nplt.plot([1, 2])\n"))
    assert r["status"] == "ok" and json.loads(r["stdout"])["template"] == "light", r
    images = [o["image"] for o in r["outputs"] if o["type"] == "image"]
    assert len(images) == 1 and base64.b64decode(images[0]["data"]).startswith(PNG_MAGIC), r


def test_package_install_replaces_the_fork_server(daemon, sandbox):
    server = wait_served(daemon, sandbox)
    filename, data = make_wheel("nsbox_fspkg", "1.0", "ANSWER = 7\n")
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/" + filename,
                content=base64.b64encode(data).decode(), encoding="base64")
    r = daemon.call("package.install", sandbox_id=sandbox, packages=["nsbox_fspkg==1.0"],
                    find_links="/workspace", index_url="")
    assert r["exit_code"] == 0, r["stderr"]
    # The next call is not served by the server from before the install.
    p = probe(daemon, sandbox)
    assert p["server"] != server
    assert run(daemon, sandbox_id=sandbox, code="import nsbox_fspkg; print(nsbox_fspkg.ANSWER)")["stdout"] == "7\n"
    assert wait_served(daemon, sandbox) != server


def test_fork_server_off_takes_the_plain_path():
    d = Daemon(extra_args=["--python-fork-server", "off"])
    try:
        sb = d.call("sandbox.create")["sandbox_id"]
        for _ in range(3):
            for code in (PROBE, LIGHT_PROBE):
                p = probe(d, sb, code)
                assert p == {"preloaded": False, "server": None, "template": None}
        assert forkservers(d, sb) == []
    finally:
        assert d.stop() == 0


def test_fork_server_stops_when_idle_and_does_not_keep_the_sandbox():
    d = Daemon(extra_args=["--python-fork-server-idle-seconds", "2"])
    try:
        sb = d.call("sandbox.create")["sandbox_id"]
        wait_served(d, sb)
        deadline = time.monotonic() + 30
        while forkservers(d, sb):
            assert time.monotonic() < deadline, "the idle fork server was not stopped"
            time.sleep(0.5)
        assert probe(d, sb)["server"] is None  # the next call starts it again
        wait_served(d, sb)
    finally:
        assert d.stop() == 0


def test_no_fork_server_in_a_sandbox_with_little_memory(daemon, sandbox):
    wait_served(daemon, sandbox)  # while a default-sized sandbox has one
    sb = daemon.call("sandbox.create", limits={"memory_bytes": 128 << 20})["sandbox_id"]
    try:
        for _ in range(3):
            assert probe(daemon, sb)["server"] is None
        time.sleep(1)
        assert forkservers(daemon, sb) == []
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


@pytest.mark.parametrize("warm_pool", ["0", "2"])
def test_eager_fork_server_starts_with_the_sandbox(warm_pool):
    d = Daemon(extra_args=["--python-fork-server", "eager", "--warm-pool", warm_pool])
    try:
        if warm_pool != "0":  # the pool is full: the sandbox is one of it
            deadline = time.monotonic() + 60
            while d.read_log().count(": created for uid") < 2:
                assert time.monotonic() < deadline, "the warm pool did not fill"
                time.sleep(0.3)
        sb = d.call("sandbox.create")["sandbox_id"]
        if warm_pool != "0":
            assert "sandbox %s: handed from the warm pool" % sb in d.read_log()
        deadline = time.monotonic() + 30
        while not forkservers(d, sb):
            assert time.monotonic() < deadline, "no fork server started with the sandbox"
            time.sleep(0.3)
    finally:
        assert d.stop() == 0


def test_fork_server_does_not_keep_an_idle_sandbox_alive(daemon):
    sb = daemon.call("sandbox.create", idle_timeout_seconds=5, idle_action="remove")["sandbox_id"]
    wait_served(daemon, sb)  # the server's own idle stop is 60 s away
    deadline = time.monotonic() + 60
    while sb in {s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]}:
        assert time.monotonic() < deadline, "the sandbox with a fork server was not reaped when idle"
        time.sleep(0.5)


def test_server_and_the_next_calls_processes_cannot_be_written_by_sandbox_code(daemon, sandbox):
    wait_served(daemon, sandbox)
    time.sleep(1)  # the next calls' processes are forked once the last call is over
    # Other code of the sandbox, as the same user: here an exec.
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["python3", "-c", r'''
import errno, json, os
mine = {os.getpid(), os.getppid()}
out = {}
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) in mine:
        continue
    try:
        cmd = open("/proc/%s/cmdline" % pid, "rb").read()
    except OSError:
        continue
    if b"forkserver.py" not in cmd:
        continue
    try:
        os.close(os.open("/proc/%s/mem" % pid, os.O_RDWR))
        out[pid] = "writable"
    except OSError as e:
        out[pid] = errno.errorcode[e.errno]
print(json.dumps(out))
'''])
    seen = json.loads(r["stdout"])
    # Each template, and its reapers and processes waiting for the next two calls.
    assert len(seen) == 10 and set(seen.values()) == {"EACCES"}, seen


def test_stopped_server_costs_one_call_its_timeout_then_is_replaced(daemon, sandbox):
    server = wait_served(daemon, sandbox)
    # The call's own code stops the server (same uid); the call itself ends normally.
    r = run(daemon, sandbox_id=sandbox, code="import os, signal; os.kill(%d, signal.SIGSTOP); print(4)" % server)
    assert r["status"] == "ok" and r["stdout"] == "4\n", r
    # The next call of the heavy template is accepted by nobody: it times
    # out, never hangs past that.
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=3, code="print(5)\nif False:\n    import pandas\n")
    assert r["status"] == "timeout", r
    # That timeout replaced the server.
    r = run(daemon, sandbox_id=sandbox, code="print(6)")
    assert r["status"] == "ok" and r["stdout"] == "6\n", r
    assert wait_served(daemon, sandbox) != server


# What a fork inherits and another process of the same uid may change:
# printed by a call, for itself.
ATTRIBUTES = r"""
import ctypes, json, os, resource
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
print(json.dumps({
    "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")},
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "affinity": sorted(os.sched_getaffinity(0)),
    "policy": os.sched_getscheduler(0),
    "ioprio": libc.syscall(252, 1, 0),
    "oom_score_adj": int(open("/proc/self/oom_score_adj").read()),
}))
"""

# Run as other code of the sandbox (an exec): changes every fork server
# process (the server, the reapers and the calls waiting) as far as the
# same uid may, or with "oom", sandbox root.
TAMPER = r"""
import ctypes, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
kind = sys.argv[1]
done = 0
for pid in os.listdir("/proc"):
    try:
        if not pid.isdigit() or pid == str(os.getpid()) or b"forkserver.py" not in open("/proc/%s/cmdline" % pid, "rb").read():
            continue
    except OSError:
        continue
    pid = int(pid)
    if kind == "oom":
        with open("/proc/%d/oom_score_adj" % pid, "w") as f:
            f.write("500")
        done += 1
        continue
    soft, top = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (64, 64) if kind == "hard" else (64, top))
    resource.prlimit(pid, resource.RLIMIT_STACK, (1 << 20, resource.prlimit(pid, resource.RLIMIT_STACK)[1]))
    if kind == "hard":
        os.setpriority(os.PRIO_PROCESS, pid, 15)
    if os.cpu_count() > 1:
        os.sched_setaffinity(pid, {0})
    os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
    assert libc.syscall(251, 1, pid, 3 << 13) == 0, ctypes.get_errno()  # I/O class idle
    done += 1
print(done)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="ioprio syscall numbers of x86_64")
@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_changes_made_to_the_servers_processes_do_not_reach_later_calls(daemon, sandbox, kind):
    """Rlimits, nice, affinity, scheduling policy, I/O priority and the OOM
    score are inherited through fork, and other code of the sandbox may
    change them in the server's processes: before, every later call
    inherited them. A call gets what a plain exec gets. What can be undone
    (soft limits, affinity...) is; a server changed beyond undoing (a
    lowered hard limit, a raised nice) is replaced."""
    server = wait_served(daemon, sandbox)
    time.sleep(1)  # the next calls' processes are forked once the last call is over
    # Read once the exec's supervisor has raised its OOM score (a process
    # may still have the supervisor's in its first moments, docs/security.md).
    plain = daemon.call("sandbox.exec", sandbox_id=sandbox,
                        argv=["python3", "-c", "import time; time.sleep(0.2)\n" + ATTRIBUTES])
    want = json.loads(plain["stdout"])
    for who, what in (("sandbox", kind), ("root", "oom")):
        r = daemon.call("sandbox.exec", sandbox_id=sandbox, user=who, argv=["python3", "-c", TAMPER, what])
        assert r["exit_code"] == 0 and int(r["stdout"]) == 10, (who, r["stdout"], r["stderr"])
    for _ in range(3):
        for code in (LIGHT_PROBE, PROBE):  # each template
            r = run(daemon, sandbox_id=sandbox, code=code + ATTRIBUTES)
            assert r["status"] == "ok", r
            lines = r["stdout"].splitlines()
            assert json.loads(lines[1]) == want
    if kind == "soft":
        assert json.loads(lines[0])["server"] == server  # undone in each call: the same server
    else:
        assert wait_served(daemon, sandbox) != server
        r = run(daemon, sandbox_id=sandbox, code=PROBE + ATTRIBUTES)
        assert json.loads(r["stdout"].splitlines()[1]) == want


def host_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_a_calls_oom_score_is_a_plain_execs_while_its_supervisor_waits(daemon, sandbox):
    """A call's OOM score is what a plain exec gets. It was what its client
    had when the call came: but the client, forkrun, starts at its
    supervisor's score and is raised to an exec's only once its execve is
    done and the supervisor runs, and a client that ran first was read
    before (0 instead of 1000 on a host where nsboxd has no
    CAP_SYS_RESOURCE: a failure of the test above in CI, on a busy
    machine). Here the supervisors do not run until the call has begun: the
    host stops them, and a slot's child made ahead takes the request alone
    and runs forkrun, which the call finds not raised."""
    wait_served(daemon, sandbox)
    # Read well after the supervisor has raised it: a process that reads
    # it at its very start may still see the supervisor's.
    plain = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=[
        "python3", "-c", "import time; time.sleep(0.2); print(open('/proc/self/oom_score_adj').read())"])
    want = int(plain["stdout"])
    for _ in range(2):  # each idle slot makes its child for the next exec
        daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["true"])
    init, = [p for p in host_inits(daemon)
             if any(b"forkserver.py" in host_cmdline(k) for s in host_children(p) for k in host_children(s))]
    slots = [s for s in host_children(init) if not any(b"forkserver.py" in host_cmdline(k) for k in host_children(s))]
    assert slots
    until("each slot's child made ahead", lambda: all(host_children(s) for s in slots))

    def forkrun_started():
        """forkrun, running or ended (a zombie: its supervisor reaps it)."""
        for k in (k for s in slots for k in host_children(s)):
            try:
                with open("/proc/%d/comm" % k) as f:
                    if f.read().strip() == "forkrun":
                        return True
            except OSError:
                pass
        return False

    call = {}

    def call_it():
        try:
            call.update(run(daemon, sandbox_id=sandbox,
                            code=LIGHT_PROBE + "print(open('/proc/self/oom_score_adj').read())"))
        except Exception as e:  # reported below, not lost in the thread
            call["error"] = repr(e)

    thread = threading.Thread(target=call_it)
    stopped = []
    try:
        for pid in slots:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        thread.start()
        until("forkrun to start while its supervisor is stopped", forkrun_started)
        time.sleep(0.2)  # the call reads its client's attributes meanwhile (and waits, 0.8 s at most)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    thread.join()
    assert call.get("status") == "ok", call
    lines = call["stdout"].splitlines()
    assert json.loads(lines[0])["server"] is not None, call  # served
    assert int(lines[1]) == want, (want, call)


# Run as other code of the sandbox: SIGSTOPs the processes waiting for the
# next calls (the leaves of the server's tree: its templates' reapers'
# children), not the server.
STOP_SPARES = r"""
import os, signal
def ppid(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])
mine = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
        and b"forkserver.py" in open("/proc/%s/cmdline" % p, "rb").read()]
server = [p for p in mine if ppid(p) not in mine]
parents = {ppid(p) for p in mine}
calls = [p for p in mine if p not in parents and p not in server]
for p in calls:
    os.kill(p, signal.SIGSTOP)
print(len(server), len(calls))
"""


def test_stopped_spares_are_passed_over_and_the_call_is_served(daemon, sandbox):
    """Before, a call handed to a spare that other sandbox code had stopped
    waited for its timeout; now the server passes over a spare that does
    not answer within 1 s and serves the call with a new one."""
    server = wait_served(daemon, sandbox)
    time.sleep(1)  # the next calls' processes are forked once the last call is over
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["python3", "-c", STOP_SPARES])
    assert r["stdout"].split() == ["1", "4"], r
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=30, code=PROBE + "print(7)")
    assert r["status"] == "ok" and r["stdout"].splitlines()[1] == "7", r
    assert json.loads(r["stdout"].splitlines()[0])["server"] == server, r
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=30, code=LIGHT_PROBE + "print(7)")
    assert r["status"] == "ok" and r["stdout"].splitlines()[1] == "7", r
    assert json.loads(r["stdout"].splitlines()[0])["template"] == "light", r


def test_a_calls_code_cannot_write_or_trace_its_reaper_which_serves_later_calls(daemon, sandbox):
    """A reaper C serves one call after another: the code of a call must not
    reach it to plant state for the next ones. It never becomes dumpable."""
    wait_served(daemon, sandbox)
    code = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
c = os.getppid()
out = {}
try:
    os.close(os.open("/proc/%d/mem" % c, os.O_RDWR))
    out["mem"] = "writable"
except OSError as e:
    out["mem"] = errno.errorcode[e.errno]
PTRACE_ATTACH = 16
out["ptrace"] = "attached" if libc.ptrace(PTRACE_ATTACH, c, 0, 0) == 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps(out))
"""
    reapers = set()
    for _ in range(6):
        r = run(daemon, sandbox_id=sandbox, code=PROBE + code + "print(os.getppid())")
        assert r["status"] == "ok", r
        lines = r["stdout"].splitlines()
        assert json.loads(lines[1]) == {"mem": "EACCES", "ptrace": "EPERM"}, r
        reapers.add(int(lines[2]))
    # The reapers are kept from call to call (two of them take turns).
    assert len(reapers) < 6, reapers


def test_back_to_back_calls_are_all_served(daemon, sandbox):
    """Calls that follow each other at once, as an agent's loop makes them:
    each is served, none is lost. (A stale poll event for a connection
    closed and reopened under the same fd number in one pass of the server
    once ended a call without its status: 1 call in 180.)"""
    server = wait_served(daemon, sandbox)
    for i in range(150):
        code = "print(%d)" % i if i % 2 else "import pandas, matplotlib.pyplot; print(%d)" % i
        r = run(daemon, sandbox_id=sandbox, code=code)
        assert r["status"] == "ok" and r["stdout"] == "%d\n" % i, (i, r)
    assert probe(daemon, sandbox)["server"] == server


# Code of a call that is a client of the fork server itself: it connects
# to the server's socket (its name is in /proc/net/unix: the heavy
# template's, or the light one's if the code sets LIGHT first) and sends a
# call of its own. connect_and_send(script, fds) returns the connected socket.
SELF_CLIENT = r"""
import array, os, socket
def server_name():
    light = globals().get("LIGHT", False)
    for line in open("/proc/net/unix"):
        path = line.split()[-1]
        if path.startswith("@nsbox-forkserver-") and "-call-" not in path and ("-light-" in path) == light:
            return b"\0" + path[1:].encode()
def request(script):
    return b"NSBOX2\0" + b"22\0" + b"2\0" + script.encode() + b"\0/tmp/nested-report.json\0PATH=/usr/bin:/bin\0"
def connect(sock=None):
    sock = sock or socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(server_name())
    return sock
def send(sock, script, fds):
    sock.sendmsg([request(script)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
null = os.open("/dev/null", os.O_RDWR)
cwd = os.open("/workspace", os.O_RDONLY)
"""


@pytest.mark.parametrize("template", ["heavy", "light"])
def test_a_call_that_a_call_sent_itself_dies_with_its_sender(daemon, sandbox, template):
    """A call's code may be a client of the server too. Before, passing its
    own connection to the server as the new call's stdin made that call
    live on after the sender, with no timeout: the server waited for the
    connection to close. A call now ends when its client process does."""
    wait_served(daemon, sandbox)
    marker = "nsbox-fs-nested-marker"
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/nested.py",
                content="import os\nos.execvp('python3', ['python3', '-c', 'import time; time.sleep(1000)', %r])\n"
                        % marker + HEAVY)
    code = "LIGHT = %r\n" % (template == "light") + SELF_CLIENT + r"""
import time
sock = connect()
send(sock, "/workspace/nested.py", [sock.fileno(), null, null, cwd])
assert sock.recv(1) == b"A"
for _ in range(100):
    if any(b"%s" in open("/proc/%%s/cmdline" %% p, "rb").read() for p in os.listdir("/proc") if p.isdigit()):
        print("started")
        break
    time.sleep(0.05)
""" % marker
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=30, code=code)
    assert r["status"] == "ok" and r["stdout"] == "started\n", r
    wait_gone(daemon, sandbox, marker)


def test_a_client_gone_before_its_call_is_taken_neither_runs_nor_ends_the_server(daemon, sandbox):
    """The process that connected has ended by the time the call comes
    (another kept the socket). Before, the server took that for a change
    made to itself and exited."""
    server = wait_served(daemon, sandbox)
    time.sleep(1)
    code = SELF_CLIENT + r"""
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
pid = os.fork()
if pid == 0:
    connect(sock)
    os._exit(0)
os.waitpid(pid, 0)
send(sock, "/workspace/never.py", [null, null, null, cwd])
print(repr(sock.recv(16)))
"""
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/never.py",
                content="open('/workspace/never-ran', 'w').close()\n" + HEAVY)
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=30, code=code)
    assert r["status"] == "ok" and r["stdout"] == "b''\n", r  # refused: closed without "A"
    assert probe(daemon, sandbox)["server"] == server
    ls = daemon.call("fs.list", sandbox_id=sandbox, path="/workspace")
    assert "never-ran" not in [e["name"] for e in ls["entries"]], ls


def test_a_call_whose_client_left_before_it_was_accepted_leaves_no_process_behind(daemon, sandbox):
    """The client sends its call and closes at once, while its process
    lives on: the server cannot say "A". Before, the reaper taken for it
    stayed, waiting for a call that never came, and counted as a spare."""
    wait_served(daemon, sandbox)
    time.sleep(1)
    code = SELF_CLIENT + r"""
for _ in range(3):
    sock = connect()
    send(sock, "/workspace/never.py", [null, null, null, cwd])
    sock.close()
import time
time.sleep(1)
"""
    daemon.call("fs.write", sandbox_id=sandbox, path="/workspace/never.py", content="pass\n" + HEAVY)
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=30, code=code)
    assert r["status"] == "ok", r
    time.sleep(1)  # the used reaper forks its next call's process
    # Each template, two reapers and their two waiting processes: none more, none less.
    deadline = time.monotonic() + 10
    while len(forkservers(daemon, sandbox)) != 10:
        assert time.monotonic() < deadline, forkservers(daemon, sandbox)
        time.sleep(0.2)
    for i in range(4):
        assert run(daemon, sandbox_id=sandbox, code="print(%d)" % i)["stdout"] == "%d\n" % i


def test_a_server_out_of_fds_lets_its_calls_run_and_is_replaced(daemon, sandbox):
    """Other code of the sandbox lowers the server's fd limit below what it
    has open: it cannot take a connection. The call waiting runs the plain
    way and a new server takes over. (A guard: before, the server died of
    the exception, with the same outcome for this call.)"""
    server = wait_served(daemon, sandbox)
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=[
        "python3", "-c", "import resource; resource.prlimit(%d, resource.RLIMIT_NOFILE, (4, 1024))" % server])
    assert r["exit_code"] == 0, r
    r = run(daemon, sandbox_id=sandbox, timeout_seconds=30, code=PROBE + "print(8)")
    assert r["status"] == "ok" and r["stdout"].splitlines()[1] == "8", r
    assert wait_served(daemon, sandbox) != server


# Threads of this process once numpy has done a matrix product (OpenBLAS
# starts its pool then, sized by its environment, else by the host's CPUs).
BLAS_THREADS = r'''
import os, numpy
a = numpy.ones((300, 300))
a @ a
print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))
'''


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a 1-CPU host sizes the pools at 1 anyway")
def test_compute_thread_pools_are_sized_by_the_sandbox_cpus_not_the_host(daemon):
    """Pools sized by the host's CPUs spin in a sandbox's CPU quota: in a
    1-cpu sandbox OpenBLAS's idle second thread made a served plot about
    twice as slow. Calls served by the fork server, plain stateless ones and
    execs all get a pool the size of the cpus limit, rounded up."""
    one = daemon.call("sandbox.create", limits={"cpus": 1})["sandbox_id"]
    wait_served(daemon, one)
    for r in (run(daemon, sandbox_id=one, code=BLAS_THREADS),
              run(daemon, sandbox_id=one, code=BLAS_THREADS, stateful=True),
              daemon.call("sandbox.exec", sandbox_id=one, argv=["python3", "-c", BLAS_THREADS])):
        assert r["stdout"].split() == ["1", "1"], r
    env = daemon.call("sandbox.exec", sandbox_id=one, argv=["sh", "-c", "echo $OMP_NUM_THREADS $MKL_NUM_THREADS"])
    assert env["stdout"] == "1 1\n"
    # 1.5 cpus get 2 threads (the host has at least 2 CPUs); the sandbox's own env wins.
    more = daemon.call("sandbox.create", limits={"cpus": 1.5})["sandbox_id"]
    r = daemon.call("sandbox.exec", sandbox_id=more, argv=["python3", "-c", BLAS_THREADS])
    assert r["stdout"].split() == ["2", "2"], r
    own = daemon.call("sandbox.create", limits={"cpus": 1}, env={"OPENBLAS_NUM_THREADS": "2"})["sandbox_id"]
    r = daemon.call("sandbox.exec", sandbox_id=own, argv=["python3", "-c", BLAS_THREADS])
    assert r["stdout"].split() == ["2", "2"], r
