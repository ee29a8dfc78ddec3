#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Run a command as root of a new user namespace with one delegated range.

    userns_launch.py [--map INSIDE:OUTSIDE:COUNT]... [--idmap-image SRC:DST] -- CMD...

The user namespace gets the given uid and gid maps (default 0:100000:65536),
a mount namespace and a pid namespace of its own (as a pod with hostUsers:
false has), and CMD runs in it as uid 0 / gid 0. Must be run by host root
(it writes the maps itself, as a container runtime does; newuidmap would
check /etc/subuid).

--idmap-image SRC:DST first mounts an idmapped view of SRC at DST (in the
new mount namespace), mapped through the same ranges: what the kubelet does
for a pod's image, so that files owned by host root appear owned by the
namespace's root.
"""
import ctypes
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_REC = 16384
MS_SLAVE = 1 << 19
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8

SYS_open_tree = 428
SYS_move_mount = 429
SYS_mount_setattr = 442
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = 0o2000000
AT_RECURSIVE = 0x8000
AT_EMPTY_PATH = 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_IDMAP = 0x00100000

libc = ctypes.CDLL(None, use_errno=True)


def check(ret, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def idmap_mount(src, dst, userns_fd):
    tree = check(libc.syscall(SYS_open_tree, -100, src.encode(),
                              OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE), f"open_tree {src}")
    attr = MountAttr(MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
    check(libc.syscall(SYS_mount_setattr, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE,
                       ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))), f"idmap {src}")
    os.makedirs(dst, exist_ok=True)
    check(libc.syscall(SYS_move_mount, tree, b"", -100, dst.encode(), MOVE_MOUNT_F_EMPTY_PATH),
          f"move_mount to {dst}")
    os.close(tree)


def userns_fd(maps):
    """An fd of a new user namespace with these (inside, outside, count) maps."""
    text = "".join(f"{a} {b} {c}\n" for a, b, c in maps)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            check(libc.unshare(CLONE_NEWUSER), "unshare")
        finally:
            os.close(w)
        signal.pause()
        os._exit(0)
    os.close(w)
    os.read(r, 1)  # EOF once it has unshared
    os.close(r)
    try:
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(text)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def run_forwarding(cmd, child=None):
    """Start CMD (or take child), pass SIGTERM/SIGINT/SIGHUP on, exit as it does."""
    if child is None:
        child = os.fork()
        if child == 0:
            os.execvp(cmd[0], cmd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: os.kill(child, signum))
    while True:
        try:
            p, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if p == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def main(argv):
    maps, idmaps = [], []
    while argv and argv[0] != "--":
        opt, val = argv[0], argv[1]
        argv = argv[2:]
        if opt == "--map":
            maps.append(tuple(int(x) for x in val.split(":")))
        elif opt == "--idmap-image":
            idmaps.append(val.split(":", 1))
        else:
            sys.exit(f"unknown option {opt}")
    cmd = argv[1:]
    if not maps:
        maps = [(0, 100000, 65536)]
    text = "".join(f"{a} {b} {c}\n" for a, b, c in maps)

    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        os.close(ready_r)
        check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
        os.write(ready_w, b"u")
        os.read(go_r, 1)  # maps written (and image mounted) by the parent
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        check(libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "make / slave")
        # The pid namespace applies to children: its pid 1 mounts the
        # namespace's /proc (as a container runtime does) and runs CMD.
        init = os.fork()
        if init == 0:
            check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
                  "mount /proc")
            run_forwarding(cmd)
        run_forwarding(None, init)
    os.close(go_r)
    os.close(ready_w)
    os.read(ready_r, 1)
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(text)
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(text)
    if idmaps:
        # Mount into the child's mount namespace: enter it (we are host root).
        userns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
        mntns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
        helper = os.fork()
        if helper == 0:
            try:
                check(libc.setns(mntns, CLONE_NEWNS), "setns mnt")
                for src, dst in idmaps:
                    idmap_mount(src, dst, userns)
                os._exit(0)
            except OSError as e:
                print(f"userns_launch: {e}", file=sys.stderr)
                os._exit(1)
        _, status = os.waitpid(helper, 0)
        if status != 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            sys.exit(1)
    os.write(go_w, b"g")
    os.close(go_w)
    run_forwarding(None, pid)


if __name__ == "__main__":
    main(sys.argv[1:])
