# SPDX-License-Identifier: Apache-2.0
"""nsboxd without host root: as root of a user namespace with one
delegated range of ids. Two ways in, each test run against both:

  nested    the test (host root) makes a user namespace mapping 65536 ids
            (0 -> host 100000) with its own mount and pid namespaces and an
            idmapped view of the image, as a pod with hostUsers: false gets,
            and runs nsboxd in it (userns_launch.py);
  rootless  an unprivileged user with an /etc/subuid range (made by the test,
            removed after) runs `nsboxd --rootless`, which maps itself
            through newuidmap/newgidmap.

Every claim server.info makes in this mode is checked here. The rest of the
suite runs against the same daemons with NSBOX_TEST_LAUNCHER=nested|rootless
(README "Without host root")."""
import hashlib
import json
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

from conftest import BUILD, IMAGE_DIR, Daemon, attack
from nsbox_client import RpcError
import rootless_launch

# serial: adds a user and an /etc/subuid range; counts the processes and mounts left
pytestmark = [pytest.mark.serial,
              pytest.mark.skipif(os.geteuid() != 0, reason="makes user namespaces and a user: needs root")]

NSBOXD = os.path.join(BUILD, "nsboxd")
NSBOX = os.path.join(BUILD, "nsbox")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/integration
UNAVAILABLE = {"network", "per-sandbox-uid-ranges", "image-commit", "image-import", "host-pools",
               "oom-protection"}


@pytest.fixture(scope="module", autouse=True)
def rootless_user():
    yield
    rootless_launch.remove_rootless_user()


@pytest.fixture(scope="module", params=["nested", "rootless"])
def ud(request, rootless_user):  # torn down before the user is removed
    d = Daemon(extra_args=("--warm-pool", "0"), launcher=request.param)
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def host_id(d, inside):
    """The host uid (= gid) that id `inside` of nsboxd's namespace is."""
    if d.launcher == "nested":
        return rootless_launch.NESTED_BASE + inside
    pw = pwd.getpwnam(rootless_launch.ROOTLESS_USER)
    return pw.pw_uid if inside == 0 else rootless_launch.ROOTLESS_SUB + inside - 1


def nsboxd_pid(d):
    """nsboxd's host pid (nested: a grandchild of the launcher)."""
    return rootless_launch.nsboxd_pid(NSBOXD, d.socket)


def with_marker_process(d, sb, fn, user="sandbox"):
    """Run `sleep MARKER` in sandbox sb; call fn(host pid of it) meanwhile."""
    marker = "%d.%06d" % (300, uuid.uuid4().int % 10**6)
    result = {}
    t = threading.Thread(target=lambda: result.update(r=d.call(
        "sandbox.exec", sandbox_id=sb, argv=["sleep", marker], user=user, timeout_seconds=60)))
    t.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            pids = marker_pids(marker)
            if pids:
                return fn(pids[0])
            assert time.monotonic() < deadline, "the sandbox's sleep never showed on the host"
            time.sleep(0.05)
    finally:
        for pid in marker_pids(marker):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        t.join(60)


def marker_pids(marker):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read() == b"sleep\0" + marker.encode() + b"\0":
                        found.append(int(entry))
            except OSError:
                pass
    return found


def status_ids(pid):
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    return int(fields["Uid"].split()[0]), int(fields["Gid"].split()[0]), fields["CapEff"].strip()


def test_server_info_says_userns_mode_and_what_is_not_enforced(ud):
    info = ud.call("server.info")
    assert info["uid_isolation"] == "userns"
    assert info["per_sandbox_host_ranges"] is False
    # nested: exactly the 65536 the test mapped; rootless: the user + 65536 subordinate ids
    assert info["userns"]["delegated_ids"] == (65536 if ud.launcher == "nested" else 65537)
    assert info["userns"]["sandbox_ids"] == 65536
    assert {u["feature"] for u in info["userns"]["unavailable"]} == UNAVAILABLE
    assert all(u["why"] for u in info["userns"]["unavailable"])
    assert info["userns"]["unmapped_clients"] == "one-owner"  # rootless_launch.wrap asks for it
    # This host keeps its controllers in cgroup v1, which is never delegated.
    assert info["limits"] == "limits-not-enforced"
    assert "user namespace" in info["limits_reason"] and "cgroup v2" in info["limits_reason"]
    assert "limits-not-enforced" in info["features"]
    for gone in ("idmapped-image", "image-commit", "image-import", "network"):
        assert gone not in info["features"]


