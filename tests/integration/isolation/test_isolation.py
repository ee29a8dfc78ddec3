# SPDX-License-Identifier: Apache-2.0
"""A sandbox holds against code trying to get out.

Every test runs real attack code inside a sandbox through sandbox.exec (python3
with ctypes for raw x86_64 syscalls), as the sandbox user and as sandbox root
where it matters, and asserts that the attack failed in the expected way.  The
attack scripts print one JSON verdict on their last stdout line so that a
failing assertion shows what actually happened.
"""
import errno
import hashlib
import json
import os
import platform
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from conftest import BUILD, IMAGE_DIR, PRELUDE, Daemon, attack, daemon_pid, host_inits

pytestmark = [pytest.mark.core,
              pytest.mark.skipif(platform.machine() != "x86_64",
                                 reason="the attack scripts use x86_64 syscall numbers")]

USERS = ["sandbox", "root"]
IMAGE_ROOTFS = os.path.join(IMAGE_DIR, "python", "rootfs")

def sh(daemon, sandbox_id, command, user="sandbox", **kw):
    return daemon.call("sandbox.exec", sandbox_id=sandbox_id, command=command, user=user, **kw)


@pytest.fixture(scope="module")
def shared(daemon):
    """One sandbox for the attacks that cannot damage it (read-only probing)."""
    sb = daemon.call("sandbox.create")["sandbox_id"]
    yield sb
    daemon.call("sandbox.remove", sandbox_id=sb, force=True)


def host_init_of(daemon, sandbox_id):
    """The host pid of one sandbox's init, found through a marker file written
    inside it and read from the host through /proc/<pid>/root."""
    marker = "init-marker-" + secrets.token_hex(8)
    r = sh(daemon, sandbox_id, "echo %s > /tmp/.nsbox-marker" % marker)
    assert r["exit_code"] == 0, r
    for pid in host_inits(daemon):
        try:
            with open("/proc/%d/root/tmp/.nsbox-marker" % pid) as f:
                if f.read().strip() == marker:
                    return pid
        except OSError:
            continue
    raise AssertionError("no init of sandbox %s found among %s" % (sandbox_id, host_inits(daemon)))


def read_id_map(path):
    with open(path) as f:
        return [tuple(int(x) for x in line.split()) for line in f if line.strip()]


# ---- namespaces ------------------------------------------------------------

NS_FLAGS = {
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWTIME": 0x00000080,
}


@pytest.mark.parametrize("user", USERS)
def test_unshare_of_every_namespace_is_eperm(daemon, shared, user):
    v = attack(daemon, shared, """
        flags = %r
        verdict(**{name: sc(272, flag)[1] for name, flag in flags.items()})  # unshare
    """ % NS_FLAGS, user=user)
    assert v == {name: "EPERM" for name in NS_FLAGS}


@pytest.mark.parametrize("user", USERS)
def test_unshare_command_cannot_make_a_user_namespace(daemon, shared, user):
    # -U alone: without the filter, even capability-less sandbox root could
    # create the namespace (only writing a root mapping into it would fail).
    r = sh(daemon, shared, "unshare -U true; echo rc=$?; unshare --user --map-root-user true; echo rc=$?",
           user=user)
    assert r["stdout"].split() == ["rc=1", "rc=1"], r
    assert r["stderr"].count("unshare failed: Operation not permitted") == 2, r


@pytest.mark.parametrize("user", USERS)
def test_clone_with_namespace_flags_is_eperm(daemon, shared, user):
    # CLONE_NEWTIME (0x80) lies inside clone()'s exit-signal byte: only
    # unshare and clone3 can ask for it, and both are covered elsewhere.
    flags = {name: flag for name, flag in NS_FLAGS.items() if name != "CLONE_NEWTIME"}
    v = attack(daemon, shared, """
        flags = %r
        out = {}
        for name, flag in flags.items():
            r, e = sc(56, flag | signal.SIGCHLD, 0, 0, 0, 0)  # clone, fork-like
            if r == 0:
                os._exit(0)  # the child of an escape that worked
            if r > 0:
                os.waitpid(r, 0x40000000)  # __WALL
            out[name] = e
        verdict(**out)
    """ % flags, user=user)
    assert v == {name: "EPERM" for name in flags}


@pytest.mark.parametrize("user", USERS)
def test_clone3_is_enosys_and_libc_falls_back(daemon, shared, user):
    v = attack(daemon, shared, """
        import subprocess
        class CloneArgs(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "pidfd", "child_tid",
                        "parent_tid", "exit_signal", "stack", "stack_size", "tls",
                        "set_tid", "set_tid_size", "cgroup")]
        out = {}
        for name, flags in (("plain", 0), ("CLONE_NEWUSER", 0x10000000),
                            ("CLONE_NEWPID", 0x20000000)):
            a = CloneArgs(flags=flags, exit_signal=signal.SIGCHLD)
            r, e = sc(435, ctypes.byref(a), ctypes.sizeof(a))
            if r == 0:
                os._exit(0)
            if r > 0:
                os.waitpid(r, 0)
            out[name] = e
        # glibc's posix_spawn tries clone3 first and falls back to clone on ENOSYS.
        out["spawn"] = subprocess.run(["true"]).returncode
        verdict(**out)
    """, user=user)
    assert v == {"plain": "ENOSYS", "CLONE_NEWUSER": "ENOSYS", "CLONE_NEWPID": "ENOSYS", "spawn": 0}


@pytest.mark.parametrize("user", USERS)
def test_setns_into_any_namespace_is_eperm(daemon, shared, user):
    v = attack(daemon, shared, """
        out = {}
        for ns in sorted(os.listdir("/proc/self/ns")):
            fd = os.open("/proc/self/ns/" + ns, os.O_RDONLY)
            out[ns] = sc(308, fd, 0)[1]  # setns
            os.close(fd)
        verdict(**out)
    """, user=user)
    assert set(v) >= {"user", "mnt", "pid", "net", "uts", "ipc", "cgroup"}
    assert set(v.values()) == {"EPERM"}, v


def test_every_namespace_differs_from_the_host(daemon, shared):
    v = attack(daemon, shared, """
        verdict(**{ns: os.readlink("/proc/self/ns/" + ns) for ns in os.listdir("/proc/self/ns")})
    """)
    expected = {"user", "pid", "mnt", "net", "uts", "ipc", "cgroup"}
    if os.path.exists("/proc/self/ns/time"):
        expected.add("time")
    assert expected <= set(v), v
    for ns in sorted(expected):
        assert v[ns] != os.readlink("/proc/self/ns/" + ns), (ns, v[ns])


