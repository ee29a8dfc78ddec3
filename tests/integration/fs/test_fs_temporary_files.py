# SPDX-License-Identifier: Apache-2.0
"""The temporary files of a writer in pieces (`.nsbox-upload-`, `.nsbox-cp-`, `.nsbox-write-` and
16 hex digits: nsbox cp, nsbox-http's uploads): nsboxd remembers those an fs.write (or, for a
tree, an fs.mkdir) of a connection made, forgets one renamed or removed on it, and removes the
rest when that connection closes, so that a writer killed mid-way leaves nothing behind. Only the
writing connection's close removes a file; what is removed is resolved inside the sandbox's root,
a symlink put in its place removed itself, never followed."""
import base64
import os
import time

import pytest

from conftest import dir_names, wait_for_dir
from nsbox_client import RpcError

pytestmark = [pytest.mark.nested]


def staging(prefix=".nsbox-upload-"):
    return prefix + os.urandom(8).hex()


def sh(daemon, sid, script):
    r = daemon.call("sandbox.exec", sandbox_id=sid, argv=["sh", "-c", script], timeout_seconds=60)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def write(client, sid, path, data, append=False):
    return client.call("fs.write", sandbox_id=sid, path=path, content=base64.b64encode(data).decode(),
                       encoding="base64", append=append)


def test_a_temporary_file_goes_when_its_writers_connection_closes(daemon, sandbox):
    """Two uploads on one connection: the one renamed into place stays, the one never finished is
    removed when the connection closes (before: it stayed in the sandbox for good)."""
    done, left = staging(), staging()
    with daemon.client() as c:
        write(c, sandbox, done, b"a" * 1000)
        write(c, sandbox, left, b"b" * 1000)
        write(c, sandbox, done, b"a" * 1000, append=True)
        write(c, sandbox, left, b"b" * 1000, append=True)
        c.call("fs.rename", sandbox_id=sandbox, **{"from": done, "to": "done.bin", "overwrite": True})
        assert dir_names(daemon, sandbox) == sorted(["done.bin", left])
    wait_for_dir(daemon, sandbox, lambda n: n == ["done.bin"], "the unfinished upload's temporary file stayed")
    assert sh(daemon, sandbox, "wc -c < done.bin").strip() == "2000"


def test_another_connections_temporary_file_stays_until_its_own_connection_closes(daemon, sandbox):
    """A's upload is open while B's connection, which wrote another, closes: only B's goes."""
    mine, theirs = staging(), staging()
    with daemon.client() as a:
        write(a, sandbox, mine, b"open upload")
        with daemon.client() as b:
            write(b, sandbox, theirs, b"given up")
            # B only stats A's file: reading it is not writing it
            b.call("fs.stat", sandbox_id=sandbox, path=mine)
        wait_for_dir(daemon, sandbox, lambda n: theirs not in n, "B's temporary file stayed after B closed")
        assert dir_names(daemon, sandbox) == [mine]
        write(a, sandbox, mine, b", still written", append=True)
        assert sh(daemon, sandbox, "cat " + mine) == "open upload, still written"
    wait_for_dir(daemon, sandbox, lambda n: n == [], "A's temporary file stayed after A closed")


def test_a_temporary_name_renamed_then_used_again_by_another_connection_is_that_ones(daemon, sandbox):
    """A renames its upload into place; B then writes a file under the very name A used: A's close
    leaves B's file (A forgot the name at its rename), B's close removes it."""
    name, marker = staging(), staging()
    with daemon.client() as b:
        with daemon.client() as a:
            write(a, sandbox, name, b"A's upload")
            a.call("fs.rename", sandbox_id=sandbox, **{"from": name, "to": "a.bin", "overwrite": True})
            write(b, sandbox, name, b"B's upload")
            write(a, sandbox, marker, b"A leaves this one")  # its removal says A's close was handled
        wait_for_dir(daemon, sandbox, lambda n: marker not in n, "A's other temporary file stayed")
        assert dir_names(daemon, sandbox) == sorted(["a.bin", name])
        assert sh(daemon, sandbox, "cat " + name) == "B's upload"
    wait_for_dir(daemon, sandbox, lambda n: n == ["a.bin"], "B's temporary file stayed after B closed")
    assert sh(daemon, sandbox, "cat a.bin") == "A's upload"


def test_a_temporary_tree_goes_with_all_it_holds(daemon, sandbox):
    """nsbox cp writes a tree under a temporary directory it makes with fs.mkdir."""
    top = staging(".nsbox-cp-")
    with daemon.client() as c:
        c.call("fs.mkdir", sandbox_id=sandbox, path=top, parents=True)
        write(c, sandbox, top + "/sub/deeper/file.bin", os.urandom(3 << 20))
        c.call("fs.symlink", sandbox_id=sandbox, target="/workspace", path=top + "/sub/loop")
        assert dir_names(daemon, sandbox) == [top]
    wait_for_dir(daemon, sandbox, lambda n: n == [], "the temporary tree stayed")


