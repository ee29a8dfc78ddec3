# SPDX-License-Identifier: Apache-2.0
"""File snapshots of sandboxes, forks from them, and images committed from
sandboxes, driven over nsboxd's real socket."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import Daemon
from nsbox_client import RpcError, as_uid


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(extra_args=["--max-snapshots-per-uid", "2"])
    os.chmod(d.socket, 0o666)  # in production: membership of group nsbox
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


def sh(daemon, sid, command, user="sandbox", code=0):
    r = daemon.call("sandbox.exec", sandbox_id=sid, command=command, user=user, timeout_seconds=60)
    if code is not None:
        assert r["exit_code"] == code, (r["exit_code"], r["stdout"], r["stderr"])
    return r["stdout"]


def create(daemon, **params):
    return daemon.call("sandbox.create", **params)["sandbox_id"]


def remove(daemon, *ids):
    for sid in ids:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def error_of(daemon, method, **params):
    with pytest.raises(RpcError) as e:
        daemon.call(method, **params)
    return e.value


def test_fork_sees_the_parents_files_and_not_its_later_changes_nor_the_reverse(daemon):
    parent = create(daemon)
    sh(daemon, parent, "echo before > notes.txt && mkdir -p src && echo 'x = 1' > src/a.py")
    snap = daemon.call("sandbox.snapshot", sandbox_id=parent, name="base")
    assert snap["size_bytes"] > 0 and snap["name"] == "base"
    fork = create(daemon, from_snapshot=snap["snapshot_id"])
    assert daemon.call("sandbox.info", sandbox_id=fork)["from_snapshot"] == snap["snapshot_id"]
    assert sh(daemon, fork, "cat notes.txt src/a.py") == "before\nx = 1\n"

    sh(daemon, parent, "echo after > notes.txt && echo new > parent-only")
    sh(daemon, fork, "echo forked >> src/a.py && echo mine > fork-only")
    assert sh(daemon, fork, "cat notes.txt; ls") == "before\nfork-only\nnotes.txt\nsrc\n"
    assert sh(daemon, parent, "cat notes.txt src/a.py; ls") == "after\nx = 1\nnotes.txt\nparent-only\nsrc\n"
    remove(daemon, parent, fork)
    daemon.call("snapshot.remove", snapshot_id=snap["snapshot_id"])


def test_two_forks_of_one_snapshot_do_not_see_each_other(daemon):
    parent = create(daemon)
    sh(daemon, parent, "echo shared > common")
    snap = daemon.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"]
    remove(daemon, parent)  # the snapshot outlives its sandbox
    a, b = create(daemon, from_snapshot=snap), create(daemon, from_snapshot=snap)
    sh(daemon, a, "echo a > only-a && rm common")
    sh(daemon, b, "echo b > only-b && echo more >> common")
    assert sh(daemon, a, "ls") == "only-a\n"
    assert sh(daemon, b, "ls; cat common") == "common\nonly-b\nshared\nmore\n"
    assert daemon.call("snapshot.list")["snapshots"][0]["sandboxes"] == 2
    remove(daemon, a, b)
    daemon.call("snapshot.remove", snapshot_id=snap)


def test_deleted_image_files_stay_deleted_and_replaced_dirs_stay_replaced_in_a_fork(daemon):
    parent = create(daemon)
    # A whiteout (a file of the image deleted) and an opaque directory (a
    # directory of the image removed and made again, empty but for one file).
    sh(daemon, parent, "rm /etc/issue && rm -rf /etc/apt && mkdir /etc/apt && "
                       "touch /etc/apt/mine", user="root")
    snap = daemon.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"]
    fork = create(daemon, from_snapshot=snap)
    assert sh(daemon, fork, "test -e /etc/issue", code=None) == ""
    assert daemon.call("sandbox.exec", sandbox_id=fork, command="test -e /etc/issue")["exit_code"] == 1
    assert sh(daemon, fork, "ls /etc/apt") == "mine\n"
    # ... and a sandbox of the plain image still has them.
    plain = create(daemon)
    assert sh(daemon, plain, "test -e /etc/issue && ls /etc/apt | wc -l").strip() != "1"
    # A snapshot of the fork carries both the fork's and its snapshot's changes.
    sh(daemon, fork, "rm /etc/hostname && echo grand > /tmp/g", user="root")
    snap2 = daemon.call("sandbox.snapshot", sandbox_id=fork)["snapshot_id"]
    grandchild = create(daemon, from_snapshot=snap2)
    assert sh(daemon, grandchild, "ls /etc/issue /etc/hostname 2>&1 | grep -c 'No such'; ls /etc/apt; "
                                  "cat /tmp/g") == "2\nmine\ngrand\n"
    remove(daemon, parent, fork, plain, grandchild)
    for s in (snap, snap2):
        daemon.call("snapshot.remove", snapshot_id=s)


def host_uid_base(daemon, sid, marker):
    """The first host uid of the sandbox's range, from a process of its user seen from the host."""
    daemon.call("sandbox.exec", sandbox_id=sid, command="exec sleep %d" % marker, background=True)
    for _ in range(200):
        for entry in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    if f.read() != b"sleep\x00%d\x00" % marker:
                        continue
                with open("/proc/%s/status" % entry) as f:
                    return int(f.read().split("Uid:")[1].split()[0]) - 1000
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("no host process of sandbox %s" % sid)


