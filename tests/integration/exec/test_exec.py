# SPDX-License-Identifier: Apache-2.0
"""sandbox.exec and the sandbox lifecycle in detail: streaming, background
execs, output limits and encodings, env/cwd/stdin/user, killing whole
process trees, idle reaping, limits on the number of sandboxes."""
import base64
import os
import signal
import threading
import time

import pytest
from conftest import Daemon
from nsbox_client import RpcError

pytestmark = [pytest.mark.core]


def exec_(daemon, sb, **params):
    return daemon.call("sandbox.exec", sandbox_id=sb, **params)


def test_env_cwd_stdin_and_user(daemon, sandbox):
    r = exec_(daemon, sandbox, command='echo "$GREETING"; pwd; cat; id -u', env={"GREETING": "hi there"},
              cwd="/tmp", stdin="from stdin\n")
    assert r["stdout"] == "hi there\n/tmp\nfrom stdin\n1000\n"
    assert exec_(daemon, sandbox, argv=["id", "-u"], user="root")["stdout"] == "0\n"


def test_an_exec_enters_its_cwd_with_its_own_credentials(daemon, sandbox):
    """cwd is entered after the uid drop: a uid 1000 exec cannot start in
    root's 0700 /root (it did, and read a file there, when the chdir came
    before setresuid); root can, and so can uid 1000 where it may."""
    exec_(daemon, sandbox, user="root", command="mkdir -p /root && chmod 0700 /root && echo secret > /root/s")
    r = exec_(daemon, sandbox, command="cat s", cwd="/root")
    assert r["exit_code"] == 126 and r["stdout"] == "", r
    assert "working directory /root" in r["stderr"] and "Permission denied" in r["stderr"], r
    assert exec_(daemon, sandbox, user="root", command="cat s", cwd="/root")["stdout"] == "secret\n"
    assert exec_(daemon, sandbox, command="pwd", cwd="/tmp")["stdout"] == "/tmp\n"


def test_sandbox_env_applies_to_every_exec(daemon):
    sb = daemon.call("sandbox.create", env={"FROM_CREATE": "1"})["sandbox_id"]
    try:
        r = exec_(daemon, sb, command="echo $FROM_CREATE$FROM_EXEC", env={"FROM_EXEC": "2"})
        assert r["stdout"] == "12\n"
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


def test_max_output_bytes_truncates_and_says_so(daemon, sandbox):
    r = exec_(daemon, sandbox, command="head -c 100000 /dev/zero | tr '\\0' x", max_output_bytes=1000)
    assert r["truncated"] is True
    assert r["stdout"] == "x" * 1000
    assert r["exit_code"] == 0


def test_invalid_utf8_is_replaced_and_base64_is_exact(daemon, sandbox):
    r = exec_(daemon, sandbox, command="printf 'ok\\377\\376end'")
    assert r["stdout"] == "ok\ufffd\ufffdend"
    r = exec_(daemon, sandbox, command="printf 'ok\\377\\376end'", encoding="base64")
    assert base64.b64decode(r["stdout"]) == b"ok\xff\xfeend"
    assert r["encoding"] == "base64"


def test_stream_sends_output_as_it_arrives(daemon, sandbox):
    with daemon.client() as c:
        rid = c.request("sandbox.exec", {"sandbox_id": sandbox, "stream": True,
                                         "command": "echo one; sleep 1; echo two >&2; echo three"})
        started = []
        first = c.read_message()
        if first["method"] == "exec.started":  # the exec's id as soon as it runs
            started.append(first)
            first = c.read_message()
        assert first["method"] == "exec.output"
        assert first["params"]["data"] == "one\n"  # before the command ended
        final = c.response(rid)
    started += [n for n in c.notifications if n["method"] == "exec.started"]
    assert len(started) == 1 and started[0]["params"]["exec_id"] == final["result"]["exec_id"]
    chunks = [n["params"] for n in c.notifications if n["method"] == "exec.output"] + [first["params"]]
    out = "".join(p["data"] for p in chunks if p["stream"] == "stdout")
    err = "".join(p["data"] for p in chunks if p["stream"] == "stderr")
    assert sorted(out.split()) == ["one", "three"] and err == "two\n"
    assert final["result"]["stdout"] == "" and final["result"]["exit_code"] == 0