def test_id_maps_are_written_with_setgroups_denied(daemon, shared):
    pid = host_init_of(daemon, shared)
    with open("/proc/%d/setgroups" % pid) as f:
        assert f.read().strip() == "deny"
    uid_map, gid_map = read_id_map("/proc/%d/uid_map" % pid), read_id_map("/proc/%d/gid_map" % pid)
    if daemon.call("server.info")["per_sandbox_host_ranges"]:
        assert len(uid_map) == 1 and uid_map[0][0] == 0 and uid_map[0][1] >= 65536, uid_map
    else:  # the sandbox's map follows nsboxd's own extents (README "Without host root")
        assert uid_map[0][0] == 0 and all(outside > 0 for _, outside, _ in uid_map), uid_map
    assert gid_map == uid_map, gid_map
    v = attack(daemon, shared, """
        verdict(setgroups=open("/proc/self/setgroups").read().strip(),
                drop=err(os.setgroups, []))
    """, user="root")
    assert v == {"setgroups": "deny", "drop": "EPERM"}, v


# ---- mounts ----------------------------------------------------------------

@pytest.mark.parametrize("user", USERS)
def test_mount_family_is_eperm(daemon, shared, user):
    v = attack(daemon, shared, """
        MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
        AT_FDCWD = -100
        OPEN_TREE_CLONE = 1
        out = {
            "mount proc": sc(165, "proc", "/proc", "proc", 0, 0)[1],
            "mount tmpfs on /": sc(165, "tmpfs", "/", "tmpfs", 0, 0)[1],
            "remount / rw": sc(165, 0, "/", 0, MS_REMOUNT, 0)[1],
            "remount /proc/sys rw": sc(165, 0, "/proc/sys", 0, MS_REMOUNT | MS_BIND, 0)[1],
            "remount /sys rw": sc(165, 0, "/sys", 0, MS_REMOUNT, 0)[1],
            "bind over /proc/keys": sc(165, "/tmp", "/proc/keys", 0, MS_BIND, 0)[1],
            "mount cgroup2": sc(165, "cgroup2", "/sys/fs/cgroup", "cgroup2", 0, 0)[1],
            "umount /": sc(166, "/", 2)[1],
            "umount /proc": sc(166, "/proc", 2)[1],
            "unmask /proc/keys": sc(166, "/proc/keys", 2)[1],
            "unmask /proc/timer_list": sc(166, "/proc/timer_list", 2)[1],
            "umount /proc/sys": sc(166, "/proc/sys", 2)[1],
            "pivot_root": sc(155, "/tmp", "/tmp")[1],
            "open_tree": sc(428, AT_FDCWD, "/", OPEN_TREE_CLONE)[1],
            "move_mount": sc(429, AT_FDCWD, "/proc", AT_FDCWD, "/tmp", 0)[1],
            "fsopen": sc(430, "tmpfs", 0)[1],
            "fsconfig": sc(431, 3, 6, 0, 0, 0)[1],
            "fsmount": sc(432, 3, 0, 0)[1],
            "fspick": sc(433, AT_FDCWD, "/", 0)[1],
            "mount_setattr": sc(442, AT_FDCWD, "/", 0, 0, 0)[1],
        }
        verdict(**out)
    """, user=user)
    assert set(v.values()) == {"EPERM"}, v


def test_mount_command_cannot_remount_root_rw(daemon, shared):
    r = sh(daemon, shared, "mount -o remount,rw /proc/sys; mount -o remount,rw /sys; "
           "umount -l /proc/keys; echo x > /proc/sys/kernel/hostname; echo rc=$?", user="root")
    assert "rc=0" not in r["stdout"], r
    assert "Read-only file system" in r["stderr"], r


# ---- /proc and /sys --------------------------------------------------------

@pytest.mark.parametrize("user", USERS)
def test_proc_sys_is_read_only(daemon, shared, user):
    v = attack(daemon, shared, """
        out = {}
        for p in ("/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname",
                  "/proc/sys/vm/drop_caches", "/proc/sys/kernel/core_pattern",
                  "/proc/sys/net/ipv4/ip_forward"):
            out[p] = err(lambda: os.close(os.open(p, os.O_WRONLY)))
        out["statvfs_ro"] = bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY)
        verdict(**out)
    """, user=user)
    # Two layers: the read-only bind (checked here through statvfs), and the
    # kernel's sysctl permission check, which without CAP_NET_ADMIN / host
    # root answers EACCES first even for the sandbox's own network sysctls.
    assert v.pop("statvfs_ro") is True
    assert set(v.values()) <= {"EROFS", "EACCES"}, v


SENSITIVE_PROC_FILES = ["kcore", "keys", "timer_list", "sched_debug", "sysrq-trigger", "kallsyms",
                        "kmsg", "latency_stats", "timer_stats", "config.gz", "slabinfo",
                        "pagetypeinfo", "vmallocinfo", "buddyinfo", "zoneinfo"]


@pytest.mark.parametrize("name", SENSITIVE_PROC_FILES)
def test_sensitive_proc_file_is_masked(daemon, shared, name):
    if not os.path.exists("/proc/" + name):
        pytest.skip("/proc/%s does not exist on this kernel" % name)
    for user in USERS:
        v = attack(daemon, shared, """
            p = "/proc/%s"
            st = os.stat(p)
            content = b""
            read_error = None
            try:
                with open(p, "rb") as f:
                    content = f.read(4096)
            except OSError as e:
                read_error = errno.errorcode[e.errno]
            write_error = err(lambda: os.close(os.open(p, os.O_WRONLY)))
            verdict(chr=stat.S_ISCHR(st.st_mode), rdev=[os.major(st.st_rdev), os.minor(st.st_rdev)],
                    read=content.decode(errors="replace"), read_error=read_error,
                    write_error=write_error)
        """ % name, user=user)
        # Masked as Docker does: /dev/null bound over it, so it reads empty
        # and writes (to sysrq-trigger, say) go nowhere.
        assert v["chr"] and v["rdev"] == [1, 3], (user, v)
        assert v["read"] == "" and v["read_error"] in (None, "EACCES"), (user, v)


@pytest.mark.parametrize("user", USERS)
def test_sysrq_trigger_cannot_be_written(daemon, shared, user):
    v = attack(daemon, shared, """
        p = "/proc/sysrq-trigger"
        if not os.path.exists(p):
            verdict(state="absent")
        else:
            st = os.stat(p)
            verdict(state="masked" if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
                    else "real", write=err(lambda: open(p, "w").write("h")))
    """, user=user)
    assert v["state"] in ("absent", "masked"), v


@pytest.mark.parametrize("path", ["proc/acpi", "proc/scsi", "sys/firmware", "sys/kernel/debug",
                                  "sys/kernel/tracing", "sys/kernel/security", "sys/fs/bpf",
                                  "sys/devices/virtual/powercap"])
def test_sensitive_dirs_are_empty(daemon, shared, path):
    if not os.path.isdir("/" + path):
        pytest.skip("/%s does not exist on this host" % path)
    v = attack(daemon, shared, """
        p = "/%s"
        try:
            verdict(entries=os.listdir(p))
        except OSError as e:
            verdict(error=errno.errorcode[e.errno])
    """ % path, user="root")
    assert v in ({"entries": []}, {"error": "ENOENT"}, {"error": "EACCES"}), v