def test_fork_files_keep_their_sandbox_side_owner_in_another_uid_range(daemon):
    parent = create(daemon)
    sh(daemon, parent, "echo mine > by-user && mkdir tree && echo x > tree/f")
    sh(daemon, parent, "echo root > /tmp/by-root && echo cfg > /etc/nsbox-test.conf", user="root")
    snap = daemon.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"]
    fork = create(daemon, from_snapshot=snap)
    assert host_uid_base(daemon, parent, 3601) != host_uid_base(daemon, fork, 3602)
    assert sh(daemon, fork, "stat -c '%u:%g %n' by-user tree tree/f /tmp/by-root /etc/nsbox-test.conf") == (
        "1000:1000 by-user\n1000:1000 tree\n1000:1000 tree/f\n0:0 /tmp/by-root\n0:0 /etc/nsbox-test.conf\n")
    # The sandbox user may change its files from the snapshot (copy-up from
    # the idmapped layer) and not root's.
    sh(daemon, fork, "echo more >> by-user && rm tree/f && rm -f /tmp/by-root; echo x >> /etc/nsbox-test.conf",
       code=None)
    assert sh(daemon, fork, "cat by-user; ls tree | wc -l; ls -l /tmp/by-root | wc -l; cat /etc/nsbox-test.conf") == (
        "mine\nmore\n0\n1\ncfg\n")
    remove(daemon, parent, fork)
    daemon.call("snapshot.remove", snapshot_id=snap)


def operator_images(daemon):
    """The images of the image dir (python, and desktop or browser where they were built)."""
    return sorted(i["name"] for i in daemon.call("image.list")["images"] if not i["removable"])


def test_a_committed_image_starts_sandboxes_with_the_installed_package(daemon):
    operator = operator_images(daemon)
    assert "python" in operator
    sb = create(daemon)
    # What pip install leaves: a module and its dist-info (PyPI is out of reach).
    sh(daemon, sb, "d=/usr/local/lib/python3.11/dist-packages && mkdir -p $d/nsboxdemo-1.2.dist-info && "
                   "echo 'ANSWER = 42' > $d/nsboxdemo.py && printf 'Name: nsboxdemo\\nVersion: 1.2\\n' > "
                   "$d/nsboxdemo-1.2.dist-info/METADATA && rm -rf $d/__pycache__", user="root")
    image = daemon.call("image.commit", sandbox_id=sb, name="py-demo")
    assert image["parent"] == "python" and image["size_bytes"] > 0
    assert image["python_packages"]["nsboxdemo"] == "1.2" and "numpy" in image["python_packages"]
    listed = {i["name"]: i for i in daemon.call("image.list")["images"]}
    assert listed["py-demo"]["parent"] == "python" and listed["py-demo"]["removable"] is True
    assert listed["py-demo"]["size_bytes"] < listed["python"]["size_bytes"] / 100
    assert listed["python"]["removable"] is False

    fresh = create(daemon, image="py-demo")
    assert sh(daemon, fresh, "python3 -c 'import nsboxdemo, numpy; print(nsboxdemo.ANSWER)'") == "42\n"
    # An image on the committed one: two layers over the base.
    sh(daemon, fresh, "echo 'B = 2' > /usr/local/lib/python3.11/dist-packages/second.py", user="root")
    daemon.call("image.commit", sandbox_id=fresh, name="py-demo2")
    third = create(daemon, image="py-demo2")
    assert sh(daemon, third, "python3 -c 'import nsboxdemo, second; print(nsboxdemo.ANSWER + second.B)'") == "44\n"

    # A fork of a sandbox of a committed image: the snapshot over both image layers.
    sh(daemon, fresh, "echo on-committed > mine.txt")
    snap = daemon.call("sandbox.snapshot", sandbox_id=fresh)
    assert snap["image"] == "py-demo"
    fork = create(daemon, from_snapshot=snap["snapshot_id"])
    assert sh(daemon, fork, "cat mine.txt; python3 -c 'import nsboxdemo, second; print(nsboxdemo.ANSWER)'") == (
        "on-committed\n42\n")
    remove(daemon, fork)
    assert error_of(daemon, "image.remove", name="py-demo").kind == "busy"  # sandboxes and a child image use it
    assert error_of(daemon, "image.remove", name="python").kind == "permission_denied"
    assert error_of(daemon, "image.commit", sandbox_id=sb, name="py-demo").kind == "invalid_params"
    for bad in ("../x", "a/b", "..", "x\n", "", "a" * 64):
        assert error_of(daemon, "image.commit", sandbox_id=sb, name=bad).kind == "invalid_params"
    # Another user neither sees nor uses it.
    replies = as_uid(1000, daemon.socket, [["image.list", {}], ["sandbox.create", {"image": "py-demo"}],
                                           ["image.remove", {"name": "py-demo"}]])
    assert sorted(i["name"] for i in replies[0]["result"]["images"]) == operator
    assert replies[1]["error"]["data"]["kind"] == "invalid_params"
    assert replies[2]["error"]["data"]["kind"] == "not_found"
    remove(daemon, sb, fresh, third)
    daemon.call("image.remove", name="py-demo2")
    e = error_of(daemon, "image.remove", name="py-demo")
    assert e.kind == "busy" and "snapshots" in str(e), e.error  # the snapshot of `fresh`
    daemon.call("snapshot.remove", snapshot_id=snap["snapshot_id"])
    daemon.call("image.remove", name="py-demo")
    assert sorted(i["name"] for i in daemon.call("image.list")["images"]) == operator


