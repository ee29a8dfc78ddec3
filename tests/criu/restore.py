#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""restore.py: restore the sandbox dumped by dump.sh, without nsboxd, with
new channels in place of the ones that led to nsboxd (--inherit-fd), then ask
the restored stateful interpreter for x over its new pipes.

The sockets and pipes to re-create are read from $W/fds (dump.sh)."""
import json
import os
import socket
import subprocess
import sys

W = os.environ.get("W", "/tmp/cx")
CRIU = os.environ.get("CRIU", "/tmp/criu-src/criu-4.1.1/criu/criu")

fds = [line.split() for line in open(os.path.join(W, "fds"))]
pids = sorted({int(f[0]) for f in fds})
init, python = pids[0], pids[-1]
args, keep, ours = [], [], {}
for pid, fd, link, flags in fds:
    pid = int(pid)
    if link.startswith("socket:"):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        theirs = b.detach()
        ours[link] = a
    elif pid == python and fd in ("3", "4"):
        r, w = os.pipe()
        # driver.py: fd 3 is its dup of stdout (replies, write end), fd 4 of stdin (requests)
        writes = int(flags, 8) & os.O_ACCMODE == os.O_WRONLY
        theirs, mine = (w, r) if writes else (r, w)
        ours[link] = mine
    else:
        continue
    os.set_inheritable(theirs, True)
    keep.append(theirs)
    args += ["--inherit-fd", "fd[%d]:%s" % (theirs, link)]

cmd = [CRIU, "restore", "-D", os.path.join(W, "img"), "-v4", "-o", "restore.log",
       "--root", os.path.join(W, "root"), "--restore-detached", "--restore-sibling",
       "--ext-unix-sk", "--external", "mnt[]"] + args + os.environ.get("RESTORE_EXTRA", "").split()
print(" ".join(cmd))
rc = subprocess.call(cmd, pass_fds=keep)
print("restore rc=%d" % rc)
os.system("grep -E 'Error|Warn' %s/img/restore.log | head -20" % W)
if rc != 0:
    sys.exit(1)
for fd in keep:
    os.close(fd)
import time
time.sleep(0.5)
os.system("for c in $(pgrep -P %d); do ps -o pid,ppid,user,stat,comm --forest -s $c; ls -l /proc/$c/task/*/children; done" % os.getpid())
try:
    print("child status:", os.waitpid(-1, os.WNOHANG))
except ChildProcessError as e:
    print("no child:", e)
req = [v for k, v in ours.items() if k.startswith("pipe:")]
fds_by_role = {}
for pid, fd, link, _ in fds:
    if int(pid) == python and fd in ("3", "4"):
        fds_by_role[fd] = ours[link]
body = json.dumps({"id": 1000, "code": "print(x); x + 1"})
os.write(fds_by_role["4"], b"%d\n%s" % (len(body), body.encode()))
data = b""
while b"\n" not in data or len(data) < data.index(b"\n") + 1 + int(data[:data.index(b"\n")]):
    chunk = os.read(fds_by_role["3"], 65536)
    if not chunk:
        break
    data += chunk
print("interpreter replied:", data.decode(errors="replace"))
hold = os.environ.get("HOLD")
if hold:
    # Keep the channels open (closing the init's ends the sandbox) for a look.
    time.sleep(float(hold))