@pytest.mark.parametrize("user", USERS)
def test_sys_is_read_only(daemon, shared, user):
    v = attack(daemon, shared, """
        out = {}
        if not os.path.isdir("/sys/kernel"):
            verdict(absent=True)
            raise SystemExit
        out["statvfs_ro"] = bool(os.statvfs("/sys").f_flag & os.ST_RDONLY)
        for p in ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/uevent_helper",
                  "/sys/kernel/profiling", "/sys/class/net/lo/mtu", "/sys/power/state"):
            if os.path.exists(p):
                out[p] = err(lambda: os.close(os.open(p, os.O_WRONLY)))
        out["mkdir"] = err(os.mkdir, "/sys/kernel/nsbox-escape")
        verdict(**out)
    """, user=user)
    if v.get("absent"):
        return
    assert v.pop("statvfs_ro") is True, v
    assert v.pop("mkdir") in ("EROFS", "EACCES", "EPERM"), v
    assert v and set(v.values()) <= {"EROFS", "EACCES"}, v
    if user == "root":
        assert "EROFS" in v.values(), v


@pytest.mark.parametrize("user", USERS)
def test_cgroup_files_cannot_be_written(daemon, shared, user):
    v = attack(daemon, shared, """
        d = "/sys/fs/cgroup"
        out = {"exists": os.path.isdir(d)}
        if out["exists"]:
            out["entries"] = sorted(os.listdir(d))
            out["statvfs_ro"] = bool(os.statvfs(d).f_flag & os.ST_RDONLY)
            for f in ("cgroup.procs", "memory.max", "pids.max", "cgroup.subtree_control"):
                out[f] = err(lambda: open(os.path.join(d, f), "w").write("max\\n"))
            out["mkdir"] = err(os.mkdir, os.path.join(d, "escape"))
        with open("/proc/self/cgroup") as f:
            out["self_cgroup"] = f.read()
        verdict(**out)
    """, user=user)
    if v["exists"]:
        # Absent (an empty directory of a read-only /sys) or read-only.
        assert v["entries"] == [] or v["statvfs_ro"], v
        for f in ("cgroup.procs", "memory.max", "pids.max", "cgroup.subtree_control", "mkdir"):
            assert v[f] in ("EROFS", "EACCES", "ENOENT", "EPERM"), v
    # The cgroup namespace roots the sandbox at its own cgroup (in every v1
    # hierarchy too, on hybrid hosts): no host path shows, at most the exec's
    # own child cgroup below the sandbox's.
    paths = [line.split(":", 2)[2] for line in v["self_cgroup"].splitlines()]
    assert paths and all(p.count("/") == 1 for p in paths), v
    assert not any(word in p for p in paths for word in ("nsbox", ".slice", shared)), v


# ---- devices ---------------------------------------------------------------

@pytest.mark.parametrize("user", USERS)
def test_mknod_of_a_device_fails(daemon, shared, user):
    v = attack(daemon, shared, """
        out = {}
        for d in ("/tmp", "/workspace", "/dev/shm", "/dev"):
            out[d] = err(os.mknod, d + "/nsbox-mem", stat.S_IFCHR | 0o666, os.makedev(1, 1))
        out["block"] = err(os.mknod, "/tmp/nsbox-sda", stat.S_IFBLK | 0o666, os.makedev(8, 0))
        verdict(**out)
    """, user=user)
    assert v["/tmp"] == "EPERM" and v["block"] == "EPERM", v
    # /workspace belongs to the sandbox user: root, without CAP_DAC_OVERRIDE,
    # is refused even earlier.
    assert v["/workspace"] == ("EPERM" if user == "sandbox" else "EACCES"), v
    assert v["/dev/shm"] == "EPERM", v
    assert v["/dev"] in ("EPERM", "EROFS", "EACCES"), v


