# SPDX-License-Identifier: Apache-2.0
"""sandbox.pause / sandbox.resume: a paused sandbox's processes are
frozen by the cgroup freezer (v1 freezer hierarchy or v2 cgroup.freeze), use
no CPU and keep their memory; requests that need them running resume it; a
paused sandbox is removed, or cleaned up after a crash of nsboxd, with nothing
left stuck."""
import glob
import json
import os
import signal
import subprocess
import time

import pytest
from conftest import BUILD, Daemon, ok
from nsbox_client import RpcError, as_uid

# A uid pool of its own for the daemons started here, so that counting a
# sandbox's processes never sees another daemon's.
POOL_BASE = 1_600_000_000
POOL_RANGES = 16
BUSY_LOOP = "while :; do :; done"


def wait_until(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def cgroups_named(sid):
    hits = []
    for dirpath, dirnames, _ in os.walk("/sys/fs/cgroup"):
        hits += [os.path.join(dirpath, d) for d in dirnames if d == sid]
    return hits


def frozen(sid):
    """What the kernel says of the sandbox's freezer: True, False, or None (no freezer dir)."""
    for d in cgroups_named(sid):
        if os.path.exists(os.path.join(d, "freezer.state")):  # v1
            with open(os.path.join(d, "freezer.state")) as f:
                return f.read().strip() == "FROZEN"
        if os.path.exists(os.path.join(d, "cgroup.freeze")):  # v2
            with open(os.path.join(d, "cgroup.events")) as f:
                return "frozen 1" in f.read()
    return None


def sandbox_pids(sid):
    pids = set()
    for d in cgroups_named(sid):
        for root, _, files in os.walk(d):
            if "cgroup.procs" in files:
                pids |= {int(p) for p in open(os.path.join(root, "cgroup.procs")).read().split()}
    return pids


def process_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def cpu_us(daemon, sid):
    return daemon.call("sandbox.info", sandbox_id=sid)["stats"]["cpu_usage_us"]


def error_of(fn):
    with pytest.raises(RpcError) as e:
        fn()
    return e.value.error


def start_busy_loop(daemon, sid):
    r = daemon.call("sandbox.exec", sandbox_id=sid, command=BUSY_LOOP, background=True, timeout_seconds=600)
    # running: it has used CPU
    base = cpu_us(daemon, sid)
    assert wait_until(lambda: cpu_us(daemon, sid) > base + 20_000)
    return r["exec_id"]


def test_paused_sandbox_uses_no_cpu_and_runs_on_after_resume(daemon, sandbox):
    start_busy_loop(daemon, sandbox)
    p = daemon.call("sandbox.pause", sandbox_id=sandbox, force=True)
    assert p["state"] == "paused" and p["paused_at"].endswith("Z")
    assert frozen(sandbox) is True
    # No task runs: the loop is not R any more (v1 shows frozen tasks as D, v2 as S).
    states = {process_state(pid) for pid in sandbox_pids(sandbox)}
    assert states and states <= {"D", "S"}, states
    info = daemon.call("sandbox.info", sandbox_id=sandbox)
    assert info["state"] == "paused" and info["paused_at"] == p["paused_at"]
    listed = {s["sandbox_id"]: s for s in daemon.call("sandbox.list")["sandboxes"]}
    assert listed[sandbox]["state"] == "paused"
    before = cpu_us(daemon, sandbox)
    time.sleep(1.2)
    # Nothing at all ran: not the loop, not the init, not a supervisor.
    assert cpu_us(daemon, sandbox) == before
    r = daemon.call("sandbox.resume", sandbox_id=sandbox)
    assert r["state"] == "running" and "paused_at" not in r
    assert frozen(sandbox) is False
    assert wait_until(lambda: cpu_us(daemon, sandbox) > before + 50_000), "the loop did not run on"


def test_pause_refuses_a_sandbox_with_work_running_unless_forced(daemon, sandbox):
    ex = start_busy_loop(daemon, sandbox)
    e = error_of(lambda: daemon.call("sandbox.pause", sandbox_id=sandbox))
    assert e["data"]["kind"] == "busy" and "force" in e["message"]
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "running"
    assert daemon.call("sandbox.pause", sandbox_id=sandbox, force=True)["state"] == "paused"
    # What nsboxd holds is answered without resuming it.
    assert daemon.call("exec.status", exec_id=ex)["running"] is True
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "paused"
    # exec.kill needs the exec's supervisor: it resumes the sandbox, and the loop dies.
    daemon.call("exec.kill", exec_id=ex)
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "running"
    assert wait_until(lambda: daemon.call("exec.status", exec_id=ex)["running"] is False)


def test_server_info_lists_the_pause_feature(daemon):
    assert "pause" in daemon.call("server.info")["features"]


def test_paused_time_counts_towards_the_timeout_of_a_forced_pauses_exec(daemon, sandbox):
    ex = daemon.call("sandbox.exec", sandbox_id=sandbox, command="sleep 100", background=True,
                     timeout_seconds=1)["exec_id"]
    daemon.call("sandbox.pause", sandbox_id=sandbox, force=True)
    time.sleep(2)
    # Its deadline passed while frozen: it is killed as soon as it runs again.
    daemon.call("sandbox.resume", sandbox_id=sandbox)
    assert wait_until(lambda: daemon.call("exec.status", exec_id=ex)["running"] is False)
    assert daemon.call("exec.status", exec_id=ex)["timed_out"] is True


def test_pause_and_resume_are_idempotent(daemon, sandbox):
    first = daemon.call("sandbox.pause", sandbox_id=sandbox)
    again = daemon.call("sandbox.pause", sandbox_id=sandbox)
    assert again["state"] == "paused" and again["paused_at"] == first["paused_at"]
    assert daemon.call("sandbox.resume", sandbox_id=sandbox)["state"] == "running"
    assert daemon.call("sandbox.resume", sandbox_id=sandbox)["state"] == "running"


def test_exec_resumes_a_paused_sandbox_and_files_work_while_paused(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="note.txt", content="before")
    daemon.call("sandbox.pause", sandbox_id=sandbox)
    # The file API works on the frozen sandbox as it is.
    assert daemon.call("fs.read", sandbox_id=sandbox, path="note.txt")["content"] == "before"
    daemon.call("fs.write", sandbox_id=sandbox, path="note.txt", content="while paused")
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "paused"
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, command="cat note.txt", timeout_seconds=30)
    assert r["exit_code"] == 0 and r["stdout"] == "while paused"
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "running"
    assert frozen(sandbox) is False


