# SPDX-License-Identifier: Apache-2.0
"""nsbox cp through nsboxd's file API: exact bytes whoever owns the file,
directory trees with modes and symlinks both ways, tar streams on - (docker
cp), no partial file when a copy fails, paths outside the sandbox's root
refused, clear one-line errors."""
import base64
import hashlib
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import tarfile
import threading
import time

import pytest

from conftest import BUILD, ok, one_line_error, wait_for_dir
from nsbox_client import RpcError

pytestmark = [pytest.mark.nested]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def sh(daemon, sid, script, user="sandbox"):
    r = daemon.call("sandbox.exec", sandbox_id=sid, argv=["sh", "-c", script], user=user, timeout_seconds=120)
    assert r["exit_code"] == 0, r
    return r["stdout"]


def workspace_names(daemon, sid, path="/workspace"):
    return [e["name"] for e in daemon.call("fs.list", sandbox_id=sid, path=path)["entries"]]


def test_cp_every_byte_value_and_30mb_out_of_root_only_files_is_exact(daemon, sandbox, tmp_path):
    """Read as nsboxd reads (fs.read), not as the sandbox user: a root-owned
    0600 file comes out byte for byte."""
    every = bytes(range(256)) * 17
    big = os.urandom(30 * 1000 * 1000)
    (tmp_path / "every.bin").write_bytes(every)
    (tmp_path / "big.bin").write_bytes(big)
    ok(daemon.cli("cp", str(tmp_path / "every.bin"), sandbox + ":every.bin"))
    ok(daemon.cli("cp", str(tmp_path / "big.bin"), sandbox + ":/workspace/big.bin", timeout=300))
    sums = sh(daemon, sandbox, "sha256sum every.bin big.bin")
    assert sha256(every) in sums and sha256(big) in sums
    sh(daemon, sandbox, "mkdir -m 700 /opt/private && cp every.bin big.bin /opt/private/ && "
                        "chmod 600 /opt/private/*.bin", user="root")

    ok(daemon.cli("cp", sandbox + ":/opt/private/every.bin", str(tmp_path / "every.out")))
    ok(daemon.cli("cp", sandbox + ":/opt/private/big.bin", str(tmp_path / "big.out"), timeout=300))
    assert (tmp_path / "every.out").read_bytes() == every
    assert sha256((tmp_path / "big.out").read_bytes()) == sha256(big)
    assert stat.S_IMODE((tmp_path / "big.out").stat().st_mode) == 0o600
    # Nothing temporary left on either side.
    assert sorted(os.listdir(tmp_path)) == ["big.bin", "big.out", "every.bin", "every.out"]
    assert not [n for n in workspace_names(daemon, sandbox) if n.startswith(".nsbox")]


def make_tree(root):
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o750)
    (root / "sub" / "secret").write_bytes(b"\x00\xffkey")
    (root / "sub" / "secret").chmod(0o600)
    (root / "sub" / "deep" / "empty").write_bytes(b"")
    (root / "sub").chmod(0o700)
    os.symlink("run.sh", root / "link")
    os.symlink("/etc/hostname", root / "sub" / "abs")


def describe(root):
    """{relative path: (kind, mode or target, content)} of a host tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), None)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), open(p, "rb").read())
    return out


def test_cp_directory_tree_round_trip_keeps_modes_and_symlinks(daemon, sandbox, tmp_path):
    src = tmp_path / "tree"
    make_tree(src)
    os.mkfifo(src / "fifo")
    r = ok(daemon.cli("cp", str(src), sandbox + ":/workspace"))
    assert b"skipped" in r.stderr and b"fifo" in r.stderr
    os.unlink(src / "fifo")

    inside = sh(daemon, sandbox, "cd /workspace/tree && stat -c '%n %a %F' run.sh sub sub/secret && "
                                 "readlink link sub/abs && ./run.sh")
    assert "run.sh 750 regular file" in inside and "sub 700 directory" in inside
    assert "sub/secret 600 regular file" in inside and "run.sh\n/etc/hostname\nran\n" in inside
    assert daemon.call("fs.stat", sandbox_id=sandbox, path="tree/link")["type"] == "symlink"

    back = tmp_path / "back"
    back.mkdir()
    ok(daemon.cli("cp", sandbox + ":tree", str(back)))
    assert describe(back / "tree") == describe(src)
    assert os.listdir(back) == ["tree"]


def test_cp_tar_streams_both_ways(daemon, sandbox, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in (("a/bin.dat", bytes(range(256)), 0o640), ("top.txt", b"top\n", 0o755)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("a/link")
        link.type, link.linkname = tarfile.SYMTYPE, "bin.dat"
        tar.addfile(link)
    sh(daemon, sandbox, "mkdir -p /workspace/dest")
    ok(daemon.cli("cp", "-", sandbox + ":/workspace/dest", input=buf.getvalue()))
    assert sh(daemon, sandbox, "cd dest && stat -c '%n %a' a/bin.dat top.txt && readlink a/link") == \
        "a/bin.dat 640\ntop.txt 755\nbin.dat\n"

    out = ok(daemon.cli("cp", sandbox + ":/workspace/dest", "-")).stdout
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"dest", "dest/a", "dest/a/bin.dat", "dest/a/link", "dest/top.txt"}
        assert tar.extractfile("dest/a/bin.dat").read() == bytes(range(256))
        assert members["dest/a/bin.dat"].mode == 0o640 and members["dest/top.txt"].mode == 0o755
        assert members["dest/a/link"].issym() and members["dest/a/link"].linkname == "bin.dat"


def dynamic_needs(path):
    """The libraries a binary's dynamic section needs, or None without one."""
    dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    if "There is no dynamic section" in dynamic:
        return None
    return [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]


