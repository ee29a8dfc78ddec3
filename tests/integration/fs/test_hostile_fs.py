# SPDX-License-Identifier: Apache-2.0
"""fs.* against hostile input: no path a client sends and no tree the sandbox makes can
crash nsboxd or stall its single event loop."""
import json
import random
import threading
import time

import pytest
from conftest import Daemon
from nsbox_client import Raw, RpcError

# serial: measures the daemon's latency under 100k-file trees
pytestmark = [pytest.mark.serial]


@pytest.fixture(scope="module")
def daemon():
    """Trees of 100k and 200k files: more than a sandbox's disk holds by
    default (disk_inodes, 128 Ki)."""
    d = Daemon(extra_args=["--disk-inodes", "262144"])
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def sh(daemon, sandbox, command, **kw):
    if isinstance(command, list):
        kw["argv"] = command
    else:
        kw["command"] = command
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, **kw)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def alive(daemon):
    assert daemon.proc.poll() is None, "nsboxd died:\n" + daemon.read_log()[-4000:]
    assert daemon.call("server.info")


def call_or_error(daemon, method, **params):
    """A result or a clear JSON-RPC error with a kind; never a dropped connection."""
    try:
        return daemon.call(method, **params), None
    except RpcError as e:
        assert e.kind, e.error
        assert e.error.get("message"), e.error
        return None, e


@pytest.mark.parametrize("method", ["fs.mkdir", "fs.write"])
def test_fs_path_with_1000_missing_components_is_refused_not_a_crash(daemon, sandbox, method):
    path = "/".join(["a"] * 1000)  # ~2 KB: within PATH_MAX, too deep to walk
    params = {"sandbox_id": sandbox, "path": path}
    if method == "fs.mkdir":
        params["parents"] = True
    else:
        params["content"] = "x"
    _, e = call_or_error(daemon, method, **params)
    alive(daemon)
    assert e is not None and e.kind == "invalid_params", e
    assert "components" in str(e)
    # the sandbox is still there and serves
    assert sh(daemon, sandbox, "echo ok") == "ok\n"


def test_fs_mkdir_parents_within_the_component_cap_creates_every_level(daemon, sandbox):
    path = "/".join(["d"] * 200)
    r = daemon.call("fs.mkdir", sandbox_id=sandbox, path=path, parents=True)
    assert r["created"] is True
    st = daemon.call("fs.stat", sandbox_id=sandbox, path=path)
    assert st["type"] == "dir" and st["uid"] == 1000
    r = daemon.call("fs.write", sandbox_id=sandbox, path="/".join(["e"] * 200) + "/f", content="hi")
    assert r["bytes_written"] == 2
    assert daemon.call("fs.read", sandbox_id=sandbox, path="/".join(["e"] * 200) + "/f")["content"] == "hi"


# 5000 nested directories, made by sandbox code one level at a time (the
# whole path is far over PATH_MAX, so no single syscall could name it).
DEEP_TREE = """
import os
os.makedirs("/workspace/deep", exist_ok=True)
os.chdir("/workspace/deep")
for i in range(5000):
    os.mkdir("d")
    os.chdir("d")
open("leaf", "w").close()
"""


def test_tree_5000_levels_deep_made_in_the_sandbox_is_listed_and_removed(daemon, sandbox):
    sh(daemon, sandbox, ["python3", "-c", DEEP_TREE], timeout_seconds=120)
    listing = daemon.call("fs.list", sandbox_id=sandbox, path="/workspace/deep")
    assert [e["name"] for e in listing["entries"]] == ["d"]
    assert daemon.call("fs.list", sandbox_id=sandbox, path="deep/d/d/d")["entries"][0]["name"] == "d"
    r = daemon.call("fs.remove", sandbox_id=sandbox, path="/workspace/deep", recursive=True)
    assert r["removed"] is True
    alive(daemon)
    _, e = call_or_error(daemon, "fs.stat", sandbox_id=sandbox, path="/workspace/deep")
    assert e is not None and e.kind == "not_found"
    assert sh(daemon, sandbox, "test ! -e /workspace/deep && echo gone") == "gone\n"


# Another client's server.info must be answered within this while a huge
# fs.* call runs; on the single loop it took seconds (~3 s for a
# 300k-file tree). Generous for a busy 2-core machine, far under the stall.
LATENCY_BOUND_S = 0.5


