# SPDX-License-Identifier: Apache-2.0
"""The temporary files of a writer in pieces (`.nsbox-upload-`, `.nsbox-cp-`, `.nsbox-write-` and
16 hex digits: nsbox cp, nsbox-http's uploads): nsboxd remembers those an fs.write (or, for a
tree, an fs.mkdir) of a connection made, forgets one renamed or removed on it, and removes the
rest when that connection closes, so that a writer killed mid-way leaves nothing behind. Only the
writing connection's close removes a file; what is removed is resolved inside the sandbox's root,
a symlink put in its place removed itself, never followed. Each sandbox's journal in nsboxd's
state dir says which are kept, so that when nsboxd is killed mid-upload, the next one, which adopts
the sandbox (live restore), removes them."""
import base64
import os
import tempfile
import time

import pytest

from conftest import dir_names, wait_for_dir
from nsbox_client import Client, RpcError
from test_service import Service, end_services

# A uid pool of its own (tests/integration/daemon/test_service.py), for the nsboxd killed here.
POOL_BASE = 1_760_000_000

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


@pytest.fixture
def restarts():
    """Starts of nsboxd with live restore on, all on one state dir and socket: start() makes one.
    At the end, what is left running is killed and a start without live restore removes the
    sandboxes that outlived it."""
    root = tempfile.mkdtemp(prefix="nsbox-staging-restore-")
    os.chmod(root, 0o755)
    started = []

    def start():
        svc = Service(root, extra_args=["--live-restore", "1", "--warm-pool", "0"], pool_base=POOL_BASE)
        started.append(svc)
        svc.start()
        return svc
    yield start
    end_services(root, started, POOL_BASE)


def restarted_after_kill_9(start, svc, sid):
    """nsboxd killed (-9) and started again on the same state dir: the new one, once it adopted sid."""
    svc.kill9()
    svc = start()
    assert "sandbox %s: adopted (live restore)" % sid in svc.log()
    return svc


def test_a_temporary_file_left_by_a_kill_9_of_nsboxd_goes_when_the_next_nsboxd_adopts_its_sandbox(restarts):
    """An upload and an nsbox cp tree open (their connection too) when nsboxd is killed: the next
    nsboxd removes both, and the ordinary file written beside them on the same connection stays
    (before: the temporary files stayed in the sandbox for good)."""
    svc = restarts()
    sid = svc.call("sandbox.create")["sandbox_id"]
    upload, tree = staging(), staging(".nsbox-cp-")
    with Client(svc.socket, timeout=60) as c:
        write(c, sid, "keep.txt", b"an ordinary file")
        write(c, sid, upload, b"first piece")
        write(c, sid, upload, b", second piece", append=True)
        c.call("fs.mkdir", sandbox_id=sid, path=tree, parents=True)
        write(c, sid, tree + "/sub/file.bin", b"copied")
        assert dir_names(svc, sid) == sorted(["keep.txt", upload, tree])
        svc = restarted_after_kill_9(restarts, svc, sid)
    wait_for_dir(svc, sid, lambda n: n == ["keep.txt"], "the temporary files a killed nsboxd kept stayed")
    assert svc.call("fs.read", sandbox_id=sid, path="keep.txt")["content"] == "an ordinary file"
    assert "temporary file(s) its previous nsboxd kept are removed" in svc.log()
    # and the journal says nothing more: a second restart has nothing to remove
    svc = restarted_after_kill_9(restarts, svc, sid)
    assert "its previous nsboxd kept" not in svc.log().split("adopted (live restore)")[-1]
    assert dir_names(svc, sid) == ["keep.txt"]


def test_an_upload_renamed_into_place_before_a_kill_9_of_nsboxd_stays(restarts):
    """Renamed, an upload is the user's file: the next nsboxd removes only what was still open
    (the marker, whose going says the restart's removal ran)."""
    svc = restarts()
    sid = svc.call("sandbox.create")["sandbox_id"]
    done, moved, marker = staging(), staging(), staging()
    with Client(svc.socket, timeout=60) as c:
        write(c, sid, done, b"whole ")
        write(c, sid, done, b"upload", append=True)
        c.call("fs.rename", sandbox_id=sid, **{"from": done, "to": "done.bin", "overwrite": True})
        # renamed to another temporary name: still temporary, under its new name
        write(c, sid, moved, b"moved")
        c.call("fs.rename", sandbox_id=sid, **{"from": moved, "to": marker, "overwrite": True})
        svc = restarted_after_kill_9(restarts, svc, sid)
    wait_for_dir(svc, sid, lambda n: marker not in n, "the open temporary file stayed")
    assert dir_names(svc, sid) == ["done.bin"]
    assert svc.call("fs.read", sandbox_id=sid, path="done.bin")["content"] == "whole upload"


def test_the_journal_of_temporary_files_stays_small_and_is_emptied_when_none_is_kept(restarts):
    """One upload stays open while 600 others are renamed into place: the sandbox's journal holds
    a bounded number of lines (rewritten with only what is kept), and none once nothing is."""
    svc = restarts()
    sid = svc.call("sandbox.create")["sandbox_id"]
    journal = os.path.join(svc.state, "sandboxes", sid, "staging.journal")
    kept = staging()

    def lines():
        with open(journal, "rb") as f:
            return f.read().count(b"\n")
    with Client(svc.socket, timeout=60) as c:
        write(c, sid, kept, b"open all along")
        most = 0
        for i in range(600):
            name = staging()
            write(c, sid, name, b"%d" % i)
            c.call("fs.rename", sandbox_id=sid, **{"from": name, "to": "done.bin", "overwrite": True})
            most = max(most, lines())
        assert 1 <= most <= 2 * 2 + 256 + 1, most
    wait_for_dir(svc, sid, lambda n: n == ["done.bin"], "the open upload stayed after its connection closed")
    deadline = time.monotonic() + 60
    while lines() != 0:
        assert time.monotonic() < deadline, "the journal still holds %d lines" % lines()
        time.sleep(0.05)
    assert svc.call("fs.read", sandbox_id=sid, path="done.bin")["content"] == "599"