def test_background_exec_status_output_kill_list(daemon, sandbox):
    r = exec_(daemon, sandbox, command="echo started; sleep 300", background=True, timeout_seconds=600)
    assert set(r) == {"exec_id", "pid"}
    eid = r["exec_id"]
    deadline = time.monotonic() + 10
    while daemon.call("exec.output", exec_id=eid)["stdout"] != "started\n":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    out = daemon.call("exec.output", exec_id=eid)
    assert out["running"] is True
    assert daemon.call("exec.output", exec_id=eid, since=out["next"])["stdout"] == ""
    assert daemon.call("exec.status", exec_id=eid)["running"] is True
    assert eid in [e["exec_id"] for e in daemon.call("exec.list", sandbox_id=sandbox)["execs"]]
    # a running exec makes the sandbox busy
    with pytest.raises(RpcError) as e:
        daemon.call("sandbox.remove", sandbox_id=sandbox)
    assert e.value.kind == "busy"
    daemon.call("exec.kill", exec_id=eid)
    deadline = time.monotonic() + 10
    while daemon.call("exec.status", exec_id=eid)["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    st = daemon.call("exec.status", exec_id=eid)
    assert st["exit_code"] is None and st["signal"] == 9


def test_exec_output_with_wait_ms_answers_on_new_output_and_on_the_end(daemon, sandbox):
    """exec.output {wait_ms} waits for output past since, or for the end, instead
    of answering nothing at once: a reader needs no poll. The answer of an ended
    exec says how it ended (no exec.status, which sends the whole output again)."""
    eid = exec_(daemon, sandbox, command='read a; echo "got $a"; read b; echo "$b" >&2; exit 7',
                background=True, stdin_stream=True, timeout_seconds=120)["exec_id"]
    with daemon.client() as waiter:
        rid = waiter.request("exec.output", {"exec_id": eid, "since": {"stdout": 0, "stderr": 0},
                                             "wait_ms": 60000})
        twin = waiter.request("exec.output", {"exec_id": eid, "wait_ms": 60000})
        daemon.call("exec.stdin", exec_id=eid, data="one\n")
        answers = {m["id"]: m["result"] for m in (waiter.read_message(), waiter.read_message())}
        out = answers[rid]
        assert answers[twin]["stdout"] == "got one\n", answers
        assert out["stdout"] == "got one\n" and out["running"] is True, out
        assert "exit_code" not in out and "status" not in out, out
        rid = waiter.request("exec.output", {"exec_id": eid, "since": out["next"], "wait_ms": 60000})
        daemon.call("exec.stdin", exec_id=eid, data="two\n", eof=True)
        out = waiter.response(rid)["result"]
        while out["running"]:  # the stderr line may come a moment before the exit
            out = waiter.call("exec.output", exec_id=eid, since=out["next"], wait_ms=60000)
    assert out["exit_code"] == 7 and out["status"] == "exited" and out["signal"] is None, out
    assert out["timed_out"] is False, out
    # an ended exec is answered at once, with its end
    done = daemon.call("exec.output", exec_id=eid, since=out["next"], wait_ms=60000)
    assert done["running"] is False and done["exit_code"] == 7 and done["stdout"] == "", done


def test_exec_output_wait_ends_at_wait_ms_with_a_leaving_client_and_on_bad_input(daemon, sandbox):
    eid = exec_(daemon, sandbox, command="sleep 300", background=True, timeout_seconds=600)["exec_id"]
    quiet = daemon.call("exec.output", exec_id=eid, wait_ms=20)
    assert quiet["running"] is True and quiet["stdout"] == "" and "exit_code" not in quiet, quiet
    # a waiting client that leaves (with one wait or two): nsboxd forgets its calls and serves on
    for n in range(20):
        c = daemon.client()
        for _ in range(1 + n % 2):
            c.request("exec.output", {"exec_id": eid, "wait_ms": 60000})
        c.close()
    for bad in (-1, "10", 1.5, 60001, 10 ** 12, True):
        with pytest.raises(RpcError) as e:
            daemon.call("exec.output", exec_id=eid, wait_ms=bad)
        assert e.value.kind == "invalid_params" and "wait_ms" in str(e.value), bad
    with pytest.raises(RpcError) as e:
        daemon.call("exec.output", exec_id=eid, wait_ms=10, tail=3)
    assert e.value.kind == "invalid_params"
    # killed while a call waits: the call is answered with the end
    with daemon.client() as waiter:
        rid = waiter.request("exec.output", {"exec_id": eid, "wait_ms": 60000})
        daemon.call("exec.kill", exec_id=eid)
        out = waiter.response(rid)["result"]
        while out["running"]:
            out = waiter.call("exec.output", exec_id=eid, since=out["next"], wait_ms=60000)
    assert out["signal"] == 9 and out["status"] == "killed", out


def test_each_exec_times_out_on_its_own_deadline(daemon, sandbox):
    """All execs share one timer (armed for the earliest deadline): a later
    exec with a sooner deadline, and one started after a short-lived exec
    whose deadline is gone, both time out when they should, and a long
    one that started first runs on."""
    slow = exec_(daemon, sandbox, command="sleep 300", background=True, timeout_seconds=30)["exec_id"]
    exec_(daemon, sandbox, argv=["true"], timeout_seconds=1)  # its deadline goes away with it
    t0 = time.monotonic()
    r = exec_(daemon, sandbox, command="sleep 300", timeout_seconds=2)
    took = time.monotonic() - t0
    assert r["timed_out"] is True and r["signal"] == signal.SIGKILL, r
    assert 1.9 <= took < 10, took
    t0 = time.monotonic()
    r = exec_(daemon, sandbox, command="sleep 300", timeout_seconds=1)
    took = time.monotonic() - t0
    assert r["timed_out"] is True and 0.9 <= took < 10, (r, took)
    assert daemon.call("exec.status", exec_id=slow)["running"] is True
    daemon.call("exec.kill", exec_id=slow)


def test_unknown_exec_id_is_not_found(daemon):
    with pytest.raises(RpcError) as e:
        daemon.call("exec.status", exec_id="00000000-0000-4000-8000-000000000000")
    assert e.value.kind == "not_found"


def count_sleepers(daemon, sb, marker):
    """Processes whose command line matches marker, a regex written so that
    it does not match itself (e.g. "474[7]")."""
    r = exec_(daemon, sb, command="grep -l %s /proc/[0-9]*/cmdline 2>/dev/null | wc -l" % marker)
    return int(r["stdout"])


@pytest.mark.parametrize("how", ["timeout", "kill"])
def test_timeout_or_kill_ends_daemonized_descendants(daemon, sandbox, how):
    # A double-forked, setsid'd daemon that ignores SIGHUP and SIGTERM.
    script = ("(setsid sh -c 'trap \"\" HUP TERM; exec sleep 3131' &) ; "
              "(sh -c 'trap \"\" HUP TERM; sleep 3132' &) ; sleep 300")
    if how == "timeout":
        r = exec_(daemon, sandbox, command=script, timeout_seconds=2)
        assert r["timed_out"] is True
    else:
        eid = exec_(daemon, sandbox, command=script, background=True)["exec_id"]
        deadline = time.monotonic() + 10
        while count_sleepers(daemon, sandbox, "313[12]") < 2:  # both descendants run
            assert time.monotonic() < deadline, "the daemonized descendants did not start"
            time.sleep(0.05)
        daemon.call("exec.kill", exec_id=eid)
        deadline = time.monotonic() + 10
        while daemon.call("exec.status", exec_id=eid)["running"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    deadline = time.monotonic() + 10
    while count_sleepers(daemon, sandbox, "313[12]") > 0:
        assert time.monotonic() < deadline, "a daemonized descendant survived"
        time.sleep(0.1)


def test_exec_is_killed_when_its_client_goes_away(daemon, sandbox):
    c = daemon.client()
    c.request("sandbox.exec", {"sandbox_id": sandbox, "command": "exec sleep 4747"})
    deadline = time.monotonic() + 10
    while count_sleepers(daemon, sandbox, "474[7]") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count_sleepers(daemon, sandbox, "474[7]") == 1
    c.close()
    deadline = time.monotonic() + 10
    while count_sleepers(daemon, sandbox, "474[7]") > 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_idle_sandbox_is_reaped_but_a_running_exec_keeps_it():
    d = Daemon()
    try:
        idle = d.call("sandbox.create", idle_timeout_seconds=1, idle_action="remove")["sandbox_id"]
        busy = d.call("sandbox.create", idle_timeout_seconds=1, idle_action="remove")["sandbox_id"]
        result = {}
        t = threading.Thread(target=lambda: result.update(
            r=d.call("sandbox.exec", sandbox_id=busy, argv=["sleep", "4"])))
        t.start()
        time.sleep(3)
        ids = {s["sandbox_id"] for s in d.call("sandbox.list")["sandboxes"]}
        assert idle not in ids and busy in ids
        t.join()
        assert result["r"]["exit_code"] == 0
        deadline = time.monotonic() + 10
        while busy in {s["sandbox_id"] for s in d.call("sandbox.list")["sandboxes"]}:
            assert time.monotonic() < deadline, "idle after its exec, it should be reaped"
            time.sleep(0.2)
        assert "idle" in d.read_log()
    finally:
        assert d.stop() == 0


def test_max_sandboxes_gives_limit_reached():
    d = Daemon(extra_args=["--max-sandboxes", "2", "--warm-pool", "0"])
    try:
        d.call("sandbox.create")
        d.call("sandbox.create")
        with pytest.raises(RpcError) as e:
            d.call("sandbox.create")
        assert e.value.kind == "limit_reached"
        assert d.call("server.info")["sandboxes"] == 2
    finally:
        assert d.stop() == 0


def test_session_id_get_or_create_is_per_owner_and_concurrent_safe(daemon):
    results = []

    def create():
        results.append(daemon.call("sandbox.create", session_id="concurrent-session"))

    threads = [threading.Thread(target=create) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r["sandbox_id"] for r in results}) == 1
    assert sum(not r["existing"] for r in results) == 1
    daemon.call("sandbox.remove", sandbox_id=results[0]["sandbox_id"])


def test_info_reports_stats(daemon, sandbox):
    info = daemon.call("sandbox.info", sandbox_id=sandbox)
    assert info["sandbox_id"] == sandbox and info["state"] == "running"
    assert set(info["stats"]) >= {"memory_bytes", "memory_peak_bytes", "cpu_usage_us", "pids", "oom_kills"}


@pytest.mark.parametrize("user", ["sandbox", "root"])
def test_no_process_of_the_sandbox_can_signal_an_exec_supervisor(daemon, sandbox, user):
    # Each exec's parent is its supervisor, the subreaper its daemons are
    # reparented to; were it killable, a timeout could no longer end them.
    r = exec_(daemon, sandbox, user=user, argv=["python3", "-c", """
import errno, os, signal
sup = os.getppid()
res = []
for sig in (0, signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):
    try:
        os.kill(sup, sig)
        res.append("sent")
    except OSError as e:
        res.append(errno.errorcode[e.errno])
print(" ".join(res), open("/proc/%d/status" % sup).read().split("Uid:")[1].split()[:3], flush=True)
try:
    os.kill(-1, signal.SIGKILL)  # everything it may signal: not its supervisor, nor the next slot
except ProcessLookupError:
    pass  # nothing at all
try:
    os.kill(sup, 0)
except PermissionError:
    pass  # still there
"""])
    assert r["stdout"] == "EPERM EPERM EPERM EPERM ['65533', '0', '65533']\n", r
    assert r["exit_code"] == 0, r
    again = exec_(daemon, sandbox, argv=["true"])
    assert again["exit_code"] == 0, again


def test_tree_kill_holds_when_sandbox_root_kills_every_process_it_can(daemon, sandbox):
    # Sandbox root kills all it may; a timeout must still end a daemonized
    # descendant of the next exec.
    exec_(daemon, sandbox, user="root",
          command="for p in /proc/[0-9]*; do p=${p#/proc/}; [ $p != 1 ] && [ $p != $$ ] && "
                  "kill -9 $p 2>/dev/null; done; true")
    r = exec_(daemon, sandbox, timeout_seconds=2,
              command="(setsid sh -c 'trap \"\" HUP TERM; exec sleep 5151' &) ; sleep 300")
    assert r["timed_out"] is True
    deadline = time.monotonic() + 10
    while count_sleepers(daemon, sandbox, "515[1]") > 0:
        assert time.monotonic() < deadline, "a daemonized descendant survived the timeout"
        time.sleep(0.1)


def supervisor_uid(daemon, sb):
    base = int(exec_(daemon, sb, argv=["cat", "/proc/self/uid_map"])["stdout"].split()[1])
    return base + 65533


def processes_of_uid(uid):
    """{pid: /proc/PID/status as a dict} of the host's processes whose real uid is uid."""
    found = {}
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/status" % pid) as f:
                fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == uid:
            found[int(pid)] = {k: v.strip() for k, v in fields.items()}
    return found


def kib(field):
    return int(field.split()[0])


@pytest.mark.hostroot("finds the sandbox's supervisor by the sandbox's own host uid range; without host root sandboxes share one")
def test_an_exec_gets_a_fresh_slot_when_the_waiting_one_is_gone(daemon, sandbox):
    # The OOM killer (or a failed fork under the pids limit) may end the
    # supervisor of the slot waiting for the next exec. That exec must not
    # fail for it, nor be taken by a child the supervisor leaves behind:
    # nobody would report its end.
    uid = supervisor_uid(daemon, sandbox)
    procs = waiting_slot(uid)
    supervisor = [pid for pid, st in procs.items() if int(st["PPid"]) not in procs][0]
    os.kill(supervisor, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(st["State"][0] != "Z" for pid, st in processes_of_uid(uid).items() if pid in procs):
        assert time.monotonic() < deadline, "the slot outlived its supervisor"
        time.sleep(0.02)
    r = exec_(daemon, sandbox, argv=["echo", "still runs"])
    assert r["stdout"] == "still runs\n" and r["exit_code"] == 0, r


def waiting_slot(uid):
    """The processes of the slot waiting for the next exec ({pid: status}),
    once they all sleep: the last exec's have gone, the slot is ready."""
    deadline = time.monotonic() + 10
    while True:
        procs = processes_of_uid(uid)
        if procs and all(st["State"][0] == "S" for st in procs.values()):
            return procs
        assert time.monotonic() < deadline, "no slot waiting for the next exec: %s" % procs
        time.sleep(0.02)


@pytest.mark.hostroot("finds the sandbox's supervisor by the sandbox's own host uid range; without host root sandboxes share one")
def test_an_idle_slot_is_one_process_its_exec_starts_with_the_request(daemon, sandbox):
    # What an idle sandbox keeps for its next exec is the supervisor alone:
    # a child kept waiting would be one more process in every idle sandbox
    # (its kernel stack and task; its RSS is the supervisor's pages again).
    # The child made ahead after an exec retires within seconds unused.
    uid = supervisor_uid(daemon, sandbox)
    deadline = time.monotonic() + 30
    while True:
        procs = waiting_slot(uid)
        if len(procs) == 1:
            break
        assert time.monotonic() < deadline, "the idle slot stays %d processes: %s" % (
            len(procs), {pid: (st["PPid"], st["State"]) for pid, st in procs.items()})
        time.sleep(0.1)
    pid = next(iter(procs))
    r = exec_(daemon, sandbox, argv=["sh", "-c", "echo $PPID"])
    assert r["exit_code"] == 0, r
    # Its exec's process is the child it started, in the sandbox's pid namespace.
    with open("/proc/%d/status" % pid) as f:
        nspid = [line.split()[-1] for line in f if line.startswith("NSpid:")][0]
    assert r["stdout"].strip() == nspid, (r, nspid)


@pytest.mark.hostroot("finds the sandbox's supervisor by the sandbox's own host uid range; without host root sandboxes share one")
def test_execs_leave_nothing_behind_in_their_supervisor(daemon, sandbox):
    # An exec's process runs in its supervisor's memory until its execve
    # (runtime/supervisor.c): whatever it allocated there for a request
    # would stay with the supervisor, which serves one exec after another.
    uid = supervisor_uid(daemon, sandbox)
    args = ["x" * 1000] * 400
    env = {"BIG": "y" * 100000}
    assert exec_(daemon, sandbox, argv=["true"] + args, env=env)["exit_code"] == 0
    before = processes_of_uid(uid)
    assert before, "no supervisor found"
    for _ in range(40):
        r = exec_(daemon, sandbox, argv=["sh", "-c", 'echo ${#BIG} $#', "sh"] + args, env=env)
        assert r["stdout"] == "100000 400\n", r
    after = processes_of_uid(uid)
    serving = set(before) & set(after)
    assert serving, "the slot's supervisor did not serve the next execs: %s %s" % (before, after)
    for pid in serving:
        # 40 requests of 500 KB: a copy of each left behind is 20 MB.
        grown = kib(after[pid]["VmSize"]) - kib(before[pid]["VmSize"])
        assert grown < 1024, (pid, before[pid]["VmSize"], after[pid]["VmSize"])
        assert kib(after[pid]["VmRSS"]) - kib(before[pid]["VmRSS"]) < 1024, (before[pid], after[pid])


def test_a_script_without_shebang_found_on_path_gets_every_argument(daemon, sandbox):
    # execvpe runs such a file with /bin/sh, building the new argument vector
    # on the stack of the exec's process: a stack nsbox-init maps for it.
    exec_(daemon, sandbox, user="root",
          command="printf 'echo $# $1 ${60000}\\n' > /usr/local/bin/nsbox-noshebang && "
                  "chmod 755 /usr/local/bin/nsbox-noshebang")
    r = exec_(daemon, sandbox, argv=["nsbox-noshebang", "first"] + ["a"] * 59998 + ["last"])
    assert r["stdout"] == "60000 first last\n", r
    assert r["exit_code"] == 0, r



def test_update_sets_the_idle_timeout(daemon):
    """sandbox.update {idle_timeout_seconds}: a sandbox made to live long is reaped
    once its idle timeout is cut short; bad values are refused."""
    sid = daemon.call("sandbox.create", idle_timeout_seconds=3600, idle_action="remove")["sandbox_id"]
    try:
        for bad in (0, -1, 7 * 24 * 3600 + 1, "60", 1.5, None):
            with pytest.raises(RpcError) as e:
                daemon.call("sandbox.update", sandbox_id=sid, idle_timeout_seconds=bad)
            assert e.value.error["data"]["kind"] == "invalid_params", bad
        info = daemon.call("sandbox.update", sandbox_id=sid, idle_timeout_seconds=1)
        assert info["idle_timeout_seconds"] == 1
        deadline = time.monotonic() + 30
        while sid in {s["sandbox_id"] for s in daemon.call("sandbox.list")["sandboxes"]}:
            assert time.monotonic() < deadline, "its new idle timeout should have reaped it"
            time.sleep(0.1)
    finally:
        try:
            daemon.call("sandbox.remove", sandbox_id=sid, force=True)
        except RpcError:
            pass