def many_files(daemon, sandbox, directory, count):
    code = ("import os\nos.makedirs(%r, exist_ok=True)\nos.chdir(%r)\n"
            "for i in range(%d):\n    os.close(os.open(str(i), os.O_CREAT | os.O_WRONLY))\n"
            % (directory, directory, count))
    sh(daemon, sandbox, ["python3", "-c", code], timeout_seconds=300)


def worst_server_info_latency_during(daemon, work):
    """Run work() in a thread; meanwhile time server.info on another
    connection, back to back. Returns (work's result, worst latency, calls)."""
    out = {}

    def run():
        try:
            out["result"] = work()
        except Exception as e:  # reported by the caller
            out["error"] = e

    worst, calls = 0.0, 0
    with daemon.client(timeout=60) as c:
        c.call("server.info")
        t = threading.Thread(target=run)
        t.start()
        while t.is_alive():
            start = time.monotonic()
            c.call("server.info")
            worst = max(worst, time.monotonic() - start)
            calls += 1
            time.sleep(0.01)
        t.join()
    if "error" in out:
        raise out["error"]
    print("worst server.info latency %.3f s over %d calls" % (worst, calls))
    return out["result"], worst, calls


def test_fs_remove_of_a_200k_file_tree_does_not_stall_other_clients(daemon, sandbox):
    many_files(daemon, sandbox, "/workspace/big/a", 100000)
    many_files(daemon, sandbox, "/workspace/big/b/c", 100000)
    r, worst, calls = worst_server_info_latency_during(
        daemon, lambda: daemon.call("fs.remove", sandbox_id=sandbox, path="/workspace/big", recursive=True))
    assert r["removed"] is True
    assert worst < LATENCY_BOUND_S, "server.info took %.2f s during fs.remove" % worst
    assert calls >= 3  # the remove took long enough to measure anything
    assert sh(daemon, sandbox, "test ! -e /workspace/big && echo gone") == "gone\n"


def test_fs_list_of_a_100k_entry_directory_does_not_stall_and_is_bounded(daemon, sandbox):
    many_files(daemon, sandbox, "/workspace/wide", 100000)
    r, worst, calls = worst_server_info_latency_during(
        daemon, lambda: daemon.call("fs.list", sandbox_id=sandbox, path="/workspace/wide"))
    assert worst < LATENCY_BOUND_S, "server.info took %.2f s during fs.list" % worst
    # By default a reply is bounded, sorted by name, and says what it left out.
    assert r["truncated"] is True and r["total_entries"] == 100000
    assert len(r["entries"]) == r["max_entries"] == 10000
    names = [e["name"] for e in r["entries"]]
    assert names == sorted(names) and names[0] == "0"
    # All of it when asked, still without stalling the others.
    r, worst, calls = worst_server_info_latency_during(
        daemon, lambda: daemon.call("fs.list", sandbox_id=sandbox, path="/workspace/wide", max_entries=100000))
    assert len(r["entries"]) == 100000 and r["truncated"] is False
    # (the reply of 600k JSON values is still serialized and freed by the loop: ~0.3 s here)
    assert worst < 1.0, "server.info took %.2f s during fs.list of 100000 entries" % worst


ADVERSARIAL_FIXED = [
    "/".join(["d"] * 1000), "/".join(["d"] * 256), "/".join(["e"] * 254), "d" * 5000, "d" * 256,
    "/" + "x" * 4095, "../" * 1500, "/.." * 1000 + "/etc", "//" * 2000, "./" * 2000 + "f",
    "/workspace/loop/x/y", "/workspace/loop", "loop/loop/loop", "/workspace/self", "self/x",
    "/proc/self/root/etc", "/dev/null", "/sys/kernel", "/", ".", "..", "workspace/../..",
    "a\nb", "\u00e9\u00e8/\U0001F600", "\x7f\x01\x1b[31m", " ", "-", "--x", "~", "$HOME",
]


def random_paths(seed=15, count=120):
    rng = random.Random(seed)
    alphabet = ["a", "b", "/", "//", ".", "..", "../", "/./", "\x01", "\u00ff", "\u2028", " ", "*", "loop", "self"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.choice([1, 3, 10, 100, 600, 1500])))
            for _ in range(count)]