def test_bad_snapshot_ids_get_clear_errors(daemon):
    for bad in ("../../etc", "", 7, None, "E688E135-C283-4E2D-B493-066BCA05752E", "x" * 36):
        e = error_of(daemon, "sandbox.create", from_snapshot=bad)
        assert e.kind == "invalid_params" and "snapshot id" in str(e), e.error
        assert error_of(daemon, "snapshot.remove", snapshot_id=bad).kind == "invalid_params"
    missing = "00000000-0000-4000-8000-000000000000"
    assert error_of(daemon, "sandbox.create", from_snapshot=missing).kind == "not_found"
    assert error_of(daemon, "snapshot.remove", snapshot_id=missing).kind == "not_found"
    assert error_of(daemon, "sandbox.snapshot", sandbox_id=missing).kind == "not_found"
    assert error_of(daemon, "sandbox.snapshot", sandbox_id=create(daemon), name="a\x01b").kind == "invalid_params"
    parent = create(daemon)
    snap = daemon.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"]
    assert "image" in str(error_of(daemon, "sandbox.create", from_snapshot=snap, image="other"))
    remove(daemon, parent)
    daemon.call("snapshot.remove", snapshot_id=snap)


def test_another_users_snapshot_is_invisible_and_unusable(daemon):
    replies = as_uid(1000, daemon.socket, [["sandbox.create", {}]])
    theirs = replies[0]["result"]["sandbox_id"]
    replies = as_uid(1000, daemon.socket, [["sandbox.snapshot", {"sandbox_id": theirs}]])
    snap = replies[0]["result"]["snapshot_id"]
    # Root sees it; uid 1001 gets not_found, exactly as for a missing one.
    assert snap in [s["snapshot_id"] for s in daemon.call("snapshot.list")["snapshots"]]
    other = as_uid(1001, daemon.socket, [["snapshot.list", {}], ["sandbox.create", {"from_snapshot": snap}],
                                         ["snapshot.remove", {"snapshot_id": snap}]])
    assert other[0]["result"] == {"snapshots": [], "count": 0}
    assert other[1]["error"]["data"]["kind"] == "not_found"
    assert other[2]["error"]["data"]["kind"] == "not_found"
    # Its owner forks it; the quota (2 per uid here) holds.
    mine = as_uid(1000, daemon.socket, [["sandbox.create", {"from_snapshot": snap}],
                                        ["sandbox.snapshot", {"sandbox_id": theirs}],
                                        ["sandbox.snapshot", {"sandbox_id": theirs}],
                                        ["snapshot.list", {}]])
    assert mine[0]["result"]["from_snapshot"] == snap
    assert "result" in mine[1] and mine[2]["error"]["data"]["kind"] == "limit_reached"
    assert mine[3]["result"]["count"] == 2 and "owner" not in mine[3]["result"]["snapshots"][0]
    # In use: not removed.
    busy = as_uid(1000, daemon.socket, [["snapshot.remove", {"snapshot_id": snap}]])
    assert busy[0]["error"]["data"]["kind"] == "busy"
    remove(daemon, theirs, mine[0]["result"]["sandbox_id"])
    done = as_uid(1000, daemon.socket, [["snapshot.remove", {"snapshot_id": snap}],
                                        ["snapshot.remove", {"snapshot_id": mine[1]["result"]["snapshot_id"]}]])
    assert all(r["result"]["removed"] for r in done)