def test_dev_is_minimal(daemon, shared):
    v = attack(daemon, shared, """
        import pty
        entries = sorted(os.listdir("/dev"))
        master, slave = pty.openpty()
        verdict(entries=entries, pty=os.ttyname(slave), pts=sorted(os.listdir("/dev/pts")))
    """)
    assert set(v["entries"]) <= {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx",
                                 "shm", "fd", "stdin", "stdout", "stderr", "mqueue"}, v
    assert {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm"} <= set(v["entries"])
    # Its own devpts instance: the first pty it opens is number 0, and no host
    # pty is listed.
    assert v["pty"] == "/dev/pts/0", v
    assert v["pts"] == ["0", "ptmx"], v


# ---- credentials -----------------------------------------------------------

@pytest.mark.parametrize("user", USERS)
def test_no_capabilities_no_new_privs_and_seccomp(daemon, shared, user):
    v = attack(daemon, shared, """
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                k, _, val = line.partition(":")
                fields[k] = val.strip()
        verdict(uid=os.getuid(), **{k: fields[k] for k in
                ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")})
    """, user=user)
    assert v["uid"] == (0 if user == "root" else 1000)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(v[cap], 16) == 0, v
    assert v["NoNewPrivs"] == "1" and v["Seccomp"] == "2", v


@pytest.mark.parametrize("user", USERS)
def test_root_cannot_regain_capabilities_through_execve(daemon, shared, user):
    # A child execve as uid 0 would normally be handed full capabilities.
    r = sh(daemon, shared, "grep -E '^Cap(Prm|Eff)' /proc/self/status", user=user)
    assert r["exit_code"] == 0, r
    assert r["stdout"].split() == ["CapPrm:", "0000000000000000", "CapEff:", "0000000000000000"], r


# ---- seccomp: dangerous syscalls ---------------------------------------------

# (name, nr, args): arguments chosen so that the call would succeed (or fail
# differently) without the filter, where the kernel allows it at all.
DANGEROUS_SYSCALLS = [
    ("io_uring_setup", 425, "(1, ctypes.byref((ctypes.c_char * 120)()))"),
    ("io_uring_enter", 426, "(0, 0, 0, 0, 0, 0)"),
    ("io_uring_register", 427, "(0, 0, 0, 0)"),
    ("bpf", 321, "(0, 0, 0)"),
    ("perf_event_open", 298, "(ctypes.byref(perf_attr()), 0, -1, -1, 0)"),
    ("userfaultfd", 323, "(1,)"),  # UFFD_USER_MODE_ONLY: allowed unprivileged
    ("keyctl", 250, "(0, -3, 1)"),  # KEYCTL_GET_KEYRING_ID session, create
    ("add_key", 248, "('user', 'nsbox', 'payload', 7, -2)"),
    ("request_key", 249, "('user', 'nsbox', 0, 0)"),
    ("kexec_load", 246, "(0, 0, 0, 0)"),
    ("kexec_file_load", 320, "(-1, -1, 0, 0, 0)"),
    ("init_module", 175, "(0, 0, '')"),
    ("finit_module", 313, "(0, '', 0)"),
    ("delete_module", 176, "('nsbox', 0)"),
    ("open_by_handle_at", 304, "(-100, ctypes.byref((ctypes.c_char * 136)()), 0)"),
    ("name_to_handle_at", 303, "(-100, '/', ctypes.byref((ctypes.c_char * 136)(128)), "
                               "ctypes.byref(ctypes.c_int()), 0)"),
    ("ptrace", 101, "(0, 0, 0, 0)"),  # PTRACE_TRACEME
    ("process_vm_readv", 310, "(1, 0, 0, 0, 0, 0)"),
    ("pivot_root", 155, "('/', '/')"),
    ("swapon", 167, "('/tmp', 0)"),
    ("reboot", 169, "(0xfee1dead, 672274793, 0x4321fedc, 0)"),
    ("setdomainname", 171, "('evil', 4)"),
    ("sethostname", 170, "('evil', 4)"),
    ("acct", 163, "('/tmp/acct',)"),
    ("settimeofday", 164, "(0, 0)"),
    ("quotactl", 179, "(0, 0, 0, 0)"),
    ("lookup_dcookie", 212, "(0, 0, 0)"),
    ("fanotify_init", 300, "(0, 0)"),
    ("iopl", 172, "(3,)"),
    ("ioperm", 173, "(0, 1024, 1)"),
    ("vhangup", 153, "()"),
    ("syslog", 103, "(10, 0, 0)"),
    ("nfsservctl", 180, "()"),
    ("uselib", 134, "('/lib/x86_64-linux-gnu/libc.so.6',)"),
]

PERF_ATTR = """
class perf_attr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("rest", ctypes.c_char * 112)]
    def __init__(self):
        super().__init__(1, 128, 0)  # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK
        self.rest = b"\\x00" * 32 + bytes([0x60]) + b"\\x00" * 79  # exclude_kernel|exclude_hv
"""


@pytest.mark.parametrize("user", USERS)
def test_dangerous_syscalls_are_eperm(daemon, shared, user):
    calls = "\n".join("out[%r] = sc(%d, *%s)" % (name, nr, args) for name, nr, args in DANGEROUS_SYSCALLS)
    v = attack(daemon, shared, PERF_ATTR + "\nout = {}\n" + calls + "\nverdict(**out)\n", user=user)
    failed = {name: r for name, r in v.items() if r[1] != "EPERM"}
    assert failed == {}, "syscalls that were not refused with EPERM: %r" % failed


@pytest.mark.parametrize("user", USERS)
def test_socket_families_are_eperm(daemon, shared, user):
    v = attack(daemon, shared, """
        cases = {
            "AF_PACKET raw": (17, 3, 0x0300),
            "AF_PACKET dgram": (17, 2, 0x0300),
            "AF_INET SOCK_PACKET": (2, 10, 0x0300),
            "AF_INET raw": (2, 3, 1),
            "AF_INET raw cloexec": (2, 3 | 0o2000000, 255),
            "AF_INET6 raw": (10, 3, 58),
            "AF_VSOCK": (40, 1, 0),
            "AF_ALG": (38, 5, 0),
            "AF_KEY": (15, 3, 2),
            "AF_XDP": (44, 3, 0),
            "AF_BLUETOOTH": (31, 3, 0),
            "AF_CAN": (29, 3, 1),
            "AF_TIPC": (30, 2, 0),
            "AF_RDS": (21, 5, 0),
            # Only TCP and UDP (and ping) over IP: not MPTCP, UDP-Lite, SCTP.
            "MPTCP": (2, 1, 262),
            "MPTCP6": (10, 1, 262),
            "UDP-Lite": (2, 2, 136),
            "SCTP": (2, 1, 132),
        }
        out = {name: sc(41, *a)[1] for name, a in cases.items()}
        # The allowed ones stay usable, or this test would prove nothing.
        out["AF_INET stream"] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
        out["AF_INET6 tcp"] = err(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, 6).close())
        out["AF_INET udp"] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 17).close())
        out["AF_UNIX"] = err(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
        verdict(**out)
    """, user=user)
    for allowed in ("AF_INET stream", "AF_INET6 tcp", "AF_INET udp", "AF_UNIX"):
        assert v.pop(allowed) is None, (allowed, v)
    assert set(v.values()) == {"EPERM"}, v


INT80_GETPID = textwrap.dedent("""
    import ctypes, mmap
    # mov eax, 20 (i386 getpid); int 0x80; ret
    code = bytes.fromhex("b814000000cd80c3")
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    r = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
""")


def host_has_i386_entry():
    """Some kernels are built or booted without the i386 entry
    (ia32_emulation=0): there int $0x80 raises SIGSEGV before any syscall
    table, or seccomp, sees it."""
    r = subprocess.run([sys.executable, "-c", INT80_GETPID], capture_output=True)
    return r.returncode != -signal.SIGSEGV


@pytest.mark.parametrize("user", USERS)
def test_int80_i386_syscall_kills_with_sigsys(daemon, shared, user):
    code = PRELUDE + INT80_GETPID + "verdict(survived=True, result=r)\n"
    r = daemon.call("sandbox.exec", sandbox_id=shared, argv=["python3", "-c", code], user=user)
    want = signal.SIGSYS if host_has_i386_entry() else signal.SIGSEGV
    assert r["signal"] == want and r["exit_code"] is None, r


@pytest.mark.parametrize("user", USERS)
def test_x32_syscall_kills_with_sigsys(daemon, shared, user):
    code = PRELUDE + "r = sc(0x40000000 | 39)\nverdict(survived=True, result=r)\n"  # x32 getpid
    r = daemon.call("sandbox.exec", sandbox_id=shared, argv=["python3", "-c", code], user=user)
    assert r["signal"] == signal.SIGSYS and r["exit_code"] is None, r


# ---- network ---------------------------------------------------------------

def test_only_loopback_exists_and_is_up(daemon, shared):
    v = attack(daemon, shared, """
        with open("/proc/net/dev") as f:
            devs = [line.split(":")[0].strip() for line in f.readlines()[2:]]
        flags = int(open("/sys/class/net/lo/flags").read(), 16) if os.path.exists("/sys/class/net") else None
        # lo carries traffic: a listener of its own on 127.0.0.1 and ::1 answers.
        results = {}
        for fam, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            srv = socket.socket(fam, socket.SOCK_STREAM)
            srv.bind((addr, 0))
            srv.listen(1)
            c = socket.create_connection((addr, srv.getsockname()[1]), timeout=5)
            results[addr] = c.getpeername()[0]
            c.close(); srv.close()
        verdict(devs=devs, sys_class_net=sorted(os.listdir("/sys/class/net")) if flags is not None else None,
                lo_flags=flags, connected=results, if_names=[n for _, n in socket.if_nameindex()])
    """)
    assert v["devs"] == ["lo"], v
    assert v["if_names"] == ["lo"], v
    if v["sys_class_net"] is not None:
        assert v["sys_class_net"] == ["lo"], v
        assert v["lo_flags"] & 0x1, v  # IFF_UP
    assert v["connected"] == {"127.0.0.1": "127.0.0.1", "::1": "::1"}, v


def host_default_address():
    """A non-loopback address of this host, if any (the sandbox must not reach it)."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
        addr = s.getsockname()[0]
        s.close()
        return None if addr.startswith("127.") else addr
    except OSError:
        return None


@pytest.mark.parametrize("user", USERS)
def test_host_tcp_port_is_unreachable(daemon, shared, user):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("0.0.0.0", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    targets = ["127.0.0.1"] + ([host_default_address()] if host_default_address() else [])
    try:
        v = attack(daemon, shared, """
            out = {}
            for addr in %r:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(3)
                out[addr] = err(s.connect, (addr, %d))
                s.close()
            verdict(**out)
        """ % (targets, port), user=user)
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            conn, peer = listener.accept()
            conn.close()
            pytest.fail("the host listener saw a connection from %s" % (peer,))
    finally:
        listener.close()
    assert v["127.0.0.1"] == "ECONNREFUSED", v  # its own lo has nothing there
    for addr in targets[1:]:
        assert v[addr] in ("ENETUNREACH", "EHOSTUNREACH"), v


@pytest.mark.parametrize("user", USERS)
def test_host_abstract_unix_socket_is_unreachable(daemon, shared, user):
    name = "nsbox-test-" + secrets.token_hex(8)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(8)
    listener.setblocking(False)
    try:
        v = attack(daemon, shared, """
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            verdict(abstract=err(s.connect, "\\0" + %r),
                    daemon_socket=err(socket.socket(socket.AF_UNIX).connect, %r))
        """ % (name, daemon.socket), user=user)
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            listener.accept()
            pytest.fail("the host abstract socket saw a connection")
    finally:
        listener.close()
    assert v["abstract"] == "ECONNREFUSED", v  # another network namespace
    assert v["daemon_socket"] == "ENOENT", v  # the host path does not exist inside


# ---- processes -------------------------------------------------------------

@pytest.fixture
def host_sleeper():
    marker = "%d.%06d" % (3600, secrets.randbelow(10**6))
    proc = subprocess.Popen(["sleep", marker])
    yield proc, marker
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("user", USERS)
def test_kill_minus_one_spares_host_and_init(daemon, sandbox, host_sleeper, user):
    proc, marker = host_sleeper
    v = attack(daemon, sandbox, """
        import time
        victim = os.fork()
        if victim == 0:
            time.sleep(60)
            os._exit(0)
        out = {"host_pid": err(os.kill, %d, signal.SIGKILL),
               "init": err(os.kill, 1, signal.SIGKILL)}
        out["minus_one"] = err(os.kill, -1, signal.SIGKILL)
        _, status = os.waitpid(victim, 0)
        out["victim_signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        verdict(**out)
    """ % proc.pid, user=user)
    time.sleep(0.3)
    assert proc.poll() is None, "kill(-1) from the sandbox killed a host process"
    assert v["host_pid"] == "ESRCH", v  # not in the sandbox's pid namespace
    # Both sent: kill(-1) reached the sandbox's own process, while a pid
    # namespace's init ignores SIGKILL from inside its namespace.
    assert v["init"] in (None, "EPERM") and v["minus_one"] is None, v
    assert v["victim_signal"] == signal.SIGKILL, v
    again = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["true"])
    assert again["exit_code"] == 0, again


def test_pid_namespace_hides_host_processes(daemon, shared, host_sleeper):
    proc, marker = host_sleeper
    v = attack(daemon, shared, """
        cmdlines = {}
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    cmdlines[p] = open("/proc/%%s/cmdline" %% p, "rb").read().replace(b"\\0", b" ").decode()
                except OSError:
                    pass
        verdict(cmdlines=cmdlines, kill0=err(os.kill, %d, 0), pid1=cmdlines.get("1"))
    """ % proc.pid)
    assert not any(marker in c for c in v["cmdlines"].values()), v
    assert v["kill0"] == "ESRCH", v
    assert v["pid1"] == "nsbox-init ", v
    # The init and exec supervisors (all nsbox-init), this script, nothing of the host.
    assert len([c for c in v["cmdlines"].values() if c != "nsbox-init "]) <= 1, v


def test_pid1_is_nsbox_init_and_the_exec_supervisor_reaps_orphans(daemon, shared):
    v = attack(daemon, shared, """
        import time
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            grandchild = os.fork()
            if grandchild == 0:
                time.sleep(0.3)  # outlive the parent: orphaned to PID 1, then exit
                os._exit(0)
            os.write(w, str(grandchild).encode())
            os._exit(0)
        os.waitpid(child, 0)
        orphan = int(os.read(r, 32))
        time.sleep(0.1)
        ppid_while_alive = int(open("/proc/%d/status" % orphan).read().split("PPid:")[1].split()[0])
        time.sleep(1.0)
        zombies = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    s = open("/proc/%s/status" % p).read()
                except OSError:
                    continue
                if "State:\\tZ" in s:
                    zombies.append(p)
        supervisor = os.getppid()
        status = open("/proc/%d/status" % supervisor).read()
        verdict(orphan_ppid=ppid_while_alive, orphan_gone=not os.path.exists("/proc/%d" % orphan),
                zombies=zombies, pid1=open("/proc/1/cmdline", "rb").read().decode(),
                supervisor=supervisor, supervisor_uids=status.split("Uid:")[1].split()[:3])
    """)
    assert v["pid1"] == "nsbox-init\0", v
    # The exec's supervisor is the subreaper of everything the exec starts
    # (that is how killing an exec ends its daemons); it runs as a uid no
    # exec has, real and saved, so no process of the sandbox can signal it.
    assert v["orphan_ppid"] == v["supervisor"] != 1, v
    assert v["supervisor_uids"] == ["65533", "0", "65533"], v
    assert v["orphan_gone"] is True and v["zombies"] == [], v


@pytest.mark.parametrize("user", USERS)
def test_exec_gets_new_session_no_tty_and_only_stdio(daemon, shared, user):
    v = attack(daemon, shared, """
        import fcntl, termios
        fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
        open_fds = [fd for fd in range(0, 4096) if err(os.fstat, fd) is None]
        tiocsti = {fd: err(fcntl.ioctl, fd, termios.TIOCSTI, b"x") for fd in (0, 1, 2)}
        verdict(fds_listing=fds, open_fds=open_fds, pid=os.getpid(), sid=os.getsid(0),
                pgid=os.getpgid(0), tty=err(os.open, "/dev/tty", os.O_RDWR),
                tiocsti=tiocsti, isatty=[os.isatty(fd) for fd in (0, 1, 2)])
    """, user=user)
    assert v["open_fds"] == [0, 1, 2], v
    assert v["fds_listing"] == [0, 1, 2, 3], v  # 3: the listing's own directory fd
    assert v["sid"] == v["pid"] and v["pgid"] == v["pid"], v
    assert v["tty"] == "ENXIO", v
    assert v["isatty"] == [False, False, False], v
    assert set(v["tiocsti"].values()) <= {"ENOTTY", "EPERM", "EIO"}, v


@pytest.mark.parametrize("user", USERS)
def test_init_is_not_dumpable_and_its_exe_not_writable(daemon, shared, user):
    v = attack(daemon, shared, """
        out = {
            "exe_write": err(os.open, "/proc/1/exe", os.O_WRONLY),
            "exe_read": err(os.open, "/proc/1/exe", os.O_RDONLY),
            "exe_readlink": err(os.readlink, "/proc/1/exe"),
            "environ": err(os.open, "/proc/1/environ", os.O_RDONLY),
            "mem": err(os.open, "/proc/1/mem", os.O_RDONLY),
            "root": err(os.listdir, "/proc/1/root/"),
            "cwd": err(os.readlink, "/proc/1/cwd"),
            "map_files": err(os.listdir, "/proc/1/map_files"),
        }
        # fd 3 of the init is its control socket to the manager.
        for fd in range(0, 6):
            out["fd%d" % fd] = err(os.open, "/proc/1/fd/%d" % fd, os.O_RDWR)
        # Every process's exe, including its own (python3 is running: ETXTBSY).
        others = {}
        for p in os.listdir("/proc"):
            if p.isdigit():
                others[p] = err(os.open, "/proc/%s/exe" % p, os.O_WRONLY)
        out["all_exe_writes"] = others
        verdict(**out)
    """, user=user)
    others = v.pop("all_exe_writes")
    assert None not in others.values(), others
    assert v["exe_write"] in ("EACCES", "EPERM", "ETXTBSY"), v
    for key in ("exe_read", "exe_readlink", "environ", "mem", "root", "cwd", "map_files"):
        assert v[key] in ("EACCES", "EPERM"), (key, v)
    for fd in range(0, 6):
        assert v["fd%d" % fd] in ("EACCES", "EPERM", "ENOENT"), (fd, v)


def test_init_runs_from_a_sealed_memfd_on_the_host(daemon, shared):
    pid = host_init_of(daemon, shared)
    exe = os.readlink("/proc/%d/exe" % pid)
    assert exe.startswith("/memfd:nsbox-init"), exe
    host_binary = os.stat(os.path.join(BUILD, "nsbox-init"))
    st = os.stat("/proc/%d/exe" % pid)
    assert (st.st_dev, st.st_ino) != (host_binary.st_dev, host_binary.st_ino)
    # Even host root cannot write through it: sealed, and being executed.
    with pytest.raises(OSError) as e:
        fd = os.open("/proc/%d/exe" % pid, os.O_WRONLY)
        try:
            os.write(fd, b"\x7fELF")
        finally:
            os.close(fd)
    assert e.value.errno in (errno.ETXTBSY, errno.EPERM, errno.EACCES)


# ---- filesystem ------------------------------------------------------------

def test_host_files_are_unreachable(daemon, shared, tmp_path):
    name = "nsbox-host-secret-" + secrets.token_hex(8)
    secret = tmp_path / name
    secret.write_text("host secret")
    v = attack(daemon, shared, """
        name = %r
        found = []
        for top in ("/",):
            for dirpath, dirnames, filenames in os.walk(top):
                if dirpath in ("/proc", "/sys"):
                    dirnames[:] = []
                    continue
                if name in filenames or name in dirnames:
                    found.append(dirpath)
        st_root, st_up = os.stat("/"), os.stat("/..")
        verdict(found=found, direct=err(os.stat, %r),
                dotdot_is_root=(st_root.st_ino, st_root.st_dev) == (st_up.st_ino, st_up.st_dev),
                self_root=os.readlink("/proc/self/root"),
                handle=sc(304, -100, ctypes.byref((ctypes.c_char * 136)()), 0)[1])
    """ % (name, str(secret)), user="root", timeout=120)
    assert v["found"] == [], v
    assert v["direct"] == "ENOENT", v
    assert v["dotdot_is_root"] is True and v["self_root"] == "/", v
    assert v["handle"] == "EPERM", v


def test_only_the_sandboxs_own_mounts_are_visible(daemon, shared):
    v = attack(daemon, shared, """
        mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
        verdict(mounts=mounts)
    """)
    allowed_prefixes = ("/proc", "/dev", "/sys")
    stray = [m for m in v["mounts"] if m != "/" and not m.startswith(allowed_prefixes)]
    assert stray == [], v
    assert v["mounts"].count("/") == 1, v


@pytest.mark.hostroot("mounts a shared tmpfs on the host for nsboxd's state dir")
def test_no_mount_of_a_sandbox_propagates_to_or_from_the_host():
    """Left shared, every mount the setup makes in a sandbox would show on the
    host too (and the host's unmounts in the sandbox). It did when a
    sandbox's root was a copy of an overlay nsboxd mounted in its state dir:
    a copy joins its original's peer group. The state dir is on a shared
    mount here, as under systemd, where / is shared."""
    d = tempfile.mkdtemp(prefix="nsbox-shared-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "nsbox-test", d], check=True)
    try:
        subprocess.run(["mount", "--make-shared", d], check=True)
        daemon = Daemon(["--state-dir", os.path.join(d, "state"), "--warm-pool", "0"])
        try:
            sb = daemon.call("sandbox.create")["sandbox_id"]
            v = attack(daemon, sb, """
                verdict(tagged=[line.split(" - ")[0] for line in open("/proc/self/mountinfo")
                                if "shared:" in line.split(" - ")[0] or "master:" in line.split(" - ")[0]])
            """, user="root")
            on_host = [line.split()[4] for line in open("/proc/self/mountinfo")
                       if line.split()[4].startswith(os.path.join(d, "state", "sandboxes"))]
            daemon.call("sandbox.remove", sandbox_id=sb, force=True)
        finally:
            rc = daemon.stop()
    finally:
        subprocess.run(["umount", "-l", d])
        shutil.rmtree(d, ignore_errors=True)
    assert v["tagged"] == [], v
    assert on_host == [], on_host
    assert rc == 0


def test_a_sandboxs_overlay_is_never_mounted_in_the_hosts_namespace():
    """nsboxd builds each overlay detached (fsmount) and hands it to the
    sandbox: at no moment of a create does nsboxd's mount table hold it.
    A watcher re-reads nsboxd's mountinfo at every change of it."""
    daemon = Daemon(["--warm-pool", "0"])
    seen, reads, failed, done = [], [0], [], threading.Event()

    def watch():
        try:
            with open("/proc/%d/mountinfo" % daemon_pid(daemon)) as f:
                poller = select.poll()
                poller.register(f, select.POLLPRI | select.POLLERR)
                while not done.is_set():
                    f.seek(0)
                    seen.extend(line for line in f.read().splitlines() if " - overlay " in line)
                    reads[0] += 1
                    poller.poll(100)
        except Exception as e:
            failed.append(e)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(20):
            sb = daemon.call("sandbox.create")["sandbox_id"]
            daemon.call("sandbox.remove", sandbox_id=sb, force=True)
    finally:
        done.set()
        watcher.join()
        rc = daemon.stop()
    assert failed == [] and reads[0] >= 20, (failed, reads)  # it watched every create
    assert [line for line in seen if daemon.state in line] == [], seen[:3]
    assert rc == 0


@pytest.mark.parametrize("user", USERS)
def test_no_exec_can_leave_the_sandboxs_chroot(daemon, shared, user):
    """A sandbox's root is a chroot in a namespace copied from nsboxd's base
    one (no pivot_root: it walks every task of the host). Climbing out of a
    chroot takes chroot itself, or a user namespace that grants it; an exec
    has no capability. (Guard: it held with pivot_root too.)"""
    v = attack(daemon, shared, """
        os.mkdir("/tmp/climb-" + str(os.getpid()))
        st_root = os.stat("/")
        up = "/" + "../" * 8
        verdict(chroot=err(os.chroot, "/tmp/climb-" + str(os.getpid())),
                chroot_dot=err(os.chroot, "."),
                userns=sc(272, 0x10000000)[1],  # unshare(CLONE_NEWUSER)
                up_is_root=(os.stat(up).st_ino, os.stat(up).st_dev) == (st_root.st_ino, st_root.st_dev),
                self_root_up=(os.stat("/proc/self/root/..").st_ino, os.stat("/proc/self/root/..").st_dev) ==
                             (st_root.st_ino, st_root.st_dev),
                base=[line.split()[4] for line in open("/proc/self/mountinfo")
                      if " - tmpfs nsbox-base " in line])
    """, user=user)
    assert v["chroot"] == "EPERM" and v["chroot_dot"] == "EPERM", v
    assert v["userns"] == "EPERM", v
    assert v["up_is_root"] is True and v["self_root_up"] is True, v
    assert v["base"] == [], v


SETNS_CHILD = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/proc/%d/ns/mnt" % int(sys.argv[1]), os.O_RDONLY)
if libc.setns(fd, 0x00020000) != 0:  # CLONE_NEWNS: root and cwd become the namespace's
    raise OSError(ctypes.get_errno(), "setns")
def err(fn, *a):
    try:
        fn(*a)
        return None
    except OSError as e:
        return e.strerror
print(json.dumps({
    "top": sorted(os.listdir("/")),
    "pids": [e for e in os.listdir("/proc") if e.isdigit()],
    "net": sorted(os.listdir("/sys/class/net")),
    "dev": sorted(os.listdir("/dev")),
    "read_only": bool(os.statvfs("/").f_flag & os.ST_RDONLY),
    "write": err(lambda: open("/planted", "w")),
    "root_has_workspace": os.path.isdir("/root/workspace"),
}))
'''


def test_what_lies_outside_a_sandboxs_root_holds_nothing_of_the_host(daemon, shared):
    """Seen from the host, the sandbox's mount namespace around its root: the
    base one's read-only tmpfs, whose procfs shows an empty pid namespace,
    whose sysfs a network namespace that is gone (no device), and whose /dev
    the six nodes a sandbox binds anyway. No host path."""
    pid = host_init_of(daemon, shared)
    # Python 3.11 has no os.setns: ctypes in a process of its own (the
    # interpreter the test runs is the host's, set up before the setns).
    out = subprocess.run([sys.executable, "-c", SETNS_CHILD, str(pid)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)
    assert v["top"] == ["dev", "proc", "root", "sys"], v
    assert v["pids"] == [], v
    assert v["net"] == [], v
    assert v["dev"] == ["full", "null", "random", "tty", "urandom", "zero"], v
    assert v["read_only"] is True and v["write"] is not None, v
    assert v["root_has_workspace"] is True, v


@pytest.mark.hostroot("drops a capability of host root's for nsboxd")
def test_nsboxd_without_cap_sys_chroot_refuses_to_start_and_says_why(tmp_path):
    """Each create joins the base mount namespace (setns takes CAP_SYS_CHROOT):
    without it nsboxd stops at start with the reason, not at every create."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def drop_sys_chroot():
        if libc.prctl(24, 18, 0, 0, 0) != 0:  # PR_CAPBSET_DROP, CAP_SYS_CHROOT
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")

    os.chmod(tmp_path, 0o755)
    r = subprocess.run([os.path.join(BUILD, "nsboxd"), "--socket", str(tmp_path / "s.sock"), "--state-dir",
                        str(tmp_path / "state"), "--image-dir", IMAGE_DIR, "--warm-pool", "0"],
                       preexec_fn=drop_sys_chroot, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r
    assert "CAP_SYS_CHROOT" in r.stdout + r.stderr, r
    assert not os.path.exists(tmp_path / "s.sock"), "it listened"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_image_is_not_modified_by_sandbox_root(daemon, sandbox):
    python = os.path.realpath(os.path.join(IMAGE_ROOTFS, "usr/bin/python3"))
    passwd = os.path.join(IMAGE_ROOTFS, "etc/passwd")
    before = {p: (sha256(p), os.stat(p).st_mode, os.stat(p).st_uid) for p in (python, passwd)}
    target = "/usr/bin/" + os.path.basename(python)
    r = sh(daemon, sandbox, "echo 'evil::0:0::/:/bin/sh' >> /etc/passwd && printf EVIL >> %s && "
           "chmod 4777 %s && tail -c 4 %s && tail -n 1 /etc/passwd" % (target, target, target),
           user="root")
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "EVILevil::0:0::/:/bin/sh\n", r  # the writes happened (copy-up)
    after = {p: (sha256(p), os.stat(p).st_mode, os.stat(p).st_uid) for p in (python, passwd)}
    assert after == before


@pytest.mark.parametrize("user", USERS)
def test_tmp_and_workspace_are_writable_nosuid_nodev(daemon, shared, user):
    v = attack(daemon, shared, """
        out = {}
        for d in ("/tmp", "/workspace", "/dev/shm"):
            p = os.path.join(d, "nsbox-probe-%d" % os.getuid())
            out[d] = err(lambda: open(p, "w").write("x"))
            flags = os.statvfs(d).f_flag
            out[d + " nosuid"] = bool(flags & os.ST_NOSUID)
            out[d + " nodev"] = bool(flags & os.ST_NODEV)
        flags = os.statvfs("/").f_flag
        out["/ nosuid"] = bool(flags & os.ST_NOSUID)
        out["/ nodev"] = bool(flags & os.ST_NODEV)
        verdict(**out)
    """, user=user)
    for d in ("/tmp", "/workspace", "/dev/shm"):
        # /workspace is the sandbox user's; root without CAP_DAC_OVERRIDE may
        # not write into it.
        assert v[d] == ("EACCES" if (d, user) == ("/workspace", "root") else None), v
        assert v[d + " nosuid"] and v[d + " nodev"], v
    assert v["/ nosuid"] and v["/ nodev"], v


def test_setuid_binary_does_not_elevate(daemon, sandbox):
    r = sh(daemon, sandbox, "cp /usr/bin/id /tmp/suid-id && chmod 6755 /tmp/suid-id && "
           "stat -c '%a %u %g' /tmp/suid-id", user="root")
    assert r["exit_code"] == 0 and r["stdout"] == "6755 0 0\n", r
    r = sh(daemon, sandbox, "/tmp/suid-id -u; /tmp/suid-id -g; /tmp/suid-id -ru")
    assert r["exit_code"] == 0 and r["stdout"].split() == ["1000", "1000", "1000"], r


# ---- uts and ipc ---------------------------------------------------------------

@pytest.mark.parametrize("user", USERS)
def test_hostname_is_sandbox_and_cannot_be_changed(daemon, shared, user):
    host_name = socket.gethostname()
    v = attack(daemon, shared, """
        verdict(name=os.uname().nodename, sethostname=sc(170, "evil", 4)[1],
                proc=err(lambda: open("/proc/sys/kernel/hostname", "w").write("evil")))
    """, user=user)
    assert v["name"] == "sandbox", v
    assert v["sethostname"] == "EPERM", v
    assert v["proc"] in ("EROFS", "EACCES"), v
    assert socket.gethostname() == host_name


# ---- two sandboxes ---------------------------------------------------------

@pytest.fixture
def two_sandboxes(daemon):
    ids = [daemon.call("sandbox.create")["sandbox_id"] for _ in range(2)]
    yield ids
    for sb in ids:
        daemon.call("sandbox.remove", sandbox_id=sb, force=True)


class Resident:
    """A process kept running in a sandbox, by a sync sandbox.exec on its own
    connection in a thread, until stop(): it names `marker` in its argv, holds
    a SysV shm segment and listens on an abstract unix socket."""

    SCRIPT = textwrap.dedent("""
        import ctypes, os, socket, sys, time
        marker, key = sys.argv[1], int(sys.argv[2])
        libc = ctypes.CDLL(None, use_errno=True)
        shmid = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\\0" + marker)
        s.listen(8)
        s.setblocking(False)
        for d in ("/workspace", "/tmp", "/dev/shm"):
            open(os.path.join(d, marker), "w").write("a")
        open("/tmp/ready-" + marker, "w").write(str(shmid))
        accepted = 0
        stopping = False
        while True:
            try:
                s.accept()[0].close()
                accepted += 1
                continue
            except BlockingIOError:
                pass
            if stopping:  # the backlog is drained after the stop: nothing is missed
                break
            stopping = os.path.exists("/tmp/stop-" + marker)
            if not stopping:
                time.sleep(0.02)
        print("accepted", accepted, "shmid", shmid)
    """)

    def __init__(self, daemon, sandbox_id, marker, key):
        import threading
        self.daemon, self.sandbox_id, self.marker = daemon, sandbox_id, marker
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(key,))
        self.thread.start()
        for _ in range(200):
            r = daemon.call("sandbox.exec", sandbox_id=sandbox_id, argv=["cat", "/tmp/ready-" + marker])
            if r["exit_code"] == 0:
                return
            time.sleep(0.05)
        raise AssertionError("the resident process did not start: %r" % self.result)

    def _run(self, key):
        self.result = self.daemon.call("sandbox.exec", sandbox_id=self.sandbox_id, timeout_seconds=60,
                                       argv=["python3", "-c", self.SCRIPT, self.marker, str(key)])

    def stop(self):
        sh(self.daemon, self.sandbox_id, "touch /tmp/stop-" + self.marker)
        self.thread.join(60)
        return self.result


SHM_KEY = 0x6e73626f  # "nsbo"


def test_two_sandboxes_cannot_see_each_other(daemon, two_sandboxes):
    a, b = two_sandboxes
    marker = "nsbox-a-" + secrets.token_hex(6)
    resident = Resident(daemon, a, marker, SHM_KEY)
    probe = """
        marker = %r
        files = [p for p in ("/workspace/" + marker, "/tmp/" + marker, "/dev/shm/" + marker)
                 if os.path.exists(p)]
        procs = []
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != os.getpid():  # this script names the marker too
                try:
                    if marker.encode() in open("/proc/%%s/cmdline" %% p, "rb").read():
                        procs.append(p)
                except OSError:
                    pass
        shm = sc(29, %d, 0, 0)  # shmget of A's key
        sysvipc = open("/proc/sysvipc/shm").read().splitlines()[1:]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        verdict(files=files, procs=procs, shm=shm[1], sysvipc=sysvipc,
                abstract=err(s.connect, "\\0" + marker))
    """ % (marker, SHM_KEY)
    try:
        seen_by_b = attack(daemon, b, probe)
        seen_by_a = attack(daemon, a, probe)
    finally:
        done = resident.stop()
    # A sees its own: the probe could not have missed them.
    assert len(seen_by_a["files"]) == 3 and len(seen_by_a["procs"]) == 1, seen_by_a
    assert seen_by_a["shm"] is None and len(seen_by_a["sysvipc"]) == 1, seen_by_a
    assert seen_by_a["abstract"] is None, seen_by_a
    # B sees nothing of A: files, processes, SysV IPC, abstract sockets.
    assert seen_by_b["files"] == [] and seen_by_b["procs"] == [], seen_by_b
    assert seen_by_b["shm"] == "ENOENT" and seen_by_b["sysvipc"] == [], seen_by_b
    assert seen_by_b["abstract"] == "ECONNREFUSED", seen_by_b
    assert done["exit_code"] == 0 and done["stdout"].startswith("accepted 1 "), done

    # Different host uid ranges, neither containing host root.
    ranges = []
    for pid in (host_init_of(daemon, a), host_init_of(daemon, b)):
        for kind in ("uid_map", "gid_map"):
            m = read_id_map("/proc/%d/%s" % (pid, kind))
            assert m, (pid, kind)
            for inside, outside, count in m:
                assert not (outside <= 0 < outside + count), (pid, kind, m)
        uid_map = read_id_map("/proc/%d/uid_map" % pid)
        ranges.append(set().union(*(range(o, o + c) for _, o, c in uid_map)))
        with open("/proc/%d/status" % pid) as f:
            host_uid = int(f.read().split("Uid:")[1].split()[0])
        assert host_uid != 0 and host_uid in ranges[-1]
    # Without host root nsboxd has one delegated range for all its sandboxes,
    # and says so (test_rootless checks the claim).
    if daemon.call("server.info")["per_sandbox_host_ranges"]:
        assert ranges[0].isdisjoint(ranges[1]), "two sandboxes share host uids"


def test_mount_table_does_not_reveal_host_paths(daemon, sandbox):
    r = daemon.call("sandbox.exec", sandbox_id=sandbox, argv=["cat", "/proc/self/mountinfo"])
    assert r["exit_code"] == 0
    assert daemon.state not in r["stdout"]
    assert daemon.dir not in r["stdout"]