def test_a_symlink_put_in_a_temporary_files_place_is_removed_not_followed(daemon, sandbox):
    """The sandbox replaces the writer's temporary file and tree with symlinks to its own files
    and directory: the close removes the links, and what they point to stays whole."""
    f, d = staging(), staging(".nsbox-cp-")
    sh(daemon, sandbox, "mkdir keepdir && echo kept > keepdir/x && echo kept > keep.txt")
    with daemon.client() as c:
        write(c, sandbox, f, b"upload")
        c.call("fs.mkdir", sandbox_id=sandbox, path=d, parents=True)
        sh(daemon, sandbox, "rm %s && ln -s keep.txt %s && rmdir %s && ln -s keepdir %s" % (f, f, d, d))
    wait_for_dir(daemon, sandbox, lambda n: n == ["keep.txt", "keepdir"], "the symlinks stayed")
    assert sh(daemon, sandbox, "cat keep.txt keepdir/x") == "kept\nkept\n"


def test_a_name_that_is_not_temporary_is_never_removed_at_close(daemon, sandbox):
    """Only staging names: a look-alike (15 or 17 digits, upper case, another prefix) is the user's."""
    alike = [".nsbox-upload-0123456789abcde", ".nsbox-upload-0123456789abcdef0", ".nsbox-upload-0123456789ABCDEF",
             ".nsbox-other-0123456789abcdef", "plain.txt"]
    marker = staging()
    with daemon.client() as c:
        for name in alike:
            write(c, sandbox, name, b"mine")
        write(c, sandbox, marker, b"temporary")
    wait_for_dir(daemon, sandbox, lambda n: marker not in n, "the temporary file stayed")
    assert dir_names(daemon, sandbox) == sorted(alike)


def test_a_sandbox_removed_while_an_upload_is_open_is_no_trouble(daemon):
    sid = daemon.call("sandbox.create")["sandbox_id"]
    with daemon.client() as c:
        write(c, sid, staging(), b"x" * (2 << 20))
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)
    # nsboxd is fine, and another sandbox's cleanup still works
    other = daemon.call("sandbox.create")["sandbox_id"]
    try:
        with daemon.client() as c:
            write(c, other, staging(), b"y")
        wait_for_dir(daemon, other, lambda n: n == [], "the temporary file stayed")
    finally:
        daemon.call("sandbox.remove", sandbox_id=other, force=True)


def test_one_connection_holds_a_bounded_number_of_temporary_files(daemon, sandbox):
    """A client that opens temporary names without end is refused past 1024 (nsboxd's memory stays
    bounded), with room again once one is renamed; all of them go at its close."""
    with daemon.client() as c:
        made = [staging() for _ in range(1024)]
        for name in made:
            write(c, sandbox, "t/" + name, b"")
        with pytest.raises(RpcError) as e:
            write(c, sandbox, "t/" + staging(), b"")
        assert e.value.kind == "limit_reached" and "1024" in str(e.value), e.value.error
        write(c, sandbox, "t/" + made[0], b"appended", append=True)  # one it holds: still written
        c.call("fs.rename", sandbox_id=sandbox, **{"from": "t/" + made[0], "to": "t/kept", "overwrite": True})
        write(c, sandbox, "t/" + staging(), b"")
    wait_for_dir(daemon, sandbox, lambda n: n == ["kept"], "the temporary files stayed", path="/workspace/t")


def test_a_connection_that_leaves_in_a_blocking_shell_run_still_has_its_files_removed(daemon, sandbox):
    """The files go when the connection is over, after its last request: a blocking shell.run
    whose client left was interrupted but its request never answered, so the connection was never
    over (and its memory never freed): its temporary file stayed for good."""
    left = staging()
    daemon.call("shell.create", sandbox_id=sandbox, name="held")
    with daemon.client() as c:
        write(c, sandbox, left, b"given up")
        c.request("shell.run", {"sandbox_id": sandbox, "session": "held", "command": "sleep 300"})
        deadline = time.monotonic() + 30
        while "sleep 300" not in sh(daemon, sandbox, "ps -eo args"):
            assert time.monotonic() < deadline, "the shell's command did not start"
            time.sleep(0.05)
    wait_for_dir(daemon, sandbox, lambda n: left not in n, "the temporary file stayed after its client left")
    # the run was interrupted; the shell is still there for the next command, once it is over
    deadline = time.monotonic() + 30
    while True:
        try:
            r = daemon.call("shell.run", sandbox_id=sandbox, session="held", command="echo after")
            break
        except RpcError as e:
            assert "runs command" in str(e) and time.monotonic() < deadline, e
            time.sleep(0.05)
    assert r["stdout"] == "after\n", r
