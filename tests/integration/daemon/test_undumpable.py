# SPDX-License-Identifier: Apache-2.0
"""nsboxd holds secrets' values on their way to nsbox-egress and the keys of
the per-sandbox CAs: it is not dumpable, so a crash writes no core file of
it (nsbox-egress, which puts the values into requests, has been undumpable
since it drops its privileges: egress/main.c)."""
import os
import resource
import signal
import time

import pytest

from conftest import ASAN, Daemon

pytestmark = pytest.mark.hostroot("the core is looked for in host root's nsboxd's cwd")


def wait_gone(proc, seconds=30):
    deadline = time.monotonic() + seconds
    while proc.poll() is None:
        assert time.monotonic() < deadline, "nsboxd did not die of its SIGSEGV"
        time.sleep(0.05)


def test_a_crash_of_nsboxd_writes_no_core(tmp_path):
    # The sanitizer build's ASan would catch the SIGSEGV and exit 1: let it through, as a crash.
    asan = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":handle_segv=0"} if ASAN else {}
    d = Daemon(env={"NSBOX_WARM_POOL": "0", **asan})
    try:
        pid = d.proc.pid
        cwd = os.readlink("/proc/%d/cwd" % pid)
        with open("/proc/sys/kernel/core_pattern") as f:
            pattern = f.read().strip()
        if pattern.startswith("|") or "/" in pattern:
            pytest.skip("cores go elsewhere on this host (core_pattern %s)" % pattern)
        core = os.path.join(cwd, pattern.replace("%p", str(pid)))
        before = os.path.exists(core)
        resource.prlimit(pid, resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        os.kill(pid, signal.SIGSEGV)
        wait_gone(d.proc)
        made = not before and os.path.exists(core)
        if made:
            os.unlink(core)
        assert d.proc.returncode == -signal.SIGSEGV, d.proc.returncode
        assert not made, "a crash of nsboxd left its memory in %s" % core
    finally:
        d.stop()
