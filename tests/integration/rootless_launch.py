# SPDX-License-Identifier: Apache-2.0
"""Run the test daemons without host root (NSBOX_TEST_LAUNCHER):

  nested    nsboxd as root of a user namespace with one 65536-id range
            (0 -> host 100000), its own mount and pid namespaces, and the
            image seen through an idmapped mount: a pod with hostUsers: false.
  rootless  `nsboxd --rootless` started by an unprivileged user whose
            /etc/subuid range the test adds: a laptop or CI user.

wrap() turns the Daemon fixture's argv into the launcher's; the rest of the
suite talks to the daemon's socket as usual.
"""
import grp
import os
import pwd
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import userns_launch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NESTED_BASE = 100000
ROOTLESS_USER = "nsbox-rl-test"
ROOTLESS_SUB = 400000
IDS = 65536


def nested_maps():
    return [(0, NESTED_BASE, IDS)]


def ensure_rootless_user():
    """The unprivileged user and its /etc/subuid and /etc/subgid ranges
    (added once; remove_rootless_user takes them away)."""
    try:
        pw = pwd.getpwnam(ROOTLESS_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", ROOTLESS_USER], check=True)
        pw = pwd.getpwnam(ROOTLESS_USER)
    line = f"{ROOTLESS_USER}:{ROOTLESS_SUB}:{IDS}\n"
    for path in ("/etc/subuid", "/etc/subgid"):
        with open(path) as f:
            have = f.read()
        if line not in have:
            with open(path, "a") as f:
                f.write(line)
    return pw


def remove_rootless_user():
    line = f"{ROOTLESS_USER}:{ROOTLESS_SUB}:{IDS}\n"
    for path in ("/etc/subuid", "/etc/subgid"):
        with open(path) as f:
            have = f.read()
        if line in have:
            with open(path, "w") as f:
                f.write(have.replace(line, ""))
    # A daemon's last process (a janitor of nsbox run) may still be exiting.
    for _ in range(100):
        r = subprocess.run(["userdel", ROOTLESS_USER], capture_output=True)
        if r.returncode != 8:  # 8: the user is logged in / runs a process
            break
        time.sleep(0.1)


def rootless_maps(pw):
    # What nsboxd --rootless asks newuidmap for: 0 is the user, 1.. the range.
    return [(0, pw.pw_uid, 1), (1, ROOTLESS_SUB, IDS)]


def idmapped_view(src, dst, maps):
    """src seen at dst with its owners shifted by maps (host root only)."""
    fd = userns_launch.userns_fd(maps)
    try:
        userns_launch.idmap_mount(src, dst, fd)
    finally:
        os.close(fd)


def unmount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


def nsboxd_pid(nsboxd, socket):
    """The host pid of the nsboxd serving `socket`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{entry}/exe")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            continue
        if exe == os.path.realpath(nsboxd) and socket.encode() in cmdline:
            return int(entry)
    raise AssertionError("no nsboxd serves " + socket)


def wrap(launcher, dir, args, env):
    """(argv, env, Popen kwargs, cleanup) to start nsboxd `args` via launcher.
    The tests' clients are host root, outside the namespace: served as one
    owner (unmapped_clients), as the operator of such a daemon may choose."""
    args = list(args) + ["--unmapped-clients", "one-owner"]
    i = args.index("--image-dir")
    image_dir = args[i + 1]
    view = os.path.join(dir, "images")
    args[i + 1] = view
    if launcher == "nested":
        os.chown(dir, NESTED_BASE, NESTED_BASE)
        argv = [sys.executable, os.path.join(HERE, "userns_launch.py"),
                "--map", "%d:%d:%d" % nested_maps()[0], "--idmap-image", f"{image_dir}:{view}", "--", *args]
        return argv, env, {}, lambda: None
    if launcher == "rootless":
        pw = ensure_rootless_user()
        os.chown(dir, pw.pw_uid, pw.pw_gid)
        idmapped_view(image_dir, view, rootless_maps(pw))
        env = dict(env, HOME=dir)
        env.pop("XDG_RUNTIME_DIR", None)
        argv = [args[0], "--rootless", *args[1:]]
        kw = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        return argv, env, kw, lambda: unmount(view)
    raise ValueError(f"NSBOX_TEST_LAUNCHER={launcher}: nested or rootless")