def test_stateful_interpreter_variables_survive_pause_and_resume(daemon, sandbox):
    r = daemon.call("python.run", sandbox_id=sandbox, code="x = 41\nimport os\npid = os.getpid()", stateful=True)
    assert r["status"] == "ok", r
    daemon.call("sandbox.pause", sandbox_id=sandbox)
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "paused"
    r = daemon.call("python.run", sandbox_id=sandbox, code="(x + 1, pid == os.getpid())", stateful=True)
    assert r["status"] == "ok" and r["result"] == "(42, True)", r
    # and once more with an explicit resume
    daemon.call("sandbox.pause", sandbox_id=sandbox)
    daemon.call("sandbox.resume", sandbox_id=sandbox)
    r = daemon.call("python.run", sandbox_id=sandbox, code="x", stateful=True)
    assert r["result"] == "41", r


def test_python_run_by_session_resumes_its_paused_sandbox(daemon):
    sid = daemon.call("sandbox.create", session_id="pause-session")["sandbox_id"]
    try:
        daemon.call("sandbox.pause", sandbox_id=sid)
        r = daemon.call("python.run", session_id="pause-session", code="print(6 * 7)")
        assert r["status"] == "ok" and r["stdout"] == "42\n", r
        assert daemon.call("sandbox.info", sandbox_id=sid)["state"] == "running"
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_remove_of_a_paused_sandbox_leaves_nothing(daemon):
    sid = daemon.call("sandbox.create")["sandbox_id"]
    start_busy_loop(daemon, sid)
    daemon.call("sandbox.pause", sandbox_id=sid, force=True)
    procs = [int(p) for d in cgroups_named(sid) for p in open(os.path.join(d, "cgroup.procs")).read().split()]
    assert procs, cgroups_named(sid)
    # without force: its background exec still counts as running work
    e = error_of(lambda: daemon.call("sandbox.remove", sandbox_id=sid))
    assert e["data"]["kind"] == "busy"
    assert daemon.call("sandbox.remove", sandbox_id=sid, force=True)["removed"] is True
    assert wait_until(lambda: cgroups_named(sid) == []), cgroups_named(sid)
    assert wait_until(lambda: not any(os.path.exists("/proc/%d" % p) for p in procs))
    assert not os.path.exists(os.path.join(daemon.state, "sandboxes", sid))
    assert sid not in [s["sandbox_id"] for s in daemon.call("sandbox.list", include_inactive=True)["sandboxes"]]


