# SPDX-License-Identifier: Apache-2.0
"""Host uid isolation modes: per-sandbox ranges (idmapped image) by default,
and the shared-range fallback for kernels without idmapped mounts."""
import fcntl
import glob
import os
import signal
import subprocess
import time

import pytest
from nsbox_client import RpcError
from conftest import BUILD, IMAGE_DIR, Daemon, host_inits

# serial: hands out and locks host uid ranges (/run/nsbox-uid-ranges) and counts their processes
pytestmark = [pytest.mark.serial]


def init_uid_maps():
    """uid_map of every sandbox init on the host, by host pid."""
    maps = {}
    for exe in glob.glob("/proc/[0-9]*/exe"):
        try:
            if not os.readlink(exe).startswith("/memfd:nsbox-init"):
                continue
            with open(exe.replace("exe", "uid_map")) as f:
                maps[int(exe.split("/")[2])] = f.read().split()
        except OSError:
            continue
    return maps


def test_default_is_per_sandbox(daemon):
    assert daemon.call("server.info")["uid_isolation"] == "per-sandbox"


def test_unknown_mode_refuses_to_start():
    with pytest.raises(RuntimeError) as e:
        Daemon(extra_args=["--uid-isolation", "sometimes"])
    assert "uid_isolation must be" in str(e.value)


def test_auto_uses_per_sandbox_where_the_kernel_can():
    d = Daemon(extra_args=["--uid-isolation", "auto"])
    try:
        assert d.call("server.info")["uid_isolation"] == "per-sandbox"
    finally:
        assert d.stop() == 0


def test_shared_mode_runs_sandboxes_on_an_owned_copy_of_the_image():
    # Its start copies the whole image (~460 MiB): seconds on a quiet host, more on a busy one.
    d = Daemon(extra_args=["--uid-isolation", "shared", "--uid-pool-base", "1600000000",
                           "--uid-pool-ranges", "4"], start_timeout=180)
    try:
        assert d.call("server.info")["uid_isolation"] == "shared"
        a = d.call("sandbox.create")["sandbox_id"]
        b = d.call("sandbox.create")["sandbox_id"]
        for sb in (a, b):
            r = d.call("sandbox.exec", sandbox_id=sb, command="id -u; stat -c %u /usr/bin/env; "
                       "python3 -c 'print(6*7)'; echo x > /usr/local/owned && echo wrote",
                       user="root")
            assert r["stdout"].split() == ["0", "0", "42", "wrote"], r
        # The weaker mode it is: both sandboxes' roots are the same host uid.
        bases = {m[1] for m in init_uid_maps().values() if m[1] == "1600000000"}
        assert bases == {"1600000000"}
        # The shared image is a copy: the real image is untouched.
        assert not os.path.exists(os.path.join(IMAGE_DIR, "python", "rootfs", "usr", "local", "owned"))
        assert os.stat(os.path.join(IMAGE_DIR, "python", "rootfs", "usr", "bin", "env")).st_uid == 0
    finally:
        assert d.stop() == 0


def uid_bucket(uid):
    """The kernel's bucket for a uid's account (kernel/user.c: uidhashentry, 128 buckets)."""
    return ((uid >> 7) + uid) & 127


def test_each_sandboxs_users_land_in_their_own_bucket_of_the_kernels_uid_table(daemon):
    # Every setuid looks the uid's account up in a 128-bucket table, with
    # interrupts off. Ranges 65536 apart put uid N of every sandbox in one
    # bucket: at 1000 sandboxes, a chain of 1000 walked at each create and exec.
    made = [daemon.call("sandbox.create")["sandbox_id"] for _ in range(8)]
    try:
        maps = []
        for pid in host_inits(daemon):  # the made ones, and any the warm pool holds
            with open("/proc/%d/uid_map" % pid) as f:
                maps.append(f.read().split())
        assert all(int(m[2]) == 65536 for m in maps), maps
        bases = sorted({int(m[1]) for m in maps})
        assert len(bases) >= 8, bases
        assert all(b - a >= 65536 for a, b in zip(bases, bases[1:])), bases  # no overlap
        for user in (0, 1000):
            buckets = {uid_bucket(b + user) for b in bases}
            assert len(buckets) == len(bases), (user, bases, buckets)
    finally:
        for sid in made:
            daemon.call("sandbox.remove", sandbox_id=sid, force=True)


