# SPDX-License-Identifier: Apache-2.0
"""Where the seccomp filter is loaded: by nsbox-init once, when the profile
lets the runtime's own syscalls through (execs inherit it), or by each exec
as its last step, when the profile is stricter than the runtime. Either way
every exec runs under it."""
import json
import os
import shutil
import signal
import time

import pytest
from conftest import REPO, Daemon

pytestmark = [pytest.mark.nested]

PROFILES = os.path.join(REPO, "seccomp-profiles")

STATUS = "grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs):' /proc/1/status /proc/self/status"

# capset: in the runtime's list (runtime/seccomp_check.c: each exec clears
# its capability sets with it), needed by no ordinary program. An exec has
# no capabilities: setting empty sets changes nothing. 126 is capset on
# x86_64.
CAPSET = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)()
r = libc.syscall(126, hdr, data)
print("capset", "ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
"""


def strict_profile(path):
    """default.json with capset allowed nowhere: its default action (EPERM) applies."""
    with open(os.path.join(PROFILES, "default.json")) as f:
        profile = json.load(f)
    for entry in profile["syscalls"]:
        if "capset" in entry.get("names", []):
            entry["names"].remove("capset")
    with open(path, "w") as f:
        json.dump(profile, f)


@pytest.fixture(scope="module")
def daemon(daemon_readable_tmp):
    profiles = daemon_readable_tmp / "seccomp"
    profiles.mkdir()
    shutil.copy(os.path.join(PROFILES, "default.json"), profiles / "default.json")
    strict_profile(profiles / "strict.json")
    d = Daemon(extra_args=["--seccomp-dir", str(profiles)])
    yield d
    assert d.stop() == 0, d.final_log[-4000:]


def statuses(daemon, sb, user):
    r = daemon.call("sandbox.exec", sandbox_id=sb, command=STATUS, user=user)
    assert r["exit_code"] == 0, r
    found = {}
    for line in r["stdout"].splitlines():
        path, field, value = line.replace(":", " ", 2).split()
        found[(path, field)] = int(value)
    return found


@pytest.mark.parametrize("profile, init_carries", [("default", True), ("strict", False)])
@pytest.mark.parametrize("user", ["sandbox", "root"])
def test_every_exec_runs_under_the_filter_wherever_it_is_loaded(daemon, profile, init_carries, user):
    sb = daemon.call("sandbox.create", seccomp_profile=profile)["sandbox_id"]
    try:
        s = statuses(daemon, sb, user)
        assert s[("/proc/1/status", "Seccomp")] == (2 if init_carries else 0), s
        assert s[("/proc/self/status", "Seccomp")] == 2, s
        assert s[("/proc/self/status", "NoNewPrivs")] == 1, s
        # One filter, wherever it was loaded: an exec under an init that
        # carries it loads no second one (the field is there from Linux 5.9).
        assert s.get(("/proc/self/status", "Seccomp_filters"), 1) == 1, s
        r = daemon.call("sandbox.exec", sandbox_id=sb, argv=["python3", "-c", CAPSET], user=user)
        assert r["stdout"] == ("capset ok\n" if profile == "default" else "capset EPERM\n"), r
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


@pytest.mark.parametrize("profile", ["default", "strict"])
def test_a_timeout_still_ends_a_daemonized_child(daemon, profile):
    sb = daemon.call("sandbox.create", seccomp_profile=profile)["sandbox_id"]
    try:
        r = daemon.call("sandbox.exec", sandbox_id=sb, timeout_seconds=1,
                        command="(setsid sh -c 'trap \"\" HUP TERM; exec sleep 4747' &); sleep 300")
        assert r["timed_out"] is True and r["signal"] == signal.SIGKILL, r
        deadline = time.monotonic() + 10
        while True:
            left = daemon.call("sandbox.exec", sandbox_id=sb,
                               command="grep -l 474[7] /proc/[0-9]*/cmdline 2>/dev/null | wc -l")["stdout"]
            if left.strip() == "0":
                break
            assert time.monotonic() < deadline, "the daemonized sleep outlived the timeout"
            time.sleep(0.1)
    finally:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)