def test_exec_runs_with_the_usual_ids_which_are_the_delegated_range_on_the_host(ud):
    a = ud.call("sandbox.create")["sandbox_id"]
    b = ud.call("sandbox.create")["sandbox_id"]
    try:
        r = ud.call("sandbox.exec", sandbox_id=a, command="id -u; id -g; id -un")
        assert r["stdout"] == "1000\n1000\nsandbox\n", r
        r = ud.call("sandbox.exec", sandbox_id=a, command="id -u; id -g", user="root")
        assert r["stdout"] == "0\n0\n", r
        # sandbox_ids: 0-65535, mapped as they are (in pieces along nsboxd's own extents).
        for name in ("uid_map", "gid_map"):
            r = ud.call("sandbox.exec", sandbox_id=a, command="cat /proc/self/" + name)
            lines = [tuple(map(int, line.split())) for line in r["stdout"].splitlines()]
            assert all(inside == outside for inside, outside, _ in lines), lines
            assert sorted((i, i + n) for i, _, n in lines)[0][0] == 0
            assert sum(n for _, _, n in lines) == 65536, lines
        # On the host: the sandbox user is id 1000 of the delegated range,
        # the same in both sandboxes (no per-sandbox host ranges here).
        want = host_id(ud, 1000)
        assert with_marker_process(ud, a, status_ids)[:2] == (want, want)
        assert with_marker_process(ud, b, status_ids)[:2] == (want, want)
        root = host_id(ud, 0)
        assert with_marker_process(ud, a, status_ids, user="root")[:2] == (root, root)
    finally:
        for sb in (a, b):
            ud.call("sandbox.remove", sandbox_id=sb, force=True)