def test_managers_whose_pools_interleave_never_give_out_the_same_uids():
    # A's pool starts on a 65536 boundary, B's 1000 ids below the next one:
    # B's first range would hold 64536 of the uids of A's first range.
    a_base = 1_750_000_000 // 65536 * 65536
    b_base = a_base + 65536 - 1000
    a = Daemon(extra_args=["--uid-pool-base", str(a_base), "--uid-pool-ranges", "4", "--warm-pool", "0"])
    try:
        b = Daemon(extra_args=["--uid-pool-base", str(b_base), "--uid-pool-ranges", "4", "--warm-pool", "0"])
        try:
            a.call("sandbox.create")
            b.call("sandbox.create")
            bases = sorted({int(m[1]) for m in init_uid_maps().values()
                            if a_base <= int(m[1]) < b_base + 4 * 65664})
            assert len(bases) == 2 and bases[0] == a_base, bases
            assert bases[1] - bases[0] >= 65536, bases  # B skipped the range that overlaps A's
        finally:
            assert b.stop() == 0
    finally:
        assert a.stop() == 0


def test_a_uid_block_another_process_holds_is_left_alone():
    # The lock of a block, as any nsboxd takes it (one of an older version
    # too, where each range had the lock of its first uid).
    base = 1_760_000_000 // 65536 * 65536
    os.makedirs("/run/nsbox-uid-ranges", exist_ok=True)
    with open("/run/nsbox-uid-ranges/%d.lock" % base, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        d = Daemon(extra_args=["--uid-pool-base", str(base), "--uid-pool-ranges", "4", "--warm-pool", "0"])
        try:
            d.call("sandbox.create")
            bases = {int(m[1]) for m in init_uid_maps().values() if base <= int(m[1]) < base + 4 * 65664}
            assert len(bases) == 1 and min(bases) >= base + 65536, bases
        finally:
            assert d.stop() == 0


def restart(d):
    """The same nsboxd again on its state dir, after a kill -9 (it removes what the old one left)."""
    d.proc = subprocess.Popen(d.proc.args, stdout=d.log, stderr=subprocess.STDOUT,
                              env={k: v for k, v in os.environ.items() if not k.startswith("NSBOX_")})
    deadline = time.monotonic() + 60
    while True:
        try:
            return d.call("server.info")
        except OSError:
            assert d.proc.poll() is None and time.monotonic() < deadline, d.read_log()[-4000:]
            time.sleep(0.05)


@pytest.mark.hostroot("host uid ranges of two managers on one pool")
def test_a_range_is_not_handed_out_while_a_process_of_it_still_runs():
    """After a kill -9 of the manager that held it, a range stays out of use
    while any process runs with one of its uids (the dead manager's exec
    supervisors took ~0.1 s to go, and a second manager took the range within
    ~30 ms); once the last one is gone it is given out again."""
    base = 1_770_000_000 // 65536 * 65536
    pool = ["--uid-pool-base", str(base), "--uid-pool-ranges", "2", "--warm-pool", "0"]
    a = Daemon(extra_args=pool)
    lingering = None
    try:
        a.call("sandbox.create")
        assert {int(m[1]) for m in init_uid_maps().values()} >= {base}
        # A process of A's range that outlives A, as its supervisors did for a moment.
        lingering = subprocess.Popen(["setpriv", "--reuid", str(base + 1000), "--regid", str(base + 1000),
                                      "--clear-groups", "sleep", "120"])
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        b = Daemon(extra_args=pool)
        try:
            first = b.call("sandbox.create")["sandbox_id"]
            bases = {int(m[1]) for m in init_uid_maps().values() if base <= int(m[1]) < base + 2 * 65664}
            assert bases == {base + 65664}, bases  # not the range whose process still runs
            assert "still runs; not handed out" in b.read_log()
            lingering.kill()
            lingering.wait()
            # The range is free again once its last process is gone (a block
            # found stale is looked at again after a moment, not at every create).
            deadline = time.monotonic() + 10
            while True:
                try:
                    b.call("sandbox.create")
                    break
                except RpcError as e:
                    assert e.kind == "limit_reached" and time.monotonic() < deadline, e
                    time.sleep(0.05)
            bases = {int(m[1]) for m in init_uid_maps().values() if base <= int(m[1]) < base + 2 * 65664}
            assert bases == {base, base + 65664}, bases
            b.call("sandbox.remove", sandbox_id=first, force=True)
        finally:
            assert b.stop() == 0
    finally:
        if lingering is not None and lingering.poll() is None:
            lingering.kill()
            lingering.wait()
        if a.proc.poll() is not None and a.proc.returncode == -signal.SIGKILL:
            restart(a)
        assert a.stop() == 0