def test_the_cli_is_a_static_binary():
    """No dynamic loader at every start of every command: finding, mapping and
    relocating libc alone was ~30 page faults (~14 us each on a VM) of the ~70
    of a start. nsbox-tar, the helper of nsbox cp's tar streams, is what loads
    libarchive."""
    needed = dynamic_needs(os.path.join(BUILD, "nsbox"))
    if needed and any(lib.startswith(("libasan", "libubsan")) for lib in needed):
        pytest.skip("the sanitizer build (make asan) links the CLI dynamically")
    assert needed is None, needed
    assert "libarchive.so.13" in dynamic_needs(os.path.join(BUILD, "nsbox-tar"))


def test_the_cli_is_built_on_musl_not_glibc():
    """A static glibc's start reads the CPU's features with cpuid for its
    string functions, and in a VM each cpuid exits to the hypervisor: about
    half of the CLI's start here. musl's start runs none (the Makefile's
    CLI_LIBC; `make bench` shows what it is worth). A static glibc carries
    the name of its tunables' variable, which it reads at every start."""
    cli = os.path.join(BUILD, "nsbox")
    if dynamic_needs(cli):
        pytest.skip("the sanitizer build (make asan) links the CLI with glibc, dynamically")
    with open(cli, "rb") as f:
        image = f.read()
    assert b"GLIBC_TUNABLES" not in image
    # It runs: a musl CLI that could not start would fail every other test, but
    # say it here too, with the thread stack the MCP server's calls run on.
    r = subprocess.run([cli, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), (r.returncode, r.stdout[-300:], r.stderr[-300:])


def test_tar_streams_go_through_the_helper_and_say_when_it_is_missing(daemon, sandbox, tmp_path):
    daemon.call("fs.write", sandbox_id=sandbox, path="kept.txt", content="kept\n")
    r = daemon.cli("cp", sandbox + ":/workspace", "-")
    assert r.returncode == 0, r.stderr
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        assert tar.extractfile("workspace/kept.txt").read() == b"kept\n"

    # A CLI copied somewhere alone has no helper beside it (nor in PREFIX/libexec/nsbox).
    alone = tmp_path / "nsbox"
    shutil.copy(os.path.join(BUILD, "nsbox"), alone)
    helper = "/usr/local/libexec/nsbox/nsbox-tar"
    if os.path.exists(helper):
        pytest.skip("%s is installed: the CLI would find it" % helper)
    for args, stdin in ([sandbox + ":/workspace", "-"], b""), (["-", sandbox + ":/workspace"], r.stdout):
        p = subprocess.run([str(alone), "--socket", daemon.socket, "cp", *args], input=stdin, capture_output=True,
                           timeout=60)
        line = one_line_error(p)
        assert p.returncode == 125 and "nsbox-tar" in line and "not found" in line, line
        assert p.stdout == b""


def test_a_broken_tar_stream_in_is_one_clear_line_and_writes_nothing(daemon, sandbox):
    p = daemon.cli("cp", "-", sandbox + ":/workspace", input=b"this is not a tar stream" * 100)
    line = one_line_error(p)
    assert p.returncode == 125 and "tar stream" in line, line
    assert workspace_names(daemon, sandbox) == []


def test_cp_that_fills_the_sandbox_disk_leaves_no_file_and_keeps_the_old_one(daemon, tmp_path):
    sid = daemon.call("sandbox.create", limits={"disk_bytes": 8 << 20})["sandbox_id"]
    try:
        big = tmp_path / "big.bin"
        big.write_bytes(os.urandom(20 << 20))
        line = one_line_error(daemon.cli("cp", str(big), sid + ":big.bin", timeout=300))
        assert workspace_names(daemon, sid) == []
        assert line.startswith("nsbox: /workspace/big.bin in the sandbox: ") and "no space left" in line

        daemon.call("fs.write", sandbox_id=sid, path="keep.txt", content="old content\n")
        one_line_error(daemon.cli("cp", str(big), sid + ":keep.txt", timeout=300))
        assert daemon.call("fs.read", sandbox_id=sid, path="keep.txt")["content"] == "old content\n"
        assert workspace_names(daemon, sid) == ["keep.txt"]
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_a_tar_stream_into_a_full_disk_fails_at_once_while_its_writer_still_writes(daemon, tmp_path):
    """The copy fails when the sandbox's disk is full, though the tar stream's
    writer has not closed it: nsbox-tar, waiting for more of it, goes too."""
    sid = daemon.call("sandbox.create", limits={"disk_bytes": 8 << 20})["sandbox_id"]
    try:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("big.bin")
            info.size = 20 << 20
            tar.addfile(info, io.BytesIO(os.urandom(info.size)))
        p = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "cp", "-", sid + ":/workspace"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def write_most_and_keep_open():
            try:
                p.stdin.write(buf.getvalue()[:16 << 20])
                p.stdin.flush()
            except BrokenPipeError:
                pass

        writer = threading.Thread(target=write_most_and_keep_open, daemon=True)
        writer.start()
        try:
            p.wait(timeout=120)
        finally:
            p.kill()
            p.wait()
            p.stdin.close()
        err = p.stderr.read()
        assert p.returncode == 125 and "no space left" in err.decode(), (p.returncode, err)
        assert workspace_names(daemon, sid) == []
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_cp_refuses_paths_outside_the_sandbox_root(daemon, sandbox, tmp_path):
    # /proc, /dev and /sys are not the sandbox's files: fs.* does not reach them.
    line = one_line_error(daemon.cli("cp", sandbox + ":/proc/self/environ", str(tmp_path / "env")))
    assert "outside the sandbox" in line
    assert not (tmp_path / "env").exists()
    # A tar entry climbing out of the destination directory is not extracted.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    sh(daemon, sandbox, "mkdir -p /workspace/box")
    line = one_line_error(daemon.cli("cp", "-", sandbox + ":/workspace/box", input=buf.getvalue()))
    assert '".."' in line
    assert "escaped.txt" not in workspace_names(daemon, sandbox)


def test_cp_missing_source_or_directory_is_one_clear_line(daemon, sandbox, tmp_path):
    line = one_line_error(daemon.cli("cp", sandbox + ":/nope", str(tmp_path / "x")))
    assert line == "nsbox: %s:/nope: No such file or directory in the sandbox" % sandbox
    assert os.listdir(tmp_path) == []
    line = one_line_error(daemon.cli("cp", str(tmp_path / "missing"), sandbox + ":x"))
    assert "missing" in line and "No such file or directory" in line
    # As docker cp: the destination's directory must exist.
    (tmp_path / "f").write_bytes(b"f")
    line = one_line_error(daemon.cli("cp", str(tmp_path / "f"), sandbox + ":/no/such/dir/f"))
    assert "/no/such/dir: No such directory in the sandbox" in line
    assert "no" not in workspace_names(daemon, sandbox, "/")


def test_fs_read_from_an_offset(daemon, sandbox):
    data = bytes(range(256)) * 64
    daemon.call("fs.write", sandbox_id=sandbox, path="off.bin", encoding="base64",
                content=base64.b64encode(data).decode())
    r = daemon.call("fs.read", sandbox_id=sandbox, path="off.bin", encoding="base64", offset=1000, max_bytes=300)
    assert base64.b64decode(r["content"]) == data[1000:1300] and r["truncated"] is True and r["size"] == len(data)
    r = daemon.call("fs.read", sandbox_id=sandbox, path="off.bin", encoding="base64", offset=len(data) - 10)
    assert base64.b64decode(r["content"]) == data[-10:] and r["truncated"] is False
    r = daemon.call("fs.read", sandbox_id=sandbox, path="off.bin", encoding="base64", offset=len(data) + 5)
    assert r["content"] == "" and r["truncated"] is False
    with pytest.raises(RpcError) as e:
        daemon.call("fs.read", sandbox_id=sandbox, path="off.bin", offset=-1)
    assert e.value.kind == "invalid_params"


def test_cp_out_of_a_file_larger_than_one_read(daemon, tmp_path):
    """cp reads in parts from offsets: a file past fs.read's 64 MiB per call
    comes out whole (it was refused before)."""
    sid = daemon.call("sandbox.create", limits={"disk_bytes": 200 << 20})["sandbox_id"]
    try:
        sh(daemon, sid, "head -c 70000000 /dev/urandom > /workspace/big.bin")
        want = sh(daemon, sid, "sha256sum < /workspace/big.bin").split()[0]
        ok(daemon.cli("cp", sid + ":/workspace/big.bin", str(tmp_path / "big.out"), timeout=300))
        assert sha256((tmp_path / "big.out").read_bytes()) == want
        r = daemon.cli("cp", sid + ":/workspace/big.bin", "-", timeout=300)
        assert r.returncode == 0 and sha256(r.stdout) == want
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_cp_into_an_existing_directory_cut_short_keeps_the_file_it_would_replace_whole(daemon, tmp_path):
    """Into an existing directory a file goes in place (a merge): one of several pieces is written
    beside it and renamed over it once whole (before: written over it piece by piece, and removed
    when a piece failed, so a full disk lost the old file)."""
    sid = daemon.call("sandbox.create", limits={"disk_bytes": "8M"})["sandbox_id"]
    try:
        sh(daemon, sid, "mkdir -p /workspace/dst/src && printf old > /workspace/dst/src/data.bin")
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "data.bin").write_bytes(os.urandom(12 << 20))  # three pieces
        r = daemon.cli("cp", str(tmp_path / "src"), sid + ":/workspace/dst", timeout=300)
        assert r.returncode != 0 and b"space" in r.stderr, r
        assert sh(daemon, sid, "cat /workspace/dst/src/data.bin") == "old"
        assert workspace_names(daemon, sid, "/workspace/dst/src") == ["data.bin"]
        # One that fits replaces it whole, and nothing temporary is left.
        fits = os.urandom(6 << 20)
        (tmp_path / "src" / "data.bin").write_bytes(fits)
        ok(daemon.cli("cp", str(tmp_path / "src"), sid + ":/workspace/dst", timeout=300))
        assert sh(daemon, sid, "sha256sum < /workspace/dst/src/data.bin").split()[0] == sha256(fits)
        assert workspace_names(daemon, sid, "/workspace/dst/src") == ["data.bin"]
    finally:
        daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_an_interrupted_cp_into_a_sandbox_removes_what_it_wrote(daemon, sandbox):
    """Ctrl-C (or SIGTERM) of nsbox cp into a sandbox: it stops between two pieces, removes its
    temporary file and exits 128+N; the file it would replace is whole (before: killed where it
    stood, leaving its temporary file, which took the sandbox's disk, behind)."""
    sh(daemon, sandbox, "printf old > /workspace/keep.bin")
    p = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "cp", "-",
                          sandbox + ":/workspace/keep.bin"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(os.urandom(6 << 20))  # a first piece goes to the sandbox
        p.stdin.flush()
        deadline = time.monotonic() + 60
        while not [n for n in workspace_names(daemon, sandbox) if n.startswith(".nsbox")]:
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        p.stdin.close()  # as a pipe's writer interrupted with it would
        assert p.wait(timeout=60) == 128 + signal.SIGINT, p.stderr.read()
        assert b"interrupted" in p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert sh(daemon, sandbox, "cat /workspace/keep.bin") == "old"
    assert workspace_names(daemon, sandbox) == ["keep.bin"]


