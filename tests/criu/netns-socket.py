#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""netns-socket.py: does an unpatched CRIU 4.1.1 dump and restore a process
whose socket to an outside peer was made INSIDE its own network namespace
(the nsbox-side alternative to the CRIU_EXP_HOST_SOCKETS patch)?

The child enters a new netns, makes a socketpair there, hands one end to us
(over a host socketpair it then closes) and echoes what arrives on the other.
We dump it (--external unix[INO]), restore it with a new socketpair's end in
place (--inherit-fd fd[N]:socket:[INO]) and check the echo."""
import ctypes
import os
import socket
import subprocess
import sys
import time

CRIU = os.environ.get("CRIU", "/tmp/criu-src/criu-4.1.1/criu/criu")
D = "/tmp/cx-netns"
os.makedirs(D, exist_ok=True)
CLONE_NEWNET = 0x40000000
host_a, host_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
pid = os.fork()
if pid == 0:
    os.setsid()
    host_a.close()
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
        os._exit(1)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    socket.send_fds(host_b, [b"x"], [theirs.fileno()])
    theirs.close()
    host_b.close()
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        data = mine.recv(100)
        if not data:
            os._exit(0)
        mine.send(b"echo:" + data)
host_b.close()
_, fds, _, _ = socket.recv_fds(host_a, 10, 1)
peer = socket.socket(fileno=fds[0])
peer.send(b"before")
print("before dump:", peer.recv(100))
ino = os.stat("/proc/%d/fd/3" % pid).st_ino if os.readlink("/proc/%d/fd/3" % pid).startswith("socket") else None
links = {fd: os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid)}
sock = [l for l in links.values() if l.startswith("socket:")]
print("child fds:", links)
ino = sock[0][len("socket:["):-1]
subprocess.run("rm -rf %s/img && mkdir -p %s/img" % (D, D), shell=True)
rc = subprocess.call([CRIU, "dump", "-t", str(pid), "-D", D + "/img", "-v4", "-o", "dump.log",
                      "--network-lock", "skip", "--ext-unix-sk", "--external", "unix[%s]" % ino])
print("dump rc", rc)
os.system("grep Error %s/img/dump.log | grep -v RLIMIT" % D)
os.waitpid(pid, 0)
peer.close()
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
os.set_inheritable(b.fileno(), True)
rc = subprocess.call([CRIU, "restore", "-D", D + "/img", "-v4", "-o", "restore.log", "--restore-detached",
                      "--restore-sibling", "--ext-unix-sk",
                      "--inherit-fd", "fd[%d]:socket:[%s]" % (b.fileno(), ino)], pass_fds=[b.fileno()])
print("restore rc", rc)
os.system("grep Error %s/img/restore.log | grep -v RLIMIT" % D)
b.close()
a.send(b"after")
a.settimeout(5)
print("after restore:", a.recv(100))
a.close()