def test_pause_bad_input_gets_clear_errors(daemon, sandbox):
    with daemon.client() as c:
        for method in ("sandbox.pause", "sandbox.resume"):
            e = error_of(lambda: c.call(method))
            assert e["data"]["kind"] == "invalid_params" and "sandbox_id" in e["message"]
            e = error_of(lambda: c.call(method, sandbox_id="00000000-0000-0000-0000-000000000000"))
            assert e["data"]["kind"] == "not_found"
            e = error_of(lambda: c.call(method, sandbox_id="../../etc"))
            assert e["data"]["kind"] == "not_found"
            e = error_of(lambda: c.call(method, sandbox_id=sandbox, bogus=1))
            assert e["data"]["kind"] == "invalid_params"
        e = error_of(lambda: c.call("sandbox.pause", sandbox_id=sandbox, force="yes"))
        assert e["data"]["kind"] == "invalid_params"
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "running"


def test_another_uid_can_neither_pause_nor_resume_nor_wake_a_sandbox(daemon, sandbox):
    os.chmod(daemon.socket, 0o666)  # in production: membership of group nsbox
    out = as_uid(1000, daemon.socket, [["sandbox.pause", {"sandbox_id": sandbox}]])
    assert out[0]["error"]["data"]["kind"] == "not_found"
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "running"
    daemon.call("sandbox.pause", sandbox_id=sandbox)
    out = as_uid(1000, daemon.socket, [["sandbox.resume", {"sandbox_id": sandbox}],
                                       ["sandbox.exec", {"sandbox_id": sandbox, "command": "true"}],
                                       ["python.run", {"sandbox_id": sandbox, "code": "1"}]])
    for reply in out:
        assert reply["error"]["data"]["kind"] == "not_found", reply
    assert daemon.call("sandbox.info", sandbox_id=sandbox)["state"] == "paused"
    assert frozen(sandbox) is True


def test_cli_pause_ls_and_resume(daemon, sandbox):
    assert ok(daemon.cli("pause", sandbox)).stdout.decode().strip() == sandbox
    table = ok(daemon.cli("ls")).stdout.decode()
    assert [line for line in table.splitlines() if line.startswith(sandbox)][0].split()[1] == "paused"
    shown = ok(daemon.cli("ls", "-q", "--filter", "state=paused")).stdout.decode().split()
    assert sandbox in shown
    info = json.loads(ok(daemon.cli("--json", "info", sandbox)).stdout)
    assert info["state"] == "paused" and info["paused_at"]
    assert json.loads(ok(daemon.cli("--json", "resume", sandbox)).stdout)["state"] == "running"
    r = daemon.cli("pause", "00000000-0000-0000-0000-000000000000")
    assert r.returncode == 125 and b"no sandbox" in r.stderr
    assert daemon.cli("resume").returncode == 125