def test_a_corrupt_snapshot_dir_gets_a_clear_error(daemon):
    parent = create(daemon)
    snaps = [daemon.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"] for _ in range(2)]
    with open(os.path.join(daemon.state, "snapshots", snaps[0], "snapshot.json"), "w") as f:
        f.write('{"snapshot_id": "truncat')
    os.rename(os.path.join(daemon.state, "snapshots", snaps[1], "layer"),
              os.path.join(daemon.state, "snapshots", snaps[1], "gone"))
    for snap, why in zip(snaps, ("snapshot.json", "layer")):
        e = error_of(daemon, "sandbox.create", from_snapshot=snap)
        assert e.kind == "internal" and "damaged" in str(e) and why in str(e), e.error
    listed = {s["snapshot_id"]: s for s in daemon.call("snapshot.list")["snapshots"]}
    assert listed[snaps[0]] == {"snapshot_id": snaps[0], "damaged": True}
    for snap in snaps:
        daemon.call("snapshot.remove", snapshot_id=snap)
    remove(daemon, parent)


def test_removing_everything_leaves_nothing_under_the_state_dir(daemon):
    parent = create(daemon)
    sh(daemon, parent, "head -c 1000000 /dev/urandom > blob")
    snap = daemon.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"]
    fork = create(daemon, from_snapshot=snap)
    daemon.call("image.commit", sandbox_id=fork, name="leftover-check")
    assert error_of(daemon, "snapshot.remove", snapshot_id=snap).kind == "busy"
    remove(daemon, parent, fork)
    daemon.call("snapshot.remove", snapshot_id=snap)
    daemon.call("image.remove", name="leftover-check")
    assert os.listdir(os.path.join(daemon.state, "snapshots")) == []
    assert os.listdir(os.path.join(daemon.state, "images")) == []
    # (the warm pool's sandboxes stay)
    assert not {parent, fork} & set(os.listdir(os.path.join(daemon.state, "sandboxes")))
    assert daemon.call("snapshot.list")["count"] == 0


def test_snapshots_are_bounded_by_layer_disk_bytes():
    d = Daemon(extra_args=["--layer-disk-bytes", str(3 << 20)])
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.exec", sandbox_id=sid, command="head -c 2000000 /dev/zero > big")
        first = d.call("sandbox.snapshot", sandbox_id=sid)
        e = error_of(d, "sandbox.snapshot", sandbox_id=sid)
        assert e.kind == "limit_reached" and "layer_disk_bytes" in str(e)
        assert re.search(r"hold [0-9.]+ (KiB|MiB) of the 3 MiB of layer_disk_bytes", str(e)), str(e)
        assert sorted(os.listdir(os.path.join(d.state, "snapshots"))) == [first["snapshot_id"]]
    finally:
        assert d.stop() == 0


def test_snapshots_survive_a_restart_of_nsboxd():
    d = Daemon()
    state = d.state
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.exec", sandbox_id=sid, command="echo kept > k")
        snap = d.call("sandbox.snapshot", sandbox_id=sid)["snapshot_id"]
        d.proc.terminate()
        d.proc.wait(30)
        d2 = Daemon(extra_args=["--state-dir", state])
        try:
            fork = d2.call("sandbox.create", from_snapshot=snap)["sandbox_id"]
            assert d2.call("sandbox.exec", sandbox_id=fork, command="cat k")["stdout"] == "kept\n"
        finally:
            d2.stop()
    finally:
        d.stop()


def test_cli_fork_snapshot_commit_and_images(daemon):
    from conftest import ok, one_line_error
    parent = ok(daemon.cli("create")).stdout.decode().strip()
    ok(daemon.cli("sh", parent, "echo from-cli > f"))
    fork = ok(daemon.cli("fork", "--memory", "256M", parent)).stdout.decode().strip()
    assert ok(daemon.cli("sh", fork, "cat f")).stdout == b"from-cli\n"
    assert daemon.call("sandbox.info", sandbox_id=fork)["limits"]["memory_bytes"] == 256 << 20
    snap = ok(daemon.cli("snapshot", "--name", "by cli", parent)).stdout.decode().strip()
    listing = ok(daemon.cli("snapshot", "ls")).stdout.decode()
    assert snap in listing and "by cli" in listing
    assert json.loads(ok(daemon.cli("--json", "snapshots")).stdout)["count"] == 2
    other = ok(daemon.cli("create", "--from-snapshot", snap)).stdout.decode().strip()
    assert ok(daemon.cli("sh", other, "cat f")).stdout == b"from-cli\n"
    assert ok(daemon.cli("commit", other, "cli-image")).stdout == b"cli-image\n"
    images = ok(daemon.cli("images")).stdout.decode().splitlines()
    assert images[0].split() == ["NAME", "SIZE", "PARENT", "PYTHON", "CREATED"]
    assert [line.split()[2] for line in images if line.startswith("cli-image ")] == ["python"]
    assert "base of 1 live sandbox" in one_line_error(daemon.cli("snapshot", "rm", snap))
    ok(daemon.cli("rm", "-f", parent, fork, other))
    ok(daemon.cli("image", "rm", "cli-image"))
    for s in daemon.call("snapshot.list")["snapshots"]:
        ok(daemon.cli("snapshot", "rm", s["snapshot_id"]))
    assert "no snapshot" in one_line_error(daemon.cli("create", "--from-snapshot",
                                                      "00000000-0000-4000-8000-000000000000"))
    assert ok(daemon.cli("images")).stdout.decode().count("\n") == 1 + len(operator_images(daemon))


def test_special_files_are_kept_as_they_are_and_never_followed(daemon):
    parent = create(daemon)
    sh(daemon, parent, "ln -s /etc/shadow host-link && ln -s ../../../../../ up && mkfifo pipe && "
                       "printf x > plain && chmod 4755 plain && mkdir -p $(printf 'd/%.0s' $(seq 300)) && "
                       "head -c 3000000 /dev/zero > big && mkdir sub && ln big sub/big-again && "
                       "setfattr -n user.note -v kept plain 2>/dev/null; true")
    e = error_of(daemon, "sandbox.snapshot", sandbox_id=parent)
    assert e.kind == "internal" and "deeper than 200" in str(e), e.error
    assert os.listdir(os.path.join(daemon.state, "snapshots")) == []  # the half-made copy is gone
    sh(daemon, parent, "rm -rf d")
    snap = daemon.call("sandbox.snapshot", sandbox_id=parent)["snapshot_id"]
    layer = os.path.join(daemon.state, "snapshots", snap, "layer")
    for dirpath, dirnames, filenames in os.walk(layer):
        for name in filenames + dirnames:
            st = os.lstat(os.path.join(dirpath, name))
            assert not st.st_mode & 0o6000 or os.path.isdir(os.path.join(dirpath, name)), name
    fork = create(daemon, from_snapshot=snap)
    assert sh(daemon, fork, "readlink host-link up; test -p pipe && echo fifo; stat -c %a plain") == (
        "/etc/shadow\n../../../../../\nfifo\n755\n")
    # Hard links stay links: one copy, counted once.
    assert sh(daemon, fork, "stat -c '%h %i' big sub/big-again | uniq | wc -l; stat -c %h big") == "1\n2\n"
    assert daemon.call("snapshot.list")["snapshots"][0]["size_bytes"] < 4000000
    remove(daemon, parent, fork)
    daemon.call("snapshot.remove", snapshot_id=snap)


def busybox_layout(tmp_path):
    """A one-layer OCI image layout of busybox-static, made with umoci."""
    import shutil
    import subprocess
    if shutil.which("umoci") is None or not os.path.exists("/bin/busybox"):
        pytest.skip("umoci or busybox-static missing (make deps)")
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    for applet in ("sh", "echo", "id", "cat", "ls"):
        os.symlink("busybox", root / "bin" / applet)
    (root / "etc").mkdir()
    (root / "etc" / "os-release").write_text('ID="tinybox"\n')
    layout = str(tmp_path / "layout")
    for argv in (["umoci", "init", "--layout", layout], ["umoci", "new", "--image", layout + ":v1"],
                 ["umoci", "insert", "--image", layout + ":v1", str(root), "/"]):
        subprocess.run(argv, check=True, capture_output=True)
    return layout


def test_an_imported_oci_layout_and_docker_archive_run(daemon, tmp_path):
    import subprocess
    layout = busybox_layout(tmp_path)
    image = daemon.call("image.import", path=layout, name="tinybox", tag="v1")
    assert image["format"] == "oci-layout" and image["distribution"] == "tinybox" and image["size_bytes"] > 1 << 20
    sid = create(daemon, image="tinybox")
    assert sh(daemon, sid, "echo hello from busybox; id -u; cd && echo $PWD; ls /bin | wc -l") == (
        "hello from busybox\n1000\n/workspace\n6\n")
    listed = {i["name"]: i for i in daemon.call("image.list")["images"]}
    assert listed["tinybox"]["imported_from"] == layout and listed["tinybox"]["removable"] is True
    # Everyone may use it; only root imports and removes.
    others = as_uid(1000, daemon.socket, [["sandbox.create", {"image": "tinybox"}],
                                          ["image.import", {"path": layout, "name": "mine"}],
                                          ["image.remove", {"name": "tinybox"}]])
    assert others[0]["result"]["image"] == "tinybox"
    assert others[1]["error"]["data"]["kind"] == "permission_denied"
    assert others[2]["error"]["data"]["kind"] == "permission_denied"
    # A commit on it is its committer's alone, not everyone's as its parent.
    sh(daemon, sid, "echo layered > /workspace/on-top")
    assert daemon.call("image.commit", sandbox_id=sid, name="tinybox-plus")["parent"] == "tinybox"
    assert as_uid(1000, daemon.socket, [["sandbox.create", {"image": "tinybox-plus"}]])[0]["error"]["data"][
        "kind"] == "invalid_params"
    plus = create(daemon, image="tinybox-plus")
    assert sh(daemon, plus, "cat on-top") == "layered\n"
    remove(daemon, sid, plus, others[0]["result"]["sandbox_id"])
    daemon.call("image.remove", name="tinybox-plus")

    archive = str(tmp_path / "tinybox.tar")
    if subprocess.run(["skopeo", "--insecure-policy", "copy", "oci:%s:v1" % layout, "docker-archive:%s" % archive],
                      capture_output=True).returncode == 0:
        assert daemon.call("image.import", path=archive, name="tinybox-tar")["format"] == "docker-archive"
        sid = create(daemon, image="tinybox-tar")
        assert sh(daemon, sid, "cat /etc/os-release") == 'ID="tinybox"\n'
        remove(daemon, sid)
        daemon.call("image.remove", name="tinybox-tar")

    not_image = tmp_path / "junk.tar"
    not_image.write_bytes(b"not a tarball at all")
    for params, kind in (({"path": str(not_image), "name": "junk"}, "invalid_params"),
                         ({"path": str(tmp_path), "name": "junk"}, "invalid_params"),
                         ({"path": "relative/dir", "name": "junk"}, "invalid_params"),
                         ({"path": layout, "name": "tinybox"}, "invalid_params"),
                         ({"path": layout, "name": "junk", "tag": "no-such-tag"}, "invalid_params"),
                         ({"path": layout, "name": "../junk"}, "invalid_params")):
        e = error_of(daemon, "image.import", **params)
        assert e.kind == kind, (params, e.error)
    daemon.call("image.remove", name="tinybox")
    assert os.listdir(os.path.join(daemon.state, "images")) == []


def test_cli_image_import(daemon, tmp_path):
    from conftest import ok
    layout = busybox_layout(tmp_path)
    assert ok(daemon.cli("image", "import", "--tag", "v1", layout, "tiny-cli")).stdout == b"tiny-cli\n"
    assert "tiny-cli" in ok(daemon.cli("images")).stdout.decode()
    sid = ok(daemon.cli("create", "--image", "tiny-cli")).stdout.decode().strip()
    assert ok(daemon.cli("exec", sid, "--", "echo", "ok")).stdout == b"ok\n"
    ok(daemon.cli("rm", "-f", sid))
    ok(daemon.cli("image", "rm", "tiny-cli"))


def test_snapshots_of_a_sandbox_that_keeps_writing_succeed(daemon):
    sid = create(daemon)
    # Files and directories come and go, and change type, while the copies run.
    daemon.call("sandbox.exec", sandbox_id=sid, background=True, timeout_seconds=60, command=(
        "i=0; while true; do i=$((i+1)); mkdir -p churn/d$((i%7)); echo $i > churn/d$((i%7))/f$((i%13)); "
        "rm -rf churn/d$(((i+3)%7)); ln -sfn d$((i%5)) churn/link; "
        "[ $((i%2)) = 0 ] && { rm -rf churn/x; mkdir churn/x; } || { rm -rf churn/x; echo > churn/x; }; done"))
    while daemon.call("sandbox.exec", sandbox_id=sid, command="test -d churn/d3")["exit_code"] != 0:
        time.sleep(0.05)
    snaps = [daemon.call("sandbox.snapshot", sandbox_id=sid)["snapshot_id"] for _ in range(8)]
    forks = [create(daemon, from_snapshot=s) for s in snaps[:2]]
    for fork in forks:
        assert sh(daemon, fork, "ls churn >/dev/null && echo ok") == "ok\n"
    remove(daemon, sid, *forks)
    for s in snaps:
        daemon.call("snapshot.remove", snapshot_id=s)


PIPELINED = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rwb")
requests = json.loads(sys.argv[2])
for i, (method, params) in enumerate(requests):
    f.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
f.flush()
print(json.dumps([json.loads(f.readline()) for _ in requests]))
"""


def test_one_user_runs_at_most_four_copies_at_once():
    import subprocess
    d = Daemon(extra_args=["--max-snapshots-per-uid", "20"])
    os.chmod(d.socket, 0o666)
    try:
        sid = as_uid(1000, d.socket, [["sandbox.create", {}]])[0]["result"]["sandbox_id"]
        as_uid(1000, d.socket, [["sandbox.exec", {"sandbox_id": sid, "command": (
            "mkdir many && cd many && for i in $(seq 3000); do echo $i > $i; done")}]])

        def drop():
            os.setgroups([])
            os.setgid(1000)
            os.setuid(1000)
        out = subprocess.run(["/usr/bin/python3", "-c", PIPELINED, d.socket,
                              json.dumps([["sandbox.snapshot", {"sandbox_id": sid}]] * 6)],
                             preexec_fn=drop, capture_output=True, timeout=300, check=True)
        replies = json.loads(out.stdout)
        kinds = [r["error"]["data"]["kind"] if "error" in r else "ok" for r in replies]
        assert kinds.count("ok") == 4 and kinds.count("busy") == 2, replies
    finally:
        assert d.stop() == 0


# Inodes: empty files, symlinks and FIFOs cost no bytes, so
# layer_disk_bytes alone let one snapshot of a default sandbox put 550,550
# inodes on the host for 8 KiB.

def layer_dirs(d):
    """Every entry of the state dir's snapshot and image dirs, half-made (.tmp-*) ones too."""
    return (sorted(os.listdir(os.path.join(d.state, "snapshots"))),
            sorted(os.listdir(os.path.join(d.state, "images"))))


def empty_files(n, where="e"):
    return "mkdir %s && cd %s && seq %d | xargs touch && ls | wc -l" % (where, where, n)


def test_a_snapshot_or_commit_of_many_empty_files_is_refused_by_layer_inodes_per_snapshot():
    d = Daemon(extra_args=["--layer-inodes-per-snapshot", "5000"])
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        assert sh(d, sid, empty_files(20000)) == "20000\n"
        for method, params in (("sandbox.snapshot", {}), ("image.commit", {"name": "many-inodes"})):
            e = error_of(d, method, sandbox_id=sid, **params)
            assert e.kind == "limit_reached" and "limit layer_inodes_per_snapshot" in str(e), e.error
            assert layer_dirs(d) == ([], [])
        # Below the bound it is made, and says its inodes: e's 3000 files, e, /workspace.
        sh(d, sid, "rm -rf e && " + empty_files(3000))
        snap = d.call("sandbox.snapshot", sandbox_id=sid)
        assert snap["inodes"] == 3002 and snap["size_bytes"] == 8192, snap
        image = d.call("image.commit", sandbox_id=sid, name="some-inodes")
        assert image["inodes"] == 3002, image
        assert layer_dirs(d) == ([snap["snapshot_id"]], ["some-inodes"])
    finally:
        assert d.stop() == 0


def test_one_users_snapshots_and_images_are_bounded_by_layer_inodes_per_uid():
    d = Daemon(extra_args=["--layer-inodes-per-uid", "3000", "--max-snapshots-per-uid", "10"])
    os.chmod(d.socket, 0o666)
    try:
        sid = as_uid(1000, d.socket, [["sandbox.create", {}]])[0]["result"]["sandbox_id"]
        replies = as_uid(1000, d.socket, [
            ["sandbox.exec", {"sandbox_id": sid, "command": empty_files(2000)}],
            ["sandbox.snapshot", {"sandbox_id": sid}],
            ["sandbox.snapshot", {"sandbox_id": sid}],
            ["image.commit", {"sandbox_id": sid, "name": "over-uid"}]])
        assert replies[0]["result"]["stdout"] == "2000\n"
        first = replies[1]["result"]
        assert first["inodes"] == 2002
        for refused in replies[2:]:
            error = refused["error"]
            assert error["data"]["kind"] == "limit_reached" and "limit layer_inodes_per_uid" in error["message"], error
            assert "uid 1000's snapshots and images hold 2002 of 3000" in error["message"], error
        assert layer_dirs(d) == ([first["snapshot_id"]], [])
        # Root's copies count in all, not against uid 1000's budget.
        assert d.call("sandbox.snapshot", sandbox_id=sid)["inodes"] == 2002
        # Removing the snapshot gives the inodes back.
        as_uid(1000, d.socket, [["snapshot.remove", {"snapshot_id": first["snapshot_id"]}]])
        again = as_uid(1000, d.socket, [["sandbox.snapshot", {"sandbox_id": sid}]])[0]
        assert again["result"]["inodes"] == 2002, again
    finally:
        assert d.stop() == 0


def test_all_snapshots_together_are_bounded_by_layer_inodes():
    d = Daemon(extra_args=["--layer-inodes", "3000"])
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        assert sh(d, sid, empty_files(2000)) == "2000\n"
        first = d.call("sandbox.snapshot", sandbox_id=sid)
        e = error_of(d, "sandbox.snapshot", sandbox_id=sid)
        assert e.kind == "limit_reached" and "(limit layer_inodes;" in str(e), e.error
        assert "all snapshots and images hold 2002 of 3000" in str(e), e.error
        assert layer_dirs(d) == ([first["snapshot_id"]], [])
    finally:
        assert d.stop() == 0


def test_the_sandbox_disk_runs_out_of_inodes_at_disk_inodes():
    d = Daemon(extra_args=["--disk-inodes", "2000"])
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        r = d.call("sandbox.exec", sandbox_id=sid, command="mkdir e && cd e && seq 5000 | xargs touch; ls | wc -l")
        made = int(r["stdout"])
        assert "No space left on device" in r["stderr"] and 1900 < made < 2000, (made, r["stderr"][-300:])
        # Only inodes ran out, not bytes; removing files gives them back.
        assert d.call("sandbox.exec", sandbox_id=sid, command="df -i / | tail -1")["stdout"].split()[1] == "2000"
        sh(d, sid, "rm -rf e && seq 100 | xargs touch")
    finally:
        assert d.stop() == 0


CHURN = r"""
import os
os.makedirs("/workspace/c", exist_ok=True)
os.chdir("/workspace/c")
names = ["n%d" % i for i in range(8)]
while True:
    for symlink in (True, False):
        for n in names:
            try:
                os.unlink(n)
            except FileNotFoundError:
                pass
            if symlink:
                os.symlink("target", n)
            else:
                os.close(os.open(n, os.O_WRONLY | os.O_CREAT, 0o644))
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (apt-get install strace)")
def test_a_snapshot_of_symlinks_turning_into_files_meanwhile_succeeds():
    """The copy stats an entry, then reads it as the type it saw: a symlink
    the sandbox replaced by a file in between failed readlinkat with EINVAL,
    a file replaced by a symlink was skipped and its chown failed with
    ENOENT, and the snapshot was `internal`. strace delays each readlinkat
    of nsboxd's copy workers by 20 ms, so symlink reads lose that race."""
    d = Daemon(extra_args=["--max-snapshots-per-uid", "100"])
    tracer = None
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.exec", sandbox_id=sid, background=True, timeout_seconds=300,
               command="python3 -c '%s'" % CHURN.replace("'", "'\\''"))
        while d.call("sandbox.exec", sandbox_id=sid, command="ls /workspace/c | wc -l")["stdout"] != "8\n":
            time.sleep(0.05)
        tracer = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=readlinkat",
                                   "-e", "inject=readlinkat:delay_enter=20000", "-p", str(d.proc.pid)])
        time.sleep(1)  # attached
        kinds = []
        for _ in range(6):
            try:
                kinds.append(d.call("sandbox.snapshot", sandbox_id=sid)["snapshot_id"] and "ok")
            except RpcError as e:
                kinds.append("%s: %s" % (e.kind, e))
        assert kinds == ["ok"] * 6, kinds
    finally:
        if tracer is not None:
            tracer.terminate()
            tracer.wait(30)
        assert d.stop() == 0