def test_adversarial_fs_paths_get_an_answer_and_the_daemon_stays_up(daemon, sandbox):
    # Symlink loops and a self-referencing link, made by the sandbox itself.
    sh(daemon, sandbox, "cd /workspace && ln -s loop loop && ln -s . self && ln -s a b && ln -s b a")
    calls = [
        ("fs.stat", {}), ("fs.list", {}), ("fs.mkdir", {"parents": True}),
        ("fs.write", {"content": "x"}), ("fs.read", {}), ("fs.remove", {"recursive": True}),
    ]
    answered = 0
    with daemon.client(timeout=60) as c:
        # every fixed path through every method, then random ones in turn
        work = [(m, path) for path in ADVERSARIAL_FIXED for m in calls]
        work += [(calls[i % len(calls)], path) for i, path in enumerate(random_paths())]
        for (method, extra), path in work:
            try:
                c.call(method, sandbox_id=sandbox, path=path, **extra)
            except RpcError as e:
                assert e.kind and e.error.get("message"), (method, path, e.error)
                # "internal" would be a failure nsboxd did not expect
                assert e.kind != "internal", (method, path, e.error)
            answered += 1
    assert answered == len(work) >= 300
    alive(daemon)
    assert sh(daemon, sandbox, "echo ok") == "ok\n"



@pytest.mark.slow  # about 40 s
def test_file_workers_are_bounded(daemon, sandbox):
    # Each large fs.* call is a fork of nsboxd: a client pipelining many of
    # them gets "busy" beyond FS_WORKERS_MAX (32) instead of forking on.
    many_files(daemon, sandbox, "/workspace/many", 100000)
    n = 40
    with Raw(daemon.socket, timeout=120) as c:
        c.send(b"".join((json.dumps({"jsonrpc": "2.0", "id": i, "method": "fs.list", "params": {
            "sandbox_id": sandbox, "path": "/workspace/many", "max_entries": 100000}}) + "\n").encode()
            for i in range(n)))
        replies = [c.reply(timeout=120) for _ in range(n)]
    busy = [r for r in replies if "error" in r]
    assert all(r["error"]["data"]["kind"] == "busy" for r in busy), busy[:2]
    assert len(busy) >= n - 32, "%d of %d were refused" % (len(busy), n)
    assert all(len(r["result"]["entries"]) == 100000 for r in replies if "result" in r)


# --- python.run's files are decoded and written off the loop ------------------------

def loop_cpu_ns(pid):
    """CPU time of nsboxd's event loop: its main thread (JSON lines are parsed
    on a thread of their own, file work in forked workers)."""
    with open("/proc/%d/task/%d/schedstat" % (pid, pid)) as f:
        return int(f.read().split()[0])


def test_python_run_files_are_checked_decoded_and_written_off_the_loop(daemon):
    import base64
    import hashlib
    import os
    from conftest import daemon_pid
    sb = daemon.call("sandbox.create", limits={"disk_bytes": 512 << 20})["sandbox_id"]
    pid = daemon_pid(daemon)
    data = os.urandom(30 << 20)
    content = base64.b64encode(data).decode()  # 40 MiB of base64 in a 40 MB request
    code = ("import hashlib; d = open('big.bin', 'rb').read(); "
            "print(len(d), hashlib.sha256(d).hexdigest())")
    spent = []
    for i in range(3):
        before = loop_cpu_ns(pid)
        r = daemon.call("python.run", sandbox_id=sb, code=code,
                        files={"big.bin": {"content": content, "encoding": "base64"}})
        spent.append((loop_cpu_ns(pid) - before) / 1e6)
        assert r["status"] == "ok", r
        assert r["stdout"].split() == [str(len(data)), hashlib.sha256(data).hexdigest()], r
    print("event loop CPU per python.run with a 40 MiB base64 file: %s ms" % ["%.1f" % s for s in spent])
    # With the base64 checked, decoded and written on the loop, and the line
    # copied for the parse thread, this was 155-163 ms of the loop's CPU on a
    # quiet host; now 24-34 there, and 88-110 in a loaded clean-clone CI run
    # (where receiving the same 40 MB for a call that does nothing took
    # 13-20: what else grows under load there is not found yet).
    assert min(spent) < 140, spent
    # A bad one is still refused with the request's id and nothing written.
    bad = {"big.bin": {"content": content[:-3] + "!!!", "encoding": "base64"}}
    with pytest.raises(RpcError) as e:
        daemon.call("python.run", sandbox_id=sb, code="print(1)", files=bad)
    assert e.value.code == -32602 and "base64" in str(e.value), e.value.error
    daemon.call("sandbox.remove", sandbox_id=sb, force=True)
