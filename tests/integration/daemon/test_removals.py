# SPDX-License-Identifier: Apache-2.0
"""Every end of a sandbox is logged with its reason: asked by a client, idle,
its init killed from outside, nsboxd stopping, a pooled sandbox giving way."""
import ctypes
import os
import signal
import time

import pytest

from conftest import Daemon, host_inits
from nsbox_client import RpcError


def wait_for_line(d, line, timeout=30):
    deadline = time.monotonic() + timeout
    while line not in d.read_log():
        assert time.monotonic() < deadline, (line, d.read_log()[-3000:])
        time.sleep(0.05)


def test_each_removal_is_logged_with_its_reason():
    d = Daemon(extra_args=["--warm-pool", "0", "--idle-action", "remove"])
    stopped = False
    try:
        asked = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.remove", sandbox_id=asked, force=True)
        wait_for_line(d, "sandbox %s: removed: asked by uid %d (force)" % (asked, os.getuid()))

        idle = d.call("sandbox.create", idle_timeout_seconds=1)["sandbox_id"]
        wait_for_line(d, "sandbox %s: removed: idle for 1 s (idle_timeout_seconds)" % idle)

        killed = d.call("sandbox.create")["sandbox_id"]
        inits = host_inits(d)
        assert len(inits) == 1, inits
        os.kill(inits[0], signal.SIGKILL)
        wait_for_line(d, "sandbox %s: removed: its init was killed by signal 9 (Killed) from outside the sandbox"
                      % killed)

        left = d.call("sandbox.create")["sandbox_id"]
        stopped = True
        assert d.stop() == 0
        assert "sandbox %s: removed: nsboxd is stopping" % left in d.final_log, d.final_log[-3000:]
        # one line per removal, each with a reason
        removed = [line for line in d.final_log.splitlines() if " info: sandbox " in line or " warn: sandbox " in line]
        removed = [line for line in removed if ": removed" in line]
        assert len(removed) == 4 and all(": removed: " in line for line in removed), removed
    finally:
        if not stopped:
            d.stop()


def test_a_pooled_sandbox_giving_way_says_so():
    mib = 1 << 20
    # room for the pooled sandbox or a client's, not both
    d = Daemon(extra_args=["--warm-pool", "1", "--memory-bytes", str(64 * mib), "--disk-bytes", str(16 * mib),
                           "--memory-commit-bytes", str(100 * mib)])
    try:
        wait_for_line(d, "created for uid 0")  # the pooled one
        sid = d.call("sandbox.create", limits={"memory_bytes": 32 * mib})["sandbox_id"]
        wait_for_line(d, ": removed: a pooled sandbox gave its memory commit to a client's")
        d.call("sandbox.remove", sandbox_id=sid, force=True)
    finally:
        assert d.stop() == 0


PTRACE_SEIZE = 0x4206
WAIT_ALL = 0x40000000  # __WALL: a tracee that is not our child


def host_pids_with_cmdline(cmdline):
    found = []
    for name in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                if f.read() == cmdline:
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.hostroot("ptraces a process of the sandbox from the host")
def test_a_remove_is_answered_before_the_kernel_has_ended_the_sandbox():
    # Ending every process and namespace of a sandbox is the kernel's work
    # and was most of a remove's time. The answer does not wait for it: the
    # sandbox is gone for clients at once (not listed, its removal recorded,
    # its place free for the next create), and its end is logged when it
    # comes. A process of the sandbox held by a tracer on the host keeps its
    # init from ending until the tracer reaps it: the remove is answered
    # meanwhile.
    d = Daemon(extra_args=["--warm-pool", "0", "--max-sandboxes", "1"])
    libc = ctypes.CDLL(None, use_errno=True)
    traced = None
    try:
        sid = d.call("sandbox.create")["sandbox_id"]
        d.call("sandbox.exec", sandbox_id=sid, argv=["sleep", "1000.25"], background=True)
        deadline = time.monotonic() + 10
        while not host_pids_with_cmdline(b"sleep\x001000.25\x00"):
            assert time.monotonic() < deadline, "the background sleep did not start"
            time.sleep(0.02)
        pid, = host_pids_with_cmdline(b"sleep\x001000.25\x00")
        assert libc.ptrace(PTRACE_SEIZE, pid, None, None) == 0, os.strerror(ctypes.get_errno())
        traced = pid
        with d.client(timeout=10) as c:
            assert c.call("sandbox.remove", sandbox_id=sid, force=True) == {"sandbox_id": sid, "removed": True}
            listed = c.call("sandbox.list", include_inactive=True)
            assert sid not in [s["sandbox_id"] for s in listed["sandboxes"]], listed
            assert [r["reason"] for r in listed["removed"] if r["sandbox_id"] == sid] == \
                ["asked by uid %d (force)" % os.getuid()], listed
            with pytest.raises(RpcError) as e:
                c.call("sandbox.exec", sandbox_id=sid, argv=["true"])
            assert e.value.kind == "gone", e.value
            assert c.call("server.info")["sandboxes"] == 0
            other = c.call("sandbox.create")["sandbox_id"]  # max_sandboxes is 1
        # Its end is still to come: the traced process waits to be reaped.
        assert os.path.exists(os.path.join(d.state, "sandboxes", sid))
        assert ": removed: asked by" not in d.read_log()
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, WAIT_ALL)
        traced = None
        wait_for_line(d, "sandbox %s: removed: asked by uid %d (force)" % (sid, os.getuid()))
        deadline = time.monotonic() + 10
        while os.path.exists(os.path.join(d.state, "sandboxes", sid)):
            assert time.monotonic() < deadline, "the removed sandbox's dir stayed"
            time.sleep(0.02)
        assert d.call("sandbox.exec", sandbox_id=other, argv=["true"])["exit_code"] == 0
    finally:
        if traced is not None:
            os.kill(traced, signal.SIGKILL)
            os.waitpid(traced, WAIT_ALL)
        d.stop()