def test_a_cp_killed_mid_copy_leaves_no_temporary_file(daemon, sandbox):
    """kill -9 of nsbox cp mid-copy (its stdin a pipe that is never finished): it cannot clean
    up, but nsboxd removes the temporary file its connection wrote once that connection closes;
    the file it would replace stays whole (before: the temporary file stayed for good, taking
    the sandbox's disk)."""
    sh(daemon, sandbox, "printf old > /workspace/keep.bin")
    p = subprocess.Popen([os.path.join(BUILD, "nsbox"), "--socket", daemon.socket, "cp", "-",
                          sandbox + ":/workspace/keep.bin"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(os.urandom(6 << 20))  # a first piece goes to the sandbox; the rest never comes
        p.stdin.flush()
        wait_for_dir(daemon, sandbox, lambda names: any(n.startswith(".nsbox-cp-") for n in names),
                     "no temporary file appeared")
        p.kill()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
    wait_for_dir(daemon, sandbox, lambda names: names == ["keep.bin"],
                 "the killed copy's temporary file was not removed")
    assert sh(daemon, sandbox, "cat /workspace/keep.bin") == "old"
    # Logged once the worker that removed the file has reported back: after the removal.
    deadline = time.monotonic() + 30
    while "a closed connection left" not in daemon.read_log():
        assert time.monotonic() < deadline, "nsboxd did not log the removal"
        time.sleep(0.05)
