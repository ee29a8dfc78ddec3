# SPDX-License-Identifier: Apache-2.0
"""Every end of a sandbox is logged with its reason: asked by a client, idle,
its init killed from outside, nsboxd stopping, a pooled sandbox giving way."""
import os
import signal
import time

from conftest import Daemon, host_inits


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