def snapshot_ids(daemon):
    return sorted(s["snapshot_id"] for s in daemon.call("snapshot.list")["snapshots"])


def wait_for(predicate, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_cli_fork_leaves_no_unnamed_snapshot_behind(daemon):
    from conftest import ok, one_line_error
    before = snapshot_ids(daemon)
    parent = ok(daemon.cli("create")).stdout.decode().strip()
    ok(daemon.cli("sh", parent, "echo kept > f"))
    fork = ok(daemon.cli("fork", parent)).stdout.decode().strip()
    taken = [s for s in daemon.call("snapshot.list")["snapshots"] if s["snapshot_id"] not in before]
    assert len(taken) == 1 and taken[0]["remove_when_unused"] is True and taken[0]["sandboxes"] == 1, taken
    assert ok(daemon.cli("sh", fork, "cat f")).stdout == b"kept\n"
    # A fork whose create fails leaves nothing either.
    assert "memory" in one_line_error(daemon.cli("fork", "--memory", "1T", parent))
    assert len(snapshot_ids(daemon)) == len(before) + 1
    ok(daemon.cli("rm", "-f", fork))
    wait_for(lambda: snapshot_ids(daemon) == before, "the fork's snapshot outlived it")
    assert not [n for n in os.listdir(os.path.join(daemon.state, "snapshots")) if not n.startswith(".")
                and n not in before]
    # A named one is the user's: it stays after its fork goes.
    fork = ok(daemon.cli("fork", "--name", "keep me", parent)).stdout.decode().strip()
    ok(daemon.cli("rm", "-f", fork, parent))
    kept = [s for s in daemon.call("snapshot.list")["snapshots"] if s["snapshot_id"] not in before]
    assert [s["name"] for s in kept] == ["keep me"] and kept[0]["remove_when_unused"] is False
    daemon.call("snapshot.remove", snapshot_id=kept[0]["snapshot_id"])


def test_remove_when_unused_must_be_a_boolean(daemon):
    sid = create(daemon)
    e = error_of(daemon, "sandbox.snapshot", sandbox_id=sid, remove_when_unused="yes")
    assert e.kind == "invalid_params" and "remove_when_unused" in str(e), e.error
    remove(daemon, sid)


def call_with_notifications(daemon, method, **params):
    with daemon.client() as c:
        msg = c.response(c.request(method, params))
        assert "result" in msg, msg
        return msg["result"], [n["params"] for n in c.notifications if n["method"] == "progress"]


def test_long_copies_report_their_progress_when_asked(daemon, tmp_path):
    sid = create(daemon)
    sh(daemon, sid, "head -c 60000000 /dev/urandom > big && for i in $(seq 300); do echo $i > small-$i; done")
    snap, told = call_with_notifications(daemon, "sandbox.snapshot", sandbox_id=sid, progress=True)
    assert told, "no progress notification"
    assert all(t["operation"] == "sandbox.snapshot" for t in told)
    assert told[0]["done_bytes"] == 0 and told[0]["total_bytes"] >= 60000000, told[0]
    done = [t["done_bytes"] for t in told]
    assert done == sorted(done) and told[-1]["done_bytes"] == told[-1]["total_bytes"] == snap["size_bytes"], told
    image, told = call_with_notifications(daemon, "image.commit", sandbox_id=sid, name="progress-image",
                                          progress=True)
    assert told and told[-1]["operation"] == "image.commit" and told[-1]["done_bytes"] == told[-1]["total_bytes"]
    # Not asked: not told.
    again, told = call_with_notifications(daemon, "sandbox.snapshot", sandbox_id=sid)
    assert told == []
    layout = busybox_layout(tmp_path)
    _, told = call_with_notifications(daemon, "image.import", path=layout, name="progress-box", tag="v1",
                                      progress=True)
    assert [t["step"] for t in told] == ["unpack the layers (umoci)", "measure and record the image"], told
    assert all(t["total_steps"] == 3 for t in told)
    e = error_of(daemon, "sandbox.snapshot", sandbox_id=sid, progress="yes")
    assert e.kind == "invalid_params" and "progress" in str(e)
    remove(daemon, sid)
    for s in (snap, again):
        daemon.call("snapshot.remove", snapshot_id=s["snapshot_id"])
    daemon.call("image.remove", name="progress-image")
    daemon.call("image.remove", name="progress-box")