def test_sandbox_sees_no_host_process_cannot_write_the_image_and_has_no_capabilities_outside(ud):
    sb = ud.call("sandbox.create")["sandbox_id"]
    image_file = os.path.join(IMAGE_DIR, "python", "rootfs", "etc", "os-release")
    with open(image_file, "rb") as f:
        before = hashlib.sha256(f.read()).hexdigest()
    probe = "usr/lib/nsbox-rootless-probe-" + uuid.uuid4().hex[:8]
    try:
        v = attack(ud, sb, r'''
pids = [p for p in os.listdir("/proc") if p.isdigit()]
cmds = []
for p in pids:
    try:
        cmds.append(open("/proc/%s/cmdline" % p, "rb").read())
    except OSError:
        pass
# (the script's own argv holds the word: look at argv[0] only)
verdict(n=len(pids), nsboxd=any(c.split(b"\0")[0].endswith(b"nsbox" + b"d") for c in cmds), user_write=err(open, "/usr/lib/x", "w"),
        cap=[l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1])
''')
        assert v["n"] < 10 and not v["nsboxd"], v
        assert v["user_write"] == "EACCES" and int(v["cap"], 16) == 0, v
        # Root in the sandbox writes its own copy, never the image.
        v = attack(ud, sb, r'''
open("/%s", "w").write("x")
with open("/etc/os-release", "a") as f:
    f.write("changed\n")
def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1")
verdict(mknod=err(os.mknod, "/tmp/null", stat.S_IFCHR | 0o666, os.makedev(1, 3)),
        sysctl=err(drop_caches),
        settime=sc(227, 0, ctypes.byref((ctypes.c_long * 2)(0, 0)))[1],
        mount=sc(165, "none", "/mnt", "tmpfs", 0, 0)[1])
''' % probe, user="root")
        # Each needs a capability of the host's namespace (or of nsboxd's,
        # for mount): the sandbox's root has none there.
        assert v["mknod"] == "EPERM" and v["sysctl"] in ("EACCES", "EPERM", "EROFS"), v
        assert v["settime"] == "EPERM" and v["mount"] == "EPERM", v
        assert not os.path.exists(os.path.join(IMAGE_DIR, "python", "rootfs", probe))
        with open(image_file, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == before
    finally:
        ud.call("sandbox.remove", sandbox_id=sb, force=True)


def test_python_run_and_files_up_and_down(ud):
    sb = ud.call("sandbox.create")["sandbox_id"]
    try:
        ud.call("fs.write", sandbox_id=sb, path="in.txt", content="3\n4\n")
        r = ud.call("python.run", sandbox_id=sb, code=(
            "import numpy\n"
            "n = numpy.loadtxt('in.txt')\n"
            "open('out.txt', 'w').write(str(int(n.sum())))\n"
            "print('sum', int(n.sum()))\n"))
        assert r["exit_code"] == 0 and r["stdout"] == "sum 7\n", r
        assert ud.call("fs.read", sandbox_id=sb, path="/workspace/out.txt")["content"] == "7"
        assert ud.call("fs.stat", sandbox_id=sb, path="out.txt")["size"] == 1
    finally:
        ud.call("sandbox.remove", sandbox_id=sb, force=True)


def test_remove_leaves_no_process_mount_or_state(ud):
    sb = ud.call("sandbox.create")["sandbox_id"]
    init_ns = os.readlink("/proc/self/ns/user")  # the test runs as host root
    daemon_pid = nsboxd_pid(ud)

    def namespaces(pid):
        return os.readlink(f"/proc/{pid}/ns/user"), os.readlink(f"/proc/{daemon_pid}/ns/user")
    sandbox_ns, daemon_ns = with_marker_process(ud, sb, namespaces)
    # Three levels: host, nsboxd's delegated namespace, the sandbox's.
    assert len({init_ns, daemon_ns, sandbox_ns}) == 3
    ud.call("sandbox.remove", sandbox_id=sb, force=True)
    # Its mounts and dir go once the kernel has ended its processes, after the answer.
    deadline = time.monotonic() + 10
    while True:
        with open(f"/proc/{daemon_pid}/mountinfo") as f:
            mounted = sb in f.read()
        left = os.listdir(os.path.join(ud.state, "sandboxes"))
        if not mounted and left == []:
            break
        assert time.monotonic() < deadline, ("still mounted" if mounted else "its dir stayed", left)
        time.sleep(0.02)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                assert os.readlink(f"/proc/{entry}/ns/user") != sandbox_ns, "a sandbox process outlived it"
            except OSError:
                pass


def test_network_other_than_none_is_unavailable(ud):
    with pytest.raises(RpcError) as e:
        ud.call("sandbox.create", network="default")
    assert e.value.kind == "unavailable" and "host root" in str(e.value)
    sb = ud.call("sandbox.create")["sandbox_id"]
    try:
        with pytest.raises(RpcError) as e:
            ud.call("sandbox.update", sandbox_id=sb, network="default")
        assert e.value.kind == "unavailable" and "host root" in str(e.value)
        r = ud.call("sandbox.exec", sandbox_id=sb, command="cat /proc/net/dev | tail -n +3 | cut -d: -f1")
        assert r["stdout"].split() == ["lo"], r
    finally:
        ud.call("sandbox.remove", sandbox_id=sb, force=True)


def test_image_commit_and_import_are_unavailable(ud):
    sb = ud.call("sandbox.create")["sandbox_id"]
    try:
        with pytest.raises(RpcError) as e:
            ud.call("image.commit", sandbox_id=sb, name="rootless-commit")
        assert e.value.kind == "unavailable" and "per-sandbox uid isolation" in str(e.value)
    finally:
        ud.call("sandbox.remove", sandbox_id=sb, force=True)


def test_limits_are_said_not_enforced_and_indeed_are_not(ud):
    r = ud.call("sandbox.create", limits={"pids": 16})
    sb = r["sandbox_id"]
    try:
        assert r["limits"]["pids"] == 16
        assert r["limits_enforced"] is False and r["limits_note"].startswith("limits-not-enforced: "), r
        # The answer is the truth: 40 processes where 16 were asked.
        out = ud.call("sandbox.exec", sandbox_id=sb,
                      command="for i in $(seq 40); do sleep 5 & done; sleep 0.5; ls /proc | grep -c '^[0-9]'")
        assert int(out["stdout"]) > 40, out
        # And the log says so from the start (a create's own line may be rate-limited).
        log = ud.read_log()
        assert "limits NOT enforced" in log and "(limits-not-enforced: nsboxd runs in a user namespace" in log
    finally:
        ud.call("sandbox.remove", sandbox_id=sb, force=True)


def test_oom_protection_and_host_pools_are_not_claimed(ud):
    sb = ud.call("sandbox.create")["sandbox_id"]
    try:
        r = ud.call("sandbox.exec", sandbox_id=sb, command="cat /proc/1/oom_score_adj")
        with open(f"/proc/{nsboxd_pid(ud)}/oom_score_adj") as f:
            own = f.read().strip()
        # The init stays at nsboxd's own score: not lowered out of the OOM killer's way.
        assert r["stdout"].strip() == own != "-1000", (r, own)
        # No host sysctl was touched (host_pools.c logs each raise or failure).
        assert "fs.inotify" not in ud.read_log() and "file-max" not in ud.read_log()
    finally:
        ud.call("sandbox.remove", sandbox_id=sb, force=True)


def test_snapshot_and_fork_work_in_userns_mode(ud):
    parent = ud.call("sandbox.create")["sandbox_id"]
    fork = None
    try:
        ud.call("sandbox.exec", sandbox_id=parent, command="echo kept > /workspace/f")
        snap = ud.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"]
        fork = ud.call("sandbox.create", from_snapshot=snap)["sandbox_id"]
        r = ud.call("sandbox.exec", sandbox_id=fork, command="cat /workspace/f; stat -c %u /workspace/f")
        assert r["stdout"] == "kept\n1000\n", r
    finally:
        for sb in (fork, parent):
            if sb:
                ud.call("sandbox.remove", sandbox_id=sb, force=True)


# --- the entry points ---------------------------------------------------------


@pytest.fixture
def user_dir():
    """A dir the test user can reach (pytest's tmp_path sits in a 0700 one)."""
    d = tempfile.mkdtemp(prefix="nsbox-rootless-")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    subprocess.run(["umount", "-R", "-l", d], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def as_user(pw, argv, env, timeout=120):
    return subprocess.run(argv, env=env, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                          capture_output=True, timeout=timeout)


def test_nsboxd_as_a_user_says_to_use_rootless_and_rootless_needs_a_subuid_range(tmp_path):
    nobody = pwd.getpwnam("nobody")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    r = as_user(nobody, [NSBOXD, "--socket", str(tmp_path / "s")], env)
    assert r.returncode == 2 and b"--rootless" in r.stderr, r
    r = as_user(nobody, [NSBOXD, "--rootless", "--socket", str(tmp_path / "s")], env)
    assert r.returncode == 2 and b"/etc/subuid has no range" in r.stderr, r


def test_rootless_defaults_to_the_users_own_dirs(user_dir):
    tmp_path = user_dir
    pw = rootless_launch.ensure_rootless_user()
    os.chmod(tmp_path, 0o755)
    os.chown(tmp_path, pw.pw_uid, pw.pw_gid)
    (tmp_path / "run").mkdir(mode=0o700)
    os.chown(tmp_path / "run", pw.pw_uid, pw.pw_gid)
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([NSBOXD, "--rootless", "--warm-pool", "0"], env=env, user=pw.pw_uid,
                            group=pw.pw_gid, extra_groups=[], stderr=subprocess.PIPE)
    sock = tmp_path / "run" / "nsbox" / "nsbox.sock"
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert (tmp_path / ".local" / "share" / "nsbox" / "sandboxes").is_dir()
        # The user's CLI finds it without --socket, and is root there.
        r = as_user(pw, [NSBOX, "--json", "status"], env)
        assert r.returncode == 0 and json.loads(r.stdout)["uid_isolation"] == "userns", r
        assert json.loads(r.stdout)["userns"]["unmapped_clients"] == "refuse"
        # image.import: refused as unavailable in this mode (the user is root here).
        code = ("import sys; sys.path.insert(0, %r); from nsbox_client import Client, RpcError\n"
                "try:\n    Client(%r).call('image.import', path='/nonexistent', name='imp')\n"
                "except RpcError as e:\n    print(e.kind, e)\n") % (HERE, str(sock))
        r = as_user(pw, [sys.executable, "-c", code], env)
        assert r.stdout.startswith(b"unavailable ") and b"per-sandbox uid isolation" in r.stdout, r
        # Host root is not mapped in the user's namespace: it would read as
        # nobody, like every other outsider, so it is refused by default.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(sock))
            s.settimeout(30)
            refusal = json.loads(s.makefile("rb").readline())
        assert refusal["error"]["data"]["kind"] == "permission_denied", refusal
        assert "not mapped" in refusal["error"]["message"], refusal
    finally:
        proc.terminate()
        proc.wait(30)


def test_nsbox_run_works_as_a_user_and_nested(user_dir):
    tmp_path = user_dir
    pw = rootless_launch.ensure_rootless_user()
    os.chmod(tmp_path, 0o755)
    view = str(tmp_path / "images")
    rootless_launch.idmapped_view(IMAGE_DIR, view, rootless_launch.rootless_maps(pw))
    try:
        env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "NSBOX_SOCKET": str(tmp_path / "none.sock"),
               "NSBOX_IMAGE_DIR": view}
        r = as_user(pw, [NSBOX, "run", "--", "sh", "-c", "id -un; echo hi; exit 3"], env)
        assert r.returncode == 3 and r.stdout == b"sandbox\nhi\n", r
    finally:
        rootless_launch.unmount(view)
    # As root of a user namespace made by the test: the same, without --rootless.
    nested_dir = tmp_path / "nested"
    nested_dir.mkdir()
    os.chown(nested_dir, rootless_launch.NESTED_BASE, rootless_launch.NESTED_BASE)
    env = {"HOME": str(nested_dir), "PATH": "/usr/bin:/bin", "TMPDIR": str(nested_dir),
           "NSBOX_SOCKET": str(nested_dir / "none.sock"), "NSBOX_IMAGE_DIR": str(nested_dir / "images")}
    r = subprocess.run([sys.executable, os.path.join(HERE, "userns_launch.py"), "--idmap-image",
                        f"{IMAGE_DIR}:{nested_dir}/images", "--", NSBOX, "run", "--", "sh", "-c",
                        "id -un; exit 4"], env=env, capture_output=True, timeout=120)
    assert r.returncode == 4 and r.stdout == b"sandbox\n", r


def test_directories_of_the_image_can_be_renamed(ud):
    # overlayfs in a user namespace keeps its redirects in user.overlay.*
    # xattrs (userxattr); without them a directory rename fails with EXDEV.
    sb = ud.call("sandbox.create")["sandbox_id"]
    try:
        r = ud.call("sandbox.exec", sandbox_id=sb, user="root",
                    command="mv /etc/apt /etc/apt-moved && ls /etc/apt-moved | head -1 && test ! -e /etc/apt "
                            "&& mkdir /tmp/d && mv /tmp/d /tmp/e && ls -d /tmp/e")
        assert r["exit_code"] == 0 and r["stdout"].endswith("/tmp/e\n"), r
    finally:
        ud.call("sandbox.remove", sandbox_id=sb, force=True)