def test_mcp_pause_and_resume_tools_by_session_id(daemon):
    sid = daemon.call("sandbox.create", session_id="mcp-pause")["sandbox_id"]
    p = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "mcp"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        def call(rid, method, params):
            p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n")
                          .encode())
            p.stdin.flush()
            while True:
                m = json.loads(p.stdout.readline())
                if m.get("id") == rid:
                    return m

        call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "t", "version": "0"}})
        r = call(2, "tools/call", {"name": "pause_sandbox", "arguments": {"session_id": "mcp-pause"}})
        assert not r["result"].get("isError"), r
        assert json.loads(r["result"]["content"][0]["text"])["state"] == "paused"
        assert daemon.call("sandbox.info", sandbox_id=sid)["state"] == "paused"
        r = call(3, "tools/call", {"name": "resume_sandbox", "arguments": {"sandbox_id": sid}})
        assert json.loads(r["result"]["content"][0]["text"])["state"] == "running"
        r = call(4, "tools/call", {"name": "pause_sandbox", "arguments": {"session_id": "no-such-session"}})
        assert r["result"]["isError"] is True
    finally:
        p.stdin.close()
        p.wait(timeout=10)
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


# --- daemons of their own ------------------------------------------------------------------


def own_daemon(*args):
    return Daemon(extra_args=["--uid-pool-base", str(POOL_BASE), "--uid-pool-ranges", str(POOL_RANGES),
                              "--warm-pool", "0", *args])


def stop(d):
    rc = d.stop()
    assert rc == 0, d.final_log[-4000:]


def test_idle_action_pause_pauses_instead_of_removing():
    d = own_daemon("--idle-action", "pause", "--auto-resume", "0")
    try:
        sid = d.call("sandbox.create", idle_timeout_seconds=1)["sandbox_id"]
        assert wait_until(lambda: d.call("sandbox.info", sandbox_id=sid)["state"] == "paused"), d.read_log()
        assert frozen(sid) is True
        # It stays paused (not reaped) well past its idle timeout.
        time.sleep(2.5)
        assert d.call("sandbox.info", sandbox_id=sid)["state"] == "paused"
        # auto_resume 0: a request that needs it running fails, clearly
        e = error_of(lambda: d.call("sandbox.exec", sandbox_id=sid, command="true"))
        assert e["data"]["kind"] == "unavailable" and "paused" in e["message"]
        assert d.call("sandbox.resume", sandbox_id=sid)["state"] == "running"
        assert d.call("sandbox.exec", sandbox_id=sid, command="echo up")["stdout"] == "up\n"
    finally:
        stop(d)


def test_paused_timeout_removes_a_sandbox_paused_too_long():
    d = own_daemon("--paused-timeout-seconds", "1")
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.pause", sandbox_id=sid)
        assert wait_until(lambda: sid not in [s["sandbox_id"] for s in d.call("sandbox.list")["sandboxes"]])
        assert wait_until(lambda: cgroups_named(sid) == [])
    finally:
        stop(d)


def test_bad_idle_action_is_refused_at_start():
    p = subprocess.run([os.path.join(BUILD, "nsboxd"), "--idle-action", "hibernate", "--state-dir", "/nonexistent"],
                       capture_output=True, timeout=30)
    assert p.returncode != 0 and b"idle_action" in p.stderr


def pool_processes():
    """Host pids whose user namespace maps onto this module's uid pool."""
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


def serving(d):
    try:
        return bool(d.call("server.info")["version"])
    except OSError:
        return False


def test_nsboxd_killed_while_a_sandbox_is_paused_next_start_cleans_up():
    d = own_daemon()
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        start_busy_loop(d, sid)
        d.call("sandbox.pause", sandbox_id=sid, force=True)
        left = pool_processes()
        assert left
        d.proc.kill()
        d.proc.wait()
        # The crash left them frozen.
        assert frozen(sid) is True and set(pool_processes()) == set(left)
        args = d.proc.args
        env = {k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")}
        d.proc = subprocess.Popen(args, stdout=d.log, stderr=subprocess.STDOUT, env=env)
        assert wait_until(lambda: serving(d), timeout=30), d.read_log()[-3000:]
        # Thawed, then killed: nothing of the sandbox is left, nothing stuck in D state.
        assert wait_until(lambda: pool_processes() == [], timeout=10), [
            open("/proc/%d/stat" % p).read() for p in pool_processes()]
        assert cgroups_named(sid) == []
        assert not os.path.exists(os.path.join(d.state, "sandboxes", sid))
        assert "stale" in d.read_log()
    finally:
        if d.proc.poll() is None:
            stop(d)
        for p in pool_processes():
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
