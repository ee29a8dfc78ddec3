# SPDX-License-Identifier: Apache-2.0
"""A client's own host directories mounted into its sandboxes
(sandbox.create mounts[].host_path, nsbox run -v): opened with the client's
credentials below the operator's host_mount_roots, never through a symlink,
idmapped so that what the sandbox makes belongs to the client on the host,
read-only unless asked."""
import os
import subprocess
import shutil
import tempfile
import threading

import pytest

from conftest import BUILD, Daemon
from nsbox_client import as_uid

pytestmark = pytest.mark.hostroot("a client of another uid, and host directories it owns")

USER = 64200  # the client: owns its project dir
OTHER = 64201


@pytest.fixture(scope="module")
def root():
    d = tempfile.mkdtemp(prefix="nsbox-test-host-mounts-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(root):
    d = Daemon(env={"NSBOX_HOST_MOUNT_ROOTS": root})
    os.chmod(d.socket, 0o666)  # in production: membership of group nsbox
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def owned_dir(root, name, uid, mode=0o755):
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


def create_as(daemon, uid, mounts):
    """sandbox.create as uid: (sandbox_id or None, the error or None)."""
    out = as_uid(uid, daemon.socket, [["sandbox.create", {"mounts": mounts}]])[0]
    if "error" in out:
        return None, out["error"]
    return out["result"]["sandbox_id"], None


def run_as(daemon, uid, sid, command):
    out = as_uid(uid, daemon.socket, [["sandbox.exec", {"sandbox_id": sid, "command": command,
                                                        "timeout_seconds": 60}]])[0]
    assert "result" in out, out
    return out["result"]


def remove(daemon, sid):
    daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_files_made_in_a_mounted_project_belong_to_the_caller(daemon, root):
    project = owned_dir(root, "project", USER)
    with open(os.path.join(project, "main.py"), "w") as f:
        f.write("print('hello')\n")
    os.chown(os.path.join(project, "main.py"), USER, USER)
    sid, error = create_as(daemon, USER, [{"host_path": project, "path": "/workspace/project",
                                           "read_only": False}])
    assert error is None, error
    try:
        r = run_as(daemon, USER, sid, "cd /workspace/project && stat -c %U main.py && "
                   "echo \"print('edited')\" > main.py && mkdir pkg && echo x > pkg/new.txt && id -u")
        assert r["exit_code"] == 0 and r["stdout"] == "sandbox\n1000\n", r
    finally:
        remove(daemon, sid)
    for path in ["main.py", "pkg", "pkg/new.txt"]:
        st = os.stat(os.path.join(project, path))
        assert (st.st_uid, st.st_gid) == (USER, USER), (path, st.st_uid, st.st_gid)
    assert open(os.path.join(project, "main.py")).read() == "print('edited')\n"


def test_a_host_directory_is_read_only_unless_asked(daemon, root):
    project = owned_dir(root, "ro-project", USER)
    sid, error = create_as(daemon, USER, [{"host_path": project, "path": "/workspace/ro"}])
    assert error is None, error
    try:
        r = run_as(daemon, USER, sid, "echo x > /workspace/ro/f")
        assert r["exit_code"] != 0 and "Read-only file system" in r["stderr"], r
    finally:
        remove(daemon, sid)
    assert os.listdir(project) == []


def test_another_users_directory_is_refused(daemon, root):
    theirs = owned_dir(root, "theirs", OTHER, 0o755)  # readable by all, still not the caller's
    private = owned_dir(root, "private", OTHER, 0o700)
    for path in (theirs, private):
        for ro in (True, False):
            sid, error = create_as(daemon, USER, [{"host_path": path, "path": "/mnt/x", "read_only": ro}])
            assert sid is None and error["data"]["kind"] == "permission_denied", (path, ro, error)
    sid, error = create_as(daemon, USER, [{"host_path": private + "/sub", "path": "/mnt/x"}])
    assert sid is None and error["data"]["kind"] == "permission_denied", error


@pytest.mark.parametrize("host_path, kind, says", [
    ("/etc", "permission_denied", "not below a directory of host_mount_roots"),
    ("/proc/self/root", "permission_denied", "not below a directory of host_mount_roots"),
    ("/", "invalid_params", "host_path must be an absolute path"),
    ("ROOT/project/../private", "invalid_params", "host_path must be an absolute path"),
    ("ROOT/./project", "invalid_params", "host_path must be an absolute path"),
    ("relative/dir", "invalid_params", "host_path must be an absolute path"),
])
def test_paths_outside_the_roots_or_with_dots_are_refused(daemon, root, host_path, kind, says):
    owned_dir(root, "project", USER)
    sid, error = create_as(daemon, USER, [{"host_path": host_path.replace("ROOT", root), "path": "/mnt/x"}])
    assert sid is None and error["data"]["kind"] == kind and says in error["message"], error


def test_a_path_through_a_symlink_is_refused(daemon, root):
    owned_dir(root, "project", USER)
    link_dir = owned_dir(root, "links", USER)
    os.symlink(os.path.join(root, "project"), os.path.join(link_dir, "to-project"))
    os.symlink("/etc", os.path.join(link_dir, "to-etc"))
    for name in ("to-project", "to-etc"):
        sid, error = create_as(daemon, USER, [{"host_path": os.path.join(link_dir, name), "path": "/mnt/x"}])
        assert sid is None and error["data"]["kind"] == "permission_denied", error
        assert "symlink" in error["message"], error


def test_a_symlink_swapped_in_during_the_call_never_mounts_elsewhere(daemon, root):
    """The caller flips a name between its own directory and a symlink to
    /etc as fast as it can while asking for mounts: every sandbox made has its
    own directory there, never /etc."""
    owned_dir(root, "race", USER)
    target = owned_dir(root, "race/real", USER)
    with open(os.path.join(target, "mine"), "w") as f:
        f.write("mine\n")
    name = os.path.join(root, "race", "flip")
    stop = threading.Event()

    def flipper():
        while not stop.is_set():
            for step in (lambda: os.rename(target, name), lambda: os.rename(name, target),
                         lambda: os.symlink("/etc", name), lambda: os.unlink(name)):
                try:
                    step()
                except OSError:
                    pass

    t = threading.Thread(target=flipper)
    t.start()
    made, refused = 0, 0
    try:
        for _ in range(12):
            sid, error = create_as(daemon, USER, [{"host_path": name, "path": "/mnt/x"}])
            if sid is None:
                assert error["data"]["kind"] == "permission_denied", error
                refused += 1
                continue
            made += 1
            r = run_as(daemon, USER, sid, "ls /mnt/x")
            remove(daemon, sid)
            assert "passwd" not in r["stdout"], r
    finally:
        stop.set()
        t.join()
    assert made + refused == 12
    print("race: %d made, %d refused" % (made, refused))


def test_a_root_outside_host_mount_roots_is_refused(daemon):
    sid, error = create_as(daemon, USER, [{"host_path": "/var/tmp", "path": "/mnt/x"}])
    assert sid is None and error["data"]["kind"] == "permission_denied", error
    assert "host_mount_roots" in error["message"], error


def test_nsbox_run_v_pwd_edits_a_project_as_its_owner(daemon, root):
    """The opencode-style use: a project checked out on the host, `nsbox run
    -v $PWD:/workspace/project:rw` from inside it; the agent's edits and new
    files are the user's on the host."""
    project = owned_dir(root, "checkout", USER)
    with open(os.path.join(project, "app.py"), "w") as f:
        f.write("x = 1\n")
    os.chown(os.path.join(project, "app.py"), USER, USER)

    def drop():
        os.setgroups([])
        os.setgid(USER)
        os.setuid(USER)
    script = ("cd /workspace/project && sed -i s/1/2/ app.py && mkdir -p tests && "
              "echo 'def test(): pass' > tests/test_app.py && ls -n")
    p = subprocess.run([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "run", "-v",
                        ".:/workspace/project:rw", "--", "sh", "-c", script],
                       cwd=project, preexec_fn=drop, capture_output=True, timeout=120)
    assert p.returncode == 0, p
    assert b"1000 1000" in p.stdout, p.stdout  # in the sandbox: the sandbox user's
    assert open(os.path.join(project, "app.py")).read() == "x = 2\n"
    for path in ["app.py", "tests", "tests/test_app.py"]:
        st = os.stat(os.path.join(project, path))
        assert (st.st_uid, st.st_gid) == (USER, USER), (path, st.st_uid, st.st_gid)


def test_a_fuse_mount_below_a_root_is_refused_without_stalling_nsboxd(daemon, root):
    """A user's FUSE server below an allowed root that reads a lookup and never
    answers would hold the opening child in the kernel: the path is refused at
    the mount boundary before any lookup reaches it, and other clients are
    served meanwhile."""
    import ctypes
    import select
    import struct
    from nsbox_client import Client
    mnt = owned_dir(root, "fuse-user", USER)
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = "fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other" % (fd, USER, USER)
    assert libc.mount(b"nsbox-test-fuse", mnt.encode(), b"fuse", 0, opts.encode()) == 0, ctypes.get_errno()
    unanswered, stop = [], threading.Event()

    def serve():  # answers INIT only: every other request is read and left waiting
        while not stop.is_set():
            if not select.select([fd], [], [], 0.1)[0]:
                continue
            try:
                buf = os.read(fd, 1 << 20)
            except OSError:
                return
            _, opcode, unique, _ = struct.unpack_from("<IIQQ", buf)
            if opcode == 26:
                minor = struct.unpack_from("<II", buf, 40)[1]
                out = struct.pack("<IIIIHHIIHHI", 7, min(minor, 31), 0, 0, 16, 12, 65536, 1, 0, 0, 0) + b"\0" * 28
                os.write(fd, struct.pack("<IiQ", 16 + len(out), 0, unique) + out)
            else:
                unanswered.append(opcode)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    result = {}
    creator = threading.Thread(target=lambda: result.update(
        out=create_as(daemon, USER, [{"host_path": mnt + "/sub", "path": "/mnt/x"}])), daemon=True)
    try:
        creator.start()
        with Client(daemon.socket, timeout=20) as c:  # a stalled loop never answers this
            assert "version" in c.call("server.info")
        creator.join(20)
        assert not creator.is_alive()
        sid, error = result["out"]
        assert sid is None and "leaves the allowed root or its file system" in error["message"], error
        assert 1 not in unanswered, "the lookup reached the FUSE server"  # FUSE_LOOKUP
    finally:
        stop.set()
        server.join(5)
        os.close(fd)
        libc.umount2(mnt.encode(), 2)


def test_the_file_api_and_cp_reach_a_mounted_project_as_its_owner(daemon, root):
    """fs.* and nsbox cp see the host directory at its mount point, as the
    sandbox does: what they write there is the caller's on the host; a
    read-only mount stays read-only to them."""
    project = owned_dir(root, "fs-project", USER)
    with open(os.path.join(project, "main.py"), "w") as f:
        f.write("print('hello')\n")
    os.chown(os.path.join(project, "main.py"), USER, USER)
    ro = owned_dir(root, "fs-ro-project", USER)
    sid, error = create_as(daemon, USER, [{"host_path": project, "path": "/workspace/project",
                                           "read_only": False},
                                          {"host_path": ro, "path": "/workspace/ro"}])
    assert error is None, error

    def call(method, **params):
        return as_uid(USER, daemon.socket, [[method, dict(sandbox_id=sid, **params)]])[0]
    try:
        out = call("fs.read", path="/workspace/project/main.py")
        assert out.get("result", {}).get("content") == "print('hello')\n", out
        out = call("fs.write", path="/workspace/project/pkg/new.py", content="x = 1\n")
        assert "result" in out, out
        r = subprocess.run([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "cp",
                            sid + ":/workspace/project/main.py", "-"],
                           capture_output=True, preexec_fn=lambda: os.setresuid(USER, USER, USER))
        assert r.returncode == 0 and r.stdout == b"print('hello')\n", r
        out = call("fs.write", path="/workspace/ro/f.txt", content="x")
        assert out.get("error", {}).get("data", {}).get("kind") == "permission_denied", out
    finally:
        remove(daemon, sid)
    for path in ["pkg", "pkg/new.py"]:
        st = os.stat(os.path.join(project, path))
        assert (st.st_uid, st.st_gid) == (USER, USER), (path, st.st_uid, st.st_gid)
    assert open(os.path.join(project, "pkg/new.py")).read() == "x = 1\n"
    assert os.listdir(ro) == []
